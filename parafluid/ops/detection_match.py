"""Matching ops of Fluid 1.6's detection family (SSD training and inference; no gradients):

- ``bipartite_match``: per image (a LoD sequence of rows of ``DistMat [K, M]``), greedy
  one-to-one matching of columns to rows by largest distance, then (``per_prediction``) each
  still unmatched column to its best row when that distance reaches ``dist_threshold``;
- ``target_assign``: per image and column, the row of ``X`` the match names (else
  ``mismatch_value``), with weight 1 for matched and negative columns;
- ``mine_hard_examples``: the negatives with the largest losses, at most ``neg_pos_ratio``
  per positive (``max_negative``), as a LoD list of column indices;
- ``multiclass_nms``: per image and class, non-maximum suppression of the boxes over
  ``score_threshold``, then the ``keep_top_k`` best of all classes; the output has one row
  ``[label, score, x1, y1, x2, y2]`` per kept box and one LoD sequence per image.

These are value-dependent (their output sizes follow the data), so they run as plain loops
over the few rows an image holds.
"""

from __future__ import annotations

from typing import Any

import torch

from ..lod import attach_lod, get_lod
from .registry import Meta, register_op

__all__ = ["nms", "jaccard"]

_EPS = 1e-6


def _offsets(x: torch.Tensor) -> list[int]:
    lod = get_lod(x)
    return [int(v) for v in lod[-1]] if lod else [0, x.shape[0]]


# ----------------------------------------------------------------------------- bipartite_match


def _bipartite(dist: torch.Tensor, idx: torch.Tensor, best: torch.Tensor) -> None:
    """Greedy: the largest remaining distance (>= 1e-6) pairs its row and column, until no
    row or no column is left; ties go to the lowest column, then the lowest row."""
    d = dist.clone().t()  # [M, K]: first maximum in column-major order, as Fluid scans
    d[d < _EPS] = -1
    for _ in range(min(d.shape)):
        flat = int(torch.argmax(d))
        col, row = divmod(flat, d.shape[1])
        if d[col, row] < 0:
            break
        idx[col], best[col] = row, dist[row, col]
        d[col, :] = -1
        d[:, row] = -1


def _bipartite_match(ins: dict, attrs: dict, ctx: Any) -> dict:
    dist = ins["DistMat"]
    offs = _offsets(dist)
    n, cols = len(offs) - 1, dist.shape[1]
    idx = torch.full((n, cols), -1, dtype=torch.int32)
    best = torch.zeros((n, cols), dtype=dist.dtype)
    for i in range(n):
        one = dist[offs[i]:offs[i + 1]]
        if one.shape[0] == 0:
            continue
        _bipartite(one, idx[i], best[i])
        if attrs["match_type"] == "per_prediction":
            free = idx[i] == -1
            ok = torch.where((one >= _EPS) & (one >= attrs["dist_threshold"]), one,
                             torch.full_like(one, -1))
            val, row = ok.max(dim=0)  # first maximum: the lowest row, as Fluid's scan
            take = free & (val >= 0)
            idx[i][take] = row[take].to(torch.int32)
            best[i][take] = val[take]
    return {"ColToRowMatchIndices": idx, "ColToRowMatchDist": best}


def _bipartite_match_shape(ins: dict, attrs: dict) -> dict:
    d = ins["DistMat"]
    if len(d.shape) != 2:
        raise ValueError(f"bipartite_match: DistMat must be 2-D [K, M], got {list(d.shape)}")
    if attrs["match_type"] not in ("bipartite", "per_prediction"):
        raise ValueError(f"bipartite_match: match_type must be 'bipartite' or "
                         f"'per_prediction', got {attrs['match_type']!r}")
    return {"ColToRowMatchIndices": Meta((-1, d.shape[1]), "int32"),
            "ColToRowMatchDist": Meta((-1, d.shape[1]), d.dtype)}


register_op("bipartite_match", inputs=("DistMat",),
            outputs=("ColToRowMatchIndices", "ColToRowMatchDist"),
            attrs={"match_type": "bipartite", "dist_threshold": 0.5},
            infer_shape=_bipartite_match_shape, kernel=_bipartite_match,
            no_compile="greedy matching loops over the distances on the host")


# ----------------------------------------------------------------------------- target_assign


