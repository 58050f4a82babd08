"""``match_matrix_tensor`` (Fluid 1.6): a bilinear match of two batches of LoD sequences.

``X`` ``[Tx, h]`` and ``Y`` ``[Ty, h]`` hold the same number of sequences (one LoD level
each); ``W`` is ``[h, dim_t, h]``. For the ``b``-th pair of sequences ``x_b`` (``lx`` rows) and
``y_b`` (``ly`` rows) and each channel ``t``, the match matrix is
``x_b @ W[:, t, :] @ y_b^T`` (``[lx, ly]``). ``Out`` is one column holding, sequence pair by
pair, the ``dim_t`` matrices row-major (LoD: ``dim_t * lx * ly`` rows per pair); ``Tmp`` is
``X @ W`` viewed as ``[Tx, dim_t * h]``, the intermediate Fluid exposes. Gradients reach
``X``, ``Y`` and ``W``.
"""

from __future__ import annotations

from typing import Any

import torch

from ..lod import attach_lod, require_lod
from .registry import Meta, register_op

__all__: list[str] = []


def _shape(ins: dict, attrs: dict) -> dict:
    x, y, w = ins["X"], ins["Y"], ins["W"]
    h = x.shape[-1]
    if len(x.shape) != 2 or len(y.shape) != 2 or y.shape[1] != h:
        raise ValueError(f"match_matrix_tensor: X [Tx, h] and Y [Ty, h] must be 2-D with the "
                         f"same width, got {list(x.shape)} and {list(y.shape)}")
    if tuple(w.shape) != (h, attrs["dim_t"], h):
        raise ValueError(f"match_matrix_tensor: W must be [h, dim_t, h] = "
                         f"[{h}, {attrs['dim_t']}, {h}], got {list(w.shape)}")
    return {"Out": Meta((-1, 1), x.dtype), "Tmp": Meta((x.shape[0], attrs["dim_t"] * h), x.dtype)}


def _pairs(ins: dict) -> list[tuple[int, int, int, int]]:
    xo = require_lod("match_matrix_tensor", "X", ins["X"])
    yo = require_lod("match_matrix_tensor", "Y", ins["Y"])
    if len(xo) != len(yo):
        raise ValueError(f"match_matrix_tensor: X holds {len(xo) - 1} sequences but Y "
                         f"{len(yo) - 1}; they are matched pair by pair")
    return [(xo[b], xo[b + 1], yo[b], yo[b + 1]) for b in range(len(xo) - 1)]


def _match(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, y, w = ins["X"], ins["Y"], ins["W"]
    h, dim_t = x.shape[1], attrs["dim_t"]
    tmp = x @ w.reshape(h, dim_t * h)
    parts, offsets = [], [0]
    for x0, x1, y0, y1 in _pairs(ins):
        # [lx, dim_t, h] x [ly, h] -> [dim_t, lx, ly]
        m = torch.einsum("itk,jk->tij", tmp[x0:x1].reshape(x1 - x0, dim_t, h), y[y0:y1])
        parts.append(m.reshape(-1))
        offsets.append(offsets[-1] + m.numel())
    out = torch.cat(parts).reshape(-1, 1) if parts else x.new_zeros((0, 1))
    return {"Out": attach_lod(out, [offsets]), "Tmp": tmp}


def _match_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, y, w, dout = ins["X"], ins["Y"], ins["W"], ins["Out@GRAD"].reshape(-1)
    h, dim_t = x.shape[1], attrs["dim_t"]
    w2 = w.reshape(h, dim_t * h)
    tmp = x @ w2
    dtmp, dy = torch.zeros_like(tmp), torch.zeros_like(y)
    at = 0
    for x0, x1, y0, y1 in _pairs(ins):
        lx, ly = x1 - x0, y1 - y0
        g = dout[at:at + dim_t * lx * ly].reshape(dim_t, lx, ly)
        at += dim_t * lx * ly
        dtmp[x0:x1] = torch.einsum("tij,jk->itk", g, y[y0:y1]).reshape(lx, dim_t * h)
        dy[y0:y1] = torch.einsum("tij,itk->jk", g, tmp[x0:x1].reshape(lx, dim_t, h))
    return {"X@GRAD": dtmp @ w2.t(), "Y@GRAD": dy, "W@GRAD": (x.t() @ dtmp).reshape(w.shape)}


register_op("match_matrix_tensor", inputs=("X", "Y", "W"), outputs=("Out", "Tmp"),
            attrs={"dim_t": 1}, infer_shape=_shape, kernel=_match, grad_kernel=_match_grad,
            grad_uses=("X", "Y", "W"),
            no_compile="reads the LoD of X and Y on the host to pair the sequences")
