"""Normalization ops: batch_norm, layer_norm, group_norm and instance_norm, forward and
explicit gradients (the math written out, or aten's ``native_group_norm_backward``).

batch_norm keeps its batch statistics in small public helpers (``channel_sums``,
``stats_from_sums``, ``grad_sums``, ``input_grad_from_sums``) so that a synchronized variant
can all-reduce the per-channel sums across devices and reuse the rest unchanged::

    s, ss, n = channel_sums(x, "NCHW")         # all-reduce s, ss and n here
    mean, var = stats_from_sums(s, ss, n, x.dtype)
"""

from __future__ import annotations

from typing import Any

import torch

from .common import numel
from .registry import Meta, register_op

__all__ = ["channel_axis", "channel_sums", "stats_from_sums", "update_moving_stats", "grad_sums",
           "input_grad_from_sums", "batch_norm_forward"]

# ----------------------------------------------------------------------------- batch_norm


def channel_axis(ndim: int, layout: str) -> int:
    """The channel dim: 1 for NCHW (and for 2-D ``[N, C]`` input), last for NHWC."""
    if layout == "NHWC" and ndim > 2:
        return ndim - 1
    return 1


def _per_channel(t: torch.Tensor, ndim: int, axis: int) -> torch.Tensor:
    """View a ``[C]`` tensor so it broadcasts against the input along ``axis``."""
    shape = [1] * ndim
    shape[axis] = -1
    return t.reshape(shape)


def channel_sums(x: torch.Tensor, layout: str) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Per-channel ``sum(x)``, ``sum(x*x)`` (accumulated in float64) and the element count."""
    axis = channel_axis(x.dim(), layout)
    dims = [d for d in range(x.dim()) if d != axis]
    xf = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
    s = xf.sum(dims, dtype=torch.float64)
    ss = (xf * xf).sum(dims, dtype=torch.float64)
    return s, ss, x.numel() // x.shape[axis]


def stats_from_sums(s: torch.Tensor, ss: torch.Tensor, count: int,
                    dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Batch mean and biased variance (Fluid's convention, also for the moving average)."""
    if count <= 0:
        raise ValueError("batch_norm: the batch is empty; there are no statistics to compute")
    mean = s / count
    var = (ss / count - mean * mean).clamp_min(0.0)
    return mean.to(dtype), var.to(dtype)


def update_moving_stats(ctx: Any, moving_mean: torch.Tensor, moving_var: torch.Tensor,
                        mean: torch.Tensor, var: torch.Tensor,
                        momentum: float) -> tuple[torch.Tensor, torch.Tensor]:
    """``moving = moving * momentum + batch * (1 - momentum)`` for the mean and variance.

    In place when ``MeanOut`` is ``Mean`` (as the layer builds it: the persistable is
    updated); out of place otherwise, so a fed array is never modified.
    """
    outs = []
    for moving, batch, src, dst in ((moving_mean, mean, "Mean", "MeanOut"),
                                    (moving_var, var, "Variance", "VarianceOut")):
        batch = batch.to(moving.dtype)
        if ctx.op.input(src) == ctx.op.output(dst):
            outs.append(moving.mul_(momentum).add_(batch, alpha=1.0 - momentum))
        else:
            outs.append(moving * momentum + batch * (1.0 - momentum))
    return outs[0], outs[1]


def batch_norm_forward(x: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor,
                       mean: torch.Tensor, inv_std: torch.Tensor, layout: str) -> torch.Tensor:
    """``(x - mean) * inv_std * scale + bias`` per channel."""
    axis, nd = channel_axis(x.dim(), layout), x.dim()
    a = scale * inv_std
    return x * _per_channel(a, nd, axis) + _per_channel(bias - mean * a, nd, axis)


