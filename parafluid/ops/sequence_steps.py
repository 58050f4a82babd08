"""Sequence ops that work on the steps of LoD sequences: sequence_reverse, sequence_slice,
sequence_enumerate, sequence_erase, sequence_scatter, add_position_encoding, row_conv (a
convolution over each step and the next ones) and im2sequence (image patches as the steps of
a sequence).

Offsets come from the finest LoD level (``require_lod``); outputs get the LoD Fluid gives
them. Gradient kernels are explicit (index maps run backwards, ``F.fold`` for unfold).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F

from ..lod import attach_lod, get_lod, lengths_to_offsets, require_lod
from .registry import Meta, register_op

__all__: list[str] = []




def _lengths(offsets: list[int]) -> list[int]:
    return [b - a for a, b in zip(offsets, offsets[1:])]


# ----------------------------------------------------------------------------- sequence_reverse


def _reverse_index(offsets: list[int], device: Any) -> torch.Tensor:
    idx = [r for a, b in zip(offsets, offsets[1:]) for r in range(b - 1, a - 1, -1)]
    return torch.tensor(idx, dtype=torch.long, device=device)


def _seq_reverse(ins: dict, attrs: dict, ctx: Any) -> dict:
    x = ins["X"]
    offsets = require_lod("sequence_reverse", "X", x)
    return {"Y": attach_lod(x.index_select(0, _reverse_index(offsets, x.device)), get_lod(x))}


def _seq_reverse_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, dy = ins["X"], ins["Y@GRAD"]
    offsets = require_lod("sequence_reverse_grad", "X", x)
    return {"X@GRAD": dy.index_select(0, _reverse_index(offsets, x.device))}


register_op("sequence_reverse", inputs=("X",), outputs=("Y",),
            infer_shape=lambda ins, attrs: {"Y": ins["X"]}, kernel=_seq_reverse,
            grad_kernel=_seq_reverse_grad, grad_uses=("X",))


# ----------------------------------------------------------------------------- sequence_slice


def _slice_rows(ins: dict, op: str) -> tuple[torch.Tensor, list[int]]:
    x = ins["X"]
    offsets = require_lod(op, "X", x)
    starts = [int(v) for v in ins["Offset"].reshape(-1).tolist()]
    lens = [int(v) for v in ins["Length"].reshape(-1).tolist()]
    n = len(offsets) - 1
    if len(starts) != n or len(lens) != n:
        raise ValueError(f"{op}: Offset and Length need one value per sequence ({n}), got "
                         f"{len(starts)} and {len(lens)}")
    rows = []
    for i, (s, k) in enumerate(zip(starts, lens)):
        size = offsets[i + 1] - offsets[i]
        if s < 0 or k < 0 or s + k > size:
            raise ValueError(f"{op}: sequence {i} has {size} steps; offset {s} + length {k} "
                             "does not fit")
        rows += range(offsets[i] + s, offsets[i] + s + k)
    return torch.tensor(rows, dtype=torch.long, device=x.device), lens


def _seq_slice(ins: dict, attrs: dict, ctx: Any) -> dict:
    x = ins["X"]
    rows, lens = _slice_rows(ins, "sequence_slice")
    lod = get_lod(x)
    return {"Out": attach_lod(x.index_select(0, rows), lod[:-1] + [lengths_to_offsets(lens)])}


def _seq_slice_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, dout = ins["X"], ins["Out@GRAD"]
    rows, _ = _slice_rows(ins, "sequence_slice_grad")
    return {"X@GRAD": torch.zeros_like(x).index_add_(0, rows, dout)}


def _seq_slice_shape(ins: dict, attrs: dict) -> dict:
    for slot in ("Offset", "Length"):
        if ins[slot].dtype not in ("int32", "int64"):
            raise TypeError(f"sequence_slice: {slot} must be int64, got {ins[slot].dtype}")
    x = ins["X"]
    return {"Out": Meta((-1, *x.shape[1:]), x.dtype)}


register_op("sequence_slice", inputs=("X", "Offset", "Length"), outputs=("Out",),
            infer_shape=_seq_slice_shape, kernel=_seq_slice, grad_kernel=_seq_slice_grad,
            grad_uses=("X", "Offset", "Length"), no_grad_inputs=("Offset", "Length"))


# ----------------------------------------------------------------------------- sequence_enumerate


def _seq_enumerate_shape(ins: dict, attrs: dict) -> dict:
    x = ins["X"]
    if x.dtype not in ("int32", "int64"):
        raise TypeError(f"sequence_enumerate: X must hold int ids, got {x.dtype}")
    if len(x.shape) != 2 or x.shape[1] not in (1, -1):
        raise ValueError(f"sequence_enumerate: X must be [N, 1], got {list(x.shape)}")
    if int(attrs["win_size"]) <= 0:
        raise ValueError(f"sequence_enumerate: win_size must be > 0, got {attrs['win_size']}")
    return {"Out": Meta((x.shape[0], int(attrs["win_size"])), x.dtype)}


def _seq_enumerate(ins: dict, attrs: dict, ctx: Any) -> dict:
    """Row ``t``: ids ``t .. t + win_size - 1`` of its sequence, ``pad_value`` past the end."""
    x = ins["X"]
    offsets = require_lod("sequence_enumerate", "X", x)
    win = int(attrs["win_size"])
    flat = x.reshape(-1)
    ends = torch.tensor([b for a, b in zip(offsets, offsets[1:]) for _ in range(a, b)],
                        dtype=torch.long, device=x.device)
    pos = torch.arange(flat.numel(), device=x.device).unsqueeze(1) + torch.arange(
        win, device=x.device)
    inside = pos < ends.unsqueeze(1)
    vals = flat[pos.clamp(max=max(flat.numel() - 1, 0))] if flat.numel() else \
        torch.zeros_like(pos, dtype=x.dtype)
    pad = torch.full_like(vals, int(attrs["pad_value"]))
    return {"Out": attach_lod(torch.where(inside, vals, pad), get_lod(x))}


register_op("sequence_enumerate", inputs=("X",), outputs=("Out",),
            attrs={"win_size": 2, "pad_value": 0}, infer_shape=_seq_enumerate_shape,
            kernel=_seq_enumerate)


# ----------------------------------------------------------------------------- sequence_erase


def _seq_erase(ins: dict, attrs: dict, ctx: Any) -> dict:
    """Drop the tokens listed in ``tokens`` from each sequence (int ids ``[N, 1]``)."""
    x = ins["X"]
    offsets = require_lod("sequence_erase", "X", x)
    flat = x.reshape(-1)
    tokens = torch.tensor(list(attrs["tokens"]), dtype=flat.dtype, device=x.device)
    keep = ~torch.isin(flat, tokens)
    kept = torch.cumsum(keep.to(torch.long), 0)
    new_offsets = [0] + [int(kept[b - 1]) if b > 0 else 0 for b in offsets[1:]]
    lod = get_lod(x)
    return {"Out": attach_lod(x[keep].reshape(-1, *x.shape[1:]), lod[:-1] + [new_offsets])}


register_op("sequence_erase", inputs=("X",), outputs=("Out",), attrs={"tokens": []},
            infer_shape=lambda ins, attrs: {"Out": Meta((-1, *ins["X"].shape[1:]),
                                                        ins["X"].dtype)},
            kernel=_seq_erase)


# ----------------------------------------------------------------------------- sequence_scatter


def _seq_scatter_shape(ins: dict, attrs: dict) -> dict:
    x, ids, upd = ins["X"], ins["Ids"], ins["Updates"]
    if len(x.shape) != 2:
        raise ValueError(f"sequence_scatter: X must be 2-D [N, D], got {list(x.shape)}")
    if ids.dtype not in ("int32", "int64"):
        raise TypeError(f"sequence_scatter: Ids must hold int positions, got {ids.dtype}")
    if len(upd.shape) != len(ids.shape) or any(
            a != b and -1 not in (a, b) for a, b in zip(upd.shape, ids.shape)):
        raise ValueError(f"sequence_scatter: Updates {list(upd.shape)} must have the shape "
                         f"of Ids {list(ids.shape)}")
    return {"Out": x}


def _scatter_targets(ins: dict, op: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(row, column) of ``X`` for every id: sequence ``i`` of ``Ids`` addresses row ``i``."""
    x, ids = ins["X"], ins["Ids"]
    offsets = require_lod(op, "Ids", ids)
    if len(offsets) - 1 != x.shape[0]:
        raise ValueError(f"{op}: Ids has {len(offsets) - 1} sequences but X has "
                         f"{x.shape[0]} rows; sequence i updates row i")
    rows = torch.repeat_interleave(torch.arange(x.shape[0], device=x.device),
                                   torch.tensor(_lengths(offsets), device=x.device))
    cols = ids.reshape(-1).long()
    if cols.numel() and (int(cols.min()) < 0 or int(cols.max()) >= x.shape[1]):
        raise ValueError(f"{op}: a position in Ids is outside the {x.shape[1]} columns of X")
    return rows, cols


