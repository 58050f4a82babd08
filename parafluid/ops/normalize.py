"""Rescaling ops: norm (l2_normalize), lrn, spectral_norm (power iteration on the weight) and
affine_channel (a per-channel scale and bias). Gradients are explicit kernels.
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


# ----------------------------------------------------------------------------- spectral_norm


def _weight_matrix(w: torch.Tensor, dim: int) -> torch.Tensor:
    """``w`` with dim ``dim`` moved first, flattened to ``[h, w]``."""
    return torch.movedim(w, dim, 0).reshape(w.shape[dim], -1)


def _power_iteration(mat: torch.Tensor, u: torch.Tensor, v: torch.Tensor, iters: int,
                     eps: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Fluid's loop from the stored ``U``/``V`` (which the op never writes back)."""
    for _ in range(iters):
        v = mat.t() @ u
        v = v / (v.norm() + eps)
        u = mat @ v
        u = u / (u.norm() + eps)
    return u, v, u @ mat @ v


def _spectral_norm_shape(ins: dict, attrs: dict) -> dict:
    w, u, v = ins["Weight"], ins["U"], ins["V"]
    dim = int(attrs["dim"])
    if not 0 <= dim < len(w.shape) or len(w.shape) < 2:
        raise ValueError(f"spectral_norm: dim {dim} must index Weight {list(w.shape)} "
                         "(at least 2-D)")
    h = w.shape[dim]
    rest = 1
    for i, d in enumerate(w.shape):
        if i != dim:
            rest *= d
    if list(u.shape) != [h] or list(v.shape) != [rest]:
        raise ValueError(f"spectral_norm: U must be [{h}] and V [{rest}] for Weight "
                         f"{list(w.shape)} and dim {dim}, got {list(u.shape)}, {list(v.shape)}")
    return {"Out": w}


def _spectral_parts(ins: dict, attrs: dict) -> tuple[torch.Tensor, ...]:
    w, dim = ins["Weight"], int(attrs["dim"])
    mat = _weight_matrix(w, dim)
    u, v, sigma = _power_iteration(mat, ins["U"].to(w.dtype), ins["V"].to(w.dtype),
                                   int(attrs["power_iters"]), float(attrs["eps"]))
    return mat, u, v, sigma


def _spectral_norm_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    """Fluid's gradient, ``u``, ``v`` held constant: ``G / s - (sum(G * W) / s^2) u v^T``
    (exact once the power iteration has converged)."""
    w, dout, dim = ins["Weight"], ins["Out@GRAD"], int(attrs["dim"])
    mat, u, v, sigma = _spectral_parts(ins, attrs)
    g = _weight_matrix(dout, dim)
    grad = g / sigma - (g * mat).sum() / sigma ** 2 * torch.outer(u, v)
    moved = list(torch.movedim(w, dim, 0).shape)
    return {"Weight@GRAD": torch.movedim(grad.reshape(moved), 0, dim).contiguous()}


register_op("spectral_norm", inputs=("Weight", "U", "V"), outputs=("Out",),
            attrs={"dim": 0, "power_iters": 1, "eps": 1e-12},
            infer_shape=_spectral_norm_shape,
            kernel=lambda ins, attrs, ctx: {"Out": ins["Weight"] / _spectral_parts(ins, attrs)[3]},
            grad_kernel=_spectral_norm_grad, grad_uses=("Weight", "U", "V"),
            no_grad_inputs=("U", "V"))


