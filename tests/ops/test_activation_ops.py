"""Op table: activation family (unary rule table, softmax, clip)."""

import math
import re

import numpy as np
import pytest

from parafluid.testing import OpCase, check_op, rand, run_op


def _away_from_zero(*shape, seed=0):
    """Values in +-[0.2, 1]: clear of the kink at 0 that finite differences cannot see."""
    x = rand(*shape, low=0.2, high=1.0, seed=seed)
    return x * np.where(rand(*shape, seed=seed + 100) > 0, 1.0, -1.0)


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def _softmax(x, axis):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


X = _away_from_zero(3, 4)
POS = rand(3, 4, low=0.3, high=2.0)


def unary(op, x, fn, attrs=None, grad=True, id=None, **kw):
    return OpCase(op, {"X": x}, ref=lambda X: {"Out": fn(X)}, attrs=attrs or {},
                  grad=["X"] if grad else [], id=id, **kw)


def interp_attrs(method, **kw):
    attrs = {"interp_method": method, "out_h": -1, "out_w": -1, "scale": 0.0,
             "align_corners": True, "align_mode": 1}
    attrs.update(kw)
    return attrs

def prelu_ref(X, Alpha, attrs):
    mode = attrs["mode"]
    a = Alpha.reshape(()) if mode == "all" else (
        Alpha.reshape(1, -1, 1, 1) if mode == "channel" else Alpha.reshape(1, *X.shape[1:]))
    return {"Out": np.where(X > 0, X, a * X)}