def grad_sums(dy: torch.Tensor, xhat: torch.Tensor,
              layout: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-channel ``sum(dy)`` and ``sum(dy * xhat)``: the Bias and Scale gradients."""
    axis = channel_axis(dy.dim(), layout)
    dims = [d for d in range(dy.dim()) if d != axis]
    return dy.sum(dims), (dy * xhat).sum(dims)


def input_grad_from_sums(dy: torch.Tensor, xhat: torch.Tensor, scale: torch.Tensor,
                         inv_std: torch.Tensor, sum_dy: torch.Tensor,
                         sum_dy_xhat: torch.Tensor, count: int, layout: str) -> torch.Tensor:
    """dX with batch statistics: ``scale*inv_std * (dy - mean(dy) - xhat*mean(dy*xhat))``."""
    axis, nd = channel_axis(dy.dim(), layout), dy.dim()
    return _per_channel(scale * inv_std, nd, axis) * (
        dy - _per_channel(sum_dy / count, nd, axis)
        - xhat * _per_channel(sum_dy_xhat / count, nd, axis))


def _batch_norm_shape(ins: dict, attrs: dict) -> dict:
    x = ins["X"]
    if len(x.shape) < 2:
        raise ValueError(f"batch_norm: X must be at least 2-D, got shape {list(x.shape)}")
    if attrs["data_layout"] not in ("NCHW", "NHWC", "AnyLayout"):
        raise ValueError(f"batch_norm: data_layout must be 'NCHW' or 'NHWC', "
                         f"got {attrs['data_layout']!r}")
    c = x.shape[channel_axis(len(x.shape), attrs["data_layout"])]
    for slot in ("Scale", "Bias", "Mean", "Variance"):
        shape = ins[slot].shape
        if len(shape) != 1 or (c != -1 and shape[0] not in (c, -1)):
            raise ValueError(f"batch_norm: {slot} must have shape [{c}] (the channels of X "
                             f"{list(x.shape)}), got {list(shape)}")
    stat = Meta((c,), ins["Mean"].dtype)
    return {"Y": x, "MeanOut": stat, "VarianceOut": stat, "SavedMean": Meta((c,), x.dtype),
            "SavedVariance": Meta((c,), x.dtype)}


def _uses_global_stats(attrs: dict) -> bool:
    return bool(attrs["is_test"] or attrs["use_global_stats"])


def _batch_norm(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, scale, bias = ins["X"], ins["Scale"], ins["Bias"]
    moving_mean, moving_var = ins["Mean"], ins["Variance"]
    layout, eps = attrs["data_layout"], float(attrs["epsilon"])
    if _uses_global_stats(attrs):
        mean, var = moving_mean.to(x.dtype), moving_var.to(x.dtype)
        mean_out, var_out = moving_mean, moving_var
    else:
        s, ss, n = channel_sums(x, layout)
        mean, var = stats_from_sums(s, ss, n, x.dtype)
        mean_out, var_out = update_moving_stats(ctx, moving_mean, moving_var, mean, var,
                                                float(attrs["momentum"]))
    inv_std = torch.rsqrt(var + eps)
    y = batch_norm_forward(x, scale.to(x.dtype), bias.to(x.dtype), mean, inv_std, layout)
    # SavedVariance holds the inverse std, as in Fluid; the gradient reads it back.
    return {"Y": y, "MeanOut": mean_out, "VarianceOut": var_out, "SavedMean": mean,
            "SavedVariance": inv_std}


def _batch_norm_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, scale, dy = ins["X"], ins["Scale"], ins["Y@GRAD"]
    mean, inv_std = ins["SavedMean"], ins["SavedVariance"]
    layout = attrs["data_layout"]
    if dy is None:
        dy = torch.zeros_like(x)
    axis, nd = channel_axis(x.dim(), layout), x.dim()
    xhat = (x - _per_channel(mean, nd, axis)) * _per_channel(inv_std, nd, axis)
    sum_dy, sum_dy_xhat = grad_sums(dy, xhat, layout)
    out = {}
    if "X" in ctx.need:
        s = scale.to(x.dtype)
        if _uses_global_stats(attrs):
            out["X@GRAD"] = dy * _per_channel(s * inv_std, nd, axis)
        else:
            count = x.numel() // x.shape[axis]
            out["X@GRAD"] = input_grad_from_sums(dy, xhat, s, inv_std, sum_dy, sum_dy_xhat,
                                                 count, layout)
    if "Scale" in ctx.need:
        out["Scale@GRAD"] = sum_dy_xhat.to(scale.dtype)
    if "Bias" in ctx.need:
        out["Bias@GRAD"] = sum_dy.to(scale.dtype)
    return out


register_op("batch_norm", inputs=("X", "Scale", "Bias", "Mean", "Variance"),
            outputs=("Y", "MeanOut", "VarianceOut", "SavedMean", "SavedVariance"),
            attrs={"momentum": 0.9, "epsilon": 1e-5, "is_test": False, "data_layout": "NCHW",
                   "use_global_stats": False},
            infer_shape=_batch_norm_shape, kernel=_batch_norm, grad_kernel=_batch_norm_grad,
            grad_uses=("X", "Scale", "SavedMean", "SavedVariance"),
            no_grad_inputs=("Mean", "Variance"),
            grad_infer_shape=lambda ins, attrs: {"X@GRAD": ins["X"], "Scale@GRAD": ins["Scale"],
                                                 "Bias@GRAD": ins["Scale"]}, share_lod=("X", "Y"),
            fresh_output=True)

# ----------------------------------------------------------------------------- layer_norm


def _layer_norm_shape(ins: dict, attrs: dict) -> dict:
    x = ins["X"]
    k = attrs["begin_norm_axis"]
    if not 0 < k < len(x.shape):
        raise ValueError(f"layer_norm: begin_norm_axis must be in [1, {len(x.shape) - 1}] for "
                         f"X of shape {list(x.shape)}, got {k}")
    left = -1 if -1 in x.shape[:k] else numel(x.shape[:k])
    right = -1 if -1 in x.shape[k:] else numel(x.shape[k:])
    for slot in ("Scale", "Bias"):
        meta = ins.get(slot)
        if meta is not None and right != -1 and numel(meta.shape) not in (right, -1):
            raise ValueError(f"layer_norm: {slot} must have {right} elements (X {list(x.shape)} "
                             f"from axis {k}), got shape {list(meta.shape)}")
    stat = Meta((left,), x.dtype)
    return {"Y": x, "Mean": stat, "Variance": stat}


def _layer_norm(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, scale, bias = ins["X"], ins["Scale"], ins["Bias"]
    k = attrs["begin_norm_axis"]
    x2 = x.reshape(numel(x.shape[:k]), -1)
    mean = x2.mean(1)
    centered = x2 - mean.unsqueeze(1)
    var = (centered * centered).mean(1)
    y = centered * torch.rsqrt(var + float(attrs["epsilon"])).unsqueeze(1)
    if scale is not None:
        y = y * scale.reshape(-1)
    if bias is not None:
        y = y + bias.reshape(-1)
    return {"Y": y.reshape(x.shape), "Mean": mean, "Variance": var}


def _layer_norm_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, scale, dy = ins["X"], ins["Scale"], ins["Y@GRAD"]
    k = attrs["begin_norm_axis"]
    x2 = x.reshape(numel(x.shape[:k]), -1)
    dy2 = torch.zeros_like(x2) if dy is None else dy.reshape(x2.shape)
    inv = torch.rsqrt(ins["Variance"] + float(attrs["epsilon"])).unsqueeze(1)
    xhat = (x2 - ins["Mean"].unsqueeze(1)) * inv
    out = {}
    if "X" in ctx.need:
        dxhat = dy2 * scale.reshape(-1) if scale is not None else dy2
        dx = inv * (dxhat - dxhat.mean(1, keepdim=True)
                    - xhat * (dxhat * xhat).mean(1, keepdim=True))
        out["X@GRAD"] = dx.reshape(x.shape)
    if "Scale" in ctx.need:
        out["Scale@GRAD"] = (dy2 * xhat).sum(0).reshape(scale.shape)
    if "Bias" in ctx.need:
        out["Bias@GRAD"] = dy2.sum(0).reshape(ins["Bias"].shape)
    return out


register_op("layer_norm", inputs=("X", "Scale?", "Bias?"), outputs=("Y", "Mean", "Variance"),
            attrs={"begin_norm_axis": 1, "epsilon": 1e-5},
            infer_shape=_layer_norm_shape, kernel=_layer_norm, grad_kernel=_layer_norm_grad,
            grad_uses=("X", "Scale", "Bias", "Mean", "Variance"), share_lod=("X", "Y"))


# ----------------------------------------------------------------------------- group_norm


def _groups(op_attrs: dict, c: int) -> int:
    g = int(op_attrs["groups"])
    if g <= 0 or (c != -1 and c % g):
        raise ValueError(f"group_norm: the {c} channels of X must be divisible by groups={g}")
    return g


def _gn_last(attrs: dict) -> bool:
    """Fluid's data_layout: 'NCHW' (channels at dim 1) or 'NHWC' (channels last)."""
    layout = str(attrs["data_layout"]).upper()
    if layout not in ("NCHW", "NHWC", "ANYLAYOUT"):
        raise ValueError(f"group_norm: data_layout must be 'NCHW' or 'NHWC', "
                         f"got {attrs['data_layout']!r}")
    return layout == "NHWC"


def _group_norm_shape(ins: dict, attrs: dict) -> dict:
    x = ins["X"]
    if len(x.shape) < 2:
        raise ValueError(f"group_norm: X must be at least 2-D (N, C, ...), "
                         f"got {list(x.shape)}")
    c = x.shape[-1] if _gn_last(attrs) else x.shape[1]
    g = _groups(attrs, c)
    for slot in ("Scale", "Bias"):
        meta = ins.get(slot)
        if meta is not None and (len(meta.shape) != 1 or meta.shape[0] not in (c, -1)):
            raise ValueError(f"group_norm: {slot} must have shape [{c}] (the channels of X "
                             f"{list(x.shape)}), got {list(meta.shape)}")
    stat = Meta((x.shape[0], g), x.dtype)
    return {"Y": x, "Mean": stat, "Variance": stat}


def _gn_dims(x: torch.Tensor) -> tuple[int, int, int]:
    hw = 1
    for d in x.shape[2:]:
        hw *= d
    return x.shape[0], x.shape[1], hw


def _channel_first(x: torch.Tensor, last: bool) -> torch.Tensor:
    return x.movedim(-1, 1).contiguous() if last else x.contiguous()


def _channel_back(x: torch.Tensor, last: bool) -> torch.Tensor:
    return x.movedim(1, -1).contiguous() if last else x


def _group_norm(ins: dict, attrs: dict, ctx: Any) -> dict:
    last = _gn_last(attrs)
    x, eps = _channel_first(ins["X"], last), float(attrs["epsilon"])
    n, c, hw = _gn_dims(x)
    g = _groups(attrs, c)
    y, mean, rstd = torch.ops.aten.native_group_norm(x, ins.get("Scale"),
                                                     ins.get("Bias"), n, c, hw, g, eps)
    # Fluid's Variance output is the biased variance, not aten's reciprocal std.
    return {"Y": _channel_back(y, last), "Mean": mean, "Variance": rstd.pow(-2) - eps}


def _group_norm_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    last = _gn_last(attrs)
    x, dy, scale = _channel_first(ins["X"], last), _channel_first(ins["Y@GRAD"], last), \
        ins.get("Scale")
    n, c, hw = _gn_dims(x)
    g = _groups(attrs, c)
    rstd = torch.rsqrt(ins["Variance"] + float(attrs["epsilon"]))
    mask = ["X" in ctx.need, "Scale" in ctx.need, "Bias" in ctx.need]
    dx, dscale, dbias = torch.ops.aten.native_group_norm_backward(
        dy, x, ins["Mean"], rstd, scale, n, c, hw, g, mask)
    out = {}
    for slot, value in (("X", dx), ("Scale", dscale), ("Bias", dbias)):
        if slot in ctx.need:
            out[slot + "@GRAD"] = _channel_back(value, last) if slot == "X" else value
    return out


register_op("group_norm", inputs=("X", "Scale?", "Bias?"), outputs=("Y", "Mean", "Variance"),
            attrs={"epsilon": 1e-5, "groups": 1, "data_layout": "NCHW"},
            infer_shape=_group_norm_shape, kernel=_group_norm, grad_kernel=_group_norm_grad,
            grad_uses=("X", "Scale", "Bias", "Mean", "Variance"))


# ----------------------------------------------------------------------------- instance_norm


def _instance_norm_shape(ins: dict, attrs: dict) -> dict:
    x = ins["X"]
    if len(x.shape) < 3:
        raise ValueError(f"instance_norm: X must be at least 3-D (N, C, ...), "
                         f"got {list(x.shape)}")
    c = x.shape[1]
    for slot in ("Scale", "Bias"):
        meta = ins.get(slot)
        if meta is not None and (len(meta.shape) != 1 or meta.shape[0] not in (c, -1)):
            raise ValueError(f"instance_norm: {slot} must have shape [{c}] (the channels of X "
                             f"{list(x.shape)}), got {list(meta.shape)}")
    n = -1 if -1 in (x.shape[0], c) else x.shape[0] * c
    stat = Meta((n,), x.dtype)
    return {"Y": x, "SavedMean": stat, "SavedVariance": stat}


def _instance_norm(ins: dict, attrs: dict, ctx: Any) -> dict:
    """Group norm with one channel per group; ``SavedVariance`` is the inverse std (Fluid)."""
    x = ins["X"]
    n, c, hw = _gn_dims(x)
    y, mean, rstd = torch.ops.aten.native_group_norm(x.contiguous(), ins.get("Scale"),
                                                     ins.get("Bias"), n, c, hw, c,
                                                     float(attrs["epsilon"]))
    return {"Y": y, "SavedMean": mean.reshape(-1), "SavedVariance": rstd.reshape(-1)}


def _instance_norm_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, dy = ins["X"], ins["Y@GRAD"]
    n, c, hw = _gn_dims(x)
    mask = ["X" in ctx.need, "Scale" in ctx.need, "Bias" in ctx.need]
    grads = torch.ops.aten.native_group_norm_backward(
        dy.contiguous(), x.contiguous(), ins["SavedMean"].reshape(n, c),
        ins["SavedVariance"].reshape(n, c), ins.get("Scale"), n, c, hw, c, mask)
    return {slot + "@GRAD": g for slot, g in zip(("X", "Scale", "Bias"), grads)
            if slot in ctx.need}


register_op("instance_norm", inputs=("X", "Scale?", "Bias?"),
            outputs=("Y", "SavedMean", "SavedVariance"), attrs={"epsilon": 1e-5},
            infer_shape=_instance_norm_shape, kernel=_instance_norm,
            grad_kernel=_instance_norm_grad,
            grad_uses=("X", "Scale", "Bias", "SavedMean", "SavedVariance"))
