"""Arithmetic operators on Variables: ``a + b``, ``a * 2.0``, ``-a``, ``a / b``, ``a ** 2``,
and the orderings ``a < b``, ``a <= 1.0``, ``a > b``, ``a >= b`` (bool variables, as Fluid
1.6's ``less_than`` etc.; ``==`` and ``!=`` keep Python's identity meaning, so Variables stay
usable as dict keys and in ``in`` tests)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..framework import Variable
from .nn import _simple
from .tensor import fill_constant


def _scalar_op(x: Variable, scale: float, bias: float) -> Variable:
    return _simple("scale", {"X": [x]}, {"scale": float(scale), "bias": float(bias)})


def _as_var(value: Any, like: Variable, full: bool) -> Variable:
    """A constant: shape [1] (broadcasts as Y), or ``like``'s shape when it must act as X."""
    if full:
        return _simple("fill_any_like", {"X": [like]}, {"value": float(value)})
    return fill_constant([1], like.dtype, float(value))


_INTS = frozenset({"uint8", "int8", "int16", "int32", "int64"})


def _binary(op_type: str, reverse: bool = False, scalar: Any = None) -> Any:
    def method(self: Variable, other: Any) -> Variable:
        # NOTE: as Fluid 1.6's, an integer variable divided by a number is an
        # elementwise_div (integer division), not a scale by 1/value (which an integer
        # kernel would truncate to 0)
        if isinstance(other, (int, float)) and scalar is not None and not (
                op_type == "elementwise_div" and self.dtype in _INTS):
            if isinstance(other, float) and self.dtype in _INTS and other != int(other):
                raise ValueError(f"{op_type}: {self.name!r} is {self.dtype} but the number "
                                 f"{other} is not an integer; cast the variable to a float "
                                 "dtype first (fluid.layers.cast)")
            return scalar(self, other)
        if not isinstance(other, Variable):
            other = _as_var(other, self, full=reverse)
        x, y = (other, self) if reverse else (self, other)
        return _simple(op_type, {"X": [x], "Y": [y]}, {"axis": -1})
    return method


Variable.__add__ = _binary("elementwise_add", scalar=lambda x, v: _scalar_op(x, 1.0, v))
Variable.__radd__ = _binary("elementwise_add", scalar=lambda x, v: _scalar_op(x, 1.0, v))
Variable.__sub__ = _binary("elementwise_sub", scalar=lambda x, v: _scalar_op(x, 1.0, -v))
Variable.__rsub__ = _binary("elementwise_sub", reverse=True,
                            scalar=lambda x, v: _scalar_op(x, -1.0, v))
Variable.__mul__ = _binary("elementwise_mul", scalar=lambda x, v: _scalar_op(x, v, 0.0))
Variable.__rmul__ = _binary("elementwise_mul", scalar=lambda x, v: _scalar_op(x, v, 0.0))
Variable.__truediv__ = _binary("elementwise_div", scalar=lambda x, v: _scalar_op(x, 1.0 / v, 0.0))
Variable.__rtruediv__ = _binary("elementwise_div", reverse=True)
Variable.__pow__ = _binary("elementwise_pow")
Variable.__neg__ = lambda self: _scalar_op(self, -1.0, 0.0)


def _ordering(op_type: str) -> Any:
    def method(self: Variable, other: Any) -> Variable:
        from . import index  # (the comparison layers import this module's package)

        if not isinstance(other, Variable):
            other = fill_constant([1], self.dtype, float(other))
        return getattr(index, op_type)(self, other)
    method.__name__ = op_type
    return method


Variable.__lt__ = _ordering("less_than")
Variable.__le__ = _ordering("less_equal")
Variable.__gt__ = _ordering("greater_than")
Variable.__ge__ = _ordering("greater_equal")


_END = 2 ** 31 - 1  # a slice end past any axis (the slice op clamps it)


