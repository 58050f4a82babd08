"""Costs that must not grow with the size of a job: a pserver's work per trainer message does
not depend on the number of trainers, and a trainer's calls to several pservers go out at
once (the time of the slowest pserver, not the sum)."""

from __future__ import annotations

import threading
import time

import pytest
import torch

from parafluid.distributed import wire
from parafluid.distributed.ps_client import ClientPool
from parafluid.distributed.pserver import ParameterServer
from parafluid.distributed.rpc import Request, RPCServer
from parafluid.distributed.wire import Kind, Message


@pytest.fixture(autouse=True)
def _no_env_secret(monkeypatch):
    monkeypatch.delenv(wire.SECRET_ENV, raising=False)


# ------------------------------------------------------------- the pserver's cost per message


def _cpu_per_message(fan_in: int, sync: bool, steps: int = 2) -> float:
    """CPU seconds a pserver spends per trainer message (best of ``steps`` steps), with the
    deadline check run after each message as the serving loop does under load. The requests
    are handed to the server's handler directly (no sockets), so only its own work counts."""
    w = torch.zeros(4)
    ps = ParameterServer("127.0.0.1:0", fan_in, sync, optimize=lambda grads: None,
                         get=lambda name: w, deadline_s=600)
    ids = [b"T%015d" % t for t in range(fan_in)]
    grad = torch.ones(4)

    def message(kind: Kind, t: int, step: int, name: str = "", value=None) -> None:
        ps._handle(Request(ps._server, ids[t], Message(kind, name, value, t, 1, step), "-"))
        ps._tick()

    best = float("inf")
    try:
        for s in range(steps):
            start = time.process_time()
            for t in range(fan_in):
                message(Kind.SEND, t, s, "w@GRAD", grad)
                message(Kind.SEND_BARRIER, t, s)
            for t in range(fan_in):
                message(Kind.GET, t, s + 1, "w")
                message(Kind.FETCH_BARRIER, t, s + 1)
            best = min(best, (time.process_time() - start) / (4 * fan_in))
        assert ps.step == (steps if sync else steps * fan_in)
    finally:
        ps.close()
    return best


@pytest.mark.slow
@pytest.mark.parametrize("sync", [True, False], ids=["sync", "async"])
def test_pserver_cost_per_message_does_not_grow_with_trainers(sync):
    # NOTE: a barrier that compares the sets of all trainers, or a deadline check that walks
    # every trainer after each message, makes a message of a 4096-trainer job cost about 4x
    # one of a 64-trainer job; constant work per message keeps the ratio near 1
    small = _cpu_per_message(64, sync)
    large = _cpu_per_message(4096, sync)
    assert large < 2.0 * small, (f"a pserver message costs {large * 1e6:.1f} us with 4096 "
                                 f"trainers but {small * 1e6:.1f} us with 64")


# ------------------------------------------------- a trainer's calls to several pservers


class _MeetingServer:
    """An RPC server (thread) that holds each request until the other server of the pair got
    one too (or ``hold_s`` passed), then answers; ``met`` records whether they met."""

    def __init__(self, hold_s: float) -> None:
        self.arrived = threading.Event()
        self.other: _MeetingServer | None = None
        self.hold_s = hold_s
        self.met: list[bool] = []
        self.server = RPCServer("127.0.0.1:0", self.handle, poll_interval_s=0.01)
        self.endpoint = self.server.endpoint
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def handle(self, req: Request) -> None:
        if req.msg.kind == Kind.PING:
            req.reply()
            return
        self.arrived.set()
        assert self.other is not None
        self.met.append(self.other.arrived.wait(self.hold_s))
        value = torch.ones(2, 3) if req.msg.kind in (Kind.GET, Kind.PREFETCH) else None
        req.reply(value)

    def stop(self) -> None:
        self.server.stop()
        self.thread.join(10)


