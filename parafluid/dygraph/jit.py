"""``fluid.dygraph.jit.trace``: run an imperative Layer once and record the ops it ran as a
static Program (Fluid 1.6's program-desc tracer).

The Program holds one op per op the Layer ran, with the shapes of this run: the inputs are
named ``feed_names``, the outputs ``fetch_names`` (when given), the parameters keep their
names and the temporaries are ``t_0``, ``t_1``, ... in the order they first appear. The
initializers of parameters the call itself created are left out (they belong to a startup
program); the parameters are persistable variables of the same names, so a scope holding
their values (``fluid.dygraph.save_dygraph`` / ``fluid.io`` loaders, or ``scope.var(name)``)
runs it with ``fluid.Executor``.

Example::

    with fluid.dygraph.guard():
        fc = fluid.dygraph.FC("fc", size=3)
        out, program = fluid.dygraph.jit.trace(fc, [fluid.dygraph.to_variable(x)],
                                               feed_names=["x"], fetch_names=["y"])
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

from .. import framework
from ..framework import Program, Variable
from .layers import Layer

__all__ = ["trace", "extract_vars"]


def extract_vars(inputs: Any) -> list[Any]:
    """The variables in ``inputs`` (a variable, or nested lists/tuples of them), in order."""
    if isinstance(inputs, Variable):
        return [inputs]
    if isinstance(inputs, (list, tuple)):
        return [v for item in inputs for v in extract_vars(item)]
    return []


def trace(module: Layer, inputs: Any, feed_names: Sequence[str] | None = None,
          fetch_names: Sequence[str] | None = None) -> tuple[Any, Program]:
    """Call ``module(*inputs)`` in the imperative mode; return its outputs and the Program
    of the ops it ran."""
    if not isinstance(module, Layer):
        raise TypeError(f"trace: module must be a fluid.dygraph.Layer, got "
                        f"{type(module).__name__}")
    tracer = framework._dygraph_tracer()
    if tracer is None:
        raise RuntimeError("trace: run it inside fluid.dygraph.guard()")
    inputs = list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]
    if tracer._recorder is not None:
        raise RuntimeError("trace: already tracing (trace calls do not nest)")
    tracer._recorder = []
    try:
        original = module(*inputs)
    finally:
        record, tracer._recorder = tracer._recorder, None
    outputs = list(original) if isinstance(original, (list, tuple)) else [original]
    names: dict[str, str] = {}
    for what, given, vs in (("feed_names", feed_names, inputs),
                            ("fetch_names", fetch_names, outputs)):
        if given is not None:
            if len(given) != len(vs):
                raise ValueError(f"trace: {len(given)} {what} for {len(vs)} variables")
            names.update({v.name: n for v, n in zip(vs, given)})
    program = Program()
    block = program.global_block()
    # NOTE: as Fluid's tracer: the temporaries are renamed t_0, t_1, ... in the order they
    # first appear (skipping the names of the persistables, feeds and fetches), so two
    # traces of the same Layer give the same Program
    taken = set(names.values()) | {v.name for _, ins, outs, _ in record
                                   for vs in (*ins.values(), *outs.values())
                                   for v in vs if v.persistable}
    counter = itertools.count()
    renamed: dict[str, str] = {}

    def fresh() -> str:
        while (name := f"t_{next(counter)}") in taken:
            pass
        taken.add(name)
        return name

    def name_of(v: Any) -> str:
        if v.name not in renamed:
            renamed[v.name] = names.get(v.name) or (v.name if v.persistable else fresh())
        name = renamed[v.name]
        if not block.has_var(name):
            value = getattr(v, "_value", None)
            shape = list(value.shape) if value is not None else list(v.shape or [])
            block.create_var(name=name, shape=shape, dtype=v.dtype,
                             persistable=bool(v.persistable),
                             stop_gradient=bool(v.stop_gradient),
                             is_data=any(v is x for x in inputs))
        return name

    with framework._dygraph_guard(None):
        for op_type, ins, outs, attrs in record:
            written = [v for vs in outs.values() for v in vs]
            if written and all(v.persistable for v in written) and not any(
                    v.persistable for vs in ins.values() for v in vs):
                continue  # a parameter's initializer (its first call built the Layer)
            block.append_op(op_type,
                            inputs={s: [name_of(v) for v in vs] for s, vs in ins.items()},
                            outputs={s: [name_of(v) for v in vs] for s, vs in outs.items()},
                            attrs=attrs, infer_shape=False)
    return original, program
