"""``fluid.dygraph_grad_clip``: gradient clipping for the imperative mode, passed to
``optimizer.minimize(loss, grad_clip=...)``; each maps ``[(param, grad)]`` to the clipped
pairs with ordinary layers (so it runs at once in the imperative mode).

Example::

    with fluid.dygraph.guard():
        ...
        loss.backward()
        clip = fluid.dygraph_grad_clip.GradClipByGlobalNorm(max_global_norm=1.0)
        opt.minimize(loss, grad_clip=clip)
"""

from __future__ import annotations

from typing import Any

__all__ = ["GradClipByValue", "GradClipByNorm", "GradClipByGlobalNorm"]

Pairs = list[tuple[Any, Any]]


class GradClipBase:
    """``clip(params_grads)`` -> the pairs with clipped gradients (None grads pass)."""

    def __call__(self, para_and_grad: Pairs) -> Pairs:
        return self._clip(list(para_and_grad))

    def _clip(self, para_and_grad: Pairs) -> Pairs:
        raise NotImplementedError


def _number(owner: str, name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{owner}: {name} must be a number, got {type(value).__name__}: "
                        f"{value!r}")
    return float(value)


class GradClipByValue(GradClipBase):
    """Clip every gradient element into ``[min_value, max_value]`` (with ``min_value``
    None: ``[-max_value, max_value]``, as Fluid; with ``max_value`` None:
    ``[-|min_value|, |min_value|]``)."""

    def __init__(self, min_value: float | None, max_value: float | None = None) -> None:
        if min_value is None:
            hi = _number("GradClipByValue", "max_value", max_value)
            if hi <= 0:
                raise ValueError("GradClipByValue: with min_value None, max_value must be "
                                 f"positive (the range is [-max_value, max_value]), got {hi}")
            lo = -hi
        elif max_value is None:
            lo = abs(_number("GradClipByValue", "min_value", min_value))
            lo, hi = -lo, lo
        else:
            lo = _number("GradClipByValue", "min_value", min_value)
            hi = _number("GradClipByValue", "max_value", max_value)
        if lo > hi:
            raise ValueError(f"GradClipByValue: min_value {lo} is larger than max_value {hi}")
        self.min_value, self.max_value = lo, hi

    def __str__(self) -> str:
        return f"ClipByValue, min = {self.min_value:f}, max={self.max_value:f}"

    def _clip(self, para_and_grad: Pairs) -> Pairs:
        from .layers import clip

        return [(p, g if g is None else clip(g, min=self.min_value, max=self.max_value))
                for p, g in para_and_grad]


class GradClipByNorm(GradClipBase):
    """Scale each gradient whose L2 norm exceeds ``clip_norm`` down to that norm."""

    def __init__(self, clip_norm: float) -> None:
        self.clip_norm = _number("GradClipByNorm", "clip_norm", clip_norm)
        if self.clip_norm <= 0:
            raise ValueError(f"GradClipByNorm: clip_norm must be positive, got {clip_norm}")

    def _clip(self, para_and_grad: Pairs) -> Pairs:
        from .layers import clip_by_norm

        return [(p, g if g is None else clip_by_norm(g, max_norm=self.clip_norm))
                for p, g in para_and_grad]


class GradClipByGlobalNorm(GradClipBase):
    """Scale all gradients by ``max_global_norm / max(global_norm, max_global_norm)``,
    ``global_norm`` the L2 norm of all of them together."""

    def __init__(self, max_global_norm: float) -> None:
        self.max_global_norm = _number("GradClipByGlobalNorm", "max_global_norm",
                                       max_global_norm)
        if self.max_global_norm <= 0:
            raise ValueError(f"GradClipByGlobalNorm: max_global_norm must be positive, got "
                             f"{max_global_norm}")

    def _clip(self, para_and_grad: Pairs) -> Pairs:
        from . import layers

        grads = [g for _, g in para_and_grad if g is not None]
        if not grads:
            return para_and_grad
        sums = [layers.reduce_sum(layers.square(g)) for g in grads]
        norm = layers.sqrt(layers.reduce_sum(layers.concat(sums)))
        limit = layers.fill_constant([1], norm.dtype, self.max_global_norm)
        scale = layers.elementwise_div(limit, layers.elementwise_max(norm, limit))
        return [(p, g if g is None else layers.elementwise_mul(g, scale))
                for p, g in para_and_grad]
