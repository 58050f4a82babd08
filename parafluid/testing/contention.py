"""Deadlines for tests that share a machine: a bound measured on a quiet machine, stretched by
how busy the CPUs are now.

A test that waits for another process ("the trainers name the dead pserver within the
deadline") states its bound as it holds on an idle machine. On a machine whose cores are
shared with other work, every process runs slower by about the number of runnable processes
per core, and a fixed few seconds is missed although nothing is wrong. :func:`scaled` turns
the quiet bound into the bound for now:

    deadline_s = scaled(3)          # 3 s when idle, 9 s with a load of 5 on 2 cores

The slowdown is measured, never assumed: the larger of the 1-minute load average per core
(the kernel's count of runnable processes, which lags a sudden load by a few seconds) and a
probe that times a fixed piece of CPU work against the fastest time this process has seen
for it (which sees a sudden load at once). It is never below 1 and never above
:data:`MAX_SLOWDOWN`, so that a test which really hangs still ends.
"""

from __future__ import annotations

import os
import threading
import time

#: the most a quiet bound is stretched: past this the machine is too busy to test timing on
MAX_SLOWDOWN = 6.0
# NOTE: long enough (about 10 ms idle) to span several of the scheduler's time slices, so that
# a probe shares the cores with whatever else runs instead of fitting between its slices
_PROBE_LOOPS = 200_000

_lock = threading.Lock()
_fastest_probe_s: float | None = None


def _probe_s() -> float:
    """Seconds that a fixed piece of pure-Python work takes now (about 10 ms when idle)."""
    start = time.perf_counter()
    x = 0
    for i in range(_PROBE_LOOPS):
        x += i * i
    return time.perf_counter() - start


def slowdown() -> float:
    """How many times slower a process runs now than on an idle machine (1 to MAX_SLOWDOWN)."""
    global _fastest_probe_s
    cores = os.cpu_count() or 1
    try:
        runnable = os.getloadavg()[0]
    except OSError:  # a platform without a load average
        runnable = 0.0
    by_load = runnable / cores
    probe = _probe_s()
    with _lock:
        if _fastest_probe_s is None or probe < _fastest_probe_s:
            _fastest_probe_s = probe
        by_probe = probe / _fastest_probe_s
    return min(MAX_SLOWDOWN, max(1.0, by_load, by_probe))


def scaled(quiet_s: float) -> float:
    """The deadline (seconds) for a wait that takes at most ``quiet_s`` on an idle machine."""
    if quiet_s <= 0:
        raise ValueError(f"a deadline must be positive, got {quiet_s!r} s")
    return quiet_s * slowdown()


def scaled_ms(quiet_ms: float) -> str:
    """:func:`scaled` for a millisecond flag such as ``FLAGS_rpc_deadline``, as its string."""
    return str(int(scaled(quiet_ms / 1000.0) * 1000))
