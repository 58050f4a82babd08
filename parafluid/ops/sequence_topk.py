"""``sequence_topk_avg_pooling``: Fluid 1.6's top-k average pooling of match matrices.

``X`` (LoD, one sequence per example) holds each example's ``channel_num`` matrices of
``rows x cols`` scores flattened (what ``match_matrix_tensor`` writes); ``ROW`` and
``COLUMN`` are LoD tensors whose sequence lengths give each example's rows and columns. For
each row of each channel and each ``k`` of the ascending ``topks``, the output is the sum of
the row's ``k`` largest scores divided by ``k`` (a row shorter than ``k`` sums what it has,
still divided by ``k``). ``Out [total rows, channel_num * len(topks)]`` carries ``ROW``'s
LoD; ``pos`` (int32) keeps the columns picked (-1 past a short row), ``max(topks)`` per row
and channel. The gradient reaches the picked scores.
"""

from __future__ import annotations

from typing import Any

import torch

from ..lod import attach_lod, require_lod
from .registry import Meta, register_op

__all__: list[str] = []


def _topks(attrs: dict) -> list[int]:
    topks = [int(k) for k in attrs["topks"]]
    if not topks or any(k <= 0 for k in topks) or topks != sorted(topks):
        raise ValueError(f"sequence_topk_avg_pooling: topks must be positive and ascending "
                         f"(the last is the largest), got {attrs['topks']}")
    return topks


def _layout(ins: dict, attrs: dict) -> list[tuple[int, int, int, int]]:
    """Per example: (start row in X, start row in Out, rows, cols)."""
    x = ins["X"]
    offs = require_lod("sequence_topk_avg_pooling", "X", x)
    row_offs = require_lod("sequence_topk_avg_pooling", "ROW", ins["ROW"])
    col_offs = require_lod("sequence_topk_avg_pooling", "COLUMN", ins["COLUMN"])
    if not len(offs) == len(row_offs) == len(col_offs):
        raise ValueError(f"sequence_topk_avg_pooling: X, ROW and COLUMN must hold the same "
                         f"number of sequences, got {len(offs) - 1}, {len(row_offs) - 1} and "
                         f"{len(col_offs) - 1}")
    channels = int(attrs["channel_num"])
    out = []
    for i in range(len(offs) - 1):
        rows, cols = row_offs[i + 1] - row_offs[i], col_offs[i + 1] - col_offs[i]
        if offs[i + 1] - offs[i] != channels * rows * cols:
            raise ValueError(f"sequence_topk_avg_pooling: sequence {i} of X has "
                             f"{offs[i + 1] - offs[i]} values, expected channel_num * rows * "
                             f"cols = {channels} * {rows} * {cols}")
        out.append((offs[i], row_offs[i], rows, cols))
    return out


def _picked(seg: torch.Tensor, max_k: int) -> torch.Tensor:
    """Column of the ``max_k`` largest scores of each row (ties: first column), -1 past the
    row's end: ``[..., max_k]``."""
    order = torch.sort(seg, dim=-1, descending=True, stable=True).indices[..., :max_k]
    if order.shape[-1] < max_k:
        pad = order.new_full((*order.shape[:-1], max_k - order.shape[-1]), -1)
        order = torch.cat([order, pad], -1)
    return order


def _topk_pool(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, topks = ins["X"], _topks(attrs)
    channels, max_k = int(attrs["channel_num"]), topks[-1]
    layout = _layout(ins, attrs)
    total_rows = sum(r for _, _, r, _ in layout)
    out = x.new_zeros((total_rows, channels, len(topks)))
    pos = torch.full((total_rows, channels, max_k), -1, dtype=torch.int64)
    flat = x.reshape(-1)
    for start, row0, rows, cols in layout:
        seg = flat[start:start + channels * rows * cols].reshape(channels, rows, cols)
        picked = _picked(seg, max_k)  # [C, R, max_k]
        vals = torch.where(picked >= 0, seg.gather(-1, picked.clamp(min=0)),
                           torch.zeros((), dtype=x.dtype))
        sums = vals.cumsum(-1)
        for j, k in enumerate(topks):
            out[row0:row0 + rows, :, j] = (sums[..., k - 1] / k).t()
        pos[row0:row0 + rows] = picked.permute(1, 0, 2)
    row_lod = require_lod("sequence_topk_avg_pooling", "ROW", ins["ROW"])
    return {"Out": attach_lod(out.reshape(total_rows, -1), [row_lod]),
            "pos": pos.reshape(-1).to(torch.int32)}


def _topk_pool_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, dout, topks = ins["X"], ins["Out@GRAD"], _topks(attrs)
    channels, max_k = int(attrs["channel_num"]), topks[-1]
    flat_dx = torch.zeros_like(x).reshape(-1)
    dout = dout.reshape(-1, channels, len(topks))
    # each picked score at rank m gets the sum over the k > m of dOut[k] / k
    weights = x.new_zeros((dout.shape[0], channels, max_k))
    for j, k in enumerate(topks):
        weights[..., :k] += (dout[..., j] / k).unsqueeze(-1)
    flat = x.reshape(-1)
    for start, row0, rows, cols in _layout(ins, attrs):
        seg = flat[start:start + channels * rows * cols].reshape(channels, rows, cols)
        picked = _picked(seg, max_k)
        w = weights[row0:row0 + rows].permute(1, 0, 2) * (picked >= 0)
        dseg = torch.zeros_like(seg).scatter_add_(-1, picked.clamp(min=0), w)
        flat_dx[start:start + seg.numel()] = dseg.reshape(-1)
    return {"X@GRAD": flat_dx.reshape(x.shape)}


def _topk_pool_shape(ins: dict, attrs: dict) -> dict:
    topks, row = _topks(attrs), ins["ROW"]
    if int(attrs["channel_num"]) <= 0:
        raise ValueError(f"sequence_topk_avg_pooling: channel_num must be positive, got "
                         f"{attrs['channel_num']}")
    width = int(attrs["channel_num"]) * len(topks)
    return {"Out": Meta((row.shape[0], width), ins["X"].dtype), "pos": Meta((-1,), "int32")}


register_op("sequence_topk_avg_pooling", inputs=("X", "ROW", "COLUMN"), outputs=("Out", "pos"),
            attrs={"topks": [], "channel_num": 1},
            infer_shape=_topk_pool_shape, kernel=_topk_pool, grad_kernel=_topk_pool_grad,
            grad_uses=("X", "ROW", "COLUMN"), no_grad_inputs=("ROW", "COLUMN"),
            no_compile="reads the LoD of X, ROW and COLUMN on the host")
