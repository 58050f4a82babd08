"""Op table: the detection family's boxes and matching (prior boxes, anchors, box coding,
IoU, clipping, bipartite matching, target assignment, hard-example mining, non-maximum
suppression, mAP, box decoding with assignment, the focal loss, RetinaNet's output).
References are numpy loops written from Fluid 1.6's operator definitions; the ROI, proposal,
YOLOv3 and deformable convolution ops have their own tables (test_roi_ops.py,
test_rpn_ops.py, test_yolo_ops.py, test_deformable_conv_ops.py)."""

import math

import numpy as np
import pytest

from parafluid.testing import OpCase, check_op, rand
from parafluid.testing.refs import anchor_grid, box_iou, nms_pixels

FEAT = np.zeros((1, 2, 3, 4), "float32")  # a 3 x 4 feature map
IMAGE = np.zeros((1, 3, 30, 40), "float32")


def _ratios(ratios, flip):
    out = [1.0]
    for r in ratios:
        if min(abs(r - o) for o in out) < 1e-6:
            continue
        out += [r, 1.0 / r] if flip else [r]
    return out


def prior_box_ref(Input, Image, attrs):
    h, w = Input.shape[2:]
    ih, iw = Image.shape[2:]
    sw = attrs["step_w"] or iw / w
    sh = attrs["step_h"] or ih / h
    ratios = _ratios(attrs["aspect_ratios"], attrs["flip"])
    cells = []
    for y in range(h):
        for x in range(w):
            cx, cy = (x + attrs["offset"]) * sw, (y + attrs["offset"]) * sh
            sizes = []  # (box width, box height)
            for s, m in enumerate(attrs["min_sizes"]):
                by_ratio = [(m * math.sqrt(r), m / math.sqrt(r)) for r in ratios]
                big = [(math.sqrt(m * attrs["max_sizes"][s]),) * 2] if attrs["max_sizes"] else []
                if attrs["min_max_aspect_ratios_order"]:
                    sizes += [(m, m)] + big + [b for r, b in zip(ratios, by_ratio) if r != 1.0]
                else:
                    sizes += by_ratio + big
            cells.append([[(cx - bw / 2) / iw, (cy - bh / 2) / ih, (cx + bw / 2) / iw,
                           (cy + bh / 2) / ih] for bw, bh in sizes])
    boxes = np.array(cells).reshape(h, w, -1, 4)
    if attrs["clip"]:
        boxes = np.clip(boxes, 0, 1)
    return {"Boxes": boxes, "Variances": np.broadcast_to(attrs["variances"], boxes.shape)}


def density_prior_box_ref(Input, Image, attrs):
    h, w = Input.shape[2:]
    ih, iw = Image.shape[2:]
    sw = attrs["step_w"] or iw / w
    sh = attrs["step_h"] or ih / h
    avg = int((sw + sh) / 2)
    out = []
    for y in range(h):
        for x in range(w):
            cx, cy = (x + attrs["offset"]) * sw, (y + attrs["offset"]) * sh
            for size, d in zip(attrs["fixed_sizes"], attrs["densities"]):
                shift = avg // d
                for r in attrs["fixed_ratios"]:
                    bw, bh = size * math.sqrt(r), size / math.sqrt(r)
                    for i in range(d):
                        for j in range(d):
                            px = cx - avg / 2 + shift / 2 + j * shift
                            py = cy - avg / 2 + shift / 2 + i * shift
                            out.append([(px - bw / 2) / iw, (py - bh / 2) / ih,
                                        (px + bw / 2) / iw, (py + bh / 2) / ih])
    boxes = np.clip(np.array(out), 0, 1)
    if not attrs["flatten_to_2d"]:
        boxes = boxes.reshape(h, w, -1, 4)
    return {"Boxes": boxes, "Variances": np.broadcast_to(attrs["variances"], boxes.shape)}


