"""Deformable (position-sensitive) ROI pooling of Fluid 1.6: ``deformable_psroi_pooling``
(the layer ``deformable_roi_pooling``), with gradients to the input and the offsets.

Per ROI (``ROIs [R, 4]``, LoD: per image) each ``pooled_height x pooled_width`` bin is shifted
by ``Trans[r, 2 * class : 2 * class + 2, part_h, part_w] * trans_std`` times the ROI's size
(no shift with ``no_trans``), then averages ``sample_per_part ** 2`` bilinear samples of input
channel ``(c * group_h + gh) * group_w + gw`` (the bin's position-sensitive group); samples off
the map are skipped (``TopCount`` counts the rest).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from .registry import Meta, register_op
from .roi import _roi_images, _round

__all__: list[str] = []


def _bins(ins: dict, attrs: dict) -> list[tuple]:
    """Every (roi, image, class, ph, pw, input channels, output channels, samples) where a
    sample is (corner flat indices, corner weights, d value / dx, d value / dy) pieces."""
    x, rois, trans = ins["Input"], ins["ROIs"], ins.get("Trans")
    images = _roi_images("deformable_psroi_pooling", rois, x)
    h, w = x.shape[2], x.shape[3]
    s, out_dim = attrs["spatial_scale"], attrs["output_dim"]
    ph_n, pw_n = attrs["pooled_height"], attrs["pooled_width"]
    gh_n, gw_n = attrs["group_size"]
    part_h, part_w = attrs["part_size"]
    spp, std = attrs["sample_per_part"], attrs["trans_std"]
    no_trans = attrs["no_trans"] or trans is None
    classes = 1 if no_trans else trans.shape[1] // 2
    per_class = out_dim // classes
    t = None if no_trans else trans.tolist()
    out = []
    for r, roi in enumerate(rois.tolist()):
        x0, y0 = _round(roi[0]) * s - 0.5, _round(roi[1]) * s - 0.5
        x1, y1 = (_round(roi[2]) + 1.0) * s - 0.5, (_round(roi[3]) + 1.0) * s - 0.5
        rw, rh = max(x1 - x0, 0.1), max(y1 - y0, 0.1)
        bw, bh = rw / pw_n, rh / ph_n
        for cls in range(classes):
            ctops = torch.arange(cls * per_class, (cls + 1) * per_class)
            for ph in range(ph_n):
                for pw in range(pw_n):
                    p_h = math.floor(ph / ph_n * part_h)
                    p_w = math.floor(pw / pw_n * part_w)
                    tx = 0.0 if no_trans else t[r][2 * cls][p_h][p_w] * std
                    ty = 0.0 if no_trans else t[r][2 * cls + 1][p_h][p_w] * std
                    ws, hs = pw * bw + x0 + tx * rw, ph * bh + y0 + ty * rh
                    gw = min(max(math.floor(pw * gw_n / pw_n), 0), gw_n - 1)
                    gh = min(max(math.floor(ph * gh_n / ph_n), 0), gh_n - 1)
                    chans = (ctops * gh_n + gh) * gw_n + gw
                    samples = []
                    for ih in range(spp):
                        for iw in range(spp):
                            sx, sy = ws + iw * bw / spp, hs + ih * bh / spp
                            if sx < -0.5 or sx > w - 0.5 or sy < -0.5 or sy > h - 0.5:
                                continue
                            sx, sy = min(max(sx, 0.0), w - 1.0), min(max(sy, 0.0), h - 1.0)
                            xa, xb = math.floor(sx), math.ceil(sx)
                            ya, yb = math.floor(sy), math.ceil(sy)
                            dx, dy = sx - xa, sy - ya
                            samples.append(([ya * w + xa, yb * w + xa, ya * w + xb, yb * w + xb],
                                            [(1 - dx) * (1 - dy), (1 - dx) * dy, dx * (1 - dy),
                                             dx * dy], dx, dy))
                    out.append((r, images[r], cls, p_h, p_w, chans, ctops, ph, pw, samples,
                                rw * std, rh * std))
    return out


def _pool(ins: dict, attrs: dict, ctx: Any) -> dict:
    x = ins["Input"]
    r_n = ins["ROIs"].shape[0]
    shape = (r_n, attrs["output_dim"], attrs["pooled_height"], attrs["pooled_width"])
    out = x.new_zeros(shape)
    count = x.new_zeros(shape)
    flat = x.reshape(x.shape[0], x.shape[1], -1)
    for r, b, _, _, _, chans, ctops, ph, pw, samples, _, _ in _bins(ins, attrs):
        if not samples:
            continue
        total = 0
        for idx, wts, _, _ in samples:
            vals = flat[b][chans][:, idx]  # [channels, 4]
            total = total + (vals * torch.tensor(wts, dtype=x.dtype)).sum(1)
        out[r, ctops, ph, pw] = total / len(samples)
        count[r, ctops, ph, pw] = float(len(samples))
    return {"Output": out, "TopCount": count}


def _pool_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, dout, trans = ins["Input"], ins["Output@GRAD"], ins.get("Trans")
    flat = x.reshape(x.shape[0], x.shape[1], -1)
    dx = torch.zeros_like(flat)
    dtrans = torch.zeros_like(trans) if trans is not None else None
    no_trans = attrs["no_trans"] or trans is None
    for r, b, cls, p_h, p_w, chans, ctops, ph, pw, samples, sx_scale, sy_scale in \
            _bins(ins, attrs):
        if not samples:
            continue
        g = dout[r, ctops, ph, pw] / len(samples)  # [channels]
        for idx, wts, ddx, ddy in samples:
            wt = torch.tensor(wts, dtype=x.dtype)
            for k in range(4):
                dx[b, chans, idx[k]] += g * wt[k]
            if no_trans:
                continue
            u00, u01, u10, u11 = (flat[b][chans][:, i] for i in idx)
            d_x = (u11 * ddy + u10 * (1 - ddy) - u01 * ddy - u00 * (1 - ddy)) * sx_scale
            d_y = (u11 * ddx + u01 * (1 - ddx) - u10 * ddx - u00 * (1 - ddx)) * sy_scale
            dtrans[r, 2 * cls, p_h, p_w] += (d_x * g).sum()
            dtrans[r, 2 * cls + 1, p_h, p_w] += (d_y * g).sum()
    out = {"Input@GRAD": dx.reshape(x.shape)}
    if dtrans is not None:
        out["Trans@GRAD"] = dtrans
    return out


def _shape(ins: dict, attrs: dict) -> dict:
    x, rois = ins["Input"], ins["ROIs"]
    if len(x.shape) != 4:
        raise ValueError(f"deformable_psroi_pooling: Input must be 4-D NCHW, got "
                         f"{list(x.shape)}")
    if len(rois.shape) != 2 or rois.shape[1] not in (-1, 4):
        raise ValueError(f"deformable_psroi_pooling: ROIs must be [R, 4], got "
                         f"{list(rois.shape)}")
    gh, gw = attrs["group_size"]
    if x.shape[1] != -1 and attrs["output_dim"] * gh * gw != x.shape[1]:
        raise ValueError(f"deformable_psroi_pooling: Input has {x.shape[1]} channels but "
                         f"output_dim * group_size = {attrs['output_dim']} * {gh} * {gw}")
    trans = ins.get("Trans")
    if trans is not None and not attrs["no_trans"] and trans.shape[1] not in (-1, 0) and \
            attrs["output_dim"] % max(trans.shape[1] // 2, 1):
        raise ValueError(f"deformable_psroi_pooling: output_dim {attrs['output_dim']} must "
                         f"divide into the {trans.shape[1] // 2} classes of Trans")
    shape = (rois.shape[0], attrs["output_dim"], attrs["pooled_height"], attrs["pooled_width"])
    return {"Output": Meta(shape, x.dtype), "TopCount": Meta(shape, x.dtype)}


register_op("deformable_psroi_pooling", inputs=("Input", "ROIs", "Trans"),
            outputs=("Output", "TopCount"),
            attrs={"no_trans": False, "spatial_scale": 1.0, "output_dim": 1,
                   "group_size": [1, 1], "pooled_height": 1, "pooled_width": 1,
                   "part_size": [1, 1], "sample_per_part": 1, "trans_std": 0.1},
            infer_shape=_shape, kernel=_pool, grad_kernel=_pool_grad,
            grad_uses=("Input", "ROIs", "Trans"), no_grad_inputs=("ROIs",),
            no_compile="reads the ROIs and offsets on the host to place the samples")
