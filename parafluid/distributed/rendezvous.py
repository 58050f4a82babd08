"""The rendezvous of the collective (nccl2) mode: trainer 0 hosts, the others join.

Trainer 0 serves the job's key-value store (``store.py``: a bounded store of our own behind
the pservers' RPC handshake) on its own endpoint's address (not every interface) and
publishes the job: its id (``PARAFLUID_JOB_ID``, may be empty), whether joining needs the
secret (``PARAFLUID_RPC_SECRET``) and, with one, an HMAC proving that the host holds it. With
a secret, a connection to the store must pass the PLAIN handshake and every request carries
the channel's MAC: a process without the secret cannot read, write or wait for anything. A
joining trainer checks the job record first: another job at the port, a host with another
secret, or a secret on one side only is a ``RendezvousError`` naming both. Every key of the
job then lives under a namespace derived from the secret (and a salt of the host's). Without
a secret, every process that reaches the port is trusted, within the store's bounds (a value
of at most 4 MiB, 64 MiB and 65,536 keys in all). Nothing is pickled; the secret never
travels.

Each trainer claims its id (``compare_set``: a second process with the same
``PADDLE_TRAINER_ID`` is refused), starts its heartbeat (``health.py``) and announces itself
under ``rdzv/<trainer_id>`` with a small JSON record: its endpoint, its number of local
devices, the endpoint list it was given and a fingerprint (parafluid and torch versions,
backend). When all trainers have announced, each one checks the records against its own, so
that a trainer started with another ``CPU_NUM``, another endpoint list or another torch fails
here with a message naming it instead of hanging in the first all-reduce. Every trainer then
acknowledges, and trainer 0 waits for the acknowledgements (or the readers' deaths) before it
returns or raises: the store lives in its process, and a reader must never find the verdict
gone.

Every wait has a deadline (default 300 s; Fluid's ``FLAGS_rpc_deadline`` in ms wins when it is
set), the store handshake and each store call included. When it passes, the error lists the
trainer endpoints that never joined, or names trainer 0's port as silent.

Example (one trainer: the store is hosted and joined by the same process)::

    rdv = rendezvous(["127.0.0.1:6170"], 0, local_devices=1, backend="gloo", deadline_s=10)
    rdv.num_trainers      # 1
    rdv.close()
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import queue
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from .deadline import Deadline, rpc_deadline_seconds
from .endpoints import parse_endpoint, parse_endpoints
from .env import JOB_ID_ENV, job_id
from .handshake import mechanism_of, peer_mechanism
from .health import Heartbeat
from .store import StoreError, StoreServer
from .store_client import RPCStore

__all__ = ["DEFAULT_RENDEZVOUS_DEADLINE_S", "JOB_ID_ENV", "Rendezvous", "RendezvousError",
           "StoreCalls", "rendezvous", "job_id_from_env"]

DEFAULT_RENDEZVOUS_DEADLINE_S = 300.0
_MIN_CALL_S = 2.0  # a store call made after the deadline still gets this long
_MAX_RECORD = 1 << 16  # an announcement is a few hundred bytes; refuse anything absurd


class RendezvousError(RuntimeError):
    """The trainers could not meet: one never joined, or their settings disagree."""


@dataclass
class Rendezvous:
    """The outcome: the job's store every trainer is connected to, what each one announced,
    and this trainer's heartbeat (``health.py``), already watching the others."""

    store: Any  # the job's namespace of the store (an RPCStore)
    endpoints: list[str]
    trainer_id: int
    local_devices: int
    backend: str
    records: list[dict] = field(default_factory=list)
    heartbeat: Heartbeat | None = None
    calls: StoreCalls | None = None
    job_id: str = ""
    server: StoreServer | None = None  # trainer 0's

    @property
    def num_trainers(self) -> int:
        return len(self.endpoints)

    def close(self) -> None:
        if self.heartbeat is not None:
            self.heartbeat.stop()
        if self.store is not None:
            self.store.close()
        self.store = None
        if self.server is not None:
            self.server.stop()
            self.server = None


