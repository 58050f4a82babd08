"""Assorted tensor ops of Fluid 1.6: shape, where, scatter, unstack, multiplex,
elementwise_mod / elementwise_floordiv, reduce_all / reduce_any, the ``*_batch_size_like``
random fills and sampling_id.

Ops with integer or boolean results (shape, where, mod, floordiv, reduce_all/any,
sampling_id) have no gradient, as in Fluid.
"""

from __future__ import annotations

from typing import Any

import torch

from ..dtypes import convert_dtype, to_torch
from .common import broadcast_meta, broadcast_y
from .reduce import _reduce_axes, _reduced_shape
from .registry import Meta, register_op
from .tensor import _batch_like_shape

__all__: list[str] = []

# ----------------------------------------------------------------------------- shape / where

register_op("shape", inputs=("Input",), outputs=("Out",),
            infer_shape=lambda ins, attrs: {"Out": Meta((len(ins["Input"].shape),), "int32")},
            kernel=lambda ins, attrs, ctx: {"Out": torch.tensor(
                list(ins["Input"].shape), dtype=torch.int32, device=ins["Input"].device)})


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

# ----------------------------------------------------------------------------- mod / floordiv


def _register_int_elementwise(name: str, fn: Any) -> None:
    """No gradient: Fluid 1.6 registers none for these."""

    def kernel(ins: dict, attrs: dict, ctx: Any) -> dict:
        x, y = ins["X"], ins["Y"]
        if y.dim() != x.dim():
            y = broadcast_y(x, y, attrs["axis"])
        if not (x.is_floating_point() or y.is_floating_point()) and bool((y == 0).any()):
            raise ValueError(f"{name}: integer division by zero (a zero in Y)")
        return {"Out": fn(x, y)}

    register_op(name, inputs=("X", "Y"), outputs=("Out",), attrs={"axis": -1},
                infer_shape=lambda ins, attrs: {"Out": broadcast_meta(ins["X"], ins["Y"],
                                                                      attrs["axis"])},
                kernel=kernel, share_lod=("X", "Out"))


# Fluid 1.6's kernels are C's: the remainder has the sign of X (fmod) and the quotient is
# truncated toward zero (Python's % and // round toward -inf instead).
_register_int_elementwise("elementwise_mod", torch.fmod)
_register_int_elementwise("elementwise_floordiv",
                          lambda x, y: torch.div(x, y, rounding_mode="trunc"))

# ----------------------------------------------------------------------------- reduce_all / any


def _register_bool_reduce(name: str, fn: Any) -> None:
    def infer(ins: dict, attrs: dict) -> dict:
        x = ins["X"]
        if x.dtype != "bool":
            raise TypeError(f"{name}: X must be bool, got {x.dtype}")
        axes = _reduce_axes(name, attrs, len(x.shape))
        return {"Out": Meta(_reduced_shape(x.shape, axes, attrs["keep_dim"]), "bool")}

    def kernel(ins: dict, attrs: dict, ctx: Any) -> dict:
        x = ins["X"]
        axes = _reduce_axes(name, attrs, x.dim())
        out = fn(x, dim=tuple(axes), keepdim=True)
        return {"Out": out.reshape(_reduced_shape(x.shape, axes, attrs["keep_dim"]))}

    register_op(name, inputs=("X",), outputs=("Out",),
                attrs={"dim": [0], "keep_dim": False, "reduce_all": False},
                infer_shape=infer, kernel=kernel)


_register_bool_reduce("reduce_all", torch.all)
_register_bool_reduce("reduce_any", torch.any)

# ----------------------------------------------------------------------------- random fills


