"""Indexing and comparison layers: gather, slice, stack, flatten, and the comparison /
logical ops (Fluid 1.x signatures).

Example::

    rows = fluid.layers.gather(emb_table_out, index=ids)
    first_half = fluid.layers.slice(x, axes=[1], starts=[0], ends=[4])
    mask = fluid.layers.less_than(x=a, y=b)             # bool
"""

from __future__ import annotations

from typing import Any

from ..framework import Variable
from ..layer_helper import LayerHelper
from .attr_tensors import slice_bounds

__all__ = ["gather", "slice", "stack", "flatten", "less_than", "less_equal", "greater_than",
           "greater_equal", "equal", "not_equal", "logical_and", "logical_or", "logical_xor",
           "logical_not"]


def _check(layer: str, arg: str, x: Any) -> None:
    if not isinstance(x, Variable):
        raise TypeError(f"{layer}: {arg} must be a Variable, got {type(x).__name__}")


def _op(op_type: str, inputs: dict[str, Any], attrs: dict[str, Any], dtype: Any,
        out_slot: str = "Out", out: Variable | None = None, name: str | None = None
        ) -> Variable:
    helper = LayerHelper(op_type, name=name)
    if out is None:
        out = helper.create_variable_for_type_inference(dtype)
    helper.append_op(op_type, inputs=inputs, outputs={out_slot: [out]}, attrs=attrs)
    return out


def gather(input: Variable, index: Variable, overwrite: bool = True) -> Variable:
    """Rows ``index`` (int, 1-D or ``[N, 1]``) of ``input``; the gradient adds back into
    those rows (repeated indices add up).

    Example::

        picked = fluid.layers.gather(x, index=ids)
    """
    _check("gather", "input", input)
    _check("gather", "index", index)
    return _op("gather", {"X": [input], "Index": [index]}, {"overwrite": overwrite},
               input.dtype)


def slice(input: Variable, axes: list[int], starts: Any,  # noqa: A001 (Fluid's name)
          ends: Any) -> Variable:
    """``input[starts:ends]`` along each of ``axes`` (negative bounds count from the end;
    bounds past the end clamp). ``starts`` / ``ends``: ints, ints and one-element int
    Variables, or one int Variable (read at run time, as Fluid 1.6).

    Example::

        y = fluid.layers.slice(x, axes=[1, 2], starts=[0, 1], ends=[2, -1])
    """
    _check("slice", "input", input)
    helper = LayerHelper("slice")
    inputs: dict[str, Any] = {"Input": [input]}
    attrs: dict[str, Any] = {"axes": list(axes)}
    slice_bounds(helper, "slice", axes, inputs, attrs, starts=starts, ends=ends)
    return _op("slice", inputs, attrs, input.dtype)


def stack(x: list[Variable], axis: int = 0) -> Variable:
    """Join same-shape variables along a new dimension ``axis``.

    Example::

        y = fluid.layers.stack([a, b, c], axis=1)     # [N, 3, ...]
    """
    xs = [x] if isinstance(x, Variable) else list(x)
    for i, v in enumerate(xs):
        _check("stack", f"x[{i}]", v)
    return _op("stack", {"X": xs}, {"axis": int(axis)}, xs[0].dtype, out_slot="Y")


def flatten(x: Variable, axis: int = 1, name: str | None = None) -> Variable:
    """Fold the dims before ``axis`` into rows and the rest into columns (2-D result;
    appends ``flatten2`` with its XShape, as Fluid 1.6).

    Example::

        flat = fluid.layers.flatten(conv_out, axis=1)    # [N, C*H*W]
    """
    _check("flatten", "x", x)
    if not isinstance(axis, int) or not 0 <= axis <= len(x.shape or ()):
        raise ValueError(f"flatten: axis must be an int in [0, {len(x.shape or ())}] for x of "
                         f"shape {list(x.shape or [])}, got {axis!r}")
    helper = LayerHelper("flatten", name=name)
    out = helper.create_variable_for_type_inference(x.dtype)
    x_shape = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op("flatten2", inputs={"X": [x]}, outputs={"Out": [out], "XShape": [x_shape]},
                     attrs={"axis": int(axis)})
    return out


def _compare(op_type: str) -> Any:
    def build(x: Variable, y: Variable, force_cpu: bool | None, cond: Variable | None
              ) -> Variable:
        _check(op_type, "x", x)
        _check(op_type, "y", y)
        # as Fluid, force_cpu is set only when given (the op's default keeps it on the host)
        attrs = {} if force_cpu is None else {"force_cpu": bool(force_cpu)}
        out = _op(op_type, {"X": [x], "Y": [y]}, attrs, "bool", out=cond)
        out.stop_gradient = True
        return out

    # NOTE: Fluid 1.6 gives only less_than the force_cpu parameter (before cond); the others
    # take (x, y, cond=None), so a positional cond must land on cond
    if op_type == "less_than":
        def layer(x: Variable, y: Variable, force_cpu: bool | None = None,
                  cond: Variable | None = None) -> Variable:
            return build(x, y, force_cpu, cond)
    else:
        def layer(x: Variable, y: Variable, cond: Variable | None = None, *,
                  force_cpu: bool | None = None) -> Variable:
            return build(x, y, force_cpu, cond)
    layer.__name__ = layer.__qualname__ = op_type
    layer.__doc__ = (f"Elementwise ``{op_type}`` of ``x`` and ``y``: a bool variable (written "
                     f"into ``cond`` when given).\n\nExample::\n\n    mask = "
                     f"fluid.layers.{op_type}(x=a, y=b)\n")
    return layer


less_than = _compare("less_than")
less_equal = _compare("less_equal")
greater_than = _compare("greater_than")
greater_equal = _compare("greater_equal")
equal = _compare("equal")
not_equal = _compare("not_equal")


def _logical(op_type: str, binary: bool) -> Any:
    def build(x: Variable, y: Variable | None, out: Variable | None,
              name: str | None) -> Variable:
        _check(op_type, "x", x)
        inputs: dict[str, Any] = {"X": [x]}
        if binary:
            _check(op_type, "y", y)
            inputs["Y"] = [y]
        res = _op(op_type, inputs, {}, "bool", out=out, name=name)
        res.stop_gradient = True
        return res

    if binary:
        def layer(x: Variable, y: Variable, out: Variable | None = None,
                  name: str | None = None) -> Variable:
            return build(x, y, out, name)
    else:
        def layer(x: Variable, out: Variable | None = None,  # type: ignore[misc]
                  name: str | None = None) -> Variable:
            return build(x, None, out, name)
    layer.__name__ = layer.__qualname__ = op_type
    layer.__doc__ = (f"Elementwise ``{op_type}`` of bool variables.\n\nExample::\n\n    "
                     f"m = fluid.layers.{op_type}(" + ("a, b" if binary else "a") + ")\n")
    return layer


logical_and = _logical("logical_and", True)
logical_or = _logical("logical_or", True)
logical_xor = _logical("logical_xor", True)
logical_not = _logical("logical_not", False)
