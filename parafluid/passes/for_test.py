"""Pass behind ``Program.clone(for_test=True)``: the program an evaluation runs.

Backward, optimize and LR-schedule ops are dropped, ops with an ``is_test`` attr (dropout,
batch_norm) switch to inference behaviour, and gradient variables nothing uses any more are
removed. ``clone`` applies it to its fresh copy, so the caller's program is never modified.

Example::

    test_program = main.clone(for_test=True)
"""

from __future__ import annotations

from ..framework import GRAD_SUFFIX, OpRole, Program

__all__ = ["prune_for_test"]


def prune_for_test(p: Program) -> None:
    """In place, on a fresh copy: drop backward/optimize/LR ops, set ``is_test``, drop unused
    gradient variables."""
    drop = OpRole.Backward | OpRole.Optimize | OpRole.LRSched
    for block in p.blocks:
        block.ops = [op for op in block.ops if not (op.attrs.get("op_role", 0) & drop)]
        for op in block.ops:
            if "is_test" in op.attrs:
                op.attrs["is_test"] = True
    # NOTE: over every block: a variable of the global block may be used only in a sub-block
    used = {n for block in p.blocks for op in block.ops
            for n in op.input_arg_names + op.output_arg_names}
    for block in p.blocks:
        for name in list(block.vars):
            if name not in used and (name.endswith(GRAD_SUFFIX) or GRAD_SUFFIX + "@" in name):
                del block.vars[name]
    p._appending_grad_times = 0
    p._bump()
