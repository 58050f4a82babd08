"""The rendezvous of the collective (nccl2) mode: trainer 0 hosts, the others join.

Trainer 0 opens a key-value store (``torch.distributed.TCPStore``) at its own endpoint; every
trainer, trainer 0 included, connects to it and announces itself under ``rdzv/<trainer_id>``
with a small JSON record: its endpoint, its number of local devices, the endpoint list it was
given and a fingerprint (parafluid and torch versions, backend). When all trainers have
announced, each one checks the records against its own, so that a trainer started with
another ``CPU_NUM``, another endpoint list or another torch fails here with a message naming
it instead of hanging in the first all-reduce.

Every wait has a deadline (default 300 s; Fluid's ``FLAGS_rpc_deadline`` in ms wins when it is
set). When it passes, the error lists the trainer endpoints that never joined.

Example (one trainer: the store is hosted and joined by the same process)::

    rdv = rendezvous(["127.0.0.1:6170"], 0, local_devices=1, backend="gloo", deadline_s=10)
    rdv.num_trainers      # 1
    rdv.close()
"""

from __future__ import annotations

import datetime
import json
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist

from .deadline import Deadline, rpc_deadline_seconds
from .endpoints import parse_endpoint, parse_endpoints

__all__ = ["DEFAULT_RENDEZVOUS_DEADLINE_S", "Rendezvous", "RendezvousError", "rendezvous"]

DEFAULT_RENDEZVOUS_DEADLINE_S = 300.0
_MAX_RECORD = 1 << 16  # an announcement is a few hundred bytes; refuse anything absurd


class RendezvousError(RuntimeError):
    """The trainers could not meet: one never joined, or their settings disagree."""


@dataclass
class Rendezvous:
    """The outcome: the store every trainer is connected to, and what each one announced."""

    store: Any
    endpoints: list[str]
    trainer_id: int
    local_devices: int
    backend: str
    records: list[dict] = field(default_factory=list)

    @property
    def num_trainers(self) -> int:
        return len(self.endpoints)

    def close(self) -> None:
        # NOTE: dropping the last reference closes the connection (and, on trainer 0, the
        # server); TCPStore has no explicit close.
        self.store = None


def _fingerprint(backend: str) -> str:
    from .. import __version__

    return f"parafluid {__version__}, torch {torch.__version__}, backend {backend}"


def _connect(endpoints: list[str], trainer_id: int, deadline: Deadline) -> Any:
    host, port = parse_endpoint(endpoints[0], "trainer 0's endpoint")
    timeout = datetime.timedelta(seconds=max(deadline.remaining(), 0.001))
    if trainer_id == 0:
        try:
            return dist.TCPStore(host, port, len(endpoints), True, timeout,
                                 wait_for_workers=False)
        except (RuntimeError, OSError) as e:
            raise RendezvousError(
                f"trainer 0 cannot host the rendezvous at {endpoints[0]}: {_first_line(e)} "
                "(is the port already in use, or the address not one of this machine's?)"
            ) from e
    try:
        # NOTE: wait for the port with plain sockets first: torch's client would retry
        # just as well, but logs a C++ stack trace for every failed attempt.
        _wait_for_port(host, port, deadline)
        timeout = datetime.timedelta(seconds=max(deadline.remaining(), 0.001))
        return dist.TCPStore(host, port, len(endpoints), False, timeout)
    except (RuntimeError, OSError) as e:
        raise RendezvousError(
            f"trainer {trainer_id} ({endpoints[trainer_id]}) could not reach trainer 0 at "
            f"{endpoints[0]}, the rendezvous host, within {deadline.seconds:g} s "
            f"({_first_line(e)}). Trainers that never joined: {endpoints[0]} (trainer 0); "
            "start it, or check the address and the firewall") from e


def _wait_for_port(host: str, port: int, deadline: Deadline) -> None:
    while True:
        try:
            with socket.create_connection((host, port), timeout=max(0.05, min(
                    1.0, deadline.remaining()))):
                return
        except OSError as e:
            if deadline.expired():
                raise TimeoutError(f"{host}:{port} refused or did not answer: "
                                   f"{e.strerror or e}") from None
        time.sleep(min(0.1, deadline.remaining()))


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


def rendezvous(endpoints: str | Sequence[str], trainer_id: int, local_devices: int,
               backend: str, deadline_s: float | None = None) -> Rendezvous:
    """Meet the other trainers; returns the shared store and everyone's announcement.

    Args:
        endpoints: every trainer's "ip:port", in trainer order (trainer 0 hosts at its own).
        trainer_id: this trainer's index in ``endpoints``.
        local_devices: devices this trainer runs (must be the same on every trainer).
        backend: "gloo" or "nccl" (must be the same on every trainer).
        deadline_s: seconds to wait for everyone; default ``FLAGS_rpc_deadline`` or 300 s.

    Raises RendezvousError listing the endpoints that never joined, or the trainers whose
    settings differ from this one's.
    """
    eps = parse_endpoints(endpoints)
    if not isinstance(trainer_id, int) or not 0 <= trainer_id < len(eps):
        raise ValueError(f"trainer_id must be in 0..{len(eps) - 1} for {len(eps)} trainer "
                         f"endpoints {eps}, got {trainer_id!r}")
    if local_devices < 1:
        raise ValueError(f"local_devices must be >= 1, got {local_devices}")
    seconds = rpc_deadline_seconds(DEFAULT_RENDEZVOUS_DEADLINE_S) if deadline_s is None \
        else deadline_s
    deadline = Deadline(seconds)
    store = _connect(eps, trainer_id, deadline)
    me = {"endpoint": eps[trainer_id], "local_devices": int(local_devices), "endpoints": eps,
          "fingerprint": _fingerprint(backend)}
    store.set(f"rdzv/{trainer_id}", json.dumps(me))
    keys = [f"rdzv/{k}" for k in range(len(eps))]
    while True:
        present = [k for k in range(len(eps)) if store.check([keys[k]])]
        if len(present) == len(eps):
            break
        if deadline.expired():
            missing = [f"{eps[k]} (trainer {k})" for k in range(len(eps)) if k not in present]
            raise RendezvousError(
                f"rendezvous at {eps[0]}: after {seconds:g} s, {len(missing)} of {len(eps)} "
                f"trainers never joined: {', '.join(missing)}. Start them (same trainer "
                "endpoint list, their own PADDLE_TRAINER_ID), or raise FLAGS_rpc_deadline (ms)")
        time.sleep(min(0.05, deadline.remaining()) or 0.001)
    records = [_decode(store.get(keys[k]), f"trainer {k} ({eps[k]})") for k in range(len(eps))]
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
    if problems:
        raise RendezvousError("rendezvous: the trainers disagree: " + "; ".join(problems))
    return Rendezvous(store, eps, trainer_id, int(local_devices), backend, records)
