"""Layers about a variable's shape: ``shape``, ``rank``, ``size``, ``expand_as``,
``crop_tensor`` and ``reverse`` (ops in ``parafluid/ops/tensor.py``)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..framework import Variable
from ..layer_helper import LayerHelper
from .attr_tensors import int_list_arg
from .common import append_one, check_var, check_vars
from .tensor import _one_op

__all__ = ["shape", "rank", "size", "expand_as", "crop_tensor", "reverse"]


def shape(input: Variable) -> Variable:
    """The shape of ``input`` at run time, an int32 tensor of ``rank`` values.

    Example::

        batch = fluid.layers.slice(fluid.layers.shape(x), axes=[0], starts=[0], ends=[1])
    """
    check_var("shape", "input", input)
    return append_one("shape", {"Input": [input]}, {}, "int32", stop_gradient=True)


def rank(input: Variable) -> Variable:
    """The number of dims of ``input`` as an int32 tensor ``[1]`` (known at build time)."""
    from .tensor import assign

    check_var("rank", "input", input)
    return assign(np.array([len(input.shape or ())], dtype="int32"))


def size(input: Variable) -> Variable:
    """The number of elements of ``input`` at run time, int64 ``[1]``."""
    check_var("size", "input", input)
    return append_one("size", {"Input": [input]}, {}, "int64", stop_gradient=True)


def expand_as(x: Variable, target_tensor: Variable, name: str | None = None) -> Variable:
    """Tile ``x`` to the shape of ``target_tensor`` (each dim a whole number of copies)."""
    check_var("expand_as", "x", x)
    check_var("expand_as", "target_tensor", target_tensor)
    return append_one("expand_as", {"X": [x], "target_tensor": [target_tensor]}, {}, x.dtype,
                   name)


def crop_tensor(x: Variable, shape: Any = None, offsets: Any = None,
                name: str | None = None) -> Variable:
    """Crop ``x`` to ``shape`` at ``offsets`` (default 0): each is ints (``-1`` in ``shape``
    keeps the rest of a dim), ints and one-element int32 Variables (op inputs
    ``ShapeTensor`` / ``OffsetsTensor``), or one int32 Variable (``Shape`` / ``Offsets``)."""
    check_vars("crop_tensor", x=x)
    rank = len(x.shape or ())
    helper = LayerHelper("crop_tensor")
    inputs: dict[str, Any] = {"X": [x]}
    attrs: dict[str, Any] = {}
    if shape is None:
        raise ValueError("crop_tensor: shape must be given (ints or int32 Variables)")
    attr, extra = int_list_arg(helper, "crop_tensor", "shape", shape, "Shape", "ShapeTensor")
    inputs.update(extra)
    if attr is not None:
        attrs["shape"] = attr
    attr, extra = int_list_arg(helper, "crop_tensor", "offsets",
                               [0] * rank if offsets is None else offsets, "Offsets",
                               "OffsetsTensor")
    inputs.update(extra)
    if attr is not None:
        attrs["offsets"] = attr
    return append_one("crop_tensor", inputs, attrs, x.dtype, name)


def reverse(x: Variable, axis: int | list[int]) -> Variable:
    """``x`` reversed along ``axis`` (an int or a list)."""
    axes = [axis] if isinstance(axis, int) else list(axis)
    return _one_op("reverse", x, {"axis": axes})
