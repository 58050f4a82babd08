"""``fluid.contrib.mixed_precision``: float16 training with loss scaling."""

from __future__ import annotations

from . import decorator, fp16_lists, fp16_utils
from .decorator import decorate
from .fp16_lists import AutoMixedPrecisionLists

__all__ = ["decorate", "AutoMixedPrecisionLists", "decorator", "fp16_lists", "fp16_utils"]
