"""RPC over real sockets on 127.0.0.1: hostile peers, secrets, deadlines, start order."""

import contextlib
import logging
import random
import socket
import threading
import time

import pytest
import torch
import zmq

from parafluid.distributed import wire
from parafluid.distributed.rpc import (
    RPCClient,
    RPCError,
    RPCServer,
    RPCTimeoutError,
    handshake_password,
    tcp_address,
    wait_for_server,
)
from parafluid.distributed.wire import Kind
from parafluid.scope import SelectedRows
from parafluid.testing.contention import scaled
from parafluid.testing.wire_fuzz import mutate, seed_messages


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _echo(req):
    m = req.msg
    if m.kind == Kind.SEND:
        req.reply(m.value * 2 if isinstance(m.value, torch.Tensor) else m.value)
    elif m.kind == Kind.GET and m.name == "missing":
        req.reply_error(f"no variable {m.name!r}")
    else:
        req.reply()


class _Serving:
    def __init__(self, endpoint="127.0.0.1:0", handler=_echo, **kw):
        self.server = RPCServer(endpoint, handler, **kw)
        self.errors = []
        self.thread = threading.Thread(target=self._serve, daemon=True)

    def _serve(self):
        try:
            self.server.serve_forever()
        except Exception as e:  # noqa: BLE001 - the test fails on it in __exit__
            self.errors.append(e)

    def __enter__(self):
        self.thread.start()
        return self.server

    def __exit__(self, *exc):
        self.server.stop()
        self.thread.join(5)
        assert not self.thread.is_alive() and not self.errors, self.errors


@pytest.fixture(autouse=True)
def _no_env_secret(monkeypatch):
    monkeypatch.delenv(wire.SECRET_ENV, raising=False)


def test_endpoint_parsing():
    assert tcp_address("127.0.0.1:6174") == "tcp://127.0.0.1:6174"
    assert tcp_address("127.0.0.1:0") == "tcp://127.0.0.1:*"
    for bad in ["6174", "127.0.0.1", ":80", "h:99999", "h:x"]:
        with pytest.raises(ValueError, match="endpoint.*'ip:port'"):
            tcp_address(bad)


def test_request_reply_and_error_reply():
    with _Serving() as server, RPCClient(server.endpoint, 5, trainer_id=1) as c:
        assert server.endpoint.startswith("127.0.0.1:") and not server.endpoint.endswith(":0")
        out = c.call(Kind.SEND, "w@GRAD", torch.arange(3.0))
        assert out.kind == Kind.REPLY_VALUE and out.value.tolist() == [0.0, 2.0, 4.0]
        assert c.call(Kind.PING).kind == Kind.REPLY_OK
        with pytest.raises(RPCError, match=r"refused get of 'missing' \(trainer 1\): no var"):
            c.call(Kind.GET, "missing")


def test_bind_is_exactly_the_endpoint():
    with _Serving() as server:
        port = int(server.endpoint.rsplit(":", 1)[1])
        with pytest.raises(OSError, match=f"cannot bind 127.0.0.1:{port}"):
            RPCServer(f"127.0.0.1:{port}", _echo)


def test_hostile_messages_are_rejected_and_the_server_keeps_serving(caplog):
    ctx = zmq.Context()
    raw = ctx.socket(zmq.DEALER)
    raw.setsockopt(zmq.LINGER, 0)
    good_header = wire.encode(Kind.SEND, "w", torch.ones(2))[0]
    hostile = [
        [b"garbage"],
        [b""],
        [good_header],                                  # declared payload missing
        [good_header, b"\0" * 7],                       # wrong payload size
        [b"x"] * 40,                                    # far too many frames
        wire.encode(Kind.REPLY_OK),                     # a reply sent to a server
        [bytes(wire.encode(Kind.SEND, "w", torch.ones(2))[0]).replace(b"PFRP", b"EVIL"),
         b"\0" * 8],
    ]
    with caplog.at_level(logging.ERROR, logger="parafluid.distributed.rpc"), \
            _Serving(max_message_bytes=1 << 16) as server:
        raw.connect(tcp_address(server.endpoint))
        for frames in hostile:
            raw.send_multipart([bytes(memoryview(f)) for f in frames])
            assert raw.poll(5000), f"no answer to hostile message {frames[:1]!r}"
            reply = wire.decode(raw.recv_multipart())
            assert reply.kind == Kind.REPLY_ERROR and "rejected by" in reply.text()
        # a frame past the size limit: ZeroMQ drops the peer before buffering it
        raw.send_multipart([good_header, b"\0" * (1 << 18)])
        with RPCClient(server.endpoint, 5) as c:
            assert c.call(Kind.SEND, "w", torch.ones(2)).value.tolist() == [2.0, 2.0]
        assert server.rejected == len(hostile)
    assert "127.0.0.1" in caplog.text and "bad magic" in caplog.text
    raw.close()
    ctx.term()


