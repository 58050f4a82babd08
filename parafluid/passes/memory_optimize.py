"""memory_optimize: let a new variable take over the name, so the buffer, of a dead one.

Fluid 1.x's transpiler function, done in place on the given program as Fluid did. The
liveness of the global block (``parafluid.passes.liveness.block_liveness``) says after which
op each variable is read for the last time; such a variable goes into a pool. When a later
op defines a new variable of the same dtype and a fitting shape (level 0: equal; level 1:
batch-sized or not like it, and no more elements; the pool is searched in Fluid's order, so
the smallest such buffer), the new variable is renamed, from that op on,
to the dead one's name, and its own declaration is removed. At run time the executors then
hold one value per name: the dead value goes as soon as the new one is written, instead of
living to the end of the step (see docs/memory.md for how this relates to eager deletion
and ``release_memory``).

Never renamed nor reused (``protected_names``): persistables, feed targets (data variables,
``feed`` outputs), fetch targets (``fetch`` inputs, the loss, and every variable no op reads,
which is what a program's results look like), the loss gradient, ``skip_opt_set``, with
``skip_grads`` the parameter gradients, and every name an op of a sub-block mentions
(sub-blocks are left alone, with a warning). A parameter gradient may take a dead
variable's name, but its own name is never handed on (see the note in the code). Renaming
changes no computation, so results are bitwise identical.

Fetching a variable that was renamed away fails with a message naming the pass; fetching
one whose buffer another variable took over also fails (``check_fetch_targets``) instead of
silently returning the other variable's value: list it in ``skip_opt_set``.

Example::

    loss = build_model()
    fluid.optimizer.SGD(0.1).minimize(loss)
    fluid.memory_optimize(fluid.default_main_program(), print_log=True)
    # memory_optimize: op #9 relu_grad: fc_1.tmp_1@GRAD [-1, 64] float32 reuses fc_2.tmp_0 [-1, 64]
"""

from __future__ import annotations

import bisect
import math
import warnings
from collections.abc import Iterable
from typing import Any

from ..dtypes import VarType
from ..framework import OpRole, Program
from ..ops.registry import EMPTY
from .liveness import block_liveness

__all__ = ["memory_optimize", "protected_names", "check_fetch_targets"]


def memory_optimize(input_program: Program, skip_opt_set: Iterable[str] | None = None,
                    print_log: bool = False, level: int = 0, skip_grads: bool = True) -> None:
    """Reuse the buffers of dead variables by renaming, in place (Fluid's transpiler pass).

    Args:
        input_program: the Program to rewrite (its global block).
        skip_opt_set: names never renamed nor reused (e.g. variables you fetch).
        print_log: print each reuse.
        level: 0 reuses a variable of exactly the same shape; 1 also one of the same ``-1``
            pattern holding at least as many elements.
        skip_grads: leave the parameter gradients alone (Fluid's rule: the gradient named
            by each optimize op's ``op_role_var``); True by default, as in Fluid.

    Returns None, like Fluid. Example::

        fluid.memory_optimize(main_program, skip_opt_set={prediction.name})
        exe.run(main_program, feed=..., fetch_list=[loss, prediction])
    """
    program = _check_args("memory_optimize", input_program, skip_opt_set)
    if level not in (0, 1):
        raise ValueError(f"memory_optimize: level must be 0 (equal shapes) or 1 (same -1 "
                         f"pattern, no larger), got {level!r}")
    block = program.global_block()
    protected = protected_names(program, skip_opt_set, skip_grads, "memory_optimize")
    live = block_liveness(block)
    ops = block.ops
    n = len(ops)
    first_def: dict[str, int] = {}
    last_def: dict[str, int] = {}
    first_use: dict[str, int] = {}
    for i in range(n):
        for name in live.defs[i]:
            first_def.setdefault(name, i)
            last_def[name] = i
        for name in live.uses[i]:
            first_use.setdefault(name, i)

    def candidate(name: str) -> Any:
        var = block.vars.get(name)
        if (name in protected or var is None or var.type != VarType.LOD_TENSOR
                or var.shape is None or var.dtype is None):
            return None
        return var

    # NOTE: a parameter gradient may be renamed (its op_role_var entries follow), but its
    # name is never handed to another variable: two gradients under one name would hide the
    # first from the gradient aggregation pass, which finds them through op_role_var.
    role_vars = {n for op in ops for n in op.attrs.get("op_role_var") or ()}
    # NOTE: Fluid's pool order: batch-sized ([-1, ...]) entries first, then by element count,
    # the ones that died first first among equals; the first entry that fits is taken, so
    # level 1 picks the smallest dead buffer large enough.
    pool: list[str] = []
    # NOTE: recorded in the program (program.meta.memory_reuse): fetch checks, messages
    reuse = program.meta.memory_reuse
    for i, op in enumerate(ops):
        if pool:
            for x in dict.fromkeys(op.output_arg_names):
                xv = candidate(x)
                # only a variable born here: not read before (nor by this op), not written
                # before, so renaming it from this op on covers all of its life
                if xv is None or first_def.get(x) != i or first_use.get(x, n) <= i:
                    continue
                for k, c in enumerate(pool):
                    cv = block.vars[c]
                    if (cv.dtype != xv.dtype or not _shape_fits(xv.shape, cv.shape, level)
                            or c in live.live_in[i] or c in live.live_out[i]
                            or last_def[c] >= i):
                        continue
                    del pool[k]
                    _rename(ops, x, c, i)
                    live.rename(x, c, i)
                    last_def[c] = max(last_def[c], last_def.get(x, i))
                    block._remove_var(x)
                    reuse.setdefault(c, []).append((x, i))
                    if x in role_vars:
                        role_vars.add(c)
                    if print_log:
                        print(f"memory_optimize: op #{i} {op.type}: {x} {list(xv.shape)} "
                              f"{xv.dtype} reuses {c} {list(cv.shape)}")
                    break
        for name in sorted(live.dies_at(i)):
            if candidate(name) is not None and name not in pool and name not in role_vars:
                _pool_insert(pool, name, block)
    program._is_mem_optimized = True
    program._bump()


