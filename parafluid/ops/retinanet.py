"""RetinaNet inference of Fluid 1.6: ``retinanet_detection_output`` (no gradient).

Per image and FPN level: the ``nms_top_k`` best (anchor, class) scores over
``score_threshold`` (over 0 on the last level), their anchors (pixel boxes) moved by the
level's deltas, scaled back by the image's scale and clipped to the original image; then,
per class, NMS of pixel boxes, and the ``keep_top_k`` best of all classes. One row
``[label + 1, score, x1, y1, x2, y2]`` per detection, best first, one LoD sequence per image.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from ..lod import attach_lod
from .detection_match import nms
from .registry import Meta, register_op

__all__: list[str] = []


def _level_predictions(deltas: torch.Tensor, scores: torch.Tensor, anchors: torch.Tensor,
                       info: list[float], threshold: float, top_k: int,
                       preds: dict[int, list]) -> None:
    flat = scores.reshape(-1).tolist()
    cand = sorted((i for i, s in enumerate(flat) if s > threshold), key=lambda i: -flat[i])
    if top_k > -1:
        cand = cand[:top_k]
    im_h, im_w, scale = info
    im_h, im_w = float(round(im_h / scale)), float(round(im_w / scale))
    classes = scores.shape[1]
    d, a = deltas.tolist(), anchors.tolist()
    for idx in cand:
        k, c = divmod(idx, classes)
        aw, ah = a[k][2] - a[k][0] + 1, a[k][3] - a[k][1] + 1
        cx = d[k][0] * aw + a[k][0] + aw / 2
        cy = d[k][1] * ah + a[k][1] + ah / 2
        w, h = math.exp(d[k][2]) * aw, math.exp(d[k][3]) * ah
        box = [(cx - w / 2) / scale, (cy - h / 2) / scale, (cx + w / 2 - 1) / scale,
               (cy + h / 2 - 1) / scale]
        box = [max(min(v, (im_w if j % 2 == 0 else im_h) - 1), 0.0) for j, v in enumerate(box)]
        preds.setdefault(c, []).append((box, flat[idx]))


def _retinanet_detection_output(ins: dict, attrs: dict, ctx: Any) -> dict:
    boxes, scores, anchors, info = ins["BBoxes"], ins["Scores"], ins["Anchors"], ins["ImInfo"]
    if not len(boxes) == len(scores) == len(anchors):
        raise ValueError(f"retinanet_detection_output: give BBoxes, Scores and Anchors for the "
                         f"same levels, got {len(boxes)}, {len(scores)}, {len(anchors)}")
    rows, lod = [], [0]
    for i in range(scores[0].shape[0]):
        preds: dict[int, list] = {}
        for level, (b, s, a) in enumerate(zip(boxes, scores, anchors)):
            threshold = attrs["score_threshold"] if level < len(scores) - 1 else 0.0
            _level_predictions(b[i], s[i], a.reshape(-1, 4), info[i].tolist(), threshold,
                               attrs["nms_top_k"], preds)
        dets = []
        for c in sorted(preds):
            kept = nms([p[0] for p in preds[c]], [p[1] for p in preds[c]], -math.inf,
                       attrs["nms_threshold"], attrs["nms_eta"], -1, False)
            dets += [(preds[c][k][1], c, preds[c][k][0]) for k in kept]
        dets = sorted(dets, key=lambda t: -t[0])[:attrs["keep_top_k"]]
        rows += [[c + 1.0, score, *box] for score, c, box in dets]
        lod.append(len(rows))
    out = torch.tensor(rows, dtype=scores[0].dtype).reshape(-1, 6)
    return {"Out": attach_lod(out, [lod])}


def _shape(ins: dict, attrs: dict) -> dict:
    boxes, scores = ins["BBoxes"], ins["Scores"]
    if not boxes or len(boxes) != len(scores):
        raise ValueError(f"retinanet_detection_output: give one Scores tensor per BBoxes "
                         f"tensor, got {len(boxes)} and {len(scores)}")
    for b, s in zip(boxes, scores):
        if len(b.shape) != 3 or len(s.shape) != 3 or b.shape[-1] not in (-1, 4):
            raise ValueError(f"retinanet_detection_output: BBoxes must be [N, M, 4] and Scores "
                             f"[N, M, C], got {list(b.shape)} and {list(s.shape)}")
    return {"Out": Meta((-1, 6), scores[0].dtype)}


register_op("retinanet_detection_output",
            inputs=("BBoxes[]", "Scores[]", "Anchors[]", "ImInfo"), outputs=("Out",),
            attrs={"score_threshold": 0.05, "nms_top_k": 1000, "keep_top_k": 100,
                   "nms_threshold": 0.3, "nms_eta": 1.0},
            infer_shape=_shape, kernel=_retinanet_detection_output,
            no_compile="non-maximum suppression: the number of detections depends on the values")
