"""``detection_map``: mean average precision of detections (Fluid 1.6's op, no gradient).

``DetectRes [M, 6]`` (LoD: one sequence per image) holds ``[label, score, x1, y1, x2, y2]``
rows as ``multiclass_nms`` writes them; ``Label [G, 6]`` (same LoD) ``[label, difficult, x1,
y1, x2, y2]`` (or ``[G, 5]`` without ``difficult``). Per image and class, detections (best
score first, clipped to ``[0, 1]``) are true positives when they overlap a not yet matched
ground truth by more than ``overlap_threshold``. Per class the precision / recall curve gives
the average precision (``integral``, or VOC2007's ``11point``); ``MAP`` is their mean.

The accumulated state across batches (``metrics.DetectionMAP``) is ``PosCount [C, 1]`` (ground
truths per class) and ``TruePos`` / ``FalsePos`` (LoD over classes: ``[score, flag]`` rows),
read when ``HasState`` is non-zero and written back as ``Accum*``.
"""

from __future__ import annotations

from typing import Any

import torch

from ..lod import attach_lod, get_lod
from .registry import Meta, register_op

__all__: list[str] = []


def _rows(t: torch.Tensor, slot: str) -> tuple[list[list[float]], list[int]]:
    lod = get_lod(t)
    if not lod:
        raise ValueError(f"detection_map: {slot} carries no LoD (one sequence per image); feed "
                         "it as a LoD tensor")
    return t.tolist(), [int(v) for v in lod[0]]


def _iou(a: list[float], b: list[float]) -> float:
    if b[0] > a[2] or b[2] < a[0] or b[1] > a[3] or b[3] < a[1]:
        return 0.0
    inter = (min(a[2], b[2]) - max(a[0], b[0])) * (min(a[3], b[3]) - max(a[1], b[1]))
    return inter / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter)


def _match(gts: dict, dets: dict, attrs: dict, pos_count: dict, tp: dict, fp: dict) -> None:
    """One image: count its ground truths per class and flag each detection."""
    difficult_too = attrs["evaluate_difficult"]
    for label, boxes in gts.items():
        count = len(boxes) if difficult_too else sum(1 for _, hard in boxes if not hard)
        if count:
            pos_count[label] = pos_count.get(label, 0) + count
    for label, preds in dets.items():
        truth = gts.get(label)
        if not truth:
            for score, _ in preds:
                tp.setdefault(label, []).append((score, 0))
                fp.setdefault(label, []).append((score, 1))
            continue
        visited = [False] * len(truth)
        for score, box in sorted(preds, key=lambda p: -p[0]):
            box = [min(max(v, 0.0), 1.0) for v in box]
            overlaps = [_iou(box, g) for g, _ in truth]
            best = max(range(len(truth)), key=lambda j: (overlaps[j], -j))
            if overlaps[best] > attrs["overlap_threshold"]:
                if difficult_too or not truth[best][1]:
                    hit = not visited[best]
                    visited[best] = True
                    tp.setdefault(label, []).append((score, int(hit)))
                    fp.setdefault(label, []).append((score, int(not hit)))
            else:
                tp.setdefault(label, []).append((score, 0))
                fp.setdefault(label, []).append((score, 1))


def _average_precision(tp: list, fp: list, positives: int, ap_type: str) -> float:
    def accumulate(pairs: list) -> list[int]:
        out, total = [], 0
        for _, flag in sorted(pairs, key=lambda p: -p[0]):  # stable, as Fluid's stable_sort
            total += flag
            out.append(total)
        return out

    tps, fps = accumulate(tp), accumulate(fp)
    precision = [t / (t + f) for t, f in zip(tps, fps)]
    recall = [t / positives for t in tps]
    if ap_type == "11point":
        best = [0.0] * 11
        start = len(tps) - 1
        for j in range(10, -1, -1):
            for i in range(start, -1, -1):
                if recall[i] < j / 10:
                    start = i
                    if j > 0:
                        best[j - 1] = best[j]
                    break
                best[j] = max(best[j], precision[i])
        return sum(b / 11 for b in best)
    ap, prev = 0.0, 0.0
    for p, r in zip(precision, recall):
        if abs(r - prev) > 1e-6:
            ap += p * abs(r - prev)
        prev = r
    return ap


