"""Indexing ops: gather, gather_nd, scatter, scatter_nd_add, multiplex, where, unique /
unique_with_counts, stack / unstack, flatten (slice and strided_slice: ``slicing``).
Gradients scatter or pad back; integer results (where, unique) have none.

``gather`` picks rows ``Index`` of ``X``; ``stack`` joins same-shape tensors along a
new ``axis``; ``flatten`` folds dims ``[0, axis)`` and ``[axis, rank)`` into a 2-D tensor.
``where`` gives the coordinates of the true elements of ``Condition``; ``multiplex`` takes
row ``i`` from input ``Ids[i]``.
"""

from __future__ import annotations

from typing import Any

import torch

from ..dtypes import convert_dtype, to_torch
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


# ----------------------------------------------------------------------------- where

def _where_shape(ins: dict, attrs: dict) -> dict:
    cond = ins["Condition"]
    if cond.dtype != "bool":
        raise TypeError(f"where: Condition must be bool, got {cond.dtype}")
    return {"Out": Meta((-1, len(cond.shape)), "int64")}


register_op("where", inputs=("Condition",), outputs=("Out",), infer_shape=_where_shape,
            kernel=lambda ins, attrs, ctx: {"Out": torch.nonzero(ins["Condition"])})


# ----------------------------------------------------------------------------- scatter


def _scatter_shape(ins: dict, attrs: dict) -> dict:
    x, ids, upd = ins["X"], ins["Ids"], ins["Updates"]
    if ids.dtype not in ("int32", "int64"):
        raise TypeError(f"scatter: Ids must be int32 or int64, got {ids.dtype}")
    if len(ids.shape) != 1 and not (len(ids.shape) == 2 and ids.shape[1] == 1):
        raise ValueError(f"scatter: Ids must be 1-D (or [N, 1]), got {list(ids.shape)}")
    if len(upd.shape) != len(x.shape) or any(
            a != b and -1 not in (a, b) for a, b in zip(upd.shape[1:], x.shape[1:])):
        raise ValueError(f"scatter: Updates {list(upd.shape)} must be [len(Ids)] + "
                         f"X.shape[1:] = [{ids.shape[0]}, {', '.join(map(str, x.shape[1:]))}]")
    return {"Out": x}


def _rows(ids: torch.Tensor, height: int) -> torch.Tensor:
    rows = ids.reshape(-1).long()
    if rows.numel() and (int(rows.min()) < 0 or int(rows.max()) >= height):
        raise ValueError(f"scatter: index {rows[(rows < 0) | (rows >= height)][0].item()} is "
                         f"out of range for X with {height} rows")
    return rows


def _scatter(ins: dict, attrs: dict, ctx: Any) -> dict:
    """Overwrite: ``out[ids[i]] = updates[i]``. Otherwise the indexed rows are zeroed, then
    the updates added (repeated ids accumulate), as Fluid's kernel."""
    x, upd = ins["X"], ins["Updates"]
    rows = _rows(ins["Ids"], x.shape[0])
    out = x.clone()
    if attrs["overwrite"]:
        out[rows] = upd.to(x.dtype)
    else:
        out[rows] = 0
        out.index_add_(0, rows, upd.to(x.dtype))
    return {"Out": out}


def _scatter_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    dout = ins["Out@GRAD"]
    rows = ins["Ids"].reshape(-1).long()
    out = {}
    if "X" in ctx.need:
        dx = dout.clone()
        dx[rows] = 0  # these rows of X were replaced
        out["X@GRAD"] = dx
    if "Updates" in ctx.need:
        out["Updates@GRAD"] = dout.index_select(0, rows)
    return out


register_op("scatter", inputs=("X", "Ids", "Updates"), outputs=("Out",),
            attrs={"overwrite": True}, infer_shape=_scatter_shape, kernel=_scatter,
            grad_kernel=_scatter_grad, grad_uses=("X", "Ids", "Updates"),
            no_grad_inputs=("Ids",))


# ----------------------------------------------------------------------------- unstack


def _unstack_axis(axis: int, rank: int) -> int:
    if not -rank <= axis < rank:
        raise ValueError(f"unstack: axis {axis} is out of range for X of rank {rank}")
    return axis % rank


def _unstack_shape(ins: dict, attrs: dict) -> dict:
    x = ins["X"]
    axis = _unstack_axis(int(attrs["axis"]), len(x.shape))
    num = int(attrs["num"])
    if x.shape[axis] != -1 and num != x.shape[axis]:
        raise ValueError(f"unstack: num={num} must equal dim {axis} of X {list(x.shape)}")
    piece = Meta(tuple(d for i, d in enumerate(x.shape) if i != axis), x.dtype)
    return {"Y": [piece] * num}