def anchor_ref(Input, attrs):
    h, w = Input.shape[2:]
    sw, sh = attrs["stride"]
    out = []
    for y in range(h):
        for x in range(w):
            cx = x * sw + attrs["offset"] * (sw - 1)
            cy = y * sh + attrs["offset"] * (sh - 1)
            for r in attrs["aspect_ratios"]:
                for size in attrs["anchor_sizes"]:
                    bw = np.round(np.sqrt(sw * sh / r))
                    bh = np.round(bw * r)
                    aw, ah = size / sw * bw, size / sh * bh
                    out.append([cx - (aw - 1) / 2, cy - (ah - 1) / 2, cx + (aw - 1) / 2,
                                cy + (ah - 1) / 2])
    boxes = np.array(out).reshape(h, w, -1, 4)
    return {"Anchors": boxes, "Variances": np.broadcast_to(attrs["variances"], boxes.shape)}


def _center(b, pixel):
    w, h = b[2] - b[0] + pixel, b[3] - b[1] + pixel
    return w, h, b[0] + w / 2, b[1] + h / 2


def box_coder_ref(PriorBox, TargetBox, attrs, PriorBoxVar=None):
    pixel = 0.0 if attrs["box_normalized"] else 1.0
    var = PriorBoxVar
    if var is None:
        var = np.tile(attrs["variance"] or [1.0] * 4, (len(PriorBox), 1))
    if attrs["code_type"] == "encode_center_size":
        out = np.zeros((len(TargetBox), len(PriorBox), 4))
        for i, t in enumerate(TargetBox):
            tw, th = t[2] - t[0] + pixel, t[3] - t[1] + pixel
            tcx, tcy = (t[0] + t[2]) / 2, (t[1] + t[3]) / 2
            for j, p in enumerate(PriorBox):
                pw, ph, pcx, pcy = _center(p, pixel)
                out[i, j] = np.array([(tcx - pcx) / pw, (tcy - pcy) / ph, np.log(tw / pw),
                                      np.log(th / ph)]) / var[j]
        return {"OutputBox": out}
    out = np.zeros(TargetBox.shape)
    for i in range(TargetBox.shape[0]):
        for j in range(TargetBox.shape[1]):
            k = j if attrs["axis"] == 0 else i
            pw, ph, pcx, pcy = _center(PriorBox[k], pixel)
            v, t = var[k], TargetBox[i, j]
            cx, cy = v[0] * t[0] * pw + pcx, v[1] * t[1] * ph + pcy
            bw, bh = np.exp(v[2] * t[2]) * pw, np.exp(v[3] * t[3]) * ph
            out[i, j] = [cx - bw / 2, cy - bh / 2, cx + bw / 2 - pixel, cy + bh / 2 - pixel]
    return {"OutputBox": out}


def iou_ref(X, Y, attrs):
    return {"Out": np.array([[box_iou(a, b, attrs["box_normalized"]) for b in Y] for a in X])}


def boxes(n, seed, scale=1.0):
    """Valid random boxes: x1 < x2, y1 < y2."""
    rng = np.random.RandomState(seed)
    xy = rng.uniform(0, 0.6, (n, 2))
    wh = rng.uniform(0.1, 0.4, (n, 2))
    return (np.concatenate([xy, xy + wh], 1) * scale).astype("float32")


def box_clip_ref(Input, ImInfo):
    out = Input.copy()
    for i, (start, end) in enumerate([(0, 2), (2, 5)]):
        im_h = np.round(ImInfo[i, 0] / ImInfo[i, 2])
        im_w = np.round(ImInfo[i, 1] / ImInfo[i, 2])
        out[start:end, 0::2] = np.clip(out[start:end, 0::2], 0, im_w - 1)
        out[start:end, 1::2] = np.clip(out[start:end, 1::2], 0, im_h - 1)
    return {"Output": out}


PRIOR_ATTRS = {"min_sizes": [4.0, 9.0], "max_sizes": [8.0, 20.0], "aspect_ratios": [2.0, 3.0],
               "variances": [0.1, 0.1, 0.2, 0.2], "flip": True, "clip": True, "step_w": 0.0,
               "step_h": 0.0, "offset": 0.5}
DENSITY_ATTRS = {"densities": [3, 1], "fixed_sizes": [6.0, 16.0], "fixed_ratios": [1.0, 2.0],
                 "variances": [0.1, 0.1, 0.2, 0.2], "clip": False, "step_w": 0.0,
                 "step_h": 0.0, "offset": 0.5, "flatten_to_2d": False}
