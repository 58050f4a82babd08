"""The process-wide parameter-server clients of a trainer (what the rpc ops talk through).

The ``send``/``recv``/barrier ops of a transpiled trainer program carry their trainer id and
endpoints as attrs; their kernels ask :func:`client_pool` for the process's
:class:`~parafluid.distributed.ps_client.ClientPool` of that trainer (created on first use,
with ``FLAGS_rpc_deadline``), so every op of every run reuses one connection per pserver, as
Fluid's process-wide RPC client did. ``Executor.close()`` calls :func:`complete_all`: every
pserver a pool talked to is told that its trainer is done, and the pools are dropped (a later
run starts fresh connections).

A trainer process that ends normally without ``Executor.close()`` (its script returned, or
called ``sys.exit``: the Fluid book's examples stop once the loss is low enough) is done
too: an exit hook completes the pools still open, so the other trainers go on. A process
that ends with an uncaught exception does not complete: its pservers see its connections
close without a completion and stop within about a second, naming it (and save an
emergency checkpoint).

Example::

    pool = client_pool(trainer_id=1)
    pool.get("127.0.0.1:6174").send("w@GRAD.trainer_1", grad)
    complete([1])                    # what Executor.close() does
"""

from __future__ import annotations

import atexit
import logging
import sys
import threading
from collections.abc import Iterable

from .deadline import rpc_deadline_seconds
from .ps_client import ClientPool

__all__ = ["client_pool", "complete", "complete_all", "active_pools"]

_POOLS: dict[int, ClientPool] = {}
_LOCK = threading.Lock()
_HOOKED = False
_EXIT_NOTICE_S = 3.0
log = logging.getLogger("parafluid.distributed.ps_registry")


def client_pool(trainer_id: int) -> ClientPool:
    """The process's client pool of trainer ``trainer_id`` (created on first use)."""
    if not isinstance(trainer_id, int) or trainer_id < 0:
        raise ValueError(f"client_pool: trainer_id must be an int >= 0, got {trainer_id!r}")
    with _LOCK:
        pool = _POOLS.get(trainer_id)
        if pool is None:
            pool = _POOLS[trainer_id] = ClientPool(trainer_id)
            _hook_exit()
        return pool


def _hook_exit() -> None:
    global _HOOKED
    if not _HOOKED:
        _HOOKED = True
        atexit.register(_complete_at_exit)


def _complete_at_exit() -> None:
    """At a normal exit, complete the pools left open (see the module docstring)."""
    with _LOCK:
        open_ids = sorted(_POOLS)
    if not open_ids:
        return
    # NOTE: the interpreter sets sys.last_value (3.12+: also sys.last_exc) when it printed
    # an uncaught exception; SystemExit (sys.exit, any code) is not one
    if getattr(sys, "last_exc", None) is not None or getattr(sys, "last_value", None) is not None:
        log.error("trainer(s) %s end with an uncaught exception: the pservers are not told "
                  "they are done (they stop when its connections close, naming them)", open_ids)
        return
    # NOTE: a pserver answers a completion at once; one that does not is gone, and the
    # process must not wait a whole deadline per pserver to exit
    try:
        complete(open_ids, deadline_s=min(rpc_deadline_seconds(), _EXIT_NOTICE_S))
    except Exception as e:  # noqa: BLE001 - nothing to raise to at exit
        log.error("trainer(s) %s: telling the pservers at exit that they are done failed: "
                  "%s: %s", open_ids, type(e).__name__, e)


def active_pools() -> list[int]:
    """The trainer ids that have a pool in this process."""
    with _LOCK:
        return sorted(_POOLS)


def complete_all() -> None:
    """Tell every pserver each pool talked to that its trainer is done; drop the pools."""
    complete(None)


def complete(trainer_ids: Iterable[int] | None, deadline_s: float | None = None) -> None:
    """Complete the pools of ``trainer_ids`` (None: all): every pserver a pool talked to is
    told that its trainer is done, and the pool is dropped (``deadline_s``: per notice).

    Every pool is completed even when one fails; the first error is raised afterwards.
    """
    with _LOCK:
        ids = list(_POOLS) if trainer_ids is None else [t for t in trainer_ids if t in _POOLS]
        pools = [_POOLS.pop(t) for t in ids]
    first: Exception | None = None
    for pool in pools:
        try:
            pool.complete(deadline_s=deadline_s)
        except Exception as e:  # NOTE: keep telling the other pservers
            first = first or e
    if first is not None:
        raise first
