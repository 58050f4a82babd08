"""Op table: tensor family (fills, assign, range, linspace, eye, diag, cast, concat, split,
reshape, transpose, squeeze, unsqueeze, expand / expand_as, reverse, one_hot, shape, size)."""

import numpy as np
import pytest

import parafluid as fluid
from parafluid.testing import OpCase, check_op, rand, run_layers

X = rand(2, 3, 4)
LABELS = np.array([[3], [0], [1], [4]], dtype="int64")

X34 = rand(3, 4, seed=3)

CASES = [
    OpCase("cast", {"X": rand(3, 4)}, attrs={"in_dtype": "float64", "out_dtype": "float32"},
           ref=lambda X: {"Out": X.astype("float32")}, grad=["X"],
           # cast is linear: a large step is exact up to float32 rounding of the output
           fd_eps=1e-2, grad_atol=1e-4, id="cast_f64_to_f32"),
    OpCase("cast", {"X": np.array([[1.7, -2.2], [0.0, 3.9]])},
           attrs={"in_dtype": "float64", "out_dtype": "int64"},
           ref=lambda X: {"Out": X.astype("int64")}, id="cast_to_int64_truncates"),
    OpCase("cast", {"X": LABELS}, attrs={"in_dtype": "int64", "out_dtype": "float32"},
           ref=lambda X: {"Out": X.astype("float32")}, id="cast_int_to_float"),
    OpCase("concat", {"X": [rand(2, 3), rand(2, 1, seed=1), rand(2, 2, seed=2)]},
           attrs={"axis": 1}, ref=lambda X: {"Out": np.concatenate(X, axis=1)}, grad=["X"]),
    OpCase("concat", {"X": [rand(1, 3), rand(2, 3, seed=1)]},
           ref=lambda X: {"Out": np.concatenate(X, axis=0)}, grad=["X"], id="concat_axis0"),
    OpCase("concat", {"X": [X, rand(2, 3, 2, seed=1)]}, attrs={"axis": -1},
           ref=lambda X: {"Out": np.concatenate(X, axis=-1)}, grad=["X"],
           id="concat_negative_axis"),
    OpCase("split", {"X": rand(4, 6)}, attrs={"axis": 1, "num": 3}, out_counts={"Out": 3},
           ref=lambda X: {"Out": np.split(X, 3, axis=1)}, grad=["X"]),
    OpCase("split", {"X": rand(5, 2)}, attrs={"axis": 0, "sections": [2, -1, 1]},
           out_counts={"Out": 3}, ref=lambda X: {"Out": [X[:2], X[2:4], X[4:]]}, grad=["X"],
           id="split_sections_infer"),
    OpCase("split_byref", {"X": rand(5, 2)}, attrs={"sections": [3, 2]},
           out_counts={"Out": 2}, ref=lambda X: {"Out": [X[:3], X[3:]]}, grad=["X"]),
    OpCase("reshape", {"X": X}, attrs={"shape": [0, -1]},
           ref=lambda X: {"Out": X.reshape(2, 12)}, grad=["X"], id="reshape_copy_and_infer"),
    OpCase("reshape", {"X": X}, attrs={"shape": [4, 6]},
           ref=lambda X: {"Out": X.reshape(4, 6)}, grad=["X"]),
    OpCase("reshape", {"X": X, "Shape": np.array([6, 4], dtype="int32")},
           attrs={"shape": [-1, 2]}, ref=lambda X, Shape: {"Out": X.reshape(6, 4)}, grad=["X"],
           id="reshape_actual_shape_wins"),
    OpCase("transpose", {"X": X}, attrs={"axis": [2, 0, 1]},
           ref=lambda X: {"Out": X.transpose(2, 0, 1)}, grad=["X"]),
    OpCase("transpose", {"X": rand(3, 4)}, attrs={"axis": [1, 0]},
           ref=lambda X: {"Out": X.T}, grad=["X"], id="transpose_2d"),
    OpCase("squeeze", {"X": rand(2, 1, 3, 1)}, attrs={"axes": [1]},
           ref=lambda X: {"Out": X.reshape(2, 3, 1)}, grad=["X"]),
    OpCase("squeeze", {"X": rand(2, 1, 3, 1)}, attrs={"axes": []},
           ref=lambda X: {"Out": X.reshape(2, 3)}, grad=["X"], id="squeeze_all"),
    OpCase("unsqueeze", {"X": rand(2, 3)}, attrs={"axes": [0, 2]},
           ref=lambda X: {"Out": X.reshape(1, 2, 1, 3)}, grad=["X"]),
    OpCase("unsqueeze", {"X": rand(2, 3)}, attrs={"axes": [-1]},
           ref=lambda X: {"Out": X[..., None]}, grad=["X"], id="unsqueeze_last"),
    OpCase("expand", {"X": rand(2, 3)}, attrs={"expand_times": [2, 3]},
           ref=lambda X: {"Out": np.tile(X, (2, 3))}, grad=["X"]),
    OpCase("one_hot", {"X": LABELS}, attrs={"depth": 5},
           ref=lambda X: {"Out": np.eye(5, dtype="float32")[X[:, 0]]}),
    OpCase("one_hot", {"X": np.array([[1], [7], [-1]], dtype="int64")},
           attrs={"depth": 3, "allow_out_of_range": True},
           ref=lambda X: {"Out": np.array([[0, 1, 0], [0, 0, 0], [0, 0, 0]], "float32")},
           id="one_hot_out_of_range_rows_are_zero"),
    OpCase("fill_constant_batch_size_like", {"Input": rand(5, 3)},
           attrs={"shape": [-1, 7], "value": 2.5, "dtype": "float32"},
           ref=lambda Input: {"Out": np.full((5, 7), 2.5, "float32")}),
    OpCase("fill_constant_batch_size_like", {"Input": rand(5, 3)},
           attrs={"shape": [2, -1], "value": 1.0, "dtype": "int64", "input_dim_idx": 1,
                  "output_dim_idx": 1},
           ref=lambda Input: {"Out": np.ones((2, 3), "int64")}, id="fill_batch_like_dims"),
    OpCase("shape", {"Input": rand(2, 3, 4)},
           ref=lambda Input: {"Out": np.array([2, 3, 4], "int32")}),
    OpCase("size", {"Input": rand(2, 3, 4)}, ref=lambda Input: {"Out": np.array([24])}),
    OpCase("expand_as", {"X": rand(2, 1, 3), "target_tensor": rand(4, 3, 3, seed=1)},
           ref=lambda X, target_tensor: {"Out": np.tile(X, (2, 3, 1))}, grad=["X"]),
    OpCase("reverse", {"X": X34}, attrs={"axis": [0, 1]},
           ref=lambda X: {"Out": X[::-1, ::-1]}, grad=["X"]),
    OpCase("range", {"Start": np.array([1.0], "float32"), "End": np.array([2.0], "float32"),
                     "Step": np.array([0.25], "float32")},
           ref=lambda Start, End, Step: {"Out": np.arange(1.0, 2.0, 0.25, dtype="float32")}),
    OpCase("linspace", {"Start": np.array([0.0], "float32"), "Stop": np.array([1.0], "float32"),
                        "Num": np.array([5], "int32")},
           ref=lambda Start, Stop, Num: {"Out": np.linspace(0, 1, 5).astype("float32")}),
    OpCase("eye", {}, attrs={"num_rows": 2, "num_columns": 3},
           ref=lambda: {"Out": np.eye(2, 3, dtype="float32")}),
    OpCase("diag", {"Diagonal": np.array([1.0, 2.0, 3.0], "float32")},
           ref=lambda Diagonal: {"Out": np.diag(Diagonal)}),
    OpCase("fill_constant", {}, attrs={"shape": [2, 3], "value": 1.5, "dtype": "float32"},
           ref=lambda: {"Out": np.full((2, 3), 1.5, "float32")}),
    OpCase("fill_constant", {}, attrs={"shape": [4], "value": 7, "dtype": "int64"},
           ref=lambda: {"Out": np.full(4, 7, "int64")}, id="fill_constant_int64"),
    OpCase("fill_zeros_like", {"X": rand(3, 2)}, ref=lambda X: {"Out": np.zeros_like(X)}),
    OpCase("fill_any_like", {"X": rand(3, 2)}, attrs={"value": 2.0},
           ref=lambda X: {"Out": np.full_like(X, 2.0)}),
    OpCase("assign", {"X": rand(3, 2)}, ref=lambda X: {"Out": X}, grad=["X"]),
    OpCase("assign_value", {}, attrs={"shape": [2, 2], "dtype": "float32",
                                      "values": [1.0, 2.0, 3.0, 4.0]},
           ref=lambda: {"Out": np.array([[1, 2], [3, 4]], "float32")}),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_op(case):
    check_op(case)


@pytest.mark.parametrize("op, inputs, attrs, message", [
    ("reshape", {"X": X}, {"shape": [5, -1]}, r"reshape: cannot reshape X \[2, 3, 4\]"),
    ("reshape", {"X": X}, {"shape": [-1, -1]}, "at most one -1"),
    ("reshape", {"X": X}, {"shape": [4, 5]}, r"\(24 elements\) to \[4, 5\] \(20 elements\)"),
    ("transpose", {"X": X}, {"axis": [0, 0, 1]}, "not a permutation"),
    ("split", {"X": rand(4, 6)}, {"axis": 1, "num": 4}, "6 does not divide into num=4"),
    ("split", {"X": rand(4, 6)}, {"axis": 1, "sections": [2, 2]}, "sum to 4, not to the"),
    ("concat", {"X": [rand(2, 3), rand(3, 3)]}, {"axis": 1}, "must match except on axis 1"),
    ("squeeze", {"X": rand(2, 3)}, {"axes": [1]}, "has size 3, not 1"),
])
def test_bad_attrs_are_reported_with_the_op_name(op, inputs, attrs, message):
    with pytest.raises(ValueError, match=message):
        check_op(OpCase(op, inputs, attrs=attrs, out_counts={"Out": 2} if op == "split" else {}))


def test_one_hot_checks_its_ids_when_it_runs_as_fluid():
    """Fluid's shape rule takes any last dim and dtype when the program is built (a program
    may declare X otherwise); running it on ids that are not [..., 1] ints is the error."""
    from parafluid.engine.runtime import OpRunError

    with pytest.raises(OpRunError, match="the last dimension of X must be 1"):
        check_op(OpCase("one_hot", {"X": np.ones((4, 2), "int64")}, attrs={"depth": 3}))
    with pytest.raises(OpRunError, match="X must hold int32 or int64 ids, got float64"):
        check_op(OpCase("one_hot", {"X": rand(4, 1)}, attrs={"depth": 3}))


def test_one_hot_out_of_range_is_an_error_by_default():
    from parafluid.engine.runtime import OpRunError

    with pytest.raises(OpRunError, match=r"one_hot: values \[7\] are outside \[0, 3\)"):
        check_op(OpCase("one_hot", {"X": np.array([[1], [7]], dtype="int64")},
                        attrs={"depth": 3}))


def test_split_grad_fills_missing_piece_gradients_with_zeros():
    """Only the first piece reaches the loss: the others' gradients are zero-filled."""
    import parafluid as fluid

    prog = fluid.Program()
    with fluid.program_guard(prog, fluid.Program()):
        x = fluid.layers.data("x", shape=[2, 6], dtype="float64", append_batch_size=False)
        x.stop_gradient = False
        a, _, _ = fluid.layers.split(x, num_or_sections=3, dim=1)
        loss = fluid.layers.reduce_sum(fluid.layers.square(a))
        (gx,) = fluid.gradients([loss], [x])
    types = [op.type for op in prog.global_block().ops]
    assert types.count("fill_zeros_like") == 2 and "concat" in types, types
    prog.verify()
    xv = rand(2, 6)
    (g,) = fluid.Executor(fluid.CPUPlace()).run(prog, feed={"x": xv}, fetch_list=[gx],
                                                scope=fluid.Scope())
    want = np.zeros_like(xv)
    want[:, :2] = 2 * xv[:, :2]
    np.testing.assert_allclose(g, want)


def test_cast_from_int_has_no_gradient_op():
    import parafluid as fluid

    prog = fluid.Program()
    with fluid.program_guard(prog, fluid.Program()):
        label = fluid.layers.data("label", shape=[1], dtype="int64")
        x = fluid.layers.data("x", shape=[1], dtype="float32")
        x.stop_gradient = False
        y = fluid.layers.elementwise_mul(x, fluid.layers.cast(label, "float32"))
        fluid.gradients([fluid.layers.mean(y)], [x])
    assert "cast_grad" not in [op.type for op in prog.global_block().ops]
    assert [op.type for op in prog.global_block().ops].count("cast") == 1


def test_gradients_is_none_when_no_split_piece_has_a_gradient():
    """Regression: zero fills of a dropped split_grad were counted as produced gradients,
    so ``gradients`` looked up a variable that no op writes."""
    import parafluid as fluid

    prog = fluid.Program()
    with fluid.program_guard(prog, fluid.Program()):
        x = fluid.layers.data("x", shape=[2, 4], dtype="float64", append_batch_size=False)
        x.stop_gradient = False
        a, _ = fluid.layers.split(x, 2, dim=1)
        rounded = fluid.layers.cast(fluid.layers.cast(a, "int32"), "float64")
        assert fluid.gradients([fluid.layers.mean(rounded)], [x, a]) == [None, None]
    assert "fill_zeros_like" not in [op.type for op in prog.global_block().ops]
    prog.verify()


def test_checker_fails_when_a_list_output_has_fewer_values_than_the_reference():
    """The checker compares every listed value: a missing piece is a failure, not skipped."""
    from parafluid.testing import check_forward

    case = OpCase("split", {"X": rand(4, 6)}, attrs={"axis": 1, "num": 2}, out_counts={"Out": 2},
                  ref=lambda X: {"Out": np.split(X, 2, axis=1) + [X]})
    with pytest.raises(AssertionError, match="Out has 2 values, the reference 3"):
        check_forward(case)


def test_layers_shape_rank_sum_where_unstack():
    x_np = rand(3, 4, seed=2).astype("float32")

    def build():
        x = fluid.layers.data(name="x", shape=[4], dtype="float32")
        parts = fluid.layers.unstack(x, axis=1)
        total = fluid.layers.sum(parts)
        zero = fluid.layers.fill_constant([1], "float32", 0.0)
        pos = fluid.layers.where(fluid.layers.greater_than(x, zero))
        any_pos = fluid.layers.reduce_any(fluid.layers.greater_than(x, zero), dim=1)
        return [fluid.layers.shape(x), fluid.layers.rank(x), total, pos, any_pos]

    shape, rank, total, pos, any_pos = run_layers(build, {"x": x_np})
    np.testing.assert_array_equal(shape, [3, 4])
    np.testing.assert_array_equal(rank, [2])
    np.testing.assert_allclose(total, x_np.sum(1), rtol=1e-6)
    np.testing.assert_array_equal(pos, np.argwhere(x_np > 0))
    np.testing.assert_array_equal(any_pos, (x_np > 0).any(1))


def test_the_layers_in_a_program():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data(name="x", shape=[3], dtype="float32")
        w = fluid.layers.create_parameter(shape=[3, 2], dtype="float32", name="w")
        y = fluid.layers.matmul(x, w)
        outs = [fluid.layers.zeros_like(y), fluid.layers.ones_like(y),
                fluid.layers.cumsum(x, axis=1, exclusive=True),
                fluid.layers.reverse(x, axis=1), fluid.layers.argsort(x, axis=1)[1],
                fluid.layers.range(0, 6, 2, "int64"), fluid.layers.linspace(0.0, 1.0, 3,
                                                                            "float32"),
                fluid.layers.eye(2, batch_shape=[3]),
                fluid.layers.diag(np.array([1.0, 2.0], "float32")),
                fluid.layers.isfinite(x), fluid.layers.has_inf(x), fluid.layers.has_nan(x)]
        loss = fluid.layers.mean(y)
        fluid.optimizer.SGD(0.1).minimize(loss)
    assert "w" in [p.name for p in main.global_block().all_parameters()]
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    xs = np.array([[3.0, 1.0, 2.0], [0.5, -1.0, 4.0]], "float32")
    w0 = np.array(fluid.global_scope().find_var("w").get_tensor()).copy()
    got = exe.run(main, feed={"x": xs}, fetch_list=outs)
    np.testing.assert_array_equal(got[0], np.zeros((2, 2)))
    np.testing.assert_array_equal(got[1], np.ones((2, 2)))
    np.testing.assert_allclose(got[2], np.cumsum(xs, 1) - xs)
    np.testing.assert_array_equal(got[3], xs[:, ::-1])
    np.testing.assert_array_equal(got[4], np.argsort(xs, 1, kind="stable"))
    np.testing.assert_array_equal(got[5], [0, 2, 4])
    np.testing.assert_allclose(got[6], [0.0, 0.5, 1.0])
    np.testing.assert_array_equal(got[7], np.stack([np.eye(2)] * 3))
    np.testing.assert_array_equal(got[8], np.diag([1.0, 2.0]))
    assert [bool(g[0]) for g in got[9:]] == [True, False, False]
    w1 = np.array(fluid.global_scope().find_var("w").get_tensor())
    assert not np.allclose(w0, w1), "create_parameter's parameter is trained"


def test_range_with_a_zero_step_names_the_op():
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        r = fluid.layers.range(0, 3, 0, "float32")
    with pytest.raises(fluid.OpRunError, match="range: Step must not be 0"):
        fluid.Executor(fluid.CPUPlace()).run(main, fetch_list=[r])
