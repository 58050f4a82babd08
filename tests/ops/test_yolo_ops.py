"""Op table: YOLOv3 (yolo_box, yolov3_loss with its gradient), references written from Fluid
1.6's operator definitions."""

import numpy as np
import pytest

from parafluid.testing import OpCase, check_op, rand

CASES: list = []


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


@pytest.mark.parametrize("case", CASES, ids=str)
def test_op(case):
    check_op(case)
