"""Op table: detection ops of Fluid 1.6 beyond the main tables: ``multiclass_nms2`` (the NMS
with the ``Index`` of each kept box) and ``prroi_pool`` (precise ROI pooling, gradients to
``X`` and the ROIs). References are numpy loops written from Fluid's kernels."""

import numpy as np
import pytest

import parafluid as fluid
from parafluid.testing import OpCase, check_op, rand, run_layers


def _iou(a, b, normalized):
    if b[0] > a[2] or b[2] < a[0] or b[1] > a[3] or b[3] < a[1]:
        return 0.0
    px = 0.0 if normalized else 1.0

    def area(r):
        return 0.0 if r[2] < r[0] or r[3] < r[1] else (r[2] - r[0] + px) * (r[3] - r[1] + px)

    inter = (min(a[2], b[2]) - max(a[0], b[0]) + px) * (min(a[3], b[3]) - max(a[1], b[1]) + px)
    return inter / (area(a) + area(b) - inter)


def _nms_one(boxes, scores, attrs):
    order = [i for i in np.argsort(-scores, kind="stable") if scores[i] > attrs["score_threshold"]]
    if attrs["nms_top_k"] > -1:
        order = order[:attrs["nms_top_k"]]
    kept, thr = [], attrs["nms_threshold"]
    for i in order:
        if all(_iou(boxes[i], boxes[k], attrs["normalized"]) <= thr for k in kept):
            kept.append(i)
            if attrs["nms_eta"] < 1 and thr > 0.5:
                thr *= attrs["nms_eta"]
    return kept


def nms2_ref(BBoxes, Scores, attrs):
    """[N, M, 4] boxes with [N, C, M] scores: the index of a kept box is n * M + m."""
    rows, index = [], []
    n_img, _, m = Scores.shape
    for n in range(n_img):
        dets = []  # (score, class, box)
        for c in range(Scores.shape[1]):
            if c != attrs["background_label"]:
                dets += [(Scores[n, c, i], c, i) for i in _nms_one(BBoxes[n], Scores[n, c], attrs)]
        if attrs["keep_top_k"] > -1:
            dets = sorted(dets, key=lambda d: -d[0])[:attrs["keep_top_k"]]
        dets = sorted(dets, key=lambda d: (d[1], -d[0]))
        rows += [[c, s, *BBoxes[n, i]] for s, c, i in dets]
        index += [n * m + i for _, _, i in dets]
    return {"Out": np.array(rows, Scores.dtype).reshape(-1, 6),
            "Index": np.array(index, "int32").reshape(-1, 1)}


LOD_OFFS = (0, 4, 9)


def nms2_lod_ref(BBoxes, Scores, attrs):
    """LoD [M, C, 4] boxes with [M, C] scores: the index is (row of the box) * C + class."""
    rows, index = [], []
    classes = Scores.shape[1]
    for n in range(len(LOD_OFFS) - 1):
        s0 = LOD_OFFS[n]
        b, s = BBoxes[s0:LOD_OFFS[n + 1]], Scores[s0:LOD_OFFS[n + 1]]
        dets = []
        for c in range(classes):
            if c != attrs["background_label"]:
                dets += [(s[i, c], c, i) for i in _nms_one(b[:, c], s[:, c], attrs)]
        if attrs["keep_top_k"] > -1:
            dets = sorted(dets, key=lambda d: -d[0])[:attrs["keep_top_k"]]
        dets = sorted(dets, key=lambda d: (d[1], d[2]))
        rows += [[c, sc, *b[i, c]] for sc, c, i in dets]
        index += [(s0 + i) * classes + c for _, c, i in dets]
    return {"Out": np.array(rows, Scores.dtype).reshape(-1, 6),
            "Index": np.array(index, "int32").reshape(-1, 1)}


def _clustered(n, m, seed):
    rng = np.random.RandomState(seed)
    centres = rng.uniform(0.2, 0.8, (3, 2))
    c = centres[rng.randint(0, 3, (n, m))] + rng.uniform(-0.05, 0.05, (n, m, 2))
    half = rng.uniform(0.05, 0.15, (n, m, 2))
    return np.concatenate([c - half, c + half], -1).astype("float32")


NMS_ATTRS = {"background_label": 0, "score_threshold": 0.1, "nms_top_k": -1,
             "nms_threshold": 0.3, "nms_eta": 1.0, "keep_top_k": -1, "normalized": True}
