"""Op table: the input forms the programs of Fluid 1.6's layer tests build with -- bpr_loss
over [..., C] scores, hierarchical_sigmoid reading the first N label ids, sequence_softmax
of any shape at build time (one value per step when it runs), warpctc's padded form with
packed labels."""

from __future__ import annotations

import numpy as np
import pytest
from test_loss_ops import hsig_ref

from parafluid.testing import OpCase, check_op, rand


def bpr_ref(X, Label):
    """Per row of the [..., C] scores: -mean_{j != label} log sigmoid(x[label] - x[j])."""
    rows, labels = X.reshape(-1, X.shape[-1]), Label.reshape(-1)
    c = rows.shape[1]
    out = np.array([-sum(np.log(1 / (1 + np.exp(-(r[k] - r[j])))) for j in range(c) if j != k)
                    / (c - 1) for r, k in zip(rows, labels)])
    return {"Y": out.reshape(X.shape[:-1] + (1,))}


SEQ_OFFS = [0, 2, 5, 6]


def seq_softmax_ref(X):
    flat, out = X.reshape(-1), np.zeros(X.size)
    for a, b in zip(SEQ_OFFS, SEQ_OFFS[1:]):
        e = np.exp(flat[a:b] - flat[a:b].max())
        out[a:b] = e / e.sum()
    return {"Out": out.reshape(X.shape)}


CASES = [
    OpCase("bpr_loss", {"X": rand(2, 3, 4, seed=11),
                        "Label": np.array([[[0], [3], [1]], [[2], [2], [0]]], "int64")},
           ref=bpr_ref, grad=["X"], id="bpr_loss_3d_scores"),
    # a Label of [N, 2]: Fluid's kernel reads ids 0..N-1 of its buffer (row 0's two first)
    OpCase("hierarchical_sigmoid",
           {"X": rand(4, 3, seed=12), "W": rand(5, 3, seed=13),
            "Label": np.array([[1, 5], [0, 3], [4, 4], [2, 2]], "int64"),
            "Bias": rand(5, 1, seed=14)},
           attrs={"num_classes": 6}, ref=hsig_ref, grad=["X", "W", "Bias"],
           grad_outputs=["Out"], id="hierarchical_sigmoid_label_wider_than_one"),
    OpCase("hierarchical_sigmoid",
           {"X": rand(4, 3, seed=12), "W": rand(5, 3, seed=13),
            "Label": np.array([[1], [0], [4]], "int64"), "Bias": rand(5, 1, seed=14)},
           attrs={"num_classes": 6}, refused="Label holds 3 class ids for the 4 rows of X",
           id="hierarchical_sigmoid_label_short"),
    OpCase("sequence_softmax", {"X": rand(6, 1, 1, seed=15)}, ref=seq_softmax_ref,
           lod={"X": [SEQ_OFFS]}, grad=["X"], id="sequence_softmax_n_1_1"),
    OpCase("sequence_softmax", {"X": rand(6, 2, seed=16)}, lod={"X": [SEQ_OFFS]},
           refused="X must hold one value per step ([N] or [N, 1]), got shape [6, 2]",
           id="sequence_softmax_two_values_per_step"),
    OpCase("warpctc", {"Logits": rand(3, 2, 2, 4, seed=17),
                       "Label": np.array([[1], [2], [3]], "int32"),
                       "LogitsLength": np.array([3, 2], "int64"),
                       "LabelLength": np.array([2, 1], "int64")},
           refused="padded Logits must be [Tmax, N, C]", id="warpctc_padded_4d_logits"),
    OpCase("warpctc", {"Logits": rand(3, 2, 4, seed=18),
                       "Label": np.array([[1], [2]], "int32"),
                       "LogitsLength": np.array([3, 2], "int64"),
                       "LabelLength": np.array([2, 1], "int64")},
           refused="LabelLength [2, 1] adds up to 3 tokens but Label holds 2",
           id="warpctc_padded_labels_short"),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_op(case):
    check_op(case)
