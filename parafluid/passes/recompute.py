"""Recomputation (Fluid's ``RecomputeOptimizer`` / ``append_backward(checkpoints=...)``):
the forward ops of each segment between checkpoints run again just before their gradient
ops need them.

``recompute(block, first_backward_op, checkpoints)`` rewrites a block whose backward ops
start at ``first_backward_op``, in place (as ``append_backward`` does). The segments are
Fluid 1.6's: with one checkpoint, the ops from the first up to the one writing it; with
several (ordered by their writers), from the first op reading one checkpoint to the last
op writing the next, for each pair the one reaches from the other; and, before the first
of these, the ops from the start of the block. Values are held (not recomputed) as in
Fluid: the checkpoints, a segment's outputs read after it, the block's inputs; and, for the
numbers to stay those of the plain backward pass, the outputs of ops that cannot run twice
(dropout and other random ops, whose second draw would differ; ops with sub-blocks or side
effects; ops writing a persistable variable, such as batch_norm's running statistics). The
other values a segment writes that backward ops read are written again by copies of the
ops computing them, under ``<name>@RECOMPUTE``, inserted before the first backward op
reading one of them; the backward ops read the copies. The originals are then dead after
their last forward use, so the executors' liveness-based release frees them during the
forward pass. The ops after the last checkpoint are not recomputed, as in Fluid.

Example::

    first = len(block.ops)
    ... append the backward ops ...
    recompute(block, first, [fc_1.name, pred.name])
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..framework import OpRole

__all__ = ["recompute", "RECOMPUTE_SUFFIX"]

RECOMPUTE_SUFFIX = "@RECOMPUTE"
# ops whose second run would not repeat the first
_NOT_REPLAYABLE = frozenset({
    "dropout", "uniform_random", "gaussian_random", "truncated_gaussian_random",
    "uniform_random_batch_size_like", "gaussian_random_batch_size_like", "random_crop",
    "sampling_id", "nce", "sample_logits", "print", "py_func", "increment",
})


def _replayable(op: Any) -> bool:
    if op.type in _NOT_REPLAYABLE:
        return False
    return not any(k == "sub_block" or k.endswith("_block") for k in op.attrs)


def recompute(block: Any, first_backward_op: int, checkpoints: Sequence[str]) -> int:
    """Insert the recomputation of each segment between ``checkpoints`` (variable names);
    returns the number of ops inserted."""
    forward = block.ops[:first_backward_op]
    writers: dict[str, list[int]] = {}
    readers: dict[str, list[int]] = {}
    for i, op in enumerate(forward):
        for n in op.input_arg_names:
            readers.setdefault(n, []).append(i)
        for n in op.output_arg_names:
            writers.setdefault(n, []).append(i)
    held = set(checkpoints)
    for op in forward:
        if not _replayable(op) or any(_lasting(block, n) for n in op.output_arg_names):
            held.update(op.output_arg_names)
    inserted = 0
    for lo, hi in _segments(checkpoints, writers, readers, len(forward)):
        segment = forward[lo:hi]
        # a value read after its segment lives on, as in Fluid
        held.update(n for op in segment for n in op.output_arg_names
                    if any(j >= hi for j in readers.get(n, ())))
        inner = {n for op in segment for n in op.output_arg_names
                 if n not in held and not _lasting(block, n)}
        inserted += _replay(block, first_backward_op + inserted, segment, inner)
    return inserted


def _segments(checkpoints: Sequence[str], writers: dict[str, list[int]],
              readers: dict[str, list[int]], n_ops: int) -> list[tuple[int, int]]:
    """Fluid 1.6's recompute segments (op index ranges) of the forward ops."""
    known = [c for c in dict.fromkeys(checkpoints) if c in writers or c in readers]
    known.sort(key=lambda c: max(writers.get(c, [-1])))
    segments = []
    if len(known) == 1:
        last = max(writers.get(known[0], [-1]))
        if last > 0:
            segments.append((0, last + 1))
    for a, b in zip(known, known[1:]):
        lo = min(readers.get(a, [n_ops]))
        hi = max(writers.get(b, [-1]))
        if lo < hi:  # b is reached from a
            segments.append((lo, hi + 1))
    if segments and segments[0][0] != 0:
        segments.insert(0, (0, segments[0][0]))
    return segments


def _replay(block: Any, first_backward_op: int, segment: list[Any], inner: set[str]) -> int:
    """Insert copies of the ops of ``segment`` computing the ``inner`` values backward ops
    read (and what those need) before the first such reader; returns the number inserted."""
    backward = block.ops[first_backward_op:]
    wanted = {n for op in backward for n in op.input_arg_names} & inner
    if not wanted:
        return 0
    at = first_backward_op + next(j for j, op in enumerate(backward)
                                  if any(n in wanted for n in op.input_arg_names))
    replay = []
    for op in reversed(segment):
        if any(n in wanted for n in op.output_arg_names):
            replay.append(op)
            wanted.update(n for n in op.input_arg_names if n in inner)
    replay.reverse()
    # the copies write every value under a new name (one written with an inner value, a
    # checkpoint say, keeps its original); the backward ops read the copies of inner ones
    renamed = {n: n + RECOMPUTE_SUFFIX for op in replay for n in op.output_arg_names
               if not _lasting(block, n)}
    for n, new in renamed.items():
        if not block.has_var(new):
            v = block._var_recursive(n)
            block.create_var(name=new, shape=v.shape, dtype=v.dtype,
                             lod_level=v.lod_level, stop_gradient=True)
    for k, op in enumerate(replay):
        block._insert_op(
            at + k, op.type,
            inputs={s: [renamed.get(n, n) for n in names] for s, names in op.inputs.items()},
            outputs={s: [renamed.get(n, n) for n in names] for s, names in op.outputs.items()},
            attrs={**op.attrs, "op_role": OpRole.Backward}, infer_shape=False)
    for op in block.ops[at + len(replay):]:
        for n in set(op.input_arg_names) & inner & renamed.keys():
            op._rename_input(n, renamed[n])
    return len(replay)


def _lasting(block: Any, name: str) -> bool:
    # parameters, persistables and fed data are not intermediates: never renamed
    v = block._find_var_recursive(name)
    return v is None or v.persistable or getattr(v, "is_data", False)
