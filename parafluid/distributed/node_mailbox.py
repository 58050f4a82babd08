"""Values crossing between worker processes of a model-parallel job: one mailbox per worker.

A program split by node (``DistributeTranspiler`` on a program placed on
``/node:worker:<i>``) sends each activation (forward) and activation gradient (backward)
that another worker reads with a ``node_send`` op, and receives it with a ``node_recv`` op.
Both ride the parameter servers' transport (ZeroMQ, :mod:`.wire` frames: no pickle, every
message validated before anything is allocated, the shared secret's MAC when set):

- every worker process serves a :class:`Mailbox` on its own endpoint (the ``trainers``
  endpoint given to ``transpile``), on a thread of its own, so a value can arrive while the
  process is busy computing;
- the receiver declares what it takes (:meth:`Mailbox.expect`: the variable, the sending
  worker, its endpoint, the shape with -1 for any size, the dtype) before it serves; the
  ``node_comm`` ops declare every ``node_recv`` of the worker's program on first use;
- ``node_send`` is a ``SEND`` request to the receiver's mailbox carrying the sender's worker
  id and the value's sequence number: the k-th value of that variable this sender sent to
  that receiver (one per step, so the step number). It returns once the value is stored
  there (or fails after ``FLAGS_rpc_deadline``, naming the receiver);
- ``node_recv`` takes the oldest stored value of (sender, variable) from this process's
  mailbox, waiting at most ``FLAGS_rpc_deadline``; the error names the sender's worker id,
  its endpoint and the variable awaited.

The mailbox stores a value only when it is the next one it expects: a declared (sender,
variable), sequence number one more than the last stored, a dense tensor of the declared
dtype and shape, and room in the box (at most ``max_pending`` values per (sender,
variable)). Anything else is refused with a reply naming why and logged (at most
``LOG_BURST`` lines per ``LOG_WINDOW_S``, then one line counting what was left out), and
the job goes on: a stray or forged message from another process changes nothing. A
duplicate of a value already stored is refused too, so the true sender of a value someone
else forged fails loudly instead of the model training on the forgery; with
``PARAFLUID_RPC_SECRET`` set, a connection without the job's credentials is refused at its
handshake, and messages without the secret's MAC never reach the mailbox.
A value that arrives before the receiver declared it, or while its box is full, is
refused as "not ready" and the sender retries until its deadline (flow control).

Example::

    box = mailbox("127.0.0.1:7001", worker_id=1)          # started on first use
    box.expect("h", 0, "127.0.0.1:7000", shape=(-1,), dtype=torch.float32)
    client("127.0.0.1:7001", worker_id=0).send("h", torch.ones(2))   # on worker 0
    box.take("h", 0, "127.0.0.1:7000", deadline_s=30)     # tensor([1., 1.])
"""

from __future__ import annotations

import atexit
import collections
import logging
import threading
import time
from collections.abc import Sequence
from typing import Any

import torch

from .deadline import Deadline, rpc_deadline_seconds
from .rpc import Request, RPCClient, RPCError, RPCServer, RPCTimeoutError
from .wire import Kind, Message

__all__ = ["Mailbox", "NodeTransferError", "mailbox", "client", "stop_all", "carried",
           "LOG_BURST", "LOG_WINDOW_S"]

log = logging.getLogger("parafluid.distributed.node_mailbox")

LOG_BURST = 10  # refused messages logged per window, then one summary line
LOG_WINDOW_S = 10.0
_NOT_READY = "not ready: "  # a refusal the sender retries (undeclared yet, or a full box)


class NodeTransferError(RuntimeError):
    """A value did not cross between two workers within the deadline, or was refused."""


class _RateLimitedLog:
    """Warnings about refused messages, at most ``burst`` per ``window_s`` seconds.

    NOTE: one budget for every sender: identities a stranger chooses cannot flood the log.
    """

    def __init__(self, burst: int = LOG_BURST, window_s: float = LOG_WINDOW_S) -> None:
        self.burst, self.window_s = burst, window_s
        self._start, self._count, self._dropped = time.monotonic(), 0, 0

    def warning(self, text: str) -> None:
        now = time.monotonic()
        if now - self._start >= self.window_s:
            if self._dropped:
                log.warning("%d more refused messages in the last %.0f s were not logged",
                            self._dropped, self.window_s)
            self._start, self._count, self._dropped = now, 0, 0
        if self._count < self.burst:
            self._count += 1
            log.warning("%s", text)
        else:
            self._dropped += 1


