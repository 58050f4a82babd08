"""Op table: the detection family (prior boxes, anchors, box coding, IoU, clipping, matching,
target assignment, hard-example mining, non-maximum suppression, ROI ops). References are
numpy loops written from Fluid 1.6's operator definitions."""

import math

import numpy as np
import pytest

from parafluid.testing import OpCase, check_op, rand

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


def iou(a, b, normalized=True):
    pixel = 0.0 if normalized else 1.0
    iw = max(min(a[2], b[2]) - max(a[0], b[0]) + pixel, 0)
    ih = max(min(a[3], b[3]) - max(a[1], b[1]) + pixel, 0)
    inter = iw * ih
    area = (a[2] - a[0] + pixel) * (a[3] - a[1] + pixel) + (b[2] - b[0] + pixel) * \
        (b[3] - b[1] + pixel)
    return inter / (area - inter)


def iou_ref(X, Y, attrs):
    return {"Out": np.array([[iou(a, b, attrs["box_normalized"]) for b in Y] for a in X])}


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
        if all(iou(boxes[i], boxes[k], attrs["normalized"]) <= thr for k in kept):
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

# ----------------------------------------------------------------------------- ROI ops


def _c_round(v):
    return np.sign(v) * np.floor(np.abs(v) + 0.5)


ROI_IMAGES = [0, 0, 1]  # the LoD [[0, 2, 3]]: two ROIs on image 0, one on image 1


def roi_pool_ref(X, ROIs, attrs):
    s, ph, pw = attrs["spatial_scale"], attrs["pooled_height"], attrs["pooled_width"]
    h, w = X.shape[2:]
    out = np.zeros((len(ROIs), X.shape[1], ph, pw))
    for r, roi in enumerate(ROIs):
        x0, y0, x1, y1 = (int(_c_round(v * s)) for v in roi)
        bh, bw = max(y1 - y0 + 1, 1) / ph, max(x1 - x0 + 1, 1) / pw
        for i in range(ph):
            for j in range(pw):
                hs = min(max(int(np.floor(i * bh)) + y0, 0), h)
                he = min(max(int(np.ceil((i + 1) * bh)) + y0, 0), h)
                ws = min(max(int(np.floor(j * bw)) + x0, 0), w)
                we = min(max(int(np.ceil((j + 1) * bw)) + x0, 0), w)
                if he > hs and we > ws:
                    out[r, :, i, j] = X[ROI_IMAGES[r], :, hs:he, ws:we].max(axis=(1, 2))
    return {"Out": out}


def _bilinear(img, y, x):
    h, w = img.shape[1:]
    if y < -1 or y > h or x < -1 or x > w:
        return 0
    y, x = max(y, 0), max(x, 0)
    yl, xl = int(y), int(x)
    yh, xh = min(yl + 1, h - 1), min(xl + 1, w - 1)
    if yl >= h - 1:
        yl = yh = h - 1
        y = yl
    if xl >= w - 1:
        xl = xh = w - 1
        x = xl
    ly, lx = y - yl, x - xl
    return ((1 - ly) * (1 - lx) * img[:, yl, xl] + (1 - ly) * lx * img[:, yl, xh] +
            ly * (1 - lx) * img[:, yh, xl] + ly * lx * img[:, yh, xh])


def roi_align_ref(X, ROIs, attrs):
    s, ph, pw, sr = (attrs["spatial_scale"], attrs["pooled_height"], attrs["pooled_width"],
                     attrs["sampling_ratio"])
    out = np.zeros((len(ROIs), X.shape[1], ph, pw))
    for r, roi in enumerate(ROIs):
        x0, y0, x1, y1 = roi * s
        rw, rh = max(x1 - x0, 1), max(y1 - y0, 1)
        gh = sr if sr > 0 else int(np.ceil(rh / ph))
        gw = sr if sr > 0 else int(np.ceil(rw / pw))
        for i in range(ph):
            for j in range(pw):
                acc = 0
                for a in range(gh):
                    for b in range(gw):
                        y = y0 + i * rh / ph + (a + 0.5) * rh / ph / gh
                        x = x0 + j * rw / pw + (b + 0.5) * rw / pw / gw
                        acc = acc + _bilinear(X[ROI_IMAGES[r]], y, x)
                out[r, :, i, j] = acc / (gh * gw)
    return {"Out": out}


def psroi_ref(X, ROIs, attrs):
    s, oc, ph, pw = (attrs["spatial_scale"], attrs["output_channels"], attrs["pooled_height"],
                     attrs["pooled_width"])
    h, w = X.shape[2:]
    out = np.zeros((len(ROIs), oc, ph, pw))
    for r, roi in enumerate(ROIs):
        x0, y0 = _c_round(roi[0]) * s, _c_round(roi[1]) * s
        x1, y1 = (_c_round(roi[2]) + 1) * s, (_c_round(roi[3]) + 1) * s
        bh, bw = max(y1 - y0, 0.1) / ph, max(x1 - x0, 0.1) / pw
        for c in range(oc):
            for i in range(ph):
                for j in range(pw):
                    hs = min(max(int(np.floor(bh * i + y0)), 0), h)
                    he = min(max(int(np.ceil(bh * (i + 1) + y0)), 0), h)
                    ws = min(max(int(np.floor(bw * j + x0)), 0), w)
                    we = min(max(int(np.ceil(bw * (j + 1) + x0)), 0), w)
                    if he > hs and we > ws:
                        out[r, c, i, j] = X[ROI_IMAGES[r], (c * ph + i) * pw + j, hs:he,
                                            ws:we].mean()
    return {"Out": out}


# ROIs in input pixels; spatial_scale 0.5 maps them onto a 5 x 6 map (two reach past it)
ROIS = np.array([[1.0, 2.0, 9.0, 7.0], [4.5, 0.0, 11.0, 9.0], [-2.0, 3.0, 6.0, 12.0]],
                "float32")
