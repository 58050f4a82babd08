"""Box ops of Fluid 1.6's detection family: prior boxes and anchors, box encoding and
decoding, IoU, clipping (none of them has a gradient in Fluid).

Boxes are ``[x1, y1, x2, y2]``. ``box_normalized=False`` means pixel boxes whose width is
``x2 - x1 + 1`` (Fluid's convention); normalized boxes have width ``x2 - x1``.

- ``prior_box`` / ``density_prior_box`` / ``anchor_generator``: per feature-map cell, a fixed
  set of boxes, ``[H, W, num_priors, 4]`` plus the variances broadcast to the same shape;
- ``box_coder``: ``encode_center_size`` (targets ``[N, 4]`` against priors ``[M, 4]`` ->
  ``[N, M, 4]`` offsets) and ``decode_center_size`` (offsets ``[N, M, 4]`` -> boxes, the prior
  taken along ``axis``), variances from ``PriorBoxVar`` or the ``variance`` attribute;
- ``iou_similarity``: ``[N, M]`` IoU of two box lists; ``box_clip``: boxes clipped to each
  image of ``ImInfo`` (``[h, w, scale]``).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from ..lod import attach_lod, get_lod
from .registry import Meta, register_op

__all__ = ["expand_aspect_ratios", "iou_matrix"]


def _rank(op: str, slot: str, meta: Meta, ranks: tuple[int, ...]) -> None:
    if len(meta.shape) not in ranks:
        want = " or ".join(f"{r}-D" for r in ranks)
        raise ValueError(f"{op}: {slot} must be {want}, got shape {list(meta.shape)}")


def _last_is_4(op: str, slot: str, meta: Meta) -> None:
    if meta.shape and meta.shape[-1] not in (-1, 4):
        raise ValueError(f"{op}: the last dim of {slot} must be 4 (x1, y1, x2, y2), got "
                         f"shape {list(meta.shape)}")


def _priors_out(boxes: list[list[float]], h: int, w: int, n: int, variances: Any,
                clip: bool, like: torch.Tensor) -> dict:
    out = torch.tensor(boxes, dtype=torch.float64).reshape(h, w, n, 4)
    if clip:
        out = out.clamp(0.0, 1.0)
    var = torch.tensor([float(v) for v in variances], dtype=torch.float64).expand(h, w, n, 4)
    return {"Boxes": out.to(like.dtype), "Variances": var.to(like.dtype).contiguous()}


def _steps(attrs: dict, feat: torch.Tensor, img: torch.Tensor) -> tuple[float, float]:
    if attrs["step_w"] == 0 or attrs["step_h"] == 0:
        return img.shape[3] / feat.shape[3], img.shape[2] / feat.shape[2]
    return float(attrs["step_w"]), float(attrs["step_h"])


# ----------------------------------------------------------------------------- prior_box


def expand_aspect_ratios(ratios: list[float], flip: bool) -> list[float]:
    """1.0, then each new ratio (and its inverse when ``flip``), as Fluid's prior_box."""
    out = [1.0]
    for r in ratios:
        if any(abs(r - o) < 1e-6 for o in out):
            continue
        out.append(float(r))
        if flip:
            out.append(1.0 / r)
    return out


def _num_priors(attrs: dict) -> int:
    ratios = expand_aspect_ratios(attrs["aspect_ratios"], attrs["flip"])
    return len(ratios) * len(attrs["min_sizes"]) + len(attrs["max_sizes"])


def _prior_box_shape(ins: dict, attrs: dict) -> dict:
    x, img = ins["Input"], ins["Image"]
    _rank("prior_box", "Input", x, (4,))
    _rank("prior_box", "Image", img, (4,))
    mins, maxs = attrs["min_sizes"], attrs["max_sizes"]
    if not mins or any(m <= 0 for m in mins):
        raise ValueError(f"prior_box: min_sizes must be positive sizes, got {list(mins)}")
    if maxs and (len(maxs) != len(mins) or any(a <= b for a, b in zip(maxs, mins))):
        raise ValueError(f"prior_box: max_sizes must pair with min_sizes and exceed them, got "
                         f"min_sizes {list(mins)}, max_sizes {list(maxs)}")
    if len(attrs["variances"]) != 4:
        raise ValueError(f"prior_box: variance must hold 4 values, got {attrs['variances']}")
    shape = (x.shape[2], x.shape[3], _num_priors(attrs), 4)
    return {"Boxes": Meta(shape, x.dtype), "Variances": Meta(shape, x.dtype)}


