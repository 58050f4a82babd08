"""The skeleton of a pass that rewrites a program's op list: copy the program, hand its
global block's ops to a rewrite, store what it returns, and make new ops that pass the same
checks as ops appended by layers.

Example::

    def sync_batch_norm(program):
        return rewrite_global_ops(program, lambda block, ops: [...new op list...])
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..framework import Block, Operator, Program
from ..ops.registry import prepare_op

__all__ = ["rewrite_global_ops", "make_op"]


def rewrite_global_ops(program: Program,
                       rewrite: Callable[[Block, list[Operator]], list[Operator]]) -> Program:
    """A copy of ``program`` whose global block's ops are ``rewrite(block, ops)`` (``program``
    is not modified)."""
    out = program.clone()
    block = out.global_block()
    block.ops = rewrite(block, list(block.ops))
    out._bump()
    return out


def make_op(block: Block, type: str, inputs: dict[str, list[str]],
            outputs: dict[str, list[str]], attrs: dict[str, Any], callsite: Any,
            infer: bool = True) -> Operator:
    """A new op of ``block`` (not yet in its op list): slots checked, attr defaults filled,
    and with ``infer`` the shapes of its new output variables inferred."""
    op = Operator(block, type, {k: list(v) for k, v in inputs.items()},
                  {k: list(v) for k, v in outputs.items()}, dict(attrs), callsite)
    prepare_op(op, infer=infer)
    return op
