"""``generate_mask_labels`` (Fluid 1.6, Mask R-CNN's mask targets; no gradient).

Per image: the non-crowd foreground ground truths' polygons (``GtSegms``: a LoD tensor of
points with 3 levels, image -> object -> polygon -> points); each foreground ROI (label > 0)
takes the object whose polygons' bounding box it overlaps most and rasterizes its polygons
in the ROI's frame at ``resolution x resolution`` (COCO's polygon-to-RLE rule: the boundary
traced at 5x, pixel centres inside), stored in its class's block of ``num_classes`` blocks
(-1 elsewhere). An image with no foreground ROI gives one all -1 row (as Detectron).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from ..lod import attach_lod, get_lod
from .registry import Meta, register_op
from .rpn_target import _pixel_iou

__all__ = ["polygon_mask"]


def polygon_mask(xy: list[float], h: int, w: int) -> torch.Tensor:
    """``[h, w]`` 0/1 mask of one polygon ``[x0, y0, x1, y1, ...]`` (COCO's rasterization)."""
    k = len(xy) // 2
    scale = 5.0
    x = [int(scale * xy[2 * j] + 0.5) for j in range(k)] + [int(scale * xy[0] + 0.5)]
    y = [int(scale * xy[2 * j + 1] + 0.5) for j in range(k)] + [int(scale * xy[1] + 0.5)]
    u: list[int] = []
    v: list[int] = []
    for j in range(k):  # the boundary, densely, at 5x
        xs, xe, ys, ye = x[j], x[j + 1], y[j], y[j + 1]
        dx, dy = abs(xe - xs), abs(ys - ye)
        flip = (dx >= dy and xs > xe) or (dx < dy and ys > ye)
        if flip:
            xs, xe, ys, ye = xe, xs, ye, ys
        if dx >= dy:
            s = 0.0 if dx == 0 else (ye - ys) / dx
            for d in range(dx + 1):
                t = dx - d if flip else d
                u.append(t + xs)
                v.append(int(ys + s * t + 0.5))
        else:
            s = 0.0 if dy == 0 else (xe - xs) / dy
            for d in range(dy + 1):
                t = dy - d if flip else d
                v.append(t + ys)
                u.append(int(xs + s * t + 0.5))
    starts = []  # where each column's runs flip, as flat column-major positions
    for j in range(1, len(u)):
        if u[j] == u[j - 1]:
            continue
        xd = ((u[j] if u[j] < u[j - 1] else u[j] - 1) + 0.5) / scale - 0.5
        if math.floor(xd) != xd or xd < 0 or xd > w - 1:
            continue
        yd = (min(v[j], v[j - 1]) + 0.5) / scale - 0.5
        yd = math.ceil(min(max(yd, 0.0), float(h)))
        starts.append(int(xd) * h + int(yd))
    starts.append(h * w)
    starts.sort()
    counts, prev = [], 0
    for a in starts:
        counts.append(a - prev)
        prev = a
    runs = [counts[0]]
    j = 1
    while j < len(counts):
        if counts[j] > 0:
            runs.append(counts[j])
            j += 1
        else:
            j += 1
            if j < len(counts):
                runs[-1] += counts[j]
                j += 1
    flat = torch.zeros(h * w, dtype=torch.uint8)
    pos, val = 0, 0
    for n in runs:
        if val:
            flat[pos:pos + n] = 1
        pos += n
        val = 1 - val
    return flat.reshape(w, h).t()  # column-major runs -> [h, w]


def _mask_in_box(polys: list[list[float]], box: list[float], m: int) -> torch.Tensor:
    bw, bh = max(box[2] - box[0], 1.0), max(box[3] - box[1], 1.0)
    out = torch.zeros((m, m), dtype=torch.uint8)
    for poly in polys:
        p = []
        for j in range(len(poly) // 2):
            p += [(poly[2 * j] - box[0]) * m / bw, (poly[2 * j + 1] - box[1]) * m / bh]
        out |= polygon_mask(p, m, m)
    return out


def _generate_mask_labels(ins: dict, attrs: dict, ctx: Any) -> dict:
    info, segms = ins["ImInfo"], ins["GtSegms"]
    lods = {s: get_lod(ins[s]) for s in ("GtClasses", "IsCrowd", "Rois", "LabelsInt32")}
    seg_lod = get_lod(segms)
    if any(not v for v in lods.values()) or not seg_lod or len(seg_lod) != 3:
        raise ValueError("generate_mask_labels: GtClasses, IsCrowd, Rois and LabelsInt32 must "
                         "be LoD tensors and GtSegms a LoD tensor of 3 levels (image -> "
                         "object -> polygon -> points)")
    res, num_classes = attrs["resolution"], attrs["num_classes"]
    points = segms.tolist()
    rois_all, labels_all = ins["Rois"], ins["LabelsInt32"].reshape(-1)
    classes, crowd = ins["GtClasses"].reshape(-1), ins["IsCrowd"].reshape(-1)
    outs: list[list] = [[], [], []]
    lod = [0]
    for i in range(info.shape[0]):
        scale = float(info[i, 2])
        g0, g1 = lods["GtClasses"][-1][i], lods["GtClasses"][-1][i + 1]
        objects = seg_lod[0][i]  # the image's first object in the object level
        polys_of_gt = []
        for g in range(g0, g1):
            if int(classes[g]) > 0 and int(crowd[g]) == 0:
                obj = objects + (g - g0)
                polys = [sum(points[seg_lod[2][q]:seg_lod[2][q + 1]], [])
                         for q in range(seg_lod[1][obj], seg_lod[1][obj + 1])]
                polys_of_gt.append(polys)
        r0, r1 = lods["Rois"][-1][i], lods["Rois"][-1][i + 1]
        rois, labels = rois_all[r0:r1], labels_all[r0:r1]
        fg = torch.nonzero(labels > 0).reshape(-1)
        if len(fg) and polys_of_gt:
            flat = [sum(ps, []) for ps in polys_of_gt]  # every point of an object
            boxes = torch.tensor([[min(f[0::2]), min(f[1::2]), max(f[0::2]), max(f[1::2])]
                                  for f in flat], dtype=rois.dtype)
            rois_fg = rois[fg] / scale
            best = _pixel_iou(rois_fg, boxes).argmax(dim=1)
            masks = torch.stack([_mask_in_box(polys_of_gt[int(b)], r.tolist(), res)
                                 .reshape(-1).to(torch.int32)
                                 for b, r in zip(best, rois_fg)])
            cls, has_mask = labels[fg], fg
        else:  # no foreground: the first ROI stands in, with an all -1 ("ignore") target
            bg = torch.nonzero(labels == 0).reshape(-1)[:1]
            rois_fg = rois[:1] / scale
            masks = torch.full((1, res * res), -1, dtype=torch.int32)
            cls, has_mask = torch.zeros(1, dtype=torch.int32), bg
        expanded = torch.full((masks.shape[0], num_classes * res * res), -1, dtype=torch.int32)
        for r in range(masks.shape[0]):
            c = int(cls[r])
            if c > 0:
                expanded[r, c * res * res:(c + 1) * res * res] = masks[r]
        outs[0].append(rois_fg * scale)
        outs[1].append(has_mask.to(torch.int32).reshape(-1, 1))
        outs[2].append(expanded)
        lod.append(lod[-1] + masks.shape[0])
    return {"MaskRois": attach_lod(torch.cat(outs[0]), [lod]),
            "RoiHasMaskInt32": attach_lod(torch.cat(outs[1]), [lod]),
            "MaskInt32": attach_lod(torch.cat(outs[2]), [lod])}


def _shape(ins: dict, attrs: dict) -> dict:
    rois = ins["Rois"]
    if len(rois.shape) != 2 or rois.shape[1] not in (-1, 4):
        raise ValueError(f"generate_mask_labels: Rois must be [R, 4], got {list(rois.shape)}")
    if attrs["num_classes"] <= 0 or attrs["resolution"] <= 0:
        raise ValueError(f"generate_mask_labels: num_classes and resolution must be positive, "
                         f"got {attrs['num_classes']} and {attrs['resolution']}")
    return {"MaskRois": Meta((-1, 4), rois.dtype), "RoiHasMaskInt32": Meta((-1, 1), "int32"),
            "MaskInt32": Meta((-1, attrs["num_classes"] * attrs["resolution"] ** 2), "int32")}


register_op("generate_mask_labels",
            inputs=("ImInfo", "GtClasses", "IsCrowd", "GtSegms", "Rois", "LabelsInt32"),
            outputs=("MaskRois", "RoiHasMaskInt32", "MaskInt32"),
            attrs={"num_classes": 1, "resolution": 14}, infer_shape=_shape,
            kernel=_generate_mask_labels,
            no_compile="rasterizes polygons on the host")