def _prior_box(ins: dict, attrs: dict, ctx: Any) -> dict:
    feat, img = ins["Input"], ins["Image"]
    img_h, img_w = img.shape[2], img.shape[3]
    step_w, step_h = _steps(attrs, feat, img)
    ratios = expand_aspect_ratios(attrs["aspect_ratios"], attrs["flip"])
    mins, maxs, off = attrs["min_sizes"], attrs["max_sizes"], attrs["offset"]
    boxes: list[list[float]] = []

    def add(cx: float, cy: float, half_w: float, half_h: float) -> None:
        boxes.append([(cx - half_w) / img_w, (cy - half_h) / img_h,
                      (cx + half_w) / img_w, (cy + half_h) / img_h])

    for h in range(feat.shape[2]):
        for w in range(feat.shape[3]):
            cx, cy = (w + off) * step_w, (h + off) * step_h
            for s, size in enumerate(mins):
                if attrs["min_max_aspect_ratios_order"]:  # Caffe's order: min, max, ratios
                    add(cx, cy, size / 2, size / 2)
                    if maxs:
                        big = math.sqrt(size * maxs[s]) / 2
                        add(cx, cy, big, big)
                    for r in ratios:
                        if abs(r - 1.0) >= 1e-6:
                            add(cx, cy, size * math.sqrt(r) / 2, size / math.sqrt(r) / 2)
                else:
                    for r in ratios:
                        add(cx, cy, size * math.sqrt(r) / 2, size / math.sqrt(r) / 2)
                    if maxs:
                        big = math.sqrt(size * maxs[s]) / 2
                        add(cx, cy, big, big)
    return _priors_out(boxes, feat.shape[2], feat.shape[3], _num_priors(attrs),
                       attrs["variances"], attrs["clip"], feat)


register_op("prior_box", inputs=("Input", "Image"), outputs=("Boxes", "Variances"),
            attrs={"min_sizes": [], "max_sizes": [], "aspect_ratios": [1.0],
                   "variances": [0.1, 0.1, 0.2, 0.2], "flip": True, "clip": True,
                   "step_w": 0.0, "step_h": 0.0, "offset": 0.5,
                   "min_max_aspect_ratios_order": False},
            infer_shape=_prior_box_shape, kernel=_prior_box)


# ----------------------------------------------------------------------------- density_prior_box


def _density_count(attrs: dict) -> int:
    return len(attrs["fixed_ratios"]) * sum(d * d for d in attrs["densities"])


def _density_prior_box_shape(ins: dict, attrs: dict) -> dict:
    x, img = ins["Input"], ins["Image"]
    _rank("density_prior_box", "Input", x, (4,))
    _rank("density_prior_box", "Image", img, (4,))
    sizes, dens = attrs["fixed_sizes"], attrs["densities"]
    if not sizes or len(sizes) != len(dens) or any(d <= 0 for d in dens):
        raise ValueError(f"density_prior_box: fixed_sizes and densities must pair (positive "
                         f"densities), got fixed_sizes {list(sizes)}, densities {list(dens)}")
    if not attrs["fixed_ratios"]:
        raise ValueError("density_prior_box: fixed_ratios must not be empty")
    n = _density_count(attrs)
    shape = (x.shape[2], x.shape[3], n, 4)
    if attrs["flatten_to_2d"]:
        rows = -1 if -1 in shape[:2] else shape[0] * shape[1] * n
        shape = (rows, 4)
    return {"Boxes": Meta(shape, x.dtype), "Variances": Meta(shape, x.dtype)}


