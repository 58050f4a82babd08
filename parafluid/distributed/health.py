"""Heartbeats through the rendezvous store: every wait finds a dead peer in seconds, by name.

A transport error says little ("Connection reset by peer", "Timed out waiting 2000ms for
recv"), and a wait on the store for a peer's key says nothing at all until its deadline. So
each trainer runs a daemon thread that, every ``interval`` seconds (0.5), through its own
connection to the store, makes one request (``RPCStore.set_list``): it publishes
``hb/<trainer>`` = ``"<beat> <collectives entered>"`` and reads back, in the same reply,
every trainer's beat and the keys a trainer leaves when it closes its communicator
(``closed/<k>``) or gives up a failed step (``failed/<k>``, with the reason). The store
(trainer 0) assembles that view: a beat costs each trainer one request whatever the number
of trainers, and the job n requests.

From that *view*, kept in memory, ``Heartbeat.trouble()`` answers at once, without a store
call, whether a peer is gone: it failed, it left, its beat has not moved for ``stale_s``
seconds (2: the process died, was stopped, or hangs holding the GIL), or this trainer's own
thread has not reached the store for ``stale_s`` (the store host, trainer 0, died or hangs).
Every wait of the collective mode (the rendezvous's last step, the process group's setup,
each collective, the program check) polls it, so a dead peer costs its peers 1.5 to 3
seconds, not the deadline. A peer that is alive but slow keeps beating and is waited for,
up to the deadline; ``describe`` then says how far it got.

Example::

    hb = Heartbeat(store_factory, trainer_id=0, endpoints=["127.0.0.1:6170", "127.0.0.1:6171"])
    hb.seq = 3                  # the main thread entered its third collective
    hb.trouble()                # None, or "trainer 1 (127.0.0.1:6171) stopped responding ..."
    hb.stop()
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["Heartbeat", "HEARTBEAT_INTERVAL_S", "STALE_AFTER_S"]

HEARTBEAT_INTERVAL_S = 0.5
STALE_AFTER_S = 2.0
_MAX_REASON = 2000  # a failure reason is one line of an error message
_DIRS = ("hb", "closed", "failed")  # what each beat reads back


class Heartbeat:
    """Publishes this trainer's beat and collective count; watches the peers' until ``stop()``.

    Args:
        store_factory: opens this thread's own connection to the (namespaced) store: an
            ``RPCStore``, or anything with its ``set_list``.
        trainer_id, endpoints: who this is, and every trainer's endpoint (for messages).
        interval: seconds between beats; stale_s: a beat older than this is a dead peer.
    """

    def __init__(self, store_factory: Callable[[], Any], trainer_id: int,
                 endpoints: Sequence[str], interval: float = HEARTBEAT_INTERVAL_S,
                 stale_s: float = STALE_AFTER_S) -> None:
        self.trainer_id = trainer_id
        self.endpoints = list(endpoints)
        self.interval = interval
        self.stale_s = stale_s
        self.seq = 0  # written by the communicator (an int store: atomic under the GIL)
        self._store_factory = store_factory
        self._stop = threading.Event()
        self._lock = threading.Lock()
        now = time.monotonic()
        self._started = now
        self._refreshed = now  # the last time this thread read the whole view
        self._store_error: str | None = None
        self._asking_since: float | None = None  # when the request in flight started
        n = len(self.endpoints)
        self._beats: list[tuple[int, int] | None] = [None] * n
        self._moved = [now] * n  # when each peer's beat last moved (as seen here)
        self._closed: set[int] = set()
        self._failed: dict[int, str] = {}
        self._expect_all_at: float | None = None
        self._thread = threading.Thread(target=self._loop, daemon=True,
                                        name=f"parafluid-heartbeat-{trainer_id}")
        self._thread.start()

    # ------------------------------------------------------------------ the thread
    def _loop(self) -> None:
        try:
            store = self._store_factory()
        except Exception as e:  # noqa: BLE001 - the host is gone: trouble() says so
            self._store_error = _first_line(e)
            return
        beat = 0
        try:
            while not self._stop.is_set():
                beat += 1
                self._asking_since = time.monotonic()
                try:
                    view = store.set_list(f"hb/{self.trainer_id}", f"{beat} {self.seq}",
                                          _DIRS, deadline_s=self.stale_s)
                except TimeoutError:
                    # NOTE: no answer (a dead, stopped or hung host, or a loaded machine): the
                    # view goes stale, which trouble() reports; an answer later clears it
                    continue
                except Exception as e:  # noqa: BLE001 - store host gone; trouble() says so
                    self._store_error = _first_line(e)
                    return
                finally:
                    self._asking_since = None
                self._absorb(view)
                self._stop.wait(self.interval)
        finally:
            close = getattr(store, "close", None)
            if close is not None:
                close()

    def _absorb(self, view: dict[str, bytes]) -> None:
        """Take in one reply of the store: every trainer's beat, the closed and the failed."""
        n = len(self.endpoints)
        beats: list[tuple[int, int] | None] = [None] * n
        closed: set[int] = set()
        failed: dict[int, str] = {}
        for key, raw in view.items():
            kind, _, who = key.partition("/")
            k = int(who) if who.isdigit() else -1
            if not 0 <= k < n:
                continue  # NOTE: not a key of this job's trainers: ignored
            if kind == "hb":
                beats[k] = _parse_beat(raw)
            elif kind == "closed":
                closed.add(k)
            elif kind == "failed" and k not in self._failed:
                failed[k] = raw[:_MAX_REASON].decode("utf-8", "replace")
        now = time.monotonic()
        with self._lock:
            for k, b in enumerate(beats):
                old = self._beats[k]
                if b is not None and (old is None or b[0] != old[0]):
                    self._moved[k] = now
                    self._beats[k] = b
                elif b is not None:
                    self._beats[k] = b
            self._closed = closed
            self._failed.update(failed)
            self._refreshed = now
            self._store_error = None

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=max(1.0, 2 * self.interval))

    # ------------------------------------------------------------------ the view
    def expect_all(self) -> None:
        """Every peer has joined: one that never beats from now on counts as dead."""
        if self._expect_all_at is None:
            self._expect_all_at = time.monotonic()

    def who(self, k: int) -> str:
        return f"trainer {k} ({self.endpoints[k]})"

    def trouble(self, peers: Sequence[int] | None = None) -> str | None:
        """A clause naming the first peer (of ``peers``, default all) that is gone, or None.

        In-memory only: cheap enough to call between two polls of a wait.
        """
        now = time.monotonic()
        n = len(self.endpoints)
        with self._lock:
            ks = [k for k in (range(n) if peers is None else peers) if k != self.trainer_id]
            for k in ks:  # a peer that gave up says why: that comes first
                if k in self._failed:
                    return f"{self.who(k)} gave up: {self._failed[k]}"
            if self._store_error is not None or now - self._refreshed > self.stale_s:
                return self._host_clause(now)
            for k in ks:
                if k in self._closed:
                    return f"{self.who(k)} has closed its communicator (it finished or left " \
                           "the job)"
                if self._beats[k] is None:
                    since = self._expect_all_at
                    if since is not None and now - max(since, self._started) > self.stale_s:
                        return f"{self.who(k)} never sent a heartbeat (it died while joining)"
                    continue
                quiet = now - self._moved[k]
                # NOTE: the host's beat went quiet while the store does not answer this
                # thread either: the host died or hangs (its beat stops moving up to a beat
                # before this thread's last answer, so it would be named the first)
                asking = self._asking_since
                if quiet > self.stale_s and k == 0 and asking is not None and \
                        now - asking > min(self.interval, self.stale_s / 2):
                    return self._host_clause(now)
                if quiet > self.stale_s:
                    return (f"{self.who(k)} stopped responding: no heartbeat for {quiet:.1f} s "
                            "(the process died, was stopped, or hangs)")
        return None

    def _host_clause(self, now: float) -> str:
        if self.trainer_id == 0:
            return f"the rendezvous store of this trainer failed ({self._store_error})"
        why = self._store_error or f"no answer for {now - self._refreshed:.1f} s"
        return (f"{self.who(0)}, which hosts the rendezvous store, cannot be reached: it has "
                f"probably died ({why})")

    def note_failed(self, failed: dict[int, str]) -> None:
        """Failures read from the store directly (by a trainer whose collective just broke)."""
        with self._lock:
            self._failed.update(failed)

    def describe(self, seq: int, wait_s: float | None = None) -> str:
        """After a failed collective ``seq``: which peers are missing from it, in words.

        Waits (up to ``wait_s``, default ``stale_s`` plus two beats) for a clear culprit: a
        peer that died is found once its beat is stale.
        """
        end = time.monotonic() + (self.stale_s + 2 * self.interval if wait_s is None
                                  else wait_s)
        while True:
            clause = self.trouble()
            if clause is not None or time.monotonic() >= end:
                break
            time.sleep(min(0.05, self.interval / 4))
        if clause is not None:
            return clause
        clauses = []
        with self._lock:
            for k, b in enumerate(self._beats):
                if k != self.trainer_id and b is not None and b[1] < seq:
                    clauses.append(f"{self.who(k)} is alive but has not reached this "
                                   f"collective (it entered {b[1]}): a slower trainer, or one "
                                   "running a different program")
        if not clauses:
            return ("every peer is alive and entered this collective: the trainers may "
                    "disagree on its size, dtype or root (different programs or settings?)")
        return "; ".join(clauses)


def _parse_beat(raw: bytes) -> tuple[int, int] | None:
    try:
        beat, seq = (int(x) for x in raw.decode("ascii").split())
    except (UnicodeDecodeError, ValueError):
        return None
    return beat, seq


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0].rstrip(".") if text else type(e).__name__
