"""Arithmetic operators on Variables: ``a + b``, ``a * 2.0``, ``-a``, ``a / b``, ``a ** 2``,
and the orderings ``a < b``, ``a <= 1.0``, ``a > b``, ``a >= b`` (bool variables, as Fluid
1.6's ``less_than`` etc.; ``==`` and ``!=`` keep Python's identity meaning, so Variables stay
usable as dict keys and in ``in`` tests)."""

from __future__ import annotations

from typing import Any

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


def _binary(op_type: str, reverse: bool = False, scalar: Any = None) -> Any:
    def method(self: Variable, other: Any) -> Variable:
        if isinstance(other, (int, float)) and scalar is not None:
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
