"""More normalizations and per-channel ops: norm (l2_normalize), group_norm, lrn, prelu,
maxout, affine_channel.

Gradients are explicit kernels (the math written out, or aten's
``native_group_norm_backward``), never torch autograd.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from .registry import Meta, register_op

__all__: list[str] = []


def _axis(op: str, axis: int, ndim: int) -> int:
    if not -ndim <= axis < ndim:
        raise ValueError(f"{op}: axis {axis} is out of range for an input of rank {ndim}")
    return axis % ndim


# ----------------------------------------------------------------------------- norm


def _norm_shape(ins: dict, attrs: dict) -> dict:
    x = ins["X"]
    axis = _axis("norm", int(attrs["axis"]), len(x.shape))
    norm = tuple(1 if i == axis else d for i, d in enumerate(x.shape))
    return {"Out": x, "Norm": Meta(norm, x.dtype)}


def _norm(ins: dict, attrs: dict, ctx: Any) -> dict:
    """``Out = X / sqrt(sum(X^2, axis) + epsilon)`` (Fluid adds epsilon inside the root)."""
    x = ins["X"]
    axis = _axis("norm", int(attrs["axis"]), x.dim())
    norm = torch.sqrt((x * x).sum(axis, keepdim=True) + float(attrs["epsilon"]))
    return {"Out": x / norm, "Norm": norm}


def _norm_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, norm, dout = ins["X"], ins["Norm"], ins["Out@GRAD"]
    axis = _axis("norm", int(attrs["axis"]), x.dim())
    y = x / norm
    return {"X@GRAD": (dout - y * (dout * y).sum(axis, keepdim=True)) / norm}


register_op("norm", inputs=("X",), outputs=("Out", "Norm"),
            attrs={"axis": 1, "epsilon": 1e-10, "is_test": False},
            infer_shape=_norm_shape, kernel=_norm, grad_kernel=_norm_grad,
            grad_uses=("X", "Norm"), share_lod=("X", "Out"))

# ----------------------------------------------------------------------------- group_norm


def _groups(op_attrs: dict, c: int) -> int:
    g = int(op_attrs["groups"])
    if g <= 0 or (c != -1 and c % g):
        raise ValueError(f"group_norm: the {c} channels of X must be divisible by groups={g}")
    return g


def _group_norm_shape(ins: dict, attrs: dict) -> dict:
    x = ins["X"]
    if len(x.shape) < 2:
        raise ValueError(f"group_norm: X must be at least 2-D (N, C, ...), "
                         f"got {list(x.shape)}")
    if attrs["data_layout"] != "NCHW":
        raise ValueError(f"group_norm: only data_layout 'NCHW' is supported, "
                         f"got {attrs['data_layout']!r}")
    c = x.shape[1]
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


def _group_norm(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, eps = ins["X"], float(attrs["epsilon"])
    n, c, hw = _gn_dims(x)
    g = _groups(attrs, c)
    y, mean, rstd = torch.ops.aten.native_group_norm(x.contiguous(), ins.get("Scale"),
                                                     ins.get("Bias"), n, c, hw, g, eps)
    # Fluid's Variance output is the biased variance, not aten's reciprocal std.
    return {"Y": y, "Mean": mean, "Variance": rstd.pow(-2) - eps}


def _group_norm_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, dy, scale = ins["X"], ins["Y@GRAD"], ins.get("Scale")
    n, c, hw = _gn_dims(x)
    g = _groups(attrs, c)
    rstd = torch.rsqrt(ins["Variance"] + float(attrs["epsilon"]))
    mask = ["X" in ctx.need, "Scale" in ctx.need, "Bias" in ctx.need]
    dx, dscale, dbias = torch.ops.aten.native_group_norm_backward(
        dy.contiguous(), x.contiguous(), ins["Mean"], rstd, scale, n, c, hw, g, mask)
    out = {}
    for slot, value in (("X", dx), ("Scale", dscale), ("Bias", dbias)):
        if slot in ctx.need:
            out[slot + "@GRAD"] = value
    return out


register_op("group_norm", inputs=("X", "Scale?", "Bias?"), outputs=("Y", "Mean", "Variance"),
            attrs={"epsilon": 1e-5, "groups": 1, "data_layout": "NCHW"},
            infer_shape=_group_norm_shape, kernel=_group_norm, grad_kernel=_group_norm_grad,
            grad_uses=("X", "Scale", "Bias", "Mean", "Variance"))

# ----------------------------------------------------------------------------- lrn


def _window_sum(t: torch.Tensor, before: int, after: int) -> torch.Tensor:
    """Sum over channels ``[c - before, c + after]`` (zero outside), for NCHW ``t``."""
    padded = F.pad(t, [0, 0, 0, 0, before, after])
    c = t.shape[1]
    return sum(padded[:, d:d + c] for d in range(before + after + 1))


def _lrn_pads(attrs: dict) -> tuple[int, int]:
    n = int(attrs["n"])
    return (n - 1) // 2, n - 1 - (n - 1) // 2


def _lrn_shape(ins: dict, attrs: dict) -> dict:
    x = ins["X"]
    if len(x.shape) != 4:
        raise ValueError(f"lrn: X must be 4-D NCHW, got shape {list(x.shape)}")
    if int(attrs["n"]) <= 0:
        raise ValueError(f"lrn: n must be > 0, got {attrs['n']}")
    return {"Out": x, "MidOut": x}


def _lrn(ins: dict, attrs: dict, ctx: Any) -> dict:
    """Fluid's LRN: ``mid = k + alpha * sum_window(x^2)`` (alpha not divided by n, unlike
    torch's ``local_response_norm``), ``out = x * mid^-beta``."""
    x = ins["X"]
    before, after = _lrn_pads(attrs)
    mid = float(attrs["k"]) + float(attrs["alpha"]) * _window_sum(x * x, before, after)
    return {"Out": x * mid.pow(-float(attrs["beta"])), "MidOut": mid}


