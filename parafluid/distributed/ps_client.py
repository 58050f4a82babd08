"""The trainer side of the parameter-server protocol: one client per pserver endpoint.

The ``send``/``recv``/barrier/``prefetch`` op kernels are thin wrappers over these calls: they
hold an endpoint, a variable name and a tensor, and ask a :class:`ClientPool` (owned by the
run context) for the endpoint's :class:`PServerClient`. Every call waits at most the deadline
(``FLAGS_rpc_deadline``) and its error names the endpoint, the request and the variable.

Example::

    pool = ClientPool(trainer_id=0)
    ps = pool.get("127.0.0.1:6174")
    ps.send("fc_0.w_0@GRAD", grad)
    pool.send_barrier(["127.0.0.1:6174"])
    w = ps.recv("fc_0.w_0")
    pool.fetch_barrier(["127.0.0.1:6174"])
    pool.complete()          # Executor.close(): every pserver this trainer talked to

Calls that go to several pservers (the barriers, a sliced variable's blocks, checkpoint and
completion notices) go out to the different pservers at once (:meth:`ClientPool.each`): a
step's messages take the time of the slowest pserver, not the sum over the pservers.

A gradient can also be sent while the backward pass goes on (:meth:`ClientPool.send_async`,
what the ``send`` op does with ``FLAGS_rpc_overlap_send``): the sends run on the pool's send
thread in the order they were started, and every other call of the pool (the send barrier,
a recv) first waits for them (:meth:`ClientPool.wait_sends`), raising the first failure.
After a failed send the later ones are not sent at all, so the pservers receive exactly
the messages that sends one after the other would have delivered.
"""

from __future__ import annotations

import json
import queue
import threading
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, wait
from typing import Any, TypeVar

import torch

from .deadline import rpc_deadline_seconds
from .rpc import RPCClient, RPCError, RPCTimeoutError, wait_for_server
from .wire import Kind

__all__ = ["PServerClient", "ClientPool", "wait_for_server"]

R = TypeVar("R")


class PServerClient:
    """Requests of trainer ``trainer_id`` to the pserver at ``endpoint``.

    Args:
        endpoint: ``host:port`` of the pserver.
        trainer_id: this trainer's id (0-based), sent with every request.
        deadline_s: per-call deadline; None reads ``FLAGS_rpc_deadline`` (ms).
        secret: shared secret; None reads ``$PARAFLUID_RPC_SECRET``.
    """

    def __init__(self, endpoint: str, trainer_id: int, deadline_s: float | None = None,
                 secret: bytes | str | None = None, pool: ClientPool | None = None) -> None:
        self._rpc = RPCClient(endpoint, deadline_s, secret, trainer_id=trainer_id)
        self.endpoint = self._rpc.endpoint
        self.trainer_id = int(trainer_id)
        self._pool = pool
        self.step = 0  # send barriers this trainer passed with this pserver
        self.server_step = -1  # the highest step this pserver answered with

    def _call(self, kind: Kind, name: str = "", value: Any = None,
              deadline_s: float | None = None) -> Any:
        try:
            reply = self._rpc.call(kind, name, value, step=self.step, deadline_s=deadline_s)
        except RPCTimeoutError as e:
            if self._pool is not None:
                self._pool.explain_timeout(self.endpoint, e)  # raises, naming a dead pserver
            raise
        if reply.step < self.server_step:
            # NOTE: a pserver's step never goes back; one that did was restarted and holds
            # other values than the ones this trainer trained with
            raise RPCError(f"pserver {self.endpoint} answered {kind.name.lower()}"
                           f"{f' of {name!r}' if name else ''} at its step {reply.step}, after "
                           f"answering at step {self.server_step} before (trainer "
                           f"{self.trainer_id} at step {self.step}): the pserver was restarted "
                           "and cannot rejoin a running job; restart the whole job from the "
                           "last checkpoint")
        self.server_step = reply.step
        return reply

    def ping(self, deadline_s: float) -> None:
        """Return once the pserver answers a ping; RPCError (or its timeout) otherwise."""
        self._rpc.call(Kind.PING, deadline_s=deadline_s)

    def send(self, name: str, value: Any) -> None:
        """Push a gradient (tensor or SelectedRows); returns once the pserver has it."""
        self._call(Kind.SEND, name, value)

    def send_barrier(self) -> None:
        """Tell the pserver this trainer sent all its gradients of the step."""
        self._call(Kind.SEND_BARRIER)
        self.step += 1

    def recv(self, name: str) -> torch.Tensor:
        """The current value of a parameter (block); in sync mode, after the step's update."""
        return self._call(Kind.GET, name).value

    def fetch_barrier(self) -> None:
        """Tell the pserver this trainer read all its parameters of the step."""
        self._call(Kind.FETCH_BARRIER)

    def prefetch(self, table: str, rows: Any) -> torch.Tensor:
        """Rows ``rows`` (int64 ids local to this pserver's shard) of lookup table ``table``."""
        ids = torch.as_tensor(rows, dtype=torch.int64).reshape(-1)
        return self._call(Kind.PREFETCH, table, ids).value

    def checkpoint_notify(self, dirname: str, keep: str = "") -> dict[str, Any]:
        """Ask the pserver to save its blocks under ``dirname`` (its own file system, inside
        its checkpoint root) as a new version of its file, keeping ``keep`` (the version the
        committed checkpoint names) and removing its other versions; returns the record of
        the file it wrote (name, file, step, sha256)."""
        reply = self._call(Kind.CHECKPOINT, keep, dirname)
        return _record(reply, self.endpoint)

    def complete(self, deadline_s: float | None = None) -> None:
        """Tell the pserver this trainer is done (it leaves the fan-in)."""
        self._call(Kind.COMPLETE, deadline_s=deadline_s)

    def close(self) -> None:
        self._rpc.close()

    def __repr__(self) -> str:
        return f"PServerClient({self.endpoint!r}, trainer_id={self.trainer_id})"


