"""``fluid.layers.distributions``: Fluid 1.6's ``Uniform`` and ``Normal``, built from
ordinary layers (random ops, ``log``, elementwise arithmetic), so their samples and
densities are variables of the program like any other.

Parameters are floats, lists, numpy arrays or Variables; their broadcast shape is the
*batch shape*. ``sample(shape)`` has shape ``shape + batch_shape``.

Example::

    from parafluid.layers.distributions import Normal
    a = Normal(loc=0.0, scale=1.0)
    b = Normal(loc=[1.0, 2.0], scale=[0.5, 2.0])
    kl = a.kl_divergence(b)            # [2]
    x = b.sample([4], seed=1)          # [4, 2]
    lp = b.log_prob(x)                 # [4, 2]
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..framework import Variable
from .ops import log
from .tensor import assign, cast, fill_constant, gaussian_random, uniform_random

__all__ = ["Uniform", "Normal"]


class Distribution:
    """The interface of Fluid's distributions; each method returns a Variable."""

    def sample(self, shape: list[int], seed: int = 0) -> Variable:
        raise NotImplementedError(f"{type(self).__name__}.sample is not defined")

    def entropy(self) -> Variable:
        raise NotImplementedError(f"{type(self).__name__}.entropy is not defined")

    def kl_divergence(self, other: Distribution) -> Variable:
        raise NotImplementedError(f"{type(self).__name__}.kl_divergence is not defined "
                                  "(as in Fluid)")

    def log_prob(self, value: Variable) -> Variable:
        raise NotImplementedError(f"{type(self).__name__}.log_prob is not defined")

    @staticmethod
    def _to_variable(name: str, *args: Any) -> tuple[list[Variable], list[int]]:
        """The parameters as float32 Variables (numbers become constants) and their batch
        shape."""
        out, shapes = [], []
        for arg in args:
            if isinstance(arg, Variable):
                shape = list(arg.shape or ())
                if any(d is None or d < 0 for d in shape):
                    raise ValueError(f"{name}: parameter {arg.name!r} has an unknown dimension "
                                     f"in shape {shape}; give fully known shapes")
                out.append(arg)
            else:
                arr = np.asarray(arg, dtype="float32")
                if not np.all(np.isfinite(arr)):
                    raise ValueError(f"{name}: parameters must be finite, got {arg!r}")
                arr = arr.reshape(-1) if arr.ndim else arr.reshape(1)
                out.append(assign(arr))
                shape = list(arr.shape)
            shapes.append(shape)
        batch = list(np.broadcast_shapes(*[tuple(s) for s in shapes]))
        return out, batch


def _zeros(shape: list[int]) -> Variable:
    return fill_constant(shape=list(shape), dtype="float32", value=0.0)


class Uniform(Distribution):
    """The uniform distribution on ``[low, high)``.

    Example::

        u = fluid.layers.distributions.Uniform(low=0.0, high=[1.0, 2.0])
        ent = u.entropy()   # log(high - low)
    """

    def __init__(self, low: Any, high: Any) -> None:
        (self.low, self.high), self.batch_shape = self._to_variable("Uniform", low, high)

    def sample(self, shape: list[int], seed: int = 0) -> Variable:
        """Samples of shape ``shape + batch_shape``."""
        out_shape = list(shape) + self.batch_shape
        unit = uniform_random(out_shape, dtype="float32", min=0.0, max=1.0, seed=seed)
        return unit * (_zeros(out_shape) + (self.high - self.low)) + self.low

    def log_prob(self, value: Variable) -> Variable:
        """``log(1 / (high - low))`` inside ``(low, high)``, ``-inf`` outside."""
        low = value * 0.0 + self.low
        high = value * 0.0 + self.high
        inside = cast(low < value, "float32") * cast(value < high, "float32")
        return log(inside) - log(self.high - self.low)

    def entropy(self) -> Variable:
        """``log(high - low)``."""
        return log(_zeros(self.batch_shape) + (self.high - self.low))


class Normal(Distribution):
    """The normal distribution with mean ``loc`` and standard deviation ``scale``.

    Example::

        n = fluid.layers.distributions.Normal(loc=0.0, scale=2.0)
        ent = n.entropy()   # 0.5 + 0.5 * log(2 pi) + log(2)
    """

    def __init__(self, loc: Any, scale: Any) -> None:
        (self.loc, self.scale), self.batch_shape = self._to_variable("Normal", loc, scale)

    def sample(self, shape: list[int], seed: int = 0) -> Variable:
        """Samples of shape ``shape + batch_shape``."""
        out_shape = list(shape) + self.batch_shape
        unit = gaussian_random(out_shape, mean=0.0, std=1.0, seed=seed, dtype="float32")
        return unit * (_zeros(out_shape) + self.scale) + self.loc

    def entropy(self) -> Variable:
        """``0.5 + 0.5 * log(2 pi) + log(scale)``."""
        return 0.5 + 0.5 * math.log(2 * math.pi) + log(_zeros(self.batch_shape) + self.scale)

    def log_prob(self, value: Variable) -> Variable:
        """``-(value - loc)^2 / (2 scale^2) - log(scale) - log(sqrt(2 pi))``."""
        var = self.scale * self.scale
        diff = value - self.loc
        return (-1.0 * (diff * diff)) / (2.0 * var) - log(self.scale) - \
            math.log(math.sqrt(2.0 * math.pi))

    def kl_divergence(self, other: Distribution) -> Variable:
        """``KL(self || other)`` for another ``Normal``."""
        if not isinstance(other, Normal):
            raise TypeError(f"Normal.kl_divergence: other must be a Normal, got "
                            f"{type(other).__name__}")
        ratio = self.scale / other.scale
        ratio = ratio * ratio
        t1 = (self.loc - other.loc) / other.scale
        t1 = t1 * t1
        return 0.5 * (ratio + t1 - 1.0 - log(ratio))
