"""Neural-network layers: fc and the per-op layer functions of the nn/math op families."""

from __future__ import annotations

from typing import Any

from ..framework import Variable
from ..layer_helper import LayerHelper
from ..ops.common import numel

__all__ = ["fc", "mean", "mul", "elementwise_add", "elementwise_sub", "elementwise_mul",
           "elementwise_div", "elementwise_max", "elementwise_min", "elementwise_pow", "scale",
           "sums"]


def fc(input: Variable | list[Variable], size: int, num_flatten_dims: int = 1,
       param_attr: Any = None, bias_attr: Any = None, act: str | None = None,
       is_test: bool = False, name: str | None = None) -> Variable:
    """Fully connected layer: ``act(sum_i flatten(input_i) @ W_i + b)``.

    Example::

        hidden = fluid.layers.fc(input=x, size=128, act="relu")
    """
    helper = LayerHelper("fc", input=input, param_attr=param_attr, bias_attr=bias_attr,
                         act=act, name=name)
    dtype = helper.input_dtype()
    partial = []
    for x, attr in helper.iter_inputs_and_params():
        if x.shape is None or len(x.shape) <= num_flatten_dims:
            raise ValueError(f"fc: input {x.name!r} of shape {list(x.shape or [])} needs more than "
                             f"num_flatten_dims={num_flatten_dims} dimensions")
        in_features = numel(x.shape[num_flatten_dims:])
        if in_features <= 0:
            raise ValueError(f"fc: input {x.name!r} has unknown feature dims "
                             f"{list(x.shape[num_flatten_dims:])}")
        w = helper.create_parameter(attr, [in_features, size], dtype)
        tmp = helper.create_variable_for_type_inference(dtype)
        helper.append_op("mul", inputs={"X": [x], "Y": [w]}, outputs={"Out": [tmp]},
                         attrs={"x_num_col_dims": num_flatten_dims, "y_num_col_dims": 1})
        partial.append(tmp)
    if len(partial) == 1:
        pre_bias = partial[0]
    else:
        pre_bias = helper.create_variable_for_type_inference(dtype)
        helper.append_op("sum", inputs={"X": partial}, outputs={"Out": [pre_bias]})
    pre_act = helper.append_bias_op(pre_bias, dim_start=num_flatten_dims)
    return helper.append_activation(pre_act)


def _simple(op_type: str, inputs: dict[str, Any], attrs: dict[str, Any] | None = None,
            name: str | None = None, out_slot: str = "Out") -> Variable:
    """One op, one output: the shape of most per-op layer functions."""
    helper = LayerHelper(op_type, name=name)
    first = next(iter(inputs.values()))
    first = first[0] if isinstance(first, (list, tuple)) else first
    out = helper.create_variable_for_type_inference(first.dtype)
    helper.append_op(op_type, inputs=inputs, outputs={out_slot: [out]}, attrs=attrs or {})
    return out


def mean(x: Variable, name: str | None = None) -> Variable:
    """Mean of all elements, shape [1]."""
    return _simple("mean", {"X": [x]}, name=name)


def mul(x: Variable, y: Variable, x_num_col_dims: int = 1, y_num_col_dims: int = 1,
        name: str | None = None) -> Variable:
    """Matrix product of ``x`` and ``y`` flattened to 2-D at the given dims."""
    return _simple("mul", {"X": [x], "Y": [y]},
                   {"x_num_col_dims": x_num_col_dims, "y_num_col_dims": y_num_col_dims}, name)


def _elementwise(op_type: str) -> Any:
    def layer(x: Variable, y: Variable, axis: int = -1, act: str | None = None,
              name: str | None = None) -> Variable:
        out = _simple(op_type, {"X": [x], "Y": [y]}, {"axis": axis}, name)
        return LayerHelper(op_type, act=act).append_activation(out) if act else out
    layer.__name__ = op_type
    layer.__doc__ = (f"``{op_type}(x, y, axis=-1)``: Fluid broadcasting, ``y`` lines up with "
                     "``x`` from dim ``axis`` (-1: trailing dims).")
    return layer


elementwise_add = _elementwise("elementwise_add")
elementwise_sub = _elementwise("elementwise_sub")
elementwise_mul = _elementwise("elementwise_mul")
elementwise_div = _elementwise("elementwise_div")
elementwise_max = _elementwise("elementwise_max")
elementwise_min = _elementwise("elementwise_min")
elementwise_pow = _elementwise("elementwise_pow")


def scale(x: Variable, scale: float = 1.0, bias: float = 0.0, bias_after_scale: bool = True,
          act: str | None = None, name: str | None = None) -> Variable:
    """``scale * x + bias`` (or ``scale * (x + bias)``)."""
    out = _simple("scale", {"X": [x]}, {"scale": float(scale), "bias": float(bias),
                                        "bias_after_scale": bias_after_scale}, name)
    return LayerHelper("scale", act=act).append_activation(out) if act else out


def sums(input: list[Variable], out: Variable | None = None) -> Variable:
    """Elementwise sum of a list of variables."""
    helper = LayerHelper("sum")
    if out is None:
        out = helper.create_variable_for_type_inference(input[0].dtype)
    helper.append_op("sum", inputs={"X": input}, outputs={"Out": [out]})
    return out
