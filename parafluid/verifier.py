"""Checks that a Program is well formed; every pass's output goes through it in the tests.

``verify(program)`` raises ``ProgramVerificationError`` listing each problem with how to fix
it: a variable used before any op defines it (and not fed, persistable or a data variable),
an unregistered op type, an unknown or missing slot, a missing variable, or a declared shape
or dtype that disagrees with what the op's shape rule infers.
"""

from __future__ import annotations

import operator
from typing import Any

from .ops.registry import (
    EMPTY,
    Meta,
    declared_inputs,
    get_op_def,
    input_metas,
    shapes_compatible,
    slot_problems,
)

__all__ = ["verify", "ProgramVerificationError", "find_problems"]


class ProgramVerificationError(ValueError):
    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__(f"{len(problems)} problem(s) in program:\n  " + "\n  ".join(problems))


def verify(program: Any) -> None:
    problems = find_problems(program)
    if problems:
        raise ProgramVerificationError(problems)


def _handed_in(program: Any) -> dict[int, set[str]]:
    """Names an op feeds its sub-blocks besides the outer variables they see: the previous
    step's states of ``recurrent`` (and ``recurrent_grad``), its ``ex_states``."""
    out: dict[int, set[str]] = {}
    for block in program.blocks:
        for op in block.ops:
            names = op.attrs.get("ex_states")
            if names:
                for sub in op.sub_blocks:
                    out.setdefault(sub.idx, set()).update(names)
    return out


def find_problems(program: Any) -> list[str]:
    problems: list[str] = []
    handed = _handed_in(program)
    for block in program.blocks:
        defined = {n for n, v in block.vars.items() if v.persistable or v.is_data}
        defined |= handed.get(block.idx, set())
        parent = block.parent_block
        while parent is not None:  # a sub-block sees everything its ancestors define
            defined |= set(parent.vars)
            parent = parent.parent_block
        for i, op in enumerate(block.ops):
            where = f"block {block.idx} op #{i} {op.type}"
            try:
                opdef = get_op_def(op.type)
            except ValueError as e:
                problems.append(f"{where}: {e}")
                continue
            problems += [f"{where}: {p}" for p in slot_problems(op, opdef)]
            for name in (n for names in declared_inputs(op, opdef).values() for n in names):
                if name == EMPTY:
                    continue
                if block._find_var_recursive(name) is None:
                    problems.append(f"{where}: input {name!r} is not a variable of the block; "
                                    "create it with block.create_var")
                elif name not in defined:
                    problems.append(f"{where}: input {name!r} is used before any op defines it; "
                                    "feed it (mark it is_data) or compute it earlier")
            for name in op.output_arg_names:
                if name != EMPTY and block._find_var_recursive(name) is None:
                    problems.append(f"{where}: output {name!r} is not a variable of the block")
                defined.add(name)
            problems += _check_shapes(where, op, opdef, block)
    return problems


def _check_shapes(where: str, op: Any, opdef: Any, block: Any) -> list[str]:
    if opdef.infer_shape is None:
        return []
    try:
        ins = input_metas(op, opdef, block)
    except ValueError:
        return []  # already reported as a missing variable
    if ins is None:
        return [f"{where}: an input has no known shape or dtype"]
    try:
        inferred = opdef.infer_shape(ins, op.attrs)
    except Exception as e:  # noqa: BLE001 - any failure of a shape rule is a finding
        return [f"{where}: shape inference failed: {e}"]
    out = []
    for slot, names in op.outputs.items():
        metas = inferred.get(slot)
        if metas is None:
            continue
        if not isinstance(metas, list):
            metas = [metas] * len(names)
        for name, meta in zip(names, metas):
            var = block._find_var_recursive(name)
            if var is None or meta is None or name == EMPTY:
                continue
            meta = _as_meta(meta)
            if meta is None:
                out.append(f"{where}: shape inference gave {name!r} no usable shape and dtype "
                           "(check the op's attributes)")
                continue
            if var.shape is None or not shapes_compatible(var.shape, meta.shape):
                out.append(f"{where}: output {name!r} is declared {list(var.shape or [])} but "
                           f"the op infers {list(meta.shape)}")
            if var.dtype != meta.dtype:
                out.append(f"{where}: output {name!r} is declared {var.dtype} but the op "
                           f"infers {meta.dtype}")
    return out


def _as_meta(meta: Any) -> Meta | None:
    """``meta`` as a Meta of integer sizes, or None: a shape rule fed odd attributes (from a
    damaged program file, say) may return anything, and verify must report, not crash."""
    try:
        meta = Meta(*meta)
        shape = tuple(operator.index(d) for d in meta.shape)  # ints, numpy ints; no floats
    except TypeError:
        return None
    return meta._replace(shape=shape)