def protected_names(program: Program, skip_opt_set: Iterable[str] | None, skip_grads: bool,
                    who: str) -> set[str]:
    """Names of the global block that memory passes must neither rename, reuse nor delete."""
    block = program.global_block()
    out = {EMPTY} | _skip_names(skip_opt_set)
    read: set[str] = set()
    for op in block.ops:
        read.update(op.input_arg_names)
        if op.type == "feed":
            out.update(op.output_arg_names)
        if op.type == "fetch":
            out.update(op.input_arg_names)
        if op.attrs.get("op_role", 0) & OpRole.Loss:
            # the loss (always fetched) and the loss gradient (the data-parallel gradient
            # scale finds the op that fills it by this name)
            out.update(op.output_arg_names)
    for op in block.ops:
        out.update(n for n in op.output_arg_names if n not in read)  # results: fetch targets
        if skip_grads and op.attrs.get("op_role", 0) & OpRole.Optimize:
            # Fluid's rule: the parameter gradients (op_role_var's second entry)
            role_var = op.attrs.get("op_role_var") or []
            if len(role_var) >= 2:
                out.add(role_var[1])
    for name, var in block.vars.items():
        if var.persistable or var.is_data:
            out.add(name)

    if program.num_blocks > 1:
        inner = {n for b in program.blocks[1:] for op in b.ops
                 for n in op.input_arg_names + op.output_arg_names}
        warnings.warn(f"{who}: the program has {program.num_blocks - 1} sub-block(s) (control "
                      f"flow); they are left alone, and the {len(inner)} variables their ops "
                      "use are not touched in the global block either", stacklevel=3)
        out |= inner
    return out


def check_fetch_targets(program: Program, fetch: Iterable[str]) -> None:
    """Raise if a fetch target's buffer was handed to another variable by memory_optimize."""
    reuse = program.meta.memory_reuse
    if not reuse:
        return
    for name in fetch:
        taken = reuse.get(name)
        if taken:
            other, at = taken[0]
            raise ValueError(
                f"fetch target {name!r}: memory_optimize let {other!r} (op #{at}) reuse its "
                f"buffer, so after the run it holds another value; pass "
                f"skip_opt_set={{{name!r}}} to memory_optimize to fetch it")


# ---------------------------------------------------------------------- helpers


def _check_args(who: str, program: Any, skip_opt_set: Any) -> Program:
    if not isinstance(program, Program):
        raise TypeError(f"{who}: input_program must be a Program, got {type(program).__name__}")
    if skip_opt_set is not None and (isinstance(skip_opt_set, str) or not all(
            isinstance(n, str) or hasattr(n, "name") for n in skip_opt_set)):
        raise TypeError(f"{who}: skip_opt_set must be a set of variable names (or "
                        f"Variables), got {skip_opt_set!r}")
    return program


def _skip_names(skip_opt_set: Iterable[Any] | None) -> set[str]:
    return {n if isinstance(n, str) else n.name for n in skip_opt_set or ()}


def _shape_fits(x: Any, cache: Any, level: int) -> bool:
    """Fluid's rule: level 0 equal shapes; level 1 both batch-sized (first dim -1) or both
    not, and no more elements (the product of the dims, -1 counted as 1)."""
    x, cache = tuple(x), tuple(cache)
    if level == 0:
        return x == cache
    if not x or not cache or (x[0] == -1) != (cache[0] == -1):
        return False
    return abs(math.prod(x)) <= abs(math.prod(cache))


def _pool_insert(pool: list[str], name: str, block: Any) -> None:
    """Insert a dead name where Fluid's pool keeps it (see the note in memory_optimize)."""
    def key(n: str) -> tuple[bool, int]:
        shape = tuple(block.vars[n].shape)
        return (bool(shape) and shape[0] != -1, abs(math.prod(shape)) if shape else 0)

    bisect.insort(pool, name, key=key)  # after its equals: the first dead first among them


def _rename(ops: list[Any], old: str, new: str, start: int) -> None:
    """Rename ``old`` to ``new`` in the slots of ops ``start:`` and in every op_role_var (the
    gradient aggregation pass finds parameter gradients there)."""
    for op in ops[start:]:
        for names in (*op.inputs.values(), *op.outputs.values()):
            if old in names:
                names[:] = [new if n == old else n for n in names]
    for op in ops:
        role_var = op.attrs.get("op_role_var")
        if role_var and old in role_var:
            op.attrs["op_role_var"] = [new if n == old else n for n in role_var]
