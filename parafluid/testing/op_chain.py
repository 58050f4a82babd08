"""Run a chain of ops as one program: what a fused op is compared with.

``run_op_chain(ops, feed, fetch)`` builds a program whose data variables are the fed arrays
(a ``(array, lod)`` pair feeds a LoDTensor), appends ``ops`` (``(type, inputs, outputs,
attrs)`` with slot -> variable names; outputs are created on the fly) and returns the
fetched arrays::

    out, = run_op_chain([("mul", {"X": ["x"], "Y": ["w"]}, {"Out": ["xw"]}, {}),
                         ("relu", {"X": ["xw"]}, {"Out": ["out"]}, {})],
                        {"x": x, "w": w}, ["out"])
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..executor import Executor
from ..framework import Program, program_guard
from ..place import CPUPlace
from ..scope import LoDTensor, Scope

__all__ = ["run_op_chain"]

OpSpec = tuple[str, dict[str, list[str]], dict[str, list[str]], dict[str, Any]]


def run_op_chain(ops: Sequence[OpSpec], feed: dict[str, Any], fetch: Sequence[str],
                 return_numpy: bool = True) -> list[Any]:
    """Run ``ops`` once on ``feed`` in a fresh scope; return the ``fetch`` arrays (LoDTensors
    with ``return_numpy=False``)."""
    program = Program()
    block = program.global_block()
    values: dict[str, Any] = {}
    with program_guard(program, Program()):
        for name, value in feed.items():
            array, lod = value if isinstance(value, tuple) else (value, None)
            array = np.asarray(array)
            block.create_var(name=name, shape=array.shape, dtype=array.dtype, is_data=True,
                             lod_level=len(lod or ()))
            if lod is None:
                values[name] = array
            else:
                t = LoDTensor()
                t.set(array)
                t.set_lod(lod)
                values[name] = t
        for type_, inputs, outputs, attrs in ops:
            for names in outputs.values():
                for n in names:
                    if block._find_var_recursive(n) is None:
                        block.create_var(name=n)
            block.append_op(type_, inputs=inputs, outputs=outputs, attrs=dict(attrs))
    return Executor(CPUPlace()).run(program, feed=values, fetch_list=list(fetch),
                                    scope=Scope(), return_numpy=return_numpy)
