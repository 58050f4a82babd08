"""``fluid.dygraph``'s learning-rate decays (``NoamDecay``, ``PiecewiseDecay``, ...): Fluid's
path; the classes live in ``parafluid/layers/learning_rate_decay.py``, beneath the layers'
decays that return them in the imperative mode."""

from __future__ import annotations

from ..layers.learning_rate_decay import *  # noqa: F403
from ..layers.learning_rate_decay import __all__  # noqa: F401
