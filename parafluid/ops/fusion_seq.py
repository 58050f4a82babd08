"""Fluid's fused sequence ops over LoD inputs, each the chain of its unfused ops' kernels:

- ``fusion_seqpool_concat``: ``concat([sequence_pool(x, pooltype) for x in X], axis=1)``;
- ``fusion_seqpool_cvm_concat``: the same with ``cvm(use_cvm=True)`` after each pool;
- ``fusion_seqexpand_concat_fc``: ``act(fc(concat([X0, sequence_expand(X1, X0), ...])))``,
  ``FCOut`` keeping the per-sequence part ``X1 W1 + X2 W2 + ...``;
- ``fusion_seqconv_eltadd_relu``: ``relu(sequence_conv(X, Filter) + Bias)``, the context
  matrix in ``ColMat``;
- ``fused_embedding_seq_pool``: ``sequence_pool(lookup_table(W, Ids), "SUM")`` with the ids
  of a row side by side (the only op of the five with a gradient in Fluid: ``W@GRAD``,
  dense or SelectedRows).

The pooled outputs carry Fluid's LoD ``[[0, 1, ..., N]]`` (one row per sequence).

Example::

    {Out=[o]} = fusion_seqpool_concat(X=[a, b]) {pooltype='SUM', axis=1}
"""

from __future__ import annotations

from typing import Any

import torch

from ..lod import attach_lod, require_lod
from ..scope import SelectedRows
from .fusion_math import call_kernel
from .registry import Meta, register_op
from .sequence import _context_rows, _im2col

__all__: list[str] = []

_POOLS = ("AVERAGE", "SUM", "SQRT")


def _rows_lod(n: int) -> list[list[int]]:
    return [list(range(n + 1))]


# ---------------------------------------------------------------- seqpool + concat


def _pool_concat_shape(op: str, cvm: bool) -> Any:
    def infer(ins: dict, attrs: dict) -> dict:
        xs = ins["X"]
        if not xs:
            raise ValueError(f"{op}: X must hold at least one input")
        if attrs["axis"] != 1:
            raise ValueError(f"{op}: only axis=1 is supported (as in Fluid), got "
                             f"{attrs['axis']}")
        if attrs["pooltype"] not in _POOLS:
            raise ValueError(f"{op}: pooltype must be one of {_POOLS}, got "
                             f"{attrs['pooltype']!r}")
        if cvm and not attrs["use_cvm"]:
            raise ValueError(f"{op}: only use_cvm=True is supported (as in Fluid), got False")
        if len(xs[0].shape) != 2:
            raise ValueError(f"{op}: X[0] must be 2-D, got {list(xs[0].shape)}")
        for i, x in enumerate(xs):
            if list(x.shape[1:]) != list(xs[0].shape[1:]):
                raise ValueError(f"{op}: every X must have X[0]'s width {xs[0].shape[1]}, "
                                 f"X[{i}] has shape {list(x.shape)}")
        return {"Out": Meta((-1, xs[0].shape[1] * len(xs)), xs[0].dtype)}
    return infer


def _pool_concat(op: str, cvm: bool) -> Any:
    def kernel(ins: dict, attrs: dict, ctx: Any) -> dict:
        pooled, n = [], None
        for i, x in enumerate(ins["X"]):
            seqs = len(require_lod(op, f"X[{i}]", x)) - 1
            if n is not None and seqs != n:
                raise ValueError(f"{op}: X[{i}] holds {seqs} sequences, X[0] {n}")
            n = seqs
            p = call_kernel("sequence_pool", {"X": x}, {"pooltype": attrs["pooltype"]},
                            ctx)["Out"]
            if cvm:
                p = call_kernel("cvm", {"X": p, "CVM": ins["CVM"]}, {"use_cvm": True},
                                ctx)["Y"]
            pooled.append(p)
        out = call_kernel("concat", {"X": pooled}, {"axis": 1}, ctx)["Out"]
        return {"Out": attach_lod(out, _rows_lod(out.shape[0]))}
    return kernel


register_op("fusion_seqpool_concat", inputs=("X[]",), outputs=("Out",),
            attrs={"pooltype": "SUM", "axis": 1},
            infer_shape=_pool_concat_shape("fusion_seqpool_concat", False),
            kernel=_pool_concat("fusion_seqpool_concat", False))

register_op("fusion_seqpool_cvm_concat", inputs=("X[]", "CVM"), outputs=("Out",),
            attrs={"pooltype": "SUM", "use_cvm": True, "axis": 1},
            infer_shape=_pool_concat_shape("fusion_seqpool_cvm_concat", True),
            kernel=_pool_concat("fusion_seqpool_cvm_concat", True))