class Mailbox:
    """The values other workers sent to this one, served on ``endpoint`` by a thread.

    Args:
        endpoint: ``host:port`` to bind (this worker's entry of the ``trainers`` list).
        worker_id: this worker's id (for messages).
        secret: shared secret; None reads ``$PARAFLUID_RPC_SECRET``.
        max_pending: values stored per (sender, variable) before further ones wait.
    """

    def __init__(self, endpoint: str, worker_id: int, secret: bytes | str | None = None,
                 max_pending: int = 8) -> None:
        self.worker_id = int(worker_id)
        self.max_pending = int(max_pending)
        self._boxes: dict[tuple[int, str], collections.deque] = {}
        # (sender, name) -> (sender endpoint, shape with -1 for any size, dtype)
        self._expected: dict[tuple[int, str], tuple[str, tuple[int, ...], torch.dtype]] = {}
        self._next: dict[tuple[int, str], int] = {}  # the sequence number stored next
        self._cond = threading.Condition()
        self._log = _RateLimitedLog()
        self.refused = 0  # messages refused so far (tests, diagnostics)
        self._server = RPCServer(endpoint, self._handle, secret)
        self.endpoint = self._server.endpoint
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True,
                                        name=f"parafluid-mailbox-{self.endpoint}")
        self._thread.start()

    def expect(self, name: str, sender: int, sender_endpoint: str,
               shape: Sequence[int], dtype: torch.dtype) -> None:
        """Declare that worker ``sender`` (at ``sender_endpoint``) sends ``name`` here, one
        value per step, of ``dtype`` and ``shape`` (-1: any size on that axis)."""
        with self._cond:
            key = (int(sender), name)
            self._expected[key] = (sender_endpoint, tuple(int(d) for d in shape), dtype)
            self._next.setdefault(key, 1)

    def _handle(self, req: Request) -> None:
        m = req.msg
        if m.kind in (Kind.PING, Kind.COMPLETE):
            req.reply()
        elif m.kind == Kind.SEND:
            with self._cond:
                why = self._refusal(m)
                if why is None:
                    key = (m.trainer_id, m.name)
                    self._boxes.setdefault(key, collections.deque()).append(m.value)
                    self._next[key] += 1
                    self._cond.notify_all()
            if why is None:
                req.reply()
                return
            # NOTE: values that come before any declaration (the receiver has not started
            # its program yet) or into a full box are flow control, not strangers: retried
            # by the sender, not logged
            if not why.startswith(_NOT_READY) or (self._expected and "wait already" not in why):
                self.refused += 1
                self._log.warning(f"worker {self.worker_id} ({self.endpoint}) refused a value "
                                  f"from {req.peer}: {why}")
            req.reply_error(why)
        else:
            req.reply_error(f"worker {self.worker_id} at {self.endpoint} only takes values "
                            f"sent by other workers (SEND), not {m.kind.name}")

    def _refusal(self, m: Message) -> str | None:
        """Why the SEND ``m`` is not stored now, or None (called holding the lock)."""
        key = (m.trainer_id, m.name)
        what = f"{m.name!r} #{m.seq} from worker {m.trainer_id}"
        if key not in self._expected:
            known = sorted(f"{n!r} from worker {s}" for s, n in self._expected)
            return (f"{_NOT_READY}{what}: worker {self.worker_id} does not expect it (it "
                    f"expects {', '.join(known) or 'nothing yet'}); the workers run programs "
                    "split differently, or the sender is not part of this job")
        _, shape, dtype = self._expected[key]
        v = m.value
        if not isinstance(v, torch.Tensor):
            return f"{what}: expected a dense tensor, got {type(v).__name__}"
        if v.dtype != dtype or v.dim() != len(shape) or any(
                d >= 0 and d != g for d, g in zip(shape, v.shape)):
            return (f"{what}: expected {str(dtype).replace('torch.', '')} "
                    f"{list(shape)}, got {str(v.dtype).replace('torch.', '')} "
                    f"{list(v.shape)}")
        want = self._next[key]
        if m.seq < want:
            return (f"{what}: a duplicate (value #{m.seq} of it was stored already; the next "
                    f"one is #{want}): another process sends as worker {m.trainer_id}, or "
                    "a worker was restarted alone")
        if m.seq > want:
            return f"{what}: out of order (the next one is #{want})"
        if len(self._boxes.get(key, ())) >= self.max_pending:
            return f"{_NOT_READY}{what}: {self.max_pending} values of it wait already"
        return None

    def take(self, name: str, sender: int, sender_endpoint: str,
             deadline_s: float | None = None) -> Any:
        """The oldest value of ``name`` that worker ``sender`` sent here, waiting for it.

        Raises NodeTransferError naming the sender and the variable when none comes within
        ``deadline_s`` (None: ``FLAGS_rpc_deadline``).
        """
        dl = Deadline(rpc_deadline_seconds() if deadline_s is None else deadline_s)
        key = (int(sender), name)
        with self._cond:
            while not self._boxes.get(key):
                left = dl.remaining()
                if left <= 0:
                    raise NodeTransferError(
                        f"worker {self.worker_id} ({self.endpoint}): waited {dl.seconds:.1f} s "
                        f"for {name!r} from worker {sender} at {sender_endpoint}; that "
                        "process died, stalled or has not started (deadline: "
                        "FLAGS_rpc_deadline, in ms)")
                self._cond.wait(min(left, 0.5))
            value = self._boxes[key].popleft()
            self._cond.notify_all()
            return value

    def pending(self) -> dict[tuple[int, str], int]:
        """How many values wait, per (sender, name) (for tests and error messages)."""
        with self._cond:
            return {k: len(v) for k, v in self._boxes.items() if v}

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop serving and wait (bounded) for the thread to close the socket."""
        self._server.stop()
        self._thread.join(timeout_s)


class _Client:
    """Sends of this worker to one other worker's mailbox (thread-safe)."""

    def __init__(self, endpoint: str, worker_id: int) -> None:
        self._rpc = RPCClient(endpoint, trainer_id=worker_id, role=f"worker-{worker_id}")
        self.endpoint = self._rpc.endpoint
        self._sent: dict[str, int] = {}  # values of each name stored there so far
        self._lock = threading.Lock()

    def send(self, name: str, value: Any, receiver: int = -1,
             deadline_s: float | None = None) -> None:
        """Store ``value`` as ``name`` in the receiver's mailbox; NodeTransferError after the
        deadline, naming the receiver."""
        start = time.monotonic()
        dl = Deadline(rpc_deadline_seconds() if deadline_s is None else deadline_s)
        who = f"worker {receiver} at {self.endpoint}" if receiver >= 0 else self.endpoint
        with self._lock:
            seq = self._sent.get(name, 0) + 1
        while True:
            try:
                self._rpc.call(Kind.SEND, name, value, deadline_s=max(dl.remaining(), 0.001),
                               seq=seq)
                break
            except RPCTimeoutError:
                raise NodeTransferError(
                    f"worker {self._rpc.trainer_id}: sending {name!r} to {who} failed after "
                    f"{time.monotonic() - start:.1f} s: no reply; that process died, stalled "
                    "or has not started (deadline: FLAGS_rpc_deadline, in ms)") from None
            except RPCError as e:
                # the receiver has not declared the value yet, or its box is full: retry
                if _NOT_READY in str(e) and dl.remaining() > 0.05:
                    time.sleep(0.02)
                    continue
                text = str(e).split(": ", 1)[-1] if "refused" in str(e) else str(e)
                raise NodeTransferError(
                    f"worker {self._rpc.trainer_id}: sending {name!r} to {who} failed after "
                    f"{time.monotonic() - start:.1f} s: {text}") from None
        with self._lock:
            self._sent[name] = seq
        _count(name, value)


