"""Fused ops: ``fused_elemwise_activation``, a binary and a unary functor in one op.

``functor_list`` names two functors, Fluid's compound pairs:

- unary compound ``[unary, binary]``: ``IntermediateOut = binary(X, Y)``,
  ``Out = unary(IntermediateOut)`` (``IntermediateOut`` has ``X``'s shape);
- binary compound ``[binary, unary]``: ``IntermediateOut = unary(Y)``,
  ``Out = binary(X, IntermediateOut)`` (``IntermediateOut`` has ``Y``'s shape).

Binary functors: ``elementwise_add``, ``elementwise_mul`` (``Y`` broadcast along ``axis`` as in
the elementwise ops). Unary functors: ``relu``, ``sigmoid``, ``tanh`` and ``scale`` (times
the ``scale`` attribute). Every unary functor's derivative is written in terms of its output,
so the gradient reads ``X``, ``Y``, ``Out`` and (for a binary compound, when given)
``IntermediateOut``. ``relu``/``sigmoid``/``tanh`` run as their registered kernels, so the
``[act, "elementwise_add"]`` form that ``fuse_elewise_add_act`` writes computes bitwise what
the unfused ops compute.

Example (what ``fuse_elewise_add_act`` writes for ``fc(x, 4, act="relu")``)::

    {IntermediateOut=[fc_0.tmp_1], Out=[fc_0.tmp_2]} = fused_elemwise_activation(
        X=[fc_0.tmp_0], Y=[fc_0.b_0]) {axis=1, functor_list=['relu', 'elementwise_add']}
"""

from __future__ import annotations

from typing import Any

import torch

from .common import axis_view_shape, broadcast_meta, broadcast_y, unbroadcast
from .registry import get_op_def, register_op

__all__ = ["FUSABLE_ACTIVATIONS", "UNARY_FUNCTORS", "BINARY_FUNCTORS"]

# The activations Fluid's fuse_elewise_add_act fuses with an add; each one's gradient reads
# only its output, so the fused gradient needs no intermediate.
FUSABLE_ACTIVATIONS = frozenset({"relu", "sigmoid", "tanh"})
UNARY_FUNCTORS = FUSABLE_ACTIVATIONS | {"scale"}
BINARY_FUNCTORS = frozenset({"elementwise_add", "elementwise_mul"})


def _functors(attrs: dict) -> tuple[str, str, bool]:
    """``(unary, binary, unary_compound)`` of ``functor_list``, checked."""
    functors = list(attrs["functor_list"])
    if len(functors) == 2:
        if functors[0] in UNARY_FUNCTORS and functors[1] in BINARY_FUNCTORS:
            return functors[0], functors[1], True
        if functors[0] in BINARY_FUNCTORS and functors[1] in UNARY_FUNCTORS:
            return functors[1], functors[0], False
    raise ValueError(f"fused_elemwise_activation: functor_list must be [unary, binary] or "
                     f"[binary, unary] with unary in {sorted(UNARY_FUNCTORS)} and binary in "
                     f"{sorted(BINARY_FUNCTORS)}, got {functors}")


def _unary(name: str, x: torch.Tensor, attrs: dict, ctx: Any) -> torch.Tensor:
    if name == "scale":
        return x * attrs["scale"]
    return get_op_def(name).kernel({"X": x}, attrs, ctx)["Out"]


def _unary_grad(name: str, out: torch.Tensor, dout: torch.Tensor, attrs: dict,
                ctx: Any) -> torch.Tensor:
    """``dout * unary'(x)`` written with the unary's output ``out``."""
    if name == "scale":
        return dout * attrs["scale"]
    return get_op_def(name + "_grad").kernel({"Out": out, "Out@GRAD": dout}, attrs,
                                             ctx)["X@GRAD"]


def _binary(name: str, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.add(x, y) if name == "elementwise_add" else torch.mul(x, y)


def _binary_grads(name: str, d: torch.Tensor, a: torch.Tensor, b: torch.Tensor
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """The gradients of ``binary(a, b)`` (``b`` already broadcast) given its gradient ``d``,
    before reduction to the operands' shapes."""
    return (d, d) if name == "elementwise_add" else (d * b, d * a)


def _reduce_to_y(g: torch.Tensor, x: torch.Tensor, y: torch.Tensor, axis: int) -> torch.Tensor:
    if x.dim() != y.dim():
        return unbroadcast(g, axis_view_shape(x.shape, y.shape, axis)).reshape(y.shape)
    return unbroadcast(g, y.shape)


def _shape(ins: dict, attrs: dict) -> dict:
    _, _, unary_first = _functors(attrs)
    meta = broadcast_meta(ins["X"], ins["Y"], attrs["axis"])
    return {"Out": meta, "IntermediateOut": meta if unary_first else ins["Y"]}


def _kernel(ins: dict, attrs: dict, ctx: Any) -> dict:
    unary, binary, unary_first = _functors(attrs)
    x, y, axis = ins["X"], ins["Y"], attrs["axis"]
    if unary_first:
        inter = _binary(binary, x, broadcast_y(x, y, axis))
        return {"Out": _unary(unary, inter, attrs, ctx), "IntermediateOut": inter}
    inter = _unary(unary, y, attrs, ctx)
    return {"Out": _binary(binary, x, broadcast_y(x, inter, axis)), "IntermediateOut": inter}


def _grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    unary, binary, unary_first = _functors(attrs)
    x, y, out, axis = ins["X"], ins["Y"], ins["Out"], attrs["axis"]
    dout = ins["Out@GRAD"] if ins["Out@GRAD"] is not None else torch.zeros_like(out)
    dinter_extra = ins.get("IntermediateOut@GRAD")
    grads = {}
    if unary_first:
        d_inter = _unary_grad(unary, out, dout, attrs, ctx)
        if dinter_extra is not None:
            d_inter = d_inter + dinter_extra
        dx, dyb = _binary_grads(binary, d_inter, x, broadcast_y(x, y, axis))
        if "X" in ctx.need:
            grads["X@GRAD"] = unbroadcast(dx, x.shape)
        if "Y" in ctx.need:
            grads["Y@GRAD"] = _reduce_to_y(dyb, x, y, axis)
        return grads
    inter = ins.get("IntermediateOut")
    if inter is None:
        inter = _unary(unary, y, attrs, ctx)
    dx, dinter_b = _binary_grads(binary, dout, x, broadcast_y(x, inter, axis))
    if "X" in ctx.need:
        grads["X@GRAD"] = unbroadcast(dx, x.shape)
    if "Y" in ctx.need:
        d_inter = _reduce_to_y(dinter_b, x, inter, axis)
        if dinter_extra is not None:
            d_inter = d_inter + dinter_extra
        grads["Y@GRAD"] = _unary_grad(unary, inter, d_inter, attrs, ctx)
    return grads


register_op("fused_elemwise_activation", inputs=("X", "Y"), outputs=("Out", "IntermediateOut"),
            attrs={"functor_list": ["relu", "elementwise_add"], "axis": -1, "scale": 0.0,
                   "save_intermediate_out": True},
            infer_shape=_shape, kernel=_kernel, grad_kernel=_grad,
            grad_uses=("X", "Y", "Out", "IntermediateOut"), share_lod=("X", "Out"),
            fresh_output=True)
