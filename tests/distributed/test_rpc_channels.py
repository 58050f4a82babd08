"""Messages bound to their job and connection, large tensors in pieces, the pre-auth bound.

On 127.0.0.1 with pservers and trainers on threads: a message captured from one job (or one
connection) and replayed into another is refused and the job goes on; a COMPLETE for a
trainer that never spoke is refused; a tensor larger than a frame goes as several, so the
per-frame limit (what a stranger can make the server hold before its credentials are
checked) stays a few MiB whatever the message limit; and connections in their handshake are
bounded in number.
"""

from __future__ import annotations

import threading
import time

import pytest
import torch
import zmq
from test_pserver_strangers import (
    Server,
    _closed_within,
    _expected,
    _in_threads,
    _PeakRSS,
    _plain_hello,
    _train,
    _zmtp_dealer,
)

from parafluid.distributed import rpc, wire
from parafluid.distributed.ps_client import PServerClient
from parafluid.distributed.rpc import RPCClient, RPCServer, handshake_password, tcp_address
from parafluid.distributed.wire import FRAME_BYTES, Kind

SECRET = "one secret for every job of this cluster"


@pytest.fixture(autouse=True)
def _no_env_secret(monkeypatch):
    monkeypatch.delenv(wire.SECRET_ENV, raising=False)


class _Tap:
    """Records the frames of every message the RPC clients of this process encode."""

    def __init__(self, monkeypatch):
        self.sent: list[tuple[Kind, int, list[bytes]]] = []
        real = rpc.encode

        def encode(kind, *args, **kw):
            frames = real(kind, *args, **kw)
            self.sent.append((Kind(kind), kw.get("trainer_id", -1),
                              [bytes(memoryview(f)) for f in frames]))
            return frames
        monkeypatch.setattr(rpc, "encode", encode)

    def frames(self, kind, trainer_id):
        return [f for k, t, f in self.sent if k == kind and t == trainer_id]


def _both_train(server, ep, steps, secret=None):
    """Trainers 0 and 1 train ``steps`` steps on ``server`` (at ``ep``) and complete; the
    server ends without an error, with the weights one process gets."""
    clients = [PServerClient(ep, t, 10, secret=secret) for t in (0, 1)]
    errors = _in_threads(*(lambda t=t: _train(ep, t, steps, client=clients[t]) for t in (0, 1)))
    assert not errors, errors
    for c in clients:
        c.complete()
    server.join()
    assert server.error is None and torch.allclose(server.w, _expected(steps))


def _replayer(ep):
    """A ZeroMQ peer that read the PLAIN password off the network (it is sent in clear)."""
    ctx = zmq.Context()
    s = ctx.socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, 0)
    s.plain_username, s.plain_password = b"trainer-0", handshake_password(SECRET.encode())
    s.connect(tcp_address(ep))
    return ctx, s


def _replay(s, frames):
    """Send captured frames; the decoded answer (or None when there is none within 5 s)."""
    s.send_multipart(frames)
    if not s.poll(5000):
        return None
    return wire.decode(s.recv_multipart(), max_message_bytes=1 << 20)


@pytest.mark.timeout(120)
def test_a_complete_replayed_from_another_job_sharing_the_secret_is_refused(monkeypatch):
    """Two jobs share a secret (as the jobs of one cluster do). Job A's trainers train and
    complete while a tap records their messages. Replayed into job B's pserver before B's
    trainers arrive (the HELLOs too, on a connection with the right PLAIN password), job A's
    COMPLETEs are refused before they reach the pserver (they belong to A's channels), and
    job B trains to the right weights."""
    tap = _Tap(monkeypatch)
    a = Server(secret=SECRET)
    _both_train(a, a.endpoint, 1, SECRET)
    b = Server(secret=SECRET)
    ctx, s = _replayer(b.endpoint)
    try:
        for t in (0, 1):
            for hello in tap.frames(Kind.HELLO, t):
                _replay(s, hello)  # a HELLO can be replayed: it gets a channel of its own
            for complete in tap.frames(Kind.COMPLETE, t):
                reply = _replay(s, complete)
                assert reply is not None and reply.kind == Kind.REPLY_ERROR, reply
                assert "channel" in reply.text(), reply.text()
    finally:
        ctx.destroy(linger=0)
    assert b.ps.live == {0, 1} and b.ps._server.rejected >= 2 and b.ps.refused == 0
    _both_train(b, b.endpoint, 3, SECRET)


