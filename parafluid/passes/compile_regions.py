"""Pass: group maximal runs of compilable ops into ``compiled_segment`` ops.

Each segment op holds its ops, unchanged and in program order, in a sub-block of its own;
its ``X`` slot lists the values the ops read from outside the run, its ``Out`` slot the
values they write that are still needed afterwards: a persistable (it goes to the scope),
a name in ``keep`` (fetch targets), or a name live after the run (``liveness.block_liveness``).
Everything else a segment computes lives only inside it. The engine runs a segment as one
task, a function of the ops' own kernels handed to ``torch.compile`` (see
``parafluid.engine.compiled_functions``).

An op can be compiled when it:

- has a kernel, is not a side-effect op (collectives, send/recv, barriers, print, ...) nor a
  communication op (``comm`` in its row: memcpy between devices, ...) and holds no
  sub-block (control flow stays interpreted; its neighbours still compile);
- draws no random numbers (an op with a ``seed`` attr: kept interpreted so that its draws
  are those of the interpreted run);
- reads and writes no row-sparse value (``SelectedRows``; e.g. ``lookup_table`` with
  ``is_sparse=True`` and its gradient);
- was not declared ``no_compile`` in its registration (a host round trip such as
  ``py_func``, a value-dependent output shape).

A segment never mixes devices (``op_device``) or owner devices (the Reduce strategy's
``owner_device``), so placement and data parallelism see the same structure as before. The
update ops (``OpRole.Optimize``) join the computation right before them (``fuse_updates``,
the default): forward, backward and update become one segment, one compiled call per step.
Such a segment has ``commit=True``: it computes the new values of the persistables it
updates into fresh tensors and the engine commits them after the call, by swapping each
scope variable's value, so a step that fails inside it changes nothing (the atomic step).
A run never goes back from updates to computation: an op after the updates that is not an
update starts a new segment. ``tiered=True`` (``background``) asks the engine to run a
segment op by op at once and compile it on a background thread, switching over when ready.
``print(program)`` after the pass shows each segment op and, in its block, the ops inside it.
``PARAFLUID_DEBUG=1`` logs every op left out of the segments and why.

Example::

    seg = compile_regions(main, keep=[loss.name])
    print(seg)   # {Out=[...]} = compiled_segment(X=[x, fc_0.w_0, ...]) {segment=0, ...}
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from typing import Any

from ..dtypes import VarType
from ..framework import Block, OpRole, Program
from ..ops.registry import EMPTY, get_op_def, has_op
from .liveness import block_liveness

__all__ = ["compile_regions", "why_not_compilable", "run_io", "SEGMENT_OP", "MIN_SEGMENT_OPS"]

log = logging.getLogger("parafluid.compile")

SEGMENT_OP = "compiled_segment"
MIN_SEGMENT_OPS = 2  # a lone op gains nothing from compiling: it stays as it is


def why_not_compilable(op: Any, block: Block) -> str | None:
    """Why ``op`` cannot go into a compiled segment, or None when it can."""
    if not has_op(op.type):
        return "it is not a registered op"
    opdef = get_op_def(op.type)
    if opdef.kernel is None:
        return "it has no kernel"
    if opdef.side_effect:
        return "it has a side effect (communication, I/O or a barrier)"
    if opdef.comm:
        return ("it moves values between devices or processes (communication stays between "
                "segments, so that it overlaps the computation)")
    if opdef.no_compile:
        return opdef.no_compile
    if op.sub_blocks:
        return "it holds a sub-block (control flow)"
    if "seed" in opdef.attrs:
        return "it draws random numbers (kept interpreted: the same draws as the interpreter)"
    if op.attrs.get("is_sparse"):
        return "it makes a row-sparse (SelectedRows) gradient"
    for name in (*op.input_arg_names, *op.output_arg_names):
        if name == EMPTY:
            continue
        var = block._find_var_recursive(name)
        if var is not None and var.type != VarType.LOD_TENSOR:
            return f"{name!r} is a {var.type} value, not a dense tensor"
    return None


def run_io(ops: Iterable[Any]) -> tuple[list[str], list[str]]:
    """What a run of ops reads from outside it and what it writes, each name once, in the
    order of first use (``EMPTY`` left out)."""
    reads: dict[str, None] = {}
    written: dict[str, None] = {}
    for op in ops:
        for n in op.input_arg_names:
            if n != EMPTY and n not in written:
                reads[n] = None
        for n in op.output_arg_names:
            if n != EMPTY:
                written[n] = None
    return list(reads), list(written)


def _key(op: Any) -> tuple:
    role = int(op.attrs.get("op_role", 0))
    update = bool(role & OpRole.Optimize) or bool(role & OpRole.LRSched)
    return (op.attrs.get("op_device") or "", op.attrs.get("owner_device", -1), update)


def _joins(op: Any, first: Any, prev: Any, fuse_updates: bool) -> bool:
    """Whether ``op`` may continue the run that began with ``first`` (last op ``prev``)."""
    a, b, c = _key(op), _key(first), _key(prev)
    if a[:2] != b[:2]:
        return False
    if a[2] == c[2]:
        return True
    # computation -> updates: one segment when fusing; updates -> computation: never
    return fuse_updates and c[2] is False and a[2] is True


def compile_regions(program: Program, keep: Iterable[str] = (),
                    min_ops: int = MIN_SEGMENT_OPS, fuse_updates: bool = True,
                    background: bool = False) -> Program:
    """A copy of ``program`` whose global block has its runs of compilable ops (at least
    ``min_ops`` long) replaced by ``compiled_segment`` ops; ``program`` is not modified.

    Args:
        keep: names that must stay readable after the run (the fetch targets).
        min_ops: the shortest run that becomes a segment.
        fuse_updates: the update ops join the computation before them (one compiled call
            for forward, backward and update; the segment commits its new values at its
            end); False keeps them a segment of their own.
        background: tiered compilation: segments run op by op until their compiled code,
            built on a background thread, is ready (docs/compiled.md).
    """
    out = program.clone()
    block = out.global_block()
    ops = list(block.ops)
    keep = set(keep)
    live = block_liveness(block, ignore=lambda n: n == EMPTY)

    def persistable(name: str) -> bool:
        var = block._find_var_recursive(name)
        return var is not None and var.persistable

    runs: list[tuple[int, int]] = []  # [start, end) of each run of compilable ops
    start = None
    debug = os.environ.get("PARAFLUID_DEBUG", "0") not in ("", "0")
    for i, op in enumerate(ops):
        why = why_not_compilable(op, block)
        ok = why is None
        if debug and not ok:
            log.warning("segment: op #%d %s (created at %s) stays interpreted: %s", i, op.type,
                        op.callsite, why)
        if start is not None and (not ok or not _joins(op, ops[start], ops[i - 1],
                                                       fuse_updates)):
            runs.append((start, i))
            start = None
        if ok and start is None:
            start = i
    if start is not None:
        runs.append((start, len(ops)))
    runs = [(a, b) for a, b in runs if b - a >= min_ops]
    if not runs:
        return out
    new_ops: list[Any] = []
    pos = 0
    for number, (a, b) in enumerate(runs):
        new_ops.extend(ops[pos:a])
        run = ops[a:b]
        reads, written = run_io(run)
        after = live.live_out[b - 1]
        outs = [n for n in written if n in after or n in keep or persistable(n)]
        sub = out._create_block(parent_idx=0)
        for op in run:
            op.block = sub
            sub.ops.append(op)
        out._rollback()
        first = run[0]
        commit = _key(first)[2] != _key(run[-1])[2]
        attrs = {"sub_block": sub, "segment": number, "commit": commit, "tiered": background,
                 "op_role": int(first.attrs.get("op_role", 0)),
                 "op_role_var": [v for op in run for v in op.attrs.get("op_role_var", [])]}
        device, owner, _ = _key(first)
        if device:
            attrs["op_device"] = device
        if owner != -1:
            attrs["owner_device"] = owner
        seg = block._make_op(SEGMENT_OP, {"X": reads}, {"Out": outs}, attrs, infer=False)
        seg.callsite = first.callsite
        new_ops.append(seg)
        pos = b
    new_ops.extend(ops[pos:])
    block.ops[:] = new_ops
    out._bump()
    return out