ROI_X = rand(2, 2, 5, 6, seed=14, dtype="float32")
PS_X = rand(2, 2 * 1 * 2, 5, 6, seed=15, dtype="float32")

CASES += [
    OpCase("roi_pool", {"X": ROI_X, "ROIs": ROIS}, lod={"ROIs": [[0, 2, 3]]},
           attrs={"spatial_scale": 0.5, "pooled_height": 2, "pooled_width": 3},
           ref=roi_pool_ref, grad=["X"], grad_outputs=["Out"]),
    OpCase("roi_align", {"X": ROI_X, "ROIs": ROIS}, lod={"ROIs": [[0, 2, 3]]},
           attrs={"spatial_scale": 0.5, "pooled_height": 2, "pooled_width": 3,
                  "sampling_ratio": -1}, ref=roi_align_ref, grad=["X"]),
    OpCase("roi_align", {"X": ROI_X, "ROIs": ROIS}, lod={"ROIs": [[0, 2, 3]]},
           attrs={"spatial_scale": 0.5, "pooled_height": 3, "pooled_width": 2,
                  "sampling_ratio": 2}, ref=roi_align_ref, grad=["X"],
           id="roi_align_sampling_ratio"),
    OpCase("psroi_pool", {"X": PS_X, "ROIs": ROIS}, lod={"ROIs": [[0, 2, 3]]},
           attrs={"spatial_scale": 0.5, "output_channels": 2, "pooled_height": 1,
                  "pooled_width": 2}, ref=psroi_ref, grad=["X"]),
]

# ----------------------------------------------------------------------------- YOLOv3


def _sigmoid(v):
    return 1 / (1 + np.exp(-v))


def yolo_box_ref(X, ImgSize, attrs):
    anchors = np.array(attrs["anchors"]).reshape(-1, 2)
    n, _, h, w = X.shape
    c = attrs["class_num"]
    v = X.reshape(n, len(anchors), 5 + c, h, w)
    boxes = np.zeros((n, len(anchors), h, w, 4))
    scores = np.zeros((n, len(anchors), h, w, c))
    for i in range(n):
        img_h, img_w = ImgSize[i]
        for a, (aw, ah) in enumerate(anchors):
            for k in range(h):
                for j in range(w):
                    t = v[i, a, :, k, j]
                    conf = _sigmoid(t[4])
                    if conf < attrs["conf_thresh"]:
                        continue
                    cx = (j + _sigmoid(t[0])) * img_w / h
                    cy = (k + _sigmoid(t[1])) * img_h / h
                    bw = np.exp(t[2]) * aw * img_w / (attrs["downsample_ratio"] * h)
                    bh = np.exp(t[3]) * ah * img_h / (attrs["downsample_ratio"] * h)
                    boxes[i, a, k, j] = [max(cx - bw / 2, 0), max(cy - bh / 2, 0),
                                         min(cx + bw / 2, img_w - 1), min(cy + bh / 2, img_h - 1)]
                    scores[i, a, k, j] = conf * _sigmoid(t[5:])
    return {"Boxes": boxes.reshape(n, -1, 4), "Scores": scores.reshape(n, -1, c)}


def _sce(x, label):
    return max(x, 0) - x * label + np.log(1 + np.exp(-abs(x)))


def _cs_iou(a, b):
    iw = min(a[0] + a[2] / 2, b[0] + b[2] / 2) - max(a[0] - a[2] / 2, b[0] - b[2] / 2)
    ih = min(a[1] + a[3] / 2, b[1] + b[3] / 2) - max(a[1] - a[3] / 2, b[1] - b[3] / 2)
    inter = 0 if iw < 0 or ih < 0 else iw * ih
    return inter / (a[2] * a[3] + b[2] * b[3] - inter)


def yolov3_loss_ref(X, GTBox, GTLabel, attrs, GTScore=None):
    anchors = np.array(attrs["anchors"]).reshape(-1, 2)
    mask, c = attrs["anchor_mask"], attrs["class_num"]
    n, _, h, w = X.shape
    size = attrs["downsample_ratio"] * h
    v = X.reshape(n, len(mask), 5 + c, h, w)
    score = np.ones(GTLabel.shape) if GTScore is None else GTScore
    pos, neg = (1 - min(1 / c, 1 / 40), min(1 / c, 1 / 40)) if attrs["use_label_smooth"] \
        else (1, 0)
    loss = np.zeros(n)
    obj = np.zeros((n, len(mask), h, w))
    match = -np.ones(GTLabel.shape, "int32")
    for i in range(n):
        for j, a in enumerate(mask):
            for k in range(h):
                for l_ in range(w):
                    t = v[i, j, :, k, l_]
                    pred = ((l_ + _sigmoid(t[0])) / h, (k + _sigmoid(t[1])) / h,
                            np.exp(t[2]) * anchors[a, 0] / size,
                            np.exp(t[3]) * anchors[a, 1] / size)
                    ious = [_cs_iou(pred, g) for g in GTBox[i] if g[2] >= 1e-6 and g[3] >= 1e-6]
                    if max(ious, default=0) > attrs["ignore_thresh"]:
                        obj[i, j, k, l_] = -1
        for t, g in enumerate(GTBox[i]):
            if g[2] < 1e-6 or g[3] < 1e-6:
                continue
            shape_ious = [_cs_iou((0, 0, aw / size, ah / size), (0, 0, g[2], g[3]))
                          for aw, ah in anchors]
            best = int(np.argmax(shape_ious))
            if best not in mask:
                continue
            j = mask.index(best)
            match[i, t] = j
            gi, gj = int(g[0] * w), int(g[1] * h)
            cell = v[i, j, :, gj, gi]
            scale = (2 - g[2] * g[3]) * score[i, t]
            loss[i] += (_sce(cell[0], g[0] * w - gi) + _sce(cell[1], g[1] * h - gj)) * scale
            loss[i] += abs(cell[2] - np.log(g[2] * size / anchors[best, 0])) * scale
            loss[i] += abs(cell[3] - np.log(g[3] * size / anchors[best, 1])) * scale
            obj[i, j, gj, gi] = score[i, t]
            loss[i] += sum(_sce(cell[5 + q], pos if q == GTLabel[i, t] else neg) * score[i, t]
                           for q in range(c))
        for j in range(len(mask)):
            for k in range(h):
                for l_ in range(w):
                    o, x = obj[i, j, k, l_], v[i, j, 4, k, l_]
                    if o > 1e-5:
                        loss[i] += _sce(x, 1) * o
                    elif o > -0.5:
                        loss[i] += _sce(x, 0)
    return {"Loss": loss, "ObjectnessMask": obj, "GTMatchMask": match}