def _density_prior_box(ins: dict, attrs: dict, ctx: Any) -> dict:
    feat, img = ins["Input"], ins["Image"]
    img_h, img_w = img.shape[2], img.shape[3]
    step_w, step_h = _steps(attrs, feat, img)
    # NOTE: Fluid takes the average step and each density's shift as ints
    step_avg = int((step_w + step_h) * 0.5)
    off = attrs["offset"]
    boxes: list[list[float]] = []
    for h in range(feat.shape[2]):
        for w in range(feat.shape[3]):
            cx, cy = (w + off) * step_w, (h + off) * step_h
            for size, density in zip(attrs["fixed_sizes"], attrs["densities"]):
                shift = step_avg // density
                for r in attrs["fixed_ratios"]:
                    bw, bh = size * math.sqrt(r), size / math.sqrt(r)
                    x0 = cx - step_avg / 2 + shift / 2
                    y0 = cy - step_avg / 2 + shift / 2
                    for di in range(density):
                        for dj in range(density):
                            px, py = x0 + dj * shift, y0 + di * shift
                            boxes.append([max((px - bw / 2) / img_w, 0.0),
                                          max((py - bh / 2) / img_h, 0.0),
                                          min((px + bw / 2) / img_w, 1.0),
                                          min((py + bh / 2) / img_h, 1.0)])
    out = _priors_out(boxes, feat.shape[2], feat.shape[3], _density_count(attrs),
                      attrs["variances"], attrs["clip"], feat)
    if attrs["flatten_to_2d"]:
        out = {k: v.reshape(-1, 4) for k, v in out.items()}
    return out


register_op("density_prior_box", inputs=("Input", "Image"), outputs=("Boxes", "Variances"),
            attrs={"densities": [], "fixed_sizes": [], "fixed_ratios": [],
                   "variances": [0.1, 0.1, 0.2, 0.2], "clip": True, "step_w": 0.0,
                   "step_h": 0.0, "offset": 0.5, "flatten_to_2d": False},
            infer_shape=_density_prior_box_shape, kernel=_density_prior_box)


# ----------------------------------------------------------------------------- anchor_generator


def _anchor_shape(ins: dict, attrs: dict) -> dict:
    x = ins["Input"]
    _rank("anchor_generator", "Input", x, (4,))
    if len(attrs["stride"]) != 2 or any(s <= 0 for s in attrs["stride"]):
        raise ValueError(f"anchor_generator: stride must be 2 positive values [w, h], got "
                         f"{attrs['stride']}")
    if len(attrs["variances"]) != 4:
        raise ValueError(f"anchor_generator: variance must hold 4 values, got "
                         f"{attrs['variances']}")
    n = len(attrs["anchor_sizes"]) * len(attrs["aspect_ratios"])
    shape = (x.shape[2], x.shape[3], n, 4)
    return {"Anchors": Meta(shape, x.dtype), "Variances": Meta(shape, x.dtype)}


def _anchor_generator(ins: dict, attrs: dict, ctx: Any) -> dict:
    feat = ins["Input"]
    sw, sh = (float(s) for s in attrs["stride"])
    off = attrs["offset"]
    shapes = []
    for r in attrs["aspect_ratios"]:
        for size in attrs["anchor_sizes"]:
            base_w = round(math.sqrt(sw * sh / r))
            base_h = round(base_w * r)
            shapes.append((size / sw * base_w, size / sh * base_h))
    boxes = []
    for h in range(feat.shape[2]):
        for w in range(feat.shape[3]):
            cx, cy = w * sw + off * (sw - 1), h * sh + off * (sh - 1)
            for aw, ah in shapes:
                boxes.append([cx - 0.5 * (aw - 1), cy - 0.5 * (ah - 1),
                              cx + 0.5 * (aw - 1), cy + 0.5 * (ah - 1)])
    out = _priors_out(boxes, feat.shape[2], feat.shape[3], len(shapes), attrs["variances"],
                      False, feat)
    return {"Anchors": out["Boxes"], "Variances": out["Variances"]}


register_op("anchor_generator", inputs=("Input",), outputs=("Anchors", "Variances"),
            attrs={"anchor_sizes": [64.0, 128.0, 256.0, 512.0],
                   "aspect_ratios": [0.5, 1.0, 2.0], "variances": [0.1, 0.1, 0.2, 0.2],
                   "stride": [16.0, 16.0], "offset": 0.5},
            infer_shape=_anchor_shape, kernel=_anchor_generator)


# ----------------------------------------------------------------------------- box_coder