# ---------------------------------------------------------------- seqexpand + concat + fc

_FC_ACTS = ("sigmoid", "tanh", "relu", "identity")


def _sec_shape(ins: dict, attrs: dict) -> dict:
    op = "fusion_seqexpand_concat_fc"
    xs, w = ins["X"], ins["FCWeight"]
    if len(xs) < 2:
        raise ValueError(f"{op}: X must hold at least 2 inputs, got {len(xs)}")
    if len(w.shape) != 2:
        raise ValueError(f"{op}: FCWeight must be 2-D, got {list(w.shape)}")
    widths = [x.shape[1] if len(x.shape) == 2 else None for x in xs]
    if None in widths:
        raise ValueError(f"{op}: every X must be 2-D, got {[list(x.shape) for x in xs]}")
    if -1 not in widths and sum(widths) != w.shape[0]:
        raise ValueError(f"{op}: FCWeight has {w.shape[0]} rows but the inputs' widths "
                         f"{widths} sum to {sum(widths)}")
    b = ins.get("FCBias")
    if b is not None and tuple(b.shape) not in ((w.shape[1],), (1, w.shape[1])):
        raise ValueError(f"{op}: FCBias must be [{w.shape[1]}] or [1, {w.shape[1]}], got "
                         f"{list(b.shape)}")
    if attrs["fc_activation"] not in _FC_ACTS:
        raise ValueError(f"{op}: fc_activation must be one of {_FC_ACTS}, got "
                         f"{attrs['fc_activation']!r}")
    return {"Out": Meta((xs[0].shape[0], w.shape[1]), xs[0].dtype),
            "FCOut": Meta((-1, w.shape[1]), xs[0].dtype)}


def _sec(ins: dict, attrs: dict, ctx: Any) -> dict:
    op = "fusion_seqexpand_concat_fc"
    xs, w, b = ins["X"], ins["FCWeight"], ins.get("FCBias")
    offsets = require_lod(op, "X[0]", xs[0])
    n = len(offsets) - 1
    for i, x in enumerate(xs[1:], 1):
        if x.shape[0] != n:
            raise ValueError(f"{op}: X[{i}] must hold one row per sequence of X[0] ({n}), "
                             f"got {x.shape[0]} rows")
    m0 = xs[0].shape[1]
    out = call_kernel("mul", {"X": xs[0], "Y": w[:m0]}, ctx=ctx)["Out"]
    if b is not None:
        out = call_kernel("elementwise_add", {"X": out, "Y": b.reshape(-1)}, ctx=ctx)["Out"]
    fc_out, row = None, m0
    for x in xs[1:]:
        part = call_kernel("mul", {"X": x, "Y": w[row:row + x.shape[1]]}, ctx=ctx)["Out"]
        fc_out = part if fc_out is None else fc_out + part
        row += x.shape[1]
    lengths = torch.tensor([e - s for s, e in zip(offsets, offsets[1:])], device=out.device)
    out = out + fc_out.repeat_interleave(lengths, 0)
    act = attrs["fc_activation"]
    if act != "identity":
        out = call_kernel(act, {"X": out}, ctx=ctx)["Out"]
    return {"Out": attach_lod(out, [list(offsets)]), "FCOut": fc_out}


register_op("fusion_seqexpand_concat_fc", inputs=("X[]", "FCWeight", "FCBias?"),
            outputs=("Out", "FCOut"), attrs={"fc_activation": "identity"},
            infer_shape=_sec_shape, kernel=_sec)

# ---------------------------------------------------------------- seqconv + add + relu


def _sce_shape(ins: dict, attrs: dict) -> dict:
    op = "fusion_seqconv_eltadd_relu"
    x, w, b = ins["X"], ins["Filter"], ins["Bias"]
    length, start = attrs["contextLength"], attrs["contextStart"]
    if length is None or length < 1:
        raise ValueError(f"{op}: contextLength (required) must be a positive int, got {length}")
    if attrs["contextStride"] != 1:
        raise ValueError(f"{op}: only contextStride=1 is supported (as in Fluid), got "
                         f"{attrs['contextStride']}")
    if not -length < start <= 0:
        raise ValueError(f"{op}: contextStart must be in [{1 - length}, 0] (Fluid's kernel "
                         f"reads the window from the step itself), got {start}")
    if len(x.shape) != 2 or len(w.shape) != 2:
        raise ValueError(f"{op}: X and Filter must be 2-D, got {list(x.shape)} and "
                         f"{list(w.shape)}")
    if x.shape[1] != -1 and w.shape[0] != length * x.shape[1]:
        raise ValueError(f"{op}: Filter has {w.shape[0]} rows but contextLength {length} x "
                         f"{x.shape[1]} input columns = {length * x.shape[1]}")
    if b.shape and b.shape[-1] != w.shape[1]:
        raise ValueError(f"{op}: Bias must have {w.shape[1]} elements, got {list(b.shape)}")
    return {"Out": Meta((x.shape[0], w.shape[1]), x.dtype),
            "ColMat": Meta((x.shape[0], w.shape[0]), x.dtype)}