class StoreCalls:
    """Runs store calls on a daemon thread, each bounded by a timeout.

    NOTE: every store request has its own deadline; this bounds a caller's sequence of them
    (and anything torch does through the store) by one timeout. A call that overruns leaves
    its thread blocked and this object unusable; the caller raises naming the host.
    """

    def __init__(self, name: str) -> None:
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._stuck: str | None = None
        threading.Thread(target=self._loop, daemon=True, name=name).start()

    def _loop(self) -> None:
        while True:
            fn, box, done = self._queue.get()
            try:
                box["value"] = fn()
            except BaseException as e:  # noqa: BLE001 - handed to the caller
                box["error"] = e
            done.set()

    def __call__(self, fn: Callable[[], Any], timeout: float, what: str,
                 watch: Callable[[], None] | None = None) -> Any:
        """``fn()`` within ``timeout`` seconds; ``watch``, when given, is called every 0.1 s
        while the call waits and raises to give it up (say, the store's host died: a
        request to it would wait for the whole timeout)."""
        if self._stuck is not None:
            raise TimeoutError(self._stuck)
        box: dict[str, Any] = {}
        done = threading.Event()
        self._queue.put((fn, box, done))
        end = time.monotonic() + max(timeout, 0.001)
        step = 0.1 if watch is not None else timeout
        while not done.wait(max(0.001, min(step, end - time.monotonic()))):
            if time.monotonic() >= end or watch is None:
                self._stuck = f"{what}: no answer within {timeout:.1f} s"
                raise TimeoutError(self._stuck)
            try:
                watch()
            except BaseException:
                self._stuck = f"{what}: given up while waiting for the store"
                raise
        if "error" in box:
            raise box["error"]
        return box["value"]


def _fingerprint(backend: str) -> str:
    from ..version import __version__

    return f"parafluid {__version__}, torch {torch.__version__}, backend {backend}"


def _host(endpoints: list[str], secret: bytes | None) -> StoreServer:
    try:
        # NOTE: every trainer opens two connections (its own, its heartbeat's)
        return StoreServer(endpoints[0], secret,
                           max_connections=max(256, 4 * len(endpoints) + 64))
    except OSError as e:
        raise RendezvousError(
            f"trainer 0 cannot host the rendezvous at {endpoints[0]}: "
            f"{_first_line(e).rsplit(': ', 1)[-1]} (is the port already in use, or the address "
            "not one of this machine's?)") from e


def _connect(endpoints: list[str], trainer_id: int, deadline: Deadline,
             secret: bytes | None) -> RPCStore:
    """This trainer's connection to the store, through its handshake."""
    host, port = parse_endpoint(endpoints[0], "trainer 0's endpoint")
    me = f"trainer {trainer_id} ({endpoints[trainer_id]})"
    store = RPCStore(endpoints[0], secret=secret, deadline_s=max(deadline.remaining(), 0.001),
                     trainer_id=trainer_id)
    try:
        # NOTE: a ZeroMQ client connects (and reconnects) by itself: a trainer 0 that starts
        # later within the deadline is found
        store.ping(max(deadline.remaining(), 0.001), "the store handshake")
    except StoreError as e:
        store.close()
        if isinstance(e, TimeoutError):
            # NOTE: only now a plain connection, which the store would log as a failed
            # handshake: nothing listening, or something that never answers?
            try:
                socket.create_connection((host, port), timeout=1.0).close()
            except OSError as refused:
                raise _unreachable(endpoints, trainer_id, deadline, refused) from e
            raise RendezvousError(
                f"{me}: trainer 0's port {endpoints[0]} accepts connections but the rendezvous "
                f"store there did not answer within {deadline.seconds:g} s (a stopped or hung "
                "trainer 0, or another program on the port?)") from e
        theirs = peer_mechanism(endpoints[0], min(2.0, max(deadline.remaining(), 0.5)))
        ours = mechanism_of(secret)
        if theirs is not None and theirs != ours:
            has, lacks = ("trainer 0", me) if secret is None else (me, "trainer 0")
            raise RendezvousError(
                f"rendezvous at {endpoints[0]}: {has} has a secret (PARAFLUID_RPC_SECRET) and "
                f"{lacks} has none: give every trainer of the job the same secret (the "
                "launcher does)") from e
        raise RendezvousError(
            f"rendezvous: {me}: the store at {endpoints[0]} does not hold this trainer's "
            "secret (PARAFLUID_RPC_SECRET differs): another job's trainer 0 on the port, or the "
            f"trainers were given different secrets ({e})") from e
    return store


