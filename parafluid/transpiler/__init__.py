"""Fluid's ``fluid.transpiler``: program rewrites applied before running.

``DistributeTranspiler`` with ``DistributeTranspilerConfig`` (pserver mode, see
docs/pserver.md; nccl2 mode, see docs/distributed.md), the dispatchers ``RoundRobin`` and
``HashName``, and ``memory_optimize`` / ``release_memory`` (the
passes of ``parafluid.passes``; see docs/memory.md).

Example::

    from parafluid import transpiler
    transpiler.memory_optimize(main_program, skip_opt_set={prediction.name})
"""

from __future__ import annotations

from ..passes.memory_optimize import memory_optimize
from ..passes.release_memory import release_memory
from .config import DistributeTranspilerConfig
from .distribute_transpiler import DistributeTranspiler
from .ps_dispatcher import HashName, PSDispatcher, RoundRobin

__all__ = ["DistributeTranspiler", "DistributeTranspilerConfig", "memory_optimize",
           "release_memory", "PSDispatcher", "RoundRobin", "HashName"]