def _counting(seen):
    def handler(req):
        seen.append(req.msg.kind)
        _echo(req)
    return handler


def test_without_the_secret_no_message_reaches_the_handler(monkeypatch):
    """With a secret, a peer without the handshake's credentials (none, a wrong secret's,
    another role's name with a wrong password) is refused before it can send a message:
    the handler sees nothing, the refusals are counted, the client is told at once (not
    after its deadline), and the job's clients go on."""
    seen = []
    with _Serving(handler=_counting(seen), secret="right") as server:
        with RPCClient(server.endpoint, 5, secret="right", trainer_id=3) as c:
            assert c.call(Kind.SEND, "w", torch.ones(1)).value.tolist() == [2.0]
        assert seen == [Kind.SEND]
        start = time.monotonic()
        for secret in ("wrong", None):
            with RPCClient(server.endpoint, 5, secret=secret, trainer_id=3) as c, \
                    pytest.raises(RPCError, match="handshake") as info:
                c.call(Kind.SEND, "w", torch.ones(1))
            assert not isinstance(info.value, RPCTimeoutError)
        # refused at once, not at the 5 s deadline
        assert time.monotonic() - start < min(scaled(3), 4.5)
        ctx = zmq.Context()
        try:
            for user, password in ((b"trainer-0", b"guess"), (b"u", b"p"), (b"x" * 200, b"y")):
                s = ctx.socket(zmq.DEALER)
                s.setsockopt(zmq.LINGER, 0)
                s.plain_username, s.plain_password = user, password
                s.connect(tcp_address(server.endpoint))
                with contextlib.suppress(zmq.Again):  # never wait for a refused peer
                    s.send_multipart(wire.encode(Kind.SEND, "w", torch.ones(1),
                                                 secret=b"right"), zmq.NOBLOCK)
                assert not s.poll(300)
        finally:
            ctx.destroy(linger=0)
        end = time.monotonic() + 5
        while server.refused_handshakes < 5 and time.monotonic() < end:
            time.sleep(0.02)
        assert server.refused_handshakes >= 5 and server.rejected == 0
        assert seen == [Kind.SEND]  # not one message of the strangers reached the handler
        monkeypatch.setenv(wire.SECRET_ENV, "right")  # the environment variable is the default
        with RPCClient(server.endpoint, 5) as c:
            assert c.call(Kind.PING).kind == Kind.REPLY_OK
        assert seen == [Kind.SEND, Kind.PING]


def test_a_client_with_the_handshake_password_still_needs_the_secret_for_each_message():
    """PLAIN sends its password in clear: one who read it off the network (not the secret:
    it is an HMAC of it) gets through the handshake but not one message (the MAC)."""
    seen = []
    with _Serving(handler=_counting(seen), secret="right") as server:
        ctx = zmq.Context()
        s = ctx.socket(zmq.DEALER)
        s.setsockopt(zmq.LINGER, 0)
        s.plain_username, s.plain_password = b"trainer-0", handshake_password(b"right")
        s.connect(tcp_address(server.endpoint))
        try:
            s.send_multipart(wire.encode(Kind.SEND, "w", torch.ones(1), secret=b"guess"))
            assert s.poll(5000)
            reply = wire.decode(s.recv_multipart(), secret=b"right")
        finally:
            ctx.destroy(linger=0)
        assert reply.kind == Kind.REPLY_ERROR and "MAC" in reply.text()
        assert seen == [] and server.rejected == 1 and server.refused_handshakes == 0
    assert b"right" not in handshake_password(b"right")


def test_without_a_secret_every_peer_is_trusted_and_a_secret_on_one_side_is_named():
    seen = []
    with _Serving(handler=_counting(seen)) as server:
        with RPCClient(server.endpoint, 5) as c:
            assert c.call(Kind.PING).kind == Kind.REPLY_OK
        with RPCClient(server.endpoint, 5, secret="mine") as c, \
                pytest.raises(RPCError, match="to every process of the job, or to none"):
            c.call(Kind.PING)
        assert seen == [Kind.PING]