CALLS = {
    "send_barrier": lambda pool, eps: pool.send_barrier(eps),
    "fetch_barrier": lambda pool, eps: pool.fetch_barrier(eps),
    "send_blocks": lambda pool, eps: pool.send(["w.block0", "w.block1"], eps,
                                               [torch.ones(2), torch.ones(2)]),
    "recv_blocks": lambda pool, eps: pool.recv(["w.block0", "w.block1"], eps),
    "prefetch_shards": lambda pool, eps: pool.each_at(
        eps, lambda c, i: c.prefetch(f"emb.block{i}", [0, 1])),
    "complete": lambda pool, eps: pool.complete(eps),
}


@pytest.mark.parametrize("call", sorted(CALLS))
def test_calls_to_two_pservers_overlap(call):
    # NOTE: each server answers only once the other one got its request too: a trainer that
    # talks to the pservers one after the other makes the first wait out hold_s (no meeting)
    hold_s = 5.0
    a, b = _MeetingServer(hold_s), _MeetingServer(hold_s)
    a.other, b.other = b, a
    pool = ClientPool(trainer_id=0, deadline_s=4 * hold_s)
    try:
        CALLS[call](pool, [a.endpoint, b.endpoint])
        assert a.met and b.met
        assert all(a.met) and all(b.met), (
            f"{call}: the request to one pserver was only sent after the other answered "
            f"(met: {a.met}, {b.met})")
    finally:
        pool.close()
        a.stop()
        b.stop()


def test_an_error_of_one_pserver_names_it_after_the_others_answered():
    ok = RPCServer("127.0.0.1:0", lambda req: req.reply(), poll_interval_s=0.01)
    bad = RPCServer("127.0.0.1:0", lambda req: req.reply_error("no such step"),
                    poll_interval_s=0.01)
    threads = [threading.Thread(target=s.serve_forever, daemon=True) for s in (ok, bad)]
    for th in threads:
        th.start()
    pool = ClientPool(trainer_id=3, deadline_s=20)
    try:
        with pytest.raises(Exception, match=f"pserver {bad.endpoint} refused send_barrier"):
            pool.send_barrier([ok.endpoint, bad.endpoint])
        assert pool.get(ok.endpoint).step == 1  # the good one got its barrier
    finally:
        pool.close()
        for s in (ok, bad):
            s.stop()
        for th in threads:
            th.join(10)


# ------------------------------------------------------------ the benchmarks' link shaper


def test_link_shaper_is_off_by_default_and_paces_a_set_link(monkeypatch):
    from parafluid.distributed.link_shaper import LINK_ENV, LinkShaper, link_shaper

    monkeypatch.delenv(LINK_ENV, raising=False)
    assert link_shaper() is None
    monkeypatch.setenv(LINK_ENV, "8e6,0.01")  # 1 MB/s, 10 ms
    shaper = link_shaper()
    assert isinstance(shaper, LinkShaper) and shaper.latency_s == 0.01
    start = time.monotonic()
    shaper.pace("out", 50_000)  # 50 ms on the wire, then the latency
    shaper.pace("in", 50_000)   # the other direction has a clock of its own
    assert time.monotonic() - start >= 0.05 + 0.01 + 0.05
    monkeypatch.setenv(LINK_ENV, "fast")
    with pytest.raises(ValueError, match="PARAFLUID_BENCH_LINK"):
        link_shaper()


def test_a_silent_pserver_among_several_is_named_by_the_calls_own_error():
    # NOTE: the call's RPCTimeoutError is a TimeoutError; it must reach the trainer as it is
    # (naming the silent pserver), not be taken for a stuck lane
    ok = RPCServer("127.0.0.1:0", lambda req: req.reply(), poll_interval_s=0.01)
    held = []
    silent = RPCServer("127.0.0.1:0", held.append, poll_interval_s=0.01)  # answers nothing
    servers = (ok, silent)
    threads = [threading.Thread(target=s.serve_forever, daemon=True) for s in servers]
    for th in threads:
        th.start()
    pool = ClientPool(trainer_id=0, deadline_s=1.0)
    try:
        with pytest.raises(TimeoutError, match=f"fetch_barrier to pserver {silent.endpoint} .*"
                           f"pserver {silent.endpoint} of this job does not answer a ping"):
            pool.fetch_barrier([ok.endpoint, silent.endpoint])
    finally:
        pool.close()
        for s in servers:
            s.stop()
        for th in threads:
            th.join(10)
