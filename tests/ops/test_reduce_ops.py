"""Op table: reduction family (reduce_*, reduce_all / reduce_any, arg_max / arg_min, top_k,
argsort)."""

import numpy as np
import pytest

from parafluid.testing import OpCase, check_op, rand


def _distinct(*shape, seed=0):
    """A random permutation of well-separated values: no ties for max/min/top-k."""
    n = int(np.prod(shape))
    return (np.random.RandomState(seed).permutation(n).astype("float64") / n - 0.5).reshape(shape)


def reduce_case(op, fn, x, dim=None, keep_dim=False, id=None, grad=True):
    attrs = {"keep_dim": keep_dim}
    if dim is None:
        attrs["reduce_all"] = True
    else:
        attrs["dim"] = dim

    def ref(X):
        axis = None if dim is None else tuple([dim] if isinstance(dim, int) else dim)
        out = fn(X, axis=axis, keepdims=keep_dim)
        return {"Out": np.reshape(out, (1,)) if np.ndim(out) == 0 else out}
    return OpCase(op, {"X": x}, ref=ref, attrs=attrs, grad=["X"] if grad else [], id=id)


X = _distinct(2, 3, 4)

BOOLS = np.array([[True, False, True], [False, False, True]])

X34 = rand(3, 4, seed=3)

CASES = [
    reduce_case("reduce_sum", np.sum, X, dim=[1], id="sum_dim1"),
    reduce_case("reduce_sum", np.sum, X, dim=[0, 2], keep_dim=True, id="sum_dims_keep"),
    reduce_case("reduce_sum", np.sum, X, id="sum_all"),
    reduce_case("reduce_sum", np.sum, X, keep_dim=True, id="sum_all_keep"),
    reduce_case("reduce_sum", np.sum, X, dim=-1, id="sum_negative_int_dim"),
    reduce_case("reduce_mean", np.mean, X, dim=[2], id="mean_dim2"),
    reduce_case("reduce_mean", np.mean, X, id="mean_all"),
    reduce_case("reduce_max", np.max, X, dim=[1], id="max_dim1"),
    reduce_case("reduce_max", np.max, X, id="max_all"),
    reduce_case("reduce_min", np.min, X, dim=[0], keep_dim=True, id="min_dim0_keep"),
    reduce_case("reduce_prod", np.prod, rand(2, 3, low=0.5, high=1.5), dim=[1], id="prod_dim1"),
    reduce_case("reduce_sum", np.sum, rand(3, 4).astype("float32"), dim=[0], grad=False,
                id="sum_float32"),
    reduce_case("reduce_sum", np.sum, np.arange(12).reshape(3, 4).astype("int32"), dim=[1],
                grad=False, id="sum_int32_keeps_dtype"),
    OpCase("reduce_sum", {"X": X}, attrs={},
           ref=lambda X: {"Out": X.sum(axis=0)}, grad=["X"], id="sum_default_dim0"),
    OpCase("arg_max", {"X": X}, attrs={"axis": 1},
           ref=lambda X: {"Out": X.argmax(axis=1)}),
    OpCase("arg_max", {"X": X}, attrs={"axis": -1, "keepdims": True},
           ref=lambda X: {"Out": X.argmax(axis=-1)[..., None]}, id="arg_max_keepdims"),
    OpCase("arg_max", {"X": _distinct(5)}, attrs={"axis": 0},
           ref=lambda X: {"Out": np.array([X.argmax()])}, id="arg_max_1d_gives_shape_1"),
    OpCase("arg_min", {"X": X}, attrs={"axis": 0}, ref=lambda X: {"Out": X.argmin(axis=0)}),
    OpCase("top_k", {"X": _distinct(3, 5)}, attrs={"k": 2},
           ref=lambda X: {"Out": -np.sort(-X, axis=-1)[:, :2],
                          "Indices": np.argsort(-X, axis=-1)[:, :2]}, grad=["X"]),
    OpCase("top_k", {"X": _distinct(2, 2, 4)}, attrs={"k": 1},
           ref=lambda X: {"Out": X.max(axis=-1, keepdims=True),
                          "Indices": X.argmax(axis=-1)[..., None]}, grad=["X"], id="top_k_3d"),
    OpCase("reduce_all", {"X": BOOLS}, attrs={"dim": [0]},
           ref=lambda X: {"Out": X.all(0)}),
    OpCase("reduce_any", {"X": BOOLS}, attrs={"dim": [1], "keep_dim": True},
           ref=lambda X: {"Out": X.any(1, keepdims=True)}),
    OpCase("reduce_any", {"X": BOOLS}, attrs={"reduce_all": True},
           ref=lambda X: {"Out": np.array([True])}, id="reduce_any_all_dims"),
    OpCase("argsort", {"X": X34}, attrs={"axis": 1},
           ref=lambda X: {"Out": np.sort(X, 1), "Indices": np.argsort(X, 1, kind="stable")}),
    OpCase("argsort", {"X": X34}, attrs={"axis": 0, "descending": True},
           ref=lambda X: {"Out": -np.sort(-X, 0),
                          "Indices": np.argsort(-X, 0, kind="stable")}, id="argsort_desc"),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_op(case):
    check_op(case)


def test_reduce_max_gradient_goes_to_every_tied_element():
    import parafluid as fluid

    prog = fluid.Program()
    with fluid.program_guard(prog, fluid.Program()):
        x = fluid.layers.data("x", shape=[2, 3], dtype="float64", append_batch_size=False)
        x.stop_gradient = False
        y = fluid.layers.reduce_max(x, dim=1)
        (gx,) = fluid.gradients([y], [x])
    (g,) = fluid.Executor(fluid.CPUPlace()).run(
        prog, feed={"x": np.array([[1.0, 3.0, 3.0], [0.0, -1.0, 2.0]])}, fetch_list=[gx],
        scope=fluid.Scope())
    np.testing.assert_array_equal(g, [[0, 1, 1], [0, 0, 1]])


@pytest.mark.parametrize("attrs, message", [
    ({"dim": [3]}, "reduce_sum: dim 3 is out of range for an input of rank 3"),
    ({"dim": [-4]}, "reduce_sum: dim -4 is out of range"),
])
def test_reduce_bad_dim_names_op_and_rank(attrs, message):
    with pytest.raises(ValueError, match=message):
        check_op(OpCase("reduce_sum", {"X": X}, attrs=attrs))


def test_top_k_rejects_k_larger_than_last_dim():
    with pytest.raises(ValueError, match=r"top_k: k=6 must be in 1..5"):
        check_op(OpCase("top_k", {"X": _distinct(3, 5)}, attrs={"k": 6}))
