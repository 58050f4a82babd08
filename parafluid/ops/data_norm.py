"""``data_norm`` (Fluid 1.6): normalization by accumulated data statistics.

The statistics are three parameters of ``C`` values: ``BatchSize`` (a count),
``BatchSum`` and ``BatchSquareSum``. The forward uses them, never the batch:
``Means = BatchSum / BatchSize``, ``Scales = sqrt(BatchSize / BatchSquareSum)``,
``Y = (X - Means) * Scales`` for ``X`` of shape ``[N, C]``. The gradient op gives ``X``
its true gradient ``Y@GRAD * Scales`` and gives the statistics this batch's summaries as
their "gradients", as Fluid does: ``N`` for the size, the column sums of ``X`` for the sum
and ``sum((X - Means)^2) + N * epsilon`` for the square sum; an optimizer step then folds
them into the statistics.
"""

from __future__ import annotations

from typing import Any

import torch

from .registry import Meta, register_op

__all__: list[str] = []

_STATS = ("BatchSize", "BatchSum", "BatchSquareSum")


def _shape(ins: dict, attrs: dict) -> dict:
    x = ins["X"]
    if len(x.shape) != 2:
        raise ValueError(f"data_norm: X must be 2-D [N, C], got shape {list(x.shape)}")
    c = x.shape[1]
    for slot in _STATS:
        shape = list(ins[slot].shape)
        if len(shape) != 1 or (c != -1 and shape[0] not in (-1, c)):
            raise ValueError(f"data_norm: {slot} must have shape [{c}] (one value per "
                             f"column of X), got {shape}")
    return {"Y": Meta(x.shape, x.dtype), "Means": Meta((c,), x.dtype),
            "Scales": Meta((c,), x.dtype)}


def _data_norm(ins: dict, attrs: dict, ctx: Any) -> dict:
    x = ins["X"]
    means = ins["BatchSum"] / ins["BatchSize"]
    scales = torch.sqrt(ins["BatchSize"] / ins["BatchSquareSum"])
    return {"Y": (x - means) * scales, "Means": means, "Scales": scales}


def _grad_shape(ins: dict, attrs: dict) -> dict:
    stat = ins["Means"]
    return {"X@GRAD": ins["X"], **{slot + "@GRAD": stat for slot in _STATS}}


def _data_norm_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, means = ins["X"], ins["Means"]
    n = x.shape[0]
    return {"X@GRAD": ins["Y@GRAD"] * ins["Scales"],
            "BatchSize@GRAD": torch.full_like(means, float(n)),
            "BatchSum@GRAD": x.sum(0),
            "BatchSquareSum@GRAD": ((x - means) ** 2).sum(0) + n * attrs["epsilon"]}


register_op("data_norm", inputs=("X", *_STATS), outputs=("Y", "Means", "Scales"),
            attrs={"epsilon": 1e-4}, infer_shape=_shape, kernel=_data_norm,
            grad_kernel=_data_norm_grad, grad_uses=("X", "Means", "Scales"),
            grad_infer_shape=_grad_shape)