def _box_coder_shape(ins: dict, attrs: dict) -> dict:
    prior, target, var = ins["PriorBox"], ins["TargetBox"], ins.get("PriorBoxVar")
    _rank("box_coder", "PriorBox", prior, (2,))
    _last_is_4("box_coder", "PriorBox", prior)
    if var is not None and tuple(var.shape) != tuple(prior.shape) and -1 not in var.shape:
        raise ValueError(f"box_coder: PriorBoxVar must have PriorBox's shape "
                         f"{list(prior.shape)}, got {list(var.shape)}")
    if attrs["variance"] and len(attrs["variance"]) != 4:
        raise ValueError(f"box_coder: variance must hold 4 values, got {attrs['variance']}")
    code = attrs["code_type"]
    if code == "encode_center_size":
        _rank("box_coder", "TargetBox", target, (2,))
        _last_is_4("box_coder", "TargetBox", target)
        return {"OutputBox": Meta((target.shape[0], prior.shape[0], 4), target.dtype)}
    if code == "decode_center_size":
        _rank("box_coder", "TargetBox", target, (3,))
        _last_is_4("box_coder", "TargetBox", target)
        if attrs["axis"] not in (0, 1):
            raise ValueError(f"box_coder: axis must be 0 or 1, got {attrs['axis']}")
        along = target.shape[1 - attrs["axis"]]
        if -1 not in (along, prior.shape[0]) and along != prior.shape[0]:
            raise ValueError(f"box_coder: with axis={attrs['axis']} TargetBox dim "
                             f"{1 - attrs['axis']} ({along}) must equal the number of "
                             f"priors ({prior.shape[0]})")
        return {"OutputBox": Meta(target.shape, target.dtype)}
    raise ValueError(f"box_coder: code_type must be 'encode_center_size' or "
                     f"'decode_center_size', got {code!r}")


def _centers(boxes: torch.Tensor, pixel: float) -> tuple[torch.Tensor, ...]:
    w = boxes[..., 2] - boxes[..., 0] + pixel
    h = boxes[..., 3] - boxes[..., 1] + pixel
    return w, h, boxes[..., 0] + w / 2, boxes[..., 1] + h / 2


def _box_coder(ins: dict, attrs: dict, ctx: Any) -> dict:
    prior, target, var = ins["PriorBox"], ins["TargetBox"], ins.get("PriorBoxVar")
    pixel = 0.0 if attrs["box_normalized"] else 1.0
    if var is None and attrs["variance"]:
        var = torch.tensor(attrs["variance"], dtype=prior.dtype).expand(prior.shape[0], 4)
    pw, ph, pcx, pcy = _centers(prior, pixel)
    if attrs["code_type"] == "encode_center_size":
        tw = target[:, 2] - target[:, 0] + pixel
        th = target[:, 3] - target[:, 1] + pixel
        tcx = (target[:, 2] + target[:, 0]) / 2
        tcy = (target[:, 3] + target[:, 1]) / 2
        out = torch.stack([(tcx[:, None] - pcx) / pw, (tcy[:, None] - pcy) / ph,
                           torch.log(torch.abs(tw[:, None] / pw)),
                           torch.log(torch.abs(th[:, None] / ph))], dim=-1)
        if var is not None:
            out = out / var[None]
        return {"OutputBox": out}
    # decode: the prior of element (i, j) is prior[j] (axis 0) or prior[i] (axis 1)
    shape = (1, -1) if attrs["axis"] == 0 else (-1, 1)
    pw, ph, pcx, pcy = (t.reshape(shape) for t in (pw, ph, pcx, pcy))
    v = var.reshape(*shape, 4) if var is not None else torch.ones(4, dtype=target.dtype)
    cx = v[..., 0] * target[..., 0] * pw + pcx
    cy = v[..., 1] * target[..., 1] * ph + pcy
    w = torch.exp(v[..., 2] * target[..., 2]) * pw
    h = torch.exp(v[..., 3] * target[..., 3]) * ph
    out = torch.stack([cx - w / 2, cy - h / 2, cx + w / 2 - pixel, cy + h / 2 - pixel], -1)
    return {"OutputBox": out}