def _unreachable(endpoints: list[str], trainer_id: int, deadline: Deadline,
                 e: BaseException) -> RendezvousError:
    return RendezvousError(
        f"trainer {trainer_id} ({endpoints[trainer_id]}) could not reach trainer 0 at "
        f"{endpoints[0]}, the rendezvous host, within {deadline.seconds:g} s "
        f"({_first_line(e)}). Trainers that never joined: {endpoints[0]} (trainer 0); "
        "start it, or check the address and the firewall")


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0].rstrip(".") if text else type(e).__name__


def _decode(raw: bytes, who: str) -> dict:
    if len(raw) > _MAX_RECORD:
        raise RendezvousError(f"rendezvous: {who} sent a {len(raw)}-byte record "
                              f"(at most {_MAX_RECORD}): not a parafluid trainer?")
    try:
        rec = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise RendezvousError(f"rendezvous: {who} sent a malformed record: {e}") from None
    want = {"endpoint": str, "local_devices": int, "endpoints": list, "fingerprint": str}
    if not isinstance(rec, dict) or any(not isinstance(rec.get(k), t) for k, t in want.items()):
        raise RendezvousError(f"rendezvous: {who} sent a record without the fields "
                              f"{sorted(want)}: {raw[:200]!r}")
    return rec


# ---------------------------------------------------------------------- the job's namespace

_JOB_KEY = "parafluid/job"


def _mac(secret: bytes, *parts: str) -> str:
    return hmac.new(secret, "|".join(parts).encode("utf-8"), hashlib.sha256).hexdigest()


def _host_job(store: Any, job_id: str, secret: bytes | None) -> str:
    """Trainer 0: publish the job (its id, whether joins need the secret, a proof that the
    host holds it) and return the job's namespace."""
    salt = os.urandom(16).hex()
    rec = {"job": job_id, "salt": salt, "auth": secret is not None,
           "proof": _mac(secret, "parafluid rendezvous host", job_id, salt) if secret else ""}
    store.set(_JOB_KEY, json.dumps(rec))
    return _namespace(job_id, salt, secret)


def _namespace(job_id: str, salt: str, secret: bytes | None) -> str:
    # NOTE: with a secret, the namespace of every key of the job is derived from it: a
    # process without the secret cannot name, read or overwrite the job's keys.
    if secret is not None:
        return "job-" + _mac(secret, "parafluid namespace", job_id, salt)[:32]
    return "job-" + hashlib.sha256(f"{job_id}|{salt}".encode()).hexdigest()[:32]


def _join_job(raw: bytes, job_id: str, secret: bytes | None, me: str, host: str) -> str:
    """Another trainer: check the host's job record; return the job's namespace."""
    try:
        rec = json.loads(raw[:_MAX_RECORD].decode("utf-8"))
        ok = isinstance(rec, dict) and isinstance(rec.get("job"), str) and \
            isinstance(rec.get("salt"), str) and isinstance(rec.get("proof"), str)
    except (UnicodeDecodeError, json.JSONDecodeError):
        ok = False
    if not ok:
        raise RendezvousError(f"rendezvous: {me}: the store at {host} holds no parafluid job "
                              f"record it can read ({raw[:80]!r}): another program on the port?")
    if rec["job"] != job_id:
        raise RendezvousError(
            f"rendezvous: {me} belongs to job {job_id!r} (PARAFLUID_JOB_ID) but the store at "
            f"{host} hosts job {rec['job']!r}: two jobs on the same ports? Give each job its "
            "own ports (--started_port) and its own PARAFLUID_JOB_ID")
    if bool(rec.get("auth")) != (secret is not None):
        has, lacks = ("trainer 0", me) if rec.get("auth") else (me, "trainer 0")
        raise RendezvousError(
            f"rendezvous at {host}: {has} has a secret (PARAFLUID_RPC_SECRET) and {lacks} has "
            "none: give every trainer of the job the same secret (the launcher does)")
    if secret is not None and not hmac.compare_digest(
            rec["proof"], _mac(secret, "parafluid rendezvous host", job_id, rec["salt"])):
        raise RendezvousError(
            f"rendezvous: {me}: the store at {host} does not hold this trainer's secret "
            "(PARAFLUID_RPC_SECRET differs): another job's trainer 0 on the port, or the "
            "trainers were given different secrets")
    return _namespace(job_id, rec["salt"], secret)


