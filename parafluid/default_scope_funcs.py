"""``fluid.default_scope_funcs``: a thread-local stack of scopes, as Fluid's module.

The bottom of each thread's stack is a fresh root ``Scope``; ``enter_local_scope`` pushes a
child of the current scope, ``leave_local_scope`` pops it (and drops the parent's children).
``var``/``find_var`` create or look up a variable in the current scope, and
``scoped_function(fn)`` runs ``fn`` inside a local scope.

Example::

    from parafluid.default_scope_funcs import var, scoped_function
    def step():
        i = var("i")
        i.set_int(10)          # gone once step returns
    scoped_function(step)
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from .scope import Scope, ScopeVariable

__all__ = ["get_cur_scope", "enter_local_scope", "leave_local_scope", "var", "find_var",
           "scoped_function"]

_local = threading.local()


def _stack() -> list[Scope]:
    stack = getattr(_local, "stack", None)
    if stack is None:
        stack = _local.stack = []
    if not stack:
        stack.append(Scope())
    return stack


def get_cur_scope() -> Scope:
    """This thread's current scope (its root scope is made on first use)."""
    return _stack()[-1]


def enter_local_scope() -> None:
    """Push a child of the current scope."""
    stack = _stack()
    stack.append(stack[-1].new_scope())


def leave_local_scope() -> None:
    """Pop the current local scope; the scope below forgets its children."""
    stack = _stack()
    if len(stack) < 2:
        raise RuntimeError("leave_local_scope: no local scope was entered on this thread")
    stack.pop()
    stack[-1].drop_kids()


def var(name: str) -> ScopeVariable:
    """The variable ``name`` of the current scope, created if absent."""
    return get_cur_scope().var(name)


def find_var(name: str) -> ScopeVariable | None:
    """The variable ``name`` in the current scope or its ancestors, or None."""
    return get_cur_scope().find_var(name)


def scoped_function(func: Callable[[], Any]) -> None:
    """Run ``func()`` in a new local scope, left however ``func`` ends."""
    enter_local_scope()
    try:
        func()
    finally:
        leave_local_scope()
