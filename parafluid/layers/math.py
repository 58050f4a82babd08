"""Arithmetic layers beyond ``nn.py``'s elementwise ones: ``sum``, the integer
``elementwise_mod`` / ``elementwise_floordiv``, ``clip_by_norm``, ``cumsum``, ``argsort``
and ``hash`` (ops in ``parafluid/ops/math.py``, ``reduce.py``, ``embedding.py``).

NOTE: it defines ``sum`` and ``hash`` (Fluid's names), which hide the builtins from its own
code."""

from __future__ import annotations

from typing import Any

from ..framework import Variable
from ..layer_helper import LayerHelper
from .common import append_one, check_var
from .tensor import _one_op

__all__ = ["sum", "elementwise_mod", "elementwise_floordiv", "clip_by_norm", "cumsum",
           "argsort", "hash"]


def sum(x: Variable | list[Variable]) -> Variable:
    """Elementwise sum of a list of same-shape variables (one variable is returned copied).

    Example::

        total = fluid.layers.sum([loss_a, loss_b, loss_c])
    """
    xs = [x] if isinstance(x, Variable) else list(x)
    for i, v in enumerate(xs):
        check_var("sum", f"x[{i}]", v)
    return append_one("sum", {"X": xs}, {}, xs[0].dtype)


def _int_elementwise(op_type: str) -> Any:
    def layer(x: Variable, y: Variable, axis: int = -1, act: str | None = None,
              name: str | None = None) -> Variable:
        check_var(op_type, "x", x)
        check_var(op_type, "y", y)
        return append_one(op_type, {"X": [x], "Y": [y]}, {"axis": axis}, x.dtype, name, act)
    layer.__name__ = op_type
    layer.__doc__ = (f"``{op_type}(x, y, axis=-1)`` with Fluid's broadcasting; C semantics "
                     "as Fluid 1.6 (remainder takes the sign of x, quotient truncated toward "
                     "zero); no gradient.")
    return layer


elementwise_mod = _int_elementwise("elementwise_mod")


elementwise_floordiv = _int_elementwise("elementwise_floordiv")


def clip_by_norm(x: Variable, max_norm: float, name: str | None = None) -> Variable:
    """``x * max_norm / max(||x||_2, max_norm)``: rescale ``x`` when its L2 norm is above
    ``max_norm`` (no gradient, as in Fluid)."""
    check_var("clip_by_norm", "x", x)
    return append_one("clip_by_norm", {"X": [x]}, {"max_norm": float(max_norm)}, x.dtype, name)


def hash(input: Variable, hash_size: int, num_hash: int = 1,
         name: str | None = None) -> Variable:
    """Hash each int32 or int64 row (last dimension) of ``input [..., k]`` with ``num_hash``
    seeds into ``[0, hash_size)``: int64 ``[..., num_hash, 1]`` (XXH64, as Fluid; e.g. feature
    hashing of n-grams).

    Example::

        bucket = fluid.layers.hash(ngram_ids, hash_size=100000, num_hash=2)
    """
    check_var("hash", "input", input)
    return append_one("hash", {"X": [input]}, {"num_hash": int(num_hash), "mod_by": int(hash_size)},
                   "int64", name, stop_gradient=True)


def cumsum(x: Variable, axis: int | None = None, exclusive: bool | None = None,
           reverse: bool | None = None) -> Variable:
    """Running sums along ``axis`` (default -1); ``exclusive`` starts at 0, ``reverse``
    sums from the end.

    Example::

        c = fluid.layers.cumsum(x, axis=1, exclusive=True)
    """
    attrs: dict[str, Any] = {}
    for key, value in (("axis", axis), ("exclusive", exclusive), ("reverse", reverse)):
        if value is not None:
            attrs[key] = int(value) if key == "axis" else bool(value)
    return _one_op("cumsum", x, attrs)


def argsort(input: Variable, axis: int = -1, name: str | None = None,
            descending: bool = False) -> tuple[Variable, Variable]:
    """``(sorted values, int64 indices)`` along ``axis`` (a stable sort).

    Example::

        values, idx = fluid.layers.argsort(scores, axis=-1)
    """
    check_var("argsort", "input", input)
    helper = LayerHelper("argsort", name=name)
    out = helper.create_variable_for_type_inference(input.dtype)
    ids = helper.create_variable_for_type_inference("int64")
    helper.append_op("argsort", inputs={"X": [input]}, outputs={"Out": [out], "Indices": [ids]},
                     attrs={"axis": int(axis), "descending": bool(descending)})
    ids.stop_gradient = True
    return out, ids