def _register_random_like(name: str, fill: Any, extra: dict) -> None:
    def kernel(ins: dict, attrs: dict, ctx: Any) -> dict:
        shape = _batch_like_shape(name, tuple(ins["Input"].shape), attrs)
        out = torch.empty(shape, dtype=to_torch(convert_dtype(attrs["dtype"])),
                          device=ctx.device)
        return {"Out": fill(out, attrs, ctx.generator(attrs["seed"]))}

    register_op(name, inputs=("Input",), outputs=("Out",),
                attrs={"shape": [1], "dtype": "float32", "input_dim_idx": 0,
                       "output_dim_idx": 0, "seed": 0, **extra},
                infer_shape=lambda ins, attrs: {"Out": Meta(
                    _batch_like_shape(name, ins["Input"].shape, attrs),
                    convert_dtype(attrs["dtype"]))},
                kernel=kernel)


_register_random_like("uniform_random_batch_size_like",
                      lambda out, a, gen: out.uniform_(a["min"], a["max"], generator=gen),
                      {"min": -1.0, "max": 1.0})
_register_random_like("gaussian_random_batch_size_like",
                      lambda out, a, gen: out.normal_(a["mean"], a["std"], generator=gen),
                      {"mean": 0.0, "std": 1.0})

# ----------------------------------------------------------------------------- sampling_id


def _sampling_id_shape(ins: dict, attrs: dict) -> dict:
    x = ins["X"]
    if len(x.shape) != 2:
        raise ValueError(f"sampling_id: X must be 2-D [batch, classes], got {list(x.shape)}")
    return {"Out": Meta((x.shape[0],), "int64")}


def _sampling_id(ins: dict, attrs: dict, ctx: Any) -> dict:
    """Per row, draw ``r ~ U(min, max)`` and return the first class whose running sum of
    probabilities exceeds ``r`` (the last class if none does), as Fluid's kernel."""
    x = ins["X"]
    gen = ctx.generator(attrs["seed"])
    r = torch.empty(x.shape[0], dtype=torch.float64, device=x.device)
    r.uniform_(float(attrs["min"]), float(attrs["max"]), generator=gen)
    cum = torch.cumsum(x.to(torch.float64), dim=1)
    picked = (cum <= r.unsqueeze(1)).sum(dim=1).clamp(max=x.shape[1] - 1)
    return {"Out": picked.to(torch.int64)}


register_op("sampling_id", inputs=("X",), outputs=("Out",),
            attrs={"min": 0.0, "max": 1.0, "seed": 0}, infer_shape=_sampling_id_shape,
            kernel=_sampling_id)

# ----------------------------------------------------------------------------- size / expand_as

register_op("size", inputs=("Input",), outputs=("Out",),
            infer_shape=lambda ins, attrs: {"Out": Meta((1,), "int64")},
            kernel=lambda ins, attrs, ctx: {"Out": torch.tensor(
                [ins["Input"].numel()], dtype=torch.int64, device=ins["Input"].device)})