YOLO_ANCHORS = [10, 13, 16, 30, 33, 23, 30, 61, 62, 45]
YOLO_X = rand(2, 2 * (5 + 3), 4, 4, seed=16, dtype="float32")
# center x, y, w, h (normalized); a zero-size row is padding; one box goes to an anchor outside
# the mask; a large box overlaps predictions past ignore_thresh
GT_BOX = np.array([[[0.3, 0.4, 0.2, 0.3], [0.7, 0.6, 0.5, 0.45], [0, 0, 0, 0]],
                   [[0.55, 0.2, 0.1, 0.15], [0.2, 0.8, 0.9, 0.9], [0.6, 0.6, 0.25, 0.2]]],
                  "float32")
GT_LABEL = np.array([[0, 2, 0], [1, 1, 2]], "int32")

CASES += [
    OpCase("yolo_box", {"X": rand(2, 2 * (5 + 3), 3, 3, seed=17, dtype="float32"),
                        "ImgSize": np.array([[96, 120], [64, 64]], "int32")},
           attrs={"anchors": [10, 13, 16, 30], "class_num": 3, "conf_thresh": 0.45,
                  "downsample_ratio": 32}, ref=yolo_box_ref, rtol=1e-4, atol=1e-4),
    OpCase("yolov3_loss", {"X": YOLO_X, "GTBox": GT_BOX, "GTLabel": GT_LABEL},
           attrs={"anchors": YOLO_ANCHORS, "anchor_mask": [1, 2], "class_num": 3,
                  "ignore_thresh": 0.3, "downsample_ratio": 8, "use_label_smooth": True},
           ref=yolov3_loss_ref, rtol=1e-4, atol=1e-4, grad=["X"], grad_outputs=["Loss"]),
    OpCase("yolov3_loss", {"X": YOLO_X, "GTBox": GT_BOX, "GTLabel": GT_LABEL,
                           "GTScore": rand(2, 3, low=0.3, high=1, seed=18, dtype="float32")},
           attrs={"anchors": YOLO_ANCHORS, "anchor_mask": [0, 1], "class_num": 3,
                  "ignore_thresh": 0.5, "downsample_ratio": 8, "use_label_smooth": False},
           ref=yolov3_loss_ref, rtol=1e-4, atol=1e-4, grad=["X"], grad_outputs=["Loss"],
           id="yolov3_loss_gt_score"),
]

# ----------------------------------------------------------------------------- the others


def decode_assign_ref(PriorBox, PriorBoxVar, TargetBox, BoxScore, attrs):
    r, c = BoxScore.shape
    out = np.zeros((r, c, 4))
    assign = np.zeros((r, 4))
    v = PriorBoxVar.reshape(-1)
    for i in range(r):
        p = PriorBox[i]
        pw, ph = p[2] - p[0] + 1, p[3] - p[1] + 1
        pcx, pcy = (p[2] + p[0]) / 2, (p[3] + p[1]) / 2
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
                ious = [iou(box, g[2:]) for g in truth]
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

# ----------------------------------------------------------------------------- proposals


def _nms_pixels(boxes, scores, thr):
    kept = []
    for i in np.argsort(-scores, kind="stable"):
        if all(iou(boxes[i], boxes[k], normalized=False) <= thr for k in kept):
            kept.append(i)
    return kept


def proposals_ref(Scores, BboxDeltas, ImInfo, Anchors, Variances, attrs):
    rois, probs = [], []
    a = Anchors.reshape(-1, 4)
    v = Variances.reshape(-1, 4)
    for i in range(len(Scores)):
        s = Scores[i].transpose(1, 2, 0).reshape(-1)
        d = BboxDeltas[i].transpose(1, 2, 0).reshape(-1, 4)
        order = np.argsort(-s, kind="stable")[:attrs["pre_nms_topN"]]
        im_h, im_w, scale = ImInfo[i]
        cand = []
        for j in order:
            w, h = a[j, 2] - a[j, 0] + 1, a[j, 3] - a[j, 1] + 1
            cx = a[j, 0] + w / 2 + v[j, 0] * d[j, 0] * w
            cy = a[j, 1] + h / 2 + v[j, 1] * d[j, 1] * h
            bw = np.exp(min(v[j, 2] * d[j, 2], np.log(1000 / 16))) * w
            bh = np.exp(min(v[j, 3] * d[j, 3], np.log(1000 / 16))) * h
            b = np.array([cx - bw / 2, cy - bh / 2, cx + bw / 2 - 1, cy + bh / 2 - 1])
            b[0::2] = np.clip(b[0::2], 0, im_w - 1)
            b[1::2] = np.clip(b[1::2], 0, im_h - 1)
            ms = max(attrs["min_size"], 1)
            if ((b[2] - b[0]) / scale + 1 >= ms and (b[3] - b[1]) / scale + 1 >= ms and
                    b[0] + (b[2] - b[0] + 1) / 2 <= im_w and b[1] + (b[3] - b[1] + 1) / 2 <= im_h):
                cand.append((b, s[j]))
        boxes_i = np.array([c[0] for c in cand]).reshape(-1, 4)
        scores_i = np.array([c[1] for c in cand])
        kept = _nms_pixels(boxes_i, scores_i, attrs["nms_thresh"])[:attrs["post_nms_topN"]]
        rois.append(boxes_i[kept])
        probs.append(scores_i[kept].reshape(-1, 1))
    return {"RpnRois": np.concatenate(rois), "RpnRoiProbs": np.concatenate(probs)}


