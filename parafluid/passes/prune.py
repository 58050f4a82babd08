"""Pruning: keep only the ops whose results are needed.

``prune(program, targets, feeds)`` returns a new Program: a ``clone(for_test=True)`` of
``program`` (no backward or optimizer ops, ``is_test`` set) keeping only the ops of the
global block that the targets depend on, walking back from the targets and stopping at the
feeds. Variables no kept op uses are dropped (feeds and targets always stay). The caller's
program is never changed.

``eliminate_dead_code(program, keep)`` keeps the training program as it is but drops the
ops whose outputs nothing reads, that are not persistable and not in ``keep``.

Both keep every op with a side effect (``OpDef.side_effect``: send, recv, collectives,
barriers), in its order, together with what it reads: such an op matters for what it does
outside the program, not for its outputs.

Example::

    infer = prune(fluid.default_main_program(), targets=[logits], feeds=["img"])
    print(infer)   # only the forward ops from img to logits
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from ..framework import Block, Operator, Program, Variable
from ..ops.registry import EMPTY, get_op_def
from ..variable import var_names
from .liveness import sub_block_io

__all__ = ["prune", "eliminate_dead_code"]


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
    target_names = var_names(targets, "prune: targets")
    feed_names = var_names(feeds, "prune: feeds")
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
    keep = _walk_back(block, needed, fed, wanted_by)
    for name in sorted(needed):
        var = block._find_var_recursive(name)
        if var is None or not var.persistable:
            raise ValueError(
                f"prune: {name!r} is needed by {wanted_by[name]} but is not fed, not "
                f"persistable and no op computes it; add it to the feeds or drop the target "
                f"that needs it (feeds: {sorted(fed) or 'none'})")

    block.ops = keep
    used = {n for op in keep for n in op.input_arg_names + op.output_arg_names}
    used |= {n for op in keep for names in sub_block_io(op) for n in names}
    used |= set(target_names) | fed
    for name in list(block.vars):
        if name not in used:
            del block.vars[name]
    pruned._bump()
    return pruned


def eliminate_dead_code(program: Program, keep: Iterable[Variable | str] = ()) -> Program:
    """A copy of ``program`` without the global-block ops whose results nothing uses.

    An op stays if it has a side effect, writes a persistable, writes a name in ``keep``
    (e.g. the fetch targets), or writes something a kept op reads.

    Example::

        lean = eliminate_dead_code(main, keep=[loss])
    """
    if not isinstance(program, Program):
        raise TypeError(f"eliminate_dead_code: program must be a Program, got "
                        f"{type(program).__name__}")
    out = program.clone()
    block = out.global_block()
    needed = set(var_names(keep, "eliminate_dead_code: keep"))
    needed |= {n for op in block.ops for n in op.output_arg_names
               if (v := block._find_var_recursive(n)) is not None and v.persistable}
    kept = _walk_back(block, needed, set(), {})
    if len(kept) != len(block.ops):
        block.ops = kept
        out._bump()
    return out


def _walk_back(block: Block, needed: set[str], fed: set[str], wanted_by: dict[str, str]
               ) -> list[Operator]:
    """The ops (in order) that produce ``needed`` or have a side effect; ``needed`` ends up
    holding what nothing kept produces."""
    keep: list[Operator] = []
    for i in range(len(block.ops) - 1, -1, -1):
        op = block.ops[i]
        outs = [n for n in op.output_arg_names if n != EMPTY]
        if not get_op_def(op.type).side_effect and not any(n in needed for n in outs):
            continue
        keep.append(op)
        reads = set(op.input_arg_names) | sub_block_io(op)[0]
        for n in outs:
            if n not in reads:
                needed.discard(n)
        for n in reads:
            if n != EMPTY and n not in fed and n not in needed:
                needed.add(n)
                wanted_by[n] = f"op {op.type} (created at {op.callsite})"
    keep.reverse()
    return keep


