"""``fluid.layers.distributions``: Fluid 1.6's ``Uniform``, ``Normal``, ``Categorical`` and
``MultivariateNormalDiag``, built from
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
from .random import gaussian_random_batch_size_like, uniform_random_batch_size_like
from .tensor import (
    assign,
    cast,
    fill_constant,
    fill_constant_batch_size_like,
    gaussian_random,
    reshape,
    uniform_random,
)

__all__ = ["Uniform", "Normal", "Categorical", "MultivariateNormalDiag"]


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
        arrays = {}
        for i, arg in enumerate(args):
            if not isinstance(arg, Variable):
                arr = np.asarray(arg, dtype="float32")
                if not np.all(np.isfinite(arr)):
                    raise ValueError(f"{name}: parameters must be finite, got {arg!r}")
                arrays[i] = arr if arr.ndim else arr.reshape(1)
        if arrays:
            # NOTE: as Fluid's, numbers and arrays are broadcast to their common shape first
            try:
                common = np.broadcast_shapes(*[a.shape for a in arrays.values()])
            except ValueError:
                raise ValueError(f"{name}: the parameters' shapes "
                                 f"{[list(a.shape) for a in arrays.values()]} do not "
                                 "broadcast") from None
            arrays = {i: np.ascontiguousarray(np.broadcast_to(a, common))
                      for i, a in arrays.items()}
        out, shapes = [], []
        for i, arg in enumerate(args):
            if i in arrays:
                out.append(assign(arrays[i]))
                shapes.append(list(arrays[i].shape))
            else:
                out.append(arg)
                shapes.append([-1 if d is None or d < 0 else int(d) for d in (arg.shape or ())])
        return out, _broadcast(name, shapes)


def _broadcast(name: str, shapes: list[list[int]]) -> list[int]:
    """The broadcast of the parameters' shapes, -1 (known at run time: the batch) kept."""
    rank = max((len(s) for s in shapes), default=0)
    out = [1] * rank
    for shape in shapes:
        for i, d in enumerate([1] * (rank - len(shape)) + list(shape)):
            if d == 1 or d == out[i]:
                continue
            if out[i] == 1 or -1 in (d, out[i]):
                out[i] = -1 if -1 in (d, out[i]) else d
                continue
            raise ValueError(f"{name}: the parameters' shapes {shapes} do not broadcast")
    return out


def _zeros(shape: list[int], like: Variable) -> Variable:
    """Zeros of ``shape``; a -1 there (the batch) taken from ``like`` at run time."""
    if -1 in shape:
        return fill_constant_batch_size_like(like, list(shape), "float32", 0.0)
    return fill_constant(shape=list(shape), dtype="float32", value=0.0)


class Uniform(Distribution):
    """The uniform distribution on ``[low, high)``.

    Example::

        u = fluid.layers.distributions.Uniform(low=0.0, high=[1.0, 2.0])
        ent = u.entropy()   # log(high - low)
    """

    def __init__(self, low: Any, high: Any) -> None:
        (self.low, self.high), self.batch_shape = self._to_variable("Uniform", low, high)
        # as Fluid's: samples of two plain floats have the sample shape alone
        self._all_float = isinstance(low, float) and isinstance(high, float)

    def sample(self, shape: list[int], seed: int = 0) -> Variable:
        """Samples of shape ``shape + batch_shape``."""
        shape, batch = list(shape), self.batch_shape
        if -1 in batch:
            # NOTE: as Fluid's: noise of batch_shape + shape, the batch size taken from the
            # parameters at run time, reshaped to shape + batch_shape
            zeros = _zeros(batch + shape, self.low + self.high)
            unit = uniform_random_batch_size_like(zeros, batch + shape, min=0.0, max=1.0,
                                                  seed=seed)
            return reshape(unit * (zeros + self.high - self.low) + self.low, shape + batch)
        unit = uniform_random(shape + batch, dtype="float32", min=0.0, max=1.0, seed=seed)
        out = unit * (_zeros(shape + batch, self.low) + (self.high - self.low)) + self.low
        return reshape(out, shape) if self._all_float else out

    def log_prob(self, value: Variable) -> Variable:
        """``log(1 / (high - low))`` inside ``(low, high)``, ``-inf`` outside."""
        low = value * 0.0 + self.low
        high = value * 0.0 + self.high
        inside = cast(low < value, "float32") * cast(value < high, "float32")
        return log(inside) - log(self.high - self.low)

    def entropy(self) -> Variable:
        """``log(high - low)``."""
        return log(_zeros(self.batch_shape, self.low + self.high) + (self.high - self.low))


class Normal(Distribution):
    """The normal distribution with mean ``loc`` and standard deviation ``scale``.

    Example::

        n = fluid.layers.distributions.Normal(loc=0.0, scale=2.0)
        ent = n.entropy()   # 0.5 + 0.5 * log(2 pi) + log(2)
    """

    def __init__(self, loc: Any, scale: Any) -> None:
        (self.loc, self.scale), self.batch_shape = self._to_variable("Normal", loc, scale)
        self._all_float = isinstance(loc, float) and isinstance(scale, float)

    def sample(self, shape: list[int], seed: int = 0) -> Variable:
        """Samples of shape ``shape + batch_shape``."""
        shape, batch = list(shape), self.batch_shape
        if -1 in batch:  # as Uniform.sample
            zeros = _zeros(batch + shape, self.loc + self.scale)
            unit = gaussian_random_batch_size_like(zeros, batch + shape, mean=0.0, std=1.0,
                                                   seed=seed)
            return reshape(unit * (zeros + self.scale) + self.loc, shape + batch)
        unit = gaussian_random(shape + batch, mean=0.0, std=1.0, seed=seed, dtype="float32")
        out = unit * (_zeros(shape + batch, self.loc) + self.scale) + self.loc
        return reshape(out, shape) if self._all_float else out

    def entropy(self) -> Variable:
        """``0.5 + 0.5 * log(2 pi) + log(scale)``."""
        return 0.5 + 0.5 * math.log(2 * math.pi) + log(_zeros(self.batch_shape,
                                                             self.loc + self.scale)
                                                       + self.scale)

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


