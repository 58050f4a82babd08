"""What most layer functions do first and last: check their Variable arguments, append their
one op with one output."""

from __future__ import annotations

from typing import Any

from ..framework import Variable
from ..layer_helper import LayerHelper

__all__: list[str] = []  # helpers of the layer modules, not layers


def check_var(layer: str, arg: str, x: Any) -> None:
    """TypeError naming ``layer`` and ``arg`` unless ``x`` is a Variable."""
    if not isinstance(x, Variable):
        raise TypeError(f"{layer}: {arg} must be a Variable, got {type(x).__name__}")


def check_vars(layer: str, **args: Any) -> None:
    """``check_var`` for each keyword argument."""
    for arg, v in args.items():
        check_var(layer, arg, v)


def append_one(op_type: str, inputs: dict[str, Any], attrs: dict[str, Any], dtype: Any,
               name: str | None = None, act: str | None = None, stop_gradient: bool = False,
               out_slot: str = "Out", lod_level: int | None = None) -> Variable:
    """Append ``op_type`` writing one new variable to ``out_slot`` (of ``lod_level``, when
    given), then ``act``; return the result."""
    helper = LayerHelper(op_type, name=name, act=act)
    out = helper.create_variable_for_type_inference(dtype, stop_gradient=stop_gradient)
    helper.append_op(op_type, inputs=inputs, outputs={out_slot: [out]}, attrs=attrs)
    if lod_level is not None:
        out.lod_level = lod_level
    return helper.append_activation(out)