def _lrn_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, out, mid, dout = ins["X"], ins["Out"], ins["MidOut"], ins["Out@GRAD"]
    alpha, beta = float(attrs["alpha"]), float(attrs["beta"])
    before, after = _lrn_pads(attrs)
    # channel c feeds the windows of channels [c - after, c + before]
    back = _window_sum(dout * out / mid, after, before)
    return {"X@GRAD": dout * mid.pow(-beta) - 2.0 * alpha * beta * x * back}


register_op("lrn", inputs=("X",), outputs=("Out", "MidOut"),
            attrs={"n": 5, "k": 2.0, "alpha": 1e-4, "beta": 0.75, "is_test": False,
                   "data_format": "AnyLayout"},
            infer_shape=_lrn_shape, kernel=_lrn, grad_kernel=_lrn_grad,
            grad_uses=("X", "Out", "MidOut"))

# ----------------------------------------------------------------------------- prelu


def _alpha_view(alpha: torch.Tensor, x: torch.Tensor, mode: str) -> torch.Tensor:
    if mode == "all":
        return alpha.reshape(())
    if mode == "channel":
        return alpha.reshape(1, -1, *([1] * (x.dim() - 2)))
    return alpha.reshape(1, *x.shape[1:])


def _prelu_shape(ins: dict, attrs: dict) -> dict:
    x, alpha, mode = ins["X"], ins["Alpha"], attrs["mode"]
    size = 1
    for d in alpha.shape:
        size *= d
    if mode == "all":
        want = 1
    elif mode == "channel":
        want = x.shape[1]
    elif mode == "element":
        want = 1
        for d in x.shape[1:]:
            want = -1 if d == -1 or want == -1 else want * d
    else:
        raise ValueError(f"prelu: mode must be 'all', 'channel' or 'element', got {mode!r}")
    if want != -1 and size != want:
        raise ValueError(f"prelu: mode {mode!r} needs {want} alpha values for X "
                         f"{list(x.shape)}, got Alpha {list(alpha.shape)}")
    return {"Out": x}


def _prelu(ins: dict, attrs: dict, ctx: Any) -> dict:
    x = ins["X"]
    alpha = _alpha_view(ins["Alpha"], x, attrs["mode"]).to(x.dtype)
    return {"Out": torch.where(x > 0, x, alpha * x)}


def _prelu_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, alpha, dout = ins["X"], ins["Alpha"], ins["Out@GRAD"]
    mode = attrs["mode"]
    pos = x > 0
    out = {}
    if "X" in ctx.need:
        a = _alpha_view(alpha, x, mode).to(x.dtype)
        out["X@GRAD"] = torch.where(pos, dout, a * dout)
    if "Alpha" in ctx.need:
        g = torch.where(pos, torch.zeros_like(x), dout * x)
        if mode == "all":
            g = g.sum()
        elif mode == "channel":
            g = g.sum(dim=[d for d in range(x.dim()) if d != 1])
        else:
            g = g.sum(0)
        out["Alpha@GRAD"] = g.reshape(alpha.shape).to(alpha.dtype)
    return out