register_op("unstack", inputs=("X",), outputs=("Y[]",), attrs={"axis": 0, "num": 0},
            infer_shape=_unstack_shape,
            kernel=lambda ins, attrs, ctx: {"Y": [t.clone() for t in torch.unbind(
                ins["X"], _unstack_axis(int(attrs["axis"]), ins["X"].dim()))]},
            grad_kernel=lambda ins, attrs, ctx: {"X@GRAD": torch.stack(
                ins["Y@GRAD"], _unstack_axis(int(attrs["axis"]), ins["X"].dim()))},
            grad_uses=("X",))


# ----------------------------------------------------------------------------- multiplex


def _multiplex_shape(ins: dict, attrs: dict) -> dict:
    xs, ids = ins["X"], ins["Ids"]
    if not xs:
        raise ValueError("multiplex: X needs at least one input")
    shapes = {tuple(m.shape) for m in xs}
    if len(shapes) != 1:
        raise ValueError(f"multiplex: every X must have the same shape, got "
                         f"{[list(m.shape) for m in xs]}")
    if ids.dtype not in ("int32", "int64") or len(ids.shape) != 2 or ids.shape[1] != 1:
        raise ValueError(f"multiplex: Ids must be int32 [N, 1], got {ids.dtype} "
                         f"{list(ids.shape)}")
    return {"Out": xs[0]}


def _picks(ids: torch.Tensor, count: int) -> torch.Tensor:
    picks = ids.reshape(-1).long()
    if picks.numel() and (int(picks.min()) < 0 or int(picks.max()) >= count):
        raise ValueError(f"multiplex: index {picks[(picks < 0) | (picks >= count)][0].item()} "
                         f"is out of range for {count} candidate inputs")
    return picks


def _multiplex(ins: dict, attrs: dict, ctx: Any) -> dict:
    """Row ``i`` of the output is row ``i`` of ``X[Ids[i]]``."""
    xs = ins["X"]
    picks = _picks(ins["Ids"], len(xs))
    stacked = torch.stack(xs)
    return {"Out": stacked[picks, torch.arange(picks.numel(), device=picks.device)]}


def _multiplex_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    xs, dout = ins["X"], ins["Out@GRAD"]
    picks = ins["Ids"].reshape(-1).long()
    view = (-1,) + (1,) * (dout.dim() - 1)
    return {"X@GRAD": [dout * (picks == k).reshape(view).to(dout.dtype)
                       for k in range(len(xs))]}


register_op("multiplex", inputs=("X[]", "Ids"), outputs=("Out",),
            infer_shape=_multiplex_shape, kernel=_multiplex, grad_kernel=_multiplex_grad,
            grad_uses=("X", "Ids"), no_grad_inputs=("Ids",))


# ----------------------------------------------------------------------------- gather_nd, scatter


def _nd_rows(op: str, x_shape: Any, index: torch.Tensor) -> torch.Tensor:
    """Each row of ``index [..., k]`` as a position in X's first ``k`` dims flattened (X
    seen as ``[prod(x_shape[:k]), *x_shape[k:]]``). An empty last dim (``k = 0``) picks
    the whole of X for every row, as Fluid."""
    k = index.shape[-1]
    if k > len(x_shape):
        raise ValueError(f"{op}: Index's last dim {k} exceeds the rank of X {list(x_shape)}")
    n = numel(index.shape[:-1])
    flat = index.reshape(n, k).long()
    lin = torch.zeros(n, dtype=torch.long, device=index.device)
    for d in range(k):
        col = flat[:, d]
        if col.numel() and (int(col.min()) < 0 or int(col.max()) >= x_shape[d]):
            raise ValueError(f"{op}: an index in column {d} is out of range for dim {d} of X "
                             f"{list(x_shape)}")
        lin = lin * x_shape[d] + col
    return lin


def _rows_view(x: torch.Tensor, k: int) -> torch.Tensor:
    return x.reshape(numel(x.shape[:k]), *x.shape[k:])


def _gather_nd_shape(ins: dict, attrs: dict) -> dict:
    x, index = ins["X"], ins["Index"]
    k = index.shape[-1]
    if index.dtype not in ("int32", "int64") or k == -1:
        raise ValueError(f"gather_nd: Index must be int32/int64 with a known last dim, got "
                         f"{index.dtype} {list(index.shape)}")
    if k > len(x.shape):
        # Fluid's wording, which its own tests look for
        raise ValueError(f"gather_nd: Input(Index).shape[-1] should be no greater than "
                         f"Input(X).rank: Index {list(index.shape)}, X {list(x.shape)}")
    return {"Out": Meta((*index.shape[:-1], *x.shape[k:]), x.dtype)}


