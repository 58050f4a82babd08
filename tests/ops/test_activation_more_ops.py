"""Op table: hard_swish (its own op, attrs threshold / scale / offset, Fluid's gradient
rule), pow with a FactorTensor, one_hot / one_hot_v2 (depth attribute or depth_tensor) and
the layers that emit them."""

import numpy as np
import pytest

import parafluid as fluid
from parafluid.testing import OpCase, check_op, rand, run_layers

# values away from the kinks at x + offset = 0 and x + offset = threshold
HS_X = np.array([[-5.0, -2.5, -1.0, 0.4], [1.7, 2.2, 3.5, 6.0]])


def _hard_swish(X, attrs):
    t, s, o = attrs["threshold"], attrs["scale"], attrs["offset"]
    return {"Out": X * np.clip(X + o, 0, t) / s}


def _hard_swish_fluid_grad(x, attrs):
    t, s, o = attrs["threshold"], attrs["scale"], attrs["offset"]
    inside = (x + o > 0) * (x + o < t) * (2 * x + o) / s
    return np.where(x + o < t, inside, 1.0)


def _one_hot(ids, depth, allow=False):
    out = np.zeros(ids.shape + (depth,), "float32")
    for pos, v in np.ndenumerate(ids):
        if 0 <= v < depth:
            out[pos + (v,)] = 1
        elif not allow:
            raise AssertionError("out of range")
    return out


IDS = np.array([[1], [0], [3], [2]], "int64")
IDS_V2 = np.array([[1, 5], [0, 3]], "int32")

CASES = [
    OpCase("hard_swish", {"X": HS_X}, ref=_hard_swish, grad=["X"], id="hard_swish_default"),
    OpCase("hard_swish", {"X": HS_X * 0.5}, attrs={"threshold": 4.0, "scale": 5.0,
                                                  "offset": 2.0},
           ref=_hard_swish, id="hard_swish_attrs"),
    OpCase("pow", {"X": rand(3, 4, low=0.5, high=2.0), "FactorTensor": np.array([2.5])},
           ref=lambda X, FactorTensor: {"Out": X ** 2.5}, grad=["X"],
           id="pow_factor_tensor_overrides_attr"),
    OpCase("pow", {"X": rand(3, 4, low=0.5, high=2.0), "FactorTensor": np.array([3.0],
                                                                                "float32")},
           attrs={"factor": 7.0}, ref=lambda X, FactorTensor: {"Out": X ** 3},
           grad=["X"], id="pow_factor_tensor_float32_with_attr"),
    OpCase("one_hot", {"X": IDS}, attrs={"depth": 4},
           ref=lambda X: {"Out": _one_hot(X[:, 0], 4)}, id="one_hot_depth_attr"),
    OpCase("one_hot", {"X": IDS, "depth_tensor": np.array([5], "int32")}, attrs={"depth": 2},
           ref=lambda X, depth_tensor: {"Out": _one_hot(X[:, 0], 5)},
           id="one_hot_depth_tensor"),
    OpCase("one_hot_v2", {"X": IDS}, attrs={"depth": 4},
           ref=lambda X: {"Out": _one_hot(X, 4)}, id="one_hot_v2_keeps_trailing_1"),
    OpCase("one_hot_v2", {"X": IDS_V2}, attrs={"depth": 4, "allow_out_of_range": True},
           ref=lambda X: {"Out": _one_hot(X, 4, allow=True)},
           id="one_hot_v2_allow_out_of_range"),
    OpCase("one_hot_v2", {"X": IDS_V2[0], "depth_tensor": np.array([6], "int32")},
           ref=lambda X, depth_tensor: {"Out": _one_hot(X, 6)},
           id="one_hot_v2_rank1_depth_tensor"),
    OpCase("one_hot_v2", {"X": IDS[:, 0]}, attrs={"depth": 4, "dtype": "float64"},
           ref=lambda X: {"Out": _one_hot(X, 4).astype("float64")}, id="one_hot_v2_float64"),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_op(case):
    check_op(case)


@pytest.mark.parametrize("attrs", [{"threshold": 6.0, "scale": 6.0, "offset": 3.0},
                                   {"threshold": 4.0, "scale": 5.0, "offset": 2.0}])
def test_hard_swish_gradient_is_fluids_rule(attrs):
    """Above the threshold Fluid's gradient is 1 (the derivative is threshold / scale)."""
    x = HS_X

    def build():
        xv = fluid.layers.data("x", [4], dtype="float64")
        xv.stop_gradient = False
        y = fluid.layers.hard_swish(xv, **attrs)
        assert [op.type for op in y.block.ops] == ["hard_swish"]
        return [y, fluid.backward.gradients([fluid.layers.reduce_sum(y)], [xv])[0]]

    xv = x.reshape(-1, 4)
    y, g = run_layers(build, {"x": xv})
    np.testing.assert_allclose(y, _hard_swish(xv, attrs)["Out"])
    np.testing.assert_allclose(g, _hard_swish_fluid_grad(xv, attrs))


def test_one_hot_layers_emit_fluids_ops():
    def build():
        ids = fluid.data("ids", [None, 1], dtype="int64")
        depth = fluid.layers.fill_constant([1], "int32", 5)
        a = fluid.layers.one_hot(ids, depth=4)
        b = fluid.layers.one_hot(ids, depth=depth)
        c = fluid.one_hot(ids, depth=4)
        d = fluid.input.one_hot(ids, depth=depth)
        types = [op.type for op in a.block.ops]
        assert types.count("one_hot") == 2 and types.count("one_hot_v2") == 2, types
        assert list(c.shape) == [-1, 1, 4] and list(d.shape) == [-1, 1, -1]
        return [a, b, c, d]

    a, b, c, d = run_layers(build, {"ids": IDS})
    np.testing.assert_array_equal(a, _one_hot(IDS[:, 0], 4))
    np.testing.assert_array_equal(b, _one_hot(IDS[:, 0], 5))
    np.testing.assert_array_equal(c, _one_hot(IDS, 4))
    np.testing.assert_array_equal(d, _one_hot(IDS, 5))


def test_pow_layer_takes_a_factor_variable():
    def build():
        x = fluid.data("x", [2, 3], dtype="float32")
        f = fluid.layers.fill_constant([1], "float32", 3.0)
        return [fluid.layers.pow(x, factor=f), fluid.layers.pow(x, factor=2.0)]

    x = rand(2, 3, low=0.5, high=2.0, dtype="float32")
    a, b = run_layers(build, {"x": x})
    np.testing.assert_allclose(a, x ** 3, rtol=1e-6)
    np.testing.assert_allclose(b, x ** 2, rtol=1e-6)
