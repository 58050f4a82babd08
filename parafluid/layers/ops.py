"""Activation layers: one function per activation op, with Fluid 1.x signatures.

Each appends one op reading ``x`` and returns a new variable of the same shape and dtype.
The same op names work as ``act=`` of ``fc`` and other layers.

Example::

    h = fluid.layers.relu(fluid.layers.fc(input=x, size=64))
    prob = fluid.layers.softmax(fluid.layers.fc(input=h, size=10))
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..dtypes import convert_dtype
from ..framework import Variable
from ..layer_helper import LayerHelper

__all__ = ["relu", "sigmoid", "tanh", "exp", "sqrt", "reciprocal", "log", "square", "abs",
           "sin", "cos", "softplus", "softsign", "logsigmoid", "sign", "floor", "ceil", "round",
           "leaky_relu", "relu6", "elu", "hard_sigmoid", "swish", "pow", "softmax", "clip",
           "gelu", "selu", "brelu", "soft_relu", "hard_shrink", "thresholded_relu", "stanh",
           "atan", "asin", "acos", "rsqrt", "tanh_shrink", "softshrink"]


def _check_var(layer: str, arg: str, x: Any) -> None:
    if not isinstance(x, Variable):
        raise TypeError(f"{layer}: {arg} must be a Variable, got {type(x).__name__}")


# Fluid 1.6's generated activation layers (and elu) refuse a non-float input when the
# program is built, with a TypeError; the other activation layers leave it to the kernel.
_FLOAT_ONLY = frozenset({
    "sigmoid", "logsigmoid", "exp", "tanh", "atan", "tanh_shrink", "sqrt", "rsqrt", "abs",
    "ceil", "floor", "cos", "acos", "asin", "sin", "round", "reciprocal", "square",
    "softplus", "softsign", "elu"})


def _unary(op_type: str, x: Variable, attrs: dict[str, Any] | None = None,
           name: str | None = None, arg: str = "x") -> Variable:
    _check_var(op_type, arg, x)
    if op_type in _FLOAT_ONLY and convert_dtype(x.dtype) not in (
            "float16", "float32", "float64"):
        raise TypeError(f"{op_type}: the dtype of {arg} must be float16, float32 or float64, "
                        f"got {convert_dtype(x.dtype)}")
    helper = LayerHelper(op_type, name=name)
    out = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op(op_type, inputs={"X": [x]}, outputs={"Out": [out]}, attrs=attrs or {})
    return out


def _activation(op_type: str, what: str) -> Callable[..., Variable]:
    def layer(x: Variable, name: str | None = None) -> Variable:
        return _unary(op_type, x, name=name)
    layer.__name__ = layer.__qualname__ = op_type
    layer.__doc__ = (f"Elementwise ``{what}`` (op ``{op_type}``).\n\n"
                     f"Args:\n    x: input variable.\n    name: optional name prefix of the "
                     f"output.\n\nExample::\n\n    y = fluid.layers.{op_type}(x)\n")
    return layer


relu = _activation("relu", "max(x, 0)")
sigmoid = _activation("sigmoid", "1 / (1 + exp(-x))")
tanh = _activation("tanh", "tanh(x)")
exp = _activation("exp", "exp(x)")
sqrt = _activation("sqrt", "sqrt(x)")
reciprocal = _activation("reciprocal", "1 / x")
log = _activation("log", "ln(x)")
square = _activation("square", "x * x")
abs = _activation("abs", "|x|")  # noqa: A001  (Fluid's name)
sin = _activation("sin", "sin(x)")
cos = _activation("cos", "cos(x)")
softplus = _activation("softplus", "ln(1 + exp(x))")
softsign = _activation("softsign", "x / (1 + |x|)")
logsigmoid = _activation("logsigmoid", "ln(sigmoid(x))")
_sign = _activation("sign", "sign(x)")


def sign(x: Variable, name: str | None = None) -> Variable:
    """Elementwise ``sign(x)`` (op ``sign``); a numpy array is first made a constant with
    ``assign``, as Fluid's ``sign`` does.

    Example::

        s = fluid.layers.sign(np.array([-2.0, 3.0], "float32"))   # [-1., 1.]
    """
    if not isinstance(x, Variable):
        import numpy as np

        from .tensor import assign

        if not isinstance(x, np.ndarray):
            raise TypeError(f"sign: x must be a Variable or a numpy ndarray, got "
                            f"{type(x).__name__}")
        x = assign(x)
    elif x.dtype is not None and x.dtype not in ("float16", "float32", "float64"):
        raise TypeError(f"sign: x must be float16, float32 or float64, got {x.dtype} "
                        f"({x.name!r})")
    return _sign(x, name=name)
floor = _activation("floor", "floor(x)")
ceil = _activation("ceil", "ceil(x)")
round = _activation("round", "round(x), halves away from zero")  # noqa: A001
gelu = _activation("gelu", "x * Phi(x), Phi the standard normal cdf (the erf form)")


def selu(x: Variable, scale: float | None = None, alpha: float | None = None,
         name: str | None = None) -> Variable:
    """``scale * x`` where positive, ``scale * alpha * (exp(x) - 1)`` elsewhere (the
    self-normalizing constants by default).

    Example::

        y = fluid.layers.selu(x)
    """
    attrs = {}
    if scale is not None:
        attrs["scale"] = float(scale)
    if alpha is not None:
        attrs["alpha"] = float(alpha)
    return _unary("selu", x, attrs, name)


def brelu(x: Variable, t_min: float = 0.0, t_max: float = 24.0,
          name: str | None = None) -> Variable:
    """``clip(x, t_min, t_max)`` (bounded relu).

    Example::

        y = fluid.layers.brelu(x, t_min=1.0, t_max=20.0)
    """
    return _unary("brelu", x, {"t_min": float(t_min), "t_max": float(t_max)}, name)


def soft_relu(x: Variable, threshold: float = 40.0, name: str | None = None) -> Variable:
    """``ln(1 + exp(clip(x, -threshold, threshold)))``.

    Example::

        y = fluid.layers.soft_relu(x)
    """
    return _unary("soft_relu", x, {"threshold": float(threshold)}, name)


atan = _activation("atan", "arctan(x)")
asin = _activation("asin", "arcsin(x)")
acos = _activation("acos", "arccos(x)")
rsqrt = _activation("rsqrt", "1 / sqrt(x)")
tanh_shrink = _activation("tanh_shrink", "x - tanh(x)")


def softshrink(x: Variable, alpha: float | None = None, name: str | None = None) -> Variable:
    """``x - alpha`` where ``x > alpha``, ``x + alpha`` where ``x < -alpha``, else 0 (``alpha``
    defaults to 0.5; Fluid's attr ``lambda``).

    Example::

        y = fluid.layers.softshrink(x, alpha=0.3)
    """
    return _unary("softshrink", x, {} if alpha is None else {"lambda": float(alpha)}, name=name)


def hard_shrink(x: Variable, threshold: float | None = None) -> Variable:
    """``x`` where ``|x| > threshold`` (default 0.5), else 0.

    Example::

        y = fluid.layers.hard_shrink(x, threshold=0.3)
    """
    return _unary("hard_shrink", x, {} if threshold is None else {"threshold": float(threshold)})


def thresholded_relu(x: Variable, threshold: float | None = None) -> Variable:
    """``x`` where ``x > threshold`` (default 1.0), else 0.

    Example::

        y = fluid.layers.thresholded_relu(x, threshold=0.5)
    """
    return _unary("thresholded_relu", x,
                  {} if threshold is None else {"threshold": float(threshold)})


def stanh(x: Variable, scale_a: float = 0.67, scale_b: float = 1.7159,
          name: str | None = None) -> Variable:
    """``scale_b * tanh(scale_a * x)``.

    Example::

        y = fluid.layers.stanh(x)
    """
    return _unary("stanh", x, {"scale_a": float(scale_a), "scale_b": float(scale_b)}, name)


def leaky_relu(x: Variable, alpha: float = 0.02, name: str | None = None) -> Variable:
    """``x`` where positive, ``alpha * x`` elsewhere.

    Example::

        y = fluid.layers.leaky_relu(x, alpha=0.1)
    """
    return _unary("leaky_relu", x, {"alpha": float(alpha)}, name)


def relu6(x: Variable, threshold: float = 6.0, name: str | None = None) -> Variable:
    """``min(max(x, 0), threshold)``.

    Example::

        y = fluid.layers.relu6(x)
    """
    return _unary("relu6", x, {"threshold": float(threshold)}, name)


def elu(x: Variable, alpha: float = 1.0, name: str | None = None) -> Variable:
    """``x`` where positive, ``alpha * (exp(x) - 1)`` elsewhere.

    Example::

        y = fluid.layers.elu(x, alpha=0.5)
    """
    return _unary("elu", x, {"alpha": float(alpha)}, name)


def hard_sigmoid(x: Variable, slope: float = 0.2, offset: float = 0.5,
                 name: str | None = None) -> Variable:
    """``clip(slope * x + offset, 0, 1)``.

    Example::

        y = fluid.layers.hard_sigmoid(x)
    """
    return _unary("hard_sigmoid", x, {"slope": float(slope), "offset": float(offset)}, name)


def swish(x: Variable, beta: float = 1.0, name: str | None = None) -> Variable:
    """``x * sigmoid(beta * x)``.

    Example::

        y = fluid.layers.swish(x, beta=1.0)
    """
    return _unary("swish", x, {"beta": float(beta)}, name)


def pow(x: Variable, factor: float | Variable = 1.0,  # noqa: A001
        name: str | None = None) -> Variable:
    """``x ** factor``; ``factor`` a number or a one-element Variable (read at run time
    through the op's ``FactorTensor`` input, with no gradient).

    Example::

        y = fluid.layers.pow(x, factor=2.0)
        y = fluid.layers.pow(x, factor=fluid.layers.fill_constant([1], "float32", 3.0))
    """
    if isinstance(factor, Variable):
        _check_var("pow", "x", x)
        factor.stop_gradient = True
        helper = LayerHelper("pow", name=name)
        out = helper.create_variable_for_type_inference(x.dtype)
        helper.append_op("pow", inputs={"X": [x], "FactorTensor": [factor]},
                         outputs={"Out": [out]})
        return out
    return _unary("pow", x, {"factor": float(factor)}, name)


def softmax(input: Variable, use_cudnn: bool = False, name: str | None = None,
            axis: int = -1) -> Variable:
    """Softmax along ``axis`` (default: the last one, as in Fluid 1.x).

    Args:
        input: the logits.
        use_cudnn: accepted for compatibility; the kernel is torch's either way.
        axis: the dimension that sums to one.

    Example::

        prob = fluid.layers.softmax(fluid.layers.fc(input=x, size=10))
    """
    return _unary("softmax", input, {"axis": int(axis), "use_cudnn": bool(use_cudnn)}, name,
                  arg="input")


def clip(x: Variable, min: float, max: float, name: str | None = None) -> Variable:  # noqa: A002
    """Clamp every element into ``[min, max]``; the gradient passes strictly inside.

    Example::

        y = fluid.layers.clip(x, min=-1.0, max=1.0)
    """
    if min > max:
        raise ValueError(f"clip: min ({min}) must not exceed max ({max})")
    return _unary("clip", x, {"min": float(min), "max": float(max)}, name)


def __getattr__(name: str) -> object:
    # Fluid 1.6 spells the layers it defined here as fluid.layers.ops.<name>
    from .fluid_paths import resolve

    return resolve("ops", name)
