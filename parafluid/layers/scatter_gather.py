"""Layers that pick or place elements by index: ``where``, ``scatter``, ``scatter_nd`` /
``scatter_nd_add``, ``gather_nd``, ``multiplex``, ``strided_slice``, ``unstack``, ``unique`` /
``unique_with_counts`` and ``shard_index`` (ops in ``parafluid/ops/index.py``)."""

from __future__ import annotations

from typing import Any

from ..framework import Variable
from ..layer_helper import LayerHelper
from .attr_tensors import slice_bounds
from .common import append_one, check_vars

__all__ = ["where", "scatter", "unstack", "multiplex", "gather_nd", "scatter_nd_add",
           "scatter_nd", "unique", "unique_with_counts", "strided_slice", "shard_index"]


def _check_var(layer: str, arg: str, x: Any) -> None:
    if not isinstance(x, Variable):
        raise TypeError(f"{layer}: {arg} must be a Variable, got {type(x).__name__}")


def _append(op_type: str, inputs: dict[str, Any], attrs: dict[str, Any], dtype: Any,
            name: str | None = None, act: str | None = None,
            stop_gradient: bool = False) -> Variable:
    helper = LayerHelper(op_type, name=name, act=act)
    out = helper.create_variable_for_type_inference(dtype, stop_gradient=stop_gradient)
    helper.append_op(op_type, inputs=inputs, outputs={"Out": [out]}, attrs=attrs)
    return helper.append_activation(out)


def where(condition: Variable) -> Variable:
    """Indices of the true elements of a bool tensor: int64 ``[count, rank]`` (Fluid 1.6's
    ``where``; no gradient).

    Example::

        idx = fluid.layers.where(fluid.layers.greater_than(x, y))
    """
    _check_var("where", "condition", condition)
    return _append("where", {"Condition": [condition]}, {}, "int64", stop_gradient=True)


def scatter(input: Variable, index: Variable, updates: Variable, name: str | None = None,
            overwrite: bool = True) -> Variable:
    """A copy of ``input`` whose rows ``index[i]`` are ``updates[i]`` (``overwrite=False``:
    the indexed rows become the sum of their updates).

    Example::

        out = fluid.layers.scatter(x, index=ids, updates=rows)
    """
    for arg, v in (("input", input), ("index", index), ("updates", updates)):
        _check_var("scatter", arg, v)
    return _append("scatter", {"X": [input], "Ids": [index], "Updates": [updates]},
                   {"overwrite": bool(overwrite)}, input.dtype, name)


def unstack(x: Variable, axis: int = 0, num: int | None = None) -> list[Variable]:
    """Split ``x`` along ``axis`` into ``num`` tensors with that dim removed.

    Example::

        rows = fluid.layers.unstack(x, axis=1)   # x: [N, 3, D] -> three [N, D]
    """
    _check_var("unstack", "x", x)
    shape = list(x.shape or ())
    if not -len(shape) <= axis < len(shape):
        raise ValueError(f"unstack: axis {axis} is out of range for {x.name!r} of shape {shape}")
    if num is None:
        num = shape[axis]
        if num <= 0:
            raise ValueError(f"unstack: dim {axis} of {x.name!r} {shape} is unknown; pass num")
    helper = LayerHelper("unstack")
    outs = [helper.create_variable_for_type_inference(x.dtype) for _ in range(num)]
    helper.append_op("unstack", inputs={"X": [x]}, outputs={"Y": outs},
                     attrs={"axis": int(axis), "num": int(num)})
    return outs


def multiplex(inputs: list[Variable], index: Variable) -> Variable:
    """Row ``i`` of the result is row ``i`` of ``inputs[index[i]]`` (``index``: int32
    ``[N, 1]``).

    Example::

        out = fluid.layers.multiplex(inputs=[x1, x2], index=choice)
    """
    if not isinstance(inputs, (list, tuple)) or len(inputs) < 2:
        raise ValueError("multiplex: inputs must be a list of at least 2 Variables")
    _check_var("multiplex", "index", index)
    return _append("multiplex", {"X": list(inputs), "Ids": [index]}, {}, inputs[0].dtype)


def gather_nd(input: Variable, index: Variable, name: str | None = None) -> Variable:
    """``out[i...] = input[index[i..., 0], ..., index[i..., k-1]]``: shape
    ``index.shape[:-1] + input.shape[k:]``.

    Example::

        picked = fluid.layers.gather_nd(x, index)   # x [3, 4, 5], index [2, 2] -> [2, 5]
    """
    _check_var("gather_nd", "input", input)
    _check_var("gather_nd", "index", index)
    return _append("gather_nd", {"X": [input], "Index": [index]}, {}, input.dtype, name)