PRIORS = boxes(5, seed=1)
PRIOR_VAR = rand(5, 4, low=0.1, high=0.3, dtype="float32")
DELTAS = rand(3, 5, 4, seed=2, dtype="float32") * 0.5

CASES = [
    OpCase("prior_box", {"Input": FEAT, "Image": IMAGE},
           attrs={**PRIOR_ATTRS, "min_max_aspect_ratios_order": False}, ref=prior_box_ref),
    OpCase("prior_box", {"Input": FEAT, "Image": IMAGE},
           attrs={**PRIOR_ATTRS, "min_max_aspect_ratios_order": True, "clip": False,
                  "step_w": 8.0, "step_h": 12.0, "flip": False},
           ref=prior_box_ref, id="prior_box_caffe_order_steps"),
    OpCase("prior_box", {"Input": FEAT, "Image": IMAGE},
           attrs={**PRIOR_ATTRS, "max_sizes": [], "aspect_ratios": [1.0],
                  "min_max_aspect_ratios_order": False},
           ref=prior_box_ref, id="prior_box_min_only"),
    OpCase("density_prior_box", {"Input": FEAT, "Image": IMAGE}, attrs=DENSITY_ATTRS,
           ref=density_prior_box_ref),
    OpCase("density_prior_box", {"Input": FEAT, "Image": IMAGE},
           attrs={**DENSITY_ATTRS, "flatten_to_2d": True, "step_w": 7.0, "step_h": 9.0},
           ref=density_prior_box_ref, id="density_prior_box_flat_steps"),
    OpCase("anchor_generator", {"Input": FEAT},
           attrs={"anchor_sizes": [32.0, 64.0], "aspect_ratios": [0.5, 1.0, 2.0],
                  "variances": [0.1, 0.1, 0.2, 0.2], "stride": [16.0, 8.0], "offset": 0.5},
           ref=anchor_ref),
    OpCase("box_coder", {"PriorBox": PRIORS, "PriorBoxVar": PRIOR_VAR,
                         "TargetBox": boxes(3, seed=3)},
           attrs={"code_type": "encode_center_size"}, ref=box_coder_ref, rtol=1e-4),
    OpCase("box_coder", {"PriorBox": PRIORS * 50, "TargetBox": boxes(3, seed=3) * 50},
           attrs={"code_type": "encode_center_size", "box_normalized": False,
                  "variance": [0.1, 0.1, 0.2, 0.2]},
           ref=box_coder_ref, rtol=1e-4, id="box_coder_encode_pixels_attr_variance"),
    OpCase("box_coder", {"PriorBox": PRIORS, "PriorBoxVar": PRIOR_VAR,
                         "TargetBox": DELTAS},
           attrs={"code_type": "decode_center_size"}, ref=box_coder_ref,
           id="box_coder_decode"),
    OpCase("box_coder", {"PriorBox": PRIORS[:3] * 50, "TargetBox": DELTAS},
           attrs={"code_type": "decode_center_size", "axis": 1, "box_normalized": False},
           ref=box_coder_ref, id="box_coder_decode_axis1_no_variance"),
    OpCase("iou_similarity", {"X": boxes(4, seed=4), "Y": boxes(6, seed=5)},
           attrs={"box_normalized": True}, ref=iou_ref),
    OpCase("iou_similarity", {"X": boxes(4, seed=4, scale=20), "Y": boxes(6, seed=5, scale=20)},
           attrs={"box_normalized": False}, ref=iou_ref, id="iou_similarity_pixels"),
    OpCase("box_clip", {"Input": rand(5, 4, low=-10, high=60, seed=6, dtype="float32"),
                        "ImInfo": np.array([[40, 50, 1.0], [80, 60, 2.0]], "float32")},
           lod={"Input": [[0, 2, 5]]}, ref=box_clip_ref),
]

# ----------------------------------------------------------------------------- matching


