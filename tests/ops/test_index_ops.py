"""Op table: indexing ops (gather, gather_nd, scatter, scatter_nd_add, slice, strided_slice,
multiplex, where, unique, stack / unstack, flatten) and their layers."""

import re

import numpy as np
import pytest

import parafluid as fluid
from parafluid.testing import OpCase, check_op, rand, run_layers, run_op

IDX = np.array([2, 0, 2], "int64")
BOOLS = np.array([[True, False, True], [False, False, True]])

ND_INDEX = np.array([[[0, 1], [2, 3]], [[1, 1], [0, 1]]], "int64")  # [0, 1] twice


def scatter_nd_add_ref(X, Index, Updates):
    out = X.copy()
    for pos, upd in zip(Index.reshape(-1, 2), Updates.reshape(-1, X.shape[-1])):
        out[tuple(pos)] += upd
    return {"Out": out}


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
    OpCase("where", {"Condition": BOOLS}, ref=lambda Condition: {
        "Out": np.argwhere(Condition).astype("int64")}),
    OpCase("scatter", {"X": rand(5, 3), "Ids": np.array([3, 0], "int64"),
                       "Updates": rand(2, 3, seed=1)},
           ref=lambda X, Ids, Updates: {"Out": np.concatenate(
               [Updates[1:2], X[1:3], Updates[0:1], X[4:]])},
           grad=["X", "Updates"]),
    OpCase("scatter", {"X": rand(4, 2), "Ids": np.array([1, 1, 2], "int64"),
                       "Updates": rand(3, 2, seed=1)}, attrs={"overwrite": False},
           ref=lambda X, Ids, Updates: {"Out": np.stack(
               [X[0], Updates[0] + Updates[1], Updates[2], X[3]])},
           grad=["X", "Updates"], id="scatter_accumulate"),
    OpCase("unstack", {"X": rand(2, 3, 4)}, attrs={"axis": 1, "num": 3},
           ref=lambda X: {"Y": [X[:, i] for i in range(3)]}, out_counts={"Y": 3},
           grad=["X"]),
    OpCase("multiplex", {"X": [rand(4, 3), rand(4, 3, seed=1), rand(4, 3, seed=2)],
                         "Ids": np.array([[2], [0], [2], [1]], "int32")},
           ref=lambda X, Ids: {"Out": np.stack([X[k][i] for i, k in enumerate(Ids[:, 0])])},
           grad=["X"]),
    OpCase("gather_nd", {"X": rand(3, 4, 2), "Index": ND_INDEX},
           ref=lambda X, Index: {"Out": X[Index[..., 0], Index[..., 1]]}, grad=["X"]),
    OpCase("gather_nd", {"X": rand(3, 4), "Index": np.array([[2], [0], [2]], "int64")},
           ref=lambda X, Index: {"Out": X[Index[:, 0]]}, grad=["X"], id="gather_nd_rows"),
    OpCase("scatter_nd_add", {"X": rand(3, 4, 2), "Index": ND_INDEX,
                              "Updates": rand(2, 2, 2, seed=1)},
           ref=scatter_nd_add_ref, grad=["X", "Updates"]),
    OpCase("unique", {"X": np.array([2, 3, 3, 1, 5, 3], "int64")},
           ref=lambda X: {"Out": np.array([2, 3, 1, 5]),
                          "Index": np.array([0, 1, 1, 2, 3, 1], "int32")}),
    OpCase("unique_with_counts", {"X": np.array([0.5, -1.0, 0.5, 2.0])},
           attrs={"dtype": "int64"},
           ref=lambda X: {"Out": np.array([0.5, -1.0, 2.0]), "Index": np.array([0, 1, 0, 2]),
                          "Count": np.array([2, 1, 1])}),
    OpCase("strided_slice", {"Input": rand(4, 5, 3)},
           attrs={"axes": [0, 1], "starts": [1, -1], "ends": [100, -6], "strides": [2, -2]},
           ref=lambda Input: {"Out": Input[1:100:2, -1:-6:-2]}, grad=["Input"]),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_op(case):
    check_op(case)


def test_gather_out_of_range_names_the_index():
    with pytest.raises(fluid.OpRunError, match="gather: index 7 is out of range for 4 rows"):
        run_op(OpCase("gather", {"X": rand(4, 3), "Index": np.array([1, 7], "int64")}))


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


def test_layers_scatter_multiplex_mod_and_clip_by_norm():
    x_np = rand(4, 3, seed=3).astype("float32") * 10

    def build():
        x = fluid.layers.data(name="x", shape=[3], dtype="float32")
        ids = fluid.layers.data(name="ids", shape=[1], dtype="int32")
        rows = fluid.layers.assign(np.array([2, 0], "int32"))
        upd = fluid.layers.fill_constant([2, 3], "float32", 1.5)
        scattered = fluid.layers.scatter(x, rows, upd)
        picked = fluid.layers.multiplex([x, scattered], ids)
        clipped = fluid.layers.clip_by_norm(x, max_norm=1.0)
        two = fluid.layers.fill_constant([1], "float32", 4.0)
        return [picked, clipped, fluid.layers.elementwise_mod(x, two),
                fluid.layers.elementwise_floordiv(x, two)]

    ids = np.array([[1], [0], [1], [0]], "int32")
    picked, clipped, mod, div = run_layers(build, {"x": x_np, "ids": ids})
    scattered = x_np.copy()
    scattered[[2, 0]] = 1.5
    np.testing.assert_allclose(picked, np.where(ids == 1, scattered, x_np))
    np.testing.assert_allclose(clipped, x_np / np.linalg.norm(x_np), rtol=1e-5)
    np.testing.assert_allclose(mod, np.fmod(x_np, 4.0), rtol=1e-5)
    np.testing.assert_allclose(div, np.trunc(x_np / 4.0))


def test_scatter_nd_layer_builds_on_zeros():
    index = np.array([[1, 2], [0, 0], [1, 2]], "int32")
    upd = np.array([1.0, 2.0, 3.0], "float32")

    def build():
        idx = fluid.layers.assign(index)
        u = fluid.layers.assign(upd)
        return [fluid.layers.scatter_nd(idx, u, shape=[2, 3])]

    out, = run_layers(build, {})
    np.testing.assert_allclose(out, [[2.0, 0, 0], [0, 0, 4.0]])


@pytest.mark.parametrize("op,inputs,attrs,message", [
    ("scatter", {"X": rand(3, 2), "Ids": np.array([0], "int64"), "Updates": rand(1, 3)}, {},
     "Updates [1, 3] must be"),
    ("unstack", {"X": rand(2, 3)}, {"axis": 1, "num": 2}, "num=2 must equal dim 1"),
    ("where", {"Condition": rand(2, 2)}, {}, "Condition must be bool"),
    ("multiplex", {"X": [rand(2, 2), rand(2, 3)], "Ids": np.zeros((2, 1), "int32")}, {},
     "same shape"),
])
def test_bad_inputs_name_the_op(op, inputs, attrs, message):
    with pytest.raises((ValueError, TypeError), match=r"(?s)" + op + ".*" + re.escape(message)):
        run_op(OpCase(op, inputs, attrs=attrs))
