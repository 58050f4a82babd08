"""Op table: IfElse's row split/merge and is_empty; the sub-block and array ops are checked
through their layers in tests/test_control_flow.py (they need a program with sub-blocks)."""

import numpy as np
import pytest

import parafluid as fluid
from parafluid.testing import OpCase, check_op, rand, run_op

X = rand(5, 3, seed=3)
MASK = np.array([[True], [False], [True], [True], [False]])

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
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_op(case):
    check_op(case)


def test_merge_names_a_branch_with_the_wrong_row_count():
    with pytest.raises(fluid.OpRunError, match="the mask selects 3 rows for InTrue, which "
                                               "has 2 rows"):
        run_op(OpCase("merge_lod_tensor", {"X": MASK, "Mask": MASK, "InTrue": X[:2],
                                           "InFalse": X[3:]}))


def test_split_names_a_mask_of_the_wrong_length():
    with pytest.raises(fluid.OpRunError, match="the mask has 4 entries but the input has 5"):
        run_op(OpCase("split_lod_tensor", {"X": X, "Mask": MASK[:4]}))