def _greedy_bipartite(d):
    """Reference: repeatedly the largest entry (>= 1e-6) over free rows and columns, scanning
    columns then rows (the first maximum wins)."""
    idx, dist = -np.ones(d.shape[1], "int32"), np.zeros(d.shape[1])
    free_rows = list(range(d.shape[0]))
    while free_rows:
        best = (-1.0, -1, -1)
        for j in range(d.shape[1]):
            if idx[j] != -1:
                continue
            for i in free_rows:
                if d[i, j] >= 1e-6 and d[i, j] > best[0]:
                    best = (d[i, j], i, j)
        if best[1] == -1:
            break
        idx[best[2]], dist[best[2]] = best[1], best[0]
        free_rows.remove(best[1])
    return idx, dist


def bipartite_ref(DistMat, attrs, offsets=(0, 2, 2, 5)):
    n = len(offsets) - 1
    idx, dist = -np.ones((n, DistMat.shape[1]), "int32"), np.zeros((n, DistMat.shape[1]))
    for b in range(n):
        d = DistMat[offsets[b]:offsets[b + 1]]
        if not len(d):
            continue
        idx[b], dist[b] = _greedy_bipartite(d)
        if attrs["match_type"] == "per_prediction":
            for j in range(d.shape[1]):
                if idx[b, j] != -1:
                    continue
                best = max(range(len(d)), key=lambda i: (d[i, j], -i))
                if d[best, j] >= max(attrs["dist_threshold"], 1e-6):
                    idx[b, j], dist[b, j] = best, d[best, j]
    return {"ColToRowMatchIndices": idx, "ColToRowMatchDist": dist.astype(DistMat.dtype)}


DIST = rand(5, 7, low=0, high=1, seed=7, dtype="float32")
DIST[DIST < 0.2] = 0  # some pairs never match
MATCH = np.array([[0, -1, 1, -1, -1, 0], [-1, 2, -1, 0, -1, -1]], "int32")  # 2 images, 6 cols


def target_assign_ref(X, MatchIndices, attrs, NegIndices=None, x_offsets=(0, 2, 5),
                      neg_offsets=(0, 1, 3)):
    n, p = MatchIndices.shape
    out = np.full((n, p, X.shape[2]), attrs["mismatch_value"], X.dtype)
    weight = np.zeros((n, p, 1), "float32")
    for i in range(n):
        for j in range(p):
            m = MatchIndices[i, j]
            if m > -1:
                out[i, j] = X[x_offsets[i] + m, j % X.shape[1]]
                weight[i, j] = 1
        if NegIndices is not None:
            for k in NegIndices[neg_offsets[i]:neg_offsets[i + 1], 0]:
                out[i, k] = attrs["mismatch_value"]
                weight[i, k] = 1
    return {"Out": out, "OutWeight": weight}


CLS_LOSS = rand(2, 6, low=0, high=2, seed=8, dtype="float32")
MATCH_DIST = np.array([[0.8, 0.1, 0.6, 0.45, 0.55, 0.9], [0.2, 0.7, 0.3, 0.9, 0.1, 0.05]],
                      "float32")


def mine_ref(ClsLoss, MatchIndices, MatchDist, attrs):
    negs, offs = [], [0]
    for n in range(len(ClsLoss)):
        cand = [m for m in range(ClsLoss.shape[1])
                if MatchIndices[n, m] == -1 and MatchDist[n, m] < attrs["neg_dist_threshold"]]
        count = min(int((MatchIndices[n] != -1).sum() * attrs["neg_pos_ratio"]), len(cand))
        chosen = sorted(sorted(cand, key=lambda m: -ClsLoss[n, m])[:count])
        negs += chosen
        offs.append(len(negs))
    return {"NegIndices": np.array(negs, "int32").reshape(-1, 1),
            "UpdatedMatchIndices": MatchIndices}


def _nms_ref(boxes, scores, attrs):
    order = [i for i in np.argsort(-scores, kind="stable") if scores[i] > attrs["score_threshold"]]
    if attrs["nms_top_k"] > -1:
        order = order[:attrs["nms_top_k"]]
    kept, thr = [], attrs["nms_threshold"]
    for i in order:
        if all(box_iou(boxes[i], boxes[k], attrs["normalized"]) <= thr for k in kept):
            kept.append(i)
            if attrs["nms_eta"] < 1 and thr > 0.5:
                thr *= attrs["nms_eta"]
    return kept


