"""Fused ops produced by graph passes: ``fused_elemwise_activation``.

``fused_elemwise_activation(X, Y)`` with ``functor_list=[act, "elementwise_add"]`` computes
``IntermediateOut = X + Y`` (Fluid broadcasting along ``axis``) and ``Out = act(IntermediateOut)``
in one op; its gradient reads ``X``, ``Y`` and ``Out`` (the activations here have gradients
in terms of their output) and never materialises the intermediate gradient. The activation
and its gradient are the registered ``relu``/``sigmoid``/``tanh`` kernels themselves, so the
fused program computes bitwise what the unfused one computes.

Example (what ``fuse_elewise_add_act`` writes for ``fc(x, 4, act="relu")``)::

    {IntermediateOut=[fc_0.tmp_1], Out=[fc_0.tmp_2]} = fused_elemwise_activation(
        X=[fc_0.tmp_0], Y=[fc_0.b_0]) {axis=1, functor_list=['relu', 'elementwise_add']}
"""

from __future__ import annotations

from typing import Any

import torch

from .common import axis_view_shape, broadcast_meta, broadcast_y, unbroadcast
from .registry import get_op_def, register_op

__all__ = ["FUSABLE_ACTIVATIONS"]

# The activations Fluid's fuse_elewise_add_act fuses with an add; each one's gradient reads
# only its output, so the fused gradient needs no intermediate.
FUSABLE_ACTIVATIONS = frozenset({"relu", "sigmoid", "tanh"})


def _activation(attrs: dict) -> tuple[Any, Any]:
    """The activation's registered ``(kernel, gradient kernel)``."""
    functors = list(attrs["functor_list"])
    if len(functors) != 2 or functors[1] != "elementwise_add" or \
            functors[0] not in FUSABLE_ACTIVATIONS:
        raise ValueError(f"fused_elemwise_activation: functor_list must be [act, "
                         f"'elementwise_add'] with act in {sorted(FUSABLE_ACTIVATIONS)}, "
                         f"got {functors}")
    act = functors[0]
    return get_op_def(act).kernel, get_op_def(act + "_grad").kernel


def _shape(ins: dict, attrs: dict) -> dict:
    _activation(attrs)
    meta = broadcast_meta(ins["X"], ins["Y"], attrs["axis"])
    return {"Out": meta, "IntermediateOut": meta}


def _kernel(ins: dict, attrs: dict, ctx: Any) -> dict:
    act, _ = _activation(attrs)
    x = ins["X"]
    inter = torch.add(x, broadcast_y(x, ins["Y"], attrs["axis"]))
    return {"Out": act({"X": inter}, attrs, ctx)["Out"], "IntermediateOut": inter}


def _grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    _, act_grad = _activation(attrs)
    x, y, out, dout = ins["X"], ins["Y"], ins["Out"], ins["Out@GRAD"]
    d_inter = act_grad({"Out": out, "Out@GRAD": dout}, attrs, ctx)["X@GRAD"] \
        if dout is not None else torch.zeros_like(out)
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
            grad_uses=("X", "Y", "Out"), share_lod=("X", "Out"), fresh_output=True)
