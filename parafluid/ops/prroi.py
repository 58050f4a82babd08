"""``prroi_pool``: Fluid 1.6's precise ROI pooling (PrRoI Pooling, arXiv:1807.11590).

Each bin of each ROI (``ROIs [R, 4]``, ``[x1, y1, x2, y2]`` times ``spatial_scale`` on
``X``, no pixel rounding) is the exact integral of the bilinearly interpolated feature map
(zero outside it) over the bin, divided by the bin's area; a bin of zero area gives 0.

Bilinear interpolation is separable, ``f(x, y) = sum_hw X[h, w] hat(x - w) hat(y - h)`` with
``hat(t) = max(0, 1 - |t|)``, so a bin ``[a, b] x [c, d]`` integrates to
``Ky^T X Kx`` where ``Kx[w] = H(b - w) - H(a - w)`` and ``H`` is the integral of ``hat``.
The gradient reaches ``X`` and the ROI coordinates (``d Kx / d b = hat(b - w)``).
"""

from __future__ import annotations

from typing import Any

import torch

from .registry import Meta, register_op
from .roi import _roi_images

__all__: list[str] = []


def _hat_integral(t: torch.Tensor) -> torch.Tensor:
    """``H(t)``: the integral of ``max(0, 1 - |u|)`` from -inf to ``t``."""
    t = t.clamp(-1.0, 1.0)
    return torch.where(t <= 0, 0.5 * (t + 1) ** 2, 1 - 0.5 * (1 - t) ** 2)


def _hat(t: torch.Tensor) -> torch.Tensor:
    return (1 - t.abs()).clamp(min=0)


def _axis(lo: torch.Tensor, hi: torch.Tensor, bins: int, size: int, scale: float) -> dict:
    """Per ROI, the bins along one axis: weights ``K [R, bins, size]``, their derivatives
    w.r.t. the ROI's two coordinates, and the bin length ``[R]``."""
    start = lo * scale
    length = (hi * scale - start).clamp(min=0) / bins
    p = torch.arange(bins, dtype=lo.dtype)
    a = start[:, None] + p[None, :] * length[:, None]  # [R, bins]
    b = a + length[:, None]
    grid = torch.arange(size, dtype=lo.dtype)
    da, db = a[..., None] - grid, b[..., None] - grid  # [R, bins, size]
    k = _hat_integral(db) - _hat_integral(da)
    # d a / d lo = scale (1 - p / bins), d a / d hi = scale p / bins (b: p + 1); zero when
    # the ROI is empty along this axis (its length is clamped at 0)
    live = (hi > lo).to(lo.dtype)[:, None, None]
    f0, f1 = p / bins, (p + 1) / bins
    dk_lo = (_hat(db) * (1 - f1)[:, None] - _hat(da) * (1 - f0)[:, None]) * scale
    dk_hi = (_hat(db) * f1[:, None] - _hat(da) * f0[:, None]) * scale
    dk_lo, dk_hi = dk_lo * live, dk_hi * live
    dlen_lo, dlen_hi = -scale / bins * live[:, 0, 0], scale / bins * live[:, 0, 0]
    return {"k": k, "dk_lo": dk_lo, "dk_hi": dk_hi, "len": length, "dlen_lo": dlen_lo,
            "dlen_hi": dlen_hi}


def _setup(ins: dict, attrs: dict) -> tuple:
    x, rois = ins["X"], ins["ROIs"]
    images = torch.tensor(_roi_images("prroi_pool", rois, x), dtype=torch.int64)
    s = float(attrs["spatial_scale"])
    r = rois.to(x.dtype)
    ax = _axis(r[:, 0], r[:, 2], attrs["pooled_width"], x.shape[3], s)
    ay = _axis(r[:, 1], r[:, 3], attrs["pooled_height"], x.shape[2], s)
    area = ax["len"] * ay["len"]
    inv = torch.where(area > 0, 1 / torch.where(area > 0, area, torch.ones_like(area)),
                      torch.zeros_like(area))
    return x[images] if len(images) else x.new_zeros((0, *x.shape[1:])), images, ax, ay, \
        area, inv


def _prroi_pool(ins: dict, attrs: dict, ctx: Any) -> dict:
    xs, _, ax, ay, _, inv = _setup(ins, attrs)
    out = torch.einsum("rchw,rih,rjw->rcij", xs, ay["k"], ax["k"]) * inv[:, None, None, None]
    return {"Out": out}


def _prroi_pool_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, rois, dout = ins["X"], ins["ROIs"], ins["Out@GRAD"]
    xs, images, ax, ay, area, inv = _setup(ins, attrs)
    g = dout * inv[:, None, None, None]  # d loss / d (integral)
    res = {}
    if "X" in ctx.need:
        dxs = torch.einsum("rcij,rih,rjw->rchw", g, ay["k"], ax["k"])
        res["X@GRAD"] = torch.zeros_like(x).index_add_(0, images, dxs)
    if "ROIs" in ctx.need:
        out = torch.einsum("rchw,rih,rjw->rcij", xs, ay["k"], ax["k"]) * \
            inv[:, None, None, None]
        qx = torch.einsum("rcij,rchw,rih->rjw", g, xs, ay["k"])  # what each Kx weight gets
        qy = torch.einsum("rcij,rchw,rjw->rih", g, xs, ax["k"])
        # the area term: out = S / area, d out / d area = -out / area
        ga = -(dout * out).sum((1, 2, 3)) * inv
        d = torch.stack([
            (qx * ax["dk_lo"]).sum((1, 2)) + ga * ax["dlen_lo"] * ay["len"],
            (qy * ay["dk_lo"]).sum((1, 2)) + ga * ay["dlen_lo"] * ax["len"],
            (qx * ax["dk_hi"]).sum((1, 2)) + ga * ax["dlen_hi"] * ay["len"],
            (qy * ay["dk_hi"]).sum((1, 2)) + ga * ay["dlen_hi"] * ax["len"]], 1)
        res["ROIs@GRAD"] = d.to(rois.dtype)
    return res


def _prroi_shape(ins: dict, attrs: dict) -> dict:
    x, rois = ins["X"], ins["ROIs"]
    if len(x.shape) != 4:
        raise ValueError(f"prroi_pool: X must be 4-D [N, C, H, W], got {list(x.shape)}")
    if len(rois.shape) != 2 or rois.shape[1] not in (-1, 4):
        raise ValueError(f"prroi_pool: ROIs must be [R, 4] (x1, y1, x2, y2), got "
                         f"{list(rois.shape)}")
    ph, pw, s = attrs["pooled_height"], attrs["pooled_width"], attrs["spatial_scale"]
    if ph <= 0 or pw <= 0 or s <= 0:
        raise ValueError(f"prroi_pool: pooled_height, pooled_width and spatial_scale must be "
                         f"positive, got {ph}, {pw}, {s}")
    return {"Out": Meta((rois.shape[0], x.shape[1], ph, pw), x.dtype)}


register_op("prroi_pool", inputs=("X", "ROIs"), outputs=("Out",),
            attrs={"spatial_scale": 1.0, "pooled_height": 1, "pooled_width": 1},
            infer_shape=_prroi_shape, kernel=_prroi_pool, grad_kernel=_prroi_pool_grad,
            grad_uses=("X", "ROIs"),
            no_compile="reads the ROIs' LoD on the host to find each ROI's image")
