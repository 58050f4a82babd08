"""How Fluid 1.6's layers pass an int list argument that may hold Variables (a shape, slice
bounds, expand times, ...): ints only go to the attribute; one int Variable goes to the op's
1-D tensor input (``ShapeTensor``, ``StartsTensor``, ...); a list mixing ints and
one-element Variables goes to its list input (``ShapeTensorList``, ...), each int as a
``fill_constant`` ``[1]`` int32 tensor, and to the attribute with -1 where a Variable
stands (so that shape inference keeps what is known).

Example::

    attr, inputs = int_list_arg(helper, "slice", "starts", [0, n], "StartsTensor",
                                "StartsTensorList")
"""

from __future__ import annotations

import numbers
from typing import Any

from ..framework import Variable
from ..layer_helper import LayerHelper

__all__ = ["int_list_arg"]


def _int_tensor(helper: LayerHelper, value: int) -> Variable:
    out = helper.create_variable_for_type_inference("int32")
    helper.append_op("fill_constant", outputs={"Out": [out]},
                     attrs={"shape": [1], "dtype": "int32", "value": float(value),
                            "force_cpu": True})
    out.stop_gradient = True
    return out


def int_list_arg(helper: LayerHelper, layer: str, arg: str, value: Any,
                 tensor_slot: str | None, list_slot: str | None
                 ) -> tuple[list[int] | None, dict[str, list[Variable]]]:
    """``(attribute value or None, extra op inputs)`` for ``value``: ints, one Variable, or
    a list of ints and Variables."""
    if isinstance(value, Variable):
        if tensor_slot is None:
            raise TypeError(f"{layer}: {arg} cannot be a Variable; give a list")
        value.stop_gradient = True
        return None, {tensor_slot: [value]}
    if not isinstance(value, (list, tuple)):
        raise TypeError(f"{layer}: {arg} must be a list of ints or Variables, got "
                        f"{type(value).__name__}: {value!r}")
    bad = [v for v in value
           if not isinstance(v, (numbers.Integral, Variable)) or isinstance(v, bool)]
    if bad:
        raise TypeError(f"{layer}: {arg} must hold ints or Variables, got {bad[0]!r}")
    if not any(isinstance(v, Variable) for v in value):
        return [int(v) for v in value], {}
    if list_slot is None:
        raise TypeError(f"{layer}: {arg} cannot hold Variables")
    tensors = []
    for v in value:
        if isinstance(v, Variable):
            v.stop_gradient = True
            tensors.append(v)
        else:
            tensors.append(_int_tensor(helper, v))
    return [-1 if isinstance(v, Variable) else int(v) for v in value], {list_slot: tensors}


def slice_bounds(helper: LayerHelper, layer: str, axes: list[int], inputs: dict[str, Any],
                 attrs: dict[str, Any], **bounds: Any) -> None:
    """The bounds of ``slice`` / ``strided_slice`` (``starts=``, ``ends=``, ``strides=``) as
    attributes or tensor inputs (``StartsTensor`` / ``StartsTensorList``, ...), and Fluid's
    ``infer_flags`` (-1 where a bound comes only at run time), into ``inputs`` / ``attrs``."""
    flags = [1] * len(axes)
    for arg, value in bounds.items():
        slot = arg[0].upper() + arg[1:] + "Tensor"
        attr, extra = int_list_arg(helper, layer, arg, value, slot, slot + "List")
        inputs.update(extra)
        if attr is None:
            flags = [-1] * len(axes)
        else:
            attrs[arg] = attr
            flags = [-1 if a == -1 and extra else f for a, f in zip(attr, flags)]
    attrs["infer_flags"] = flags