def maxout_ref(X, attrs):
    n, c, h, w = X.shape
    g = attrs["groups"]
    return {"Out": X.reshape(n, c // g, g, h, w).max(2)}

# Positive inputs away from 0 keep prelu/maxout away from their kinks; distinct values
# keep maxout away from ties.
DISTINCT = (np.random.RandomState(4).permutation(48).reshape(1, 4, 3, 4) / 10.0 - 2.35)

CASES = [
    unary("relu", X, lambda x: np.maximum(x, 0)),
    unary("sigmoid", X, _sigmoid),
    unary("tanh", X, np.tanh),
    unary("exp", X, np.exp),
    unary("sqrt", POS, np.sqrt),
    unary("reciprocal", POS, lambda x: 1 / x),
    unary("log", POS, np.log),
    unary("square", X, np.square),
    unary("abs", X, np.abs),
    unary("sin", X, np.sin),
    unary("cos", X, np.cos),
    unary("softplus", X, lambda x: np.log1p(np.exp(x))),
    unary("softsign", X, lambda x: x / (1 + np.abs(x))),
    unary("logsigmoid", X, lambda x: np.log(_sigmoid(x))),
    unary("leaky_relu", X, lambda x: np.where(x > 0, x, 0.02 * x)),
    unary("leaky_relu", X, lambda x: np.where(x > 0, x, 0.3 * x), attrs={"alpha": 0.3},
          id="leaky_relu_alpha"),
    unary("relu6", X * 8, lambda x: np.clip(x, 0, 6)),
    unary("relu6", X * 3, lambda x: np.clip(x, 0, 2.5), attrs={"threshold": 2.5},
          id="relu6_threshold"),
    unary("elu", X, lambda x: np.where(x > 0, x, 1.5 * np.expm1(x)), attrs={"alpha": 1.5}),
    unary("hard_sigmoid", X * 4, lambda x: np.clip(0.2 * x + 0.5, 0, 1)),
    unary("swish", X, lambda x: x * _sigmoid(2.0 * x), attrs={"beta": 2.0}),
    unary("pow", POS, lambda x: x ** 2.5, attrs={"factor": 2.5}),
    unary("sign", X, np.sign),
    unary("atan", X, np.arctan),
    unary("asin", X * 0.9, np.arcsin),
    unary("acos", X * 0.9, np.arccos),
    unary("rsqrt", POS, lambda x: 1 / np.sqrt(x)),
    unary("tanh_shrink", X, lambda x: x - np.tanh(x)),
    unary("softshrink", X, lambda x: np.where(x > 0.5, x - 0.5, np.where(x < -0.5, x + 0.5, 0)),
          id="softshrink"),
    unary("softshrink", X, lambda x: np.where(x > 0.3, x - 0.3, np.where(x < -0.3, x + 0.3, 0)),
          attrs={"lambda": 0.3}, id="softshrink_lambda"),
    unary("floor", X * 3, np.floor),
    unary("ceil", X * 3, np.ceil),
    # halves round away from zero, as Fluid (std::round), not to even
    unary("round", np.array([[-2.5, -1.5, -0.4, 0.5], [1.5, 2.5, 0.7, -0.7]]),
          lambda x: np.sign(x) * np.floor(np.abs(x) + 0.5), grad=False, id="round_halves"),
    unary("round", X * 3 + 0.1, lambda x: np.sign(x) * np.floor(np.abs(x) + 0.5)),
    unary("relu", X.astype("float32"), lambda x: np.maximum(x, 0), grad=False,
          id="relu_float32"),
    OpCase("softmax", {"X": rand(3, 5)}, ref=lambda X: {"Out": _softmax(X, -1)}, grad=["X"]),
    OpCase("softmax", {"X": rand(2, 3, 4)}, attrs={"axis": 1},
           ref=lambda X: {"Out": _softmax(X, 1)}, grad=["X"], id="softmax_axis1"),
    OpCase("clip", {"X": X * 2}, attrs={"min": -0.5, "max": 0.8},
           ref=lambda X: {"Out": np.clip(X, -0.5, 0.8)}, grad=["X"]),
    unary("gelu", X, lambda x: 0.5 * x * (1 + np.vectorize(math.erf)(x / np.sqrt(2)))),
    unary("selu", X, lambda x: 1.0507009873554805 * np.where(
        x > 0, x, 1.6732632423543772 * (np.exp(x) - 1))),
    unary("selu", X, lambda x: 2.0 * np.where(x > 0, x, 0.5 * (np.exp(x) - 1)),
          attrs={"scale": 2.0, "alpha": 0.5}, id="selu_attrs"),
    unary("brelu", X * 3, lambda x: np.clip(x, 0.1, 1.5), attrs={"t_min": 0.1, "t_max": 1.5}),
    unary("soft_relu", X * 3, lambda x: np.log1p(np.exp(np.clip(x, -1.5, 1.5))),
          attrs={"threshold": 1.5}),
    unary("hard_shrink", X, lambda x: np.where(np.abs(x) > 0.5, x, 0.0)),
    unary("thresholded_relu", X * 2, lambda x: np.where(x > 1.0, x, 0.0)),
    unary("stanh", X, lambda x: 1.7159 * np.tanh(0.67 * x)),
    OpCase("prelu", {"X": DISTINCT, "Alpha": np.array([0.3])}, attrs={"mode": "all"},
           ref=prelu_ref, grad=["X", "Alpha"], id="prelu_all"),
    OpCase("prelu", {"X": DISTINCT, "Alpha": rand(1, 4, 1, 1, seed=2)},
           attrs={"mode": "channel"}, ref=prelu_ref, grad=["X", "Alpha"], id="prelu_channel"),
    OpCase("prelu", {"X": DISTINCT, "Alpha": rand(1, 4, 3, 4, seed=2)},
           attrs={"mode": "element"}, ref=prelu_ref, grad=["X", "Alpha"], id="prelu_element"),
    OpCase("maxout", {"X": DISTINCT}, attrs={"groups": 2}, ref=maxout_ref, grad=["X"]),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_op(case):
    check_op(case)


def test_clip_gradient_is_zero_at_the_bounds():
    import parafluid as fluid

    prog, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(prog, startup):
        x = fluid.layers.data("x", shape=[4], dtype="float64", append_batch_size=False)
        x.stop_gradient = False
        y = fluid.layers.clip(x, min=0.0, max=1.0)
        (gx,) = fluid.gradients([y], [x])
    exe = fluid.Executor(fluid.CPUPlace())
    (g,) = exe.run(prog, feed={"x": np.array([0.0, 0.5, 1.0, 2.0])}, fetch_list=[gx],
                   scope=fluid.Scope())
    np.testing.assert_array_equal(g, [0.0, 1.0, 0.0, 0.0])


@pytest.mark.parametrize("op", ["softmax"])
def test_softmax_bad_axis_names_the_op(op):
    import parafluid as fluid

    with fluid.program_guard(fluid.Program(), fluid.Program()):
        x = fluid.layers.data("x", shape=[4], dtype="float32")
        with pytest.raises(ValueError, match="softmax: axis 2 is out of range"):
            fluid.layers.softmax(x, axis=2)


@pytest.mark.parametrize("op,inputs,attrs,message", [
    ("prelu", {"X": rand(2, 3, 2, 2), "Alpha": rand(2)}, {"mode": "channel"},
     "needs 3 alpha values"),
])
def test_bad_shapes_and_attrs_name_the_op(op, inputs, attrs, message):
    with pytest.raises(ValueError, match=r"(?s)" + op + ".*" + re.escape(message)):
        run_op(OpCase(op, inputs, attrs=attrs))
