"""Fluid 1.6's program-level description API on a Program: ``program.desc`` (its blocks'
descriptions, its bytes), and the program rewrites Fluid's Python calls on descriptions:
``Program._prune`` / ``_prune_with_input`` (``core.prune``) and ``_inference_optimize``.

These work on any object shaped as a Program (``blocks``, ``global_block()``, ``clone()``,
``serialize_to_string()``); ``framework`` resolves the targets to ops and calls them.

Example::

    data = program.desc.serialize_to_string()     # Fluid's spelling of the program's bytes
    pruned = program._prune_with_input(["y"], targets=[loss])
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

__all__ = ["ProgramDescView", "prune_program", "inference_program"]


class ProgramDescView:
    """Fluid's ``ProgramDesc`` of a program: ``num_blocks()``, ``block(i)`` (the block's
    ``BlockDesc``), ``serialize_to_string()`` (the program's bytes)."""

    __slots__ = ("_program",)

    def __init__(self, program: Any) -> None:
        self._program = program

    def num_blocks(self) -> int:
        return len(self._program.blocks)

    def block(self, index: int) -> Any:
        if not 0 <= index < len(self._program.blocks):
            raise IndexError(f"ProgramDesc.block({index}): the program has "
                             f"{len(self._program.blocks)} blocks")
        return self._program.blocks[index].desc

    def serialize_to_string(self) -> bytes:
        """The bytes ``Program.parse_from_string`` reads back."""
        return self._program.serialize_to_string()

    def flush(self) -> None:
        """Nothing to write back: the description is the program itself."""


def prune_program(program: Any, feeds: Iterable[str], targets: Sequence[tuple[int, int]]
                  ) -> Any:
    """Fluid's ``core.prune``: a copy of ``program`` whose global block keeps the target ops
    (``(block index, op index)`` pairs) and the ops computing what they read, walking back
    and stopping at the variables named in ``feeds``; the variables no kept op uses go.
    Nothing else changes (no ``is_test``, no role filtering: see ``inference_program``).
    """
    fed = set(feeds)
    out = program.clone()
    block = out.global_block()
    marked = {i for b, i in targets if b == 0}
    needed: set[str] = set()
    keep = []
    for i in range(len(block.ops) - 1, -1, -1):
        op = block.ops[i]
        if i in marked or any(n in needed for n in op.output_arg_names):
            needed.update(n for n in op.input_arg_names if n not in fed)
            keep.append(op)
    keep.reverse()
    block.ops = keep
    # NOTE: a kept op's sub-block may read variables of the global block beyond the op's
    # declared inputs; they stay too
    used = {n for op in keep for n in op.input_arg_names + op.output_arg_names}
    for sub in out.blocks[1:]:
        used.update(n for op in sub.ops for n in op.input_arg_names + op.output_arg_names)
    for name in list(block.vars):
        if name not in used:
            del block.vars[name]
    out._bump()
    return out


def inference_program(program: Any, prune_read_op: bool = True) -> Any:
    """Fluid's ``Program._inference_optimize``: a copy whose ops with an ``is_test`` attr
    run as at inference; with ``prune_read_op``, the global block's ops up to its first
    ``read`` op (the reader's) and its reader variables are gone."""
    out = program.clone()
    block = out.global_block()
    if prune_read_op:
        reads = [i for i, op in enumerate(block.ops) if op.type == "read"]
        if reads:
            block.ops = block.ops[reads[0] + 1:]
        for name in [n for n, v in block.vars.items() if v.type == "reader"]:
            del block.vars[name]
    for b in out.blocks:
        for op in b.ops:
            if "is_test" in op.attrs:
                op.attrs["is_test"] = True
    out._bump()
    return out
