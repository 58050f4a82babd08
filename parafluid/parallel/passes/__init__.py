"""Program -> Program passes the ParallelExecutor applies before building its graph.

Each pass is one module with one entry point taking a Program and returning a new one (the
caller's program is never modified): ``fuse_elewise_add_act`` and ``sync_batch_norm``.
"""

from __future__ import annotations

from typing import Any

__all__ = ["apply_build_passes"]


def apply_build_passes(program: Any, build_strategy: Any, ndev: int) -> Any:
    """The program the multi-device graph is built from, for this BuildStrategy."""
    out = program
    if build_strategy.fuse_elewise_add_act_ops:
        from .fuse_elewise_add_act import fuse_elewise_add_act

        out = fuse_elewise_add_act(out)
    if build_strategy.sync_batch_norm and ndev > 1:
        from .sync_batch_norm import sync_batch_norm

        out = sync_batch_norm(out)
    return out
