"""The collective mode's rendezvous store (store.py) and the heartbeat over it (health.py), in
one process: torch's Store operations, the bounds on what it holds, the job's secret, gloo
building a process group through it, and one store request per trainer per beat.
"""

from __future__ import annotations

import datetime
import logging
import struct
import threading
import time

import pytest
import torch
import torch.distributed as dist

from parafluid.distributed import wire
from parafluid.distributed.health import Heartbeat
from parafluid.distributed.rpc import RPCClient, RPCError
from parafluid.distributed.store import (
    StoreError,
    StoreServer,
    StoreTimeoutError,
    pack_fields,
    unpack_fields,
)
from parafluid.distributed.store_client import RPCStore


@pytest.fixture(autouse=True)
def _no_env_secret(monkeypatch):
    monkeypatch.delenv(wire.SECRET_ENV, raising=False)


@pytest.fixture
def server():
    srv = StoreServer("127.0.0.1:0", max_value_bytes=1 << 20, max_total_bytes=4 << 20,
                      max_keys=64)
    yield srv
    srv.stop()


@pytest.fixture
def store(server):
    s = RPCStore(server.endpoint, deadline_s=10)
    yield s
    s.close()


def test_the_store_does_what_torch_stores_do(store):
    store.set("a/1", "x")
    store.set("a/2", b"\x00\xff")
    assert store.get("a/1") == b"x" and store.get("a/2") == b"\x00\xff"
    assert store.check(["a/1", "a/2"]) and not store.check(["a/1", "b"])
    assert store.present(["a/1", "b", "a/2"]) == [True, False, True]
    assert store.add("n", 3) == 3 and store.add("n", -1) == 2 and store.get("n") == b"2"
    # compare_set as torch's TCPStore: a missing key is the empty value
    assert store.compare_set("c", "", "v") == b"v"
    assert store.compare_set("c", "other", "w") == b"v"
    assert store.compare_set("c", "v", "w") == b"w"
    assert store.compare_set("missing", "e", "d") == b"e" and not store.check(["missing"])
    assert store.multi_get(["a/1", "c"]) == [b"x", b"w"]
    store.multi_set(["m/1", "m/2"], ["p", b"q"])
    assert store.set_list("a/3", "z", ["a", "m"]) == {"a/1": b"x", "a/2": b"\x00\xff",
                                                      "a/3": b"z", "m/1": b"p", "m/2": b"q"}
    assert store.num_keys() == 7
    assert store.delete_key("a/3") and not store.delete_key("a/3")
    assert store.set_list("a/1", "y", ["a"]) == {"a/1": b"y", "a/2": b"\x00\xff"}
    # a prefix, as torch's PrefixStore
    job = store.with_prefix("job")
    job.set("k", "1")
    assert store.get("job/k") == b"1" and job.set_list("hb/0", "1 0", ["hb"]) == {"hb/0": b"1 0"}


def test_a_wait_is_answered_when_the_key_is_set_and_times_out_naming_it(server, store):
    other = RPCStore(server.endpoint, deadline_s=10)
    try:
        threading.Timer(0.2, lambda: other.set("late", "v")).start()
        assert store.get("late") == b"v"  # held by the server until set
        store.wait(["late"], datetime.timedelta(seconds=1))
        start = time.monotonic()
        with pytest.raises(StoreTimeoutError) as info:
            store.wait(["late", "never"], datetime.timedelta(seconds=0.3))
        assert time.monotonic() - start < 5
        msg = str(info.value)
        assert f"rendezvous store at {server.endpoint}" in msg and "'never'" in msg and \
            "'late'" not in msg.split("still not set")[1], msg
    finally:
        other.close()


def test_a_silent_host_is_a_timeout_naming_the_endpoint():
    srv = StoreServer("127.0.0.1:0")
    ep = srv.endpoint
    srv.stop()
    s = RPCStore(ep, deadline_s=0.3)
    try:
        with pytest.raises(StoreTimeoutError, match=f"rendezvous store at {ep}: set of 'k': no "
                           "reply within 0.3 s"):
            s.set("k", "v")
    finally:
        s.close()