register_op("prelu", inputs=("X", "Alpha"), outputs=("Out",), attrs={"mode": "all"},
            infer_shape=_prelu_shape, kernel=_prelu, grad_kernel=_prelu_grad,
            grad_uses=("X", "Alpha"), share_lod=("X", "Out"))

# ----------------------------------------------------------------------------- maxout


def _maxout_shape(ins: dict, attrs: dict) -> dict:
    x, g = ins["X"], int(attrs["groups"])
    if len(x.shape) != 4:
        raise ValueError(f"maxout: X must be 4-D NCHW, got shape {list(x.shape)}")
    c = x.shape[1]
    if g <= 0 or (c != -1 and c % g):
        raise ValueError(f"maxout: the {c} channels of X must be divisible by groups={g}")
    return {"Out": Meta((x.shape[0], -1 if c == -1 else c // g, *x.shape[2:]), x.dtype)}


def _grouped(x: torch.Tensor, g: int) -> torch.Tensor:
    n, c, h, w = x.shape
    return x.reshape(n, c // g, g, h, w)


def _maxout_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    """The gradient goes to the first maximal element of each group (Fluid's kernel)."""
    x, dout, g = ins["X"], ins["Out@GRAD"], int(attrs["groups"])
    idx = _grouped(x, g).argmax(dim=2, keepdim=True)
    dx = torch.zeros_like(_grouped(x, g)).scatter_(2, idx, dout.unsqueeze(2))
    return {"X@GRAD": dx.reshape(x.shape)}


register_op("maxout", inputs=("X",), outputs=("Out",), attrs={"groups": 1},
            infer_shape=_maxout_shape,
            kernel=lambda ins, attrs, ctx: {"Out": _grouped(
                ins["X"], int(attrs["groups"])).amax(dim=2)},
            grad_kernel=_maxout_grad, grad_uses=("X",))

# ----------------------------------------------------------------------------- affine_channel


def _channel_view(t: torch.Tensor, x: torch.Tensor, layout: str) -> torch.Tensor:
    if layout == "NHWC":
        return t.reshape(*([1] * (x.dim() - 1)), -1)
    return t.reshape(1, -1, *([1] * (x.dim() - 2)))


def _affine_channel_shape(ins: dict, attrs: dict) -> dict:
    x, layout = ins["X"], attrs["data_layout"]
    if layout not in ("NCHW", "NHWC", "AnyLayout"):
        raise ValueError(f"affine_channel: data_layout must be 'NCHW' or 'NHWC', "
                         f"got {layout!r}")
    c = x.shape[-1 if layout == "NHWC" else 1]
    for slot in ("Scale", "Bias"):
        shape = ins[slot].shape
        if len(shape) != 1 or shape[0] not in (c, -1):
            raise ValueError(f"affine_channel: {slot} must have shape [{c}] (the channels of "
                             f"X {list(x.shape)}), got {list(shape)}")
    return {"Out": x}


def _affine_channel_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, scale, dout, layout = ins["X"], ins["Scale"], ins["Out@GRAD"], attrs["data_layout"]
    axis = x.dim() - 1 if layout == "NHWC" else 1
    dims = [d for d in range(x.dim()) if d != axis]
    out = {}
    if "X" in ctx.need:
        out["X@GRAD"] = dout * _channel_view(scale, x, layout)
    if "Scale" in ctx.need:
        out["Scale@GRAD"] = (dout * x).sum(dims)
    if "Bias" in ctx.need:
        out["Bias@GRAD"] = dout.sum(dims)
    return out


register_op("affine_channel", inputs=("X", "Scale", "Bias"), outputs=("Out",),
            attrs={"data_layout": "AnyLayout"}, infer_shape=_affine_channel_shape,
            kernel=lambda ins, attrs, ctx: {"Out": ins["X"] * _channel_view(
                ins["Scale"], ins["X"], attrs["data_layout"]) + _channel_view(
                ins["Bias"], ins["X"], attrs["data_layout"])},
            grad_kernel=_affine_channel_grad, grad_uses=("X", "Scale", "Bias"))

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

# Fluid's ShareLoD: l2_normalize and prelu over sequence rows keep the sequences.
