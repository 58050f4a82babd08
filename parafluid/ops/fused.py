"""Fused ops produced by graph passes: ``fused_elemwise_activation``.

``fused_elemwise_activation(X, Y)`` with ``functor_list=[act, "elementwise_add"]`` computes
``IntermediateOut = X + Y`` (Fluid broadcasting along ``axis``) and ``Out = act(IntermediateOut)``
in one op; its gradient reads ``X``, ``Y`` and ``Out`` (the activations here have gradients
in terms of their output) and never materialises the intermediate gradient. The arithmetic
is the same torch calls as ``elementwise_add`` + ``relu``/``sigmoid``/``tanh``, so the fused
program computes bitwise what the unfused one computes.

Example (what ``fuse_elewise_add_act`` writes for ``fc(x, 4, act="relu")``)::

    {IntermediateOut=[fc_0.tmp_1], Out=[fc_0.tmp_2]} = fused_elemwise_activation(
        X=[fc_0.tmp_0], Y=[fc_0.b_0]) {axis=1, functor_list=['relu', 'elementwise_add']}
"""

from __future__ import annotations

from typing import Any

import torch

from .common import axis_view_shape, broadcast_meta, broadcast_y, unbroadcast
from .registry import register_op

__all__ = ["FUSABLE_ACTIVATIONS"]

# activation -> (forward, gradient from (Out, dOut))
FUSABLE_ACTIVATIONS: dict[str, tuple[Any, Any]] = {
    "relu": (torch.relu, lambda o, d: d * (o > 0)),
    "sigmoid": (torch.sigmoid, lambda o, d: d * o * (1 - o)),
    "tanh": (torch.tanh, lambda o, d: d * (1 - o * o)),
}


def _activation(attrs: dict) -> tuple[Any, Any]:
    functors = list(attrs["functor_list"])
    if len(functors) != 2 or functors[1] != "elementwise_add" or \
            functors[0] not in FUSABLE_ACTIVATIONS:
        raise ValueError(f"fused_elemwise_activation: functor_list must be [act, "
                         f"'elementwise_add'] with act in {sorted(FUSABLE_ACTIVATIONS)}, "
                         f"got {functors}")
    return FUSABLE_ACTIVATIONS[functors[0]]


def _shape(ins: dict, attrs: dict) -> dict:
    _activation(attrs)
    meta = broadcast_meta(ins["X"], ins["Y"], attrs["axis"])
    return {"Out": meta, "IntermediateOut": meta}


def _kernel(ins: dict, attrs: dict, ctx: Any) -> dict:
    act, _ = _activation(attrs)
    x = ins["X"]
    inter = torch.add(x, broadcast_y(x, ins["Y"], attrs["axis"]))
    return {"Out": act(inter), "IntermediateOut": inter}


def _grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    _, act_grad = _activation(attrs)
    x, y, out, dout = ins["X"], ins["Y"], ins["Out"], ins["Out@GRAD"]
    d_inter = act_grad(out, dout) if dout is not None else torch.zeros_like(out)
    if ins.get("IntermediateOut@GRAD") is not None:
        d_inter = d_inter + ins["IntermediateOut@GRAD"]
    grads = {}
    if "X" in ctx.need:
        grads["X@GRAD"] = unbroadcast(d_inter, x.shape)
    if "Y" in ctx.need:
        if x.dim() != y.dim():
            view = axis_view_shape(x.shape, y.shape, attrs["axis"])
            grads["Y@GRAD"] = unbroadcast(d_inter, view).reshape(y.shape)
        else:
            grads["Y@GRAD"] = unbroadcast(d_inter, y.shape)
    return grads


register_op("fused_elemwise_activation", inputs=("X", "Y"), outputs=("Out", "IntermediateOut"),
            attrs={"functor_list": ["relu", "elementwise_add"], "axis": -1, "scale": 0.0,
                   "save_intermediate_out": True},
            infer_shape=_shape, kernel=_kernel, grad_kernel=_grad,
            grad_uses=("X", "Y", "Out"))