def job_id_from_env() -> str:
    """``$PARAFLUID_JOB_ID``, or "" (a job without a name)."""
    return job_id()


def rendezvous(endpoints: str | Sequence[str], trainer_id: int, local_devices: int,
               backend: str, deadline_s: float | None = None, *,
               secret: bytes | str | None = None, job_id: str | None = None) -> Rendezvous:
    """Meet the other trainers; returns the job's store and everyone's announcement.

    Args:
        endpoints: every trainer's "ip:port", in trainer order (trainer 0 hosts at its own).
        trainer_id: this trainer's index in ``endpoints``.
        local_devices: devices this trainer runs (must be the same on every trainer).
        backend: "gloo" or "nccl" (must be the same on every trainer).
        deadline_s: seconds to wait for everyone; default ``FLAGS_rpc_deadline`` or 300 s.
        secret: the job's shared secret; default ``$PARAFLUID_RPC_SECRET`` (none: every
            process that reaches trainer 0's port is trusted).
        job_id: the job's name; default ``$PARAFLUID_JOB_ID`` (a trainer of another job is
            refused).

    Raises RendezvousError listing the endpoints that never joined, the trainers whose
    settings differ from this one's, a trainer id taken twice, another job or another secret
    at trainer 0's port, or a trainer 0 that does not answer.
    """
    from .wire import rpc_secret

    eps = parse_endpoints(endpoints)
    if not isinstance(trainer_id, int) or not 0 <= trainer_id < len(eps):
        raise ValueError(f"trainer_id must be in 0..{len(eps) - 1} for {len(eps)} trainer "
                         f"endpoints {eps}, got {trainer_id!r}")
    if local_devices < 1:
        raise ValueError(f"local_devices must be >= 1, got {local_devices}")
    key = rpc_secret(secret)
    job = job_id_from_env() if job_id is None else str(job_id)
    seconds = rpc_deadline_seconds(DEFAULT_RENDEZVOUS_DEADLINE_S) if deadline_s is None \
        else deadline_s
    deadline = Deadline(seconds)
    me = f"trainer {trainer_id} ({eps[trainer_id]})"
    calls = StoreCalls(f"parafluid-store-{trainer_id}")
    server = _host(eps, key) if trainer_id == 0 else None
    base = None
    hb = None
    try:
        base = _connect(eps, trainer_id, deadline, key)

        def call(fn: Callable[[], Any], what: str) -> Any:
            return calls(fn, max(deadline.remaining(), _MIN_CALL_S), what)

        if trainer_id == 0:
            ns = _host_job(base, job, key)
        else:
            while not call(lambda: base.check([_JOB_KEY]), "reading the job record"):
                if deadline.expired():
                    raise RendezvousError(f"rendezvous: {me}: the store at {eps[0]} published "
                                          f"no job record within {seconds:g} s")
                time.sleep(0.02)
            ns = _join_job(call(lambda: base.get(_JOB_KEY), "reading the job record"), job,
                           key, me, eps[0])
        store = base.with_prefix(ns)
        token = os.urandom(12).hex()
        held = call(lambda: store.compare_set(f"claim/{trainer_id}", "", token),
                    "claiming the trainer id").decode("utf-8", "replace")
        if held != token:
            raise RendezvousError(
                f"rendezvous at {eps[0]}: trainer id {trainer_id} is taken: another process of "
                f"this job already joined as trainer {trainer_id}. Every trainer needs its own "
                "PADDLE_TRAINER_ID (0..N-1)")
        hb = Heartbeat(lambda: RPCStore(eps[0], secret=key, deadline_s=seconds, prefix=ns,
                                        trainer_id=trainer_id,
                                        role=f"trainer-{trainer_id}-heartbeat"),
                       trainer_id, eps)
        rec = {"endpoint": eps[trainer_id], "local_devices": int(local_devices),
               "endpoints": eps, "fingerprint": _fingerprint(backend), "job": job}
        call(lambda: store.set(f"rdzv/{trainer_id}", json.dumps(rec)), "announcing")
        keys = [f"rdzv/{k}" for k in range(len(eps))]
        while True:
            present = [k for k, p in enumerate(call(lambda: store.present(keys),
                                                    "waiting for the others")) if p]
            if len(present) == len(eps):
                break
            if deadline.expired():
                missing = [f"{eps[k]} (trainer {k})" for k in range(len(eps))
                           if k not in present]
                raise RendezvousError(
                    f"rendezvous at {eps[0]}: after {seconds:g} s, {len(missing)} of "
                    f"{len(eps)} trainers never joined: {', '.join(missing)}. Start them (same "
                    "trainer endpoint list, their own PADDLE_TRAINER_ID), or raise "
                    "FLAGS_rpc_deadline (ms)")
            time.sleep(min(0.05, deadline.remaining()) or 0.001)
        hb.expect_all()
        raws = call(lambda: store.multi_get(keys), "reading the announcements")
        records = [_decode(raw, f"trainer {k} ({eps[k]})") for k, raw in enumerate(raws)]
        problems = _disagreements(records, eps, trainer_id, int(local_devices), rec)
        # NOTE: trainer 0 hosts the store: it stays until every trainer has read the
        # announcements (or died), so that a reader never finds the verdict gone.
        call(lambda: store.set(f"read/{trainer_id}", "1"), "acknowledging")
        if trainer_id == 0:
            _wait_for_readers(store, eps, hb, deadline, call)
    except TimeoutError as e:
        _abandon(hb, base, server)
        raise RendezvousError(
            f"rendezvous: {me}: trainer 0 at {eps[0]}, the rendezvous host, stopped answering "
            f"({e}): a stopped or hung trainer 0?") from e
    except (RuntimeError, OSError) as e:
        _abandon(hb, base, server)
        if isinstance(e, RendezvousError):
            raise
        if trainer_id == 0:
            raise RendezvousError(f"rendezvous: the store of trainer 0 ({eps[0]}) failed: "
                                  f"{_first_line(e)}") from e
        raise RendezvousError(
            f"rendezvous: {me}: trainer 0 at {eps[0]}, the rendezvous host, went away during "
            f"the rendezvous ({_first_line(e)}): it failed, or was stopped; its own error "
            "says why") from e
    except BaseException:
        _abandon(hb, base, server)
        raise
    if problems:
        _abandon(hb, base, server)
        raise RendezvousError("rendezvous: the trainers disagree: " + "; ".join(problems))
    return Rendezvous(store, eps, trainer_id, int(local_devices), backend, records, hb, calls,
                      job, server)