def scatter_nd_add(ref: Variable, index: Variable, updates: Variable,
                   name: str | None = None) -> Variable:
    """A copy of ``ref`` with ``updates`` added at the ``index`` positions (``gather_nd``'s
    indexing; repeated positions add up)."""
    for arg, v in (("ref", ref), ("index", index), ("updates", updates)):
        _check_var("scatter_nd_add", arg, v)
    if ref.dtype != updates.dtype:
        raise ValueError(f"scatter_nd_add: ref and updates must have the same dtype, got "
                         f"{ref.dtype} and {updates.dtype}")
    return _append("scatter_nd_add", {"X": [ref], "Index": [index], "Updates": [updates]}, {},
                   ref.dtype, name)


def scatter_nd(index: Variable, updates: Variable, shape: list[int],
               name: str | None = None) -> Variable:
    """``scatter_nd_add`` into zeros of ``shape`` (as Fluid composes it)."""
    from .tensor import fill_constant

    zeros = fill_constant([int(s) for s in shape], updates.dtype, 0.0)
    return scatter_nd_add(zeros, index, updates, name)


def _unique(op_type: str, x: Variable, dtype: Any) -> list[Variable]:
    from ..dtypes import convert_dtype

    _check_var(op_type, "x", x)
    dtype = convert_dtype(dtype)
    if dtype not in ("int32", "int64"):
        raise TypeError(f"{op_type}: dtype must be int32 or int64, got {dtype}")
    helper = LayerHelper(op_type)
    slots = ["Out", "Index"] + (["Count"] if op_type == "unique_with_counts" else [])
    outs = [helper.create_variable_for_type_inference(x.dtype if s == "Out" else dtype,
                                                      stop_gradient=True) for s in slots]
    helper.append_op(op_type, inputs={"X": [x]},
                     outputs={s: [v] for s, v in zip(slots, outs)}, attrs={"dtype": dtype})
    return outs


def unique(x: Variable, dtype: Any = "int32") -> tuple[Variable, Variable]:
    """The distinct values of a 1-D ``x`` in order of first occurrence, and for every element
    the position of its value among them: ``(out, index)``.

    Example::

        out, index = fluid.layers.unique(ids)   # [2, 3, 3, 1] -> [2, 3, 1], [0, 1, 1, 2]
    """
    out, index = _unique("unique", x, dtype)
    return out, index


def unique_with_counts(x: Variable, dtype: Any = "int32") -> tuple[Variable, Variable, Variable]:
    """``unique`` plus how often each distinct value occurs: ``(out, index, count)``."""
    out, index, count = _unique("unique_with_counts", x, dtype)
    return out, index, count


def strided_slice(input: Variable, axes: list[int], starts: Any, ends: Any,
                  strides: Any) -> Variable:
    """``input[start:end:stride]`` along each of ``axes`` (Python's slice rules: negative
    bounds count from the end, bounds clamp, a negative stride walks backwards).
    ``starts`` / ``ends`` / ``strides``: ints, ints and one-element int Variables, or one
    int Variable (read at run time, as Fluid 1.6).

    Example::

        rev = fluid.layers.strided_slice(x, axes=[1], starts=[-1], ends=[-1000], strides=[-1])
    """
    _check_var("strided_slice", "input", input)
    helper = LayerHelper("strided_slice")
    inputs: dict[str, Any] = {"Input": [input]}
    attrs: dict[str, Any] = {"axes": [int(a) for a in axes]}
    slice_bounds(helper, "strided_slice", axes, inputs, attrs, starts=starts, ends=ends,
                 strides=strides)
    return _append("strided_slice", inputs, attrs, input.dtype)


def shard_index(input: Variable, index_num: int, nshards: int, shard_id: int,
                ignore_value: int = -1) -> Variable:
    """Ids of shard ``shard_id`` (of ``nshards`` equal ranges over ``index_num``) become their
    offset in the shard; other ids become ``ignore_value``."""
    check_vars("shard_index", input=input)
    return append_one("shard_index", {"X": [input]},
                   {"index_num": int(index_num), "nshards": int(nshards),
                    "shard_id": int(shard_id), "ignore_value": int(ignore_value)},
                   input.dtype, stop_gradient=True)
