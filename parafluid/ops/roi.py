"""Region-of-interest pooling ops of Fluid 1.6: ``roi_pool`` (max over integer bins),
``roi_align`` (bilinear samples averaged per bin), ``psroi_pool`` (position-sensitive average
pooling), ``roi_perspective_transform`` (a quadrilateral ``[x0, y0, ..., x3, y3]`` warped onto
a ``transformed_height x transformed_width`` grid by a homography, bilinear, zero outside the
quadrilateral). Gradients flow to ``X`` only (as in Fluid).

``ROIs [R, 4]`` holds ``[x1, y1, x2, y2]`` in the input image's pixels (``spatial_scale``
maps them onto ``X``); its LoD says which image each ROI belongs to (one sequence per image
of ``X``; without a LoD every ROI is on image 0 of a one-image batch).

Each ROI's bins are turned into (pixel index, weight) lists once, so the forward pass is a
gather and the backward pass the matching ``index_add``.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from ..lod import get_lod
from .registry import Meta, register_op

__all__: list[str] = []


def _round(v: float) -> int:
    """C's ``round``: halves away from zero."""
    return int(math.floor(abs(v) + 0.5)) * (1 if v >= 0 else -1)


def _roi_images(op: str, rois: torch.Tensor, x: torch.Tensor) -> list[int]:
    lod = get_lod(rois)
    if not lod:
        if x.shape[0] != 1:
            raise ValueError(f"{op}: ROIs carries no LoD saying which of the {x.shape[0]} "
                             "images each ROI belongs to; feed it as a LoD tensor")
        return [0] * rois.shape[0]
    offsets = lod[-1]
    if len(offsets) - 1 != x.shape[0]:
        raise ValueError(f"{op}: the LoD of ROIs {offsets} has {len(offsets) - 1} images but "
                         f"X has {x.shape[0]}")
    return [i for i in range(len(offsets) - 1) for _ in range(offsets[i], offsets[i + 1])]


def _roi_shape(op: str, channels: Any = None) -> Any:
    def infer(ins: dict, attrs: dict) -> dict:
        x, rois = ins["X"], ins["ROIs"]
        if len(x.shape) != 4:
            raise ValueError(f"{op}: X must be 4-D [N, C, H, W], got {list(x.shape)}")
        if len(rois.shape) != 2 or rois.shape[1] not in (-1, 4):
            raise ValueError(f"{op}: ROIs must be [R, 4], got {list(rois.shape)}")
        ph, pw = attrs["pooled_height"], attrs["pooled_width"]
        if ph <= 0 or pw <= 0 or attrs["spatial_scale"] <= 0:
            raise ValueError(f"{op}: pooled_height, pooled_width and spatial_scale must be "
                             f"positive, got {ph}, {pw}, {attrs['spatial_scale']}")
        c = x.shape[1] if channels is None else channels(x, attrs)
        out = {"Out": Meta((rois.shape[0], c, ph, pw), x.dtype)}
        if op == "roi_pool":
            out["Argmax"] = Meta((rois.shape[0], c, ph, pw), "int64")
        return out
    return infer


def _gather(x: torch.Tensor, images: list[int], tables: list[tuple[torch.Tensor, ...]],
            shape: tuple[int, ...]) -> torch.Tensor:
    """Out[r] = sum_k weight[p, k] * X[image, :, index[p, k]] for each ROI's table."""
    out = x.new_zeros((len(images), x.shape[1], shape[0] * shape[1]))
    for r, (b, (idx, w)) in enumerate(zip(images, tables)):
        flat = x[b].reshape(x.shape[1], -1)
        out[r] = (flat[:, idx.reshape(-1)].reshape(x.shape[1], *idx.shape) * w).sum(-1)
    return out.reshape(len(images), x.shape[1], *shape)


def _scatter(x: torch.Tensor, dout: torch.Tensor, images: list[int],
             tables: list[tuple[torch.Tensor, ...]]) -> torch.Tensor:
    dx = torch.zeros_like(x).reshape(x.shape[0], x.shape[1], -1)
    for r, (b, (idx, w)) in enumerate(zip(images, tables)):
        g = dout[r].reshape(x.shape[1], -1, 1) * w
        dx[b].index_add_(1, idx.reshape(-1), g.reshape(x.shape[1], -1))
    return dx.reshape(x.shape)