register_op("box_coder", inputs=("PriorBox", "PriorBoxVar?", "TargetBox"),
            outputs=("OutputBox",),
            attrs={"code_type": "encode_center_size", "box_normalized": True, "axis": 0,
                   "variance": []},
            infer_shape=_box_coder_shape, kernel=_box_coder, share_lod=("TargetBox", "OutputBox"))


# ----------------------------------------------------------------------------- iou_similarity


def iou_matrix(a: torch.Tensor, b: torch.Tensor, normalized: bool = True) -> torch.Tensor:
    """``[N, M]`` intersection over union of boxes ``a [N, 4]`` and ``b [M, 4]``."""
    pixel = 0.0 if normalized else 1.0
    area_a = ((a[:, 2] - a[:, 0] + pixel) * (a[:, 3] - a[:, 1] + pixel))[:, None]
    area_b = ((b[:, 2] - b[:, 0] + pixel) * (b[:, 3] - b[:, 1] + pixel))[None, :]
    iw = (torch.minimum(a[:, None, 2], b[None, :, 2]) -
          torch.maximum(a[:, None, 0], b[None, :, 0]) + pixel).clamp(min=0)
    ih = (torch.minimum(a[:, None, 3], b[None, :, 3]) -
          torch.maximum(a[:, None, 1], b[None, :, 1]) + pixel).clamp(min=0)
    inter = iw * ih
    return inter / (area_a + area_b - inter)


def _iou_shape(ins: dict, attrs: dict) -> dict:
    x, y = ins["X"], ins["Y"]
    for slot, m in (("X", x), ("Y", y)):
        _rank("iou_similarity", slot, m, (2,))
        _last_is_4("iou_similarity", slot, m)
    return {"Out": Meta((x.shape[0], y.shape[0]), x.dtype)}


register_op("iou_similarity", inputs=("X", "Y"), outputs=("Out",),
            attrs={"box_normalized": True}, infer_shape=_iou_shape,
            kernel=lambda ins, attrs, ctx: {"Out": iou_matrix(ins["X"], ins["Y"],
                                                              attrs["box_normalized"])},
            share_lod=("X", "Out"))


# ----------------------------------------------------------------------------- box_clip


def _box_clip_shape(ins: dict, attrs: dict) -> dict:
    x, info = ins["Input"], ins["ImInfo"]
    _last_is_4("box_clip", "Input", x)
    _rank("box_clip", "ImInfo", info, (2,))
    if info.shape[1] not in (-1, 3):
        raise ValueError(f"box_clip: ImInfo must be [N, 3] (height, width, scale), got "
                         f"{list(info.shape)}")
    return {"Output": Meta(x.shape, x.dtype)}


