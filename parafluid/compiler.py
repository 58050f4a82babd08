"""``fluid.compiler``: where Fluid 1.6 programs import CompiledProgram and the strategies.

Example::

    from parafluid import compiler
    prog = compiler.CompiledProgram(main).with_data_parallel(loss_name=loss.name)
"""

from __future__ import annotations

from .parallel import BuildStrategy, CompiledProgram, ExecutionStrategy

__all__ = ["CompiledProgram", "BuildStrategy", "ExecutionStrategy"]
