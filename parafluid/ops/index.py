"""Indexing ops: gather, slice, stack, flatten. Gradients scatter or pad back.

``gather`` picks rows ``Index`` of ``X``; ``slice`` cuts ``[starts, ends)`` on ``axes``
(negative and past-the-end bounds clamp, as numpy); ``stack`` joins same-shape tensors along a
new ``axis``; ``flatten`` folds dims ``[0, axis)`` and ``[axis, rank)`` into a 2-D tensor.
"""

from __future__ import annotations

from typing import Any

import torch

from .common import numel
from .registry import Meta, register_op

__all__: list[str] = []

# ----------------------------------------------------------------------------- gather


def _gather_shape(ins: dict, attrs: dict) -> dict:
    x, index = ins["X"], ins["Index"]
    if index.dtype not in ("int32", "int64"):
        raise TypeError(f"gather: Index must be int32/int64, got {index.dtype}")
    if len(index.shape) > 1 and numel(index.shape[1:]) != 1:
        raise ValueError(f"gather: Index must be 1-D (or [N, 1]), got {list(index.shape)}")
    return {"Out": Meta((index.shape[0], *x.shape[1:]), x.dtype)}


def _gather_rows(index: torch.Tensor, rows: int) -> torch.Tensor:
    flat = index.reshape(-1).long()
    if flat.numel() and (int(flat.min()) < 0 or int(flat.max()) >= rows):
        raise ValueError(f"gather: index {flat[(flat < 0) | (flat >= rows)][0].item()} is out "
                         f"of range for {rows} rows")
    return flat


register_op("gather", inputs=("X", "Index"), outputs=("Out",), attrs={"overwrite": True},
            infer_shape=_gather_shape,
            kernel=lambda ins, attrs, ctx: {
                "Out": ins["X"].index_select(0, _gather_rows(ins["Index"], ins["X"].shape[0]))},
            grad_kernel=lambda ins, attrs, ctx: {
                "X@GRAD": torch.zeros_like(ins["X"]).index_add_(
                    0, ins["Index"].reshape(-1).long(), ins["Out@GRAD"])},
            grad_uses=("X", "Index"), no_grad_inputs=("Index",))

# ----------------------------------------------------------------------------- slice


def _slice_bounds(shape: Any, attrs: dict) -> list[tuple[int, int, int]]:
    axes, starts, ends = attrs["axes"], attrs["starts"], attrs["ends"]
    if not len(axes) == len(starts) == len(ends):
        raise ValueError(f"slice: axes {axes}, starts {starts} and ends {ends} must have the "
                         "same length")
    out = []
    for a, s, e in zip(axes, starts, ends):
        if not 0 <= a < len(shape):
            raise ValueError(f"slice: axis {a} is out of range for rank {len(shape)}")
        n = shape[a]
        if n == -1:
            out.append((a, s, e))
            continue
        s = max(0, min(n, s + n if s < 0 else s))
        e = max(0, min(n, e + n if e < 0 else e))
        out.append((a, s, max(s, e)))
    return out


def _slice_shape(ins: dict, attrs: dict) -> dict:
    x = ins["Input"]
    shape = list(x.shape)
    for a, s, e in _slice_bounds(x.shape, attrs):
        shape[a] = -1 if x.shape[a] == -1 else e - s
    return {"Out": Meta(tuple(shape), x.dtype)}


def _slice_index(x: torch.Tensor, attrs: dict) -> tuple[slice, ...]:
    idx = [slice(None)] * x.dim()
    for a, s, e in _slice_bounds(tuple(x.shape), attrs):
        idx[a] = slice(s, e)
    return tuple(idx)


def _slice_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    x = ins["Input"]
    dx = torch.zeros_like(x)
    dx[_slice_index(x, attrs)] = ins["Out@GRAD"]
    return {"Input@GRAD": dx}


register_op("slice", inputs=("Input",), outputs=("Out",),
            attrs={"axes": [], "starts": [], "ends": []}, infer_shape=_slice_shape,
            kernel=lambda ins, attrs, ctx: {
                "Out": ins["Input"][_slice_index(ins["Input"], attrs)].clone()},
            grad_kernel=_slice_grad, grad_uses=("Input",))

# ----------------------------------------------------------------------------- stack


def _stack_axis(axis: int, rank: int) -> int:
    if not -(rank + 1) <= axis <= rank:
        raise ValueError(f"stack: axis {axis} is out of range for inputs of rank {rank}")
    return axis % (rank + 1)


def _stack_shape(ins: dict, attrs: dict) -> dict:
    xs = ins["X"]
    shapes = {tuple(x.shape) for x in xs}
    if len(shapes) != 1:
        raise ValueError(f"stack: every input must have the same shape, got "
                         f"{[list(x.shape) for x in xs]}")
    shape = list(xs[0].shape)
    shape.insert(_stack_axis(attrs["axis"], len(shape)), len(xs))
    return {"Y": Meta(tuple(shape), xs[0].dtype)}


def _stack_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    dy = ins["Y@GRAD"]
    axis = _stack_axis(attrs["axis"], dy.dim() - 1)
    return {"X@GRAD": [t.clone() for t in torch.unbind(dy, axis)]}


register_op("stack", inputs=("X[]",), outputs=("Y",), attrs={"axis": 0},
            infer_shape=_stack_shape,
            kernel=lambda ins, attrs, ctx: {
                "Y": torch.stack(ins["X"], _stack_axis(attrs["axis"], ins["X"][0].dim()))},
            grad_kernel=_stack_grad, grad_uses=("X",))

# ----------------------------------------------------------------------------- flatten


def _flatten_shape(ins: dict, attrs: dict) -> dict:
    x, axis = ins["X"], attrs["axis"]
    if not 0 <= axis <= len(x.shape):
        raise ValueError(f"flatten: axis {axis} must be in [0, {len(x.shape)}] for an input of "
                         f"shape {list(x.shape)}")
    lead, tail = x.shape[:axis], x.shape[axis:]
    rows = -1 if -1 in lead else numel(lead)
    cols = -1 if -1 in tail else numel(tail)
    return {"Out": Meta((rows, cols), x.dtype)}


def _flatten(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, axis = ins["X"], attrs["axis"]
    rows = 1
    for d in x.shape[:axis]:
        rows *= d
    return {"Out": x.reshape(rows, -1).clone()}


register_op("flatten", inputs=("X",), outputs=("Out",), attrs={"axis": 1},
            infer_shape=_flatten_shape, kernel=_flatten,
            grad_kernel=lambda ins, attrs, ctx: {
                "X@GRAD": ins["Out@GRAD"].reshape(ins["X"].shape).clone()},
            grad_uses=("X",))