def _seq_scatter(ins: dict, attrs: dict, ctx: Any) -> dict:
    """``out[i, ids[j]] += updates[j]`` for every step ``j`` of sequence ``i``."""
    x = ins["X"]
    rows, cols = _scatter_targets(ins, "sequence_scatter")
    upd = ins["Updates"].reshape(-1).to(x.dtype)
    return {"Out": x.clone().index_put_((rows, cols), upd, accumulate=True)}


def _seq_scatter_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    dout = ins["Out@GRAD"]
    out = {}
    if "X" in ctx.need:
        out["X@GRAD"] = dout
    if "Updates" in ctx.need:
        rows, cols = _scatter_targets(ins, "sequence_scatter_grad")
        out["Updates@GRAD"] = dout[rows, cols].reshape(ins["Updates"].shape)
    return out


register_op("sequence_scatter", inputs=("X", "Ids", "Updates"), outputs=("Out",),
            infer_shape=_seq_scatter_shape, kernel=_seq_scatter,
            grad_kernel=_seq_scatter_grad, grad_uses=("X", "Ids", "Updates"),
            no_grad_inputs=("Ids",))


# ----------------------------------------------------------------------------- position encoding


def _position_table(length: int, width: int, dtype: Any, device: Any) -> torch.Tensor:
    """Fluid's sinusoid table: sin in the first half of the features, cos in the second,
    with ``pos / 10000^(k / (half - 1))``."""
    half = width // 2
    pos = torch.arange(length, dtype=torch.float64).unsqueeze(1)
    k = torch.arange(half, dtype=torch.float64)
    denom = torch.pow(10000.0, k / (half - 1)) if half > 1 else torch.full_like(k, 10000.0)
    val = pos / denom
    return torch.cat([torch.sin(val), torch.cos(val)], 1).to(dtype=dtype, device=device)