def _gather_nd(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, index = ins["X"], ins["Index"]
    k = index.shape[-1]
    picked = _rows_view(x, k).index_select(0, _nd_rows("gather_nd", x.shape, index))
    return {"Out": picked.reshape(*index.shape[:-1], *x.shape[k:])}


def _gather_nd_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, index, dout = ins["X"], ins["Index"], ins["Out@GRAD"]
    k = index.shape[-1]
    rows = dout.reshape(-1, *x.shape[k:])
    dx = _rows_view(torch.zeros_like(x), k).index_add_(
        0, _nd_rows("gather_nd", x.shape, index), rows)
    return {"X@GRAD": dx.reshape(x.shape)}


register_op("gather_nd", inputs=("X", "Index"), outputs=("Out",),
            infer_shape=_gather_nd_shape, kernel=_gather_nd, grad_kernel=_gather_nd_grad,
            grad_uses=("X", "Index"), no_grad_inputs=("Index",))


def _scatter_nd_add_shape(ins: dict, attrs: dict) -> dict:
    x, index, upd = ins["X"], ins["Index"], ins["Updates"]
    k = index.shape[-1]
    if k > len(x.shape):
        # (Fluid's wording, which programs match on)
        raise ValueError(f"scatter_nd_add: Input(Index).shape[-1] should be no greater than "
                         f"Input(X).rank: Index {list(index.shape)}, X {list(x.shape)}")
    want = (*index.shape[:-1], *x.shape[k:]) if k != -1 else None
    if want is None or len(upd.shape) != len(want) or any(
            a != b and -1 not in (a, b) for a, b in zip(upd.shape, want)):
        raise ValueError(f"scatter_nd_add: Updates has wrong shape: Updates "
                         f"{list(upd.shape)} must be Index.shape[:-1] + X.shape[k:] = "
                         f"{list(want or [])}")
    return {"Out": x}


def _scatter_nd_add(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, index, upd = ins["X"], ins["Index"], ins["Updates"]
    k = index.shape[-1]
    rows = upd.reshape(-1, *x.shape[k:]).to(x.dtype)
    out = _rows_view(x.clone(), k).index_add_(0, _nd_rows("scatter_nd_add", x.shape, index),
                                              rows)
    return {"Out": out.reshape(x.shape)}


def _scatter_nd_add_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    index, upd, dout = ins["Index"], ins["Updates"], ins["Out@GRAD"]
    k = index.shape[-1]
    out = {}
    if "X" in ctx.need:
        out["X@GRAD"] = dout
    if "Updates" in ctx.need:
        out["Updates@GRAD"] = _rows_view(dout, k).index_select(
            0, _nd_rows("scatter_nd_add", dout.shape, index)).reshape(upd.shape)
    return out


register_op("scatter_nd_add", inputs=("X", "Index", "Updates"), outputs=("Out",),
            infer_shape=_scatter_nd_add_shape, kernel=_scatter_nd_add,
            grad_kernel=_scatter_nd_add_grad, grad_uses=("X", "Index", "Updates"),
            no_grad_inputs=("Index",))


# ----------------------------------------------------------------------------- unique


def _unique_shape(ins: dict, attrs: dict) -> dict:
    x = ins["X"]
    if len(x.shape) != 1:
        raise ValueError(f"unique: X must be 1-D, got {list(x.shape)}")
    index = Meta(x.shape, convert_dtype(attrs["dtype"]))
    return {"Out": Meta((-1,), x.dtype), "Index": index, "Count": Meta((-1,), index.dtype)}


def _unique(ins: dict, attrs: dict, ctx: Any) -> dict:
    """Values in order of first occurrence (Fluid's order, not sorted), the position of every
    element's value in them, and how often each occurs."""
    x = ins["X"]
    values, inverse, counts = torch.unique(x, sorted=True, return_inverse=True,
                                           return_counts=True)
    first = torch.full((values.numel(),), x.numel(), dtype=torch.long, device=x.device)
    first.scatter_reduce_(0, inverse, torch.arange(x.numel(), device=x.device), "amin")
    order = torch.argsort(first)
    rank = torch.empty_like(order)
    rank[order] = torch.arange(order.numel(), device=x.device)
    dtype = to_torch(convert_dtype(attrs["dtype"]))
    return {"Out": values[order], "Index": rank[inverse].to(dtype),
            "Count": counts[order].to(dtype)}


register_op("unique", inputs=("X",), outputs=("Out", "Index"), attrs={"dtype": "int32"},
            infer_shape=_unique_shape,
            kernel=lambda ins, attrs, ctx: {k: v for k, v in _unique(ins, attrs, ctx).items()
                                            if k != "Count"})
register_op("unique_with_counts", inputs=("X",), outputs=("Out", "Index", "Count"),
            attrs={"dtype": "int32"}, infer_shape=_unique_shape, kernel=_unique)
