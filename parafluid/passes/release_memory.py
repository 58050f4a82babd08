"""release_memory: insert ``delete_var`` ops that drop each variable right after its last use.

Fluid 1.x's transpiler function, done in place on the given program. The liveness of the
global block (``parafluid.passes.liveness.block_liveness``) says which op reads each
variable for the last time; one ``delete_var`` op after that op lists every variable that
dies there. ``delete_var`` is an ordinary op whose ``OpDef`` says ``releases_inputs``: the
executors' release plan drops its inputs once every reader ran (on several devices, the
readers that may run concurrently are counted), whether eager deletion is on or not.

The same names as ``memory_optimize`` are left alone (``protected_names``: persistables,
feed and fetch targets, ``skip_opt_set``, names used in sub-blocks); a fetch target that is
deleted anyway (a variable you fetch but did not list) is kept by the executor, which never
drops what it is asked to fetch. Running the pass twice inserts nothing the second time.

``eager_deletion_enabled()`` reads Fluid's ``FLAGS_eager_delete_tensor_gb``
(``fluid.core.globals()`` or the environment; ``core._set_eager_deletion_mode``): a negative
value turns the Executor's eager deletion off (every temporary then lives to the end of the
step, Fluid 1.x's behaviour before eager deletion existed); 0 or more (the default 0) keeps
it on, and the garbage is freed at once whatever the threshold says.

Example::

    fluid.release_memory(main_program)
    print(main_program)   # ... {} = delete_var(X=[fc_0.tmp_0, fc_0.tmp_1]) ...
"""

from __future__ import annotations

from collections.abc import Iterable

from ..flags import flag
from ..framework import OpRole, Program
from .liveness import block_liveness
from .memory_optimize import _check_args, protected_names

__all__ = ["release_memory", "eager_deletion_enabled", "EAGER_DELETE_FLAG"]

EAGER_DELETE_FLAG = "FLAGS_eager_delete_tensor_gb"


def release_memory(input_program: Program, skip_opt_set: Iterable[str] | None = None) -> None:
    """Insert ``delete_var`` ops after the last use of each variable, in place.

    Args:
        input_program: the Program to rewrite (its global block).
        skip_opt_set: names never deleted.

    Returns None, like Fluid. Example::

        fluid.release_memory(main_program, skip_opt_set={hidden.name})
    """
    program = _check_args("release_memory", input_program, skip_opt_set)
    block = program.global_block()
    protected = protected_names(program, skip_opt_set, False, "release_memory")
    live = block_liveness(block)
    inserts: list[tuple[int, list[str]]] = []
    for i, op in enumerate(block.ops):
        if op.type == "delete_var":
            # NOTE: a variable a delete_var already drops dies at that delete_var, not at
            # its last real reader: a second run of the pass adds nothing
            continue
        dead = sorted(n for n in live.dies_at(i) if n not in protected and n in block.vars)
        if dead:
            inserts.append((i, dead))
    for i, dead in reversed(inserts):  # from the end, so earlier indexes stay valid
        role = block.ops[i].attrs.get("op_role", 0) & ~OpRole.Loss
        block._insert_op(i + 1, "delete_var", inputs={"X": dead}, attrs={"op_role": role})
    program._is_mem_optimized = True


def eager_deletion_enabled() -> bool:
    """False when ``FLAGS_eager_delete_tensor_gb`` is negative (Fluid's switch), else True
    (``core.globals()`` or the environment, see ``parafluid.flags``)."""
    return flag(EAGER_DELETE_FLAG) >= 0