def test_dead_server_times_out_naming_endpoint_kind_and_variable():
    ep = f"127.0.0.1:{_free_port()}"
    with RPCClient(ep, 0.3, trainer_id=2) as c:
        t0 = time.monotonic()
        with pytest.raises(RPCTimeoutError, match=rf"get of 'fc_0.w_0' to pserver {ep} "
                                                  r"\(trainer 2\): no reply within 0.3 s"):
            c.call(Kind.GET, "fc_0.w_0")
        assert time.monotonic() - t0 < 0.3 + scaled(1.7)
    with pytest.raises(RPCTimeoutError, match=f"pserver {ep} did not answer"):
        wait_for_server(ep, 0.2)


def test_a_held_request_timing_out_names_the_other_pserver_that_is_dead():
    """A live pserver holding a trainer's read (it waits for a trainer that a dead pserver
    stopped) times out; the error names the dead pserver, which the trainer pings."""
    from parafluid.distributed.ps_client import ClientPool

    held = []

    def hold_gets(req):  # answers pings and sends, never a read: a stuck fan-in
        if req.msg.kind == Kind.GET:
            held.append(req)
        else:
            req.reply()

    dead_port = _free_port()
    dead_server = RPCServer(f"127.0.0.1:{dead_port}", _echo)
    dead_thread = threading.Thread(target=dead_server.serve_forever, daemon=True)
    dead_thread.start()
    with _Serving(handler=hold_gets) as live:
        pool = ClientPool(trainer_id=1, deadline_s=0.6)
        try:
            pool.get(live.endpoint).send("w@GRAD", torch.ones(2))
            pool.get(f"127.0.0.1:{dead_port}").send("v@GRAD", torch.ones(2))
            dead_server.stop()       # the second pserver dies
            dead_thread.join(5)
            with pytest.raises(RPCTimeoutError) as info:
                pool.get(live.endpoint).recv("w")
            text = str(info.value)
            assert f"get of 'w' to pserver {live.endpoint} (trainer 1)" in text
            assert f"pserver 127.0.0.1:{dead_port} of this job does not answer a ping" in text
            # with every other pserver alive, the plain timeout stands
            alone = ClientPool(trainer_id=1, deadline_s=0.4)
            try:
                with pytest.raises(RPCTimeoutError, match="no reply within") as info2:
                    alone.get(live.endpoint).recv("w")
                assert "does not answer a ping" not in str(info2.value)
            finally:
                alone.close()
        finally:
            pool.close()


def test_timed_out_request_is_not_delivered_late():
    """A request that timed out must not reach a server that starts afterwards."""
    seen = []

    def record(req):
        seen.append(req.msg.kind)
        req.reply()
    ep = f"127.0.0.1:{_free_port()}"
    with RPCClient(ep, 0.2) as c:
        with pytest.raises(RPCTimeoutError):
            c.call(Kind.SEND, "w", torch.ones(1))
        with _Serving(ep, record):
            assert c.call(Kind.PING, deadline_s=5).kind == Kind.REPLY_OK
    assert seen == [Kind.PING]


def test_client_started_before_the_server():
    ep = f"127.0.0.1:{_free_port()}"
    result = {}

    def early_client():
        with RPCClient(ep, 10) as c:
            result["value"] = c.call(Kind.SEND, "w", torch.ones(2)).value
    t = threading.Thread(target=early_client)
    t.start()
    time.sleep(0.3)
    with _Serving(ep):
        wait_for_server(ep, 5)
        t.join(10)
    assert result["value"].tolist() == [2.0, 2.0]


def test_stop_from_another_thread_is_prompt():
    serving = _Serving(poll_interval_s=0.05)
    with serving as server:
        t0 = time.monotonic()
        server.stop()
        serving.thread.join(2)
        assert not serving.thread.is_alive() and time.monotonic() - t0 < scaled(1.0)


def test_client_is_thread_safe():
    with _Serving() as server, RPCClient(server.endpoint, 5) as c:
        out = {}

        def worker(i):
            out[i] = [c.call(Kind.SEND, "w", torch.full((3,), float(i))).value[0].item()
                      for _ in range(20)]
        ts = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
        [t.start() for t in ts]
        [t.join(10) for t in ts]
    assert out == {i: [2.0 * i] * 20 for i in range(4)}