def nms_ref(BBoxes, Scores, attrs):
    rows = []
    for n in range(len(Scores)):
        dets = []  # (score, class, box index)
        for c in range(Scores.shape[1]):
            if c != attrs["background_label"]:
                dets += [(Scores[n, c, i], c, i) for i in _nms_ref(BBoxes[n], Scores[n, c], attrs)]
        if attrs["keep_top_k"] > -1:
            dets = sorted(dets, key=lambda d: -d[0])[:attrs["keep_top_k"]]
        dets = sorted(dets, key=lambda d: (d[1], -d[0]))  # by class, best first
        rows += [[c, s, *BBoxes[n, i]] for s, c, i in dets]
    return {"Out": np.array(rows, Scores.dtype).reshape(-1, 6)}


def nms_lod_ref(BBoxes, Scores, attrs, offsets=(0, 4, 9)):
    rows = []
    for n in range(len(offsets) - 1):
        b, s = BBoxes[offsets[n]:offsets[n + 1]], Scores[offsets[n]:offsets[n + 1]]
        dets = []
        for c in range(s.shape[1]):
            if c != attrs["background_label"]:
                dets += [(s[i, c], c, i) for i in _nms_ref(b[:, c], s[:, c], attrs)]
        if attrs["keep_top_k"] > -1:
            dets = sorted(dets, key=lambda d: -d[0])[:attrs["keep_top_k"]]
        dets = sorted(dets, key=lambda d: (d[1], d[2]))  # by class, then box index
        rows += [[c, sc, *b[i, c]] for sc, c, i in dets]
    return {"Out": np.array(rows, Scores.dtype).reshape(-1, 6)}


def _clustered_boxes(n, m, seed):
    """Boxes around a few centres, so that NMS has overlaps to suppress."""
    rng = np.random.RandomState(seed)
    centres = rng.uniform(0.2, 0.8, (3, 2))
    c = centres[rng.randint(0, 3, (n, m))] + rng.uniform(-0.05, 0.05, (n, m, 2))
    half = rng.uniform(0.05, 0.15, (n, m, 2))
    return np.concatenate([c - half, c + half], -1).astype("float32")


NMS_ATTRS = {"background_label": 0, "score_threshold": 0.1, "nms_top_k": -1,
             "nms_threshold": 0.3, "nms_eta": 1.0, "keep_top_k": -1, "normalized": True}
NMS_BOXES = _clustered_boxes(2, 12, seed=9)
NMS_SCORES = rand(2, 4, 12, low=0, high=1, seed=10, dtype="float32")


CASES += [
    OpCase("bipartite_match", {"DistMat": DIST}, attrs={"match_type": "bipartite"},
           lod={"DistMat": [[0, 2, 2, 5]]}, ref=bipartite_ref),
    OpCase("bipartite_match", {"DistMat": DIST},
           attrs={"match_type": "per_prediction", "dist_threshold": 0.5},
           lod={"DistMat": [[0, 2, 2, 5]]}, ref=bipartite_ref, id="bipartite_match_per_pred"),
    OpCase("bipartite_match", {"DistMat": DIST}, attrs={"match_type": "per_prediction",
                                                        "dist_threshold": 0.3},
           ref=lambda DistMat, attrs: bipartite_ref(DistMat, attrs, (0, 5)),
           id="bipartite_match_no_lod"),
    OpCase("target_assign", {"X": rand(5, 6, 4, seed=11, dtype="float32"),
                             "MatchIndices": MATCH},
           attrs={"mismatch_value": 0}, lod={"X": [[0, 2, 5]]}, ref=target_assign_ref),
    OpCase("target_assign", {"X": np.arange(5, dtype="int32").reshape(5, 1, 1) + 1,
                             "MatchIndices": MATCH,
                             "NegIndices": np.array([[1], [0], [4]], "int32")},
           attrs={"mismatch_value": 7}, lod={"X": [[0, 2, 5]], "NegIndices": [[0, 1, 3]]},
           ref=target_assign_ref, id="target_assign_labels_negatives"),
    OpCase("mine_hard_examples", {"ClsLoss": CLS_LOSS, "MatchIndices": MATCH,
                                  "MatchDist": MATCH_DIST},
           attrs={"neg_pos_ratio": 1.5, "neg_dist_threshold": 0.5,
                  "mining_type": "max_negative"}, ref=mine_ref),
    OpCase("multiclass_nms", {"BBoxes": NMS_BOXES, "Scores": NMS_SCORES}, attrs=NMS_ATTRS,
           ref=nms_ref),
    OpCase("multiclass_nms", {"BBoxes": NMS_BOXES, "Scores": NMS_SCORES},
           attrs={**NMS_ATTRS, "nms_top_k": 5, "keep_top_k": 6, "background_label": -1,
                  "nms_threshold": 0.5, "nms_eta": 0.9},
           ref=nms_ref, id="multiclass_nms_top_k_eta"),
    OpCase("multiclass_nms", {"BBoxes": NMS_BOXES * 40, "Scores": NMS_SCORES},
           attrs={**NMS_ATTRS, "normalized": False, "keep_top_k": 4}, ref=nms_ref,
           id="multiclass_nms_pixels"),
    OpCase("multiclass_nms", {"BBoxes": _clustered_boxes(9, 3, seed=12),
                              "Scores": rand(9, 3, low=0, high=1, seed=13, dtype="float32")},
           attrs={**NMS_ATTRS, "keep_top_k": 5}, lod={"BBoxes": [[0, 4, 9]]},
           ref=nms_lod_ref, id="multiclass_nms_lod_per_class_boxes"),
]