def _getitem(self: Variable, item: Any) -> Variable:
    """``x[i]``, ``x[a:b]``, ``x[:, ::2]``, ``x[..., 0]``, ``x[v]`` with a Variable ``v``:
    Fluid 1.6's Variable slicing, as a ``slice`` op. As Fluid's, an index (an int or a
    one-element int Variable) drops its axis (``decrease_axis``; all dropped: shape [1]),
    slice bounds and steps may be Variables, ``[::-1]`` is a ``reverse`` op, and a step
    other than 1 makes the op a ``strided_slice``."""
    from .shapes import reverse

    items = list(item) if isinstance(item, tuple) else [item]
    rank = len(self.shape)
    ellipses = [i for i, it in enumerate(items) if it is Ellipsis]
    if len(ellipses) > 1:
        raise IndexError(f"{self.name}[...]: an index can hold one Ellipsis only")
    if ellipses:
        at = ellipses[0]
        items[at:at + 1] = [slice(None)] * (rank - len(items) + 1)
    if len(items) > rank:
        raise IndexError(f"{self.name}[...]: {len(items)} indexes for a variable of rank "
                         f"{rank} (shape {list(self.shape)})")
    axes: list[int] = []
    starts: list[Any] = []
    ends: list[Any] = []
    decrease: list[int] = []
    reversed_axes: list[int] = []
    strides: list[Any] = []  # 1 for every axis but the stepped slices'
    for axis, it in enumerate(items):
        size = int(self.shape[axis])
        if isinstance(it, Variable):
            axes.append(axis)
            decrease.append(axis)
            starts.append(it)
            ends.append(_plus_one(it))
            strides.append(1)
        elif isinstance(it, (int, np.integer)) and not isinstance(it, bool):
            it = int(it)
            if size >= 0 and not -size <= it < size:
                raise IndexError(f"{self.name}[...]: index {it} is out of range for axis "
                                 f"{axis} of size {size}")
            axes.append(axis)
            decrease.append(axis)
            starts.append(it)
            ends.append(_END if it == -1 else it + 1)
            strides.append(1)
        elif isinstance(it, slice):
            step = 1 if it.step is None else it.step
            if it.start is None and it.stop is None:
                if isinstance(step, int) and step == 1:
                    continue
                if isinstance(step, int) and step == -1:
                    reversed_axes.append(axis)
                    continue
            if not isinstance(step, Variable) and int(step) == 0:
                raise IndexError(f"{self.name}[...]: slice step cannot be zero (axis {axis})")
            axes.append(axis)
            # NOTE: Fluid's bounds: a missing start is 0, a missing stop is past the end
            starts.append(0 if it.start is None else _bound(it.start))
            ends.append(_END if it.stop is None else _bound(it.stop))
            strides.append(_bound(step))
        else:
            raise IndexError(f"{self.name}[...]: an index is an int, an int Variable, a slice "
                             f"or an Ellipsis, got {type(it).__name__}: {it!r}")
    out = self
    # the reversed axes first: they are the input's axes (before any index drops one)
    if reversed_axes:
        out = reverse(out, reversed_axes)
    if axes:
        # as Fluid: one strided_slice when some step is not 1, else one slice
        stepped = any(isinstance(st, Variable) or st != 1 for st in strides)
        out = _slice(out, axes, starts, ends, decrease, strides if stepped else None)
    return out


def _bound(value: Any) -> Any:
    return value if isinstance(value, Variable) else int(value)


def _plus_one(index: Variable) -> Variable:
    """``index + 1`` as an int32 Variable (the end of a one-element slice at ``index``)."""
    from .tensor import cast

    if index.dtype != "int32":
        index = cast(index, "int32")
    return _simple("elementwise_add", {"X": [index], "Y": [fill_constant([1], "int32", 1)]})


def _slice(x: Variable, axes: list[int], starts: list[Any], ends: list[Any],
           decrease: list[int], strides: list[Any] | None = None) -> Variable:
    """A ``slice`` op, or a ``strided_slice`` op when ``strides`` are given."""
    from ..layer_helper import LayerHelper
    from .attr_tensors import slice_bounds

    op_type = "slice" if strides is None else "strided_slice"
    helper = LayerHelper(op_type)
    inputs: dict[str, Any] = {"Input": [x]}
    attrs: dict[str, Any] = {"axes": list(axes), "decrease_axis": list(decrease)}
    bounds = {"starts": starts, "ends": ends}
    if strides is not None:
        bounds["strides"] = strides
    slice_bounds(helper, op_type, axes, inputs, attrs, **bounds)
    out = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op(op_type, inputs=inputs, outputs={"Out": [out]}, attrs=attrs)
    return out


def _astype(self: Variable, dtype: Any) -> Variable:
    """The variable cast to ``dtype`` (a ``cast`` op), as Fluid 1.6's ``Variable.astype``."""
    from .tensor import cast

    return cast(self, dtype)


Variable.__getitem__ = _getitem
Variable.astype = _astype


def _iter(self: Variable) -> Any:
    # NOTE: without this, Python would iterate through __getitem__ forever over an axis of
    # unknown size (-1); an imperative value's first axis is known
    from ..framework import in_dygraph_mode

    size = int(self.shape[0]) if self.shape else -1
    if not in_dygraph_mode() or size < 0:
        raise TypeError(f"Variable {self.name} (shape {list(self.shape or [])}) is not "
                        "iterable when the program is built; index it (x[i]) or split it "
                        "(fluid.layers.split / unstack)")
    return (self[i] for i in range(size))


Variable.__iter__ = _iter