def test_mutated_messages_over_the_socket_then_valid_requests_still_served():
    ctx = zmq.Context()
    raw = ctx.socket(zmq.DEALER)
    raw.setsockopt(zmq.LINGER, 0)
    rng = random.Random(7)
    seeds = seed_messages()
    answered = 0
    with _Serving() as server:
        raw.connect(tcp_address(server.endpoint))
        for _ in range(300):
            frames = mutate(rng, rng.choice(seeds)) or [b""]
            raw.send_multipart(frames)
            if not raw.poll(2000):  # every message gets one answer: a reply or a rejection
                break
            wire.decode(raw.recv_multipart())
            answered += 1
        with RPCClient(server.endpoint, 5) as c:
            assert c.call(Kind.SEND, "w", torch.ones(2)).value.tolist() == [2.0, 2.0]
        assert answered == 300 and server.rejected > 150
    raw.close()
    ctx.term()


@pytest.mark.parametrize("dtype", [tdt for _, tdt, _ in wire.WIRE_DTYPES.values()], ids=str)
def test_every_dtype_through_a_live_server(dtype):
    """Received frames become tensors without a copy; they must still be exact and owned."""
    def store_and_return(req):
        req.reply(req.msg.value)
    t = (torch.arange(24) % 3).to(dtype).reshape(2, 3, 4)
    sr = SelectedRows(torch.tensor([4, 1]), t[:, :, 0], height=5)
    with _Serving(handler=store_and_return) as server, RPCClient(server.endpoint, 5) as c:
        back = c.call(Kind.SEND, "w", t).value
        assert back.dtype == dtype and torch.equal(back, t)
        back_sr = c.call(Kind.SEND, "w", sr).value
        assert back_sr.rows.tolist() == [4, 1] and torch.equal(back_sr.value, sr.value)


def test_a_client_sees_the_handshake_refused_by_a_server_restarted_with_another_secret():
    """A client keeps one poller for its socket's life: the monitor in it still reports the
    refused handshake of the connection ZeroMQ makes to a server restarted on the same
    endpoint (here with another secret), as an error naming it, not a timeout."""
    ep = f"127.0.0.1:{_free_port()}"
    with RPCClient(ep, scaled(5), secret="right") as c:
        with _Serving(ep, secret="right"):
            assert c.call(Kind.PING).kind == Kind.REPLY_OK
            assert c.call(Kind.PING).kind == Kind.REPLY_OK  # the same socket and poller
        with _Serving(ep, secret="other") as server, \
                pytest.raises(RPCError, match="refused this connection at its handshake") as e:
            c.call(Kind.PING)
        assert not isinstance(e.value, RPCTimeoutError)
        assert server.refused_handshakes >= 1


def test_a_tracked_reply_is_done_only_once_every_frame_sent_without_a_copy_is():
    """A reply's tracker covers its payload, not only its last frame: with a secret the last
    frame is the MAC, which pyzmq copies (its tracker is done at once) while ZeroMQ still
    holds the tensor before it; an update of the tensor then could tear what the trainer
    receives. Over inproc the payload stays in ZeroMQ's queue until the peer reads it."""
    from parafluid.distributed.rpc import _send_frames

    ctx = zmq.Context()
    a, b = ctx.socket(zmq.PAIR), ctx.socket(zmq.PAIR)
    try:
        a.bind("inproc://tracked-reply")
        b.connect("inproc://tracked-reply")
        value = torch.ones(1 << 16)  # 256 KiB: sent without a copy
        frames = wire.encode(Kind.REPLY_VALUE, "w", value, seq=3, secret=b"k",
                             channel=b"c" * wire.CHANNEL_BYTES, counter=1, split=False)
        assert len(frames) == 3  # header, payload, MAC
        tracker = _send_frames(a, frames, track=True)
        assert tracker is not None and not tracker.done
        got = b.recv_multipart(copy=False)
        assert wire.decode(got, secret=b"k", channel=b"c" * wire.CHANNEL_BYTES).value.sum() \
            == value.numel()
        del got
        tracker.wait(scaled(5))  # raises zmq.NotDone if the payload is never released
        assert tracker.done
        assert _send_frames(a, [b"small", b"frames"], track=True) is None  # copied: nothing
        b.recv_multipart()
    finally:
        a.close(linger=0)
        b.close(linger=0)
        ctx.term()


def test_an_unknown_request_kind_is_a_value_error_before_anything_is_sent():
    with RPCClient(f"127.0.0.1:{_free_port()}", 0.2) as c:
        with pytest.raises(ValueError, match="99"):
            c.call(99)
    with pytest.raises(ValueError, match="unknown message kind 99"):
        wire.encode(99)