# helpers shared with the sections below


def _sigmoid(v):
    return 1 / (1 + np.exp(-v))


# ----------------------------------------------------------------------------- the others


def decode_assign_ref(PriorBox, PriorBoxVar, TargetBox, BoxScore, attrs):
    r, c = BoxScore.shape
    out = np.zeros((r, c, 4))
    assign = np.zeros((r, 4))
    v = PriorBoxVar.reshape(-1)
    for i in range(r):
        p = PriorBox[i]
        pw, ph = p[2] - p[0] + 1, p[3] - p[1] + 1
        pcx, pcy = p[0] + pw / 2, p[1] + ph / 2
        for j in range(c):
            d = TargetBox[i, 4 * j:4 * j + 4]
            cx, cy = v[0] * d[0] * pw + pcx, v[1] * d[1] * ph + pcy
            w = np.exp(min(v[2] * d[2], attrs["box_clip"])) * pw
            h = np.exp(min(v[3] * d[3], attrs["box_clip"])) * ph
            out[i, j] = [cx - w / 2, cy - h / 2, cx + w / 2 - 1, cy + h / 2 - 1]
        best = 1 + int(np.argmax(BoxScore[i, 1:]))
        assign[i] = out[i, best] if BoxScore[i, best] > -1 else p
    return {"DecodeBox": out.reshape(r, -1), "OutputAssignBox": assign}


def polygon_ref(Input):
    out = np.zeros_like(Input)
    for c in range(Input.shape[1]):
        for y in range(Input.shape[2]):
            for x in range(Input.shape[3]):
                out[:, c, y, x] = (4 * x if c % 2 == 0 else 4 * y) - Input[:, c, y, x]
    return {"Output": out}


def focal_ref(X, Label, FgNum, attrs):
    out = np.zeros_like(X)
    fg = max(FgNum[0], 1)
    for i in range(X.shape[0]):
        for d in range(X.shape[1]):
            p = _sigmoid(X[i, d])
            if Label[i, 0] == d + 1:
                out[i, d] = -attrs["alpha"] / fg * (1 - p) ** attrs["gamma"] * np.log(p)
            elif Label[i, 0] != -1:
                out[i, d] = -(1 - attrs["alpha"]) / fg * p ** attrs["gamma"] * np.log(1 - p)
    return {"Out": out}


