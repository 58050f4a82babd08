"""Entering the imperative mode: ``guard``, ``to_variable``, ``no_grad``, ``enabled``,
``BackwardStrategy``.

Example::

    import numpy as np
    import parafluid as fluid

    with fluid.dygraph.guard():
        x = fluid.dygraph.to_variable(np.ones([2, 2], "float32"))
        y = fluid.layers.relu(x)          # runs at once
        print(y.numpy())
"""

from __future__ import annotations

import collections
import contextlib
import functools
import gc
import logging
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch

from .. import framework, unique_name
from ..dtypes import convert_dtype
from ..flags import flag
from ..framework import Program, Variable
from ..place import to_device
from .tracer import Tracer
from .varbase import VarBase

__all__ = ["guard", "to_variable", "no_grad", "enabled", "BackwardStrategy"]

_LOG = logging.getLogger("parafluid.dygraph")


@contextlib.contextmanager
def guard(place: Any = None) -> Iterator[None]:
    """Run the ``with`` body in the imperative mode: ops run as they are appended.

    A fresh Program pair and fresh unique names (the first ``fc`` is ``fc_0`` again), a new
    tracer; ``place`` (default ``fluid.CPUPlace()``) is where values live.
    """
    main, startup = Program(), Program()
    device = torch.device("cpu") if place is None else to_device(place)
    tracer = Tracer(main.global_block(), device)
    with framework.program_guard(main, startup), unique_name.guard(), \
            framework._dygraph_guard(tracer):
        yield


def enabled() -> bool:
    """True inside ``fluid.dygraph.guard()``."""
    return framework.in_dygraph_mode()


def _tracer_or_raise(what: str) -> Tracer:
    tracer = framework._dygraph_tracer()
    if tracer is None:
        raise RuntimeError(f"{what} works only in the imperative mode: call it inside "
                           "`with fluid.dygraph.guard():`")
    return tracer


_SUPPORTED = frozenset({"bool", "uint8", "int8", "int16", "int32", "int64", "float16",
                        "float32", "float64"})


def _print_debug_msg(limit: int = 5, is_test: bool = False) -> tuple[int, int, int] | None:
    """With ``FLAGS_dygraph_debug`` on, what the imperative mode holds (Fluid's debug aid):
    the unique-name keys, the variables the tracer keeps, and the imperative variables
    alive; ``is_test`` returns the three counts, else they are logged with the ``limit``
    most numerous object types. With the flag off it only says how to turn it on."""
    if not flag("FLAGS_dygraph_debug"):
        _LOG.warning("Debug mode is not enabled. Please set FLAGS_dygraph_debug=1 to enable "
                     "debug")
        return None
    gc.collect()  # count what is alive, not what waits for the cycle collector
    objects = gc.get_objects()
    tracer = framework._dygraph_tracer()
    counts = (len(unique_name._generator.ids), 0 if tracer is None else len(tracer._vars),
              sum(1 for o in objects if isinstance(o, Variable) and hasattr(o, "_value")))
    if is_test:
        return counts
    _LOG.warning("unique_name num: %d, tracer vars num: %d, alive vars num: %d", *counts)
    for kind, n in collections.Counter(type(o).__name__ for o in objects).most_common(limit):
        _LOG.warning("%-30s %d", kind, n)
    return None


def to_variable(value: Any, block: Any = None, name: str | None = None) -> Variable:
    """An imperative variable holding a copy of numpy array ``value`` (an imperative
    variable is returned as is). It needs no gradient until ``stop_gradient = False``."""
    tracer = _tracer_or_raise("fluid.dygraph.to_variable")
    if isinstance(value, VarBase):
        return value
    if not isinstance(value, np.ndarray):
        raise TypeError(f"to_variable: value must be a numpy.ndarray (or an imperative "
                        f"variable), got {type(value).__name__}")
    try:
        dtype = convert_dtype(value.dtype)
    except (TypeError, ValueError):
        dtype = None
    if dtype not in _SUPPORTED:
        raise TypeError(f"to_variable: numpy dtype {value.dtype} is not a tensor dtype; "
                        f"expected one of {sorted(_SUPPORTED)}")
    tensor = torch.from_numpy(np.array(value, order="C", copy=True)).to(tracer.device)
    block = block if block is not None else framework.default_main_program().current_block()
    return VarBase(block, value=tensor,
                   name=name if name is not None else unique_name.generate("generated_var"),
                   stop_gradient=True)


@contextlib.contextmanager
def _no_grad_guard() -> Iterator[None]:
    tracer = framework._dygraph_tracer()
    if tracer is None:
        yield
        return
    with tracer._no_grad():
        yield


def no_grad(func: Callable[..., Any] | None = None) -> Any:
    """Ops run without being recorded for ``backward()``: as a decorator (``@no_grad``)
    or a context manager (``with no_grad():``)."""
    if func is None:
        return _no_grad_guard()

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with _no_grad_guard():
            return func(*args, **kwargs)
    return wrapper


class BackwardStrategy:
    """Options of ``backward()``. ``sort_sum_gradient``: add the gradient contributions of
    a variable in a fixed order. parafluid always adds them in one fixed order (the
    recorded ops newest first), so both settings give the same, reproducible sums."""

    def __init__(self) -> None:
        self.sort_sum_gradient = False
