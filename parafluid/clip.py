"""Gradient clipping (set per parameter through ParamAttr, or globally on the optimizer)."""

from __future__ import annotations

from typing import Any

__all__ = ["append_gradient_clip_ops"]


def append_gradient_clip_ops(params_grads: list[tuple[Any, Any]],
                             clip: Any = None) -> list[tuple[Any, Any]]:
    """Return the (param, clipped grad) pairs; unchanged where no clip is configured."""
    if clip is None and all(getattr(p, "gradient_clip_attr", None) is None
                            for p, _ in params_grads):
        return params_grads
    raise NotImplementedError("gradient clipping lands with the clip module")