def _box_clip(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, info = ins["Input"], ins["ImInfo"]
    lod = get_lod(x)
    offsets = lod[-1] if lod else list(range(x.shape[0] + 1))
    if len(offsets) - 1 != info.shape[0]:
        raise ValueError(f"box_clip: Input holds boxes of {len(offsets) - 1} images but "
                         f"ImInfo has {info.shape[0]} rows")
    out = x.clone()
    for i in range(info.shape[0]):
        rows = out[offsets[i]:offsets[i + 1]]
        im_h = torch.round(info[i, 0] / info[i, 2])
        im_w = torch.round(info[i, 1] / info[i, 2])
        zero = torch.zeros((), dtype=x.dtype)
        rows[..., 0::2] = torch.maximum(torch.minimum(rows[..., 0::2], im_w - 1), zero)
        rows[..., 1::2] = torch.maximum(torch.minimum(rows[..., 1::2], im_h - 1), zero)
    return {"Output": attach_lod(out, lod)}


register_op("box_clip", inputs=("Input", "ImInfo"), outputs=("Output",),
            infer_shape=_box_clip_shape, kernel=_box_clip,
            no_compile="per-image clipping reads the LoD of Input on the host")


# ---------------------------------------------------------------------- box_decoder_and_assign


def _decode_assign_shape(ins: dict, attrs: dict) -> dict:
    prior, target, score = ins["PriorBox"], ins["TargetBox"], ins["BoxScore"]
    _rank("box_decoder_and_assign", "PriorBox", prior, (2,))
    _rank("box_decoder_and_assign", "TargetBox", target, (2,))
    _rank("box_decoder_and_assign", "BoxScore", score, (2,))
    if -1 not in (target.shape[1], score.shape[1]) and target.shape[1] != 4 * score.shape[1]:
        raise ValueError(f"box_decoder_and_assign: TargetBox must hold 4 deltas per class of "
                         f"BoxScore ({score.shape[1]} classes), got {list(target.shape)}")
    return {"DecodeBox": Meta(target.shape, target.dtype),
            "OutputAssignBox": Meta((target.shape[0], 4), target.dtype)}


def _box_decoder_and_assign(ins: dict, attrs: dict, ctx: Any) -> dict:
    prior, target, score = ins["PriorBox"], ins["TargetBox"], ins["BoxScore"]
    var = ins.get("PriorBoxVar")
    # Fluid reads the first 4 values of PriorBoxVar, one variance set for every ROI
    var = torch.ones(4, dtype=target.dtype) if var is None else var.reshape(-1)[:4]
    r, c = score.shape
    d = target.reshape(r, c, 4)
    # pixel boxes: the width counts both ends and the centre is x1 + width / 2
    pw = (prior[:, 2] - prior[:, 0] + 1)[:, None]
    ph = (prior[:, 3] - prior[:, 1] + 1)[:, None]
    pcx = prior[:, 0:1] + pw / 2
    pcy = prior[:, 1:2] + ph / 2
    clip = torch.tensor(attrs["box_clip"], dtype=target.dtype)
    dw = torch.minimum(var[2] * d[..., 2], clip)
    dh = torch.minimum(var[3] * d[..., 3], clip)
    cx = var[0] * d[..., 0] * pw + pcx
    cy = var[1] * d[..., 1] * ph + pcy
    w, h = torch.exp(dw) * pw, torch.exp(dh) * ph
    boxes = torch.stack([cx - w / 2, cy - h / 2, cx + w / 2 - 1, cy + h / 2 - 1], -1)
    # each ROI takes the box of its best class other than class 0 (the background), if any
    fg = score.clone()
    fg[:, 0] = -float("inf")
    best = fg.argmax(dim=1) if c > 1 else torch.zeros(r, dtype=torch.int64)
    has_fg = (best > 0) & (fg.gather(1, best[:, None])[:, 0] > -1)
    chosen = boxes[torch.arange(r), best]
    assign = torch.where(has_fg[:, None], chosen, prior)
    return {"DecodeBox": boxes.reshape(r, c * 4), "OutputAssignBox": assign}


register_op("box_decoder_and_assign",
            inputs=("PriorBox", "PriorBoxVar?", "TargetBox", "BoxScore"),
            outputs=("DecodeBox", "OutputAssignBox"), attrs={"box_clip": 4.135},
            infer_shape=_decode_assign_shape, kernel=_box_decoder_and_assign)


# ----------------------------------------------------------------------- polygon_box_transform


def _polygon_shape(ins: dict, attrs: dict) -> dict:
    x = ins["Input"]
    _rank("polygon_box_transform", "Input", x, (4,))
    if x.shape[1] != -1 and x.shape[1] % 2:
        raise ValueError(f"polygon_box_transform: Input must have an even number of channels "
                         f"(x, y offsets), got {x.shape[1]}")
    return {"Output": Meta(x.shape, x.dtype)}


def _polygon_box_transform(ins: dict, attrs: dict, ctx: Any) -> dict:
    x = ins["Input"]
    h, w = x.shape[2], x.shape[3]
    # even channels are x offsets, odd ones y offsets, from the cell's corner (4x stride)
    gx = (torch.arange(w, dtype=x.dtype) * 4).reshape(1, 1, 1, w)
    gy = (torch.arange(h, dtype=x.dtype) * 4).reshape(1, 1, h, 1)
    out = torch.empty_like(x)
    out[:, 0::2] = gx - x[:, 0::2]
    out[:, 1::2] = gy - x[:, 1::2]
    return {"Output": out}


register_op("polygon_box_transform", inputs=("Input",), outputs=("Output",),
            infer_shape=_polygon_shape, kernel=_polygon_box_transform)