BOXES = _clustered(2, 10, seed=31)
SCORES = rand(2, 3, 10, low=0, high=1, seed=32, dtype="float32")


def _empty_check(got, attrs):
    # multiclass_nms2 marks "nothing kept" by empty outputs (multiclass_nms by a -1 row)
    assert got["Out"].shape == (0, 6), got["Out"].shape
    assert got["Index"].shape == (0, 1), got["Index"].shape


NMS2_CASES = [
    OpCase("multiclass_nms2", {"BBoxes": BOXES, "Scores": SCORES}, attrs=NMS_ATTRS,
           ref=nms2_ref, id="multiclass_nms2"),
    OpCase("multiclass_nms2", {"BBoxes": BOXES * 30, "Scores": SCORES},
           attrs={**NMS_ATTRS, "normalized": False, "keep_top_k": 5, "nms_top_k": 6},
           ref=nms2_ref, id="multiclass_nms2_pixels_keep_top_k"),
    OpCase("multiclass_nms2", {"BBoxes": _clustered(9, 3, seed=33),
                               "Scores": rand(9, 3, low=0, high=1, seed=34, dtype="float32")},
           attrs={**NMS_ATTRS, "keep_top_k": 5}, lod={"BBoxes": [list(LOD_OFFS)]},
           ref=nms2_lod_ref, id="multiclass_nms2_lod"),
    OpCase("multiclass_nms2", {"BBoxes": BOXES, "Scores": SCORES * 0.01}, attrs=NMS_ATTRS,
           check=_empty_check, id="multiclass_nms2_nothing_kept"),
]


# ----------------------------------------------------------------------------- prroi_pool


def _cell_integral(data, h, w, y0, x0, y1, x1):
    """Integral over [x0, x1] x [y0, y1] (inside the unit cell at (h, w)) of the bilinear
    interpolation between the cell's 4 corner pixels; pixels off the map count 0."""
    def px(hh, ww):
        return data[hh, ww] if 0 <= hh < data.shape[0] and 0 <= ww < data.shape[1] else 0.0

    def lin(lo, hi):  # integral of (1 - t) and of t over [lo, hi]
        return (hi - hi * hi / 2) - (lo - lo * lo / 2), (hi * hi - lo * lo) / 2
    ax0, ax1 = lin(x0 - w, x1 - w)
    ay0, ay1 = lin(y0 - h, y1 - h)
    return (px(h, w) * ax0 * ay0 + px(h, w + 1) * ax1 * ay0 + px(h + 1, w) * ax0 * ay1 +
            px(h + 1, w + 1) * ax1 * ay1)


def prroi_ref(X, ROIs, attrs, offsets):
    s, ph_n, pw_n = attrs["spatial_scale"], attrs["pooled_height"], attrs["pooled_width"]
    out = np.zeros((len(ROIs), X.shape[1], ph_n, pw_n))
    for r, roi in enumerate(ROIs):
        img = next(i for i in range(len(offsets) - 1) if offsets[i] <= r < offsets[i + 1])
        x1, y1, x2, y2 = roi * s
        bw, bh = max(x2 - x1, 0) / pw_n, max(y2 - y1, 0) / ph_n
        if bw * bh <= 0:
            continue
        for c in range(X.shape[1]):
            for i in range(ph_n):
                for j in range(pw_n):
                    ws, hs = x1 + j * bw, y1 + i * bh
                    we, he = ws + bw, hs + bh
                    total = 0.0
                    for w in range(int(np.floor(ws)), int(np.ceil(we))):
                        for h in range(int(np.floor(hs)), int(np.ceil(he))):
                            total += _cell_integral(X[img, c], h, w, max(hs, h), max(ws, w),
                                                    min(he, h + 1), min(we, w + 1))
                    out[r, c, i, j] = total / (bw * bh)
    return {"Out": out}


PR_X = rand(2, 2, 5, 4, seed=35)
# a ROI past the map's right edge, one inside, one with x2 < x1 (empty: its bins are 0)
PR_ROIS = np.array([[0.3, 0.7, 9.1, 12.2], [2.2, 1.1, 5.9, 7.3], [3.0, 2.0, 2.0, 6.0],
                    [1.0, 2.0, 7.5, 9.0]])
PR_OFFS = [0, 3, 4]

