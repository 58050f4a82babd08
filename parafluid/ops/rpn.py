"""Region-proposal ops of Fluid 1.6 (Faster R-CNN / FPN; no gradients):

- ``generate_proposals``: per image, anchors decoded by the RPN's deltas (pixel boxes, the
  log-size deltas capped at ``log(1000 / 16)``), the ``pre_nms_topN`` best by score, clipped
  to the image, boxes under ``min_size`` (at the original scale) or centred off the image
  dropped, then NMS and the ``post_nms_topN`` best: LoD ``RpnRois [R, 4]`` and
  ``RpnRoiProbs [R, 1]``;
- ``distribute_fpn_proposals``: each ROI to the FPN level
  ``floor(log2(sqrt(area) / refer_scale) + refer_level)`` (clamped), one LoD output per level
  and the index that restores the original order;
- ``collect_fpn_proposals``: the ``post_nms_topN`` best ROIs over all levels, regrouped by
  image.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from ..lod import attach_lod, get_lod
from .detection_match import nms
from .registry import Meta, register_op

__all__: list[str] = []

_BBOX_CLIP = math.log(1000.0 / 16.0)


def _offsets(t: torch.Tensor, op: str, slot: str) -> list[int]:
    lod = get_lod(t)
    if not lod:
        raise ValueError(f"{op}: {slot} carries no LoD (the rows of each image); feed it as a "
                         "LoD tensor")
    return [int(v) for v in lod[-1]]


# ----------------------------------------------------------------------------- generate_proposals


def _decode(anchors: torch.Tensor, deltas: torch.Tensor, var: torch.Tensor) -> torch.Tensor:
    w = anchors[:, 2] - anchors[:, 0] + 1
    h = anchors[:, 3] - anchors[:, 1] + 1
    cx, cy = anchors[:, 0] + 0.5 * w, anchors[:, 1] + 0.5 * h
    clip = torch.tensor(_BBOX_CLIP, dtype=deltas.dtype)
    bx = var[:, 0] * deltas[:, 0] * w + cx
    by = var[:, 1] * deltas[:, 1] * h + cy
    bw = torch.exp(torch.minimum(var[:, 2] * deltas[:, 2], clip)) * w
    bh = torch.exp(torch.minimum(var[:, 3] * deltas[:, 3], clip)) * h
    return torch.stack([bx - bw / 2, by - bh / 2, bx + bw / 2 - 1, by + bh / 2 - 1], 1)


def _proposals_one(scores: torch.Tensor, deltas: torch.Tensor, info: list[float],
                   anchors: torch.Tensor, var: torch.Tensor, attrs: dict) -> tuple:
    order = torch.argsort(scores, descending=True, stable=True)
    top = attrs["pre_nms_topN"]
    if 0 < top < order.numel():
        order = order[:top]
    boxes = _decode(anchors[order], deltas[order], var[order])
    im_h, im_w, scale = info
    boxes[:, 0::2] = boxes[:, 0::2].clamp(0, im_w - 1)
    boxes[:, 1::2] = boxes[:, 1::2].clamp(0, im_h - 1)
    min_size = max(attrs["min_size"], 1.0)
    ws, hs = boxes[:, 2] - boxes[:, 0] + 1, boxes[:, 3] - boxes[:, 1] + 1
    keep = (((boxes[:, 2] - boxes[:, 0]) / scale + 1 >= min_size) &
            ((boxes[:, 3] - boxes[:, 1]) / scale + 1 >= min_size) &
            (boxes[:, 0] + ws / 2 <= im_w) & (boxes[:, 1] + hs / 2 <= im_h))
    boxes, sc = boxes[keep], scores[order][keep]
    if attrs["nms_thresh"] > 0:
        kept = nms(boxes.tolist(), sc.tolist(), -math.inf, attrs["nms_thresh"], attrs["eta"],
                   -1, False)
        post = attrs["post_nms_topN"]
        if 0 < post < len(kept):
            kept = kept[:post]
        idx = torch.tensor(kept, dtype=torch.int64)
        boxes, sc = boxes[idx], sc[idx]
    return boxes, sc


def _generate_proposals(ins: dict, attrs: dict, ctx: Any) -> dict:
    scores, deltas, info = ins["Scores"], ins["BboxDeltas"], ins["ImInfo"]
    anchors = ins["Anchors"].reshape(-1, 4)
    var = ins["Variances"].reshape(-1, 4)
    n = scores.shape[0]
    rois, probs, offsets = [], [], [0]
    for i in range(n):
        s = scores[i].permute(1, 2, 0).reshape(-1)  # [H, W, A] order, as the anchors
        d = deltas[i].permute(1, 2, 0).reshape(-1, 4)
        b, p = _proposals_one(s, d, info[i].tolist(), anchors, var, attrs)
        rois.append(b)
        probs.append(p)
        offsets.append(offsets[-1] + b.shape[0])
    return {"RpnRois": attach_lod(torch.cat(rois).reshape(-1, 4), [offsets]),
            "RpnRoiProbs": attach_lod(torch.cat(probs).reshape(-1, 1), [offsets])}


def _generate_proposals_shape(ins: dict, attrs: dict) -> dict:
    scores, deltas, anchors = ins["Scores"], ins["BboxDeltas"], ins["Anchors"]
    if len(scores.shape) != 4 or len(deltas.shape) != 4:
        raise ValueError(f"generate_proposals: Scores [N, A, H, W] and BboxDeltas "
                         f"[N, 4A, H, W] must be 4-D, got {list(scores.shape)} and "
                         f"{list(deltas.shape)}")
    if -1 not in (scores.shape[1], deltas.shape[1]) and deltas.shape[1] != 4 * scores.shape[1]:
        raise ValueError(f"generate_proposals: BboxDeltas needs 4 deltas per anchor of Scores "
                         f"({scores.shape[1]}), got {deltas.shape[1]} channels")
    if anchors.shape[-1] not in (-1, 4):
        raise ValueError(f"generate_proposals: Anchors must end in 4 coordinates, got "
                         f"{list(anchors.shape)}")
    return {"RpnRois": Meta((-1, 4), scores.dtype), "RpnRoiProbs": Meta((-1, 1), scores.dtype)}


register_op("generate_proposals",
            inputs=("Scores", "BboxDeltas", "ImInfo", "Anchors", "Variances"),
            outputs=("RpnRois", "RpnRoiProbs"),
            attrs={"pre_nms_topN": 6000, "post_nms_topN": 1000, "nms_thresh": 0.5,
                   "min_size": 0.1, "eta": 1.0},
            infer_shape=_generate_proposals_shape, kernel=_generate_proposals,
            no_compile="the number of proposals depends on the values (NMS)")


# ----------------------------------------------------------------------------- FPN


def _levels(rois: torch.Tensor, attrs: dict) -> list[int]:
    out = []
    for x1, y1, x2, y2 in rois.tolist():
        area = 0.0 if x2 < x1 or y2 < y1 else (x2 - x1 + 1) * (y2 - y1 + 1)
        lvl = math.floor(math.log2(math.sqrt(area) / attrs["refer_scale"] + 1e-6) +
                         attrs["refer_level"])
        out.append(min(attrs["max_level"], max(lvl, attrs["min_level"])))
    return out


def _distribute(ins: dict, attrs: dict, ctx: Any) -> dict:
    rois = ins["FpnRois"]
    offs = _offsets(rois, "distribute_fpn_proposals", "FpnRois")
    levels = _levels(rois, attrs)
    count = attrs["max_level"] - attrs["min_level"] + 1
    outs, order = [], []
    for k in range(count):
        lvl = attrs["min_level"] + k
        rows, lod = [], [0]
        for i in range(len(offs) - 1):
            mine = [r for r in range(offs[i], offs[i + 1]) if levels[r] == lvl]
            rows += mine
            lod.append(lod[-1] + len(mine))
        order += rows
        outs.append(attach_lod(rois[torch.tensor(rows, dtype=torch.int64)].reshape(-1, 4),
                               [lod]))
    restore = torch.empty(len(order), dtype=torch.int32)
    restore[torch.tensor(order, dtype=torch.int64)] = torch.arange(len(order),
                                                                   dtype=torch.int32)
    return {"MultiFpnRois": outs, "RestoreIndex": restore.reshape(-1, 1)}


def _distribute_shape(ins: dict, attrs: dict) -> dict:
    rois = ins["FpnRois"]
    if len(rois.shape) != 2 or rois.shape[1] not in (-1, 4):
        raise ValueError(f"distribute_fpn_proposals: FpnRois must be [R, 4], got "
                         f"{list(rois.shape)}")
    if attrs["max_level"] < attrs["min_level"]:
        raise ValueError(f"distribute_fpn_proposals: max_level {attrs['max_level']} is below "
                         f"min_level {attrs['min_level']}")
    count = attrs["max_level"] - attrs["min_level"] + 1
    return {"MultiFpnRois": [Meta((-1, 4), rois.dtype)] * count,
            "RestoreIndex": Meta((-1, 1), "int32")}


register_op("distribute_fpn_proposals", inputs=("FpnRois",),
            outputs=("MultiFpnRois[]", "RestoreIndex"),
            attrs={"min_level": 2, "max_level": 5, "refer_level": 4, "refer_scale": 224},
            infer_shape=_distribute_shape, kernel=_distribute,
            no_compile="the rows of each level depend on the ROIs' sizes")


def _collect(ins: dict, attrs: dict, ctx: Any) -> dict:
    entries = []  # (score, image, roi row)
    images = 0
    for rois, scores in zip(ins["MultiLevelRois"], ins["MultiLevelScores"]):
        offs = _offsets(rois, "collect_fpn_proposals", "MultiLevelRois")
        images = max(images, len(offs) - 1)
        s = scores.reshape(-1).tolist()
        for i in range(len(offs) - 1):
            entries += [(s[r], i, rois[r]) for r in range(offs[i], offs[i + 1])]
    entries = sorted(entries, key=lambda e: -e[0])[:attrs["post_nms_topN"]]
    entries = sorted(entries, key=lambda e: e[1])  # stable: by image, best first
    lod = [0] * (images + 1)
    for _, i, _ in entries:
        lod[i + 1] += 1
    for i in range(images):
        lod[i + 1] += lod[i]
    dtype = ins["MultiLevelRois"][0].dtype
    out = torch.stack([e[2] for e in entries]) if entries else torch.zeros((0, 4), dtype=dtype)
    return {"FpnRois": attach_lod(out, [lod])}


def _collect_shape(ins: dict, attrs: dict) -> dict:
    rois, scores = ins["MultiLevelRois"], ins["MultiLevelScores"]
    if len(rois) != len(scores) or not rois:
        raise ValueError(f"collect_fpn_proposals: give one score tensor per ROI tensor, got "
                         f"{len(rois)} ROI and {len(scores)} score tensors")
    return {"FpnRois": Meta((-1, 4), rois[0].dtype)}


register_op("collect_fpn_proposals", inputs=("MultiLevelRois[]", "MultiLevelScores[]"),
            outputs=("FpnRois",), attrs={"post_nms_topN": 100},
            infer_shape=_collect_shape, kernel=_collect,
            no_compile="sorts the proposals by score on the host")