def _anchor_grid(h, w, sizes, stride):
    out = np.zeros((h, w, len(sizes), 4), "float32")
    for y in range(h):
        for x in range(w):
            for k, sz in enumerate(sizes):
                cx, cy = (x + 0.5) * stride, (y + 0.5) * stride
                out[y, x, k] = [cx - sz / 2, cy - sz / 2, cx + sz / 2, cy + sz / 2]
    return out


FPN_ROIS = np.array([[0, 0, 20, 20], [10, 10, 200, 150], [0, 0, 60, 80], [5, 5, 500, 400],
                     [30, 30, 33, 34], [0, 0, 111, 111], [2, 2, 230, 220]], "float32")
FPN_OFFS = [0, 4, 7]


def distribute_ref(FpnRois, attrs):
    lv = [min(attrs["max_level"], max(attrs["min_level"], int(np.floor(np.log2(np.sqrt(
        (r[2] - r[0] + 1) * (r[3] - r[1] + 1)) / attrs["refer_scale"] + 1e-6) +
        attrs["refer_level"])))) for r in FpnRois]
    outs, order = [], []
    for level in range(attrs["min_level"], attrs["max_level"] + 1):
        rows = [i for i in range(len(FpnRois)) if lv[i] == level]  # image order is row order
        outs.append(FpnRois[rows].reshape(-1, 4))
        order += rows
    restore = np.argsort(order).astype("int32").reshape(-1, 1)
    return {"MultiFpnRois": outs, "RestoreIndex": restore}


def collect_ref(MultiLevelRois, MultiLevelScores, attrs, offs=((0, 2, 3), (0, 1, 3))):
    entries = []
    for rois, scores, o in zip(MultiLevelRois, MultiLevelScores, offs):
        for img in range(2):
            entries += [(scores[r, 0], img, rois[r]) for r in range(o[img], o[img + 1])]
    entries = sorted(entries, key=lambda e: -e[0])[:attrs["post_nms_topN"]]
    entries = sorted(entries, key=lambda e: e[1])
    return {"FpnRois": np.array([e[2] for e in entries])}


RPN_H, RPN_W, RPN_A = 4, 5, 3
CASES += [
    OpCase("generate_proposals",
           {"Scores": rand(2, RPN_A, RPN_H, RPN_W, low=0, high=1, seed=24, dtype="float32"),
            "BboxDeltas": rand(2, 4 * RPN_A, RPN_H, RPN_W, low=-0.5, high=0.5, seed=25,
                               dtype="float32"),
            "ImInfo": np.array([[64, 80, 1.0], [50, 70, 2.0]], "float32"),
            "Anchors": _anchor_grid(RPN_H, RPN_W, [8, 16, 32], 16),
            "Variances": np.full((RPN_H, RPN_W, RPN_A, 4), 1.0, "float32")},
           attrs={"pre_nms_topN": 40, "post_nms_topN": 12, "nms_thresh": 0.5,
                  "min_size": 6.0, "eta": 1.0}, ref=proposals_ref, rtol=1e-4, atol=1e-3),
    OpCase("distribute_fpn_proposals", {"FpnRois": FPN_ROIS}, lod={"FpnRois": [FPN_OFFS]},
           attrs={"min_level": 2, "max_level": 5, "refer_level": 4, "refer_scale": 224},
           out_counts={"MultiFpnRois": 4}, ref=distribute_ref),
    OpCase("collect_fpn_proposals",
           {"MultiLevelRois": [FPN_ROIS[:3], FPN_ROIS[3:6]],
            "MultiLevelScores": [np.array([[0.9], [0.2], [0.5]], "float32"),
                                 np.array([[0.7], [0.95], [0.1]], "float32")]},
           lod={"MultiLevelRois": [[[0, 2, 3]], [[0, 1, 3]]],
                "MultiLevelScores": [[[0, 2, 3]], [[0, 1, 3]]]},
           attrs={"post_nms_topN": 4}, ref=collect_ref),
]

# ----------------------------------------------------------------------------- rpn_target_assign

RPN_ANCHORS = _anchor_grid(4, 4, [12, 24], 8).reshape(-1, 4)  # 32 anchors on a 32 x 32 image
RPN_GT = np.array([[2, 2, 13, 12], [16, 14, 30, 31], [0, 0, 31, 31], [3, 18, 12, 28]],
                  "float32") / 2  # image scale 2: the boxes are given at half size
RPN_CROWD = np.array([[0], [0], [1], [0]], "int32")  # the third box is a crowd