PRROI_CASES = [
    OpCase("prroi_pool", {"X": PR_X, "ROIs": PR_ROIS},
           attrs={"spatial_scale": 0.5, "pooled_height": 2, "pooled_width": 3},
           lod={"ROIs": [PR_OFFS]}, ref=lambda X, ROIs, attrs: prroi_ref(X, ROIs, attrs, PR_OFFS),
           grad=["X", "ROIs"], id="prroi_pool"),
    OpCase("prroi_pool", {"X": PR_X[:1], "ROIs": PR_ROIS[1:2] * 2},
           attrs={"spatial_scale": 1.0, "pooled_height": 1, "pooled_width": 1},
           lod={"ROIs": [[0, 1]]},
           ref=lambda X, ROIs, attrs: prroi_ref(X, ROIs, attrs, [0, 1]), grad=["X", "ROIs"],
           id="prroi_pool_one_bin"),
]


# ----------------------------------------------------------- roi_perspective_transform outputs

RPT_X = rand(2, 2, 4, 5, seed=37)  # H 4, W 5
# axis-aligned rectangles: 4 x 2 onto a 3 x 5 grid (fitted width (4 * 2 / 2) + 1 = 5),
# the source pixel of output (oh, ow) is (y0 + oh, x0 + ow); the first runs past x = 4.5
RPT_ROIS = np.array([[2, 1, 6, 1, 6, 3, 2, 3], [0, 0, 4, 0, 4, 2, 0, 2]], "float64")


def perspective_outputs_ref(X, ROIs, attrs, offsets=(0, 1, 2)):
    th, tw = attrs["transformed_height"], attrs["transformed_width"]
    r_n, (c_n, h, w) = len(ROIs), X.shape[1:]
    out = np.zeros((r_n, c_n, th, tw))
    mask = np.zeros((r_n, 1, th, tw), "int32")
    matrix = np.zeros((r_n, 9))
    idx = -np.ones((r_n, c_n, th, tw, 4), "int32")
    wts = np.zeros((r_n, c_n, th, tw, 4))
    for r, q in enumerate(ROIs):
        b = next(i for i in range(len(offsets) - 1) if offsets[i] <= r < offsets[i + 1])
        x0, y0, x1, _, _, _, _, y3 = q
        matrix[r] = [(x1 - x0) / (tw - 1), 0, x0, 0, (y3 - y0) / (th - 1), y0, 0, 0, 1]
        for oh in range(th):
            for ow in range(tw):
                x, y = x0 + ow * (x1 - x0) / (tw - 1), y0 + oh * (y3 - y0) / (th - 1)
                if x > w - 0.5 or y > h - 0.5:
                    continue
                mask[r, 0, oh, ow] = 1
                xf, yf = int(x), int(y)  # integer source pixels: all weight on (yf, xf)
                xc, yc = min(xf + 1, w - 1), min(yf + 1, h - 1)
                for c in range(c_n):
                    base = (b * c_n + c) * h * w
                    out[r, c, oh, ow] = X[b, c, yf, xf]
                    idx[r, c, oh, ow] = [base + yf * w + xf, base + yc * w + xf,
                                         base + yc * w + xc, base + yf * w + xc]
                    wts[r, c, oh, ow] = [1, 0, 0, 0]
    return {"Out": out, "Mask": mask, "TransformMatrix": matrix,
            "Out2InIdx": idx.reshape(-1, 4), "Out2InWeights": wts.reshape(-1, 4)}


RPT_CASES = [
    OpCase("roi_perspective_transform", {"X": RPT_X, "ROIs": RPT_ROIS},
           attrs={"transformed_height": 3, "transformed_width": 5, "spatial_scale": 1.0},
           lod={"ROIs": [[0, 1, 2]]}, ref=perspective_outputs_ref, grad=["X"],
           grad_outputs=["Out"], id="roi_perspective_transform_mask_matrix_index"),
]


@pytest.mark.parametrize("case", NMS2_CASES + PRROI_CASES + RPT_CASES, ids=str)
def test_op(case):
    check_op(case)