def _pos_enc_shape(ins: dict, attrs: dict) -> dict:
    x = ins["X"]
    if len(x.shape) not in (2, 3) or (x.shape[-1] != -1 and x.shape[-1] % 2):
        raise ValueError(f"add_position_encoding: X must be [N, T, D] (or a LoD [N, D]) with "
                         f"an even D, got {list(x.shape)}")
    return {"Out": x}


def _pos_enc(ins: dict, attrs: dict, ctx: Any) -> dict:
    x = ins["X"]
    alpha, beta = float(attrs["alpha"]), float(attrs["beta"])
    if x.dim() == 3:
        table = _position_table(x.shape[1], x.shape[2], x.dtype, x.device)
        return {"Out": alpha * x + beta * table.unsqueeze(0)}
    offsets = require_lod("add_position_encoding", "X", x)
    longest = max(_lengths(offsets), default=0)
    table = _position_table(longest, x.shape[1], x.dtype, x.device)
    steps = torch.tensor([t for a, b in zip(offsets, offsets[1:]) for t in range(b - a)],
                         dtype=torch.long, device=x.device)
    return {"Out": attach_lod(alpha * x + beta * table[steps], get_lod(x))}


register_op("add_position_encoding", inputs=("X",), outputs=("Out",),
            attrs={"alpha": 1.0, "beta": 1.0}, infer_shape=_pos_enc_shape, kernel=_pos_enc,
            grad_kernel=lambda ins, attrs, ctx: {"X@GRAD": float(attrs["alpha"])
                                                 * ins["Out@GRAD"]},
            grad_uses=(), grad_infer_shape=lambda ins, attrs: {"X@GRAD": ins["Out@GRAD"]})


# ----------------------------------------------------------------------------- row_conv


def _row_conv_shape(ins: dict, attrs: dict) -> dict:
    x, w = ins["X"], ins["Filter"]
    if len(x.shape) not in (2, 3) or len(w.shape) != 2:
        raise ValueError(f"row_conv: X must be [N, D] (LoD) or [B, T, D] (padded) and Filter "
                         f"[k, D], got {list(x.shape)} and {list(w.shape)}")
    if -1 not in (x.shape[-1], w.shape[1]) and x.shape[-1] != w.shape[1]:
        raise ValueError(f"row_conv: Filter {list(w.shape)} must have X's {x.shape[-1]} "
                         f"columns")
    return {"Out": x}


