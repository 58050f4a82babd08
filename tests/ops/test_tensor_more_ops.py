"""Op table: cumsum, reverse, argsort, range, linspace, eye, diag, isfinite / isinf / isnan;
and their layers (plus create_parameter, zeros_like, ones_like)."""

import numpy as np
import pytest

import parafluid as fluid
from parafluid.testing import OpCase, check_op, rand


def _cumsum_ref(X, attrs):
    axis, x = attrs.get("axis", -1), X
    if attrs.get("reverse"):
        x = np.flip(x, axis)
    out = np.cumsum(x, axis)
    if attrs.get("exclusive"):
        out = out - x
    return {"Out": np.flip(out, axis) if attrs.get("reverse") else out}


X = rand(3, 4, seed=3)
NAN_INF = np.array([1.0, np.inf, -2.0], "float32")

CASES = [
    OpCase("cumsum", {"X": X}, ref=_cumsum_ref, grad=["X"]),
    OpCase("cumsum", {"X": X}, attrs={"axis": 0, "exclusive": True}, ref=_cumsum_ref,
           grad=["X"], id="cumsum_exclusive"),
    OpCase("cumsum", {"X": X}, attrs={"axis": 1, "reverse": True, "exclusive": True},
           ref=_cumsum_ref, grad=["X"], id="cumsum_reverse_exclusive"),
    OpCase("reverse", {"X": X}, attrs={"axis": [0, 1]},
           ref=lambda X: {"Out": X[::-1, ::-1]}, grad=["X"]),
    OpCase("argsort", {"X": X}, attrs={"axis": 1},
           ref=lambda X: {"Out": np.sort(X, 1), "Indices": np.argsort(X, 1, kind="stable")}),
    OpCase("argsort", {"X": X}, attrs={"axis": 0, "descending": True},
           ref=lambda X: {"Out": -np.sort(-X, 0),
                          "Indices": np.argsort(-X, 0, kind="stable")}, id="argsort_desc"),
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
    OpCase("isfinite", {"X": NAN_INF}, ref=lambda X: {"Out": np.array([False])}),
    OpCase("isfinite", {"X": X}, ref=lambda X: {"Out": np.array([True])}, id="isfinite_all"),
    OpCase("isinf", {"X": NAN_INF}, ref=lambda X: {"Out": np.array([True])}),
    OpCase("isnan", {"X": NAN_INF}, ref=lambda X: {"Out": np.array([False])}),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_op(case):
    check_op(case)


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
                fluid.layers.eye(2, batch_shape=[3]), fluid.layers.diag(np.array([1.0, 2.0])),
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
