"""Op table: the fc op (flatten at in_num_col_dims, optional Bias of shape [O] or [1, O],
activation_type relu) and the id-routing ops split_ids, merge_ids and ref_by_trainer_id."""

import numpy as np
import pytest

from parafluid.testing import OpCase, check_op, rand


def _fc(Input, W, Bias=None, attrs=None):
    k = attrs["in_num_col_dims"]
    out = Input.reshape(int(np.prod(Input.shape[:k])), -1) @ W
    if Bias is not None:
        out = out + Bias.reshape(-1)
    if attrs["activation_type"] == "relu":
        out = np.maximum(out, 0)
    return {"Out": out.reshape(*Input.shape[:k], W.shape[1])}


IDS_A = np.array([[7], [2], [4], [7]], "int64")
IDS_B = np.array([[3], [4], [9]], "int64")
ROWS = [np.array([[4], [2]], "int64"), np.array([[9], [7], [3]], "int64")]
XS = [rand(2, 3), rand(3, 3, seed=1)]


def _merge(Ids, Rows, X):
    table = {}
    for r, x in zip(Rows, X):
        for key, row in zip(r.reshape(-1), x):
            table.setdefault(int(key), row)
    return {"Out": [np.stack([table[int(k)] for k in t.reshape(-1)]) for t in Ids]}


CASES = [
    OpCase("fc", {"Input": rand(3, 4), "W": rand(4, 5, seed=1), "Bias": rand(5, seed=2)},
           ref=_fc, id="fc_bias"),
    OpCase("fc", {"Input": rand(2, 3, 2, 2), "W": rand(4, 5, seed=1),
                  "Bias": rand(1, 5, seed=2)},
           attrs={"in_num_col_dims": 2, "activation_type": "relu"}, ref=_fc,
           id="fc_in_num_col_dims2_relu_bias_1xO"),
    OpCase("fc", {"Input": rand(3, 2, 2), "W": rand(4, 2, seed=1)}, ref=_fc, id="fc_no_bias"),
    OpCase("split_ids", {"Ids": [IDS_A, IDS_B]}, out_counts={"Out": 3},
           ref=lambda Ids: {"Out": [np.array([[3], [9]]), np.array([[4], [7]]),
                                    np.array([[2]])]},
           id="split_ids_three_shards"),
    OpCase("split_ids", {"Ids": [np.array([[4], [2]], "int64")]}, out_counts={"Out": 2},
           ref=lambda Ids: {"Out": [np.array([[2], [4]]), np.zeros((0, 1), "int64")]},
           id="split_ids_empty_shard"),
    OpCase("merge_ids", {"Ids": [IDS_A, IDS_B], "Rows": ROWS, "X": XS},
           out_counts={"Out": 2}, ref=_merge, id="merge_ids"),
    OpCase("ref_by_trainer_id", {"X": [rand(2, 3), rand(2, 3, seed=1), rand(2, 3, seed=2)],
                                 "TrainerId": np.array([1], "int64")},
           ref=lambda X, TrainerId: {"Out": X[1]}, id="ref_by_trainer_id"),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_op(case):
    check_op(case)


def test_fc_rejects_other_activations_and_mismatched_weights():
    with pytest.raises(ValueError, match="activation_type"):
        check_op(OpCase("fc", {"Input": rand(3, 4), "W": rand(4, 5)},
                        attrs={"activation_type": "tanh"}))
    with pytest.raises(ValueError, match="columns"):
        check_op(OpCase("fc", {"Input": rand(3, 3), "W": rand(4, 5)}))
