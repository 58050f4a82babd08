"""Operator registrations, grouped by family. Importing this package registers every op."""

from . import math, tensor, optimizer  # noqa: F401  (registration side effects)
from . import clip, lr  # noqa: F401  (registration side effects)
from .registry import get_op_def, has_op, register_op, registered_ops

__all__ = ["register_op", "get_op_def", "has_op", "registered_ops"]