def _target_assign_shape(ins: dict, attrs: dict) -> dict:
    x, match = ins["X"], ins["MatchIndices"]
    if len(x.shape) != 3:
        raise ValueError(f"target_assign: X must be 3-D [M, P, K] (a LoD tensor of the rows "
                         f"of each image), got {list(x.shape)}")
    if len(match.shape) != 2:
        raise ValueError(f"target_assign: MatchIndices must be 2-D [N, P], got "
                         f"{list(match.shape)}")
    n, p = match.shape
    return {"Out": Meta((n, p, x.shape[2]), x.dtype), "OutWeight": Meta((n, p, 1), "float32")}


def _target_assign(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, match, neg = ins["X"], ins["MatchIndices"].long(), ins.get("NegIndices")
    offs = _offsets(x)
    n, p = match.shape
    if len(offs) - 1 != n:
        raise ValueError(f"target_assign: X holds the rows of {len(offs) - 1} images (its LoD "
                         f"{offs}) but MatchIndices has {n} rows")
    out = torch.full((n, p, x.shape[2]), float(attrs["mismatch_value"]), dtype=x.dtype)
    weight = torch.zeros((n, p, 1), dtype=torch.float32)
    cols = torch.arange(p) % x.shape[1]  # X's P is 1 (one value per row) or the columns
    for i in range(n):
        hit = match[i] > -1
        rows = offs[i] + match[i][hit]
        if rows.numel() and int(rows.max()) >= offs[i + 1]:
            raise ValueError(f"target_assign: image {i} matches row {int(rows.max()) - offs[i]}"
                             f" but holds {offs[i + 1] - offs[i]} rows")
        out[i][hit] = x[rows, cols[hit]]
        weight[i][hit] = 1.0
    if neg is not None:
        neg_offs = _offsets(neg)
        if len(neg_offs) - 1 != n:
            raise ValueError(f"target_assign: NegIndices holds {len(neg_offs) - 1} images but "
                             f"MatchIndices {n}")
        flat = neg.reshape(-1).long()
        for i in range(n):
            cols_i = flat[neg_offs[i]:neg_offs[i + 1]]
            out[i][cols_i] = float(attrs["mismatch_value"])
            weight[i][cols_i] = 1.0
    return {"Out": out, "OutWeight": weight}


register_op("target_assign", inputs=("X", "MatchIndices", "NegIndices?"),
            outputs=("Out", "OutWeight"), attrs={"mismatch_value": 0},
            infer_shape=_target_assign_shape, kernel=_target_assign,
            no_compile="reads the match indices on the host")


# ----------------------------------------------------------------------------- mine_hard_examples


def _mine_shape(ins: dict, attrs: dict) -> dict:
    cls, match = ins["ClsLoss"], ins["MatchIndices"]
    if len(cls.shape) != 2 or len(match.shape) != 2:
        raise ValueError(f"mine_hard_examples: ClsLoss and MatchIndices must be 2-D [N, Np], "
                         f"got {list(cls.shape)} and {list(match.shape)}")
    if attrs["mining_type"] not in ("max_negative", "hard_example"):
        raise ValueError(f"mine_hard_examples: mining_type must be 'max_negative' or "
                         f"'hard_example', got {attrs['mining_type']!r}")
    return {"NegIndices": Meta((-1, 1), "int32"),
            "UpdatedMatchIndices": Meta(match.shape, match.dtype)}


def _mine_hard_examples(ins: dict, attrs: dict, ctx: Any) -> dict:
    cls, loc = ins["ClsLoss"], ins.get("LocLoss")
    match, dist = ins["MatchIndices"], ins["MatchDist"]
    hard = attrs["mining_type"] == "hard_example"
    updated = match.clone()
    negs: list[int] = []
    offsets = [0]
    for n in range(match.shape[0]):
        if hard:
            eligible = torch.ones(match.shape[1], dtype=torch.bool)
            loss = cls[n] + (loc[n] if loc is not None else 0)
        else:
            eligible = (match[n] == -1) & (dist[n] < attrs["neg_dist_threshold"])
            loss = cls[n]
        cand = torch.nonzero(eligible).reshape(-1)
        count = cand.numel()
        if hard:
            count = min(int(attrs["sample_size"]), count)
        else:
            count = min(int(int((match[n] != -1).sum()) * attrs["neg_pos_ratio"]), count)
        order = torch.argsort(loss[cand], descending=True, stable=True)
        chosen = sorted(cand[order[:count]].tolist())
        if hard:
            keep = torch.zeros(match.shape[1], dtype=torch.bool)
            keep[chosen] = True
            updated[n][(match[n] > -1) & ~keep] = -1
            chosen = [m for m in chosen if int(match[n, m]) == -1]
        negs += chosen
        offsets.append(len(negs))
    out = torch.tensor(negs, dtype=torch.int32).reshape(-1, 1)
    return {"NegIndices": attach_lod(out, [offsets]), "UpdatedMatchIndices": updated}


register_op("mine_hard_examples", inputs=("ClsLoss", "LocLoss?", "MatchIndices", "MatchDist"),
            outputs=("NegIndices", "UpdatedMatchIndices"),
            attrs={"neg_pos_ratio": 1.0, "neg_dist_threshold": 0.5, "sample_size": 0,
                   "mining_type": "max_negative"},
            infer_shape=_mine_shape, kernel=_mine_hard_examples,
            no_compile="the number of negatives depends on the values")


# ----------------------------------------------------------------------------- multiclass_nms


def jaccard(a: list[float], b: list[float], normalized: bool) -> float:
    """IoU of two boxes as Fluid's NMS computes it (0 for disjoint or invalid boxes)."""
    if b[0] > a[2] or b[2] < a[0] or b[1] > a[3] or b[3] < a[1]:
        return 0.0
    pixel = 0.0 if normalized else 1.0

    def area(r: list[float]) -> float:
        if r[2] < r[0] or r[3] < r[1]:
            return 0.0
        return (r[2] - r[0] + pixel) * (r[3] - r[1] + pixel)

    inter = (min(a[2], b[2]) - max(a[0], b[0]) + pixel) * \
        (min(a[3], b[3]) - max(a[1], b[1]) + pixel)
    return inter / (area(a) + area(b) - inter)


def nms(boxes: list[list[float]], scores: list[float], score_threshold: float,
        nms_threshold: float, eta: float, top_k: int, normalized: bool) -> list[int]:
    """Indices kept by Fluid's NMSFast, best score first: candidates over the threshold (the
    ``top_k`` best when ``top_k > -1``), each kept unless it overlaps a kept one by more than
    the (adaptive, ``eta``) threshold."""
    order = sorted((i for i, s in enumerate(scores) if s > score_threshold),
                   key=lambda i: -scores[i])  # sorted() is stable, as Fluid's sort
    if top_k > -1:
        order = order[:top_k]
    kept: list[int] = []
    threshold = nms_threshold
    for i in order:
        keep = all(jaccard(boxes[i], boxes[k], normalized) <= threshold for k in kept)
        if keep:
            kept.append(i)
            if eta < 1 and threshold > 0.5:
                threshold *= eta
    return kept


def _nms_image(boxes: torch.Tensor, scores: torch.Tensor, attrs: dict,
               per_class_boxes: bool) -> tuple[list[list[float]], list[int]]:
    """Rows ``[label, score, box...]`` of one image and each row's index in the image's
    flattened scores (``idx`` for ``[C, M]`` scores, ``idx * C + label`` for per-class
    boxes, as Fluid's multiclass_nms2). ``scores`` is ``[C, M]``; ``boxes`` is ``[M, 4]``,
    or ``[C, M, 4]`` when each class has its own boxes."""
    sc = scores.tolist()
    bx = boxes.tolist()
    picked: dict[int, list[int]] = {}
    for c in range(len(sc)):
        if c == attrs["background_label"]:
            continue
        kept = nms(bx[c] if per_class_boxes else bx, sc[c], attrs["score_threshold"],
                   attrs["nms_threshold"], attrs["nms_eta"], attrs["nms_top_k"],
                   attrs["normalized"])
        picked[c] = sorted(kept) if per_class_boxes else kept
    total = sum(len(v) for v in picked.values())
    if attrs["keep_top_k"] > -1 and total > attrs["keep_top_k"]:
        pairs = [(sc[c][i], c, i) for c in sorted(picked) for i in picked[c]]
        pairs = sorted(pairs, key=lambda p: -p[0])[:attrs["keep_top_k"]]
        picked = {}
        for _, c, i in pairs:
            picked.setdefault(c, []).append(i)
        if per_class_boxes:
            picked = {c: sorted(v) for c, v in picked.items()}
    rows, index = [], []
    for c in sorted(picked):
        for i in picked[c]:
            box = bx[c][i] if per_class_boxes else bx[i]
            rows.append([float(c), sc[c][i], *box])
            index.append(i * len(sc) + c if per_class_boxes else i)
    return rows, index


def _multiclass_nms(ins: dict, attrs: dict, ctx: Any, with_index: bool = False) -> dict:
    boxes, scores = ins["BBoxes"], ins["Scores"]
    per_image: list[list[list[float]]] = []
    index: list[int] = []
    if scores.dim() == 3:  # [N, C, M] scores over [N, M, 4] boxes
        if boxes.shape[0] != scores.shape[0] or boxes.shape[1] != scores.shape[2]:
            raise ValueError(f"multiclass_nms: BBoxes {list(boxes.shape)} must be [N, M, 4] "
                             f"for Scores [N, C, M] {list(scores.shape)}")
        for n in range(scores.shape[0]):
            rows, idx = _nms_image(boxes[n], scores[n], attrs, False)
            per_image.append(rows)
            index += [n * scores.shape[2] + i for i in idx]
    else:  # [M, C] scores over [M, C, 4] boxes, one LoD sequence per image
        offs = _offsets(boxes)
        for n in range(len(offs) - 1):
            s, e = offs[n], offs[n + 1]
            rows, idx = _nms_image(boxes[s:e].transpose(0, 1), scores[s:e].t(), attrs, True)
            per_image.append(rows)
            index += [s * scores.shape[1] + i for i in idx]
    width = boxes.shape[-1] + 2
    rows = [r for img in per_image for r in img]
    offsets = [0]
    for img in per_image:
        offsets.append(offsets[-1] + len(img))
    if not rows and not with_index:  # Fluid's marker for "no detection in the whole batch"
        return {"Out": attach_lod(torch.full((1, 1), -1.0, dtype=scores.dtype), [[0, 1]])}
    out = torch.tensor(rows, dtype=scores.dtype).reshape(-1, width)
    if not with_index:
        return {"Out": attach_lod(out, [offsets])}
    # NOTE: multiclass_nms2 marks "no detection" by empty outputs, not by a -1 row
    idx = torch.tensor(index, dtype=torch.int32).reshape(-1, 1)
    return {"Out": attach_lod(out, [offsets]), "Index": attach_lod(idx, [offsets])}


def _multiclass_nms_shape(ins: dict, attrs: dict) -> dict:
    boxes, scores = ins["BBoxes"], ins["Scores"]
    if len(scores.shape) == 3:
        if len(boxes.shape) != 3:
            raise ValueError(f"multiclass_nms: with Scores [N, C, M] BBoxes must be [N, M, 4],"
                             f" got {list(boxes.shape)}")
    elif len(scores.shape) == 2:
        if len(boxes.shape) != 3:
            raise ValueError(f"multiclass_nms: with Scores [M, C] BBoxes must be [M, C, 4], "
                             f"got {list(boxes.shape)}")
    else:
        raise ValueError(f"multiclass_nms: Scores must be [N, C, M] or a LoD [M, C], got "
                         f"{list(scores.shape)}")
    if boxes.shape[-1] not in (-1, 4):
        raise ValueError(f"multiclass_nms: boxes must have 4 coordinates, got "
                         f"{list(boxes.shape)}")
    return {"Out": Meta((-1, 6), scores.dtype)}


def _multiclass_nms2_shape(ins: dict, attrs: dict) -> dict:
    return {**_multiclass_nms_shape(ins, attrs), "Index": Meta((-1, 1), "int32")}


_NMS_ATTRS = {"background_label": 0, "score_threshold": 0.0, "nms_top_k": -1,
              "nms_threshold": 0.3, "nms_eta": 1.0, "keep_top_k": -1, "normalized": True}

register_op("multiclass_nms", inputs=("BBoxes", "Scores"), outputs=("Out",),
            attrs=dict(_NMS_ATTRS), infer_shape=_multiclass_nms_shape, kernel=_multiclass_nms,
            no_compile="non-maximum suppression: the number of kept boxes depends on the values")
register_op("multiclass_nms2", inputs=("BBoxes", "Scores"), outputs=("Out", "Index"),
            attrs=dict(_NMS_ATTRS), infer_shape=_multiclass_nms2_shape,
            kernel=lambda ins, attrs, ctx: _multiclass_nms(ins, attrs, ctx, with_index=True),
            no_compile="non-maximum suppression: the number of kept boxes depends on the values")
