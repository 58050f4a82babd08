"""Op table."""


import numpy as np
import pytest

from parafluid.testing import OpCase, check_op


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
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_op(case):
    check_op(case)
