"""Synchronized batch norm: batch statistics over every device, as four ops around two
all-reduces (written by the ``sync_batch_norm`` pass, see parafluid/passes).

Forward::

    Stats = sync_batch_norm_stats(X)                 # per channel sum, sum of squares, count
    GlobalStats = c_allreduce_sum(Stats)             # over all devices
    Y, MeanOut, ... = sync_batch_norm(X, Scale, Bias, Mean, Variance, GlobalStats)

Backward::

    GradStats = sync_batch_norm_grad_stats(X, SavedMean, SavedVariance, DY)  # sum dy, dy*xhat
    GlobalGradStats = c_allreduce_sum(GradStats)
    X@GRAD, Scale@GRAD, Bias@GRAD = sync_batch_norm_grad(..., GradStats, GlobalGradStats)

``X@GRAD`` uses the global sums and the global count; ``Scale@GRAD`` and ``Bias@GRAD`` are
the *local* sums, because the ordinary gradient all-reduce then adds them up over devices.
With one device the all-reduces are the identity and these ops compute what ``batch_norm``
and ``batch_norm_grad`` compute.
"""

from __future__ import annotations

from typing import Any

import torch

from .norm import (
    batch_norm_forward,
    channel_axis,
    channel_sums,
    grad_sums,
    input_grad_from_sums,
    stats_from_sums,
    update_moving_stats,
)
from .registry import Meta, register_op

__all__: list[str] = []


def _channels(meta: Meta, layout: str) -> int:
    return meta.shape[channel_axis(len(meta.shape), layout)]


def _per_channel(t: torch.Tensor, ndim: int, axis: int) -> torch.Tensor:
    shape = [1] * ndim
    shape[axis] = -1
    return t.reshape(shape)


def _unpack_stats(stats: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, int]:
    c = (stats.numel() - 1) // 2
    return stats[:c], stats[c:2 * c], int(round(float(stats[2 * c])))


def _stats(ins: dict, attrs: dict, ctx: Any) -> dict:
    s, ss, n = channel_sums(ins["X"], attrs["data_layout"])
    count = torch.tensor([float(n)], dtype=torch.float64, device=s.device)
    return {"Stats": torch.cat([s, ss, count])}


register_op("sync_batch_norm_stats", inputs=("X",), outputs=("Stats",),
            attrs={"data_layout": "NCHW"},
            infer_shape=lambda ins, attrs: {"Stats": Meta(
                (2 * _channels(ins["X"], attrs["data_layout"]) + 1,), "float64")},
            kernel=_stats)


def _sync_bn(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, scale, bias = ins["X"], ins["Scale"], ins["Bias"]
    moving_mean, moving_var = ins["Mean"], ins["Variance"]
    layout = attrs["data_layout"]
    s, ss, n = _unpack_stats(ins["GlobalStats"])
    mean, var = stats_from_sums(s, ss, n, x.dtype)
    mean_out, var_out = update_moving_stats(ctx, moving_mean, moving_var, mean, var,
                                            float(attrs["momentum"]))
    inv_std = torch.rsqrt(var + float(attrs["epsilon"]))
    y = batch_norm_forward(x, scale.to(x.dtype), bias.to(x.dtype), mean, inv_std, layout)
    return {"Y": y, "MeanOut": mean_out, "VarianceOut": var_out, "SavedMean": mean,
            "SavedVariance": inv_std}


def _sync_bn_shape(ins: dict, attrs: dict) -> dict:
    x = ins["X"]
    c = _channels(x, attrs["data_layout"])
    stat = Meta((c,), ins["Mean"].dtype)
    return {"Y": x, "MeanOut": stat, "VarianceOut": stat, "SavedMean": Meta((c,), x.dtype),
            "SavedVariance": Meta((c,), x.dtype)}


register_op("sync_batch_norm", inputs=("X", "Scale", "Bias", "Mean", "Variance", "GlobalStats"),
            outputs=("Y", "MeanOut", "VarianceOut", "SavedMean", "SavedVariance"),
            attrs={"momentum": 0.9, "epsilon": 1e-5, "is_test": False, "data_layout": "NCHW",
                   "use_global_stats": False},
            infer_shape=_sync_bn_shape, kernel=_sync_bn)


def _xhat(x: torch.Tensor, mean: torch.Tensor, inv_std: torch.Tensor,
          layout: str) -> torch.Tensor:
    axis, nd = channel_axis(x.dim(), layout), x.dim()
    return (x - _per_channel(mean, nd, axis)) * _per_channel(inv_std, nd, axis)


def _dy(ins: dict) -> torch.Tensor:
    dy = ins["DY"]
    return torch.zeros_like(ins["X"]) if dy is None else dy


def _grad_stats(ins: dict, attrs: dict, ctx: Any) -> dict:
    layout = attrs["data_layout"]
    xhat = _xhat(ins["X"], ins["SavedMean"], ins["SavedVariance"], layout)
    sum_dy, sum_dy_xhat = grad_sums(_dy(ins), xhat, layout)
    return {"GradStats": torch.cat([sum_dy, sum_dy_xhat])}


register_op("sync_batch_norm_grad_stats", inputs=("X", "SavedMean", "SavedVariance", "DY?"),
            outputs=("GradStats",), attrs={"data_layout": "NCHW"},
            infer_shape=lambda ins, attrs: {"GradStats": Meta(
                (2 * _channels(ins["X"], attrs["data_layout"]),), ins["X"].dtype)},
            kernel=_grad_stats)


def _sync_bn_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, scale = ins["X"], ins["Scale"]
    mean, inv_std, layout = ins["SavedMean"], ins["SavedVariance"], attrs["data_layout"]
    c = mean.numel()
    local, glob = ins["GradStats"], ins["GlobalGradStats"]
    out = {}
    if ctx.op.output("X@GRAD"):
        _, _, count = _unpack_stats(ins["GlobalStats"])
        xhat = _xhat(x, mean, inv_std, layout)
        out["X@GRAD"] = input_grad_from_sums(_dy(ins), xhat, scale.to(x.dtype), inv_std,
                                             glob[:c], glob[c:], count, layout)
    if ctx.op.output("Scale@GRAD"):
        out["Scale@GRAD"] = local[c:].to(scale.dtype)
    if ctx.op.output("Bias@GRAD"):
        out["Bias@GRAD"] = local[:c].to(scale.dtype)
    return out


register_op("sync_batch_norm_grad",
            inputs=("X", "Scale", "SavedMean", "SavedVariance", "DY?", "GradStats",
                    "GlobalGradStats", "GlobalStats"),
            outputs=("X@GRAD?", "Scale@GRAD?", "Bias@GRAD?"), attrs={"data_layout": "NCHW"},
            infer_shape=lambda ins, attrs: {"X@GRAD": ins["X"], "Scale@GRAD": ins["Scale"],
                                            "Bias@GRAD": ins["Scale"]},
            kernel=_sync_bn_grad)
