"""Heartbeats through the rendezvous store, so that a failed collective can name the culprit.

A transport error says little ("Connection reset by peer", "Timed out waiting 2000ms for
recv"): it does not say which trainer died or is stuck. Each trainer therefore runs a daemon
thread that publishes ``hb/<trainer>`` = ``"<beat> <collectives entered>"`` every
``interval`` seconds through its own connection to the store (the main thread is usually
blocked in a collective, with the GIL released). When a collective fails, ``diagnose`` reads
every peer's record twice, ``2.5 * interval`` apart: a beat that did not move means the
process died or hangs with the GIL held; a beat that moves with a lower collective count
means a live trainer that never reached this collective.

Example::

    hb = Heartbeat(store_factory, trainer_id=0, interval=0.5)
    hb.seq = 3                            # the main thread entered its third collective
    print(diagnose(store, 2, 0, ["127.0.0.1:6170", "127.0.0.1:6171"], 3, 0.5))
    hb.stop()
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["Heartbeat", "diagnose"]


class Heartbeat:
    """Publishes this trainer's beat and collective count until ``stop()``."""

    def __init__(self, store_factory: Callable[[], Any], trainer_id: int,
                 interval: float) -> None:
        self.trainer_id = trainer_id
        self.interval = interval
        self.seq = 0  # written by the communicator (an int store: atomic under the GIL)
        self._store_factory = store_factory
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True,
                                        name=f"parafluid-heartbeat-{trainer_id}")
        self._thread.start()

    def _loop(self) -> None:
        try:
            store = self._store_factory()
        except Exception:  # noqa: BLE001 - the host is gone: the collectives will say so
            return
        beat = 0
        while not self._stop.is_set():
            beat += 1
            try:
                store.set(f"hb/{self.trainer_id}", f"{beat} {self.seq}")
            except Exception:  # noqa: BLE001 - store host gone; diagnose() reports it
                return
            self._stop.wait(self.interval)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=max(1.0, 2 * self.interval))


def _read(store: Any, n: int) -> list[tuple[int, int] | None]:
    out: list[tuple[int, int] | None] = []
    for k in range(n):
        if not store.check([f"hb/{k}"]):
            out.append(None)
            continue
        raw = store.get(f"hb/{k}")
        try:
            beat, seq = (int(x) for x in raw.decode("ascii").split())
        except (UnicodeDecodeError, ValueError):
            out.append(None)
            continue
        out.append((beat, seq))
    return out


def diagnose(store: Any, num_trainers: int, me: int, endpoints: Sequence[str], seq: int,
             interval: float) -> str:
    """Which peers are missing from collective ``seq``, in words (one clause per peer)."""
    try:
        first = _read(store, num_trainers)
        time.sleep(2.5 * interval)
        second = _read(store, num_trainers)
        closed = {k for k in range(num_trainers) if store.check([f"closed/{k}"])}
    except Exception:  # noqa: BLE001 - any store failure means the host went away
        if me == 0:
            return "the rendezvous store of this trainer failed"
        return (f"trainer 0 ({endpoints[0]}), which hosts the rendezvous store, cannot be "
                "reached: it has probably died")
    clauses = []
    for k in range(num_trainers):
        if k == me:
            continue
        who = f"trainer {k} ({endpoints[k]})"
        a, b = first[k], second[k]
        if k in closed:
            clauses.append(f"{who} has closed its communicator (it finished or left the job)")
        elif b is None:
            clauses.append(f"{who} never sent a heartbeat")
        elif a is not None and a[0] == b[0]:
            clauses.append(f"{who} stopped responding: the process died or hangs")
        elif b[1] < seq:
            clauses.append(f"{who} is alive but has not reached this collective (it entered "
                           f"{b[1]}): a slower trainer, or one running a different program")
    if not clauses:
        return ("every peer is alive and entered this collective: the trainers may disagree "
                "on its size, dtype or root (different programs or settings?)")
    return "; ".join(clauses)
