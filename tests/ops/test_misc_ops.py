"""Op table: shape, where, scatter, unstack, multiplex, elementwise_mod/floordiv,
reduce_all/any, the batch-size-like random fills, sampling_id; and their layers."""

import re

import numpy as np
import pytest

import parafluid as fluid
from parafluid.testing import OpCase, check_op, rand, run_layers, run_op

BOOLS = np.array([[True, False, True], [False, False, True]])
INTS_X = np.array([[7, -7, 9], [-9, 5, 0]], "int64")
INTS_Y = np.array([[3, 3, -4], [4, -2, 3]], "int64")


def c_mod(X, Y):
    return {"Out": np.fmod(X, Y)}


def c_floordiv(X, Y):
    return {"Out": np.trunc(X / Y).astype(X.dtype)}


def batch_like_check(low, high, shape):
    def check(got, attrs):
        out = got["Out"]
        assert out.shape == shape and out.dtype == np.float32
        assert low <= out.min() and out.max() <= high
        assert len(np.unique(out)) > out.size // 2  # random, not a fill
    return check


def sampling_check(got, attrs):
    ids = got["Out"]
    assert ids.dtype == np.int64 and ids.shape == (400,)
    # rows put all mass on class 2 or spread it 0.25/0.75 over classes 0 and 1
    assert (ids[:200] == 2).all()
    share = (ids[200:] == 1).mean()
    assert set(np.unique(ids[200:])) <= {0, 1} and 0.6 < share < 0.9, share


SAMPLING_X = np.concatenate([np.tile([0.0, 0.0, 1.0], (200, 1)),
                             np.tile([0.25, 0.75, 0.0], (200, 1))]).astype("float32")

ND_INDEX = np.array([[[0, 1], [2, 3]], [[1, 1], [0, 1]]], "int64")  # [0, 1] twice


def scatter_nd_add_ref(X, Index, Updates):
    out = X.copy()
    for pos, upd in zip(Index.reshape(-1, 2), Updates.reshape(-1, X.shape[-1])):
        out[tuple(pos)] += upd
    return {"Out": out}


def mean_iou_ref(Predictions, Labels, attrs):
    n = attrs["num_classes"]
    correct, wrong = np.zeros(n, "int32"), np.zeros(n, "int32")
    for p, lab in zip(Predictions, Labels):
        if p == lab:
            correct[p] += 1
        else:
            wrong[p] += 1
            wrong[lab] += 1
    denom = correct + wrong
    iou = np.where(denom > 0, correct / np.maximum(denom, 1), 0)
    return {"OutMeanIou": np.array([iou.sum() / (denom > 0).sum()], "float32"),
            "OutWrong": wrong, "OutCorrect": correct}


