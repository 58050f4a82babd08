"""Op table: indexing (gather, slice, stack, flatten) and comparison / logical ops."""

import numpy as np
import pytest

import parafluid as fluid
from parafluid.testing import OpCase, check_op, rand, run_op

A, B = rand(3, 4, seed=1), rand(3, 4, seed=2)
B[0, 0] = A[0, 0]  # one tie, so equal / less_equal see both outcomes
IDX = np.array([2, 0, 2], "int64")

CASES = [
    OpCase("gather", {"X": rand(4, 3), "Index": IDX}, ref=lambda X, Index: {"Out": X[Index]},
           grad=["X"]),
    OpCase("gather", {"X": rand(4, 2, 2), "Index": IDX.reshape(3, 1)},
           ref=lambda X, Index: {"Out": X[Index[:, 0]]}, grad=["X"], id="gather_column_index"),
    OpCase("slice", {"Input": rand(3, 5, 4)}, attrs={"axes": [1, 2], "starts": [1, -3],
                                                     "ends": [10, -1]},
           ref=lambda Input: {"Out": Input[:, 1:, -3:-1]}, grad=["Input"]),
    OpCase("stack", {"X": [rand(2, 3, seed=i) for i in range(3)]}, attrs={"axis": 1},
           ref=lambda X: {"Y": np.stack(X, 1)}, grad=["X"]),
    OpCase("stack", {"X": [rand(2, 3, seed=i) for i in range(2)]}, attrs={"axis": -1},
           ref=lambda X: {"Y": np.stack(X, -1)}, grad=["X"], id="stack_last_axis"),
    OpCase("flatten", {"X": rand(2, 3, 2, 2)}, attrs={"axis": 2},
           ref=lambda X: {"Out": X.reshape(6, 4)}, grad=["X"]),
]
for name, fn in (("less_than", np.less), ("less_equal", np.less_equal),
                 ("greater_than", np.greater), ("greater_equal", np.greater_equal),
                 ("equal", np.equal), ("not_equal", np.not_equal)):
    CASES.append(OpCase(name, {"X": A, "Y": B}, ref=lambda X, Y, fn=fn: {"Out": fn(X, Y)}))
CASES.append(OpCase("less_than", {"X": A, "Y": B[0]}, ref=lambda X, Y: {"Out": X < Y},
                    id="less_than_broadcast"))
P, Q = A > 0, B > 0
for name, fn in (("logical_and", np.logical_and), ("logical_or", np.logical_or),
                 ("logical_xor", np.logical_xor)):
    CASES.append(OpCase(name, {"X": P, "Y": Q}, ref=lambda X, Y, fn=fn: {"Out": fn(X, Y)}))
CASES.append(OpCase("logical_not", {"X": P}, ref=lambda X: {"Out": ~X}))


@pytest.mark.parametrize("case", CASES, ids=str)
def test_op(case):
    check_op(case)


def test_gather_out_of_range_names_the_index():
    with pytest.raises(fluid.OpRunError, match="gather: index 7 is out of range for 4 rows"):
        run_op(OpCase("gather", {"X": rand(4, 3), "Index": np.array([1, 7], "int64")}))


def test_logical_ops_want_bool():
    with pytest.raises(TypeError, match="logical op: X must be bool"):
        run_op(OpCase("logical_not", {"X": A}))


def test_layers_build_the_ops():
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        x = fluid.layers.data(name="x", shape=[4], dtype="float32")
        y = fluid.layers.data(name="y", shape=[4], dtype="float32")
        ids = fluid.layers.data(name="ids", shape=[1], dtype="int64")
        mask = fluid.layers.logical_not(fluid.layers.less_than(x=x, y=y))
        g = fluid.layers.gather(x, index=ids)
        s = fluid.layers.slice(x, axes=[1], starts=[1], ends=[3])
        st = fluid.layers.stack([x, y], axis=0)
        fl = fluid.layers.flatten(st, axis=2)
    assert mask.dtype == "bool" and mask.stop_gradient
    assert g.shape == (-1, 4) and s.shape == (-1, 2) and st.shape == (2, -1, 4)
    assert fl.shape == (-1, 4)
    xs = np.arange(8, dtype="float32").reshape(2, 4)
    exe = fluid.Executor(fluid.CPUPlace())
    m, gv = exe.run(main, feed={"x": xs, "y": np.full((2, 4), 2.5, "float32"),
                                "ids": np.array([[1], [1]], "int64")},
                    fetch_list=[mask, g], scope=fluid.Scope())
    assert m.tolist() == [[False, False, False, True], [True] * 4]
    np.testing.assert_array_equal(gv, xs[[1, 1]])
