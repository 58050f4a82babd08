"""Deadlines for every distributed wait (Fluid's ``FLAGS_rpc_deadline``, in milliseconds).

Example::

    dl = Deadline(rpc_deadline_seconds())
    while not ready():
        if dl.expired():
            raise TimeoutError(f"waited {dl.seconds:.0f} s for trainer 1 at 127.0.0.1:6170")
        time.sleep(min(0.05, dl.remaining()))
"""

from __future__ import annotations

import time

from ..flags import flag

__all__ = ["DEFAULT_RPC_DEADLINE_S", "rpc_deadline_seconds", "Deadline"]

DEFAULT_RPC_DEADLINE_S = 180.0  # Fluid's default FLAGS_rpc_deadline is 180000 ms


def rpc_deadline_seconds(default: float = DEFAULT_RPC_DEADLINE_S) -> float:
    """The deadline in seconds: ``FLAGS_rpc_deadline`` (ms; ``core.globals()`` or the
    environment, see ``parafluid.flags``), else ``default``.

    Raises ValueError naming the flag when it is set but is not a positive number.
    """
    ms = flag("FLAGS_rpc_deadline", None)
    return float(default) if ms is None else ms / 1000.0


class Deadline:
    """A point in time ``seconds`` from now (monotonic clock)."""

    __slots__ = ("seconds", "_end")

    def __init__(self, seconds: float) -> None:
        if not seconds > 0:
            raise ValueError(f"Deadline: seconds must be > 0, got {seconds!r}")
        self.seconds = float(seconds)
        self._end = time.monotonic() + self.seconds

    def remaining(self) -> float:
        """Seconds left (0.0 once expired)."""
        return max(0.0, self._end - time.monotonic())

    def expired(self) -> bool:
        return time.monotonic() >= self._end
