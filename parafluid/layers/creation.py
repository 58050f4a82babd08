"""Layers that create tensors: ``create_parameter``, ``zeros_like`` / ``ones_like``, ``range``,
``linspace``, ``eye`` and ``diag`` (ops in ``parafluid/ops/tensor.py``).

NOTE: a module of its own because it defines ``range`` (Fluid's name), which would hide the
builtin from the code of any module that held it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..dtypes import convert_dtype
from ..framework import Variable
from ..layer_helper import LayerHelper
from .tensor import _check_var, assign, expand, fill_constant, unsqueeze

__all__ = ["create_parameter", "zeros_like", "ones_like", "range", "linspace", "eye", "diag"]


def create_parameter(shape: list[int], dtype: Any, name: str | None = None, attr: Any = None,
                     is_bias: bool = False, default_initializer: Any = None) -> Variable:
    """A parameter of ``shape`` (trained by the optimizers like any layer's), initialized in
    the startup program (Xavier for weights, zeros for biases unless ``default_initializer``).

    Example::

        w = fluid.layers.create_parameter(shape=[784, 10], dtype="float32", name="w")
    """
    from ..param_attr import ParamAttr

    helper = LayerHelper("create_parameter")
    if attr is None:
        attr = ParamAttr(name=name)
    return helper.create_parameter(attr, list(shape), dtype, is_bias, default_initializer)


def zeros_like(x: Variable, out: Variable | None = None) -> Variable:
    """Zeros of ``x``'s shape and dtype (op ``fill_zeros_like``)."""
    return _like("fill_zeros_like", x, {}, out)


def ones_like(x: Variable, out: Variable | None = None) -> Variable:
    """Ones of ``x``'s shape and dtype (op ``fill_any_like``)."""
    return _like("fill_any_like", x, {"value": 1.0}, out)


def _like(op_type: str, x: Variable, attrs: dict[str, Any], out: Variable | None) -> Variable:
    _check_var(op_type, "x", x)
    helper = LayerHelper(op_type)
    if out is None:
        out = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op(op_type, inputs={"X": [x]}, outputs={"Out": [out]}, attrs=attrs)
    out.stop_gradient = True
    return out


def _scalar_var(value: Any, dtype: Any) -> Variable:
    return value if isinstance(value, Variable) else fill_constant([1], dtype, float(value))


def range(start: Any, end: Any, step: Any, dtype: Any) -> Variable:  # noqa: A001 (Fluid's name)
    """``[start, start + step, ...)`` below ``end`` (numbers or [1] variables), as ``dtype``."""
    helper = LayerHelper("range")
    out = helper.create_variable_for_type_inference(dtype)
    helper.append_op("range", inputs={"Start": [_scalar_var(start, dtype)],
                                      "End": [_scalar_var(end, dtype)],
                                      "Step": [_scalar_var(step, dtype)]},
                     outputs={"Out": [out]})
    out.stop_gradient = True
    return out


def linspace(start: Any, stop: Any, num: Any, dtype: Any) -> Variable:
    """``num`` evenly spaced values from ``start`` to ``stop`` (both included)."""
    helper = LayerHelper("linspace")
    out = helper.create_variable_for_type_inference(dtype)
    helper.append_op("linspace", inputs={"Start": [_scalar_var(start, dtype)],
                                         "Stop": [_scalar_var(stop, dtype)],
                                         "Num": [_scalar_var(num, "int32")]},
                     outputs={"Out": [out]}, attrs={"dtype": convert_dtype(dtype)})
    out.stop_gradient = True
    return out


def eye(num_rows: int, num_columns: int | None = None, batch_shape: list[int] | None = None,
        dtype: Any = "float32") -> Variable:
    """An identity matrix ``[num_rows, num_columns]`` (square by default); ``batch_shape``
    repeats it: ``batch_shape + [num_rows, num_columns]``."""
    # NOTE: Fluid 1.6's eye refuses these with TypeError (a float size, a batch_shape that
    # is not a list of positive ints) before any op is made
    if not isinstance(num_rows, int) or num_rows < 0:
        raise TypeError(f"eye: num_rows must be a non-negative int, got {num_rows!r}")
    if num_columns is None:
        num_columns = num_rows
    elif not isinstance(num_columns, int) or num_columns < 0:
        raise TypeError(f"eye: num_columns must be a non-negative int, got {num_columns!r}")
    if batch_shape is not None:
        if not isinstance(batch_shape, list):
            raise TypeError(f"eye: batch_shape must be a list of positive ints, got "
                            f"{type(batch_shape).__name__} {batch_shape!r}")
        if any(not isinstance(d, int) or d <= 0 for d in batch_shape):
            raise TypeError(f"eye: batch_shape must be a list of positive ints, got "
                            f"{batch_shape!r}")
    helper = LayerHelper("eye")
    out = helper.create_variable_for_type_inference(dtype)
    helper.append_op("eye", outputs={"Out": [out]},
                     attrs={"num_rows": num_rows, "num_columns": num_columns,
                            "dtype": convert_dtype(dtype)})
    for _ in batch_shape or []:
        out = unsqueeze(out, [0])
    if batch_shape:
        out = expand(out, list(batch_shape) + [1, 1])
    out.stop_gradient = True
    return out


def diag(diagonal: Variable | np.ndarray) -> Variable:
    """A square matrix with ``diagonal`` (a 1-D variable or array) on its diagonal."""
    if not isinstance(diagonal, Variable):
        diagonal = assign(diagonal)
    helper = LayerHelper("diag")
    out = helper.create_variable_for_type_inference(diagonal.dtype)
    helper.append_op("diag", inputs={"Diagonal": [diagonal]}, outputs={"Out": [out]})
    out.stop_gradient = True
    return out
