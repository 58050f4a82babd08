"""The random numbers Fluid's CPU kernels draw with a fixed seed, reproduced.

Fluid's ``uniform_random``, ``gaussian_random``, ``truncated_gaussian_random`` (and their
``*_batch_size_like`` forms) seed a fresh C++ ``std::minstd_rand`` with the op's ``seed``
on every run and draw through the standard library's distributions (libstdc++, the
library Fluid 1.6 is built with). So a seeded op gives the same values on every run, and
a Fluid program's seeded initializers give the same weights here as in Fluid.

- ``std::minstd_rand``: ``x <- 48271 x mod (2**31 - 1)``; a seed ``s`` starts at
  ``s mod m`` (1 if that is 0); the first draw is the first step's result.
- ``std::generate_canonical<float, 24>``: one draw, ``float(x - 1) / float(m - 1)``
  (the divisor rounds to ``2**31`` in float), a result of 1 becomes the float below 1;
  for double, two draws: ``((x1 - 1) + (x2 - 1) r) / r**2`` with ``r = m - 1``.
- ``std::uniform_real_distribution``: ``u (b - a) + a`` in the value's type.
- ``std::normal_distribution``: Marsaglia's polar method, ``x, y = 2u - 1`` from two
  draws, pairs with ``r2 = x**2 + y**2`` outside ``(0, 1]`` rejected; each accepted pair
  gives ``y m`` then ``x m`` with ``m = sqrt(-2 log(r2) / r2)``.

The draws are vectorised: the engine's n-th state is ``x0 * 48271**n mod m``, computed in
blocks from a table of powers (int64 products stay below 2**62).
"""

from __future__ import annotations

import math

import numpy as np
import torch

__all__ = ["MinstdRand", "uniform", "normal", "truncated_normal"]

_A = 48271
_M = 2**31 - 1
_BLOCK = 8192
_POWERS: np.ndarray | None = None  # 48271**k mod m for k = 1 .. _BLOCK


def _powers() -> np.ndarray:
    global _POWERS
    if _POWERS is None:
        table = np.empty(_BLOCK, dtype=np.int64)
        p = 1
        for k in range(_BLOCK):
            p = p * _A % _M
            table[k] = p
        _POWERS = table
    return _POWERS


class MinstdRand:
    """``std::minstd_rand`` seeded with ``seed`` (a C++ ``unsigned int``)."""

    def __init__(self, seed: int) -> None:
        state = (int(seed) % 2**32) % _M
        self.state = state if state else 1

    def draw(self, n: int) -> np.ndarray:
        """The next ``n`` outputs, as int64."""
        pw = _powers()
        out = np.empty(n, dtype=np.int64)
        state = self.state
        for start in range(0, n, _BLOCK):
            size = min(_BLOCK, n - start)
            out[start:start + size] = state * pw[:size] % _M
            state = int(out[start + size - 1])
        self.state = state
        return out


def _canonical(engine: MinstdRand, n: int, dtype: np.dtype) -> np.ndarray:
    """``std::generate_canonical<T, digits(T)>`` ``n`` times: values in [0, 1)."""
    if dtype == np.float32:
        u = (engine.draw(n) - 1).astype(np.float32) / np.float32(2.0**31)
        below_one = np.nextafter(np.float32(1.0), np.float32(0.0))
    else:
        pairs = (engine.draw(2 * n) - 1).reshape(n, 2).astype(np.float64)
        r = np.float64(_M - 1)
        u = (pairs[:, 0] + pairs[:, 1] * r) / np.float64(float((_M - 1) ** 2))
        below_one = np.nextafter(1.0, 0.0)
    u[u >= 1] = below_one
    return u


def uniform(seed: int, n: int, low: float, high: float, dtype: str) -> np.ndarray:
    """``std::uniform_real_distribution<T>(low, high)`` over a fresh engine."""
    t = np.dtype(dtype)
    u = _canonical(MinstdRand(seed), n, t)
    return u * (t.type(high) - t.type(low)) + t.type(low)


def normal(seed: int, n: int, mean: float, std: float, dtype: str) -> np.ndarray:
    """``std::normal_distribution<T>(mean, std)`` over a fresh engine."""
    t = np.dtype(dtype)
    engine = MinstdRand(seed)
    pairs = (n + 1) // 2
    got: list[np.ndarray] = []
    have = 0
    while have < pairs:
        want = pairs - have
        # about 21.5% of pairs fall outside the unit disc: draw a little more than needed
        u = _canonical(engine, 2 * (want + want // 4 + 16), t).reshape(-1, 2)
        x = (t.type(2.0) * u[:, 0]).astype(np.float64) - 1.0
        y = (t.type(2.0) * u[:, 1]).astype(np.float64) - 1.0
        x, y = x.astype(t), y.astype(t)
        r2 = x * x + y * y
        ok = (r2 <= 1.0) & (r2 != 0.0)
        idx = np.flatnonzero(ok)[:want]
        with np.errstate(divide="ignore", invalid="ignore"):
            r2k = r2[idx]
            # log rounded from double: libm's logf is within an ulp of that (about 1 value
            # in 600 then differs from Fluid's by an ulp of the result)
            mult = np.sqrt(t.type(-2) * np.log(r2k.astype(np.float64)).astype(t) / r2k)
        got.append(np.stack([y[idx] * mult, x[idx] * mult], axis=1).reshape(-1))
        have += len(idx)
    values = np.concatenate(got)[:n]
    return values * t.type(std) + t.type(mean)


def truncated_normal(seed: int, n: int, mean: float, std: float, dtype: str) -> np.ndarray:
    """Fluid's truncated normal: ``u ~ U(FLT_MIN, 1)`` mapped through the inverse CDF of
    the standard normal restricted to [-2, 2], times ``std`` plus ``mean``."""
    t = np.dtype(dtype)
    u = _canonical(MinstdRand(seed), n, t)
    lo = t.type(np.finfo(np.float32).tiny)
    u = u * (t.type(1.0) - lo) + lo
    a_cdf = (1.0 + math.erf(-2.0 / math.sqrt(2.0))) / 2.0
    b_cdf = (1.0 + math.erf(2.0 / math.sqrt(2.0))) / 2.0
    p = t.type(a_cdf) + t.type(b_cdf - a_cdf) * u
    z = torch.erfinv(torch.from_numpy(np.asarray(2 * p - 1, dtype=t))).numpy()  # numpy has none
    return (t.type(math.sqrt(2.0)) * z * t.type(std) + t.type(mean)).astype(t)
