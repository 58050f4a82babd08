"""YOLOv3 ops of Fluid 1.6: ``yolo_box`` (decode a head's output into image boxes and class
scores) and ``yolov3_loss`` (the training loss, with its gradient to ``X``).

The head ``X [N, A * (5 + C), H, W]`` holds, per anchor, ``tx, ty, tw, th``, the objectness
and ``C`` class logits. As in Fluid 1.6 the grid is taken as square: the grid size is ``H`` and
the network input ``downsample_ratio * H``.

``yolov3_loss`` per image: sigmoid cross entropy on ``tx, ty`` and L1 on ``tw, th`` (scaled by
``2 - w * h`` and the ground truth's score) at the cell and anchor each ground-truth box is
assigned to (the best anchor by shape, if it is in ``anchor_mask``); sigmoid cross entropy on
the class logits there (targets smoothed by ``1 / C`` capped at 1/40 with
``use_label_smooth``); objectness cross entropy everywhere, target 1 (weighted by the score)
at assigned cells, 0 elsewhere except where a prediction already overlaps a ground truth by
more than ``ignore_thresh``.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from .registry import Meta, register_op

__all__: list[str] = []


def _head(op: str, x: Meta, anchors: int, class_num: int) -> None:
    if len(x.shape) != 4:
        raise ValueError(f"{op}: X must be 4-D [N, C, H, W], got {list(x.shape)}")
    want = anchors * (5 + class_num)
    if x.shape[1] not in (-1, want):
        raise ValueError(f"{op}: X must have anchors * (5 + class_num) = {want} channels, got "
                         f"{x.shape[1]}")


def _anchor_pairs(op: str, anchors: list[int]) -> list[tuple[int, int]]:
    if not anchors or len(anchors) % 2:
        raise ValueError(f"{op}: anchors must be [w0, h0, w1, h1, ...], got {anchors}")
    return [(anchors[i], anchors[i + 1]) for i in range(0, len(anchors), 2)]


# ----------------------------------------------------------------------------- yolo_box


def _yolo_box_shape(ins: dict, attrs: dict) -> dict:
    x, size = ins["X"], ins["ImgSize"]
    a = len(_anchor_pairs("yolo_box", attrs["anchors"]))
    _head("yolo_box", x, a, attrs["class_num"])
    if len(size.shape) != 2 or size.shape[1] not in (-1, 2):
        raise ValueError(f"yolo_box: ImgSize must be [N, 2] (height, width), got "
                         f"{list(size.shape)}")
    boxes = -1 if -1 in x.shape[2:] else a * x.shape[2] * x.shape[3]
    return {"Boxes": Meta((x.shape[0], boxes, 4), x.dtype),
            "Scores": Meta((x.shape[0], boxes, attrs["class_num"]), x.dtype)}


def _yolo_box(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, size = ins["X"], ins["ImgSize"]
    pairs = _anchor_pairs("yolo_box", attrs["anchors"])
    n, _, h, w = x.shape
    a, c = len(pairs), attrs["class_num"]
    v = x.reshape(n, a, 5 + c, h, w)
    input_size = attrs["downsample_ratio"] * h
    img_h = size[:, 0].to(x.dtype).reshape(n, 1, 1, 1)
    img_w = size[:, 1].to(x.dtype).reshape(n, 1, 1, 1)
    aw = torch.tensor([p[0] for p in pairs], dtype=x.dtype).reshape(1, a, 1, 1)
    ah = torch.tensor([p[1] for p in pairs], dtype=x.dtype).reshape(1, a, 1, 1)
    gx = torch.arange(w, dtype=x.dtype).reshape(1, 1, 1, w)
    gy = torch.arange(h, dtype=x.dtype).reshape(1, 1, h, 1)
    cx = (gx + torch.sigmoid(v[:, :, 0])) * img_w / h
    cy = (gy + torch.sigmoid(v[:, :, 1])) * img_h / h
    bw = torch.exp(v[:, :, 2]) * aw * img_w / input_size
    bh = torch.exp(v[:, :, 3]) * ah * img_h / input_size
    zero = torch.zeros((), dtype=x.dtype)
    boxes = torch.stack([torch.maximum(cx - bw / 2, zero), torch.maximum(cy - bh / 2, zero),
                         torch.minimum(cx + bw / 2, img_w - 1),
                         torch.minimum(cy + bh / 2, img_h - 1)], -1)  # [N, A, H, W, 4]
    conf = torch.sigmoid(v[:, :, 4])
    keep = (conf >= attrs["conf_thresh"]).unsqueeze(-1)
    scores = (conf.unsqueeze(2) * torch.sigmoid(v[:, :, 5:])).permute(0, 1, 3, 4, 2)
    return {"Boxes": torch.where(keep, boxes, zero).reshape(n, -1, 4),
            "Scores": torch.where(keep, scores, zero).reshape(n, -1, c)}


register_op("yolo_box", inputs=("X", "ImgSize"), outputs=("Boxes", "Scores"),
            attrs={"anchors": [], "class_num": 1, "conf_thresh": 0.01, "downsample_ratio": 32},
            infer_shape=_yolo_box_shape, kernel=_yolo_box)


# ----------------------------------------------------------------------------- yolov3_loss


def _sce(x: torch.Tensor, label: Any) -> torch.Tensor:
    """Sigmoid cross entropy of logits ``x`` against ``label``, the stable form."""
    return x.clamp(min=0) - x * label + torch.log1p(torch.exp(-x.abs()))


def _center_iou(a: tuple[torch.Tensor, ...], b: tuple[torch.Tensor, ...]) -> torch.Tensor:
    """IoU of center-size boxes ``(x, y, w, h)`` (broadcasting)."""
    iw = torch.minimum(a[0] + a[2] / 2, b[0] + b[2] / 2) - \
        torch.maximum(a[0] - a[2] / 2, b[0] - b[2] / 2)
    ih = torch.minimum(a[1] + a[3] / 2, b[1] + b[3] / 2) - \
        torch.maximum(a[1] - a[3] / 2, b[1] - b[3] / 2)
    inter = torch.where((iw < 0) | (ih < 0), torch.zeros_like(iw), iw * ih)
    return inter / (a[2] * a[3] + b[2] * b[3] - inter)


def _assignments(ins: dict, attrs: dict, h: int,
                 w: int) -> tuple[list[tuple], list[list[int]]]:
    """``(n, mask index, gi, gj, targets (tx, ty, tw, th), scale, label, score)`` of each
    ground truth assigned to an anchor of this head, and the [N, B] match mask."""
    gt, labels = ins["GTBox"].tolist(), ins["GTLabel"].tolist()
    scores = ins["GTScore"].tolist() if ins.get("GTScore") is not None else None
    pairs = _anchor_pairs("yolov3_loss", attrs["anchors"])
    mask = list(attrs["anchor_mask"])
    input_size = attrs["downsample_ratio"] * h
    out, match = [], []
    for n, boxes in enumerate(gt):
        row = []
        for t, (bx, by, bw, bh) in enumerate(boxes):
            if bw < 1e-6 or bh < 1e-6:
                row.append(-1)
                continue
            best, best_n = 0.0, 0
            for k, (aw, ah) in enumerate(pairs):
                inter = min(aw / input_size, bw) * min(ah / input_size, bh)
                iou = inter / (aw / input_size * ah / input_size + bw * bh - inter)
                if iou > best:
                    best, best_n = iou, k
            m = mask.index(best_n) if best_n in mask else -1
            row.append(m)
            if m < 0:
                continue
            gi, gj = int(bx * w), int(by * h)
            aw, ah = pairs[best_n]
            targets = (bx * w - gi, by * h - gj, math.log(bw * input_size / aw),
                       math.log(bh * input_size / ah))
            score = 1.0 if scores is None else scores[n][t]
            out.append((n, m, gi, gj, targets, (2.0 - bw * bh) * score, int(labels[n][t]),
                        score))
        match.append(row)
    return out, match


def _label_targets(attrs: dict) -> tuple[float, float]:
    if attrs["use_label_smooth"]:
        smooth = min(1.0 / attrs["class_num"], 1.0 / 40)
        return 1.0 - smooth, smooth
    return 1.0, 0.0


def _yolov3_loss(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, gt = ins["X"], ins["GTBox"]
    n, _, h, w = x.shape
    mask = list(attrs["anchor_mask"])
    pairs = _anchor_pairs("yolov3_loss", attrs["anchors"])
    m, c = len(mask), attrs["class_num"]
    v = x.reshape(n, m, 5 + c, h, w)
    input_size = attrs["downsample_ratio"] * h
    # predictions over ground truths: objectness is ignored where the best IoU is high
    aw = torch.tensor([pairs[k][0] for k in mask], dtype=x.dtype).reshape(1, m, 1, 1, 1)
    ah = torch.tensor([pairs[k][1] for k in mask], dtype=x.dtype).reshape(1, m, 1, 1, 1)
    gx = torch.arange(w, dtype=x.dtype).reshape(1, 1, 1, w, 1)
    gy = torch.arange(h, dtype=x.dtype).reshape(1, 1, h, 1, 1)
    pred = ((gx + torch.sigmoid(v[:, :, 0, :, :, None])) / h,
            (gy + torch.sigmoid(v[:, :, 1, :, :, None])) / h,
            torch.exp(v[:, :, 2, :, :, None]) * aw / input_size,
            torch.exp(v[:, :, 3, :, :, None]) * ah / input_size)
    g = gt.to(x.dtype).reshape(n, 1, 1, 1, -1, 4)
    iou = _center_iou(pred, (g[..., 0], g[..., 1], g[..., 2], g[..., 3]))
    valid = (g[..., 2] >= 1e-6) & (g[..., 3] >= 1e-6)
    iou = torch.where(valid, iou, torch.zeros_like(iou))
    best = iou.max(dim=-1).values if iou.shape[-1] else torch.zeros(n, m, h, w, dtype=x.dtype)
    obj_mask = torch.where(best > attrs["ignore_thresh"], -1.0, 0.0).to(x.dtype)

    loss = torch.zeros(n, dtype=x.dtype)
    pos, neg = _label_targets(attrs)
    assigned, match = _assignments(ins, attrs, h, w)
    for b, k, gi, gj, (tx, ty, tw, th), scale, label, score in assigned:
        cell = v[b, k, :, gj, gi]
        loss[b] += (_sce(cell[0], tx) + _sce(cell[1], ty)) * scale
        loss[b] += ((cell[2] - tw).abs() + (cell[3] - th).abs()) * scale
        obj_mask[b, k, gj, gi] = score
        target = torch.full((c,), neg, dtype=x.dtype)
        target[label] = pos
        loss[b] += (_sce(cell[5:], target) * score).sum()
    obj = v[:, :, 4]
    positive = obj_mask > 1e-5
    negative = (obj_mask > -0.5) & ~positive
    loss += (torch.where(positive, _sce(obj, 1.0) * obj_mask, torch.zeros_like(obj)) +
             torch.where(negative, _sce(obj, 0.0), torch.zeros_like(obj))).sum(dim=(1, 2, 3))
    return {"Loss": loss, "ObjectnessMask": obj_mask,
            "GTMatchMask": torch.tensor(match, dtype=torch.int32).reshape(gt.shape[0], -1)}


def _yolov3_loss_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, obj_mask, dloss = ins["X"], ins["ObjectnessMask"], ins["Loss@GRAD"]
    n, _, h, w = x.shape
    m, c = len(attrs["anchor_mask"]), attrs["class_num"]
    v = x.reshape(n, m, 5 + c, h, w)
    dv = torch.zeros_like(v)
    pos, neg = _label_targets(attrs)
    assigned, _ = _assignments(ins, attrs, h, w)
    for b, k, gi, gj, (tx, ty, tw, th), scale, label, score in assigned:
        cell = v[b, k, :, gj, gi]
        g = dloss[b] * scale
        dv[b, k, 0, gj, gi] += (torch.sigmoid(cell[0]) - tx) * g
        dv[b, k, 1, gj, gi] += (torch.sigmoid(cell[1]) - ty) * g
        dv[b, k, 2, gj, gi] += torch.where(cell[2] > tw, 1.0, -1.0).to(x.dtype) * g
        dv[b, k, 3, gj, gi] += torch.where(cell[3] > th, 1.0, -1.0).to(x.dtype) * g
        target = torch.full((c,), neg, dtype=x.dtype)
        target[label] = pos
        dv[b, k, 5:, gj, gi] += (torch.sigmoid(cell[5:]) - target) * score * dloss[b]
    sig = torch.sigmoid(v[:, :, 4])
    positive = obj_mask > 1e-5
    negative = (obj_mask > -0.5) & ~positive
    d_obj = torch.where(positive, (sig - 1.0) * obj_mask,
                        torch.where(negative, sig, torch.zeros_like(sig)))
    dv[:, :, 4] += d_obj * dloss.reshape(n, 1, 1, 1)
    return {"X@GRAD": dv.reshape(x.shape)}


def _yolov3_loss_shape(ins: dict, attrs: dict) -> dict:
    x, gt, label = ins["X"], ins["GTBox"], ins["GTLabel"]
    pairs = _anchor_pairs("yolov3_loss", attrs["anchors"])
    mask = list(attrs["anchor_mask"])
    bad = [k for k in mask if not 0 <= k < len(pairs)]
    if not mask or bad:
        raise ValueError(f"yolov3_loss: anchor_mask must index the {len(pairs)} anchors, got "
                         f"{mask}")
    _head("yolov3_loss", x, len(mask), attrs["class_num"])
    if len(gt.shape) != 3 or gt.shape[2] not in (-1, 4):
        raise ValueError(f"yolov3_loss: GTBox must be [N, B, 4] (center x, y, w, h), got "
                         f"{list(gt.shape)}")
    if len(label.shape) != 2:
        raise ValueError(f"yolov3_loss: GTLabel must be [N, B], got {list(label.shape)}")
    return {"Loss": Meta((x.shape[0],), x.dtype),
            "ObjectnessMask": Meta((x.shape[0], len(mask), x.shape[2], x.shape[3]), x.dtype),
            "GTMatchMask": Meta(tuple(label.shape), "int32")}


register_op("yolov3_loss", inputs=("X", "GTBox", "GTLabel", "GTScore?"),
            outputs=("Loss", "ObjectnessMask", "GTMatchMask"),
            attrs={"anchors": [], "anchor_mask": [], "class_num": 1, "ignore_thresh": 0.7,
                   "downsample_ratio": 32, "use_label_smooth": True},
            infer_shape=_yolov3_loss_shape, kernel=_yolov3_loss,
            grad_kernel=_yolov3_loss_grad,
            grad_uses=("X", "GTBox", "GTLabel", "GTScore", "ObjectnessMask"),
            no_grad_inputs=("GTBox", "GTLabel", "GTScore"),
            grad_infer_shape=lambda ins, attrs: {"X@GRAD": ins["X"]},
            no_compile="assigns the ground-truth boxes to cells on the host")
