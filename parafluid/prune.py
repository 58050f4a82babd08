"""Pruning a program down to what computes some targets from some feeds (for inference).

``prune(program, targets, feeds)`` returns a new Program: a ``clone(for_test=True)`` of
``program`` (no backward or optimizer ops, ``is_test`` set) keeping only the ops of the
global block that the targets depend on, walking back from the targets and stopping at the
feeds. Variables no kept op uses are dropped (feeds and targets always stay). The caller's
program is never changed.

Example::

    infer = prune(fluid.default_main_program(), targets=[logits], feeds=["img"])
    print(infer)   # only the forward ops from img to logits
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from .framework import Block, Operator, Program, Variable
from .ops.registry import EMPTY

__all__ = ["prune"]


def prune(program: Program, targets: Sequence[Variable | str],
          feeds: Iterable[Variable | str] = ()) -> Program:
    """Return the part of ``program`` that computes ``targets`` from ``feeds``.

    Args:
        program: the program to prune (not modified).
        targets: Variables or names whose values the pruned program must compute.
        feeds: Variables or names that will be fed; ops producing them are not kept.

    Raises:
        ValueError: a target or feed is not in the program, or a target needs a variable that
            is neither fed, persistable, nor computed by an op (the error names it and the
            op that reads it).

    Example::

        test_prog = prune(main, [prediction], ["x"])
    """
    if not isinstance(program, Program):
        raise TypeError(f"prune: program must be a Program, got {type(program).__name__}")
    target_names = _as_names(targets, "targets")
    feed_names = _as_names(feeds, "feeds")
    if not target_names:
        raise ValueError("prune: no targets given; pass the variables to compute")
    src_block = program.global_block()
    for kind, names in (("target", target_names), ("feed", feed_names)):
        for name in names:
            if src_block._find_var_recursive(name) is None:
                raise ValueError(f"prune: {kind} {name!r} is not a variable of the program")

    pruned = program.clone(for_test=True)
    block = pruned.global_block()
    fed = set(feed_names)
    needed = {n for n in target_names if n not in fed}
    # NOTE: the first reader of each needed name, to say who wants a missing variable.
    wanted_by: dict[str, str] = {n: "the targets" for n in needed}
    keep: list[Operator] = []
    for i in range(len(block.ops) - 1, -1, -1):
        op = block.ops[i]
        outs = [n for n in op.output_arg_names if n != EMPTY]
        if not any(n in needed for n in outs):
            continue
        keep.append(op)
        reads = set(op.input_arg_names) | _sub_block_reads(op)
        for n in outs:
            if n not in reads:
                needed.discard(n)
        for n in reads:
            if n != EMPTY and n not in fed and n not in needed:
                needed.add(n)
                wanted_by[n] = f"op {op.type} (created at {op.callsite})"
    keep.reverse()

    for name in sorted(needed):
        var = block._find_var_recursive(name)
        if var is None or not var.persistable:
            raise ValueError(
                f"prune: {name!r} is needed by {wanted_by[name]} but is not fed, not "
                f"persistable and no op computes it; add it to the feeds or drop the target "
                f"that needs it (feeds: {sorted(fed) or 'none'})")

    block.ops = keep
    used = {n for op in keep for n in op.input_arg_names + op.output_arg_names}
    used |= {n for op in keep for n in _sub_block_reads(op)}
    used |= set(target_names) | fed
    for name in list(block.vars):
        if name not in used:
            del block.vars[name]
    pruned._bump()
    return pruned


def _as_names(items: Any, what: str) -> list[str]:
    if isinstance(items, (Variable, str)):
        items = [items]
    names = []
    for item in items:
        if isinstance(item, Variable):
            names.append(item.name)
        elif isinstance(item, str):
            names.append(item)
        else:
            raise TypeError(f"prune: {what} must be Variables or names, "
                            f"got {type(item).__name__}: {item!r}")
    return names


def _sub_block_reads(op: Operator) -> set[str]:
    """Names that the sub-blocks of a control-flow op read (they belong to the outer block)."""
    reads: set[str] = set()
    stack = [v for v in op.attrs.values() if isinstance(v, Block)]
    stack += [b for v in op.attrs.values() if isinstance(v, list) for b in v
              if isinstance(b, Block)]
    while stack:
        sub = stack.pop()
        for inner in sub.ops:
            reads.update(n for n in inner.input_arg_names if n not in sub.vars)
            stack += [v for v in inner.attrs.values() if isinstance(v, Block)]
    return reads
