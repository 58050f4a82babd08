"""Op table: random ops (uniform / gaussian / truncated gaussian fills, their batch-size-like
forms, sampling_id, random_crop, dropout) and the initializers built on them."""

import math
import re

import numpy as np
import pytest

import parafluid as fluid
from parafluid import unique_name
from parafluid.testing import OpCase, check_op, rand, run_op


def _stats(lo=None, hi=None, mean=None, std=None, tol=0.05):
    def check(got, attrs):
        out = got["Out"]
        assert out.shape == tuple(attrs["shape"])
        if lo is not None:
            assert out.min() >= lo and out.max() <= hi
        if mean is not None:
            assert abs(out.mean() - mean) < tol * max(1.0, std)
            assert abs(out.std() - std) < tol * std
    return check


def _init_param(initializer, shape, seed=0):
    """Initialize one fc weight named 'w' in fresh programs; return its value."""
    main, startup = fluid.Program(), fluid.Program()
    startup.random_seed = seed
    with fluid.program_guard(main, startup), unique_name.guard(), \
            fluid.scope_guard(fluid.Scope()):
        x = fluid.layers.data(name="x", shape=[shape[0]], dtype="float32")
        fluid.layers.fc(input=x, size=shape[1],
                        param_attr=fluid.ParamAttr(name="w", initializer=initializer),
                        bias_attr=False)
        fluid.Executor(fluid.CPUPlace()).run(startup)
        return np.array(fluid.global_scope().find_var("w").get_tensor())


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


def bn_inputs(x, c, seed=3):
    return {"X": x, "Scale": rand(c, low=0.5, high=1.5, seed=seed),
            "Bias": rand(c, seed=seed + 1), "Mean": rand(c, seed=seed + 2),
            "Variance": rand(c, low=0.5, high=2.0, seed=seed + 3)}


def dropout_check(p, upscale):
    def check(got, attrs):
        x, out, mask = DROPOUT_X, got["Out"], got["Mask"]
        assert mask.dtype == np.uint8 and set(np.unique(mask)) <= {0, 1}
        keep = mask.mean()
        # 2000 Bernoulli draws: the kept fraction is within 4.5 sigma of 1 - p.
        assert abs(keep - (1 - p)) < 4.5 * math.sqrt(p * (1 - p) / mask.size), keep
        scale = 1.0 / (1 - p) if upscale else 1.0
        np.testing.assert_allclose(out, x * mask * scale, rtol=1e-6)
    return check


DROPOUT_X = rand(40, 50, low=0.5, high=1.5, seed=7).astype("float32")


def _dropout_case(**attrs):
    return OpCase("dropout", {"X": DROPOUT_X}, attrs={"dropout_prob": 0.5, **attrs})


