"""Op table: IfElse's row split/merge, is_empty, DynamicRNN's rank-table ops, beam_search.
The sub-block and tensor-array ops are checked through their layers in
tests/test_control_flow.py, tests/test_control_flow_grad.py and tests/test_dynamic_rnn.py
(they need a program with sub-blocks, or arrays, which a feed cannot make)."""

import numpy as np
import pytest

import parafluid as fluid
from parafluid.testing import OpCase, check_op, rand, run_op

X = rand(5, 3, seed=3)
MASK = np.array([[True], [False], [True], [True], [False]])
RANKS = [[1, 4], [3, 4], [0, 2], [2, 1]]  # sequences of lengths 2, 4, 1, 4, longest first

CASES = [
    OpCase("split_lod_tensor", {"X": X, "Mask": MASK},
           ref=lambda X, Mask: {"OutTrue": X[Mask[:, 0]], "OutFalse": X[~Mask[:, 0]]},
           grad=["X"]),
    OpCase("split_lod_tensor", {"X": X, "Mask": np.zeros((5, 1), bool)},
           ref=lambda X, Mask: {"OutTrue": X[:0], "OutFalse": X}, grad=["X"],
           grad_outputs=["OutFalse"], id="split_lod_tensor_all_false"),
    OpCase("merge_lod_tensor", {"X": MASK, "Mask": MASK, "InTrue": X[:3], "InFalse": X[3:]},
           ref=lambda X, Mask, InTrue, InFalse: {
               "Out": np.stack([InTrue[0], InFalse[0], InTrue[1], InTrue[2], InFalse[1]])},
           grad=["InTrue", "InFalse"]),
    OpCase("is_empty", {"X": X}, ref=lambda X: {"Out": np.array([False])}),
    OpCase("is_empty", {"X": X[:0]}, ref=lambda X: {"Out": np.array([True])},
           id="is_empty_true"),
    OpCase("increment", {"X": np.array([3], "int64")}, attrs={"step": 2.0},
           ref=lambda X: {"Out": X + 2}, id="increment_int64"),
    OpCase("lod_rank_table", {"X": rand(11, 1)}, lod={"X": [[0, 2, 6, 7, 11]]},
           ref=lambda X: {"Out": np.array(RANKS, "int64")}),
    OpCase("max_sequence_len", {"RankTable": np.array(RANKS, "int64")},
           ref=lambda RankTable: {"Out": np.array([4], "int64")}),
    OpCase("shrink_rnn_memory", {"X": X[:4], "RankTable": np.array(RANKS, "int64"),
                                 "I": np.array([1], "int64")},
           ref=lambda X, RankTable, I: {"Out": X[:3]}, grad=["X"]),
    OpCase("reorder_lod_tensor_by_rank", {"X": X[:4], "RankTable": np.array(RANKS, "int64")},
           ref=lambda X, RankTable: {"Out": X[[1, 3, 0, 2]]}, grad=["X"]),
    OpCase("beam_search", {"pre_ids": np.array([[4], [1], [3]], "int64"),
                           "pre_scores": np.array([[-1.0], [-0.5], [-2.0]], "float32"),
                           "ids": np.array([[2, 5], [3, 4], [1, 2]], "int64"),
                           "scores": np.array([[-1.2, -3.0], [-9.0, -9.0], [-2.1, -2.5]],
                                              "float32")},
           attrs={"beam_size": 2, "end_id": 1}, lod={"scores": [[0, 2, 3], [0, 1, 2, 3]]},
           ref=lambda pre_ids, pre_scores, ids, scores: {
               "selected_ids": np.array([[2], [1], [1], [2]]),
               "selected_scores": np.array([[-1.2], [-0.5], [-2.1], [-2.5]], "float32"),
               "parent_idx": np.array([0, 1, 2, 2], "int32")}),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_op(case):
    check_op(case)


def test_merge_names_a_branch_with_the_wrong_row_count():
    with pytest.raises(fluid.OpRunError, match="the mask selects more than the 2 item"
                                               r"\(s\) of InTrue"):
        run_op(OpCase("merge_lod_tensor", {"X": MASK, "Mask": MASK, "InTrue": X[:2],
                                           "InFalse": X[3:]}))


def test_split_names_a_mask_of_the_wrong_length():
    with pytest.raises(fluid.OpRunError, match="the mask has 4 entries but the input has 5"):
        run_op(OpCase("split_lod_tensor", {"X": X, "Mask": MASK[:4]}))
