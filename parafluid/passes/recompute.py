"""Recomputation (Fluid's ``RecomputeOptimizer`` / ``append_backward(checkpoints=...)``):
the forward ops between two checkpoints run again just before their gradient ops need them.

``recompute(block, first_backward_op, checkpoints)`` rewrites a block whose backward ops
start at ``first_backward_op``, in place (as ``append_backward`` does). For each segment, the
ops after the op writing one checkpoint up to the op writing the next, the intermediate
values that backward ops read (everything the segment writes but the checkpoints) are
written again by copies of the segment's ops, under ``<name>@RECOMPUTE``, inserted before the
first backward op that reads one of them; the backward ops read the copies. The originals
are then dead after their last forward use, so the executors' liveness-based release frees
them during the forward pass: between the checkpoints only one segment's values are alive at
a time in the backward pass. The copies compute the same values from the same inputs, so the
gradients are those of the plain backward pass.

Segments that cannot be replayed are left as they are: those with random ops (a second
dropout mask would not match the first), with sub-blocks, with side effects, or writing a
persistable variable (batch_norm's running statistics would be updated twice). The ops
before the first checkpoint and after the last one are not recomputed, as in Fluid.

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
    ops = block.ops
    forward = ops[:first_backward_op]
    writer: dict[str, int] = {}
    for i, op in enumerate(forward):
        for n in op.output_arg_names:
            writer.setdefault(n, i)
    marks = sorted({writer[c] for c in checkpoints if c in writer})
    kept = set(checkpoints)
    inserted = 0
    for start, end in zip(marks, marks[1:]):
        segment = forward[start + 1:end + 1]
        if not segment or not all(_replayable(op) for op in segment) or any(
                _lasting(block, n) for op in segment for n in op.output_arg_names):
            continue  # a random op, a sub-block, or a write to a parameter / running stat
        inner = {n for op in segment for n in op.output_arg_names} - kept
        readers = [j for j, op in enumerate(block.ops[first_backward_op:])
                   if any(n in inner for n in op.input_arg_names)]
        if not readers:
            continue
        at = first_backward_op + readers[0]
        # only the ops the read values depend on (not the one writing just the checkpoint)
        wanted = {n for op in block.ops[first_backward_op:] for n in op.input_arg_names} & inner
        replay = []
        for op in reversed(segment):
            if any(n in wanted for n in op.output_arg_names):
                replay.append(op)
                wanted.update(n for n in op.input_arg_names if n in inner)
        segment = replay[::-1]
        inner = {n for op in segment for n in op.output_arg_names} & inner
        renamed = {n: n + RECOMPUTE_SUFFIX for op in segment for n in op.output_arg_names}
        for n, new in renamed.items():
            if not block.has_var(new):
                v = block._var_recursive(n)
                block.create_var(name=new, shape=v.shape, dtype=v.dtype,
                                 lod_level=v.lod_level, stop_gradient=True)
        for k, op in enumerate(segment):
            block._insert_op(
                at + k, op.type,
                inputs={s: [renamed.get(n, n) for n in names] for s, names in op.inputs.items()},
                outputs={s: [renamed.get(n, n) for n in names]
                         for s, names in op.outputs.items()},
                attrs={**op.attrs, "op_role": OpRole.Backward}, infer_shape=False)
        inserted += len(segment)
        for op in block.ops[at + len(segment):]:
            for n in set(op.input_arg_names) & inner:
                op._rename_input(n, renamed[n])
    return inserted


def _lasting(block: Any, name: str) -> bool:
    # parameters, persistables and fed data are not intermediates: never renamed
    v = block._find_var_recursive(name)
    return v is None or v.persistable or getattr(v, "is_data", False)
