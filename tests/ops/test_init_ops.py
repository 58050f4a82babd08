"""Op table: creation ops (fill_*, assign*, random initializers) and the initializers."""

import math

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


CASES = [
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
    OpCase("uniform_random", {}, attrs={"shape": [200, 50], "min": -2.0, "max": 3.0, "seed": 1},
           check=_stats(lo=-2.0, hi=3.0, mean=0.5, std=5 / math.sqrt(12))),
    OpCase("gaussian_random", {}, attrs={"shape": [200, 50], "mean": 1.0, "std": 2.0, "seed": 1},
           check=_stats(mean=1.0, std=2.0)),
    OpCase("truncated_gaussian_random", {},
           attrs={"shape": [200, 50], "mean": 0.0, "std": 1.0, "seed": 1},
           # a normal truncated to ±2σ has std 0.8796
           check=_stats(lo=-2.0, hi=2.0, mean=0.0, std=0.8796)),
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