def rpn_target_ref(Anchor, GtBoxes, IsCrowd, ImInfo, attrs, offs=(0, 2, 4)):
    """First-k sampling (use_random=False), written from Fluid's description."""
    out = {k: [] for k in ("LocationIndex", "ScoreIndex", "TargetLabel", "TargetBBox",
                           "BBoxInsideWeight")}
    n_anchor = len(Anchor)
    for i in range(len(ImInfo)):
        h, w, scale = ImInfo[i]
        t = attrs["rpn_straddle_thresh"]
        inside = [a for a in range(n_anchor)
                  if t < 0 or (Anchor[a, 0] >= -t and Anchor[a, 1] >= -t and
                               Anchor[a, 2] < w + t and Anchor[a, 3] < h + t)]
        gts = [g * scale for g, c in zip(GtBoxes[offs[i]:offs[i + 1]],
                                         IsCrowd[offs[i]:offs[i + 1], 0]) if c == 0]
        ov = np.array([[iou(Anchor[a], g, normalized=False) for g in gts] for a in inside])
        best = ov.max(1)
        fg = [k for k in range(len(inside))
              if best[k] >= attrs["rpn_positive_overlap"] or
              any(abs(ov[k, j] - ov[:, j].max()) < 1e-5 for j in range(len(gts)))]
        fg = fg[:int(attrs["rpn_fg_fraction"] * attrs["rpn_batch_size_per_im"])]
        bg = [k for k in range(len(inside)) if best[k] < attrs["rpn_negative_overlap"]]
        bg = bg[:attrs["rpn_batch_size_per_im"] - len(fg)]
        both = [k for k in bg if k in fg]
        fg_final = [k for k in fg if k not in bg]
        loc = [fg[0]] * len(both) + fg_final
        out["LocationIndex"] += [inside[k] + i * n_anchor for k in loc]
        out["ScoreIndex"] += [inside[k] + i * n_anchor for k in sorted(fg_final) + sorted(bg)]
        out["TargetLabel"] += [1] * len(fg_final) + [0] * len(bg)
        out["BBoxInsideWeight"] += [[0] * 4] * len(both) + [[1] * 4] * len(fg_final)
        for k in loc:
            a, g = Anchor[inside[k]], gts[int(np.argmax(ov[k]))]
            aw, ah, gw, gh = a[2] - a[0] + 1, a[3] - a[1] + 1, g[2] - g[0] + 1, g[3] - g[1] + 1
            out["TargetBBox"].append([(g[0] + gw / 2 - a[0] - aw / 2) / aw,
                                      (g[1] + gh / 2 - a[1] - ah / 2) / ah,
                                      np.log(gw / aw), np.log(gh / ah)])
    return {"LocationIndex": np.array(out["LocationIndex"], "int32"),
            "ScoreIndex": np.array(out["ScoreIndex"], "int32"),
            "TargetLabel": np.array(out["TargetLabel"], "int32").reshape(-1, 1),
            "TargetBBox": np.array(out["TargetBBox"]).reshape(-1, 4),
            "BBoxInsideWeight": np.array(out["BBoxInsideWeight"], "float32").reshape(-1, 4)}


CASES += [
    OpCase("rpn_target_assign",
           {"Anchor": RPN_ANCHORS, "GtBoxes": RPN_GT, "IsCrowd": RPN_CROWD,
            "ImInfo": np.array([[32, 32, 2.0], [32, 24, 2.0]], "float32")},
           lod={"GtBoxes": [[0, 2, 4]], "IsCrowd": [[0, 2, 4]]},
           attrs={"rpn_batch_size_per_im": 12, "rpn_straddle_thresh": 0.0,
                  "rpn_positive_overlap": 0.5, "rpn_negative_overlap": 0.2,
                  "rpn_fg_fraction": 0.25, "use_random": False},
           ref=rpn_target_ref, rtol=1e-4, atol=1e-5),
    OpCase("rpn_target_assign",  # all anchors; best anchors under the negative overlap
           {"Anchor": RPN_ANCHORS, "GtBoxes": RPN_GT, "IsCrowd": RPN_CROWD,
            "ImInfo": np.array([[32, 32, 2.0], [32, 24, 2.0]], "float32")},
           lod={"GtBoxes": [[0, 2, 4]], "IsCrowd": [[0, 2, 4]]},
           attrs={"rpn_batch_size_per_im": 20, "rpn_straddle_thresh": -1.0,
                  "rpn_positive_overlap": 0.6, "rpn_negative_overlap": 0.45,
                  "rpn_fg_fraction": 0.5, "use_random": False},
           ref=rpn_target_ref, rtol=1e-4, atol=1e-5, id="rpn_target_assign_all_anchors"),
]

# ----------------------------------------------------------------------------- deformable_conv


def _dcn_bilinear(img, y, x):
    h, w = img.shape
    if not (-1 < y < h and -1 < x < w):
        return 0.0
    y0, x0 = int(np.floor(y)), int(np.floor(x))
    total = 0.0
    for yy, xx in ((y0, x0), (y0, x0 + 1), (y0 + 1, x0), (y0 + 1, x0 + 1)):
        if 0 <= yy < h and 0 <= xx < w:
            total += (1 - abs(y - yy)) * (1 - abs(x - xx)) * img[yy, xx]
    return total


def deformable_conv_ref(Input, Offset, Filter, attrs, Mask=None):
    n, c, h, w = Input.shape
    o, cg, kh, kw = Filter.shape
    (sh, sw), (ph, pw), (dh, dw) = attrs["strides"], attrs["paddings"], attrs["dilations"]
    g, dg = attrs["groups"], attrs["deformable_groups"]
    ho, wo = Offset.shape[2:]
    out = np.zeros((n, o, ho, wo))
    for b in range(n):
        for oc in range(o):
            grp = oc // (o // g)
            for y in range(ho):
                for x in range(wo):
                    acc = 0.0
                    for ci in range(cg):
                        ch = grp * cg + ci
                        d = ch // (c // dg)
                        for i in range(kh):
                            for j in range(kw):
                                k = i * kw + j
                                py = y * sh - ph + i * dh + Offset[b, 2 * (d * kh * kw + k), y, x]
                                px = x * sw - pw + j * dw + Offset[b, 2 * (d * kh * kw + k) + 1,
                                                                   y, x]
                                v = _dcn_bilinear(Input[b, ch], py, px)
                                if Mask is not None:
                                    v *= Mask[b, d * kh * kw + k, y, x]
                                acc += Filter[oc, ci, i, j] * v
                    out[b, oc, y, x] = acc
    return {"Output": out}


# offsets kept off the integers (the bilinear kinks) so finite differences are smooth
DCN_OFFSET = np.round(rand(1, 2 * 2 * 4, 2, 2, low=-1.4, high=1.4, seed=26), 1) + 0.037
DCN_ATTRS = {"strides": [1, 1], "paddings": [0, 0], "dilations": [2, 2], "groups": 2,
             "deformable_groups": 2, "im2col_step": 1}

