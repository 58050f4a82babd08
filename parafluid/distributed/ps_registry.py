"""The process-wide parameter-server clients of a trainer (what the rpc ops talk through).

The ``send``/``recv``/barrier ops of a transpiled trainer program carry their trainer id and
endpoints as attrs; their kernels ask :func:`client_pool` for the process's
:class:`~parafluid.distributed.ps_client.ClientPool` of that trainer (created on first use,
with ``FLAGS_rpc_deadline``), so every op of every run reuses one connection per pserver, as
Fluid's process-wide RPC client did. ``Executor.close()`` calls :func:`complete_all`: every
pserver a pool talked to is told that its trainer is done, and the pools are dropped (a later
run starts fresh connections).

Example::

    pool = client_pool(trainer_id=1)
    pool.get("127.0.0.1:6174").send("w@GRAD.trainer_1", grad)
    complete([1])                    # what Executor.close() does
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

from .ps_client import ClientPool

__all__ = ["client_pool", "complete", "complete_all", "active_pools"]

_POOLS: dict[int, ClientPool] = {}
_LOCK = threading.Lock()


def client_pool(trainer_id: int) -> ClientPool:
    """The process's client pool of trainer ``trainer_id`` (created on first use)."""
    if not isinstance(trainer_id, int) or trainer_id < 0:
        raise ValueError(f"client_pool: trainer_id must be an int >= 0, got {trainer_id!r}")
    with _LOCK:
        pool = _POOLS.get(trainer_id)
        if pool is None:
            pool = _POOLS[trainer_id] = ClientPool(trainer_id)
        return pool


def active_pools() -> list[int]:
    """The trainer ids that have a pool in this process."""
    with _LOCK:
        return sorted(_POOLS)


def complete_all() -> None:
    """Tell every pserver each pool talked to that its trainer is done; drop the pools."""
    complete(None)


def complete(trainer_ids: Iterable[int] | None) -> None:
    """Complete the pools of ``trainer_ids`` (None: all): every pserver a pool talked to is
    told that its trainer is done, and the pool is dropped.

    Every pool is completed even when one fails; the first error is raised afterwards.
    """
    with _LOCK:
        ids = list(_POOLS) if trainer_ids is None else [t for t in trainer_ids if t in _POOLS]
        pools = [_POOLS.pop(t) for t in ids]
    first: Exception | None = None
    for pool in pools:
        try:
            pool.complete()
        except Exception as e:  # NOTE: keep telling the other pservers
            first = first or e
    if first is not None:
        raise first