def test_what_the_store_holds_is_bounded_and_refusals_are_logged(server, store, caplog):
    caplog.set_level(logging.ERROR)
    with pytest.raises(StoreError, match=r"a value of 7340032 bytes for 'big' \(at most"):
        store.set("big", b"x" * (7 << 20))  # refused by the client: nothing sent
    # a request larger than the server's message limit is dropped before it is read
    raw = RPCClient(server.endpoint, 0.5, peer="rendezvous store")
    try:
        with pytest.raises(RPCError):
            raw.call(wire.Kind.STORE, "set", torch.zeros(2 << 20, dtype=torch.uint8))
    finally:
        raw.close()
    with pytest.raises(StoreError, match=r"a value of 1048577 bytes for 'v' \(at most 1048576"):
        store.set("v", b"x" * ((1 << 20) + 1))
    for i in range(3):
        store.set(f"fill/{i}", b"x" * (1 << 20))
    with pytest.raises(StoreError, match="the store holds .* bytes, at most 4194304"):
        store.set("fill/3", b"x" * (1 << 20))
    for i in range(3):
        store.delete_key(f"fill/{i}")
    for i in range(64 - store.num_keys()):
        store.set(f"k/{i}", "v")
    with pytest.raises(StoreError, match="holds 64 keys, at most 64"):
        store.set("one-more", "v")
    store.set("k/0", "overwritten")  # an existing key may change
    with pytest.raises(RPCError, match="malformed fields"):
        store._client.call(wire.Kind.STORE, "set", torch.tensor([1, 2, 3], dtype=torch.uint8))
    with pytest.raises(StoreError, match="unknown operation"):
        store._call("shutdown", [], "shutdown")
    assert not store.check(["big", "v", "fill/3", "one-more"])
    assert server.bytes_held <= server.max_total_bytes and server.num_keys == 64
    assert server.refused == 5
    logged = [r.getMessage() for r in caplog.records]
    assert sum("refused" in m for m in logged) == 5, logged
    assert store.get("k/0") == b"overwritten"  # and it goes on


def test_the_field_decoder_checks_before_it_copies():
    assert unpack_fields(pack_fields([b"ab", b"", b"c"])) == [b"ab", b"", b"c"]
    bad = [b"", b"\x01\x00\x00", b"\xff\xff\xff\xff",  # no count, short count, 4 G fields
           pack_fields([b"abc"])[:-1],  # lengths that add up to more than there is
           b"\x01\x00\x00\x00\xff\xff\xff\x7f"]  # a 2 GiB field declared in 8 bytes
    for raw in bad:
        with pytest.raises(ValueError):
            unpack_fields(raw)


def test_with_a_secret_strangers_cannot_write_or_read():
    srv = StoreServer("127.0.0.1:0", secret="s3cret")
    job = RPCStore(srv.endpoint, secret="s3cret", deadline_s=10)
    try:
        job.set("k", "v")
        for secret in (None, "wrong"):
            stranger = RPCStore(srv.endpoint, secret=secret, deadline_s=5)
            try:
                with pytest.raises(StoreError, match="handshake"):
                    stranger.set("k", b"x" * 100)
            finally:
                stranger.close()
        assert job.get("k") == b"v" and job.num_keys() == 1
        assert srv.rpc.refused_handshakes >= 2 and srv.requests["set"] == 1
    finally:
        job.close()
        srv.stop()


def test_gloo_builds_a_process_group_through_the_store(server):
    stores = [RPCStore(server.endpoint, deadline_s=10, prefix="job") for _ in range(2)]
    out: dict[int, torch.Tensor] = {}

    def rank(r: int) -> None:
        pg = dist.ProcessGroupGloo(dist.PrefixStore("pg", stores[r]), r, 2,
                                   datetime.timedelta(seconds=20))
        x = torch.full((3,), float(r + 1))
        pg.allreduce([x]).wait()
        out[r] = x

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    for s in stores:
        s.close()
    assert out[0].tolist() == out[1].tolist() == [3.0, 3.0, 3.0]
    assert server.requests["wait"] >= 1 and server.requests["set"] >= 2


# ---------------------------------------------------------------------- the heartbeat

class _Counting:
    """A trainer's heartbeat connection that counts its requests."""

    def __init__(self, endpoint: str, counts: list[int], k: int) -> None:
        self.store, self.counts, self.k = RPCStore(endpoint, deadline_s=10,
                                                   prefix="job"), counts, k

    def set_list(self, *args, **kw):
        self.counts[self.k] += 1
        return self.store.set_list(*args, **kw)

    def close(self) -> None:
        self.store.close()


