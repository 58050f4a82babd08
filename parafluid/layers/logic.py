"""Layers with bool results: ``reduce_all`` / ``reduce_any`` and the finiteness checks
``isfinite`` / ``has_inf`` / ``has_nan`` (ops in ``parafluid/ops/logic.py``, ``reduce.py``)."""

from __future__ import annotations

from typing import Any

from ..framework import Variable
from .common import append_one, check_var
from .tensor import _one_op

__all__ = ["reduce_all", "reduce_any", "isfinite", "has_inf", "has_nan"]


def _bool_reduce(op_type: str) -> Any:
    def layer(input: Variable, dim: int | list[int] | None = None, keep_dim: bool = False,
              name: str | None = None) -> Variable:
        check_var(op_type, "input", input)
        dims = [0] if dim is None else ([dim] if isinstance(dim, int) else list(dim))
        return append_one(op_type, {"X": [input]},
                       {"dim": dims, "keep_dim": keep_dim, "reduce_all": dim is None},
                       "bool", name, stop_gradient=True)
    layer.__name__ = op_type
    layer.__doc__ = (f"``{op_type}(input, dim=None, keep_dim=False)`` over a bool tensor; "
                     "``dim=None`` reduces every dim to shape [1].")
    return layer


reduce_all = _bool_reduce("reduce_all")


reduce_any = _bool_reduce("reduce_any")


def isfinite(x: Variable) -> Variable:
    """A bool [1]: every element of ``x`` is finite."""
    return _like_check("isfinite", x)


def has_inf(x: Variable) -> Variable:
    """A bool [1]: some element of ``x`` is +-inf."""
    return _like_check("isinf", x)


def has_nan(x: Variable) -> Variable:
    """A bool [1]: some element of ``x`` is NaN."""
    return _like_check("isnan", x)


def _like_check(op_type: str, x: Variable) -> Variable:
    out = _one_op(op_type, x, {}, dtype="bool")
    out.stop_gradient = True
    return out
