"""Sequence ops over LoD inputs: pool, softmax, expand, concat, reshape, conv.

The rows of ``X`` are the steps of a batch of sequences; the finest LoD level of ``X``
(``lod[-1]``, offsets, see ``parafluid/lod.py``) says where each sequence starts. Kernels
read it with ``require_lod`` and give their outputs the LoD Fluid gives them. Gradient ops
read ``X`` too, for its LoD.

Ordinary ops pass their input's LoD on to their output when their registration row says
``share_lod=...`` (``fc`` on a sequence is still a sequence), as Fluid's ShareLoD does.
"""

from __future__ import annotations

from typing import Any

import torch

from ..lod import attach_lod, check_lod, get_lod, require_lod
from .registry import Meta, register_op

__all__: list[str] = []

_POOL_TYPES = ("SUM", "AVERAGE", "SQRT", "MAX", "FIRST", "LAST")


def _segments(offsets: list[int], device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """(sequence id of every row, length of every sequence) as int64 tensors."""
    lengths = torch.tensor([b - a for a, b in zip(offsets, offsets[1:])], dtype=torch.long,
                           device=device)
    seg = torch.repeat_interleave(torch.arange(len(lengths), device=device), lengths)
    return seg, lengths


def _bcast(v: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """A per-row vector shaped to broadcast against ``like``'s rows."""
    return v.reshape(-1, *([1] * (like.dim() - 1))).to(like.dtype)


def _upper_lod(x: torch.Tensor) -> list[list[int]] | None:
    lod = get_lod(x)
    return lod[:-1] if lod and len(lod) > 1 else None


def _check_seq_input(op: str, x: Meta) -> None:
    if len(x.shape) < 1:
        raise ValueError(f"{op}: X must have a step dimension, got shape {list(x.shape)}")


# ----------------------------------------------------------------------------- sequence_pool


def _seq_pool_shape(ins: dict, attrs: dict) -> dict:
    x = ins["X"]
    _check_seq_input("sequence_pool", x)
    if attrs["pooltype"] not in _POOL_TYPES:
        raise ValueError(f"sequence_pool: pooltype must be one of {_POOL_TYPES}, "
                         f"got {attrs['pooltype']!r}")
    return {"Out": Meta((-1, *x.shape[1:]), x.dtype), "MaxIndex": Meta((-1, *x.shape[1:]),
                                                                     "int32")}


def _max_rows(x: torch.Tensor, seg: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per sequence and feature: the max and the first row holding it."""
    shape = (n, *x.shape[1:])
    idx = seg.reshape(-1, *([1] * (x.dim() - 1))).expand_as(x)
    out = torch.full(shape, float("-inf"), dtype=x.dtype, device=x.device)
    out.scatter_reduce_(0, idx, x, "amax", include_self=True)
    rows = torch.arange(x.shape[0], device=x.device).reshape(-1, *([1] * (x.dim() - 1)))
    cand = torch.where(x == out.gather(0, idx), rows.expand_as(x),
                       torch.full_like(idx, x.shape[0]))
    first = torch.full(shape, x.shape[0], dtype=torch.long, device=x.device)
    first.scatter_reduce_(0, idx, cand, "amin", include_self=True)
    return out, first


def _seq_pool(ins: dict, attrs: dict, ctx: Any) -> dict:
    x = ins["X"]
    offsets = require_lod("sequence_pool", "X", x)
    n = len(offsets) - 1
    seg, lengths = _segments(offsets, x.device)
    kind = attrs["pooltype"]
    empty = _bcast(lengths == 0, x).bool()
    index = torch.zeros((n, *x.shape[1:]), dtype=torch.int32, device=x.device)
    if kind in ("SUM", "AVERAGE", "SQRT"):
        out = torch.zeros((n, *x.shape[1:]), dtype=x.dtype, device=x.device).index_add_(0, seg, x)
        if kind == "AVERAGE":
            out = out / _bcast(lengths.clamp(min=1), out)
        elif kind == "SQRT":
            out = out / _bcast(lengths.clamp(min=1), out).sqrt()
    elif kind == "MAX":
        out, first = _max_rows(x, seg, n)
        index = first.to(torch.int32)
    else:
        starts = torch.tensor(offsets[:-1] if kind == "FIRST" else
                              [max(b - 1, 0) for b in offsets[1:]], device=x.device)
        out = x.index_select(0, starts.clamp(max=max(x.shape[0] - 1, 0))) if x.shape[0] else \
            torch.zeros((n, *x.shape[1:]), dtype=x.dtype, device=x.device)
    out = torch.where(empty, torch.full_like(out, float(attrs["pad_value"])), out)
    return {"Out": attach_lod(out, _upper_lod(x)), "MaxIndex": index}


def _seq_pool_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, dout = ins["X"], ins["Out@GRAD"]
    offsets = require_lod("sequence_pool_grad", "X", x)
    seg, lengths = _segments(offsets, x.device)
    kind = attrs["pooltype"]
    if kind == "SUM":
        dx = dout.index_select(0, seg)
    elif kind == "AVERAGE":
        dx = dout.index_select(0, seg) / _bcast(lengths.index_select(0, seg), x)
    elif kind == "SQRT":
        dx = dout.index_select(0, seg) / _bcast(lengths.index_select(0, seg), x).sqrt()
    elif kind == "MAX":
        first = ins["MaxIndex"].long()
        dx = torch.zeros_like(x)
        valid = first < x.shape[0]
        dx.scatter_add_(0, torch.where(valid, first, torch.zeros_like(first)),
                        torch.where(valid, dout, torch.zeros_like(dout)))
    else:
        rows = offsets[:-1] if kind == "FIRST" else [b - 1 for b in offsets[1:]]
        keep = [i for i, (a, b) in enumerate(zip(offsets, offsets[1:])) if b > a]
        dx = torch.zeros_like(x)
        if keep:
            dx.index_copy_(0, torch.tensor([rows[i] for i in keep], device=x.device),
                           dout.index_select(0, torch.tensor(keep, device=x.device)))
    return {"X@GRAD": dx}


register_op("sequence_pool", inputs=("X",), outputs=("Out", "MaxIndex"),
            attrs={"pooltype": "AVERAGE", "pad_value": 0.0, "is_test": False},
            infer_shape=_seq_pool_shape, kernel=_seq_pool, grad_kernel=_seq_pool_grad,
            grad_uses=("X", "MaxIndex"))

# ----------------------------------------------------------------------------- sequence_softmax


def _seq_softmax_shape(ins: dict, attrs: dict) -> dict:
    # NOTE: Fluid's op shares X's shape whatever it is; only its kernel asks for one value
    # per step ([N], [N, 1]), so a program with an fc of width > 1 before it builds
    x = ins["X"]
    if len(x.shape) < 1:
        raise ValueError("sequence_softmax: X must have at least one dim (the steps), got "
                         "a scalar")
    return {"Out": x}


def _seq_softmax(ins: dict, attrs: dict, ctx: Any) -> dict:
    x = ins["X"]
    if x.numel() != x.shape[0]:
        raise ValueError(f"sequence_softmax: X must hold one value per step ([N] or [N, 1]), "
                         f"got shape {list(x.shape)}")
    offsets = require_lod("sequence_softmax", "X", x)
    seg, _ = _segments(offsets, x.device)
    flat = x.reshape(-1)
    n = len(offsets) - 1
    top = torch.full((n,), float("-inf"), dtype=x.dtype, device=x.device)
    top.scatter_reduce_(0, seg, flat, "amax", include_self=True)
    e = (flat - top.index_select(0, seg)).exp()
    total = torch.zeros(n, dtype=x.dtype, device=x.device).index_add_(0, seg, e)
    return {"Out": (e / total.index_select(0, seg)).reshape(x.shape)}


def _seq_softmax_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, out, dout = ins["X"], ins["Out"], ins["Out@GRAD"]
    offsets = require_lod("sequence_softmax_grad", "X", x)
    seg, _ = _segments(offsets, x.device)
    prod = (dout * out).reshape(-1)
    dot = torch.zeros(len(offsets) - 1, dtype=x.dtype, device=x.device).index_add_(0, seg, prod)
    return {"X@GRAD": out * (dout - dot.index_select(0, seg).reshape(x.shape))}


register_op("sequence_softmax", inputs=("X",), outputs=("Out",),
            attrs={"use_cudnn": False, "data_format": "AnyLayout"},
            infer_shape=_seq_softmax_shape, kernel=_seq_softmax,
            grad_kernel=_seq_softmax_grad, grad_uses=("X", "Out"), share_lod=("X", "Out"))

# ----------------------------------------------------------------------------- sequence_expand


def _seq_expand_shape(ins: dict, attrs: dict) -> dict:
    return {"Out": Meta((-1, *ins["X"].shape[1:]), ins["X"].dtype)}


def _expand_plan(x: torch.Tensor, y: torch.Tensor, ref_level: int,
                 ) -> tuple[torch.Tensor, list[int]]:
    """(the X row behind every output row, the output's offsets)."""
    y_lod = get_lod(y)
    if not y_lod:
        raise ValueError("sequence_expand: input Y carries no sequence information (LoD); "
                         "feed a LoDTensor for it")
    level = y_lod[ref_level]
    repeats = [b - a for a, b in zip(level, level[1:])]
    x_lod = get_lod(x)
    x_off = x_lod[-1] if x_lod else list(range(x.shape[0] + 1))
    if len(x_off) - 1 != len(repeats):
        raise ValueError(f"sequence_expand: X has {len(x_off) - 1} sequences (rows) but level "
                         f"{ref_level} of Y's LoD has {len(repeats)}; they must match")
    src, out_off = [], [0]
    for i, r in enumerate(repeats):
        seq = list(range(x_off[i], x_off[i + 1]))
        for _ in range(r):
            src.extend(seq)
            out_off.append(out_off[-1] + len(seq))
    return torch.tensor(src, dtype=torch.long, device=x.device), out_off


def _seq_expand(ins: dict, attrs: dict, ctx: Any) -> dict:
    x = ins["X"]
    src, out_off = _expand_plan(x, ins["Y"], attrs["ref_level"])
    return {"Out": attach_lod(x.index_select(0, src), [out_off])}


def _seq_expand_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, dout = ins["X"], ins["Out@GRAD"]
    src, _ = _expand_plan(x, ins["Y"], attrs["ref_level"])
    return {"X@GRAD": torch.zeros_like(x).index_add_(0, src, dout)}


register_op("sequence_expand", inputs=("X", "Y"), outputs=("Out",), attrs={"ref_level": -1},
            infer_shape=_seq_expand_shape, kernel=_seq_expand, grad_kernel=_seq_expand_grad,
            grad_uses=("X", "Y"), no_grad_inputs=("Y",))

# ----------------------------------------------------------------------------- sequence_concat


def _seq_concat_shape(ins: dict, attrs: dict) -> dict:
    xs = ins["X"]
    tails = {tuple(x.shape[1:]) for x in xs}
    if len(tails) != 1:
        raise ValueError(f"sequence_concat: every input must have the same step shape, got "
                         f"{[list(x.shape) for x in xs]}")
    return {"Out": Meta((-1, *xs[0].shape[1:]), xs[0].dtype)}


def _concat_plan(xs: list[torch.Tensor]) -> tuple[list[tuple[int, int, int]], list[int]]:
    """((input, start, end) pieces in output order, output offsets)."""
    offs = [require_lod("sequence_concat", f"X[{i}]", x) for i, x in enumerate(xs)]
    n = len(offs[0]) - 1
    if any(len(o) - 1 != n for o in offs):
        raise ValueError(f"sequence_concat: the inputs have {[len(o) - 1 for o in offs]} "
                         "sequences; they must have the same number")
    pieces, out_off = [], [0]
    for s in range(n):
        total = 0
        for j, o in enumerate(offs):
            pieces.append((j, o[s], o[s + 1]))
            total += o[s + 1] - o[s]
        out_off.append(out_off[-1] + total)
    return pieces, out_off


def _seq_concat(ins: dict, attrs: dict, ctx: Any) -> dict:
    xs = ins["X"]
    pieces, out_off = _concat_plan(xs)
    out = torch.cat([xs[j][a:b] for j, a, b in pieces], 0)
    return {"Out": attach_lod(out, [out_off])}


def _seq_concat_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    xs, dout = ins["X"], ins["Out@GRAD"]
    pieces, _ = _concat_plan(xs)
    grads = [torch.zeros_like(x) for x in xs]
    pos = 0
    for j, a, b in pieces:
        grads[j][a:b] = dout[pos:pos + b - a]
        pos += b - a
    return {"X@GRAD": grads}


register_op("sequence_concat", inputs=("X[]",), outputs=("Out",),
            infer_shape=_seq_concat_shape, kernel=_seq_concat, grad_kernel=_seq_concat_grad,
            grad_uses=("X",))

# ----------------------------------------------------------------------------- sequence_reshape


def _seq_reshape_shape(ins: dict, attrs: dict) -> dict:
    x, new_dim = ins["X"], int(attrs["new_dim"])
    if len(x.shape) != 2:
        raise ValueError(f"sequence_reshape: X must be 2-D, got shape {list(x.shape)}")
    if new_dim <= 0:
        raise ValueError(f"sequence_reshape: new_dim must be positive, got {new_dim}")
    return {"Out": Meta((-1, new_dim), x.dtype)}


def _seq_reshape(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, new_dim = ins["X"], int(attrs["new_dim"])
    offsets = require_lod("sequence_reshape", "X", x)
    width = x.shape[1]
    out_off = [0]
    for a, b in zip(offsets, offsets[1:]):
        size = (b - a) * width
        if size % new_dim:
            raise ValueError(f"sequence_reshape: a sequence of {b - a} steps x {width} = {size} "
                             f"values does not divide into rows of new_dim={new_dim}")
        out_off.append(out_off[-1] + size // new_dim)
    return {"Out": attach_lod(x.reshape(-1, new_dim).clone(), [out_off])}


register_op("sequence_reshape", inputs=("X",), outputs=("Out",), attrs={"new_dim": 1},
            infer_shape=_seq_reshape_shape, kernel=_seq_reshape,
            grad_kernel=lambda ins, attrs, ctx: {
                "X@GRAD": ins["Out@GRAD"].reshape(ins["X"].shape).clone()},
            grad_uses=("X",))

# ----------------------------------------------------------------------------- sequence_conv


def _seq_conv_shape(ins: dict, attrs: dict) -> dict:
    x, w = ins["X"], ins["Filter"]
    if len(x.shape) != 2 or len(w.shape) != 2:
        raise ValueError(f"sequence_conv: X and Filter must be 2-D, got {list(x.shape)} and "
                         f"{list(w.shape)}")
    if int(attrs["contextStride"]) != 1:
        raise ValueError("sequence_conv: only contextStride=1 is supported (as in Fluid)")
    want = int(attrs["contextLength"]) * x.shape[1]
    if x.shape[1] != -1 and w.shape[0] != want:
        raise ValueError(f"sequence_conv: Filter has {w.shape[0]} rows but contextLength "
                         f"{attrs['contextLength']} x {x.shape[1]} input columns = {want}")
    if attrs["paddingTrainable"] and ins.get("PaddingData") is None:
        raise ValueError("sequence_conv: paddingTrainable=True needs the PaddingData input "
                         "[up + down padding rows, D]")
    return {"Out": Meta((x.shape[0], w.shape[1]), x.dtype)}


def _context_rows(offsets: list[int], length: int, start: int,
                  device: torch.device) -> torch.Tensor:
    """``[rows, length]``: for each step, the rows of its context window (-1 outside its
    sequence, where the window reads zeros)."""
    rows = offsets[-1]
    seg, _ = _segments(offsets, device)
    pos = torch.arange(rows, device=device)
    lo = torch.tensor(offsets[:-1], device=device).index_select(0, seg)
    hi = torch.tensor(offsets[1:], device=device).index_select(0, seg)
    src = pos.unsqueeze(1) + start + torch.arange(length, device=device).unsqueeze(0)
    inside = (src >= lo.unsqueeze(1)) & (src < hi.unsqueeze(1))
    return torch.where(inside, src, torch.full_like(src, -1))


def _im2col(x: torch.Tensor, ctx_rows: torch.Tensor) -> torch.Tensor:
    padded = torch.cat([x.new_zeros((1, x.shape[1])), x], 0)
    return padded.index_select(0, (ctx_rows + 1).reshape(-1)).reshape(x.shape[0], -1)


def _padding_rows(offsets: list[int], length: int, start: int,
                  device: torch.device) -> torch.Tensor:
    """``[rows, length]``: where a context position falls before its sequence (``p < 0``)
    the row ``up + p`` of PaddingData, after it (``p >= len``) the row ``up + p - len``
    (``up = max(0, -contextStart)``); -1 inside the sequence."""
    up = max(0, -start)
    seg, _ = _segments(offsets, device)
    lo = torch.tensor(offsets[:-1], device=device).index_select(0, seg)
    hi = torch.tensor(offsets[1:], device=device).index_select(0, seg)
    pos = torch.arange(offsets[-1], device=device) - lo  # position in the sequence
    p = pos.unsqueeze(1) + start + torch.arange(length, device=device).unsqueeze(0)
    n = (hi - lo).unsqueeze(1)
    idx = torch.where(p < 0, up + p, torch.where(p >= n, up + p - n, torch.full_like(p, -1)))
    return torch.where(idx >= 0, idx, torch.full_like(idx, -1))


def _seq_cols(ins: dict, attrs: dict) -> tuple:
    """The context columns ``[rows, length * D]`` (PaddingData outside the sequences when
    ``paddingTrainable``), the context rows and the padding rows (None without)."""
    x = ins["X"]
    offsets = require_lod("sequence_conv", "X", x)
    length, start = int(attrs["contextLength"]), int(attrs["contextStart"])
    rows = _context_rows(offsets, length, start, x.device)
    cols = _im2col(x, rows)
    pad = ins.get("PaddingData")
    if not attrs["paddingTrainable"] or pad is None:
        return cols, rows, None
    prow = _padding_rows(offsets, length, start, x.device)
    table = torch.cat([pad.new_zeros((1, pad.shape[1])), pad], 0)
    cols = cols + table.index_select(0, (prow + 1).reshape(-1)).reshape(cols.shape)
    return cols, rows, prow


def _seq_conv(ins: dict, attrs: dict, ctx: Any) -> dict:
    cols, _, _ = _seq_cols(ins, attrs)
    return {"Out": cols @ ins["Filter"]}


def _seq_conv_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, w, dout = ins["X"], ins["Filter"], ins["Out@GRAD"]
    length = int(attrs["contextLength"])
    cols, rows, prow = _seq_cols(ins, attrs)
    out = {}
    if "Filter" in ctx.need:
        out["Filter@GRAD"] = cols.t() @ dout
    dcol = (dout @ w.t()).reshape(x.shape[0] * length, x.shape[1])
    if "X" in ctx.need:
        flat = rows.reshape(-1)
        keep = flat >= 0
        out["X@GRAD"] = torch.zeros_like(x).index_add_(0, flat[keep], dcol[keep])
    if "PaddingData" in ctx.need and ins.get("PaddingData") is not None:
        pad = ins["PaddingData"]
        dpad = torch.zeros_like(pad)
        if prow is not None:
            flat = prow.reshape(-1)
            keep = flat >= 0
            dpad.index_add_(0, flat[keep], dcol[keep])
        out["PaddingData@GRAD"] = dpad
    return out


register_op("sequence_conv", inputs=("X", "Filter", "PaddingData?"), outputs=("Out",),
            attrs={"contextLength": 3, "contextStart": 0, "contextStride": 1,
                   "paddingTrainable": False},
            infer_shape=_seq_conv_shape, kernel=_seq_conv, grad_kernel=_seq_conv_grad,
            grad_uses=("X", "Filter", "PaddingData"), share_lod=("X", "Out"))

# ----------------------------------------------------------------------------- expand_as


def _seq_expand_as_shape(ins: dict, attrs: dict) -> dict:
    return {"Out": Meta((-1, *ins["X"].shape[1:]), ins["X"].dtype)}


def _expand_as_plan(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, list[int]]:
    offsets = require_lod("sequence_expand_as", "Y", y)
    if len(offsets) - 1 != x.shape[0]:
        raise ValueError(f"sequence_expand_as: X has {x.shape[0]} rows but Y has "
                         f"{len(offsets) - 1} sequences; they must match")
    seg, _ = _segments(offsets, x.device)
    return seg, offsets


def _seq_expand_as(ins: dict, attrs: dict, ctx: Any) -> dict:
    x = ins["X"]
    seg, offsets = _expand_as_plan(x, ins["Y"])
    return {"Out": attach_lod(x.index_select(0, seg), [list(offsets)])}


register_op("sequence_expand_as", inputs=("X", "Y"), outputs=("Out",),
            infer_shape=_seq_expand_as_shape, kernel=_seq_expand_as,
            grad_kernel=lambda ins, attrs, ctx: {
                "X@GRAD": torch.zeros_like(ins["X"]).index_add_(
                    0, _expand_as_plan(ins["X"], ins["Y"])[0], ins["Out@GRAD"])},
            grad_uses=("X", "Y"), no_grad_inputs=("Y",))

# ----------------------------------------------------------------------------- pad / unpad


def _seq_pad_shape(ins: dict, attrs: dict) -> dict:
    x, pad = ins["X"], ins["PadValue"]
    if pad.dtype != x.dtype:
        raise TypeError(f"sequence_pad: PadValue is {pad.dtype} but X is {x.dtype}")
    length = int(attrs["padded_length"])
    return {"Out": Meta((-1, length, *x.shape[1:]), x.dtype), "Length": Meta((-1,), "int64")}


def _pad_rows(offsets: list[int], length: int, device: torch.device) -> torch.Tensor:
    """``[sequences, length]``: the X row of each padded position (-1 for padding)."""
    rows = torch.full((len(offsets) - 1, length), -1, dtype=torch.long)
    for s, (a, b) in enumerate(zip(offsets, offsets[1:])):
        rows[s, :b - a] = torch.arange(a, b)
    return rows.to(device)


def _pad_length(offsets: list[int], attrs: dict, op: str) -> int:
    longest = max((b - a for a, b in zip(offsets, offsets[1:])), default=0)
    length = int(attrs["padded_length"])
    if length == -1:
        return longest
    if length < longest:
        raise ValueError(f"{op}: padded_length {length} is shorter than the longest "
                         f"sequence ({longest} steps)")
    return length


def _seq_pad(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, pad = ins["X"], ins["PadValue"]
    offsets = require_lod("sequence_pad", "X", x)
    rows = _pad_rows(offsets, _pad_length(offsets, attrs, "sequence_pad"), x.device)
    filler = pad.reshape(-1)[0] if pad.numel() == 1 else pad.reshape(x.shape[1:])
    padded = torch.cat([filler.expand((1, *x.shape[1:])).to(x.dtype), x], 0)
    out = padded.index_select(0, (rows + 1).reshape(-1)).reshape(*rows.shape, *x.shape[1:])
    lengths = torch.tensor([b - a for a, b in zip(offsets, offsets[1:])], device=x.device)
    return {"Out": out, "Length": lengths}


def _seq_pad_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, dout = ins["X"], ins["Out@GRAD"]
    offsets = require_lod("sequence_pad_grad", "X", x)
    rows = _pad_rows(offsets, dout.shape[1], x.device).reshape(-1)
    keep = rows >= 0
    flat = dout.reshape(-1, *x.shape[1:])
    return {"X@GRAD": torch.zeros_like(x).index_copy_(0, rows[keep], flat[keep])}


register_op("sequence_pad", inputs=("X", "PadValue"), outputs=("Out", "Length"),
            attrs={"padded_length": -1}, infer_shape=_seq_pad_shape, kernel=_seq_pad,
            grad_kernel=_seq_pad_grad, grad_uses=("X",), no_grad_inputs=("PadValue",))


def _seq_unpad_shape(ins: dict, attrs: dict) -> dict:
    x = ins["X"]
    if len(x.shape) < 2:
        raise ValueError(f"sequence_unpad: X must be [sequences, length, ...], got "
                         f"{list(x.shape)}")
    return {"Out": Meta((-1, *x.shape[2:]), x.dtype)}


def _unpad_offsets(x: torch.Tensor, length: torch.Tensor) -> list[int]:
    lengths = [int(n) for n in length.reshape(-1).tolist()]
    if len(lengths) != x.shape[0] or any(n < 0 or n > x.shape[1] for n in lengths):
        raise ValueError(f"sequence_unpad: Length {lengths} must give one length in "
                         f"[0, {x.shape[1]}] for each of the {x.shape[0]} sequences")
    offsets = [0]
    for n in lengths:
        offsets.append(offsets[-1] + n)
    return offsets


def _seq_unpad(ins: dict, attrs: dict, ctx: Any) -> dict:
    x = ins["X"]
    offsets = _unpad_offsets(x, ins["Length"])
    rows = _pad_rows(offsets, x.shape[1], x.device).reshape(-1)
    keep = rows >= 0
    out = x.reshape(-1, *x.shape[2:])[keep]
    return {"Out": attach_lod(out, [offsets])}


def _seq_unpad_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, dout = ins["X"], ins["Out@GRAD"]
    offsets = _unpad_offsets(x, ins["Length"])
    keep = (_pad_rows(offsets, x.shape[1], x.device).reshape(-1) >= 0).nonzero().reshape(-1)
    dx = torch.zeros_like(x).reshape(-1, *x.shape[2:]).index_copy_(0, keep, dout)
    return {"X@GRAD": dx.reshape(x.shape)}


register_op("sequence_unpad", inputs=("X", "Length"), outputs=("Out",),
            infer_shape=_seq_unpad_shape, kernel=_seq_unpad, grad_kernel=_seq_unpad_grad,
            grad_uses=("X", "Length"), no_grad_inputs=("Length",))

# ----------------------------------------------------------------------------- sequence_mask


def _seq_mask_shape(ins: dict, attrs: dict) -> dict:
    x = ins["X"]
    if x.dtype not in ("int32", "int64"):
        raise TypeError(f"sequence_mask: X must hold int lengths, got {x.dtype}")
    maxlen = -1 if ins.get("MaxLenTensor") is not None else int(attrs["maxlen"])
    return {"Y": Meta((*x.shape, maxlen if maxlen > 0 else -1), attrs["out_dtype"])}


def _seq_mask(ins: dict, attrs: dict, ctx: Any) -> dict:
    from ..dtypes import to_torch

    x, t = ins["X"], ins.get("MaxLenTensor")
    maxlen = int(attrs["maxlen"]) if t is None else int(t.reshape(-1)[0])
    if t is not None and maxlen <= 0:  # Fluid: the tensor's value must be positive
        raise ValueError(f"sequence_mask: MaxLenTensor must be > 0, got {maxlen}")
    if maxlen <= 0:
        maxlen = int(x.max()) if x.numel() else 0
    steps = torch.arange(maxlen, device=x.device)
    return {"Y": (steps < x.unsqueeze(-1)).to(to_torch(attrs["out_dtype"]))}


register_op("sequence_mask", inputs=("X", "MaxLenTensor?"), outputs=("Y",),
            attrs={"maxlen": -1, "out_dtype": "int64"}, infer_shape=_seq_mask_shape,
            kernel=_seq_mask)

# ----------------------------------------------------------------------------- lod_reset


def _lod_reset(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, y = ins["X"], ins.get("Y")
    if y is not None:
        lod = get_lod(y)
        if not lod:  # Y's values are the offsets
            lod = [[int(v) for v in y.reshape(-1).tolist()]]
    else:
        lod = [[int(v) for v in attrs["target_lod"]]]
    if not lod[0]:
        raise ValueError("lod_reset: give Y (a LoD tensor, or offsets) or target_lod")
    if attrs["append"]:  # Fluid's lod_append: a new innermost level under x's own
        lod = [list(level) for level in get_lod(x) or []] + lod[-1:]
    check_lod(lod, x.shape[0], "lod_append" if attrs["append"] else "lod_reset")
    return {"Out": attach_lod(x.view(x.shape), lod)}


register_op("lod_reset", inputs=("X", "Y?"), outputs=("Out",),
            attrs={"target_lod": [], "append": False},
            infer_shape=lambda ins, attrs: {"Out": ins["X"]}, kernel=_lod_reset,
            grad_kernel=lambda ins, attrs, ctx: {"X@GRAD": ins["Out@GRAD"]},
            grad_uses=(), no_grad_inputs=("Y",),
            grad_infer_shape=lambda ins, attrs: {"X@GRAD": ins["Out@GRAD"]})
