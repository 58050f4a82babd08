"""Comparison, logical and finiteness ops: elementwise, bool outputs, no gradients.

``less_than``, ``less_equal``, ``greater_than``, ``greater_equal``, ``equal``, ``not_equal``
read ``X`` and ``Y`` (Fluid's ``axis`` broadcasting); ``logical_and/or/xor`` read two bool
tensors, ``logical_not`` one. ``isfinite`` / ``isinf`` / ``isnan`` reduce a whole tensor
to one bool (``layers.isfinite``, ``has_inf``, ``has_nan``).
"""

from __future__ import annotations

from typing import Any

import torch

from .common import broadcast_meta, broadcast_y
from .registry import Meta, register_op

__all__: list[str] = []

_COMPARE = {"less_than": torch.lt, "less_equal": torch.le, "greater_than": torch.gt,
            "greater_equal": torch.ge, "equal": torch.eq, "not_equal": torch.ne}


def _compare_shape(ins: dict, attrs: dict) -> dict:
    out = broadcast_meta(ins["X"], ins["Y"], attrs["axis"])
    return {"Out": Meta(out.shape, "bool")}


def _register_compare(name: str, fn: Any) -> None:
    def kernel(ins: dict, attrs: dict, ctx: Any) -> dict:
        x, y = ins["X"], ins["Y"]
        return {"Out": fn(x, broadcast_y(x, y, attrs["axis"]))}

    register_op(name, inputs=("X", "Y"), outputs=("Out",),
                # force_cpu: where Fluid keeps the bool result (its default: on the host); a
                # placement hint that changes no value
                attrs={"axis": -1, "force_cpu": True}, infer_shape=_compare_shape,
                kernel=kernel)


for _name, _fn in _COMPARE.items():
    _register_compare(_name, _fn)


def _logical_shape(ins: dict, attrs: dict) -> dict:
    x, y = ins["X"], ins.get("Y")
    for slot, meta in (("X", x), ("Y", y)):
        if meta is not None and meta.dtype != "bool":
            raise TypeError(f"logical op: {slot} must be bool, got {meta.dtype} (compare first, "
                            "or cast)")
    out = x if y is None else broadcast_meta(x, y, -1)
    return {"Out": Meta(out.shape, "bool")}


for _name, _fn in (("logical_and", torch.logical_and), ("logical_or", torch.logical_or),
                   ("logical_xor", torch.logical_xor)):
    register_op(_name, inputs=("X", "Y"), outputs=("Out",), infer_shape=_logical_shape,
                kernel=lambda ins, attrs, ctx, fn=_fn: {"Out": fn(ins["X"], ins["Y"])})

register_op("logical_not", inputs=("X",), outputs=("Out",), infer_shape=_logical_shape,
            kernel=lambda ins, attrs, ctx: {"Out": torch.logical_not(ins["X"])})


# ----------------------------------------------------------------------------- checks


def _check(name: str, fn: Any) -> None:
    register_op(name, inputs=("X",), outputs=("Out",),
                infer_shape=lambda ins, attrs: {"Out": Meta((1,), "bool")},
                kernel=lambda ins, attrs, ctx: {"Out": fn(ins["X"]).reshape(1)})


_check("isfinite", lambda x: torch.isfinite(x).all())   # every element finite
_check("isinf", lambda x: torch.isinf(x).any())          # some element is +-inf
_check("isnan", lambda x: torch.isnan(x).any())          # some element is NaN