def _as_variables(name: str, *args: Any) -> list[Variable]:
    # Fluid takes all Variables (of any shape, batch included) or all lists / arrays
    if all(isinstance(a, Variable) for a in args):
        return list(args)
    if any(isinstance(a, Variable) for a in args):
        raise TypeError(f"{name}: the parameters must all be Variables or all be lists / "
                        f"numpy arrays, got {[type(a).__name__ for a in args]}")
    return [assign(np.asarray(a, dtype="float32")) for a in args]


class Categorical(Distribution):
    """The categorical distribution over the last axis of ``logits`` (unnormalised log
    probabilities).

    Example::

        a = fluid.layers.Categorical(np.array([-0.602, -0.602], "float32"))
        b = fluid.layers.Categorical(np.array([-0.102, -0.112], "float32"))
        a.entropy(), a.kl_divergence(b)   # [1] each
    """

    def __init__(self, logits: Any) -> None:
        (self.logits,) = _as_variables("Categorical", logits)

    def _normalised(self, logits: Variable) -> tuple[Variable, Variable, Variable]:
        from . import ops, tensor

        # NOTE: subtracting the max keeps exp finite, as Fluid's formula does
        shifted = logits - tensor.reduce_max(logits, dim=-1, keep_dim=True)
        e = ops.exp(shifted)
        z = tensor.reduce_sum(e, dim=-1, keep_dim=True)
        return shifted, z, e / z

    def entropy(self) -> Variable:
        """``-sum(p * log p)`` over the last axis (keeps it, size 1)."""
        from . import tensor

        logits, z, prob = self._normalised(self.logits)
        return -1.0 * tensor.reduce_sum(prob * (logits - log(z)), dim=-1, keep_dim=True)

    def kl_divergence(self, other: Distribution) -> Variable:
        """``sum(p * (log p - log q))`` over the last axis, for another ``Categorical``."""
        from . import tensor

        if not isinstance(other, Categorical):
            raise TypeError(f"Categorical.kl_divergence: other must be a Categorical, got "
                            f"{type(other).__name__}")
        logits, z, prob = self._normalised(self.logits)
        other_logits, other_z, _ = self._normalised(other.logits)
        return tensor.reduce_sum(prob * (logits - log(z) - other_logits + log(other_z)),
                                 dim=-1, keep_dim=True)


class MultivariateNormalDiag(Distribution):
    """A multivariate normal with mean ``loc`` (``[k]``) and diagonal covariance matrix
    ``scale`` (``[k, k]``, zero off the diagonal), as Fluid defines it (``scale`` is the
    covariance itself: the entropy is ``0.5 * (k * (1 + log 2 pi) + log det scale)``).

    Example::

        a = fluid.layers.MultivariateNormalDiag(np.array([0.3, 0.5], "float32"),
                                                np.array([[0.4, 0], [0, 0.5]], "float32"))
        a.entropy()
    """

    def __init__(self, loc: Any, scale: Any) -> None:
        self.loc, self.scale = _as_variables("MultivariateNormalDiag", loc, scale)

    def _off_diagonal_ones(self, value: Variable) -> tuple[Variable, Variable]:
        from . import creation, tensor

        shape = list(value.shape)
        return (tensor.ones(shape=shape, dtype=self.loc.dtype),
                creation.diag(tensor.ones(shape=[shape[0]], dtype=self.loc.dtype)))

    def _det(self, value: Variable) -> Variable:
        from . import tensor

        one_all, one_diag = self._off_diagonal_ones(value)
        return tensor.reduce_prod(value + one_all - one_diag)

    def _inv(self, value: Variable) -> Variable:
        from . import nn

        one_all, one_diag = self._off_diagonal_ones(value)
        # the diagonal to the power -1, everything else to the power 1 (it is zero)
        return nn.elementwise_pow(value, one_all - 2.0 * one_diag)

    def entropy(self) -> Variable:
        """``0.5 * (k * (1 + log 2 pi) + log det scale)``, shape ``[1]``."""
        k = self.scale.shape[0]
        return 0.5 * (log(self._det(self.scale)) + k * (1.0 + math.log(2 * math.pi)))

    def kl_divergence(self, other: Distribution) -> Variable:
        """``KL(self || other)`` for another ``MultivariateNormalDiag``, shape ``[1]``."""
        from . import nn, tensor

        if not isinstance(other, MultivariateNormalDiag):
            raise TypeError("MultivariateNormalDiag.kl_divergence: other must be a "
                            f"MultivariateNormalDiag, got {type(other).__name__}")
        inv_other = self._inv(other.scale)
        trace = tensor.reduce_sum(inv_other * self.scale)
        diff = other.loc - self.loc
        quad = nn.matmul(nn.matmul(diff, inv_other), diff)
        k = self.scale.shape[0]
        ln_cov = log(self._det(other.scale)) - log(self._det(self.scale))
        return 0.5 * (trace + quad - float(k) + ln_cov)
