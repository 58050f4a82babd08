"""Op table: metric ops (accuracy, auc, mean_iou, edit_distance)."""

import numpy as np
import pytest

from parafluid.testing import OpCase, check_op, rand, run_op


def mean_iou_ref(Predictions, Labels, attrs):
    n = attrs["num_classes"]
    correct, wrong = np.zeros(n, "int32"), np.zeros(n, "int32")
    for p, lab in zip(Predictions, Labels):
        if p == lab:
            correct[p] += 1
        else:
            wrong[p] += 1
            wrong[lab] += 1
    denom = correct + wrong
    iou = np.where(denom > 0, correct / np.maximum(denom, 1), 0)
    return {"OutMeanIou": np.array([iou.sum() / (denom > 0).sum()], "float32"),
            "OutWrong": wrong, "OutCorrect": correct}


def levenshtein(a, b):
    d = np.arange(len(b) + 1)
    for i, x in enumerate(a, 1):
        prev, d[0] = d.copy(), i
        for j, y in enumerate(b, 1):
            d[j] = min(prev[j] + 1, d[j - 1] + 1, prev[j - 1] + (x != y))
    return d[-1]


def acc_ref(k):
    def ref(Out, Label, Indices=None):
        top = Indices if Indices is not None else np.argsort(-Out, axis=1)[:, :k]
        hits = int((top == Label.reshape(-1, 1)).any(1).sum())
        n = Label.shape[0]
        return {"Accuracy": np.array([hits / n], "float32"),
                "Correct": np.array([hits], "int32"), "Total": np.array([n], "int32")}
    return ref


def auc_ref(Predict, Label, StatPos, StatNeg):
    """Exact ROC AUC over the buckets: P(score_pos > score_neg) + P(tie) / 2."""
    b = np.floor(Predict[:, 1] * 10).astype(int)
    pos, neg = b[Label[:, 0] == 1], b[Label[:, 0] == 0]
    wins = sum((p > n) + 0.5 * (p == n) for p in pos for n in neg)
    return {"AUC": np.array([wins / (len(pos) * len(neg))]),
            "StatPosOut": np.bincount(pos, minlength=11).reshape(1, 11),
            "StatNegOut": np.bincount(neg, minlength=11).reshape(1, 11)}


_P = np.random.RandomState(4).uniform(0, 1, 12)

AUC_PRED = np.stack([1 - _P, _P], 1)

AUC_LABEL = (np.random.RandomState(5).uniform(0, 1, (12, 1)) < _P.reshape(-1, 1)).astype("int64")

SCORES = rand(6, 4, seed=5)

ACC_LABEL = np.array([[0], [1], [2], [3], [1], [0]], "int64")

CASES = [
    OpCase("mean_iou", {"Predictions": np.array([0, 1, 1, 2, 2, 0], "int32"),
                        "Labels": np.array([0, 1, 2, 2, 2, 1], "int32")},
           attrs={"num_classes": 4}, ref=mean_iou_ref),
    OpCase("edit_distance", {"Hyps": np.array([[1], [2], [3], [4], [5]], "int64"),
                             "Refs": np.array([[1], [3], [4], [6], [7]], "int64")},
           attrs={"normalized": True},
           ref=lambda Hyps, Refs: {"Out": np.array([[levenshtein([1, 2, 3], [1, 3]) / 2],
                                                    [levenshtein([4, 5], [4, 6, 7]) / 3]],
                                                   "float32"),
                                   "SequenceNum": np.array([2])},
           lod={"Hyps": [[0, 3, 5]], "Refs": [[0, 2, 5]]}),
    OpCase("accuracy", {"Out": SCORES, "Label": ACC_LABEL}, ref=acc_ref(1)),
    OpCase("accuracy", {"Out": SCORES, "Label": ACC_LABEL}, attrs={"k": 2}, ref=acc_ref(2),
           id="accuracy_top2"),
    OpCase("accuracy", {"Out": np.sort(SCORES, 1)[:, ::-1][:, :2].copy(),
                        "Indices": np.argsort(-SCORES, 1)[:, :2].astype("int64"),
                        "Label": ACC_LABEL}, ref=acc_ref(2), id="accuracy_given_indices"),
    OpCase("accuracy", {"Out": SCORES, "Label": ACC_LABEL.astype("float32")}, ref=acc_ref(1),
           id="accuracy_float_label"),
    OpCase("auc", {"Predict": AUC_PRED, "Label": AUC_LABEL,
                   "StatPos": np.zeros((1, 11), "int64"), "StatNeg": np.zeros((1, 11), "int64")},
           attrs={"num_thresholds": 10, "slide_steps": 0}, ref=auc_ref, id="auc"),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_op(case):
    check_op(case)


def test_accuracy_counts_are_exact():
    got = run_op(OpCase("accuracy", {"Out": SCORES, "Label": ACC_LABEL}))
    hits = (SCORES.argmax(1) == ACC_LABEL[:, 0]).sum()
    assert hits not in (0, 6)  # the data must make the check meaningful
    assert got["Correct"][0] == hits and got["Total"][0] == 6