def _abandon(hb: Heartbeat | None, store: RPCStore | None, server: StoreServer | None) -> None:
    """A failed rendezvous: stop the heartbeat, the connection and (trainer 0) the store."""
    if hb is not None:
        hb.stop()
    if store is not None:
        store.close()
    if server is not None:
        server.stop()


def _disagreements(records: list[dict], eps: list[str], trainer_id: int, local_devices: int,
                   me: dict) -> list[str]:
    problems = []
    for k, rec in enumerate(records):
        who = f"trainer {k} ({eps[k]})"
        if rec["endpoint"] != eps[k]:
            problems.append(f"{who} announced itself as {rec['endpoint']}")
        if rec["endpoints"] != eps:
            problems.append(f"{who} was given the trainer endpoints {rec['endpoints']}, "
                            f"trainer {trainer_id} {eps}")
        if rec["local_devices"] != local_devices:
            problems.append(f"{who} runs {rec['local_devices']} local devices, trainer "
                            f"{trainer_id} runs {local_devices} (every trainer needs the same "
                            "CPU_NUM, or the same number of GPUs)")
        if rec["fingerprint"] != me["fingerprint"]:
            problems.append(f"{who} runs {rec['fingerprint']}; trainer {trainer_id} runs "
                            f"{me['fingerprint']}")
    return problems


def _wait_for_readers(store: Any, eps: list[str], hb: Heartbeat, deadline: Deadline,
                      call: Callable[..., Any]) -> None:
    pending = set(range(1, len(eps)))
    while pending:
        order = sorted(pending)
        keys = [f"read/{k}" for k in order]
        done = call(lambda keys=keys: store.present(keys), "waiting for readers")
        pending = {k for k, d in zip(order, done) if not d}
        gone = [k for k in pending if hb.trouble([k]) is not None]
        pending -= set(gone)  # a reader that died reads nothing more
        if not pending or deadline.expired():
            return
        time.sleep(0.02)
