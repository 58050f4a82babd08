"""Op table: IfElse's split_lod_tensor / merge_lod_tensor over sequences (an input with LoD,
the mask one entry per sequence of LoD level ``level``), values, LoDs and gradients, against
references written from Fluid 1.6's definition (an item is a sequence with everything
beneath it; the outputs carry the items' own LoD)."""

from __future__ import annotations

import numpy as np
import pytest

import parafluid as fluid
from parafluid.testing import OpCase, check_op, rand

X = rand(10, 2, seed=5)
MASK3 = np.array([[False], [True], [False]])
TWO_LEVEL = [[0, 2, 3], [0, 1, 3, 6]]  # 2 top sequences over 3 sequences of 1, 2, 3 rows
X6 = rand(6, 2, seed=6)
MASK_TFT = np.array([[True], [False], [True]])

LOD_CASES = [
    OpCase("split_lod_tensor", {"X": X, "Mask": MASK3}, lod={"X": [[0, 3, 9, 10]]},
           ref=lambda X, Mask: {"OutTrue": X[3:9], "OutFalse": X[[0, 1, 2, 9]]},
           grad=["X"], id="split_lod_tensor_sequences_level0"),
    OpCase("split_lod_tensor", {"X": X6, "Mask": MASK_TFT}, attrs={"level": 1},
           lod={"X": TWO_LEVEL},
           ref=lambda X, Mask: {"OutTrue": X[[0, 3, 4, 5]], "OutFalse": X[1:3]},
           grad=["X"], id="split_lod_tensor_sequences_level1"),
    OpCase("merge_lod_tensor", {"X": X, "Mask": MASK3, "InTrue": X[3:9],
                                "InFalse": X[[0, 1, 2, 9]]},
           lod={"X": [[0, 3, 9, 10]], "InTrue": [[0, 6]], "InFalse": [[0, 3, 4]]},
           ref=lambda X, Mask, InTrue, InFalse: {"Out": X},
           grad=["InTrue", "InFalse"], id="merge_lod_tensor_sequences_level0"),
    OpCase("merge_lod_tensor", {"X": X6, "Mask": MASK_TFT, "InTrue": X6[[0, 3, 4, 5]],
                                "InFalse": X6[1:3]}, attrs={"level": 1},
           lod={"X": TWO_LEVEL, "InTrue": [[0, 1, 4]], "InFalse": [[0, 2]]},
           ref=lambda X, Mask, InTrue, InFalse: {"Out": X},
           grad=["InTrue", "InFalse"], id="merge_lod_tensor_sequences_level1"),
]


@pytest.mark.parametrize("case", LOD_CASES, ids=str)
def test_op(case):
    check_op(case)


def _lod_tensor(a, lengths):
    t = fluid.LoDTensor()
    t.set(a, fluid.CPUPlace())
    t.set_recursive_sequence_lengths(lengths)
    return t


def _split_merge(x, lengths, mask, level):
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        xv = fluid.layers.data("x", shape=[2], dtype="float64", lod_level=len(lengths))
        mv = fluid.layers.data("m", shape=[1], dtype="bool")
        t, f = fluid.layers.split_lod_tensor(input=xv, mask=mv, level=level)
        out = fluid.layers.merge_lod_tensor(in_true=t, in_false=f, x=xv, mask=mv,
                                            level=level)
    exe = fluid.Executor(fluid.CPUPlace())
    return exe.run(main, feed={"x": _lod_tensor(x, lengths), "m": mask},
                   fetch_list=[t, f, out], return_numpy=False, scope=fluid.Scope())


def test_split_and_merge_carry_the_items_lod():
    t, f, out = _split_merge(X, [[3, 6, 1]], MASK3, 0)
    assert t.recursive_sequence_lengths() == [[6]]
    assert f.recursive_sequence_lengths() == [[3, 1]]
    np.testing.assert_array_equal(np.array(out), X)
    assert out.recursive_sequence_lengths() == [[3, 6, 1]]


def test_split_at_level1_keeps_the_levels_beneath_and_merge_puts_back_those_above():
    t, f, out = _split_merge(X6, [[2, 1], [1, 2, 3]], MASK_TFT, 1)
    assert t.recursive_sequence_lengths() == [[1, 3]]
    assert f.recursive_sequence_lengths() == [[2]]
    np.testing.assert_array_equal(np.array(out), X6)
    assert out.recursive_sequence_lengths() == [[2, 1], [1, 2, 3]]


def test_split_names_a_mask_that_does_not_count_the_sequences():
    with pytest.raises(fluid.OpRunError, match="the mask has 3 entries but the input has 2 "
                                               "sequences at LoD level 0"):
        _split_merge(X, [[3, 7]], MASK3, 0)


def test_a_persistable_output_keeps_its_lod_in_the_scope():
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        xv = fluid.layers.data("x", shape=[2], dtype="float64", lod_level=1)
        mv = fluid.layers.data("m", shape=[1], dtype="bool")
        t, _ = fluid.layers.split_lod_tensor(input=xv, mask=mv, level=0)
        t.persistable = True
    scope = fluid.Scope()
    fluid.Executor(fluid.CPUPlace()).run(
        main, feed={"x": _lod_tensor(X, [[3, 6, 1]]), "m": MASK3}, scope=scope)
    held = scope.find_var(t.name).get_tensor()
    np.testing.assert_array_equal(np.array(held), X[3:9])
    assert held.recursive_sequence_lengths() == [[6]]