def _row_conv_rows(x: torch.Tensor) -> tuple[torch.Tensor, list[int]]:
    """X as rows and its sequences' offsets: the LoD of ``[N, D]``, or each of the ``B``
    rows of a padded ``[B, T, D]`` as one sequence of ``T`` steps (Fluid's tensor input)."""
    if x.dim() == 3:
        b, t = x.shape[0], x.shape[1]
        return x.reshape(b * t, x.shape[2]), list(range(0, b * t + 1, t)) if t else [0] * (b + 1)
    return x, require_lod("row_conv", "X", x)


def _future_rows(offsets: list[int], k: int, device: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """For step ``t`` and lag ``i < k``: the row ``t + i`` and whether it is in t's sequence."""
    ends = torch.tensor([b for a, b in zip(offsets, offsets[1:]) for _ in range(a, b)],
                        dtype=torch.long, device=device)
    rows = torch.arange(len(ends), device=device).unsqueeze(1) + torch.arange(k, device=device)
    inside = rows < ends.unsqueeze(1)
    return torch.where(inside, rows, torch.zeros_like(rows)), inside


def _row_conv(ins: dict, attrs: dict, ctx: Any) -> dict:
    """Lookahead convolution (DeepSpeech 2): ``out[t] = sum_i x[t + i] * W[i]`` within the
    sequence of ``t``."""
    x3, w = ins["X"], ins["Filter"]
    x, offsets = _row_conv_rows(x3)
    rows, inside = _future_rows(offsets, w.shape[0], x.device)
    window = x[rows] * inside.unsqueeze(2).to(x.dtype)  # [N, k, D]
    out = (window * w.unsqueeze(0)).sum(1)
    if x3.dim() == 3:
        return {"Out": out.reshape(x3.shape)}
    return {"Out": attach_lod(out, get_lod(x3))}


def _row_conv_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    x3, w = ins["X"], ins["Filter"]
    x, offsets = _row_conv_rows(x3)
    dout = ins["Out@GRAD"].reshape(x.shape)
    rows, inside = _future_rows(offsets, w.shape[0], x.device)
    mask = inside.unsqueeze(2).to(x.dtype)
    out = {}
    if "X" in ctx.need:
        contrib = dout.unsqueeze(1) * w.unsqueeze(0) * mask  # [N, k, D] to row t + i
        out["X@GRAD"] = torch.zeros_like(x).index_add_(
            0, rows.reshape(-1), contrib.reshape(-1, x.shape[1])).reshape(x3.shape)
    if "Filter" in ctx.need:
        out["Filter@GRAD"] = (x[rows] * mask * dout.unsqueeze(1)).sum(0)
    return out


register_op("row_conv", inputs=("X", "Filter"), outputs=("Out",),
            infer_shape=_row_conv_shape, kernel=_row_conv, grad_kernel=_row_conv_grad,
            grad_uses=("X", "Filter"))


# ----------------------------------------------------------------------------- im2sequence


def _im2seq_params(attrs: dict) -> tuple[list[int], list[int], list[int]]:
    kernels = [int(k) for k in attrs["kernels"]]
    strides = [int(s) for s in attrs["strides"]]
    pads = [int(p) for p in attrs["paddings"]]  # up, left, down, right
    if len(kernels) != 2 or len(strides) != 2 or len(pads) != 4:
        raise ValueError(f"im2sequence: kernels and strides need 2 values and paddings 4 "
                         f"(up, left, down, right), got {kernels}, {strides}, {pads}")
    return kernels, strides, pads


def _im2seq_out(size: int, k: int, before: int, after: int, stride: int) -> int:
    return -1 if size == -1 else (size + before + after - k) // stride + 1


def _im2seq_shape(ins: dict, attrs: dict) -> dict:
    x = ins["X"]
    if len(x.shape) != 4:
        raise ValueError(f"im2sequence: X must be 4-D NCHW, got {list(x.shape)}")
    (kh, kw), (sh, sw), (pu, pl, pd, pr) = _im2seq_params(attrs)
    oh = _im2seq_out(x.shape[2], kh, pu, pd, sh)
    ow = _im2seq_out(x.shape[3], kw, pl, pr, sw)
    if oh == 0 or ow == 0 or oh < -1 or ow < -1:
        raise ValueError(f"im2sequence: X {list(x.shape)} is smaller than the kernel "
                         f"[{kh}, {kw}] with paddings {[pu, pl, pd, pr]}")
    rows = -1 if -1 in (x.shape[0], oh, ow) or ins.get("Y") is not None else \
        x.shape[0] * oh * ow
    return {"Out": Meta((rows, x.shape[1] * kh * kw), x.dtype)}


def _im2seq_grids(ins: dict, attrs: dict) -> list[tuple[int, int]] | None:
    """With ``Y`` (each image's real ``[height, width]``, batches of 2 or more, as Fluid):
    per image, the ``(rows, cols)`` of its filter grid, from its real size divided by
    ``out_stride`` (rounded up); None: every image takes the whole grid of X. As in Fluid,
    a grid may reach past the image: those positions read zeros, like padding."""
    y, n = ins.get("Y"), ins["X"].shape[0]
    if y is None or n <= 1:
        return None
    (kh, kw), (sh, sw), (pu, pl, pd, pr) = _im2seq_params(attrs)
    osh, osw = (int(v) for v in attrs["out_stride"])
    grids = []
    for real_h, real_w in y.reshape(n, 2).tolist():
        rh, rw = -(-int(real_h) // osh), -(-int(real_w) // osw)
        grids.append((max(_im2seq_out(rh, kh, pu, pd, sh), 0),
                      max(_im2seq_out(rw, kw, pl, pr, sw), 0)))
    return grids


def _im2seq_pads(x_shape: Sequence[int], attrs: dict,
                 grids: list[tuple[int, int]] | None) -> tuple[int, int]:
    """The bottom and right paddings that make the unfolded grid cover every image's grid."""
    (kh, kw), (sh, sw), (pu, pl, pd, pr) = _im2seq_params(attrs)
    if not grids:
        return pd, pr
    gh = max(g[0] for g in grids)
    gw = max(g[1] for g in grids)
    return (max(pd, (gh - 1) * sh + kh - x_shape[2] - pu),
            max(pr, (gw - 1) * sw + kw - x_shape[3] - pl))


def _im2seq(ins: dict, attrs: dict, ctx: Any) -> dict:
    """One row per filter position (row-major over the output grid), features ordered
    (channel, kernel row, kernel column); each image is one sequence."""
    x = ins["X"]
    (kh, kw), strides, (pu, pl, _, _) = _im2seq_params(attrs)
    grids = _im2seq_grids(ins, attrs)
    pd, pr = _im2seq_pads(x.shape, attrs, grids)
    padded = F.pad(x, [pl, pr, pu, pd])
    cols = F.unfold(padded, (kh, kw), stride=strides)
    n, feat, positions = cols.shape
    oh = _im2seq_out(padded.shape[2], kh, 0, 0, strides[0])
    if grids is not None:
        grid = cols.reshape(n, feat, oh, positions // oh)
        rows = [grid[i, :, :gh, :gw].reshape(feat, -1).t() for i, (gh, gw) in
                enumerate(grids)]
        lod = [0]
        for r in rows:
            lod.append(lod[-1] + r.shape[0])
        return {"Out": attach_lod(torch.cat(rows), [lod])}
    out = cols.transpose(1, 2).reshape(n * positions, feat)
    return {"Out": attach_lod(out, [list(range(0, n * positions + 1, positions))])}


def _im2seq_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, dout = ins["X"], ins["Out@GRAD"]
    (kh, kw), strides, (pu, pl, _, _) = _im2seq_params(attrs)
    n, c, h, w = x.shape
    grids = _im2seq_grids(ins, attrs)
    pd, pr = _im2seq_pads(x.shape, attrs, grids)
    padded = (h + pu + pd, w + pl + pr)
    oh = _im2seq_out(padded[0], kh, 0, 0, strides[0])
    ow = _im2seq_out(padded[1], kw, 0, 0, strides[1])
    if grids is not None:  # scatter each image's rows back onto its grid positions
        full = dout.new_zeros((n, oh, ow, c * kh * kw))
        start = 0
        for i, (gh, gw) in enumerate(grids):
            full[i, :gh, :gw] = dout[start:start + gh * gw].reshape(gh, gw, -1)
            start += gh * gw
        dout = full
    cols = dout.reshape(n, -1, c * kh * kw).transpose(1, 2)
    dx = F.fold(cols, padded, (kh, kw), stride=strides)
    return {"X@GRAD": dx[:, :, pu:pu + h, pl:pl + w].contiguous()}


register_op("im2sequence", inputs=("X", "Y?"), outputs=("Out",),
            attrs={"kernels": [1, 1], "strides": [1, 1], "paddings": [0, 0, 0, 0],
                   "out_stride": [1, 1]},
            infer_shape=_im2seq_shape, kernel=_im2seq, grad_kernel=_im2seq_grad,
            grad_uses=("X", "Y"), no_grad_inputs=("Y",))