def _expand_as_times(op: str, x_shape: Any, t_shape: Any) -> list[int]:
    if len(x_shape) != len(t_shape):
        raise ValueError(f"{op}: X {list(x_shape)} and target_tensor {list(t_shape)} must "
                         "have the same rank")
    times = []
    for a, b in zip(x_shape, t_shape):
        if a == -1 or b == -1:
            times.append(-1)
        elif a <= 0 or b % a:
            raise ValueError(f"{op}: target_tensor {list(t_shape)} is not a whole number of "
                             f"copies of X {list(x_shape)}")
        else:
            times.append(b // a)
    return times


def _expand_as_shape(ins: dict, attrs: dict) -> dict:
    x, t = ins["X"], ins["target_tensor"]
    _expand_as_times("expand_as", x.shape, t.shape)
    return {"Out": Meta(tuple(t.shape), x.dtype)}


def _expand_as_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    """Sum the copies: view the gradient as ``[times_0, x_0, times_1, x_1, ...]``."""
    x, dout = ins["X"], ins["Out@GRAD"]
    times = _expand_as_times("expand_as", tuple(x.shape), tuple(dout.shape))
    view = [v for t, d in zip(times, x.shape) for v in (t, d)]
    return {"X@GRAD": dout.reshape(view).sum(dim=tuple(range(0, 2 * x.dim(), 2)))}


register_op("expand_as", inputs=("X", "target_tensor"), outputs=("Out",),
            infer_shape=_expand_as_shape,
            kernel=lambda ins, attrs, ctx: {"Out": ins["X"].repeat(_expand_as_times(
                "expand_as", tuple(ins["X"].shape), tuple(ins["target_tensor"].shape)))},
            grad_kernel=_expand_as_grad, grad_uses=("X",), no_grad_inputs=("target_tensor",))

# ----------------------------------------------------------------------------- gather_nd, scatter


def _nd_index(op: str, x_shape: Any, index: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The columns of ``index [..., k]`` as a tuple indexing the first ``k`` dims of X."""
    k = index.shape[-1]
    if k > len(x_shape):
        raise ValueError(f"{op}: Index's last dim {k} exceeds the rank of X {list(x_shape)}")
    flat = index.reshape(-1, k).long()
    for d in range(k):
        col = flat[:, d]
        if col.numel() and (int(col.min()) < 0 or int(col.max()) >= x_shape[d]):
            raise ValueError(f"{op}: an index in column {d} is out of range for dim {d} of X "
                             f"{list(x_shape)}")
    return tuple(flat[:, d] for d in range(k))


def _gather_nd_shape(ins: dict, attrs: dict) -> dict:
    x, index = ins["X"], ins["Index"]
    k = index.shape[-1]
    if index.dtype not in ("int32", "int64") or k == -1 or k > len(x.shape):
        raise ValueError(f"gather_nd: Index must be int with a known last dim <= the rank of "
                         f"X {list(x.shape)}, got {index.dtype} {list(index.shape)}")
    return {"Out": Meta((*index.shape[:-1], *x.shape[k:]), x.dtype)}


def _gather_nd(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, index = ins["X"], ins["Index"]
    picked = x[_nd_index("gather_nd", x.shape, index)]
    return {"Out": picked.reshape(*index.shape[:-1], *x.shape[index.shape[-1]:])}


def _gather_nd_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, index, dout = ins["X"], ins["Index"], ins["Out@GRAD"]
    k = index.shape[-1]
    rows = dout.reshape(-1, *x.shape[k:])
    dx = torch.zeros_like(x).index_put_(_nd_index("gather_nd", x.shape, index), rows,
                                        accumulate=True)
    return {"X@GRAD": dx}


register_op("gather_nd", inputs=("X", "Index"), outputs=("Out",),
            infer_shape=_gather_nd_shape, kernel=_gather_nd, grad_kernel=_gather_nd_grad,
            grad_uses=("X", "Index"), no_grad_inputs=("Index",))


def _scatter_nd_add_shape(ins: dict, attrs: dict) -> dict:
    x, index, upd = ins["X"], ins["Index"], ins["Updates"]
    k = index.shape[-1]
    want = (*index.shape[:-1], *x.shape[k:]) if k != -1 else None
    if want is None or len(upd.shape) != len(want) or any(
            a != b and -1 not in (a, b) for a, b in zip(upd.shape, want)):
        raise ValueError(f"scatter_nd_add: Updates {list(upd.shape)} must be Index.shape[:-1] "
                         f"+ X.shape[k:] = {list(want or [])}")
    return {"Out": x}


def _scatter_nd_add(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, index, upd = ins["X"], ins["Index"], ins["Updates"]
    rows = upd.reshape(-1, *x.shape[index.shape[-1]:]).to(x.dtype)
    return {"Out": x.clone().index_put_(_nd_index("scatter_nd_add", x.shape, index), rows,
                                        accumulate=True)}


def _scatter_nd_add_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    index, upd, dout = ins["Index"], ins["Updates"], ins["Out@GRAD"]
    out = {}
    if "X" in ctx.need:
        out["X@GRAD"] = dout
    if "Updates" in ctx.need:
        out["Updates@GRAD"] = dout[_nd_index("scatter_nd_add", dout.shape, index)].reshape(
            upd.shape)
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

# ----------------------------------------------------------------------------- mean_iou


def _mean_iou_shape(ins: dict, attrs: dict) -> dict:
    n = int(attrs["num_classes"])
    if n <= 0:
        raise ValueError(f"mean_iou: num_classes must be > 0, got {n}")
    for slot in ("Predictions", "Labels"):
        if ins[slot].dtype not in ("int32", "int64"):
            raise TypeError(f"mean_iou: {slot} must hold int class ids, got {ins[slot].dtype}")
    return {"OutMeanIou": Meta((1,), "float32"), "OutWrong": Meta((n,), "int32"),
            "OutCorrect": Meta((n,), "int32")}


def _mean_iou(ins: dict, attrs: dict, ctx: Any) -> dict:
    """Per class ``correct / (correct + wrong)`` (a miss counts as wrong for both the true
    and the predicted class), averaged over the classes that occur; as Fluid's kernel."""
    n = int(attrs["num_classes"])
    pred, label = ins["Predictions"].reshape(-1).long(), ins["Labels"].reshape(-1).long()
    for name, t in (("Predictions", pred), ("Labels", label)):
        if t.numel() and (int(t.min()) < 0 or int(t.max()) >= n):
            raise ValueError(f"mean_iou: {name} holds a class outside [0, {n})")
    hit = pred == label
    correct = torch.bincount(pred[hit], minlength=n)
    wrong = torch.bincount(pred[~hit], minlength=n) + torch.bincount(label[~hit], minlength=n)
    denom = correct + wrong
    valid = denom > 0
    iou = torch.where(valid, correct.double() / denom.clamp(min=1).double(),
                      torch.zeros(n, dtype=torch.float64, device=pred.device))
    mean = iou.sum() / valid.sum().clamp(min=1)
    return {"OutMeanIou": mean.reshape(1).float(), "OutWrong": wrong.int(),
            "OutCorrect": correct.int()}


register_op("mean_iou", inputs=("Predictions", "Labels"),
            outputs=("OutMeanIou", "OutWrong", "OutCorrect"), attrs={"num_classes": 2},
            infer_shape=_mean_iou_shape, kernel=_mean_iou)

# ----------------------------------------------------------------------------- strided_slice


def _strided_index(shape: Any, attrs: dict) -> list[Any]:
    """Per dim: ``slice(None)`` or the positions Python's ``slice(start, end, stride)``
    selects (negative bounds count from the end, bounds clamp, negative strides reverse)."""
    axes, starts, ends, strides = (list(attrs[k]) for k in ("axes", "starts", "ends",
                                                              "strides"))
    if not len(axes) == len(starts) == len(ends) == len(strides):
        raise ValueError(f"strided_slice: axes {axes}, starts {starts}, ends {ends} and "
                         f"strides {strides} must have the same length")
    index: list[Any] = [slice(None)] * len(shape)
    for a, s, e, st in zip(axes, starts, ends, strides):
        if not 0 <= a < len(shape):
            raise ValueError(f"strided_slice: axis {a} is out of range for rank {len(shape)}")
        if st == 0:
            raise ValueError("strided_slice: a stride cannot be 0")
        index[a] = None if shape[a] == -1 else list(range(*slice(s, e, st).indices(shape[a])))
    return index


def _strided_shape(ins: dict, attrs: dict) -> dict:
    x = ins["Input"]
    index = _strided_index(x.shape, attrs)
    shape = tuple(d if isinstance(i, slice) else (-1 if i is None else len(i))
                  for d, i in zip(x.shape, index))
    return {"Out": Meta(shape, x.dtype)}


def _strided_pick(x: torch.Tensor, attrs: dict) -> list[Any]:
    return [i if isinstance(i, slice) else torch.tensor(i, dtype=torch.long, device=x.device)
            for i in _strided_index(tuple(x.shape), attrs)]


def _strided_slice(ins: dict, attrs: dict, ctx: Any) -> dict:
    x = ins["Input"]
    for dim, idx in enumerate(_strided_pick(x, attrs)):
        if not isinstance(idx, slice):
            x = x.index_select(dim, idx)
    return {"Out": x.contiguous()}


def _strided_slice_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, dout = ins["Input"], ins["Out@GRAD"]
    grad = dout
    picks = _strided_pick(x, attrs)
    for dim in range(x.dim() - 1, -1, -1):
        idx = picks[dim]
        if not isinstance(idx, slice):
            shape = list(grad.shape)
            shape[dim] = x.shape[dim]
            grad = torch.zeros(shape, dtype=dout.dtype, device=dout.device).index_add_(
                dim, idx, grad)
    return {"Input@GRAD": grad}


register_op("strided_slice", inputs=("Input",), outputs=("Out",),
            attrs={"axes": [], "starts": [], "ends": [], "strides": [], "infer_flags": []},
            infer_shape=_strided_shape, kernel=_strided_slice,
            grad_kernel=_strided_slice_grad, grad_uses=("Input",))

# ----------------------------------------------------------------------------- hash

_MASK = (1 << 64) - 1
_P1, _P2, _P3 = 11400714785074694791, 14029467366897019727, 1609587929392839161
_P4, _P5 = 9650029242287828579, 2870177450012600261


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & _MASK


def _round(acc: int, lane: int) -> int:
    return (_rotl((acc + lane * _P2) & _MASK, 31) * _P1) & _MASK


def xxh64(data: bytes, seed: int) -> int:
    """XXH64 of ``data`` (the hash Fluid's ``hash`` op uses), in plain Python ints."""
    n, i = len(data), 0
    if n >= 32:
        v = [(seed + _P1 + _P2) & _MASK, (seed + _P2) & _MASK, seed & _MASK,
             (seed - _P1) & _MASK]
        while i + 32 <= n:
            for k in range(4):
                v[k] = _round(v[k], int.from_bytes(data[i + 8 * k:i + 8 * k + 8], "little"))
            i += 32
        h = (_rotl(v[0], 1) + _rotl(v[1], 7) + _rotl(v[2], 12) + _rotl(v[3], 18)) & _MASK
        for lane in v:
            h = ((h ^ _round(0, lane)) * _P1 + _P4) & _MASK
    else:
        h = (seed + _P5) & _MASK
    h = (h + n) & _MASK
    while i + 8 <= n:
        h ^= _round(0, int.from_bytes(data[i:i + 8], "little"))
        h = (_rotl(h, 27) * _P1 + _P4) & _MASK
        i += 8
    if i + 4 <= n:
        h ^= (int.from_bytes(data[i:i + 4], "little") * _P1) & _MASK
        h = (_rotl(h, 23) * _P2 + _P3) & _MASK
        i += 4
    while i < n:
        h ^= (data[i] * _P5) & _MASK
        h = (_rotl(h, 11) * _P1) & _MASK
        i += 1
    h ^= h >> 33
    h = (h * _P2) & _MASK
    h ^= h >> 29
    h = (h * _P3) & _MASK
    return h ^ (h >> 32)


def _hash_shape(ins: dict, attrs: dict) -> dict:
    x = ins["X"]
    if x.dtype != "int32" or len(x.shape) != 2:
        raise ValueError(f"hash: X must be int32 [N, k] (Fluid hashes int32 rows), got "
                         f"{x.dtype} {list(x.shape)}")
    return {"Out": Meta((x.shape[0], int(attrs["num_hash"]), 1), "int64")}


def _hash(ins: dict, attrs: dict, ctx: Any) -> dict:
    """Per row and seed ``0 .. num_hash - 1``: ``XXH64(row's int32 bytes, seed) % mod_by``."""
    x = ins["X"]
    rows = x.detach().cpu().numpy().astype("<i4")
    k, mod = int(attrs["num_hash"]), int(attrs["mod_by"])
    out = [[xxh64(r.tobytes(), seed) % mod for seed in range(k)] for r in rows]
    result = torch.tensor(out, dtype=torch.int64, device=x.device).reshape(len(rows), k, 1)
    return {"Out": result}


register_op("hash", inputs=("X",), outputs=("Out",), attrs={"num_hash": 1, "mod_by": 100000},
            infer_shape=_hash_shape, kernel=_hash, share_lod=("X", "Out"))