CASES += [
    OpCase("box_decoder_and_assign",
           {"PriorBox": boxes(4, seed=19, scale=50), "PriorBoxVar": np.array(
               [0.1, 0.1, 0.2, 0.2], "float32"),
            "TargetBox": rand(4, 12, low=-3, high=3, seed=20, dtype="float32"),
            "BoxScore": np.array([[0.9, 0.05, 0.05], [0.1, 0.2, 0.7], [0.3, 0.4, 0.3],
                                  [0.5, -2, -3]], "float32")},
           attrs={"box_clip": 0.3}, ref=decode_assign_ref, rtol=1e-4, atol=1e-4),
    OpCase("polygon_box_transform", {"Input": rand(2, 4, 3, 5, seed=21)}, ref=polygon_ref),
    OpCase("sigmoid_focal_loss", {"X": rand(6, 3, low=-3, high=3, seed=22),
                                  "Label": np.array([[0], [1], [3], [-1], [2], [1]], "int32"),
                                  "FgNum": np.array([4], "int32")},
           attrs={"gamma": 2.0, "alpha": 0.25}, ref=focal_ref, grad=["X"]),
    OpCase("sigmoid_focal_loss", {"X": rand(4, 2, low=-3, high=3, seed=23),
                                  "Label": np.array([[0], [2], [1], [0]], "int32"),
                                  "FgNum": np.array([0], "int32")},
           attrs={"gamma": 1.5, "alpha": 0.4}, ref=focal_ref, grad=["X"],
           id="sigmoid_focal_loss_no_foreground_count"),
]

# ----------------------------------------------------------------------------- detection_map

DET_OFFS, GT_OFFS = [0, 5, 8], [0, 3, 5]
# [label, score, box]: image 0 finds both class-1 objects (one twice), misses class 2;
# image 1 has a class-2 hit, a class-3 false alarm and a box past the image's border
DETS = np.array([[1, 0.9, 0.1, 0.1, 0.3, 0.3], [1, 0.8, 0.12, 0.1, 0.3, 0.32],
                 [1, 0.7, 0.5, 0.5, 0.8, 0.9], [2, 0.3, 0.0, 0.6, 0.2, 0.9],
                 [1, 0.2, 0.6, 0.1, 0.9, 0.3],
                 [2, 0.95, 0.4, 0.4, 0.7, 1.2], [3, 0.5, 0.1, 0.1, 0.2, 0.2],
                 [2, 0.6, 0.0, 0.0, 0.1, 0.1]], "float32")
# [label, difficult, box]
GTS = np.array([[1, 0, 0.1, 0.1, 0.3, 0.3], [1, 0, 0.5, 0.5, 0.8, 0.85],
                [2, 1, 0.6, 0.6, 0.9, 0.9],
                [2, 0, 0.4, 0.4, 0.7, 1.0], [1, 1, 0.0, 0.0, 0.2, 0.2]], "float32")


def detection_map_ref(DetectRes, Label, attrs):
    """VOC-style AP per class written independently: greedy matching by score, each ground
    truth used once, difficult ones neither counted nor penalized when not evaluated."""
    npos, flags = {}, {}
    for n in range(len(GT_OFFS) - 1):
        gts = Label[GT_OFFS[n]:GT_OFFS[n + 1]]
        dets = DetectRes[DET_OFFS[n]:DET_OFFS[n + 1]]
        for g in gts:
            if attrs["evaluate_difficult"] or not g[1]:
                npos[int(g[0])] = npos.get(int(g[0]), 0) + 1
        for c in {int(d[0]) for d in dets}:
            cand = sorted([d for d in dets if d[0] == c], key=lambda d: -d[1])
            truth = [g for g in gts if g[0] == c]
            used = [False] * len(truth)
            for d in cand:
                box = np.clip(d[2:], 0, 1)
                ious = [box_iou(box, g[2:]) for g in truth]
                if ious and max(ious) > attrs["overlap_threshold"]:
                    j = int(np.argmax(ious))
                    if attrs["evaluate_difficult"] or not truth[j][1]:
                        flags.setdefault(c, []).append((d[1], not used[j]))
                        used[j] = True
                else:
                    flags.setdefault(c, []).append((d[1], False))
    aps = []
    for c, n_pos in sorted(npos.items()):
        hits = [h for _, h in sorted(flags.get(c, []), key=lambda f: -f[0])]
        tp = np.cumsum(hits)
        precision = tp / np.arange(1, len(hits) + 1)
        recall = tp / n_pos
        if attrs["ap_type"] == "11point":
            aps.append(np.mean([max([p for p, r in zip(precision, recall) if r >= t], default=0)
                                for t in np.arange(11) / 10]))
        else:
            aps.append(np.sum(precision * np.diff(np.concatenate([[0], recall]))))
    return {"MAP": np.array([np.mean(aps)], "float32"),
            "AccumPosCount": np.array([[npos.get(c, 0)] for c in range(attrs["class_num"])],
                                      "int32")}


