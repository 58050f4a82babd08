"""Fluid's ``fluid.transpiler``: program rewrites applied before running.

Here so far: ``memory_optimize`` and ``release_memory`` (see ``parafluid.passes``).

Example::

    from parafluid import transpiler
    transpiler.memory_optimize(main_program, skip_opt_set={prediction.name})
"""

from __future__ import annotations

from ..passes.memory_optimize import memory_optimize
from ..passes.release_memory import release_memory

__all__ = ["memory_optimize", "release_memory"]
