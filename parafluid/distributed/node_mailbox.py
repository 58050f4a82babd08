"""Values crossing between worker processes of a model-parallel job: one mailbox per worker.

A program split by node (``DistributeTranspiler`` on a program placed on
``/node:worker:<i>``) sends each activation (forward) and activation gradient (backward)
that another worker reads with a ``node_send`` op, and receives it with a ``node_recv`` op.
Both ride the parameter servers' transport (ZeroMQ, :mod:`.wire` frames: no pickle, every
message validated before anything is allocated, the shared secret's MAC when set):

- every worker process serves a :class:`Mailbox` on its own endpoint (the ``trainers``
  endpoint given to ``transpile``), on a thread of its own, so a value can arrive while the
  process is busy computing. A ``SEND`` request is stored, per (sender, variable), in arrival
  order, and answered at once;
- ``node_send`` is a ``SEND`` request to the receiver's mailbox: it returns once the value
  is stored there (or fails after ``FLAGS_rpc_deadline``, naming the receiver);
- ``node_recv`` takes the oldest stored value of (sender, variable) from this process's
  mailbox, waiting at most ``FLAGS_rpc_deadline``; the error names the sender's worker id,
  its endpoint and the variable awaited.

Each variable crosses once per step per receiving worker, and each process runs its sends
and receives in program order, so the k-th value received for a name is the sender's k-th:
no step number is needed on the wire.

Example::

    box = mailbox("127.0.0.1:7001", worker_id=1)          # started on first use
    client("127.0.0.1:7001", worker_id=0).send("h", torch.ones(2))   # on worker 0
    box.take("h", 0, "127.0.0.1:7000", deadline_s=30)     # tensor([1., 1.])
"""

from __future__ import annotations

import atexit
import collections
import logging
import threading
import time
from typing import Any

from .deadline import Deadline, rpc_deadline_seconds
from .rpc import Request, RPCClient, RPCError, RPCServer, RPCTimeoutError
from .wire import Kind

__all__ = ["Mailbox", "NodeTransferError", "mailbox", "client", "stop_all", "carried"]

log = logging.getLogger("parafluid.distributed.node_mailbox")


class NodeTransferError(RuntimeError):
    """A value did not cross between two workers within the deadline, or was refused."""


class Mailbox:
    """The values other workers sent to this one, served on ``endpoint`` by a thread.

    Args:
        endpoint: ``host:port`` to bind (this worker's entry of the ``trainers`` list).
        worker_id: this worker's id (for messages).
        secret: shared secret; None reads ``$PARAFLUID_RPC_SECRET``.
    """

    def __init__(self, endpoint: str, worker_id: int, secret: bytes | str | None = None
                 ) -> None:
        self.worker_id = int(worker_id)
        self._boxes: dict[tuple[int, str], collections.deque] = {}
        self._cond = threading.Condition()
        self._server = RPCServer(endpoint, self._handle, secret)
        self.endpoint = self._server.endpoint
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True,
                                        name=f"parafluid-mailbox-{self.endpoint}")
        self._thread.start()

    def _handle(self, req: Request) -> None:
        m = req.msg
        if m.kind in (Kind.PING, Kind.COMPLETE):
            req.reply()
        elif m.kind == Kind.SEND:
            with self._cond:
                self._boxes.setdefault((m.trainer_id, m.name), collections.deque()).append(
                    m.value)
                self._cond.notify_all()
            req.reply()
        else:
            req.reply_error(f"worker {self.worker_id} at {self.endpoint} only takes values "
                            f"sent by other workers (SEND), not {m.kind.name}")

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
            return self._boxes[key].popleft()

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
        self._rpc = RPCClient(endpoint, trainer_id=worker_id)
        self.endpoint = self._rpc.endpoint

    def send(self, name: str, value: Any, receiver: int = -1,
             deadline_s: float | None = None) -> None:
        """Store ``value`` as ``name`` in the receiver's mailbox; NodeTransferError after the
        deadline, naming the receiver."""
        start = time.monotonic()
        who = f"worker {receiver} at {self.endpoint}" if receiver >= 0 else self.endpoint
        try:
            self._rpc.call(Kind.SEND, name, value, deadline_s=deadline_s)
        except RPCTimeoutError:
            raise NodeTransferError(
                f"worker {self._rpc.trainer_id}: sending {name!r} to {who} failed after "
                f"{time.monotonic() - start:.1f} s: no reply; that process died, stalled or "
                "has not started (deadline: FLAGS_rpc_deadline, in ms)") from None
        except RPCError as e:
            raise NodeTransferError(
                f"worker {self._rpc.trainer_id}: sending {name!r} to {who} failed after "
                f"{time.monotonic() - start:.1f} s: {e}") from None
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