MAP_CASE = dict(inputs={"DetectRes": DETS, "Label": GTS},
                lod={"DetectRes": [DET_OFFS], "Label": [GT_OFFS]}, ref=detection_map_ref,
                outputs=["MAP", "AccumPosCount", "AccumTruePos", "AccumFalsePos"])
CASES += [
    OpCase("detection_map", **MAP_CASE, attrs={"class_num": 4, "overlap_threshold": 0.5,
                                               "evaluate_difficult": True, "ap_type": "integral"}),
    OpCase("detection_map", **MAP_CASE, attrs={"class_num": 4, "overlap_threshold": 0.5,
                                               "evaluate_difficult": False,
                                               "ap_type": "integral"},
           id="detection_map_skip_difficult"),
    OpCase("detection_map", **MAP_CASE, attrs={"class_num": 4, "overlap_threshold": 0.3,
                                               "evaluate_difficult": True, "ap_type": "11point"},
           id="detection_map_11point"),
]

# ----------------------------------------------------------------------------- RetinaNet


def retinanet_output_ref(BBoxes, Scores, Anchors, ImInfo, attrs):
    rows = []
    for i in range(len(ImInfo)):
        im_h, im_w, scale = ImInfo[i]
        h, w = np.round(im_h / scale), np.round(im_w / scale)
        per_class = {}
        for lvl, (b, s, a) in enumerate(zip(BBoxes, Scores, Anchors)):
            thr = attrs["score_threshold"] if lvl < len(Scores) - 1 else 0.0
            flat = s[i].reshape(-1)
            order = [j for j in np.argsort(-flat, kind="stable") if flat[j] > thr]
            for j in order[:attrs["nms_top_k"]]:
                k, c = divmod(j, s.shape[2])
                aw, ah = a[k, 2] - a[k, 0] + 1, a[k, 3] - a[k, 1] + 1
                cx = b[i, k, 0] * aw + a[k, 0] + aw / 2
                cy = b[i, k, 1] * ah + a[k, 1] + ah / 2
                bw, bh = np.exp(b[i, k, 2]) * aw, np.exp(b[i, k, 3]) * ah
                box = np.array([cx - bw / 2, cy - bh / 2, cx + bw / 2 - 1, cy + bh / 2 - 1])
                box = np.clip(box / scale, 0, [w - 1, h - 1, w - 1, h - 1])
                per_class.setdefault(c, []).append((flat[j], box))
        dets = []
        for c in sorted(per_class):
            bs = np.array([p[1] for p in per_class[c]])
            ss = np.array([p[0] for p in per_class[c]])
            dets += [(ss[k], c, bs[k]) for k in nms_pixels(bs, ss, attrs["nms_threshold"])]
        dets = sorted(dets, key=lambda d: -d[0])[:attrs["keep_top_k"]]
        rows += [[c + 1, sc, *b] for sc, c, b in dets]
    return {"Out": np.array(rows).reshape(-1, 6)}


CASES += [
    OpCase("retinanet_detection_output",
           {"BBoxes": [rand(2, 20, 4, low=-0.3, high=0.3, seed=33, dtype="float32"),
                       rand(2, 5, 4, low=-0.3, high=0.3, seed=34, dtype="float32")],
            "Scores": [rand(2, 20, 3, low=0, high=1, seed=35, dtype="float32"),
                       rand(2, 5, 3, low=0, high=1, seed=36, dtype="float32")],
            "Anchors": [anchor_grid(4, 5, [16], 8).reshape(-1, 4),
                        anchor_grid(1, 5, [32], 8).reshape(-1, 4)],
            "ImInfo": np.array([[32, 40, 1.0], [64, 80, 2.0]], "float32")},
           attrs={"score_threshold": 0.5, "nms_top_k": 12, "keep_top_k": 15,
                  "nms_threshold": 0.4, "nms_eta": 1.0},
           ref=retinanet_output_ref, rtol=1e-4, atol=1e-4),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_op(case):
    check_op(case)
