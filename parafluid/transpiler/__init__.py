"""``fluid.transpiler``: program rewrites for distributed training.

``DistributeTranspiler`` with ``DistributeTranspilerConfig`` (nccl2 mode; the pserver mode is
being built). See docs/distributed.md.
"""

from __future__ import annotations

from .config import DistributeTranspilerConfig
from .distribute_transpiler import DistributeTranspiler

__all__ = ["DistributeTranspiler", "DistributeTranspilerConfig"]