# ----------------------------------------------------------------------------- roi_align


def _align_table(roi: list[float], h: int, w: int, attrs: dict,
                 dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Per bin, the 4 corners of each bilinear sample and their weights / sample count."""
    s, ph, pw = attrs["spatial_scale"], attrs["pooled_height"], attrs["pooled_width"]
    x0, y0, x1, y1 = (v * s for v in roi)
    rw, rh = max(x1 - x0, 1.0), max(y1 - y0, 1.0)
    bw, bh = rw / pw, rh / ph
    gh = attrs["sampling_ratio"] if attrs["sampling_ratio"] > 0 else math.ceil(rh / ph)
    gw = attrs["sampling_ratio"] if attrs["sampling_ratio"] > 0 else math.ceil(rw / pw)
    count = max(gh * gw, 1)
    idx, wts = [], []
    for py in range(ph):
        for px in range(pw):
            bin_idx, bin_w = [], []
            for iy in range(gh):
                y = y0 + py * bh + (iy + 0.5) * bh / gh
                for ix in range(gw):
                    xx = x0 + px * bw + (ix + 0.5) * bw / gw
                    if y < -1.0 or y > h or xx < -1.0 or xx > w:
                        continue  # the sample is off the map: it adds zero
                    yc, xc = max(y, 0.0), max(xx, 0.0)
                    yl, xl = int(yc), int(xc)
                    if yl >= h - 1:
                        yl = yh = h - 1
                        yc = float(yl)
                    else:
                        yh = yl + 1
                    if xl >= w - 1:
                        xl = xh = w - 1
                        xc = float(xl)
                    else:
                        xh = xl + 1
                    ly, lx = yc - yl, xc - xl
                    for yy, xq, wt in ((yl, xl, (1 - ly) * (1 - lx)), (yl, xh, (1 - ly) * lx),
                                       (yh, xl, ly * (1 - lx)), (yh, xh, ly * lx)):
                        bin_idx.append(yy * w + xq)
                        bin_w.append(wt / count)
            idx.append(bin_idx)
            wts.append(bin_w)
    width = max(1, max(len(b) for b in idx))
    index = torch.zeros((ph * pw, width), dtype=torch.int64)
    weight = torch.zeros((ph * pw, width), dtype=dtype)
    for p, (bi, bw_) in enumerate(zip(idx, wts)):
        index[p, :len(bi)] = torch.tensor(bi, dtype=torch.int64)
        weight[p, :len(bw_)] = torch.tensor(bw_, dtype=dtype)
    return index, weight


def _align_tables(ins: dict, attrs: dict) -> tuple[list[int], list[tuple]]:
    x, rois = ins["X"], ins["ROIs"]
    images = _roi_images("roi_align", rois, x)
    h, w = x.shape[2], x.shape[3]
    return images, [_align_table(r, h, w, attrs, x.dtype) for r in rois.tolist()]


def _roi_align(ins: dict, attrs: dict, ctx: Any) -> dict:
    images, tables = _align_tables(ins, attrs)
    shape = (attrs["pooled_height"], attrs["pooled_width"])
    return {"Out": _gather(ins["X"], images, tables, shape)}


def _roi_align_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    images, tables = _align_tables(ins, attrs)
    return {"X@GRAD": _scatter(ins["X"], ins["Out@GRAD"], images, tables)}


register_op("roi_align", inputs=("X", "ROIs"), outputs=("Out",),
            attrs={"spatial_scale": 1.0, "pooled_height": 1, "pooled_width": 1,
                   "sampling_ratio": -1},
            infer_shape=_roi_shape("roi_align"), kernel=_roi_align,
            grad_kernel=_roi_align_grad, grad_uses=("X", "ROIs"), no_grad_inputs=("ROIs",),
            no_compile="reads the ROIs on the host to build the sampling tables")


# ----------------------------------------------------------------------------- roi_pool


def _pool_bins(roi: list[float], h: int, w: int, attrs: dict) -> list[tuple[int, ...]]:
    """Each bin's ``(hstart, hend, wstart, wend)`` on the map, Fluid's integer rounding."""
    s, ph, pw = attrs["spatial_scale"], attrs["pooled_height"], attrs["pooled_width"]
    x0, y0, x1, y1 = (_round(v * s) for v in roi)
    bh, bw = max(y1 - y0 + 1, 1) / ph, max(x1 - x0 + 1, 1) / pw
    bins = []
    for py in range(ph):
        for px in range(pw):
            hs = min(max(math.floor(py * bh) + y0, 0), h)
            he = min(max(math.ceil((py + 1) * bh) + y0, 0), h)
            ws = min(max(math.floor(px * bw) + x0, 0), w)
            we = min(max(math.ceil((px + 1) * bw) + x0, 0), w)
            bins.append((hs, he, ws, we))
    return bins


def _pool_table(roi: list[float], h: int, w: int, attrs: dict) -> tuple[torch.Tensor, ...]:
    """Each bin's pixel indices (padded) and which of them are real."""
    cells = [[y * w + x for y in range(hs, he) for x in range(ws, we)]
             for hs, he, ws, we in _pool_bins(roi, h, w, attrs)]
    width = max(1, max(len(c) for c in cells))
    index = torch.zeros((len(cells), width), dtype=torch.int64)
    valid = torch.zeros((len(cells), width), dtype=torch.bool)
    for p, c in enumerate(cells):
        index[p, :len(c)] = torch.tensor(c, dtype=torch.int64)
        valid[p, :len(c)] = True
    return index, valid


def _roi_pool(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, rois = ins["X"], ins["ROIs"]
    images = _roi_images("roi_pool", rois, x)
    ph, pw = attrs["pooled_height"], attrs["pooled_width"]
    n, c, h, w = x.shape
    out = x.new_zeros((len(images), c, ph * pw))
    arg = torch.full((len(images), c, ph * pw), -1, dtype=torch.int64)
    for r, (b, roi) in enumerate(zip(images, rois.tolist())):
        index, valid = _pool_table(roi, h, w, attrs)
        vals = x[b].reshape(c, -1)[:, index.reshape(-1)].reshape(c, *index.shape)
        vals = vals.masked_fill(~valid, float("-inf"))
        best, pos = vals.max(dim=-1)  # the first maximum, as Fluid's strict ">" scan
        empty = ~valid.any(dim=-1)  # an empty bin pools to 0 with no argmax
        out[r] = best.masked_fill(empty, 0)
        arg[r] = index.gather(1, pos.t()).t().masked_fill(empty, -1)
    return {"Out": out.reshape(len(images), c, ph, pw),
            "Argmax": arg.reshape(len(images), c, ph, pw)}


def _roi_pool_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, rois, arg, dout = ins["X"], ins["ROIs"], ins["Argmax"], ins["Out@GRAD"]
    images = _roi_images("roi_pool", rois, x)
    dx = torch.zeros_like(x).reshape(x.shape[0], x.shape[1], -1)
    for r, b in enumerate(images):
        a = arg[r].reshape(x.shape[1], -1)
        g = dout[r].reshape(x.shape[1], -1)
        hit = a >= 0
        dx[b].scatter_add_(1, a.clamp(min=0), torch.where(hit, g, torch.zeros_like(g)))
    return {"X@GRAD": dx.reshape(x.shape)}


register_op("roi_pool", inputs=("X", "ROIs"), outputs=("Out", "Argmax"),
            attrs={"spatial_scale": 1.0, "pooled_height": 1, "pooled_width": 1},
            infer_shape=_roi_shape("roi_pool"), kernel=_roi_pool,
            grad_kernel=_roi_pool_grad, grad_uses=("X", "ROIs", "Argmax"),
            no_grad_inputs=("ROIs",),
            no_compile="reads the ROIs on the host to build the bins")


# ----------------------------------------------------------------------------- psroi_pool


def _ps_tables(ins: dict, attrs: dict) -> tuple[list[int], list[tuple], int]:
    """Per ROI: for each (output channel, bin), the pixels of its input channel's bin and the
    weight 1 / area (flat indices over the whole ``[C, H, W]`` image)."""
    x, rois = ins["X"], ins["ROIs"]
    images = _roi_images("psroi_pool", rois, x)
    oc, ph, pw, s = (attrs["output_channels"], attrs["pooled_height"], attrs["pooled_width"],
                     attrs["spatial_scale"])
    h, w = x.shape[2], x.shape[3]
    tables = []
    for roi in rois.tolist():
        x0, y0 = _round(roi[0]) * s, _round(roi[1]) * s
        x1, y1 = (_round(roi[2]) + 1.0) * s, (_round(roi[3]) + 1.0) * s
        bh, bw = max(y1 - y0, 0.1) / ph, max(x1 - x0, 0.1) / pw
        cells = []
        for c in range(oc):
            for py in range(ph):
                for px in range(pw):
                    hs = min(max(math.floor(bh * py + y0), 0), h)
                    he = min(max(math.ceil(bh * (py + 1) + y0), 0), h)
                    ws = min(max(math.floor(bw * px + x0), 0), w)
                    we = min(max(math.ceil(bw * (px + 1) + x0), 0), w)
                    ch = (c * ph + py) * pw + px
                    cells.append([(ch * h + yy) * w + xx for yy in range(hs, he)
                                  for xx in range(ws, we)])
        width = max(1, max(len(cl) for cl in cells))
        index = torch.zeros((len(cells), width), dtype=torch.int64)
        weight = torch.zeros((len(cells), width), dtype=x.dtype)
        for p, cl in enumerate(cells):
            if cl:
                index[p, :len(cl)] = torch.tensor(cl, dtype=torch.int64)
                weight[p, :len(cl)] = 1.0 / len(cl)
        tables.append((index, weight))
    return images, tables, oc


def _psroi_pool(ins: dict, attrs: dict, ctx: Any) -> dict:
    x = ins["X"]
    images, tables, oc = _ps_tables(ins, attrs)
    out = x.new_zeros((len(images), oc * attrs["pooled_height"] * attrs["pooled_width"]))
    for r, (b, (idx, w)) in enumerate(zip(images, tables)):
        out[r] = (x[b].reshape(-1)[idx] * w).sum(-1)
    return {"Out": out.reshape(len(images), oc, attrs["pooled_height"], attrs["pooled_width"])}


def _psroi_pool_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, dout = ins["X"], ins["Out@GRAD"]
    images, tables, _ = _ps_tables(ins, attrs)
    dx = torch.zeros_like(x).reshape(x.shape[0], -1)
    for r, (b, (idx, w)) in enumerate(zip(images, tables)):
        dx[b].index_add_(0, idx.reshape(-1), (dout[r].reshape(-1, 1) * w).reshape(-1))
    return {"X@GRAD": dx.reshape(x.shape)}


def _psroi_channels(x: Meta, attrs: dict) -> int:
    oc, ph, pw = attrs["output_channels"], attrs["pooled_height"], attrs["pooled_width"]
    if x.shape[1] != -1 and x.shape[1] != oc * ph * pw:
        raise ValueError(f"psroi_pool: X must have output_channels * pooled_height * "
                         f"pooled_width = {oc * ph * pw} channels, got {x.shape[1]}")
    return oc


register_op("psroi_pool", inputs=("X", "ROIs"), outputs=("Out",),
            attrs={"spatial_scale": 1.0, "output_channels": 1, "pooled_height": 1,
                   "pooled_width": 1},
            infer_shape=_roi_shape("psroi_pool", _psroi_channels), kernel=_psroi_pool,
            grad_kernel=_psroi_pool_grad, grad_uses=("X", "ROIs"), no_grad_inputs=("ROIs",),
            no_compile="reads the ROIs on the host to build the bins")


# ------------------------------------------------------------------- roi_perspective_transform

_TOL = 1e-4


def _in_quad(x: float, y: float, qx: list[float], qy: list[float]) -> bool:
    """On an edge (within 1e-4) or inside the quadrilateral (crossing count), as Fluid."""
    for i in range(4):
        xs, ys, xe, ye = qx[i], qy[i], qx[(i + 1) % 4], qy[(i + 1) % 4]
        if abs(ys - ye) < _TOL:
            if abs(y - ys) < _TOL and abs(y - ye) < _TOL and \
                    min(xs, xe) - _TOL <= x <= max(xs, xe) + _TOL:
                return True
        else:
            cross = (y - ys) * (xe - xs) / (ye - ys) + xs
            if abs(cross - x) < _TOL and min(ys, ye) - _TOL <= y <= max(ys, ye) + _TOL:
                return True
    crossings = 0
    for i in range(4):
        xs, ys, xe, ye = qx[i], qy[i], qx[(i + 1) % 4], qy[(i + 1) % 4]
        if abs(ys - ye) < _TOL or y <= min(ys, ye) + _TOL or y - max(ys, ye) > _TOL:
            continue
        cross = (y - ys) * (xe - xs) / (ye - ys) + xs
        if abs(cross - x) < _TOL:
            return True
        if cross - x > _TOL:
            crossings += 1
    return crossings % 2 == 1


def _perspective_matrix(qx: list[float], qy: list[float], th: int, tw: int) -> list[float]:
    """The homography taking output pixels onto the quadrilateral (corners 0..3 clockwise
    from the top left), its width fitted to the quadrilateral's aspect."""
    x0, x1, x2, x3 = qx
    y0, y1, y2, y3 = qy
    side = [((qx[i] - qx[(i + 1) % 4]) ** 2 + (qy[i] - qy[(i + 1) % 4]) ** 2) ** 0.5
            for i in range(4)]
    est_h, est_w = (side[1] + side[3]) / 2, (side[0] + side[2]) / 2
    nh = max(2, th)
    nw = max(2, min(_round(est_w * (nh - 1) / est_h) + 1, tw))
    dx1, dx2, dx3 = x1 - x2, x3 - x2, x0 - x1 + x2 - x3
    dy1, dy2, dy3 = y1 - y2, y3 - y2, y0 - y1 + y2 - y3
    den = dx1 * dy2 - dx2 * dy1 + 1e-5  # Fluid's guard against a degenerate quadrilateral
    m6 = (dx3 * dy2 - dx2 * dy3) / den / (nw - 1)
    m7 = (dx1 * dy3 - dx3 * dy1) / den / (nh - 1)
    return [(x1 - x0 + m6 * (nw - 1) * x1) / (nw - 1), (x3 - x0 + m7 * (nh - 1) * x3) / (nh - 1),
            x0, (y1 - y0 + m6 * (nw - 1) * y1) / (nw - 1),
            (y3 - y0 + m7 * (nh - 1) * y3) / (nh - 1), y0, m6, m7, 1.0]


def _perspective_table(roi: list[float], h: int, w: int, attrs: dict,
                       dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    s, th, tw = attrs["spatial_scale"], attrs["transformed_height"], attrs["transformed_width"]
    qx, qy = [roi[2 * k] * s for k in range(4)], [roi[2 * k + 1] * s for k in range(4)]
    m = _perspective_matrix(qx, qy, th, tw)
    index = torch.zeros((th * tw, 4), dtype=torch.int64)
    weight = torch.zeros((th * tw, 4), dtype=dtype)
    for oh in range(th):
        for ow in range(tw):
            den = m[6] * ow + m[7] * oh + m[8]
            x = (m[0] * ow + m[1] * oh + m[2]) / den
            y = (m[3] * ow + m[4] * oh + m[5]) / den
            if not _in_quad(x, y, qx, qy) or -0.5 - x > _TOL or x - (w - 0.5) > _TOL or \
                    -0.5 - y > _TOL or y - (h - 0.5) > _TOL:
                continue  # outside the quadrilateral or the map: 0
            x, y = (0.0 if -x > _TOL else x), (0.0 if -y > _TOL else y)
            xf, yf = math.floor(x), math.floor(y)
            if xf >= w - 1 - _TOL:
                xf = xc = w - 1
                x = float(xf)
            else:
                xc = xf + 1
            if yf >= h - 1 - _TOL:
                yf = yc = h - 1
                y = float(yf)
            else:
                yc = yf + 1
            lx, ly = x - xf, y - yf
            p = oh * tw + ow
            for k, (yy, xx, wt) in enumerate(((yf, xf, (1 - lx) * (1 - ly)),
                                              (yc, xf, (1 - lx) * ly), (yc, xc, lx * ly),
                                              (yf, xc, lx * (1 - ly)))):
                index[p, k] = yy * w + xx
                weight[p, k] = wt
    return index, weight


def _perspective_tables(ins: dict, attrs: dict) -> tuple[list[int], list[tuple]]:
    x, rois = ins["X"], ins["ROIs"]
    images = _roi_images("roi_perspective_transform", rois, x)
    return images, [_perspective_table(r, x.shape[2], x.shape[3], attrs, x.dtype)
                    for r in rois.tolist()]


def _perspective_shape(ins: dict, attrs: dict) -> dict:
    x, rois = ins["X"], ins["ROIs"]
    if len(x.shape) != 4:
        raise ValueError(f"roi_perspective_transform: X must be 4-D NCHW, got {list(x.shape)}")
    if len(rois.shape) != 2 or rois.shape[1] not in (-1, 8):
        raise ValueError(f"roi_perspective_transform: ROIs must be [R, 8] (x0, y0, ..., x3, "
                         f"y3), got {list(rois.shape)}")
    th, tw = attrs["transformed_height"], attrs["transformed_width"]
    if th <= 1 or tw <= 1 or attrs["spatial_scale"] <= 0:
        raise ValueError(f"roi_perspective_transform: transformed_height and "
                         f"transformed_width must exceed 1 and spatial_scale be positive, got "
                         f"{th}, {tw}, {attrs['spatial_scale']}")
    r = rois.shape[0]
    return {"Out": Meta((r, x.shape[1], th, tw), x.dtype),
            "Mask": Meta((r, 1, th, tw), "int32"), "TransformMatrix": Meta((r, 9), x.dtype),
            "Out2InIdx": Meta((-1, 4), "int32"), "Out2InWeights": Meta((-1, 4), x.dtype)}


def _roi_perspective_transform(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, rois = ins["X"], ins["ROIs"]
    th, tw = attrs["transformed_height"], attrs["transformed_width"]
    images, tables = _perspective_tables(ins, attrs)
    r, c, hw = len(images), x.shape[1], x.shape[2] * x.shape[3]
    out = _gather(x, images, tables, (th, tw))
    # Fluid's other outputs: a 1/0 mask of the output pixels that sample the map, each
    # ROI's homography, and (as Fluid's GPU kernel) each output element's 4 bilinear
    # corners as flat indices into X (-1 where the pixel samples nothing) and weights
    valid = torch.stack([w.sum(-1) > 0.5 for _, w in tables]) if r else \
        torch.zeros((0, th * tw), dtype=torch.bool)
    s = attrs["spatial_scale"]
    matrix = [_perspective_matrix([v * s for v in q[0::2]], [v * s for v in q[1::2]], th, tw)
              for q in rois.tolist()]
    idx = torch.full((r, c, th * tw, 4), -1, dtype=torch.int64)
    wts = torch.zeros((r, c, th * tw, 4), dtype=x.dtype)
    for n, (b, (index, weight)) in enumerate(zip(images, tables)):
        base = (b * c + torch.arange(c)).reshape(c, 1, 1) * hw
        idx[n] = torch.where(valid[n].reshape(1, -1, 1), base + index, idx[n])
        wts[n] = torch.where(valid[n].reshape(-1, 1), weight, torch.zeros_like(weight))
    return {"Out": out, "Mask": valid.to(torch.int32).reshape(r, 1, th, tw),
            "TransformMatrix": torch.tensor(matrix, dtype=x.dtype).reshape(r, 9),
            "Out2InIdx": idx.reshape(-1, 4).to(torch.int32), "Out2InWeights": wts.reshape(-1, 4)}


register_op("roi_perspective_transform", inputs=("X", "ROIs"),
            outputs=("Out", "Mask?", "TransformMatrix?", "Out2InIdx?", "Out2InWeights?"),
            attrs={"transformed_height": 1, "transformed_width": 1, "spatial_scale": 1.0},
            infer_shape=_perspective_shape, kernel=_roi_perspective_transform,
            grad_kernel=lambda ins, attrs, ctx: {"X@GRAD": _scatter(
                ins["X"], ins["Out@GRAD"], *_perspective_tables(ins, attrs))},
            grad_uses=("X", "ROIs"), no_grad_inputs=("ROIs",),
            no_compile="reads the ROIs on the host to build the sampling tables")
