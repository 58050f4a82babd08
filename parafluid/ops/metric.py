"""Metric ops (no gradients): accuracy, auc, mean_iou and edit_distance.

``accuracy`` takes the top-k ``Indices`` of a ``top_k`` op as in Fluid, or, when that input
is absent, ranks the scores in ``Out`` itself (attr ``k``); the ``accuracy`` layer uses the
second form, so it needs no other op.
"""

from __future__ import annotations

from typing import Any

import torch

from ..lod import require_lod
from .registry import Meta, register_op

__all__: list[str] = []


# ----------------------------------------------------------------------------- accuracy


def _accuracy_shape(ins: dict, attrs: dict) -> dict:
    out, indices, label = ins["Out"], ins["Indices"], ins["Label"]
    # NOTE: a float label holding class ids is accepted, as Fluid programs rely on it.
    pred = indices if indices is not None else out
    rows = pred.shape[0]
    if label.shape[0] not in (rows, -1) and rows != -1:
        raise ValueError(f"accuracy: Label has {label.shape[0]} rows but the predictions "
                         f"{list(pred.shape)} have {rows}")
    if indices is None and attrs["k"] < 1:
        raise ValueError(f"accuracy: k must be >= 1, got {attrs['k']}")
    return {"Accuracy": Meta((1,), "float32"), "Correct": Meta((1,), "int32"),
            "Total": Meta((1,), "int32")}


def _accuracy(ins: dict, attrs: dict, ctx: Any) -> dict:
    out, indices, label = ins["Out"], ins["Indices"], ins["Label"]
    if indices is None:
        # Without a top_k op in front, rank the scores here.
        k = min(int(attrs["k"]), out.shape[-1])
        indices = out.reshape(out.shape[0], -1).topk(k, dim=1).indices
    rows = indices.shape[0]
    hit = (indices.reshape(rows, -1) == label.reshape(rows, 1).long().to(indices.dtype)).any(1)
    correct = hit.sum().to(torch.int32).reshape(1)
    total = torch.full((1,), rows, dtype=torch.int32, device=hit.device)
    acc = (correct.float() / max(rows, 1)).reshape(1)
    return {"Accuracy": acc, "Correct": correct, "Total": total}


register_op("accuracy", inputs=("Out", "Indices?", "Label"),
            outputs=("Accuracy", "Correct", "Total"), attrs={"k": 1},
            infer_shape=_accuracy_shape, kernel=_accuracy)


# ----------------------------------------------------------------------------- auc


def _auc_shape(ins: dict, attrs: dict) -> dict:
    pred, stat = ins["Predict"], ins["StatPos"]
    if len(pred.shape) != 2 or pred.shape[1] not in (1, 2, -1):
        raise ValueError(f"auc: Predict must be [N, 2] class probabilities or [N, 1] "
                         f"positive-class probabilities, got {list(pred.shape)}")
    label = ins["Label"]
    if -1 not in (pred.shape[0], label.shape[0]) and pred.shape[0] != label.shape[0]:
        raise ValueError(f"auc: Predict has {pred.shape[0]} rows but Label {label.shape[0]}")
    if int(attrs["slide_steps"]) < 0:
        raise ValueError(f"auc: slide_steps must be >= 0, got {attrs['slide_steps']}")
    if attrs["curve"] != "ROC":
        raise ValueError(f"auc: only curve='ROC' is supported, got {attrs['curve']!r}")
    width = int(attrs["num_thresholds"]) + 1
    if stat.shape[-1] != width:
        raise ValueError(f"auc: StatPos has {stat.shape[-1]} buckets but num_thresholds + 1 = "
                         f"{width}")
    return {"AUC": Meta((1,), "float64"), "StatPosOut": ins["StatPos"],
            "StatNegOut": ins["StatNeg"]}


