"""Op table: region proposals and training targets (generate_proposals,
distribute_fpn_proposals, collect_fpn_proposals, rpn_target_assign, generate_proposal_labels,
retinanet_target_assign), with first-k sampling (use_random=False) against loop references."""

import numpy as np
import pytest

from parafluid.testing import OpCase, check_op, rand
from parafluid.testing.refs import anchor_grid, box_iou, nms_pixels

CASES: list = []


# ----------------------------------------------------------------------------- proposals


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
        kept = nms_pixels(boxes_i, scores_i, attrs["nms_thresh"])[:attrs["post_nms_topN"]]
        rois.append(boxes_i[kept])
        probs.append(scores_i[kept].reshape(-1, 1))
    return {"RpnRois": np.concatenate(rois), "RpnRoiProbs": np.concatenate(probs)}


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
            "Anchors": anchor_grid(RPN_H, RPN_W, [8, 16, 32], 16),
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

RPN_ANCHORS = anchor_grid(4, 4, [12, 24], 8).reshape(-1, 4)  # 32 anchors on a 32 x 32 image
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
        ov = np.array([[box_iou(Anchor[a], g, normalized=False) for g in gts] for a in inside])
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

def proposal_labels_ref(RpnRois, GtClasses, IsCrowd, GtBoxes, ImInfo, attrs,
                        roi_offs=(0, 5, 8), gt_offs=(0, 2, 4)):
    outs = [[], [], [], []]
    ncls = attrs["class_nums"]  # the width also when class agnostic (Fluid's kernel)
    for i in range(len(ImInfo)):
        gt = GtBoxes[gt_offs[i]:gt_offs[i + 1]]
        cls = GtClasses[gt_offs[i]:gt_offs[i + 1], 0]
        crowd = IsCrowd[gt_offs[i]:gt_offs[i + 1], 0]
        scale = ImInfo[i, 2]
        boxes = np.concatenate([gt, RpnRois[roi_offs[i]:roi_offs[i + 1]] / scale])
        fg, bg = [], []
        for b in range(len(boxes)):
            ov = [box_iou(boxes[b], g, normalized=False) for g in gt]
            best = -1 if b < len(gt) and crowd[b] else max(ov)
            if best >= attrs["fg_thresh"]:
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

def retinanet_target_ref(Anchor, GtBoxes, GtLabels, IsCrowd, ImInfo, attrs, offs=(0, 2, 4)):
    out = {k: [] for k in ("loc", "score", "label", "bbox", "fg")}
    n = len(Anchor)
    for i in range(len(ImInfo)):
        keep = [j for j in range(offs[i], offs[i + 1]) if IsCrowd[j, 0] == 0]
        gts = GtBoxes[keep] * ImInfo[i, 2]
        ov = np.array([[box_iou(a, g, normalized=False) for g in gts] for a in Anchor])
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



# ------------------------------------------------------------------------ generate_mask_labels


def _strictly_inside(px, py, poly):
    """A convex polygon given clockwise or counter-clockwise (the polygons below keep pixel
    centres off their edges, where the rasterization's rounding decides)."""
    pts = list(zip(poly[0::2], poly[1::2]))
    cross = [(bx - ax) * (py - ay) - (by - ay) * (px - ax)
             for (ax, ay), (bx, by) in zip(pts, pts[1:] + pts[:1])]
    return all(c > 0 for c in cross) or all(c < 0 for c in cross)


def mask_labels_ref(ImInfo, GtClasses, IsCrowd, GtSegms, Rois, LabelsInt32, attrs):
    m, ncls = attrs["resolution"], attrs["num_classes"]
    objects = [[[0, 0, 8, 0, 8, 8, 0, 8]],                     # image 0, class 2: a square
               [[8, 8, 16, 8, 16, 12, 8, 12], [8, 12, 13, 16, 8, 16]],  # class 1: two parts
               [[0, 0, 16, 0, 16, 16]]]                        # a crowd: never a target
    rows, has, masks = [], [], []
    scale = ImInfo[0, 2]
    for r in range(4):  # image 0's ROIs
        label = LabelsInt32[r, 0]
        if label <= 0:
            continue
        roi = Rois[r] / scale
        boxes = [[min(sum(o, [])[0::2]), min(sum(o, [])[1::2]), max(sum(o, [])[0::2]),
                  max(sum(o, [])[1::2])] for o in objects[:2]]
        obj = objects[int(np.argmax([box_iou(roi, b, normalized=False) for b in boxes]))]
        w, h = max(roi[2] - roi[0], 1), max(roi[3] - roi[1], 1)
        mask = np.zeros((m, m), "int32")
        for poly in obj:
            p = [(v - roi[j % 2]) * m / (w if j % 2 == 0 else h) for j, v in enumerate(poly)]
            for y in range(m):
                for x in range(m):
                    mask[y, x] |= _strictly_inside(x + 0.5, y + 0.5, p)
        row = -np.ones(ncls * m * m, "int32")
        row[label * m * m:(label + 1) * m * m] = mask.reshape(-1)
        rows.append(roi * scale)
        has.append(r)
        masks.append(row)
    # image 1 has no foreground ROI: its first ROI with an all -1 target
    rows.append(Rois[4])
    has.append(0)  # the index of its first background ROI within the image
    masks.append(-np.ones(ncls * m * m, "int32"))
    return {"MaskRois": np.array(rows), "RoiHasMaskInt32": np.array(has, "int32").reshape(-1, 1),
            "MaskInt32": np.array(masks)}


_POINTS = [[0, 0], [8, 0], [8, 8], [0, 8],                       # object 0
           [8, 8], [16, 8], [16, 12], [8, 12], [8, 12], [13, 16], [8, 16],  # object 1
           [0, 0], [16, 0], [16, 16],                            # object 2 (crowd)
           [20, 20], [28, 20], [28, 28]]                         # image 1's object
CASES += [
    OpCase("generate_mask_labels",
           {"ImInfo": np.array([[64, 64, 2.0], [64, 64, 1.0]], "float32"),
            "GtClasses": np.array([[2], [1], [3], [1]], "int32"),
            "IsCrowd": np.array([[0], [0], [1], [0]], "int32"),
            "GtSegms": np.array(_POINTS, "float32"),
            "Rois": np.array([[0, 0, 16, 16], [16, 16, 32, 32], [40, 40, 60, 60],
                              [12, 12, 36, 36], [5, 5, 9, 9], [0, 0, 4, 4]], "float32"),
            "LabelsInt32": np.array([[2], [1], [0], [1], [0], [0]], "int32")},
           lod={"GtClasses": [[0, 3, 4]], "IsCrowd": [[0, 3, 4]], "Rois": [[0, 4, 6]],
                "LabelsInt32": [[0, 4, 6]],
                "GtSegms": [[0, 3, 4], [0, 1, 3, 4, 5], [0, 4, 8, 11, 14, 17]]},
           attrs={"num_classes": 3, "resolution": 4}, ref=mask_labels_ref),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_op(case):
    check_op(case)
