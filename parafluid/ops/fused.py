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
        # the factor in the value's own type, as Fluid's kernel casts it (float16 rounds
        # 0.1 before multiplying)
        return x * torch.tensor(attrs["scale"], dtype=x.dtype, device=x.device)
    return get_op_def(name).kernel({"X": x}, attrs, ctx)["Out"]


def _unary_grad(name: str, out: torch.Tensor, dout: torch.Tensor, attrs: dict,
                ctx: Any) -> torch.Tensor:
    """``dout * unary'(x)`` written with the unary's output ``out``."""
    if name == "scale":
        return dout * torch.tensor(attrs["scale"], dtype=dout.dtype, device=dout.device)
    return get_op_def(name + "_grad").kernel({"Out": out, "Out@GRAD": dout}, attrs,
                                             ctx)["X@GRAD"]


def _binary(name: str, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.add(x, y) if name == "elementwise_add" else torch.mul(x, y)


def _binary_grads(name: str, d: torch.Tensor, a: torch.Tensor, b: torch.Tensor
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """The gradients of ``binary(a, b)`` (``b`` already broadcast) given its gradient ``d``,
    before reduction to the operands' shapes."""
    return (d, d) if name == "elementwise_add" else (d * b, d * a)


def _bcast_y(x_shape: Any, y_shape: Any) -> bool:
    """Fluid's IsBcastY: Y is the operand broadcast to X's shape (else X is broadcast to
    Y's: X may be the smaller operand)."""
    if len(x_shape) != len(y_shape):
        return len(x_shape) > len(y_shape)
    return all(a >= b for a, b in zip(x_shape, y_shape))


def _pair(x: torch.Tensor, y: torch.Tensor, axis: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``x`` and ``y`` lined up (Fluid's axis rule applied to the smaller operand)."""
    if _bcast_y(tuple(x.shape), tuple(y.shape)):
        return x, broadcast_y(x, y, axis)
    return broadcast_y(y, x, axis), y


def _reduce_to(g: torch.Tensor, t: torch.Tensor, other: torch.Tensor,
               axis: int) -> torch.Tensor:
    """Sum the gradient ``g`` of a broadcast result down to operand ``t``'s shape."""
    if tuple(g.shape) == tuple(t.shape):
        return g
    if t.dim() != other.dim():
        return unbroadcast(g, axis_view_shape(other.shape, t.shape, axis)).reshape(t.shape)
    return unbroadcast(g, t.shape)


def _shape(ins: dict, attrs: dict) -> dict:
    _, _, unary_first = _functors(attrs)
    x, y = ins["X"], ins["Y"]
    meta = broadcast_meta(x, y, attrs["axis"]) if _bcast_y(x.shape, y.shape) else \
        broadcast_meta(y, x, attrs["axis"])
    return {"Out": meta, "IntermediateOut": meta if unary_first else y}


def _kernel(ins: dict, attrs: dict, ctx: Any) -> dict:
    unary, binary, unary_first = _functors(attrs)
    x, y, axis = ins["X"], ins["Y"], attrs["axis"]
    if unary_first:
        inter = _binary(binary, *_pair(x, y, axis))
        return {"Out": _unary(unary, inter, attrs, ctx), "IntermediateOut": inter}
    inter = _unary(unary, y, attrs, ctx)
    return {"Out": _binary(binary, *_pair(x, inter, axis)), "IntermediateOut": inter}


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
        dxb, dyb = _binary_grads(binary, d_inter, *_pair(x, y, axis))
        if "X" in ctx.need:
            grads["X@GRAD"] = _reduce_to(dxb, x, y, axis)
        if "Y" in ctx.need:
            grads["Y@GRAD"] = _reduce_to(dyb, y, x, axis)
        return grads
    inter = ins.get("IntermediateOut")
    if inter is None:
        inter = _unary(unary, y, attrs, ctx)
    dxb, dinter_b = _binary_grads(binary, dout, *_pair(x, inter, axis))
    if "X" in ctx.need:
        grads["X@GRAD"] = _reduce_to(dxb, x, inter, axis)
    if "Y" in ctx.need:
        d_inter = _reduce_to(dinter_b, inter, x, axis)
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
