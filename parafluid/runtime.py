"""Binding ops to kernels: the per-op work that executors share.

``bind_op(op, device)`` resolves an op's kernel, slots and attrs *once* and returns a
callable ``run(env)`` that reads its inputs from ``env`` (a dict name -> tensor), calls the
kernel and writes its outputs back. The sequential Executor runs a list of these in order;
the ParallelExecutor runs them from a thread pool.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .ops.registry import EMPTY, KernelContext, get_op_def

__all__ = ["bind_op", "OpRunError", "describe_op"]

Runner = Callable[[dict[str, Any]], None]


class OpRunError(RuntimeError):
    """An op failed at run time; the message says which op, where it was built, and why.

    The original exception is kept as ``__cause__``; ``op_index`` and ``op_type`` are set.
    """

    def __init__(self, message: str, op_index: int, op_type: str) -> None:
        super().__init__(message)
        self.op_index = op_index
        self.op_type = op_type


def describe_op(op: Any) -> str:
    ins = ", ".join(f"{k}=[{', '.join(v)}]" for k, v in op.inputs.items())
    return f"{op.type} ({ins})"


def op_error(op: Any, index: int, exc: BaseException) -> OpRunError:
    msg = (f"while running op #{index} {describe_op(op)}, created at {op.callsite}:\n"
           f"  {type(exc).__name__}: {exc}")
    return OpRunError(msg, index, op.type)


def bind_op(op: Any, device: Any, runtime: Any = None) -> Runner:
    """Return ``run(env)`` executing ``op`` on ``device`` against the value dict ``env``."""
    opdef = get_op_def(op.type)
    kernel = opdef.kernel
    if kernel is None:
        raise ValueError(f"op {op.type!r} has no kernel and cannot run in an executor")
    attrs = dict(op.attrs)
    ctx = KernelContext(op, device, runtime)
    in_spec = []
    for slot in opdef.inputs:
        names = op.inputs.get(slot.name)
        if names:
            in_spec.append((slot.name, tuple(names), slot.duplicable))
        elif slot.optional:
            in_spec.append((slot.name, (), slot.duplicable))
    out_spec = [(slot.name, tuple(op.outputs[slot.name]), slot.duplicable)
                for slot in opdef.outputs if op.outputs.get(slot.name)]

    # NOTE: the common shapes (single-variable slots, absent optional ones) get straight-line
    # closures: this is the per-op hot path of every executor.
    if all(not dup and len(names) <= 1 for _, names, dup in in_spec) and \
            all(not dup and len(names) == 1 for _, names, dup in out_spec):
        in_pairs = tuple((slot, names[0]) for slot, names, _ in in_spec if names)
        absent = tuple(slot for slot, names, _ in in_spec if not names)
        out_pairs = tuple((slot, names[0]) for slot, names, _ in out_spec
                          if names[0] != EMPTY)
        if not absent and len(out_pairs) == 1:
            out_slot, out_name = out_pairs[0]

            def run_one(env: dict[str, Any]) -> None:
                env[out_name] = kernel({s: env[n] for s, n in in_pairs}, attrs, ctx)[out_slot]
            return run_one

        def run_simple(env: dict[str, Any]) -> None:
            ins = {s: env[n] for s, n in in_pairs}
            for s in absent:
                ins[s] = None
            outs = kernel(ins, attrs, ctx)
            for s, n in out_pairs:
                env[n] = outs[s]
        return run_simple

    def run_general(env: dict[str, Any]) -> None:
        ins: dict[str, Any] = {}
        for slot, names, dup in in_spec:
            if dup:
                ins[slot] = [None if n == EMPTY else env[n] for n in names]
            else:
                ins[slot] = env[names[0]] if names else None
        outs = kernel(ins, attrs, ctx)
        for slot, names, dup in out_spec:
            value = outs[slot]
            if dup:
                if len(value) != len(names):
                    raise RuntimeError(f"kernel of {op.type} returned {len(value)} values for "
                                       f"output slot {slot}, expected {len(names)}")
                for n, v in zip(names, value):
                    if n != EMPTY:
                        env[n] = v
            elif names[0] != EMPTY:
                env[names[0]] = value
    return run_general