CASES = [
    OpCase("shape", {"Input": rand(2, 3, 4)},
           ref=lambda Input: {"Out": np.array([2, 3, 4], "int32")}),
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
    OpCase("elementwise_mod", {"X": INTS_X, "Y": INTS_Y}, ref=c_mod),
    OpCase("elementwise_mod", {"X": rand(2, 3, high=5.0), "Y": np.array([1.5, -2.0, 0.7])},
           ref=c_mod, id="elementwise_mod_float_broadcast"),
    OpCase("elementwise_floordiv", {"X": INTS_X, "Y": INTS_Y}, ref=c_floordiv),
    OpCase("reduce_all", {"X": BOOLS}, attrs={"dim": [0]},
           ref=lambda X: {"Out": X.all(0)}),
    OpCase("reduce_any", {"X": BOOLS}, attrs={"dim": [1], "keep_dim": True},
           ref=lambda X: {"Out": X.any(1, keepdims=True)}),
    OpCase("reduce_any", {"X": BOOLS}, attrs={"reduce_all": True},
           ref=lambda X: {"Out": np.array([True])}, id="reduce_any_all_dims"),
    OpCase("uniform_random_batch_size_like", {"Input": rand(7, 2)},
           attrs={"shape": [-1, 50], "min": 2.0, "max": 3.0, "seed": 5},
           check=batch_like_check(2.0, 3.0, (7, 50))),
    OpCase("gaussian_random_batch_size_like", {"Input": rand(2, 9)},
           attrs={"shape": [40, -1], "input_dim_idx": 1, "output_dim_idx": 1,
                  "mean": 1.0, "std": 0.1, "seed": 3},
           check=batch_like_check(0.0, 2.0, (40, 9))),
    OpCase("sampling_id", {"X": SAMPLING_X}, attrs={"seed": 7}, check=sampling_check),
    OpCase("size", {"Input": rand(2, 3, 4)}, ref=lambda Input: {"Out": np.array([24])}),
    OpCase("expand_as", {"X": rand(2, 1, 3), "target_tensor": rand(4, 3, 3, seed=1)},
           ref=lambda X, target_tensor: {"Out": np.tile(X, (2, 3, 1))}, grad=["X"]),
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
    OpCase("mean_iou", {"Predictions": np.array([0, 1, 1, 2, 2, 0], "int32"),
                        "Labels": np.array([0, 1, 2, 2, 2, 1], "int32")},
           attrs={"num_classes": 4}, ref=mean_iou_ref),
    OpCase("strided_slice", {"Input": rand(4, 5, 3)},
           attrs={"axes": [0, 1], "starts": [1, -1], "ends": [100, -6], "strides": [2, -2]},
           ref=lambda Input: {"Out": Input[1:100:2, -1:-6:-2]}, grad=["Input"]),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_op(case):
    check_op(case)


def test_gaussian_batch_size_like_statistics():
    case = OpCase("gaussian_random_batch_size_like", {"Input": rand(4000, 1)},
                  attrs={"shape": [-1, 5], "mean": 1.0, "std": 0.5, "seed": 11})
    out = run_op(case)["Out"]
    assert abs(out.mean() - 1.0) < 0.02 and abs(out.std() - 0.5) < 0.02




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


def test_layers_scatter_multiplex_mod_and_clip_by_norm():
    x_np = rand(4, 3, seed=3).astype("float32") * 10

    def build():
        x = fluid.layers.data(name="x", shape=[3], dtype="float32")
        ids = fluid.layers.data(name="ids", shape=[1], dtype="int32")
        rows = fluid.layers.assign(np.array([2, 0], "int64"))
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
    index = np.array([[1, 2], [0, 0], [1, 2]], "int64")
    upd = np.array([1.0, 2.0, 3.0], "float32")

    def build():
        idx = fluid.layers.assign(index)
        u = fluid.layers.assign(upd)
        return [fluid.layers.scatter_nd(idx, u, shape=[2, 3])]

    out, = run_layers(build, {})
    np.testing.assert_allclose(out, [[2.0, 0, 0], [0, 0, 4.0]])


@pytest.mark.parametrize("data,seed,want", [
    # reference values of the xxHash library (XXH64)
    (b"", 0, 0xEF46DB3751D8E999),
    (b"abc", 0, 0x44BC2CF5AD770999),
    (bytes(range(40)), 0, 17715543491017654761),
    (bytes(range(101)), 7, 16751395520403760378),
])
def test_xxh64_matches_the_reference(data, seed, want):
    from parafluid.ops.embedding import xxh64

    assert xxh64(data, seed) == want


def test_hash_op_hashes_int32_rows_with_one_seed_per_hash():
    rows = np.array([[1, 2, 3], [7, 7, 7], [1, 2, 3]], "int32")
    case = OpCase("hash", {"X": rows}, attrs={"num_hash": 2, "mod_by": 1000},
                  ref=lambda X: {"Out": np.array([[756, 228], [208, 658], [756, 228]])[..., None]})
    check_op(case)


def test_integer_division_by_zero_is_an_error():
    case = OpCase("elementwise_floordiv", {"X": INTS_X, "Y": np.zeros_like(INTS_Y)})
    with pytest.raises(fluid.OpRunError, match="integer division by zero"):
        run_op(case)


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