def test_prroi_pool_layer_matches_the_op():
    """layers.prroi_pool(input, rois, spatial_scale, pooled_height, pooled_width) as 1.6."""
    rois = fluid.create_lod_tensor(PR_ROIS.astype("float32"), [[3, 1]], fluid.CPUPlace())

    def build():
        x = fluid.layers.data(name="x", shape=[2, 5, 4], dtype="float32")
        r = fluid.layers.data(name="r", shape=[4], dtype="float32", lod_level=1)
        return [fluid.layers.prroi_pool(x, r, 0.5, 2, 3)]

    got, = run_layers(build, {"x": PR_X.astype("float32"), "r": rois})
    want = prroi_ref(PR_X, PR_ROIS, {"spatial_scale": 0.5, "pooled_height": 2,
                                     "pooled_width": 3}, PR_OFFS)["Out"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    with pytest.raises(TypeError, match="spatial_scale"):
        fluid.layers.prroi_pool(fluid.layers.data(name="x2", shape=[2, 5, 4]),
                                fluid.layers.data(name="r2", shape=[4], lod_level=1), 2, 7, 7)


def test_detection_output_return_index():
    """detection_output(..., return_index=True) gives multiclass_nms2's (Out, Index)."""
    rng = np.random.RandomState(36)
    priors = np.sort(rng.uniform(0, 1, (6, 2, 2)), 1).transpose(0, 2, 1).reshape(6, 4)
    loc = rng.uniform(-0.5, 0.5, (2, 6, 4)).astype("float32")
    conf = rng.uniform(-2, 2, (2, 6, 3)).astype("float32")

    def build():
        lv = fluid.layers.data(name="loc", shape=[2, 6, 4], append_batch_size=False)
        cv = fluid.layers.data(name="conf", shape=[2, 6, 3], append_batch_size=False)
        pb = fluid.layers.assign(priors.astype("float32"))
        pv = fluid.layers.assign(np.full((6, 4), 0.1, "float32"))
        out, index = fluid.layers.detection_output(lv, cv, pb, pv, score_threshold=0.2,
                                                   return_index=True)
        plain = fluid.layers.detection_output(lv, cv, pb, pv, score_threshold=0.2)
        return [out, index, plain]

    out, index, plain = run_layers(build, {"loc": loc, "conf": conf})
    np.testing.assert_array_equal(np.asarray(out), np.asarray(plain))
    assert index.dtype == np.int32 and index.shape == (len(out), 1)
    # each kept row's box is the decoded box at its index in the batch's N * M boxes
    var = 0.1
    pw, ph = priors[:, 2] - priors[:, 0], priors[:, 3] - priors[:, 1]
    pcx, pcy = priors[:, 0] + pw / 2, priors[:, 1] + ph / 2
    for row, k in zip(np.asarray(out), index[:, 0]):
        n, m = divmod(int(k), 6)
        d = loc[n, m]
        cx, cy = var * d[0] * pw[m] + pcx[m], var * d[1] * ph[m] + pcy[m]
        w, h = np.exp(var * d[2]) * pw[m], np.exp(var * d[3]) * ph[m]
        np.testing.assert_allclose(row[2:], [cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2],
                                   rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------- generate_proposal_labels


def _pixel_iou(a, b):
    return _iou(a, b, normalized=False)


def proposal_labels_ref(RpnRois, GtClasses, IsCrowd, GtBoxes, ImInfo, attrs,
                        roi_offs=(0, 5, 8), gt_offs=(0, 2, 4)):
    """Fluid 1.6's rules: foreground at IoU >= fg_thresh; targets 4 * class_nums wide
    (class agnostic: columns 4..7); cascade: the first rows of each image's RpnRois (its
    ground truth) dropped, empty boxes skipped, nothing sampled away."""
    cascade = attrs["is_cascade_rcnn"]
    width = 4 * attrs["class_nums"]
    rows = {"Rois": [], "LabelsInt32": [], "BboxTargets": [], "BboxInsideWeights": []}
    for i in range(len(ImInfo)):
        gt = GtBoxes[gt_offs[i]:gt_offs[i + 1]]
        cls = GtClasses[gt_offs[i]:gt_offs[i + 1], 0]
        crowd = IsCrowd[gt_offs[i]:gt_offs[i + 1], 0]
        scale = ImInfo[i, 2]
        rois = RpnRois[roi_offs[i]:roi_offs[i + 1]]
        if cascade:
            rois = rois[len(gt):]
        boxes = np.concatenate([gt, rois / scale])
        fg, bg = [], []
        for b, box in enumerate(boxes):
            ov = [_pixel_iou(box, g) for g in gt]
            best = -1 if b < len(gt) and crowd[b] else max(ov)
            if cascade and (box[2] - box[0] + 1 <= 0 or box[3] - box[1] + 1 <= 0):
                continue
            if best >= attrs["fg_thresh"]:
                fg.append((b, int(np.argmax(ov))))
            elif attrs["bg_thresh_lo"] <= best < attrs["bg_thresh_hi"]:
                bg.append(b)
        if not cascade:
            fg = fg[:int(attrs["batch_size_per_im"] * attrs["fg_fraction"])]
            bg = bg[:attrs["batch_size_per_im"] - len(fg)]
        for b, j in fg:
            a, g = boxes[b], gt[j]
            aw, ah, gw, gh = a[2] - a[0] + 1, a[3] - a[1] + 1, g[2] - g[0] + 1, g[3] - g[1] + 1
            d = np.array([(g[0] + gw / 2 - a[0] - aw / 2) / aw,
                          (g[1] + gh / 2 - a[1] - ah / 2) / ah,
                          np.log(gw / aw), np.log(gh / ah)]) / attrs["bbox_reg_weights"]
            t, w = np.zeros(width), np.zeros(width)
            col = 4 if attrs["is_cls_agnostic"] else 4 * cls[j]
            t[col:col + 4], w[col:col + 4] = d, 1
            rows["Rois"].append(a * scale)
            rows["LabelsInt32"].append(cls[j])
            rows["BboxTargets"].append(t)
            rows["BboxInsideWeights"].append(w)
        for b in bg:
            rows["Rois"].append(boxes[b] * scale)
            rows["LabelsInt32"].append(0)
            rows["BboxTargets"].append(np.zeros(width))
            rows["BboxInsideWeights"].append(np.zeros(width))
    out = {k: np.array(v).reshape(len(v), -1) for k, v in rows.items()}
    out["LabelsInt32"] = out["LabelsInt32"].astype("int32")
    out["BboxOutsideWeights"] = out["BboxInsideWeights"]
    return out


PL_GT = np.array([[1, 1, 12, 12], [15, 15, 30, 30], [5, 5, 15, 16], [0, 0, 4, 30]])
PL_ROIS = np.array([[2, 2, 26, 24], [40, 40, 60, 62], [2, 2, 24, 24], [30, 28, 62, 64],
                    [4, 30, 24, 60], [10, 10, 30, 30], [0, 0, 5, 60], [12, 8, 32, 34]],
                   "float64")
PL_INPUTS = {"RpnRois": PL_ROIS, "GtClasses": np.array([[3], [1], [2], [2]], "int32"),
             "IsCrowd": np.array([[0], [0], [0], [1]], "int32"), "GtBoxes": PL_GT * 1.0,
             "ImInfo": np.array([[64, 64, 2.0], [40, 40, 1.0]])}
PL_LOD = {"RpnRois": [[0, 5, 8]], "GtClasses": [[0, 2, 4]], "IsCrowd": [[0, 2, 4]],
          "GtBoxes": [[0, 2, 4]]}
PL_ATTRS = {"batch_size_per_im": 6, "fg_fraction": 0.5, "fg_thresh": 0.5,
            "bg_thresh_hi": 0.5, "bg_thresh_lo": 0.0, "bbox_reg_weights": [0.1, 0.1, 0.2, 0.2],
            "class_nums": 4, "use_random": False, "is_cls_agnostic": False,
            "is_cascade_rcnn": False}
# cascade: each image's ROIs start with its ground truth (scaled), one ROI is empty
PL_CASCADE_ROIS = np.concatenate([PL_GT[:2] * 2.0, PL_ROIS[:4], [[20, 20, 10, 10]],
                                  PL_GT[2:] * 1.0, PL_ROIS[5:]])

PROPOSAL_LABEL_CASES = [
    # the ground-truth boxes overlap themselves by exactly 1.0: foreground at fg_thresh 1
    OpCase("generate_proposal_labels", PL_INPUTS, lod=PL_LOD,
           attrs={**PL_ATTRS, "fg_thresh": 1.0}, ref=proposal_labels_ref,
           id="generate_proposal_labels_fg_at_threshold"),
    OpCase("generate_proposal_labels", PL_INPUTS, lod=PL_LOD,
           attrs={**PL_ATTRS, "is_cls_agnostic": True, "class_nums": 3},
           ref=proposal_labels_ref, id="generate_proposal_labels_agnostic_width"),
    OpCase("generate_proposal_labels", {**PL_INPUTS, "RpnRois": PL_CASCADE_ROIS},
           lod={**PL_LOD, "RpnRois": [[0, 7, 12]]},
           attrs={**PL_ATTRS, "is_cascade_rcnn": True, "batch_size_per_im": 2,
                  "use_random": True},
           ref=lambda attrs, **kw: proposal_labels_ref(attrs=attrs, roi_offs=(0, 7, 12), **kw),
           id="generate_proposal_labels_cascade"),
]


@pytest.mark.parametrize("case", PROPOSAL_LABEL_CASES, ids=str)
def test_proposal_labels(case):
    check_op(case)


# ----------------------------------------------------------- retinanet_target_assign


def _delta(a, g):
    aw, ah, gw, gh = a[2] - a[0] + 1, a[3] - a[1] + 1, g[2] - g[0] + 1, g[3] - g[1] + 1
    return [(g[0] + gw / 2 - a[0] - aw / 2) / aw, (g[1] + gh / 2 - a[1] - ah / 2) / ah,
            np.log(gw / aw), np.log(gh / ah)]


def retinanet_assign_ref(Anchor, GtBoxes, GtLabels, IsCrowd, ImInfo, attrs, offs=(0, 2, 3)):
    """Fluid's rules: foreground = each ground truth's best anchors plus IoU >= positive;
    background = IoU < negative, and wins; a foreground anchor turned background leaves a
    zero-weight location at the first foreground anchor (a "fake"); no sampling."""
    n_anchor = len(Anchor)
    out = {k: [] for k in ("loc", "score", "label", "bbox", "w", "fg")}
    for i in range(len(offs) - 1):
        keep = IsCrowd[offs[i]:offs[i + 1], 0] == 0
        gt = GtBoxes[offs[i]:offs[i + 1]][keep] * ImInfo[i, 2]
        cls = GtLabels[offs[i]:offs[i + 1], 0][keep]
        iou = np.array([[_pixel_iou(a, g) for g in gt] for a in Anchor])
        best, arg = iou.max(1), iou.argmax(1)
        fg = [a for a in range(n_anchor) if best[a] >= attrs["positive_overlap"] or
              any(abs(iou[a, j] - iou[:, j].max()) < 1e-5 for j in range(len(gt)))]
        bg = [a for a in range(n_anchor) if best[a] < attrs["negative_overlap"]]
        fakes = [fg[0]] * sum(a in fg for a in bg)
        fg_left = [a for a in fg if a not in bg]
        loc = fakes + fg_left
        out["loc"] += [a + i * n_anchor for a in loc]
        out["score"] += [a + i * n_anchor for a in fg_left + bg]
        out["label"] += [cls[arg[a]] for a in fg_left] + [0] * len(bg)
        out["bbox"] += [_delta(Anchor[a], gt[arg[a]]) for a in loc]
        out["w"] += [[0.0] * 4] * len(fakes) + [[1.0] * 4] * len(fg_left)
        out["fg"].append(len(fg) + 1)
    return {"LocationIndex": np.array(out["loc"], "int32"),
            "ScoreIndex": np.array(out["score"], "int32"),
            "TargetLabel": np.array(out["label"], "int32").reshape(-1, 1),
            "TargetBBox": np.array(out["bbox"]).reshape(-1, 4),
            "BBoxInsideWeight": np.array(out["w"]).reshape(-1, 4),
            "ForegroundNumber": np.array(out["fg"], "int32").reshape(-1, 1)}


RA_ANCHORS = np.array([[0, 0, 15, 15], [8, 8, 23, 23], [16, 16, 31, 31], [0, 16, 15, 31],
                       [4, 4, 11, 11], [20, 0, 35, 15]], "float64")
# image 0: one box that every anchor overlaps little (its best anchors are both foreground
# and background: fakes) and one well covered; image 1: one box
RA_GT = np.array([[24, 24, 27, 27], [1, 1, 15, 14], [16, 15, 31, 31]], "float64")

RETINANET_CASES = [
    OpCase("retinanet_target_assign",
           {"Anchor": RA_ANCHORS, "GtBoxes": RA_GT,
            "GtLabels": np.array([[3], [1], [2]], "int32"),
            "IsCrowd": np.array([[0], [0], [0]], "int32"),
            "ImInfo": np.array([[40, 40, 1.0], [40, 40, 1.0]])},
           lod={"GtBoxes": [[0, 2, 3]], "GtLabels": [[0, 2, 3]], "IsCrowd": [[0, 2, 3]]},
           attrs={"positive_overlap": 0.5, "negative_overlap": 0.4},
           ref=retinanet_assign_ref, id="retinanet_target_assign_fake_foreground"),
]


@pytest.mark.parametrize("case", RETINANET_CASES, ids=str)
def test_retinanet_assign(case):
    check_op(case)