def _beat(server: StoreServer, n: int, beats: int = 4) -> tuple[int, list[int], list]:
    """n heartbeats until each has beaten ``beats`` times: (the store's requests, each
    trainer's beats, the heartbeats, still running)."""
    eps = [f"127.0.0.1:{7000 + k}" for k in range(n)]
    counts = [0] * n
    before = sum(server.requests.values())
    hbs = [Heartbeat(lambda k=k: _Counting(server.endpoint, counts, k), k, eps,
                     interval=0.05, stale_s=5.0) for k in range(n)]
    end = time.monotonic() + 30
    while min(counts) < beats and time.monotonic() < end:
        time.sleep(0.01)
    for hb in hbs:
        hb._stop.set()
    for hb in hbs:
        hb._thread.join(5)
    return sum(server.requests.values()) - before, counts, hbs


def test_a_beat_costs_one_store_request_per_trainer():
    server = StoreServer("127.0.0.1:0")
    try:
        per_beat = {}
        for n in (2, 8):
            requests, counts, hbs = _beat(server, n)
            # every request the job's heartbeats made: one per trainer per beat
            assert requests == sum(counts), (n, requests, counts)
            per_beat[n] = requests / (sum(counts) / n)
            for hb in hbs:  # and each one saw every trainer beat
                assert all(b is not None for b in hb._beats), hb._beats
        assert per_beat == {2: 2.0, 8: 8.0}, per_beat  # linear in the trainers
    finally:
        server.stop()


def test_the_view_names_a_dead_a_closed_and_a_failed_peer_and_a_dead_host():
    server = StoreServer("127.0.0.1:0")
    eps = [f"127.0.0.1:{7100 + k}" for k in range(4)]
    job = RPCStore(server.endpoint, deadline_s=10, prefix="job")
    hbs = [Heartbeat(lambda: RPCStore(server.endpoint, deadline_s=10, prefix="job"), k, eps,
                     interval=0.05, stale_s=1.0) for k in range(4)]
    try:
        hbs[0].expect_all()
        job.set("closed/2", "1")
        job.set("failed/3", "step 4 failed on trainer 3: NaN")
        hbs[1].stop()  # trainer 1 stops beating

        def clause(peers):
            end = time.monotonic() + 10
            while time.monotonic() < end:
                got = hbs[0].trouble(peers)
                if got is not None:
                    return got
                time.sleep(0.02)
            return None
        assert "trainer 3 (127.0.0.1:7103) gave up: step 4 failed on trainer 3: NaN" == \
            clause([3])
        assert "trainer 2 (127.0.0.1:7102) has closed its communicator" in clause([2])
        assert "trainer 1 (127.0.0.1:7101) stopped responding" in clause([1])
        server.stop()  # the host dies
        end = time.monotonic() + 10
        while hbs[2].trouble([0]) is None and time.monotonic() < end:
            time.sleep(0.02)
        assert "trainer 0 (127.0.0.1:7100), which hosts the rendezvous store, cannot be " \
            "reached" in hbs[2].trouble([0])
    finally:
        for hb in hbs:
            hb._stop.set()  # NOTE: all at once: each may be in a call until its deadline
        for hb in hbs:
            hb.stop()
        job.close()
        server.stop()


def test_init_process_group_and_clone_take_the_store(server, store):
    dist.init_process_group("gloo", store=store, rank=0, world_size=1,
                            timeout=datetime.timedelta(seconds=20))
    try:
        x = torch.ones(2)
        dist.all_reduce(x)
        assert x.tolist() == [1.0, 1.0]
    finally:
        dist.destroy_process_group()
    twin = store.clone()  # a connection of its own, the same keys
    twin.set("from-the-clone", "1")
    assert store.get("from-the-clone") == b"1"


def test_the_requests_held_waiting_are_bounded():
    srv = StoreServer("127.0.0.1:0", max_waiters=1)
    first, second = (RPCStore(srv.endpoint, deadline_s=10) for _ in range(2))
    got: list[bytes] = []
    try:
        # NOTE: one request held up to 20 s (a client's own waits come a second at a time)
        waiter = threading.Thread(target=lambda: got.extend(first._call(
            "get", [struct.pack("<q", 20_000), b"x"], "get of 'x'", 20.0)))
        waiter.start()
        end = time.monotonic() + 10
        while not srv._waiters and time.monotonic() < end:
            time.sleep(0.01)
        with pytest.raises(StoreError, match="1 requests are waiting for keys, at most 1"):
            second.wait(["y"], datetime.timedelta(seconds=5))
        second.set("x", "v")  # the held one is answered, and the store goes on
        waiter.join(10)
        assert got == [b"\x01", b"v"] and srv.refused == 1
    finally:
        first.close()
        second.close()
        srv.stop()