def _auc(ins: dict, attrs: dict, ctx: Any) -> dict:
    # Buckets of the positive-class probability; rows of StatPos/StatNeg are a window of the
    # last ``slide_steps`` batches (one accumulating row when slide_steps is 0).
    pred, label = ins["Predict"], ins["Label"].reshape(-1)
    pos, neg = ins["StatPos"], ins["StatNeg"]
    nt = int(attrs["num_thresholds"])
    # the positive-class probability is the last column ([N, 2] or [N, 1]), as Fluid's
    p = pred[:, -1].double()
    if p.numel() and (float(p.min()) < 0 or float(p.max()) > 1):
        raise ValueError(f"auc: Predict must hold probabilities in [0, 1], got values in "
                         f"[{float(p.min())}, {float(p.max())}]")
    bins = (p * nt).long().clamp_(0, nt)
    batch_pos = torch.bincount(bins[label != 0], minlength=nt + 1).to(pos.dtype)
    batch_neg = torch.bincount(bins[label == 0], minlength=nt + 1).to(neg.dtype)
    if int(attrs["slide_steps"]) == 0:
        pos.view(-1, nt + 1)[0].add_(batch_pos)
        neg.view(-1, nt + 1)[0].add_(batch_neg)
    else:
        for stat, batch in ((pos, batch_pos), (neg, batch_neg)):
            rows = stat.view(-1, nt + 1)
            rows.copy_(torch.roll(rows, -1, 0))
            rows[-1] = batch
    tot_pos = pos.view(-1, nt + 1).sum(0).double().flip(0).cumsum(0)
    tot_neg = neg.view(-1, nt + 1).sum(0).double().flip(0).cumsum(0)
    zero = torch.zeros(1, dtype=torch.float64, device=pred.device)
    tp, fp = torch.cat([zero, tot_pos]), torch.cat([zero, tot_neg])
    area = ((fp[1:] - fp[:-1]) * (tp[1:] + tp[:-1]) / 2.0).sum()
    denom = tp[-1] * fp[-1]
    auc = torch.where(denom > 0, area / denom.clamp(min=1.0), torch.zeros_like(area))
    return {"AUC": auc.reshape(1), "StatPosOut": pos, "StatNegOut": neg}


register_op("auc", inputs=("Predict", "Label", "StatPos", "StatNeg"),
            outputs=("AUC", "StatPosOut", "StatNegOut"),
            attrs={"curve": "ROC", "num_thresholds": 4095, "slide_steps": 1},
            infer_shape=_auc_shape, kernel=_auc)


# ----------------------------------------------------------------------------- mean_iou


def _mean_iou_shape(ins: dict, attrs: dict) -> dict:
    n = int(attrs["num_classes"])
    if n <= 0:
        raise ValueError(f"mean_iou: num_classes must be > 0, got {n}")
    for slot in ("Predictions", "Labels"):
        if ins[slot].dtype not in ("int32", "int64"):
            raise TypeError(f"mean_iou: {slot} must hold int class ids, got {ins[slot].dtype}")
    return {"OutMeanIou": Meta((1,), "float32"), "OutWrong": Meta((n,), "int32"),
            "OutCorrect": Meta((n,), "int32")}


def _mean_iou(ins: dict, attrs: dict, ctx: Any) -> dict:
    """Per class ``correct / (correct + wrong)`` (a miss counts as wrong for both the true
    and the predicted class), averaged over the classes that occur; as Fluid's kernel.

    The optional ``InWrongs`` / ``InCorrects`` (lists of ``[num_classes]`` counts) add to the
    counts before the ratio is taken, and ``InMeanIou`` (a list of ``[1]``) adds to the
    result: how Fluid accumulates over batches."""
    n = int(attrs["num_classes"])
    pred, label = ins["Predictions"].reshape(-1).long(), ins["Labels"].reshape(-1).long()
    for name, t in (("Predictions", pred), ("Labels", label)):
        if t.numel() and (int(t.min()) < 0 or int(t.max()) >= n):
            raise ValueError(f"mean_iou: {name} holds a class outside [0, {n})")
    hit = pred == label
    correct = torch.bincount(pred[hit], minlength=n)
    wrong = torch.bincount(pred[~hit], minlength=n) + torch.bincount(label[~hit], minlength=n)
    for t in ins.get("InWrongs") or []:
        wrong = wrong + t.reshape(-1).long()
    for t in ins.get("InCorrects") or []:
        correct = correct + t.reshape(-1).long()
    denom = correct + wrong
    valid = denom > 0
    iou = torch.where(valid, correct.double() / denom.clamp(min=1).double(),
                      torch.zeros(n, dtype=torch.float64, device=pred.device))
    mean = iou.sum() / valid.sum().clamp(min=1)
    for t in ins.get("InMeanIou") or []:
        mean = mean + t.reshape(-1)[0].double()
    return {"OutMeanIou": mean.reshape(1).float(), "OutWrong": wrong.int(),
            "OutCorrect": correct.int()}