CASES += [
    OpCase("deformable_conv", {"Input": rand(1, 4, 4, 4, seed=27), "Offset": DCN_OFFSET,
                               "Mask": rand(1, 2 * 4, 2, 2, low=0, high=1, seed=28),
                               "Filter": rand(2, 2, 2, 2, seed=29)},
           attrs=DCN_ATTRS, ref=deformable_conv_ref,
           grad=["Input", "Offset", "Mask", "Filter"], grad_rtol=1e-3),
    OpCase("deformable_conv_v1", {"Input": rand(1, 2, 4, 5, seed=30),
                                  "Offset": np.round(rand(1, 2 * 4, 3, 2, low=-1.4, high=1.4,
                                                          seed=31), 1) + 0.041,
                                  "Filter": rand(3, 2, 2, 2, seed=32)},
           attrs={**DCN_ATTRS, "strides": [1, 2], "dilations": [1, 1], "groups": 1,
                  "deformable_groups": 1}, ref=deformable_conv_ref,
           grad=["Input", "Offset", "Filter"], grad_rtol=1e-3),
]

def proposal_labels_ref(RpnRois, GtClasses, IsCrowd, GtBoxes, ImInfo, attrs,
                        roi_offs=(0, 5, 8), gt_offs=(0, 2, 4)):
    outs = [[], [], [], []]
    ncls = 2 if attrs["is_cls_agnostic"] else attrs["class_nums"]
    for i in range(len(ImInfo)):
        gt = GtBoxes[gt_offs[i]:gt_offs[i + 1]]
        cls = GtClasses[gt_offs[i]:gt_offs[i + 1], 0]
        crowd = IsCrowd[gt_offs[i]:gt_offs[i + 1], 0]
        scale = ImInfo[i, 2]
        boxes = np.concatenate([gt, RpnRois[roi_offs[i]:roi_offs[i + 1]] / scale])
        fg, bg = [], []
        for b in range(len(boxes)):
            ov = [iou(boxes[b], g, normalized=False) for g in gt]
            best = -1 if b < len(gt) and crowd[b] else max(ov)
            if best > attrs["fg_thresh"]:
                fg.append((b, int(np.argmax(ov))))
            elif attrs["bg_thresh_lo"] <= best < attrs["bg_thresh_hi"]:
                bg.append(b)
        fg = fg[:int(attrs["batch_size_per_im"] * attrs["fg_fraction"])]
        bg = bg[:attrs["batch_size_per_im"] - len(fg)]
        for b, j in fg:
            a, g = boxes[b], gt[j]
            aw, ah, gw, gh = a[2] - a[0] + 1, a[3] - a[1] + 1, g[2] - g[0] + 1, g[3] - g[1] + 1
            d = np.array([(g[0] + gw / 2 - a[0] - aw / 2) / aw,
                          (g[1] + gh / 2 - a[1] - ah / 2) / ah,
                          np.log(gw / aw), np.log(gh / ah)]) / attrs["bbox_reg_weights"]
            t, w = np.zeros(4 * ncls), np.zeros(4 * ncls)
            col = 4 if attrs["is_cls_agnostic"] else 4 * cls[j]
            t[col:col + 4], w[col:col + 4] = d, 1
            outs[0].append(a * scale)
            outs[1].append(cls[j])
            outs[2].append(t)
            outs[3].append(w)
        for b in bg:
            outs[0].append(boxes[b] * scale)
            outs[1].append(0)
            outs[2].append(np.zeros(4 * ncls))
            outs[3].append(np.zeros(4 * ncls))
    return {"Rois": np.array(outs[0]), "LabelsInt32": np.array(outs[1], "int32").reshape(-1, 1),
            "BboxTargets": np.array(outs[2]), "BboxInsideWeights": np.array(outs[3]),
            "BboxOutsideWeights": np.array(outs[3])}


PL_INPUTS = {"RpnRois": np.array([[2, 2, 26, 24], [40, 40, 60, 62], [0, 0, 10, 10],
                                  [30, 28, 62, 64], [4, 30, 24, 60],
                                  [10, 10, 30, 30], [0, 0, 5, 60], [12, 8, 32, 34]], "float32"),
             "GtClasses": np.array([[3], [1], [2], [2]], "int32"),
             "IsCrowd": np.array([[0], [1], [0], [0]], "int32"),
             "GtBoxes": np.array([[1, 1, 12, 12], [15, 15, 30, 30], [5, 5, 15, 16],
                                  [0, 0, 4, 30]], "float32"),
             "ImInfo": np.array([[64, 64, 2.0], [40, 40, 1.0]], "float32")}
PL_LOD = {"RpnRois": [[0, 5, 8]], "GtClasses": [[0, 2, 4]], "IsCrowd": [[0, 2, 4]],
          "GtBoxes": [[0, 2, 4]]}
PL_ATTRS = {"batch_size_per_im": 5, "fg_fraction": 0.4, "fg_thresh": 0.5, "bg_thresh_hi": 0.5,
            "bg_thresh_lo": 0.0, "bbox_reg_weights": [0.1, 0.1, 0.2, 0.2], "class_nums": 4,
            "use_random": False, "is_cls_agnostic": False, "is_cascade_rcnn": False}