def _detection_map(ins: dict, attrs: dict, ctx: Any) -> dict:
    det, det_offs = _rows(ins["DetectRes"], "DetectRes")
    label, label_offs = _rows(ins["Label"], "Label")
    if len(det_offs) != len(label_offs):
        raise ValueError(f"detection_map: DetectRes holds {len(det_offs) - 1} images but Label "
                         f"{len(label_offs) - 1}")
    width = ins["Label"].shape[1]
    if width not in (5, 6):
        raise ValueError(f"detection_map: Label rows must be [label, (difficult,) x1, y1, x2, "
                         f"y2], got width {width}")
    class_num = attrs["class_num"]
    pos_count: dict[int, int] = {}
    tp: dict[int, list] = {}
    fp: dict[int, list] = {}
    has_state = ins.get("HasState")
    if ins.get("PosCount") is not None and has_state is not None and int(has_state.reshape(-1)[0]):
        counts = ins["PosCount"].reshape(-1).tolist()
        pos_count = {i: int(counts[i]) for i in range(class_num)}
        for src, dst in ((ins["TruePos"], tp), (ins["FalsePos"], fp)):
            rows, offs = src.tolist(), get_lod(src)[0]
            for c in range(len(offs) - 1):
                for score, flag in rows[offs[c]:offs[c + 1]]:
                    dst.setdefault(c, []).append((score, int(flag)))
    for n in range(len(label_offs) - 1):
        gts: dict[int, list] = {}
        for row in label[label_offs[n]:label_offs[n + 1]]:
            box, hard = (row[2:6], abs(row[1]) >= 1e-6) if width == 6 else (row[1:5], False)
            gts.setdefault(int(row[0]), []).append((box, hard))
        dets: dict[int, list] = {}
        for row in det[det_offs[n]:det_offs[n + 1]]:
            if len(row) == 6:  # a [[-1]] row is multiclass_nms's "nothing detected"
                dets.setdefault(int(row[0]), []).append((row[1], row[2:6]))
        _match(gts, dets, attrs, pos_count, tp, fp)

    total, count = 0.0, 0
    for c in sorted(pos_count):
        # NOTE: Fluid compares the class's positive count (not the class) with the background
        # label here; kept so that mAP values agree with Fluid's
        if pos_count[c] == attrs["background_label"]:
            continue
        count += 1
        if c in tp:
            total += _average_precision(tp[c], fp[c], pos_count[c], attrs["ap_type"])
    dtype = ins["DetectRes"].dtype
    out_pos = torch.tensor([[pos_count.get(c, 0)] for c in range(class_num)], dtype=torch.int32)
    accum = []
    for pairs in (tp, fp):
        rows, offs = [], [0]
        for c in range(class_num):
            rows += [[s, float(f)] for s, f in pairs.get(c, [])]
            offs.append(len(rows))
        accum.append(attach_lod(torch.tensor(rows, dtype=dtype).reshape(-1, 2), [offs]))
    return {"AccumPosCount": out_pos, "AccumTruePos": accum[0], "AccumFalsePos": accum[1],
            "MAP": torch.tensor([total / count if count else 0.0], dtype=dtype)}


def _detection_map_shape(ins: dict, attrs: dict) -> dict:
    det, label = ins["DetectRes"], ins["Label"]
    if len(det.shape) != 2 or det.shape[1] not in (-1, 1, 6):
        raise ValueError(f"detection_map: DetectRes must be [M, 6] (label, score, box), got "
                         f"{list(det.shape)}")
    if len(label.shape) != 2 or label.shape[1] not in (-1, 5, 6):
        raise ValueError(f"detection_map: Label must be [G, 6] or [G, 5], got "
                         f"{list(label.shape)}")
    if attrs["ap_type"] not in ("integral", "11point"):
        raise ValueError(f"detection_map: ap_type must be 'integral' or '11point', got "
                         f"{attrs['ap_type']!r}")
    if attrs["class_num"] <= 0:
        raise ValueError(f"detection_map: class_num must be positive, got {attrs['class_num']}")
    return {"AccumPosCount": Meta((attrs["class_num"], 1), "int32"),
            "AccumTruePos": Meta((-1, 2), det.dtype), "AccumFalsePos": Meta((-1, 2), det.dtype),
            "MAP": Meta((1,), det.dtype)}


register_op("detection_map",
            inputs=("DetectRes", "Label", "HasState?", "PosCount?", "TruePos?", "FalsePos?"),
            outputs=("AccumPosCount", "AccumTruePos", "AccumFalsePos", "MAP"),
            attrs={"class_num": 1, "background_label": 0, "overlap_threshold": 0.5,
                   "evaluate_difficult": True, "ap_type": "integral"},
            infer_shape=_detection_map_shape, kernel=_detection_map,
            no_compile="matches detections to ground truth on the host")