def probe_seconds(deadline_s: float) -> float:
    """How long a trainer waits for a ping's answer when it looks for a dead pserver: longer
    than a pserver's own pings of its peers (at most 0.5 s), which hold its serving loop."""
    return min(2.0, max(0.6, deadline_s / 2))


def _record(reply: Any, endpoint: str) -> dict[str, Any]:
    """The JSON record a pserver answers a checkpoint request with (checked)."""
    value = reply.value
    try:
        record = json.loads(bytes(value.numpy()).decode("utf-8")) if value is not None else None
        ok = isinstance(record, dict) and isinstance(record.get("file"), str) and \
            type(record.get("step")) is int and isinstance(record.get("sha256"), str) and \
            isinstance(record.get("path", ""), str)
    except (ValueError, AttributeError, TypeError, UnicodeDecodeError):
        ok = False
    if not ok:
        raise RPCError(f"pserver {endpoint} answered a checkpoint request without a valid "
                       "record of the file it wrote (name, step, sha256)")
    return record


class _Lane:
    """A daemon thread that runs the calls of one endpoint in order.

    NOTE: a ZeroMQ socket must not be used by two threads at once; each endpoint's client
    (its own socket, behind its own lock) is only ever driven by one call at a time, so a
    thread per endpoint is the simplest way to talk to several pservers at once. Daemon
    threads, not a ``concurrent.futures`` pool: the exit hook that completes the pools runs
    after such pools refuse new work.
    """

    def __init__(self, endpoint: str) -> None:
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=f"pserver client {endpoint}",
                                        daemon=True)
        self._thread.start()
        self.ident = self._thread.ident

    def submit(self, fn: Callable[[], R]) -> Future:
        fut: Future = Future()
        self._jobs.put((fn, fut))
        return fut

    def stop(self) -> None:
        self._jobs.put(None)

    def _run(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            fn, fut = job
            if not fut.set_running_or_notify_cancel():
                continue
            try:
                fut.set_result(fn())
            except BaseException as e:  # noqa: BLE001 - handed to the caller of each()
                fut.set_exception(e)


class ClientPool:
    """One :class:`PServerClient` per endpoint for one trainer, created on first use."""

    def __init__(self, trainer_id: int, deadline_s: float | None = None,
                 secret: bytes | str | None = None) -> None:
        self.trainer_id = int(trainer_id)
        self.deadline_s = deadline_s
        self.secret = secret
        self._clients: dict[str, PServerClient] = {}
        self._lanes: dict[str, _Lane] = {}
        self._lock = threading.Lock()
        # the sends started and not yet waited for: (future, tag, number of pservers)
        self._sends: list[tuple[Future, str | None, int]] = []
        self._send_lane: _Lane | None = None
        self._send_thread: int | None = None
        self._send_failed: BaseException | None = None

    def each(self, endpoints: Iterable[str], call: Callable[[PServerClient], R]) -> list[R]:
        """``call(client)`` for each endpoint, the different endpoints at once; the results
        in endpoint order. Every call runs to its end (each is bounded by the deadline); then
        the first error, in endpoint order, is raised (it names its endpoint).

        An endpoint listed twice is called twice, in order. One endpoint: called on this
        thread, without a hand-over.
        """
        return self.each_at(list(endpoints), lambda c, i: call(c))

    def each_at(self, eps: list[str], call: Callable[[PServerClient, int], R]) -> list[R]:
        """:meth:`each` with the call given the index ``i`` of its endpoint in ``eps`` (so
        that each call can pick its own variable)."""
        if self._sends and threading.get_ident() != self._send_thread:
            self.wait_sends()  # NOTE: one call at a time per client: the sends go first
        if len(set(eps)) <= 1:
            return [call(self.get(ep), i) for i, ep in enumerate(eps)]
        groups: dict[str, list[int]] = {}
        for i, ep in enumerate(eps):
            groups.setdefault(ep, []).append(i)
        results: list[Any] = [None] * len(eps)

        def run_group(ep: str) -> None:
            client = self.get(ep)
            for i in groups[ep]:
                results[i] = call(client, i)

        first, *rest = groups
        with self._lock:
            lanes = [self._lanes.get(ep) or self._lanes.setdefault(ep, _Lane(ep)) for ep in rest]
        futures = [lane.submit(lambda ep=ep: run_group(ep)) for lane, ep in zip(lanes, rest)]
        errors: dict[str, BaseException] = {}
        try:
            run_group(first)
        except Exception as e:  # NOTE: the other endpoints' calls still run to their end
            errors[first] = e
        for ep, fut in zip(rest, futures):
            # NOTE: wait() first: the call's own RPCTimeoutError is a TimeoutError too, and
            # must not be taken for the lane being stuck
            bound = self._wait_bound(len(groups[ep]))
            if not wait([fut], timeout=bound).done:
                errors[ep] = RPCTimeoutError(
                    f"trainer {self.trainer_id}: a call to pserver {ep} did not end within "
                    f"{bound:.1f} s (its deadline, and the time to probe the other pservers)")
                continue
            try:
                fut.result()
            except Exception as e:
                errors[ep] = e
        for ep in groups:
            if ep in errors:
                raise errors[ep]
        return results

    def _wait_bound(self, calls: int) -> float:
        """How long a lane's calls may take before the lane itself is taken for stuck: each
        call its deadline plus a probe of every pserver (explain_timeout); and a probe may
        first wait for a client that another thread is using, for as long again per client.
        NOTE: only a backstop: each call ends at its own deadline with a better error."""
        base = rpc_deadline_seconds() if self.deadline_s is None else self.deadline_s
        n = max(1, len(self._clients))
        return (calls + n) * (base + probe_seconds(base) * n) + 10.0

    def get(self, endpoint: str) -> PServerClient:
        with self._lock:
            c = self._clients.get(endpoint)
            if c is None:
                c = self._clients[endpoint] = PServerClient(endpoint, self.trainer_id,
                                                            self.deadline_s, self.secret,
                                                            pool=self)
            return c

    def explain_timeout(self, endpoint: str, error: RPCTimeoutError) -> None:
        """After a call to ``endpoint`` timed out: ping every pserver this trainer talked
        to, and if some do not answer (or answer with an error of their own: a pserver
        whose update failed), raise an error naming them.

        A pserver waiting for a trainer that a dead pserver stopped holds this trainer's
        request; the dead one is the cause worth naming. A pserver that gave up waiting
        stays up for a while and answers pings, so it is not taken for the cause. Returns
        (the caller re-raises ``error``) when every pserver answers.
        """
        with self._lock:
            clients = list(self._clients.values())
        base = rpc_deadline_seconds() if self.deadline_s is None else self.deadline_s
        probe = probe_seconds(base)
        dead = []
        for c in clients:
            try:
                c.ping(probe)
            except RPCTimeoutError:
                dead.append(c.endpoint)
            except RPCError as e:
                dead.append(f"{c.endpoint} ({e})")
        if dead:
            others = "" if len(dead) == len(clients) else ", the other pservers answer"
            raise RPCTimeoutError(
                f"{error}; pserver {', '.join(dead)} of this job does not answer a ping "
                f"(within {probe:.1f} s){others}: it is down, stuck or failed, the likely "
                f"cause (trainer {self.trainer_id})") from error

    @property
    def endpoints(self) -> list[str]:
        return list(self._clients)

    def send_barrier(self, endpoints: Iterable[str]) -> None:
        """The send barrier to every pserver in ``endpoints``, at once."""
        self.each(endpoints, PServerClient.send_barrier)

    def fetch_barrier(self, endpoints: Iterable[str]) -> None:
        """The fetch barrier to every pserver in ``endpoints``, at once."""
        self.each(endpoints, PServerClient.fetch_barrier)

    def send(self, names: Sequence[str], endpoints: Sequence[str],
             values: Sequence[Any]) -> None:
        """Push ``values[i]`` as ``names[i]`` to ``endpoints[i]``; different pservers at once,
        the blocks for one pserver in order."""
        self.each_at(list(endpoints), lambda c, i: c.send(names[i], values[i]))

    def send_async(self, names: Sequence[str], endpoints: Sequence[str],
                   values: Sequence[Any], tag: str | None = None) -> None:
        """Start :meth:`send` on the pool's send thread and return at once.

        The sends run one after the other in the order they were started (each one's blocks
        for different pservers at once); once one failed, the later ones are not sent. The
        values must not change until the sends were waited for (gradients do not: nothing
        writes a variable after its ``send``). ``tag`` names what was sent in a failure's
        note.
        """
        names, endpoints, values = list(names), list(endpoints), list(values)

        def run() -> None:
            if self._send_failed is not None:
                raise RPCError(f"trainer {self.trainer_id}: {names} not sent to "
                               f"{sorted(set(endpoints))}: an earlier send of the step failed "
                               f"({self._send_failed})")
            try:
                self.send(names, endpoints, values)
            except BaseException as e:
                self._send_failed = e
                raise

        with self._lock:
            if self._send_lane is None:
                self._send_lane = _Lane("sends")
                self._send_thread = self._send_lane.ident
            fut = self._send_lane.submit(run)
        self._sends.append((fut, tag, len(set(endpoints))))

    def wait_sends(self) -> None:
        """Wait for the sends started with :meth:`send_async`; raise the first failure (in
        the order they were started), with a note naming that send. Every send is waited for first,
        each at most its deadline (plus the probe of the pservers that names a dead one)."""
        sends, self._sends = self._sends, []
        first: BaseException | None = None
        for fut, tag, calls in sends:
            bound = self._wait_bound(calls)
            if not wait([fut], timeout=bound).done:
                err: BaseException = RPCTimeoutError(
                    f"trainer {self.trainer_id}: a send did not end within {bound:.1f} s (its "
                    "deadline, and the time to probe the pservers)")
            else:
                err = fut.exception()
            if err is not None and first is None:
                first = err
                if tag is not None:
                    err.add_note(f"parafluid: raised by the send of {tag}, started earlier in "
                                 "this step while the backward pass went on")
        self._send_failed = None
        if first is not None:
            raise first

    def settle_sends(self) -> BaseException | None:
        """A failed step: wait for the sends it started (so that nothing of it reaches a
        pserver later); return the first failure instead of raising it."""
        try:
            self.wait_sends()
        except BaseException as e:  # noqa: BLE001 - handed to the caller
            return e
        return None

    @property
    def sends_in_flight(self) -> int:
        """How many started sends were not waited for yet."""
        return len(self._sends)

    def recv(self, names: Sequence[str], endpoints: Sequence[str]) -> list[Any]:
        """Read ``names[i]`` from ``endpoints[i]``; different pservers at once."""
        return self.each_at(list(endpoints), lambda c, i: c.recv(names[i]))

    def checkpoint_notify(self, dirname: str, endpoints: Iterable[str],
                          keep: dict[str, str] | None = None) -> list[dict[str, Any]]:
        """Ask each pserver to save (all at once), keeping ``keep[endpoint]``, its file of
        the committed checkpoint; the records of their files, in endpoint order."""
        keep = keep or {}
        return self.each(endpoints,
                         lambda c: c.checkpoint_notify(dirname, keep.get(c.endpoint, "")))

    def step(self, endpoints: Iterable[str]) -> int:
        """This trainer's step with the pservers (the same on each, else RPCError)."""
        steps = {ep: self.get(ep).step for ep in endpoints}
        if len(set(steps.values())) > 1:
            raise RPCError(f"trainer {self.trainer_id} is at different steps with its "
                           f"pservers: {steps}")
        return next(iter(steps.values()), 0)

    def complete(self, endpoints: Iterable[str] | None = None,
                 deadline_s: float | None = None) -> None:
        """Send COMPLETE to ``endpoints`` (default: every endpoint used), then close.

        Every endpoint is tried; the first error is raised after the others were told.
        ``deadline_s`` bounds each notice (None: the pool's deadline).
        """
        first: BaseException | None = self.settle_sends() if self._sends else None
        try:
            # NOTE: each() lets every call run to its end before it raises: every pserver
            # is told even when one fails
            self.each(list(self._clients) if endpoints is None else list(endpoints),
                      lambda c: c.complete(deadline_s))
        except Exception as e:
            first = first or e
        self.close()
        if first is not None:
            raise first

    def close(self) -> None:
        if self._sends:
            self.settle_sends()
        with self._lock:
            for lane in self._lanes.values():
                lane.stop()
            self._lanes.clear()
            if self._send_lane is not None:
                self._send_lane.stop()
                self._send_lane = self._send_thread = None
            for c in self._clients.values():
                c.close()
            self._clients.clear()
