"""Tensor layers: constants, assignment, global variables."""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import unique_name
from ..dtypes import convert_dtype
from ..framework import Variable
from ..initializer import Constant
from ..layer_helper import LayerHelper

__all__ = ["fill_constant", "assign", "create_global_var", "create_tensor", "zeros", "ones"]


def fill_constant(shape: list[int], dtype: Any, value: float, force_cpu: bool = False,
                  out: Variable | None = None) -> Variable:
    """A tensor of ``shape`` filled with ``value``."""
    helper = LayerHelper("fill_constant")
    if out is None:
        out = helper.create_variable_for_type_inference(dtype)
    helper.append_op("fill_constant", outputs={"Out": [out]},
                     attrs={"shape": list(shape), "dtype": convert_dtype(dtype),
                            "value": float(value), "force_cpu": force_cpu})
    out.stop_gradient = True
    return out


def zeros(shape: list[int], dtype: Any, force_cpu: bool = False) -> Variable:
    return fill_constant(shape, dtype, 0.0, force_cpu)


def ones(shape: list[int], dtype: Any, force_cpu: bool = False) -> Variable:
    return fill_constant(shape, dtype, 1.0, force_cpu)


def assign(input: Variable | np.ndarray, output: Variable | None = None) -> Variable:
    """Copy a variable (or a numpy array, as a constant) into ``output``."""
    helper = LayerHelper("assign")
    if isinstance(input, Variable):
        if output is None:
            output = helper.create_variable_for_type_inference(input.dtype)
        helper.append_op("assign", inputs={"X": [input]}, outputs={"Out": [output]})
        return output
    arr = np.asarray(input)
    dtype = convert_dtype(arr.dtype)
    if output is None:
        output = helper.create_variable_for_type_inference(dtype)
    helper.append_op("assign_value", outputs={"Out": [output]},
                     attrs={"shape": list(arr.shape), "dtype": dtype,
                            "values": arr.reshape(-1).tolist()})
    return output


def create_tensor(dtype: Any, name: str | None = None, persistable: bool = False) -> Variable:
    helper = LayerHelper("create_tensor", name=name)
    return helper.create_variable(name=helper.name, dtype=dtype, persistable=persistable)


def create_global_var(shape: list[int], value: float, dtype: Any, persistable: bool = False,
                      force_cpu: bool = False, name: str | None = None) -> Variable:
    """A variable in the global block initialized to ``value`` by the startup program."""
    helper = LayerHelper("global_var", name=name)
    var = helper.create_global_variable(name=name or unique_name.generate("global_var"),
                                        shape=list(shape), dtype=dtype, persistable=persistable,
                                        stop_gradient=True)
    helper.set_variable_initializer(var, Constant(float(value), force_cpu))
    return var
