"""``rpn_target_assign``, ``generate_proposal_labels`` and ``retinanet_target_assign``
(Fluid 1.6: Faster R-CNN's RPN and Fast R-CNN head targets, RetinaNet's; no gradients).

``retinanet_target_assign``: as the RPN's assignment without sampling and without the
straddle filter: every foreground anchor (labelled with its ground truth's class) and every
background one; ``ForegroundNumber`` is the foreground count before background overrides,
plus one, per image.

``generate_proposal_labels``: per image the ground truth joins the proposals (scaled back by
the image's scale); proposals overlapping a ground truth by more than ``fg_thresh`` are
foreground (at most ``batch_size_per_im * fg_fraction``), those in ``[bg_thresh_lo,
bg_thresh_hi)`` background (filling the batch); crowd boxes are never foreground. Outputs
the sampled ROIs (rescaled), their labels, and class-wise box targets (divided by
``bbox_reg_weights``) with their weights.

``rpn_target_assign``:

Per image (``GtBoxes`` / ``IsCrowd`` are LoD tensors, one sequence per image): anchors
reaching past the image by more than ``rpn_straddle_thresh`` (``>= 0``) are left out; crowd
boxes are dropped and the rest scaled by the image's scale; IoU of pixel boxes. Foreground:
each ground truth's best anchors (within 1e-5) and anchors with IoU ``>=
rpn_positive_overlap``, at most ``rpn_fg_fraction * rpn_batch_size_per_im`` of them;
background: anchors with IoU ``< rpn_negative_overlap``, filling the batch. Both samples are
reservoir samples when ``use_random`` (else the first ones). A foreground anchor sampled as
background becomes background and its regression row is kept with weight 0 (Detectron's
behaviour, which Fluid follows).

Outputs (LoD: one sequence per image): ``LocationIndex [F]`` and ``ScoreIndex [F + B]``
(indices into all images' anchors), ``TargetLabel [F + B, 1]``, ``TargetBBox [F, 4]`` (box
deltas of the anchors to their ground truth), ``BBoxInsideWeight [F, 4]``.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from ..lod import attach_lod, get_lod
from .registry import Meta, register_op

__all__: list[str] = []


def _pixel_iou(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    area_a = ((a[:, 2] - a[:, 0] + 1) * (a[:, 3] - a[:, 1] + 1))[:, None]
    area_b = ((b[:, 2] - b[:, 0] + 1) * (b[:, 3] - b[:, 1] + 1))[None, :]
    iw = (torch.minimum(a[:, None, 2], b[None, :, 2]) -
          torch.maximum(a[:, None, 0], b[None, :, 0]) + 1).clamp(min=0)
    ih = (torch.minimum(a[:, None, 3], b[None, :, 3]) -
          torch.maximum(a[:, None, 1], b[None, :, 1]) + 1).clamp(min=0)
    inter = iw * ih
    return inter / (area_a + area_b - inter)


def _image_offsets(op: str, ins: dict, slots: tuple[str, ...]) -> dict[str, list[int]]:
    """Each slot's row offsets per image (its last LoD level); a slot without LoD is an
    error, since its rows could not be told apart by image."""
    offs = {}
    for slot in slots:
        lod = get_lod(ins[slot])
        if not lod:
            raise ValueError(f"{op}: {slot} must be a LoD tensor (the rows of each image)")
        offs[slot] = lod[-1]
    return offs


def _sample(inds: list[int], num: int, use_random: bool) -> list[int]:
    """At most ``num`` of ``inds``: a reservoir sample, or the first ones."""
    inds = list(inds)
    if len(inds) > num:
        if use_random:
            for i in range(num, len(inds)):
                j = math.floor(float(torch.rand(())) * i)
                if j < num:
                    inds[j], inds[i] = inds[i], inds[j]
        inds = inds[:max(num, 0)]
    return inds


def _box_to_delta(ex: torch.Tensor, gt: torch.Tensor) -> torch.Tensor:
    ew, eh = ex[:, 2] - ex[:, 0] + 1, ex[:, 3] - ex[:, 1] + 1
    gw, gh = gt[:, 2] - gt[:, 0] + 1, gt[:, 3] - gt[:, 1] + 1
    ex_x, ex_y = ex[:, 0] + 0.5 * ew, ex[:, 1] + 0.5 * eh
    gt_x, gt_y = gt[:, 0] + 0.5 * gw, gt[:, 1] + 0.5 * gh
    return torch.stack([(gt_x - ex_x) / ew, (gt_y - ex_y) / eh, torch.log(gw / ew),
                        torch.log(gh / eh)], 1)


def _assign_one(overlap: torch.Tensor, attrs: dict) -> tuple:
    """Sampled (loc rows, score rows, labels, gt of each loc row, inside weights)."""
    n_anchor = overlap.shape[0]
    if overlap.shape[1]:
        best_gt, argmax = overlap.max(dim=1)
        gt_best = overlap.max(dim=0).values
        at_best = ((overlap - gt_best[None, :]).abs() < 1e-5).any(dim=1)
    else:  # no ground truth: every anchor is a background candidate
        best_gt = torch.full((n_anchor,), -1.0, dtype=overlap.dtype)
        argmax = torch.zeros(n_anchor, dtype=torch.int64)
        at_best = torch.zeros(n_anchor, dtype=torch.bool)
    label = [-1] * n_anchor
    fg = [i for i in range(n_anchor)
          if bool(at_best[i]) or float(best_gt[i]) >= attrs["rpn_positive_overlap"]]
    batch = attrs["rpn_batch_size_per_im"]
    fg = _sample(fg, int(attrs["rpn_fg_fraction"] * batch), attrs["use_random"])
    for i in fg:
        label[i] = 1
    bg = [i for i in range(n_anchor) if float(best_gt[i]) < attrs["rpn_negative_overlap"]]
    bg = _sample(bg, batch - len(fg), attrs["use_random"])
    fake, weights = [], []
    for i in bg:
        if label[i] == 1:  # a sampled foreground drawn as background too
            fake.append(fg[0])
            weights.append([0.0] * 4)
        label[i] = 0
    weights += [[1.0] * 4] * (len(fg) - len(fake))
    fg_final = [i for i in range(n_anchor) if label[i] == 1]
    bg_final = [i for i in range(n_anchor) if label[i] == 0]
    loc = fake + fg_final
    gt_of_loc = [int(argmax[i]) for i in loc]
    return loc, fg_final + bg_final, [1] * len(fg_final) + [0] * len(bg_final), gt_of_loc, \
        weights


def _rpn_target_assign(ins: dict, attrs: dict, ctx: Any) -> dict:
    anchors = ins["Anchor"].reshape(-1, 4)
    gt, crowd, info = ins["GtBoxes"], ins["IsCrowd"], ins["ImInfo"]
    gt_lod, crowd_lod = get_lod(gt), get_lod(crowd)
    if not gt_lod or not crowd_lod:
        raise ValueError("rpn_target_assign: GtBoxes and IsCrowd must be LoD tensors (the "
                         "boxes of each image)")
    gt_offs, crowd_offs = gt_lod[-1], crowd_lod[-1]
    if len(gt_offs) - 1 != info.shape[0]:
        raise ValueError(f"rpn_target_assign: GtBoxes holds {len(gt_offs) - 1} images but "
                         f"ImInfo {info.shape[0]}")
    n_anchor, thresh = anchors.shape[0], attrs["rpn_straddle_thresh"]
    locs, scores, labels, deltas, weights = [], [], [], [], []
    loc_lod, score_lod = [0], [0]
    for i in range(info.shape[0]):
        im_h, im_w, scale = info[i].tolist()
        if thresh >= 0:
            inside = ((anchors[:, 0] >= -thresh) & (anchors[:, 1] >= -thresh) &
                      (anchors[:, 2] < im_w + thresh) & (anchors[:, 3] < im_h + thresh))
            inds = torch.nonzero(inside).reshape(-1)
        else:
            inds = torch.arange(n_anchor)
        boxes = gt[gt_offs[i]:gt_offs[i + 1]]
        is_crowd = crowd[crowd_offs[i]:crowd_offs[i + 1]].reshape(-1)
        boxes = boxes[is_crowd == 0] * scale
        loc, score, label, gt_idx, w = _assign_one(_pixel_iou(anchors[inds], boxes), attrs)
        loc_t = inds[torch.tensor(loc, dtype=torch.int64)]
        locs.append(loc_t + i * n_anchor)
        scores.append(inds[torch.tensor(score, dtype=torch.int64)] + i * n_anchor)
        labels += label
        matched = boxes[torch.tensor(gt_idx, dtype=torch.int64)]
        deltas.append(_box_to_delta(anchors[loc_t], matched) if loc
                      else anchors.new_zeros((0, 4)))
        weights += w
        loc_lod.append(loc_lod[-1] + len(loc))
        score_lod.append(score_lod[-1] + len(score))
    dtype = anchors.dtype
    return {"LocationIndex": attach_lod(torch.cat(locs).to(torch.int32), [loc_lod]),
            "ScoreIndex": attach_lod(torch.cat(scores).to(torch.int32), [score_lod]),
            "TargetLabel": attach_lod(torch.tensor(labels, dtype=torch.int32).reshape(-1, 1),
                                      [score_lod]),
            "TargetBBox": attach_lod(torch.cat(deltas).reshape(-1, 4), [loc_lod]),
            "BBoxInsideWeight": attach_lod(torch.tensor(weights, dtype=dtype).reshape(-1, 4),
                                           [loc_lod])}


def _rpn_target_assign_shape(ins: dict, attrs: dict) -> dict:
    anchor, gt = ins["Anchor"], ins["GtBoxes"]
    if anchor.shape[-1] not in (-1, 4) or gt.shape[-1] not in (-1, 4):
        raise ValueError(f"rpn_target_assign: Anchor and GtBoxes must end in 4 coordinates, "
                         f"got {list(anchor.shape)} and {list(gt.shape)}")
    return {"LocationIndex": Meta((-1,), "int32"), "ScoreIndex": Meta((-1,), "int32"),
            "TargetLabel": Meta((-1, 1), "int32"), "TargetBBox": Meta((-1, 4), anchor.dtype),
            "BBoxInsideWeight": Meta((-1, 4), anchor.dtype)}


register_op("rpn_target_assign", inputs=("Anchor", "GtBoxes", "IsCrowd", "ImInfo"),
            outputs=("LocationIndex", "ScoreIndex", "TargetLabel", "TargetBBox",
                     "BBoxInsideWeight"),
            attrs={"rpn_batch_size_per_im": 256, "rpn_straddle_thresh": 0.0,
                   "rpn_positive_overlap": 0.7, "rpn_negative_overlap": 0.3,
                   "rpn_fg_fraction": 0.25, "use_random": True},
            infer_shape=_rpn_target_assign_shape, kernel=_rpn_target_assign,
            no_compile="samples anchors by their overlaps on the host")


# -------------------------------------------------------------------- generate_proposal_labels


def _labels_one(rois: torch.Tensor, classes: torch.Tensor, crowd: torch.Tensor,
                gt: torch.Tensor, scale: float, attrs: dict) -> tuple:
    """Fast R-CNN's sampled ROIs of one image (Detectron's rules, as Fluid)."""
    cascade = attrs["is_cascade_rcnn"]
    if cascade:  # a cascade stage's ROIs start with the image's ground truth: drop it
        rois = rois[gt.shape[0]:]
    boxes = torch.cat([gt, rois / scale])  # the ground truth joins the proposals
    overlap = _pixel_iou(boxes, gt)
    fg, gt_of_fg, bg = [], [], []
    for i in range(boxes.shape[0]):
        row = overlap[i]
        best = float(row.max()) if row.numel() else -1.0
        if i < crowd.numel() and int(crowd[i]):
            best = -1.0
        if cascade and (float(boxes[i, 2] - boxes[i, 0]) + 1 <= 0 or
                        float(boxes[i, 3] - boxes[i, 1]) + 1 <= 0):
            continue  # an empty box
        if best >= attrs["fg_thresh"]:
            fg.append(i)
            gt_of_fg.append(int(torch.nonzero((row - best).abs() < 1e-5)[0]))
        elif attrs["bg_thresh_lo"] <= best < attrs["bg_thresh_hi"]:
            bg.append(i)
    if not cascade:  # a cascade stage keeps every foreground and background box
        fg, gt_of_fg, bg = _sample_fg_bg(fg, gt_of_fg, bg, attrs)
    keep = torch.tensor(fg + bg, dtype=torch.int64)
    sampled = boxes[keep]
    gt_idx = torch.tensor(gt_of_fg, dtype=torch.int64)
    labels = torch.cat([classes.reshape(-1)[gt_idx].to(torch.int32),
                        torch.zeros(len(bg), dtype=torch.int32)])
    weights = torch.tensor(attrs["bbox_reg_weights"], dtype=boxes.dtype)
    deltas = _box_to_delta(sampled[:len(fg)], gt[gt_idx]) / weights if fg else \
        boxes.new_zeros((0, 4))
    # NOTE: the targets are 4 * class_nums wide also when class agnostic (Fluid's kernel;
    # its layer passes class_nums as given): the agnostic foreground goes to columns 4..7
    targets = boxes.new_zeros((len(keep), 4 * attrs["class_nums"]))
    inside = torch.zeros_like(targets)
    for r in range(len(fg)):
        label = int(labels[r])
        if label > 0:
            col = 4 * (1 if attrs["is_cls_agnostic"] else label)
            targets[r, col:col + 4] = deltas[r]
            inside[r, col:col + 4] = 1.0
    return sampled * scale, labels.reshape(-1, 1), targets, inside


def _sample_fg_bg(fg: list[int], gt_of_fg: list[int], bg: list[int], attrs: dict) -> tuple:
    """Reservoir sampling of at most ``batch_size_per_im * fg_fraction`` foreground boxes
    and the rest of the batch in background boxes (in order without ``use_random``)."""
    batch = attrs["batch_size_per_im"]
    n_fg = min(math.floor(batch * attrs["fg_fraction"]), len(fg))
    if attrs["use_random"]:
        for i in range(n_fg, len(fg)):
            j = math.floor(float(torch.rand(())) * i)
            if j < n_fg:
                fg[j], fg[i] = fg[i], fg[j]
                gt_of_fg[j], gt_of_fg[i] = gt_of_fg[i], gt_of_fg[j]
    n_bg = min(batch - n_fg, len(bg))
    if attrs["use_random"]:
        for i in range(n_bg, len(bg)):
            j = math.floor(float(torch.rand(())) * i)
            # NOTE: Fluid 1.6 tests the background draw against the foreground count
            if j < n_fg:
                bg[j], bg[i] = bg[i], bg[j]
    return fg[:n_fg], gt_of_fg[:n_fg], bg[:n_bg]


def _generate_proposal_labels(ins: dict, attrs: dict, ctx: Any) -> dict:
    names = ("RpnRois", "GtClasses", "IsCrowd", "GtBoxes")
    offs = _image_offsets("generate_proposal_labels", ins, names)
    info = ins["ImInfo"]
    outs: list[list[torch.Tensor]] = [[], [], [], [], []]
    lod = [0]
    for i in range(info.shape[0]):
        if offs["RpnRois"][i] == offs["RpnRois"][i + 1]:  # no proposals: no rows (Fluid)
            lod.append(lod[-1])
            continue
        part = {s: ins[s][offs[s][i]:offs[s][i + 1]] for s in names}
        rois, labels, targets, inside = _labels_one(
            part["RpnRois"], part["GtClasses"], part["IsCrowd"].reshape(-1), part["GtBoxes"],
            float(info[i, 2]), attrs)
        for k, v in enumerate((rois, labels, targets, inside, inside.clone())):
            outs[k].append(v)
        lod.append(lod[-1] + rois.shape[0])
    keys = ("Rois", "LabelsInt32", "BboxTargets", "BboxInsideWeights", "BboxOutsideWeights")
    width = 4 * attrs["class_nums"]
    empty = (ins["RpnRois"].new_zeros((0, 4)), torch.zeros((0, 1), dtype=torch.int32),
             *(ins["RpnRois"].new_zeros((0, width)) for _ in range(3)))
    return {k: attach_lod(torch.cat(v) if v else e, [lod])
            for k, v, e in zip(keys, outs, empty)}


def _proposal_labels_shape(ins: dict, attrs: dict) -> dict:
    rois = ins["RpnRois"]
    if len(rois.shape) != 2 or rois.shape[1] not in (-1, 4):
        raise ValueError(f"generate_proposal_labels: RpnRois must be [R, 4], got "
                         f"{list(rois.shape)}")
    if attrs["class_nums"] <= (1 if attrs["is_cls_agnostic"] else 0):
        raise ValueError(f"generate_proposal_labels: class_nums must be positive (at least 2 "
                         f"with is_cls_agnostic: the foreground targets take columns 4..7), "
                         f"got {attrs['class_nums']}")
    width = 4 * attrs["class_nums"]
    return {"Rois": Meta((-1, 4), rois.dtype), "LabelsInt32": Meta((-1, 1), "int32"),
            "BboxTargets": Meta((-1, width), rois.dtype),
            "BboxInsideWeights": Meta((-1, width), rois.dtype),
            "BboxOutsideWeights": Meta((-1, width), rois.dtype)}


register_op("generate_proposal_labels",
            inputs=("RpnRois", "GtClasses", "IsCrowd", "GtBoxes", "ImInfo"),
            outputs=("Rois", "LabelsInt32", "BboxTargets", "BboxInsideWeights",
                     "BboxOutsideWeights"),
            attrs={"batch_size_per_im": 256, "fg_fraction": 0.25, "fg_thresh": 0.25,
                   "bg_thresh_hi": 0.5, "bg_thresh_lo": 0.0,
                   "bbox_reg_weights": [0.1, 0.1, 0.2, 0.2], "class_nums": 1,
                   "use_random": True, "is_cls_agnostic": False, "is_cascade_rcnn": False},
            infer_shape=_proposal_labels_shape, kernel=_generate_proposal_labels,
            no_compile="samples the proposals by their overlaps on the host")


# -------------------------------------------------------------------- retinanet_target_assign


def _retinanet_target_assign(ins: dict, attrs: dict, ctx: Any) -> dict:
    anchors = ins["Anchor"].reshape(-1, 4)
    slots = ("GtBoxes", "GtLabels", "IsCrowd")
    offs = _image_offsets("retinanet_target_assign", ins, slots)
    info, n_anchor = ins["ImInfo"], anchors.shape[0]
    outs: dict[str, list] = {k: [] for k in ("loc", "score", "label", "bbox", "weight", "fg")}
    loc_lod, score_lod = [0], [0]
    for i in range(len(offs["GtBoxes"]) - 1):
        part = {s: ins[s][offs[s][i]:offs[s][i + 1]] for s in slots}
        keep = part["IsCrowd"].reshape(-1) == 0
        gt = part["GtBoxes"][keep] * float(info[i, 2])
        labels = part["GtLabels"].reshape(-1)[keep]
        overlap = _pixel_iou(anchors, gt)
        # RPN's assignment without sampling: every foreground and background anchor; a
        # foreground anchor that is also background becomes a zero-weight "fake" location
        loc, score, flags, gt_of_loc, weights = _assign_one(overlap, {
            "rpn_batch_size_per_im": 2 * n_anchor + 1, "rpn_fg_fraction": 1.0,
            "use_random": False, "rpn_positive_overlap": attrs["positive_overlap"],
            "rpn_negative_overlap": attrs["negative_overlap"]})
        fg_count = len(weights)  # every foreground anchor, fakes included
        loc_t = torch.tensor(loc, dtype=torch.int64)
        score_t = torch.tensor(score, dtype=torch.int64)
        n_fg = sum(flags)
        fg_gt = overlap.argmax(dim=1)[score_t[:n_fg]] if overlap.shape[1] else \
            torch.zeros(0, dtype=torch.int64)
        outs["loc"].append(loc_t + i * n_anchor)
        outs["score"].append(score_t + i * n_anchor)
        outs["label"].append(torch.cat([labels[fg_gt].to(torch.int32),
                                        torch.zeros(len(score) - n_fg, dtype=torch.int32)]))
        gt_idx = torch.tensor(gt_of_loc, dtype=torch.int64)
        outs["bbox"].append(_box_to_delta(anchors[loc_t], gt[gt_idx]) if loc
                            else anchors.new_zeros((0, 4)))
        outs["weight"].append(torch.tensor(weights, dtype=anchors.dtype).reshape(-1, 4))
        outs["fg"].append(fg_count + 1)
        loc_lod.append(loc_lod[-1] + len(loc))
        score_lod.append(score_lod[-1] + len(score))
    images = list(range(len(outs["fg"]) + 1))
    return {"LocationIndex": attach_lod(torch.cat(outs["loc"]).to(torch.int32), [loc_lod]),
            "ScoreIndex": attach_lod(torch.cat(outs["score"]).to(torch.int32), [score_lod]),
            "TargetLabel": attach_lod(torch.cat(outs["label"]).reshape(-1, 1), [score_lod]),
            "TargetBBox": attach_lod(torch.cat(outs["bbox"]).reshape(-1, 4), [loc_lod]),
            "BBoxInsideWeight": attach_lod(torch.cat(outs["weight"]).reshape(-1, 4), [loc_lod]),
            "ForegroundNumber": attach_lod(torch.tensor(outs["fg"], dtype=torch.int32)
                                           .reshape(-1, 1), [images])}


def _retinanet_target_assign_shape(ins: dict, attrs: dict) -> dict:
    out = _rpn_target_assign_shape(ins, attrs)
    out["ForegroundNumber"] = Meta((-1, 1), "int32")
    return out


register_op("retinanet_target_assign",
            inputs=("Anchor", "GtBoxes", "GtLabels", "IsCrowd", "ImInfo"),
            outputs=("LocationIndex", "ScoreIndex", "TargetLabel", "TargetBBox",
                     "BBoxInsideWeight", "ForegroundNumber"),
            attrs={"positive_overlap": 0.5, "negative_overlap": 0.4},
            infer_shape=_retinanet_target_assign_shape, kernel=_retinanet_target_assign,
            no_compile="assigns anchors by their overlaps on the host")
