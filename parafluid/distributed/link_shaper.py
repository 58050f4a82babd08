"""A simulated network link for the benchmarks: bandwidth and latency per process.

Off unless ``$PARAFLUID_BENCH_LINK`` is set; the RPC client and server then delay each
message as a link of that speed would (see :class:`LinkShaper`).

Example::

    PARAFLUID_BENCH_LINK=1e9,50e-6 python bench/scaling.py pserver   # 1 Gbit/s, 50 us
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import zmq

__all__ = ["LINK_ENV", "LinkShaper", "link_shaper", "frames_nbytes"]

LINK_ENV = "PARAFLUID_BENCH_LINK"


class LinkShaper:
    """A network link of ``rate_bps`` bits/s and ``latency_s`` one way, per process, for
    benchmarks only (``$PARAFLUID_BENCH_LINK="1e9,50e-6"``; unset: no shaping, the default).

    Each message waits for its bytes to pass this process's egress when it is sent and its
    ingress when it is received (both at ``rate_bps``, full duplex: one clock each way), and
    the sender adds ``latency_s``. NOTE: loopback is the only network a single machine has,
    and the kernel's ``netem`` is not always there: this lets the benchmarks draw curves
    for a given bandwidth per host. It delays; it never drops or reorders.
    """

    def __init__(self, rate_bps: float, latency_s: float = 0.0) -> None:
        if rate_bps <= 0 or latency_s < 0:
            raise ValueError(f"LinkShaper: rate must be > 0 and latency >= 0, got "
                             f"{rate_bps!r}, {latency_s!r} (${LINK_ENV}='bits_per_s,latency_s')")
        self.rate_bps, self.latency_s = float(rate_bps), float(latency_s)
        self._lock = threading.Lock()
        self._free = {"out": 0.0, "in": 0.0}  # when each direction is free again

    def pace(self, direction: str, nbytes: int) -> None:
        """Return once ``nbytes`` passed the link in ``direction`` ("out" adds the latency)."""
        with self._lock:
            now = time.monotonic()
            done = max(now, self._free[direction]) + nbytes * 8 / self.rate_bps
            self._free[direction] = done
        wait = done - time.monotonic() + (self.latency_s if direction == "out" else 0.0)
        if wait > 0:
            time.sleep(wait)


def link_shaper() -> LinkShaper | None:
    """The process's :class:`LinkShaper` from ``$PARAFLUID_BENCH_LINK``, or None (unset)."""
    global _shaper, _shaper_spec
    spec = os.environ.get(LINK_ENV, "")
    if spec != _shaper_spec:
        try:
            parts = [float(x) for x in spec.split(",")] if spec else []
        except ValueError:
            parts = [0.0] * 3
        if spec and not 1 <= len(parts) <= 2:
            raise ValueError(f"${LINK_ENV}={spec!r}: expected 'bits_per_s[,latency_s]', "
                             "e.g. '1e9,50e-6' (1 Gbit/s, 50 us)")
        _shaper = LinkShaper(*parts) if parts else None
        _shaper_spec = spec
    return _shaper


_shaper: LinkShaper | None = None
_shaper_spec = ""


def frames_nbytes(frames: Any) -> int:
    """The bytes of a message's frames (ZeroMQ frames, bytes or buffers)."""
    return sum(len(f.buffer) if isinstance(f, zmq.Frame) else memoryview(f).nbytes
               for f in frames)