CASES += [
    OpCase("generate_proposal_labels", PL_INPUTS, lod=PL_LOD, attrs=PL_ATTRS,
           ref=proposal_labels_ref, rtol=1e-4, atol=1e-5),
    OpCase("generate_proposal_labels", PL_INPUTS, lod=PL_LOD,
           attrs={**PL_ATTRS, "is_cls_agnostic": True, "fg_thresh": 0.3, "batch_size_per_im": 8},
           ref=proposal_labels_ref, rtol=1e-4, atol=1e-5,
           id="generate_proposal_labels_class_agnostic"),
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
            dets += [(ss[k], c, bs[k]) for k in _nms_pixels(bs, ss, attrs["nms_threshold"])]
        dets = sorted(dets, key=lambda d: -d[0])[:attrs["keep_top_k"]]
        rows += [[c + 1, sc, *b] for sc, c, b in dets]
    return {"Out": np.array(rows).reshape(-1, 6)}


CASES += [
    OpCase("retinanet_detection_output",
           {"BBoxes": [rand(2, 20, 4, low=-0.3, high=0.3, seed=33, dtype="float32"),
                       rand(2, 5, 4, low=-0.3, high=0.3, seed=34, dtype="float32")],
            "Scores": [rand(2, 20, 3, low=0, high=1, seed=35, dtype="float32"),
                       rand(2, 5, 3, low=0, high=1, seed=36, dtype="float32")],
            "Anchors": [_anchor_grid(4, 5, [16], 8).reshape(-1, 4),
                        _anchor_grid(1, 5, [32], 8).reshape(-1, 4)],
            "ImInfo": np.array([[32, 40, 1.0], [64, 80, 2.0]], "float32")},
           attrs={"score_threshold": 0.5, "nms_top_k": 12, "keep_top_k": 15,
                  "nms_threshold": 0.4, "nms_eta": 1.0},
           ref=retinanet_output_ref, rtol=1e-4, atol=1e-4),
]

def retinanet_target_ref(Anchor, GtBoxes, GtLabels, IsCrowd, ImInfo, attrs, offs=(0, 2, 4)):
    out = {k: [] for k in ("loc", "score", "label", "bbox", "fg")}
    n = len(Anchor)
    for i in range(len(ImInfo)):
        keep = [j for j in range(offs[i], offs[i + 1]) if IsCrowd[j, 0] == 0]
        gts = GtBoxes[keep] * ImInfo[i, 2]
        ov = np.array([[iou(a, g, normalized=False) for g in gts] for a in Anchor])
        best, arg = ov.max(1), ov.argmax(1)
        fake = [a for a in range(n) if best[a] >= attrs["positive_overlap"] or
                any(abs(ov[a, j] - ov[:, j].max()) < 1e-5 for j in range(len(gts)))]
        bg = [a for a in range(n) if best[a] < attrs["negative_overlap"]]
        fg = [a for a in fake if a not in bg]
        out["loc"] += [a + i * n for a in fg]
        out["score"] += [a + i * n for a in fg + bg]
        out["label"] += [GtLabels[keep][arg[a], 0] for a in fg] + [0] * len(bg)
        for a in fg:
            e, g = Anchor[a], gts[arg[a]]
            ew, eh, gw, gh = e[2] - e[0] + 1, e[3] - e[1] + 1, g[2] - g[0] + 1, g[3] - g[1] + 1
            out["bbox"].append([(g[0] + gw / 2 - e[0] - ew / 2) / ew,
                                (g[1] + gh / 2 - e[1] - eh / 2) / eh,
                                np.log(gw / ew), np.log(gh / eh)])
        out["fg"].append(len(fake) + 1)
    return {"LocationIndex": np.array(out["loc"], "int32"),
            "ScoreIndex": np.array(out["score"], "int32"),
            "TargetLabel": np.array(out["label"], "int32").reshape(-1, 1),
            "TargetBBox": np.array(out["bbox"]).reshape(-1, 4),
            "BBoxInsideWeight": np.ones((len(out["loc"]), 4)),
            "ForegroundNumber": np.array(out["fg"], "int32").reshape(-1, 1)}


CASES += [
    OpCase("retinanet_target_assign",
           {"Anchor": RPN_ANCHORS, "GtBoxes": RPN_GT,
            "GtLabels": np.array([[3], [1], [2], [5]], "int32"), "IsCrowd": RPN_CROWD,
            "ImInfo": np.array([[32, 32, 2.0], [32, 24, 2.0]], "float32")},
           lod={"GtBoxes": [[0, 2, 4]], "GtLabels": [[0, 2, 4]], "IsCrowd": [[0, 2, 4]]},
           attrs={"positive_overlap": 0.5, "negative_overlap": 0.3},
           ref=retinanet_target_ref, rtol=1e-4, atol=1e-5),
]

# ----------------------------------------------------------------------------- roi_perspective


def _homography(src, dst):
    """The 3x3 projective map taking the 4 points src onto dst (solved directly)."""
    a, b = [], []
    for (u, v), (x, y) in zip(src, dst):
        a.append([u, v, 1, 0, 0, 0, -u * x, -v * x])
        a.append([0, 0, 0, u, v, 1, -u * y, -v * y])
        b += [x, y]
    return np.append(np.linalg.solve(np.array(a, float), np.array(b, float)), 1).reshape(3, 3)


def _inside_convex(x, y, qx, qy):
    signs = [(qx[(i + 1) % 4] - qx[i]) * (y - qy[i]) - (qy[(i + 1) % 4] - qy[i]) * (x - qx[i])
             for i in range(4)]
    return all(v >= -1e-4 for v in signs) or all(v <= 1e-4 for v in signs)


def perspective_ref(X, ROIs, attrs):
    th, tw, s = attrs["transformed_height"], attrs["transformed_width"], attrs["spatial_scale"]
    h, w = X.shape[2:]
    out = np.zeros((len(ROIs), X.shape[1], th, tw))
    for r, roi in enumerate(ROIs):
        qx, qy = roi[0::2] * s, roi[1::2] * s
        side = [np.hypot(qx[i] - qx[(i + 1) % 4], qy[i] - qy[(i + 1) % 4]) for i in range(4)]
        nw = min(int(np.floor((side[0] + side[2]) / (side[1] + side[3]) * (th - 1) + 0.5)) + 1,
                 tw)
        m = _homography([(0, 0), (nw - 1, 0), (nw - 1, th - 1), (0, th - 1)],
                        list(zip(qx, qy)))
        for oh in range(th):
            for ow in range(tw):
                u, v, d = m @ [ow, oh, 1]
                x, y = u / d, v / d
                if not _inside_convex(x, y, qx, qy) or not (-0.5 <= x <= w - 0.5 and
                                                           -0.5 <= y <= h - 0.5):
                    continue
                x, y = max(x, 0), max(y, 0)
                x0, y0 = min(int(np.floor(x)), w - 1), min(int(np.floor(y)), h - 1)
                x, y = min(x, w - 1), min(y, h - 1)
                x1, y1 = min(x0 + 1, w - 1), min(y0 + 1, h - 1)
                lx, ly = x - x0, y - y0
                out[r, :, oh, ow] = ((1 - lx) * (1 - ly) * X[ROI_IMAGES[r], :, y0, x0] +
                                     lx * (1 - ly) * X[ROI_IMAGES[r], :, y0, x1] +
                                     (1 - lx) * ly * X[ROI_IMAGES[r], :, y1, x0] +
                                     lx * ly * X[ROI_IMAGES[r], :, y1, x1])
    return {"Out": out}


# quadrilaterals (clockwise from the top left) in input pixels, spatial_scale 0.5
QUADS = np.array([[2, 1, 9, 2, 10, 8, 1, 7], [4.4, 0.6, 11.8, 0.2, 11.2, 9.4, 3.8, 8.6],
                  [0.6, 2.2, 7.4, 3.4, 6.2, 12.6, 1.4, 9.8]], "float32")
CASES += [
    OpCase("roi_perspective_transform", {"X": ROI_X, "ROIs": QUADS},
           lod={"ROIs": [[0, 2, 3]]},
           attrs={"transformed_height": 3, "transformed_width": 4, "spatial_scale": 0.5},
           ref=perspective_ref, grad=["X"], atol=1e-4, rtol=1e-4),
]

# ----------------------------------------------------------------------------- deformable ROI


def deformable_psroi_ref(Input, ROIs, Trans, attrs):
    """Per output element, as the operator's definition reads."""
    out_dim, ph_n, pw_n = attrs["output_dim"], attrs["pooled_height"], attrs["pooled_width"]
    gh_n, gw_n = attrs["group_size"]
    part_h, part_w = attrs["part_size"]
    spp, std, s = attrs["sample_per_part"], attrs["trans_std"], attrs["spatial_scale"]
    h, w = Input.shape[2:]
    classes = 1 if attrs["no_trans"] else Trans.shape[1] // 2
    out = np.zeros((len(ROIs), out_dim, ph_n, pw_n))
    for r, roi in enumerate(ROIs):
        x0, y0 = _c_round(roi[0]) * s - 0.5, _c_round(roi[1]) * s - 0.5
        rw = max((_c_round(roi[2]) + 1) * s - 0.5 - x0, 0.1)
        rh = max((_c_round(roi[3]) + 1) * s - 0.5 - y0, 0.1)
        for c in range(out_dim):
            cls = c // (out_dim // classes)
            for i in range(ph_n):
                for j in range(pw_n):
                    pi, pj = int(np.floor(i / ph_n * part_h)), int(np.floor(j / pw_n * part_w))
                    tx = 0 if attrs["no_trans"] else Trans[r, 2 * cls, pi, pj] * std
                    ty = 0 if attrs["no_trans"] else Trans[r, 2 * cls + 1, pi, pj] * std
                    gw = min(max(int(np.floor(j * gw_n / pw_n)), 0), gw_n - 1)
                    gh = min(max(int(np.floor(i * gh_n / ph_n)), 0), gh_n - 1)
                    img = Input[ROI_IMAGES[r], (c * gh_n + gh) * gw_n + gw]
                    vals = []
                    for a in range(spp):
                        for b in range(spp):
                            sx = j * rw / pw_n + x0 + tx * rw + b * rw / pw_n / spp
                            sy = i * rh / ph_n + y0 + ty * rh + a * rh / ph_n / spp
                            if -0.5 <= sx <= w - 0.5 and -0.5 <= sy <= h - 0.5:
                                sx, sy = min(max(sx, 0), w - 1), min(max(sy, 0), h - 1)
                                xa, ya = int(np.floor(sx)), int(np.floor(sy))
                                xb, yb = int(np.ceil(sx)), int(np.ceil(sy))
                                dx, dy = sx - xa, sy - ya
                                vals.append((1 - dx) * (1 - dy) * img[ya, xa] +
                                            (1 - dx) * dy * img[yb, xa] +
                                            dx * (1 - dy) * img[ya, xb] + dx * dy * img[yb, xb])
                    out[r, c, i, j] = np.mean(vals) if vals else 0
    return {"Output": out}


DPS_ATTRS = {"no_trans": False, "spatial_scale": 0.5, "output_dim": 2, "group_size": [2, 2],
             "pooled_height": 2, "pooled_width": 2, "part_size": [2, 2], "sample_per_part": 2,
             "trans_std": 0.1}
CASES += [
    OpCase("deformable_psroi_pooling",
           {"Input": rand(2, 8, 5, 6, seed=37), "ROIs": ROIS,
            "Trans": rand(3, 2, 2, 2, low=-0.9, high=0.9, seed=38)},
           lod={"ROIs": [[0, 2, 3]]}, attrs=DPS_ATTRS, ref=deformable_psroi_ref,
           outputs=["Output", "TopCount"], grad=["Input", "Trans"], grad_outputs=["Output"],
           grad_rtol=1e-3),
    OpCase("deformable_psroi_pooling",
           {"Input": rand(2, 2, 5, 6, seed=39), "ROIs": ROIS,
            "Trans": rand(3, 4, 1, 1, low=-0.9, high=0.9, seed=40)},
           lod={"ROIs": [[0, 2, 3]]},
           attrs={**DPS_ATTRS, "group_size": [1, 1], "part_size": [1, 1], "sample_per_part": 1},
           ref=deformable_psroi_ref, grad=["Input", "Trans"], grad_outputs=["Output"],
           grad_rtol=1e-3, id="deformable_psroi_pooling_two_classes"),
]

@pytest.mark.parametrize("case", CASES, ids=str)
def test_op(case):
    check_op(case)