def _sce(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, w, b = ins["X"], ins["Filter"], ins["Bias"]
    offsets = require_lod("fusion_seqconv_eltadd_relu", "X", x)
    rows = _context_rows(offsets, int(attrs["contextLength"]), int(attrs["contextStart"]),
                         x.device)
    col = _im2col(x, rows)
    conv = call_kernel("mul", {"X": col, "Y": w}, ctx=ctx)["Out"]
    added = call_kernel("elementwise_add", {"X": conv, "Y": b.reshape(-1)}, ctx=ctx)["Out"]
    return {"Out": call_kernel("relu", {"X": added}, ctx=ctx)["Out"], "ColMat": col}


register_op("fusion_seqconv_eltadd_relu", inputs=("X", "Filter", "Bias"),
            outputs=("Out", "ColMat"),
            attrs={"contextLength": None, "contextStart": 0, "contextStride": 1},
            infer_shape=_sce_shape, kernel=_sce, share_lod=("X", "Out"))

# ---------------------------------------------------------------- embedding + seq pool


def _emb_pool_shape(ins: dict, attrs: dict) -> dict:
    op = "fused_embedding_seq_pool"
    w, ids = ins["W"], ins["Ids"]
    if len(w.shape) != 2:
        raise ValueError(f"{op}: W must be 2-D, got {list(w.shape)}")
    if ids.dtype not in ("int64", "int32"):
        raise TypeError(f"{op}: Ids must be int64 (or int32), got {ids.dtype}")
    if attrs["combiner"] != "sum":
        raise ValueError(f"{op}: combiner must be 'sum' (the only one Fluid has), got "
                         f"{attrs['combiner']!r}")
    width = w.shape[1]
    for d in ids.shape[1:]:
        width = -1 if -1 in (d, width) else width * d
    return {"Out": Meta((-1, width), w.dtype)}


def _emb_rows(ins: dict, attrs: dict, ctx: Any) -> torch.Tensor:
    """The looked-up ids of each row side by side: ``[T, k·width]``."""
    ids = ins["Ids"]
    emb = call_kernel("lookup_table", {"W": ins["W"], "Ids": ids.reshape(-1, 1)},
                      {"padding_idx": attrs["padding_idx"]}, ctx)["Out"]
    return emb.reshape(ids.shape[0], -1)


def _emb_pool(ins: dict, attrs: dict, ctx: Any) -> dict:
    ids = ins["Ids"]
    offsets = require_lod("fused_embedding_seq_pool", "Ids", ids)
    rows = attach_lod(_emb_rows(ins, attrs, ctx), [list(offsets)])
    out = call_kernel("sequence_pool", {"X": rows}, {"pooltype": "SUM"}, ctx)["Out"]
    return {"Out": out}


def _emb_pool_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    w, ids, dout = ins["W"], ins["Ids"], ins["Out@GRAD"]
    offsets = require_lod("fused_embedding_seq_pool_grad", "Ids", ids)
    lengths = torch.tensor([e - s for s, e in zip(offsets, offsets[1:])], device=dout.device)
    drows = dout.repeat_interleave(lengths, 0).reshape(-1, w.shape[1])  # [T·k, width]
    flat = ids.reshape(-1).long()
    pad = attrs["padding_idx"]
    if pad != -1:
        drows = drows.masked_fill((flat == pad).unsqueeze(1), 0.0)
    if attrs["is_sparse"]:
        return {"W@GRAD": SelectedRows(flat, drows, w.shape[0])}
    return {"W@GRAD": torch.zeros_like(w).index_add_(0, flat, drows)}


def _emb_pool_grad_shape(ins: dict, attrs: dict) -> dict:
    w = ins["W"]
    return {"W@GRAD": Meta(w.shape, w.dtype,
                           "selected_rows" if attrs["is_sparse"] else "lod_tensor")}


register_op("fused_embedding_seq_pool", inputs=("W", "Ids"), outputs=("Out",),
            attrs={"combiner": "sum", "padding_idx": -1, "grad_inplace": False,
                   "is_sparse": False},
            infer_shape=_emb_pool_shape, kernel=_emb_pool, grad_kernel=_emb_pool_grad,
            grad_uses=("W", "Ids"), no_grad_inputs=("Ids",),
            grad_infer_shape=_emb_pool_grad_shape)
