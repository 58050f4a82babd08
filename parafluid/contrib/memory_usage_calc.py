"""``memory_usage``: a rough estimate of the memory a program's global block needs."""

from __future__ import annotations

from ..dtypes import VarType, to_numpy
from ..framework import Program

__all__ = ["memory_usage"]


def memory_usage(program: Program, batch_size: int) -> tuple[float, float, str]:
    """The memory the outputs of ``program``'s global-block ops take for ``batch_size``.

    Each LoD tensor an op writes counts once, its ``-1`` dim (at most one) taken as
    ``batch_size``; the sum is given in B, KB or MB (the largest unit it exceeds 1024 of)
    with 5% and 10% on top for what the estimate does not see. Returns
    ``(min_total_memory, max_total_memory, unit)``, as Fluid's ``memory_usage`` does.

    Example::

        lo, hi, unit = fluid.contrib.memory_usage(fluid.default_main_program(), batch_size=64)
        print(f"memory usage is about {lo:.2f} - {hi:.2f} {unit}")
    """
    if not isinstance(program, Program):
        raise TypeError(f"memory_usage: program must be a fluid.Program, got "
                        f"{type(program).__name__}")
    if not isinstance(batch_size, int) or batch_size <= 0:
        raise ValueError(f"memory_usage: batch_size must be a positive int, got {batch_size!r}")
    block = program.global_block()
    total = 0.0
    seen = {"@EMPTY@"}
    for op in block.ops:
        for name in op.output_arg_names:
            if name in seen:
                continue
            seen.add(name)
            var = block.vars.get(name)
            if var is None or var.type != VarType.LOD_TENSOR or var.dtype is None:
                continue
            count, unknown = 1, 0
            for d in var.shape or ():
                if d < 0:
                    unknown += 1
                    if unknown > 1:
                        raise ValueError(f"memory_usage: variable {name} has more than one "
                                         f"unknown (-1) dim, shape {list(var.shape)}")
                    count *= batch_size * -d
                else:
                    count *= d
            total += count * to_numpy(var.dtype)(0).itemsize
    unit = "B"
    for bigger in ("KB", "MB"):
        if total <= 1024:
            break
        total /= 1024
        unit = bigger
    return total * 1.05, total * 1.1, unit