def test_a_message_replayed_on_its_own_connection_is_refused():
    """Inside one channel the counter must grow: the same frames sent twice on the same
    connection are handled once; the reply to the first is not taken for the second's."""
    seen = []

    def handler(req):
        seen.append(req.msg.kind)
        req.reply()
    server = RPCServer("127.0.0.1:0", handler, secret=SECRET)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    ctx, s = _replayer(server.endpoint)
    try:
        nonce = b"n" * wire.CHANNEL_BYTES
        s.send_multipart(wire.encode(Kind.HELLO, value=nonce, seq=1, secret=SECRET.encode()))
        assert s.poll(5000)
        hello = wire.decode(s.recv_multipart(), secret=SECRET.encode(), channel=nonce)
        channel = hello.value.numpy().tobytes()
        frames = wire.encode(Kind.PING, seq=2, secret=SECRET.encode(), channel=channel,
                             counter=1)
        for _ in range(2):
            s.send_multipart(frames)
            assert s.poll(5000)
            reply = wire.decode(s.recv_multipart(), secret=SECRET.encode(), channel=channel)
        assert reply.kind == Kind.REPLY_ERROR and "replayed" in reply.text(), reply
        assert seen == [Kind.PING] and server.rejected == 1
        # the next counter is served again
        s.send_multipart(wire.encode(Kind.PING, seq=3, secret=SECRET.encode(),
                                     channel=channel, counter=2))
        assert s.poll(5000)
        assert wire.decode(s.recv_multipart(), secret=SECRET.encode(),
                           channel=channel).kind == Kind.REPLY_OK
        assert seen == [Kind.PING, Kind.PING]
    finally:
        ctx.destroy(linger=0)
        server.stop()
        thread.join(10)


@pytest.mark.timeout(120)
def test_a_complete_for_a_trainer_that_never_connected_is_refused():
    """Without a secret anyone may speak first for a trainer id; but a COMPLETE for a trainer
    that never spoke to this pserver (trainers pull their parameters from every pserver they
    use first) is refused: strangers cannot end the job before its trainers arrive."""
    server = Server()
    ep = server.endpoint
    with RPCClient(ep, 5, trainer_id=0) as stranger:
        for t in (0, 1):
            stranger.trainer_id = t
            with pytest.raises(rpc.RPCError, match=f"trainer {t} never connected"):
                stranger.call(Kind.COMPLETE)
        with pytest.raises(rpc.RPCError, match="HELLO to a server without a secret"):
            stranger.call(Kind.HELLO, value=b"n" * wire.CHANNEL_BYTES)
    assert server.ps.live == {0, 1} and not server.ps.completed
    _both_train(server, ep, 2)


def test_a_large_tensor_goes_as_several_frames():
    big = torch.arange(5 * FRAME_BYTES // 8 + 3, dtype=torch.float64)  # 5 frames and a bit
    frames = wire.encode(Kind.SEND, "w", big, secret=b"s", channel=b"x" * 16, counter=4)
    assert len(frames) == 1 + 6 + 1
    assert all(memoryview(f).nbytes <= FRAME_BYTES for f in frames)
    msg = wire.decode(frames, secret=b"s", channel=b"x" * 16)
    assert torch.equal(msg.value, big) and msg.counter == 4
    with pytest.raises(wire.WireError, match="frame"):  # a piece missing
        wire.decode(frames[:3] + frames[4:], secret=b"s", channel=b"x" * 16)
    whole = wire.encode(Kind.REPLY_VALUE, "", big, split=False)  # how replies go
    assert len(whole) == 2 and torch.equal(wire.decode(whole).value, big)

    def echo(req):
        req.reply(req.msg.value)
    server = RPCServer("127.0.0.1:0", echo, max_message_bytes=64 << 20)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        with RPCClient(server.endpoint, 30) as c:
            assert torch.equal(c.call(Kind.SEND, "w", big).value, big)
        # one frame larger than a piece is refused when its size is read, although the
        # message limit (64 MiB) would take the whole tensor
        s = _zmtp_dealer(server.endpoint)
        try:
            s.sendall(b"\x02" + (2 * FRAME_BYTES).to_bytes(8, "big") + b"x" * 4096)
            assert _closed_within(s, 10)
        finally:
            s.close()
    finally:
        server.stop()
        thread.join(10)


@pytest.mark.timeout(120)
def test_a_pre_auth_flood_is_bounded_by_the_frame_limit_and_the_handshake_count():
    """With a secret, a 256 MiB message limit and the default 256 connections: strangers
    whose handshake command is larger than a frame are dropped as its size is read, and of
    strangers that stall inside a command of a frame's size, at most ``max_handshakes`` are
    held; the memory grows by at most that many frames; the trainers train on."""
    server = Server(secret=SECRET, max_message_bytes=256 << 20, max_handshakes=4,
                    first_contact_s=600)
    ep, rpc_server = server.endpoint, server.ps._server
    assert rpc_server.max_connections == 256
    held = []
    try:
        with _PeakRSS() as mem:
            big = [_plain_hello(ep, 15) for _ in range(8)]
            held += big
            held += [_plain_hello(ep, 3) for _ in range(12)]
        assert mem.grown < 8 * 4 + 40, f"memory grew {mem.grown:.0f} MiB"
        assert all(s is None or _closed_within(s, 10) for s in big)
        unaccepted = sum(s is None for s in held[8:])
        end = time.monotonic() + 30
        while rpc_server.refused_connections + unaccepted < 8 and time.monotonic() < end:
            time.sleep(0.02)
        assert rpc_server.refused_connections + unaccepted >= 8
        assert sum(s is not None and not _closed_within(s, 0.2) for s in held[8:]) <= 4
    finally:
        for s in held:
            if s is not None:
                s.close()
    end = time.monotonic() + 30
    while rpc_server.connections > 0 and time.monotonic() < end:
        time.sleep(0.02)
    _both_train(server, ep, 2, SECRET)