CASES = [
    OpCase("uniform_random", {}, attrs={"shape": [200, 50], "min": -2.0, "max": 3.0, "seed": 1},
           check=_stats(lo=-2.0, hi=3.0, mean=0.5, std=5 / math.sqrt(12))),
    OpCase("gaussian_random", {}, attrs={"shape": [200, 50], "mean": 1.0, "std": 2.0, "seed": 1},
           check=_stats(mean=1.0, std=2.0)),
    OpCase("truncated_gaussian_random", {},
           attrs={"shape": [200, 50], "mean": 0.0, "std": 1.0, "seed": 1},
           # a normal truncated to ±2σ has std 0.8796
           check=_stats(lo=-2.0, hi=2.0, mean=0.0, std=0.8796)),
    OpCase("uniform_random_batch_size_like", {"Input": rand(7, 2)},
           attrs={"shape": [-1, 50], "min": 2.0, "max": 3.0, "seed": 5},
           check=batch_like_check(2.0, 3.0, (7, 50))),
    OpCase("gaussian_random_batch_size_like", {"Input": rand(2, 9)},
           attrs={"shape": [40, -1], "input_dim_idx": 1, "output_dim_idx": 1,
                  "mean": 1.0, "std": 0.1, "seed": 3},
           check=batch_like_check(0.0, 2.0, (40, 9))),
    OpCase("sampling_id", {"X": SAMPLING_X}, attrs={"seed": 7}, check=sampling_check),
    OpCase("dropout", {"X": DROPOUT_X}, attrs={"dropout_prob": 0.3, "fix_seed": True,
                                               "seed": 11},
           check=dropout_check(0.3, False), id="dropout_downgrade_stats"),
    OpCase("dropout", {"X": DROPOUT_X},
           attrs={"dropout_prob": 0.6, "fix_seed": True, "seed": 5,
                  "dropout_implementation": "upscale_in_train"},
           check=dropout_check(0.6, True), id="dropout_upscale_stats"),
    OpCase("dropout", {"X": rand(3, 4)}, attrs={"dropout_prob": 0.4, "fix_seed": True,
                                                "seed": 3},
           grad=["X"], id="dropout_grad_fixed_seed"),
    OpCase("dropout", {"X": rand(3, 4)},
           attrs={"dropout_prob": 0.4, "fix_seed": True, "seed": 3,
                  "dropout_implementation": "upscale_in_train"},
           grad=["X"], id="dropout_upscale_grad"),
    OpCase("dropout", {"X": rand(3, 4)}, attrs={"dropout_prob": 0.4, "is_test": True},
           ref=lambda X: {"Out": X * 0.6, "Mask": np.ones((3, 4), np.uint8)}, grad=["X"],
           id="dropout_is_test"),
    OpCase("dropout", {"X": rand(3, 4)},
           attrs={"dropout_prob": 0.4, "is_test": True,
                  "dropout_implementation": "upscale_in_train"},
           ref=lambda X: {"Out": X}, grad=["X"], id="dropout_is_test_upscale"),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_op(case):
    check_op(case)


@pytest.mark.parametrize("op", ["uniform_random", "gaussian_random",
                                "truncated_gaussian_random"])
def test_random_ops_are_reproducible_with_a_seed(op):
    seeded = OpCase(op, {}, attrs={"shape": [5, 4], "seed": 42})
    a, b = run_op(seeded)["Out"], run_op(seeded)["Out"]
    np.testing.assert_array_equal(a, b)
    other = run_op(OpCase(op, {}, attrs={"shape": [5, 4], "seed": 43}))["Out"]
    assert not np.array_equal(a, other)


def test_xavier_and_msra_scales():
    w = _init_param(fluid.initializer.Xavier(), (300, 200), seed=1)
    limit = math.sqrt(6 / 500)
    assert w.max() <= limit and w.min() >= -limit and w.max() > 0.9 * limit
    w = _init_param(fluid.initializer.Xavier(uniform=False), (300, 200), seed=1)
    assert abs(w.std() - math.sqrt(2 / 500)) < 0.01 * math.sqrt(2 / 500) * 5
    w = _init_param(fluid.initializer.MSRA(uniform=False), (300, 200), seed=1)
    assert abs(w.std() - math.sqrt(2 / 300)) < 0.05 * math.sqrt(2 / 300)


def test_constant_and_numpy_initializers():
    w = _init_param(fluid.initializer.Constant(0.25), (3, 2))
    np.testing.assert_array_equal(w, np.full((3, 2), 0.25, "float32"))


def test_numpy_array_initializer_and_shape_check():
    arr = np.arange(6, dtype="float32").reshape(3, 2)
    np.testing.assert_array_equal(_init_param(fluid.initializer.NumpyArrayInitializer(arr),
                                              (3, 2)), arr)
    with pytest.raises(ValueError, match="does not match"):
        fluid.layers.fc(input=fluid.layers.data(name="z", shape=[4]), size=2,
                        param_attr=fluid.ParamAttr(
                            initializer=fluid.initializer.NumpyArrayInitializer(arr)))


def test_program_random_seed_makes_initialization_reproducible():
    def init_once(seed):
        return _init_param(fluid.initializer.Uniform(-1, 1), (4, 3), seed=seed)

    np.testing.assert_array_equal(init_once(5), init_once(5))
    assert not np.array_equal(init_once(5), init_once(6))


def test_gaussian_batch_size_like_statistics():
    case = OpCase("gaussian_random_batch_size_like", {"Input": rand(4000, 1)},
                  attrs={"shape": [-1, 5], "mean": 1.0, "std": 0.5, "seed": 11})
    out = run_op(case)["Out"]
    assert abs(out.mean() - 1.0) < 0.02 and abs(out.std() - 0.5) < 0.02


def test_random_crop_draws_in_bounds_crops_that_change_between_runs():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        img = fluid.layers.data(name="img", shape=[2, 6, 6], dtype="float32")
        patch = fluid.layers.random_crop(img, shape=[2, 3, 3], seed=11)
    assert patch.shape == (-1, 2, 3, 3)
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    x = np.arange(4 * 2 * 6 * 6, dtype="float32").reshape(4, 2, 6, 6)
    firsts = []
    for _ in range(3):
        got, = exe.run(main, feed={"img": x}, fetch_list=[patch])
        for n in range(4):  # each patch is a contiguous 3x3 window of its own image
            r, c = divmod(int(got[n, 0, 0, 0] - x[n, 0, 0, 0]), 6)
            np.testing.assert_array_equal(got[n], x[n, :, r:r + 3, c:c + 3])
        firsts.append(got[:, 0, 0, 0].tolist())
    assert firsts[0] != firsts[1] or firsts[1] != firsts[2]  # the seed advanced


def test_dropout_fixed_seed_repeats_and_seeds_differ():
    a = run_op(_dropout_case(fix_seed=True, seed=17))["Mask"]
    b = run_op(_dropout_case(fix_seed=True, seed=17))["Mask"]
    c = run_op(_dropout_case(fix_seed=True, seed=18))["Mask"]
    np.testing.assert_array_equal(a, b)
    assert (a != c).mean() > 0.3  # independent masks disagree on about half the entries


def test_dropout_fixed_seed_repeats_across_runs_of_one_program():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data(name="x", shape=[50], dtype="float32")
        y = fluid.layers.dropout(x, dropout_prob=0.5, seed=9)
    exe = fluid.Executor(fluid.CPUPlace())
    feed = {"x": DROPOUT_X}
    first, = exe.run(main, feed=feed, fetch_list=[y])
    second, = exe.run(main, feed=feed, fetch_list=[y])
    np.testing.assert_array_equal(first, second)
    assert 0.3 < (first == 0).mean() < 0.7


def test_dropout_unseeded_masks_change_between_runs():
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        x = fluid.layers.data(name="x", shape=[50], dtype="float32")
        y = fluid.layers.dropout(x, dropout_prob=0.5)
    exe = fluid.Executor(fluid.CPUPlace())
    first, = exe.run(main, feed={"x": DROPOUT_X}, fetch_list=[y])
    second, = exe.run(main, feed={"x": DROPOUT_X}, fetch_list=[y])
    assert ((first == 0) != (second == 0)).mean() > 0.3


@pytest.mark.parametrize("op,inputs,attrs,message", [
    ("dropout", {"X": rand(2, 3)}, {"dropout_prob": 1.5}, "dropout_prob must be in [0, 1]"),
])
def test_bad_shapes_and_attrs_name_the_op(op, inputs, attrs, message):
    with pytest.raises(ValueError, match=r"(?s)" + op + ".*" + re.escape(message)):
        run_op(OpCase(op, inputs, attrs=attrs))