_MAILBOXES: dict[str, Mailbox] = {}
_CLIENTS: dict[tuple[str, int], _Client] = {}
_LOCK = threading.Lock()
# what this process sent, by variable: [messages, bytes] (tests and the benchmark read it)
_CARRIED: dict[str, list[int]] = {}


def _count(name: str, value: Any) -> None:
    nbytes = value.numel() * value.element_size() if hasattr(value, "element_size") else 0
    with _LOCK:
        entry = _CARRIED.setdefault(name, [0, 0])
        entry[0] += 1
        entry[1] += nbytes


def carried() -> dict[str, tuple[int, int]]:
    """``{variable: (messages, bytes)}`` this process sent to other workers so far."""
    with _LOCK:
        return {k: (v[0], v[1]) for k, v in _CARRIED.items()}


def mailbox(endpoint: str, worker_id: int) -> Mailbox:
    """This process's mailbox on ``endpoint``, started on first use."""
    with _LOCK:
        box = _MAILBOXES.get(endpoint)
        if box is None:
            box = _MAILBOXES[endpoint] = Mailbox(endpoint, worker_id)
            log.info("worker %d: mailbox for values from other workers at %s", worker_id,
                     box.endpoint)
        return box


def client(endpoint: str, worker_id: int) -> _Client:
    """The connection of worker ``worker_id`` (this process) to the mailbox at ``endpoint``."""
    with _LOCK:
        c = _CLIENTS.get((endpoint, worker_id))
        if c is None:
            c = _CLIENTS[(endpoint, worker_id)] = _Client(endpoint, worker_id)
        return c


def stop_all() -> None:
    """Stop this process's mailboxes and close its connections (also run at exit)."""
    with _LOCK:
        boxes, clients = list(_MAILBOXES.values()), list(_CLIENTS.values())
        _MAILBOXES.clear()
        _CLIENTS.clear()
    for c in clients:
        c._rpc.close()
    for box in boxes:
        box.stop()


atexit.register(stop_all)
