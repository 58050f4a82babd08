"""``fluid.average``: a host-side weighted average over minibatch results (numpy).

Fluid 1.6 keeps this class for old scripts and warns that ``fluid.metrics.Accuracy`` replaces
it; so does parafluid.

Example::

    avg = fluid.average.WeightedAverage()
    avg.add(value=2.0, weight=1)
    avg.add(value=4.0, weight=2)
    avg.eval()   # 3.333...
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

__all__ = ["WeightedAverage"]


def _is_number(v: Any) -> bool:
    return (isinstance(v, (int, float)) and not isinstance(v, bool)) or \
        (isinstance(v, np.ndarray) and v.shape == (1,))


class WeightedAverage:
    """Sum of ``value * weight`` over the sum of ``weight`` of everything ``add``-ed."""

    def __init__(self) -> None:
        warnings.warn(f"The {type(self).__name__} is deprecated, please use "
                      "fluid.metrics.Accuracy instead.", Warning, stacklevel=2)
        self.reset()

    def reset(self) -> None:
        """Forget everything added."""
        self.numerator: Any = None
        self.denominator: Any = None

    def add(self, value: Any, weight: Any) -> None:
        """Add ``value`` (a number or numpy array) with ``weight`` (a number)."""
        if not (_is_number(value) or isinstance(value, np.ndarray)):
            raise ValueError("The 'value' must be a number(int, float) or a numpy ndarray.")
        if not _is_number(weight):
            raise ValueError("The 'weight' must be a number(int, float).")
        if self.numerator is None or self.denominator is None:
            self.numerator = value * weight
            self.denominator = weight
        else:
            self.numerator += value * weight
            self.denominator += weight

    def eval(self) -> Any:
        """The weighted average so far; ValueError before anything was added."""
        if self.numerator is None or self.denominator is None:
            raise ValueError("There is no data to be averaged in WeightedAverage.")
        return self.numerator / self.denominator