register_op("mean_iou", inputs=("Predictions", "Labels", "InWrongs[]?", "InCorrects[]?",
                                "InMeanIou[]?"),
            outputs=("OutMeanIou", "OutWrong", "OutCorrect"), attrs={"num_classes": 2},
            infer_shape=_mean_iou_shape, kernel=_mean_iou)


# ----------------------------------------------------------------------------- edit_distance


def _levenshtein(a: list[int], b: list[int]) -> int:
    prev = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        cur = [i] + [0] * len(b)
        for j, y in enumerate(b, 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (x != y))
        prev = cur
    return prev[-1]


def _edit_distance_shape(ins: dict, attrs: dict) -> dict:
    for slot in ("Hyps", "Refs"):
        if ins[slot].dtype not in ("int32", "int64"):
            raise TypeError(f"edit_distance: {slot} must hold int64 tokens, "
                            f"got {ins[slot].dtype}")
    return {"Out": Meta((-1, 1), "float32"), "SequenceNum": Meta((1,), "int64")}


def _padded_rows(slot: str, tokens: torch.Tensor, lengths: Any) -> list[list[int]]:
    if lengths is None:
        raise ValueError(f"edit_distance: the padded form needs both HypsLength and "
                         f"RefsLength; {slot}Length is missing")
    n = [int(v) for v in lengths.reshape(-1).tolist()]
    rows = tokens.reshape(tokens.shape[0], -1).tolist() if tokens.dim() else []
    if len(n) != len(rows) or any(not 0 <= k <= len(row) for k, row in zip(n, rows)):
        raise ValueError(f"edit_distance: {slot}Length {n} must give each of the "
                         f"{len(rows)} rows of {slot} {list(tokens.shape)} a length within it")
    return [row[:k] for row, k in zip(rows, n)]


def _edit_distance(ins: dict, attrs: dict, ctx: Any) -> dict:
    """Levenshtein distance of each hypothesis to its reference, divided by the reference
    length when ``normalized`` (an empty reference gives the hypothesis length)."""
    hyps, refs = ins["Hyps"], ins["Refs"]
    if ins.get("HypsLength") is not None or ins.get("RefsLength") is not None:
        # the padded form: row i of Hyps / Refs [B, T] holds a sequence of HypsLength[i] /
        # RefsLength[i] tokens
        pairs = list(zip(_padded_rows("Hyps", hyps, ins.get("HypsLength")),
                         _padded_rows("Refs", refs, ins.get("RefsLength"))))
    else:
        h_off = require_lod("edit_distance", "Hyps", hyps)
        r_off = require_lod("edit_distance", "Refs", refs)
        if len(h_off) != len(r_off):
            raise ValueError(f"edit_distance: {len(h_off) - 1} hypotheses but "
                             f"{len(r_off) - 1} references")
        h, r = hyps.reshape(-1).tolist(), refs.reshape(-1).tolist()
        pairs = [(h[h_off[i]:h_off[i + 1]], r[r_off[i]:r_off[i + 1]])
                 for i in range(len(h_off) - 1)]
    out = []
    for a, b in pairs:
        d = float(_levenshtein(a, b)) if b else float(len(a))
        out.append(d / len(b) if attrs["normalized"] and b else d)
    n = len(out)
    return {"Out": torch.tensor(out, dtype=torch.float32, device=hyps.device).reshape(n, 1),
            "SequenceNum": torch.tensor([n], dtype=torch.int64, device=hyps.device)}


register_op("edit_distance", inputs=("Hyps", "Refs", "HypsLength?", "RefsLength?"),
            outputs=("Out", "SequenceNum"),
            attrs={"normalized": False}, infer_shape=_edit_distance_shape,
            kernel=_edit_distance)
