"""Request/reply RPC over ZeroMQ for the parameter servers (frames: :mod:`.wire`).

The server is a ROUTER socket bound to exactly the given ``host:port``, served by one thread
that polls with a short timeout (so :meth:`RPCServer.stop` from another thread, or SIGTERM,
ends it promptly). Each valid request reaches the handler as a :class:`Request`, which the
handler answers at once or keeps and answers later from the same thread (how a sync-mode
pserver holds a parameter read until the step's optimization has run). Invalid messages are
logged with the peer's address, answered with an error when possible, and dropped.

The client is a DEALER socket; every call has a deadline and raises :class:`RPCTimeoutError`
naming the endpoint, the request kind and the variable when no reply comes in time.

Example::

    def handler(req):
        req.reply(torch.ones(2) if req.msg.kind == Kind.GET else None)

    server = RPCServer("127.0.0.1:0", handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    client = RPCClient(server.endpoint, deadline_s=5)
    client.call(Kind.GET, "w").value          # tensor([1., 1.])
    client.close(); server.stop()
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import itertools
import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch
import zmq
from zmq.utils.monitor import recv_monitor_message

from .deadline import Deadline, rpc_deadline_seconds
from .endpoints import parse_endpoint
from .handshake import ONE_SIDED_SECRET, failure_reason, mechanism_of, peer_mechanism
from .link_shaper import frames_nbytes as _nbytes
from .link_shaper import link_shaper
from .wire import (
    CHANNEL_BYTES,
    DEFAULT_MAX_MESSAGE_BYTES,
    FRAME_BYTES,
    SECRET_ENV,
    Kind,
    Message,
    WireError,
    decode,
    encode,
    max_frames,
    rpc_secret,
)

__all__ = ["RPCServer", "RPCClient", "Request", "RPCError", "RPCTimeoutError",
           "wait_for_server", "tcp_address", "RateLimitedLog", "handshake_password"]

log = logging.getLogger("parafluid.distributed.rpc")

DEFAULT_MAX_CONNECTIONS = 256
DEFAULT_MAX_HANDSHAKES = 16  # connections admitted at once while still in their handshake
# the largest frame ZeroMQ reads (payloads go as frames of at most FRAME_BYTES), headers and
# handshake commands included: what a connection can make the server hold before it is
# authenticated
_FRAME_LIMIT = FRAME_BYTES + 65536
DEFAULT_IDLE_TIMEOUT_S = 60.0
_PLAIN_LABEL = b"parafluid zmq plain v1"
_MAX_ROLE_BYTES = 64
# the handshakes that fail before ZAP is asked (a NULL peer at a PLAIN server, garbage, a
# connection closed or timed out mid-handshake); ZAP refusals are counted where they happen
_HANDSHAKE_FAILED = zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
_HANDSHAKE_ENDED = _HANDSHAKE_FAILED | zmq.EVENT_HANDSHAKE_FAILED_AUTH | \
    zmq.EVENT_HANDSHAKE_SUCCEEDED


_monitor_numbers = itertools.count(1)
_KIND_NAMES = {k: k.name.lower() for k in Kind}  # for error texts, built per call
_POLLIN = int(zmq.POLLIN)
_SNDMORE = int(zmq.SNDMORE)
_NOBLOCK = int(zmq.NOBLOCK)
_SRCFD = int(zmq.SRCFD)
_COPIED = getattr(zmq, "_FINISHED_TRACKER", None)  # pyzmq's tracker of a copied frame


def _send_frames(sock: zmq.Socket, frames: list[Any], flags: int = 0,
                 track: bool = False) -> zmq.MessageTracker | None:
    """``sock.send_multipart(frames, flags, copy=False, track=track)``, without its checks
    and flag-enum arithmetic per frame (each message's own cost counts: see wire._dense).

    With ``track``, the tracker covers every frame sent without a copy (send_multipart's
    covers the last frame only: a reply's MAC, which is copied, would say "done" while
    ZeroMQ still reads the tensor before it).
    """
    last = len(frames) - 1
    more = flags | _SNDMORE
    trackers = []
    for i, frame in enumerate(frames):
        tracker = sock.send(frame, more if i < last else flags, copy=False, track=track)
        if track and tracker is not None and tracker is not _COPIED:
            trackers.append(tracker)
    if len(trackers) <= 1:
        return trackers[0] if trackers else None
    return zmq.MessageTracker(*trackers)


def _recv_frames(sock: zmq.Socket, flags: int = 0) -> list[zmq.Frame]:
    """``sock.recv_multipart(flags, copy=False)``, reading each frame's "more" flag from the
    frame (set by pyzmq) instead of a getsockopt call per frame."""
    frame = sock.recv(flags, copy=False)
    frames = [frame]
    while frame.more:
        frame = sock.recv(copy=False)
        frames.append(frame)
    return frames


def _monitor_socket(sock: zmq.Socket, events: int) -> zmq.Socket:
    """A PAIR socket that receives ``sock``'s monitor ``events`` (``disable_monitor`` ends it).

    NOTE: pyzmq's ``get_monitor_socket`` names the monitor's inproc endpoint after the
    socket's file descriptor; a client closed and a new one made at once (the descriptor
    reused) can find the old name still bound, until ZeroMQ's reaper has closed the old
    monitor (EADDRINUSE, seen under load): a name of our own is never reused.
    """
    address = f"inproc://parafluid.monitor.{os.getpid()}.{next(_monitor_numbers)}"
    sock.monitor(address, events)
    mon = sock.context.socket(zmq.PAIR)
    mon.connect(address)
    return mon


def handshake_password(secret: bytes) -> bytes:
    """The PLAIN password of a job with ``secret``: an HMAC of a fixed label (hex), so the
    secret itself never crosses the network (PLAIN sends the password in clear)."""
    return hmac.new(secret, _PLAIN_LABEL, hashlib.sha256).hexdigest().encode("ascii")


class RateLimitedLog:
    """At most ``burst`` lines per ``window_s`` seconds; the rest are counted, and the count is
    logged when the next window opens.

    NOTE: rejected messages are logged with the sender's address and ZeroMQ id, which a
    stranger chooses: one budget for all senders, so a flood costs a few lines, not a line a
    message.
    """

    def __init__(self, logger: logging.Logger, burst: int = 20, window_s: float = 10.0) -> None:
        self.logger, self.burst, self.window_s = logger, burst, window_s
        self._start = time.monotonic()
        self._lines = 0
        self.suppressed = 0

    def error(self, fmt: str, *args: Any) -> None:
        now = time.monotonic()
        if now - self._start >= self.window_s:
            self.flush()
            self._start, self._lines = now, 0
        if self._lines < self.burst:
            self._lines += 1
            self.logger.error(fmt, *args)
        else:
            self.suppressed += 1

    def flush(self) -> None:
        """Log how many lines were left out, if any."""
        if self.suppressed:
            self.logger.error("%d more refused messages or connections were not logged "
                              "(at most %d lines per %.0f s)", self.suppressed, self.burst,
                              self.window_s)
            self.suppressed = 0


class RPCError(RuntimeError):
    """A request the peer refused, or whose reply could not be used."""


class RPCTimeoutError(RPCError, TimeoutError):
    """No reply within the deadline."""


def tcp_address(endpoint: str) -> str:
    """``"127.0.0.1:6174"`` -> ``"tcp://127.0.0.1:6174"`` (port 0 binds a free port)."""
    if endpoint.startswith("tcp://"):
        endpoint = endpoint[len("tcp://"):]
    host, port = parse_endpoint(endpoint, "endpoint", allow_port_zero=True)
    return f"tcp://{host}:{'*' if port == 0 else port}"


def _endpoint_of(address: str) -> str:
    return address[len("tcp://"):] if address.startswith("tcp://") else address


class Request:
    """One validated request: ``msg``, the ``peer`` (address, for messages), and ``reply``.

    ``link``: the number of the TCP connection it came on (the server numbers connections
    as it accepts them; -1 when not known), the number ``on_disconnect`` reports when that
    connection closes.
    """

    __slots__ = ("msg", "_peer", "link", "_server", "_identity", "_channel", "replied", "step")

    def __init__(self, server: RPCServer, identity: bytes, msg: Message,
                 peer: str | zmq.Frame, link: int = -1, channel: bytes = b"") -> None:
        self.msg = msg
        self._peer = peer  # NOTE: a frame until asked: only errors and logs name the peer
        self.link = link
        self._server = server
        self._identity = identity
        self._channel = channel
        self.replied = False
        self.step = -1  # the server's step, sent with the reply (set by the handler)

    @property
    def peer(self) -> str:
        """The sender's address (and PLAIN user name), for messages."""
        if not isinstance(self._peer, str):
            self._peer = _peer(self._peer, self._identity)
        return self._peer

    @property
    def connection(self) -> bytes:
        """The ZeroMQ routing id of the connection the request came on."""
        return self._identity

    def reply(self, value: Any = None, track: bool = False) -> zmq.MessageTracker | None:
        """Answer with ``value`` (REPLY_VALUE) or, when None, REPLY_OK. Once per request.

        The tensor is sent without a copy: it must not change until ZeroMQ is done with it.
        With ``track=True`` the returned tracker says when that is (``tracker.done``; it
        covers every frame sent without a copy, e.g. both parts of a SelectedRows), or is
        None when every frame was copied (nothing to wait for).
        """
        kind = Kind.REPLY_OK if value is None else Kind.REPLY_VALUE
        return self._send(kind, value, track)

    def reply_error(self, text: str) -> None:
        """Answer with an error; the client raises RPCError with ``text``."""
        self._send(Kind.REPLY_ERROR, text, False)

    def _send(self, kind: Kind, value: Any, track: bool) -> zmq.MessageTracker | None:
        assert not self.replied, f"request {self.msg.kind.name} {self.msg.name!r} replied twice"
        self.replied = True
        return self._server._send(self._identity, kind, self.msg.name, value, self.msg.seq,
                                  track, step=self.step, channel=self._channel,
                                  counter=self.msg.counter)


class RPCServer:
    """A ROUTER socket bound to ``endpoint`` that hands each valid request to ``handler``.

    Args:
        endpoint: ``host:port`` to bind (exactly that address; port 0 picks a free port,
            read the result from ``self.endpoint``).
        handler: called with each :class:`Request` on the serving thread; it must reply now or
            keep the request and reply later from the same thread (``on_tick`` or a later
            handler call). An exception from it ends ``serve_forever`` with that exception.
        secret: shared secret; None reads ``$PARAFLUID_RPC_SECRET``.
        max_message_bytes: payload limit per message (larger ones are refused by ZeroMQ before
            they are read, and by the decoder).
        poll_interval_s: how often ``on_tick`` runs and ``stop()`` is noticed when idle.
        on_tick: called on the serving thread after every poll (deadline checks).
        on_disconnect: called on the serving thread with a connection's ``link`` number
            (see :class:`Request`) when that TCP connection closes (the peer closed its
            socket or its process ended; or it missed the heartbeat).
        max_connections: connections admitted at once; a further one is refused at its
            handshake, before it can send a byte of a message.
        max_handshakes: of those, connections admitted at once while still in their
            handshake (not yet authenticated); a further one is shut down as it is accepted.
        idle_timeout_s: a connection that neither completes its handshake nor answers a
            heartbeat (e.g. it stalls in the middle of a frame) within this time is dropped,
            with whatever it had sent.

    With a shared secret, connections use ZeroMQ's PLAIN mechanism: during the handshake,
    before the peer may send a single message frame, the ZAP handler checks its password
    (:func:`handshake_password`, compared in constant time) and its user name (the peer's
    role, e.g. ``trainer-3``); a peer without them is refused there (``refused_handshakes``
    counts it, the log names it at a bounded rate). Every message's MAC is checked too.
    Without a secret, the NULL mechanism: every peer that reaches the port may send.

    With a secret, every connection then starts a channel: its first message is a HELLO
    (MAC'd with the secret and carrying a nonce of the client's), answered with a fresh
    random channel id (MAC'd over that nonce), which the server keeps for the connection's
    ZeroMQ routing id. Every later message in both directions is MAC'd over that channel id
    and a counter that must grow: a message captured on one connection, from another job
    (another server's channels) or earlier on the same connection is refused (``rejected``
    counts it), and so is a reply replayed to a client. The PLAIN password is an HMAC of the
    secret, sent in clear: whoever captures it can complete a handshake, not send a message
    that reaches the handler.

    ZeroMQ reads a handshake command before it asks the ZAP handler, so connections are also
    limited as they are accepted: one past ``max_connections``, or past ``max_handshakes``
    connections still in their handshake, is shut down at once (``refused_connections``
    counts it). Every frame, handshake commands included, is at most FRAME_BYTES plus 64 KiB
    (payloads go as several frames), so what strangers can make the server hold before their
    credentials are checked is at most ``max_handshakes`` frames of that size (16 x 4 MiB by
    default), each for at most ``idle_timeout_s``.
    """

    def __init__(self, endpoint: str, handler: Callable[[Request], None],
                 secret: bytes | str | None = None, *,
                 max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
                 poll_interval_s: float = 0.05,
                 on_tick: Callable[[], None] | None = None,
                 on_disconnect: Callable[[int], None] | None = None,
                 max_connections: int = DEFAULT_MAX_CONNECTIONS,
                 idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S,
                 max_handshakes: int = DEFAULT_MAX_HANDSHAKES) -> None:
        self.handler = handler
        self._shaper = link_shaper()  # benchmarks only (None unless $PARAFLUID_BENCH_LINK)
        self.on_tick = on_tick
        self.on_disconnect = on_disconnect
        self.secret = rpc_secret(secret)
        self._password = handshake_password(self.secret) if self.secret else None
        self.max_message_bytes = int(max_message_bytes)
        self._max_frames = max_frames(self.max_message_bytes)
        self.poll_ms = max(1, int(poll_interval_s * 1000))
        self.stopped_by: str | None = None  # "SIGTERM" when a signal ended serve_forever
        self.rejected = 0  # messages refused by the decoder (for tests and logs)
        self.refused_connections = 0  # connections refused at their handshake (too many)
        self.refused_handshakes = 0  # handshakes refused or failed (credentials, protocol)
        self.max_connections = int(max_connections)
        self.max_handshakes = int(max_handshakes)
        self._handshaking = 0  # accepted connections whose handshake has not ended yet
        # routing id -> [channel id, last counter, whether a message used it] (see the class
        # docstring); bounded: the least recently used go first, unused ones before them
        self._channels: dict[bytes, list[Any]] = {}
        self._max_channels = 2 * self.max_connections + 64
        self._open: set[int] = set()  # accepted TCP connections not yet closed (by fd)
        self._links: dict[int, int] = {}  # fd -> link number of its open connection
        self._link_no = itertools.count(1)
        self.link_addresses: dict[int, str] = {}  # link -> "ip:port" of the peer (while open)
        self._log = RateLimitedLog(log)
        self._stop = threading.Event()
        # NOTE: a context of its own, so that close() can wait for the last replies to leave
        # before the process exits (a trainer's final COMPLETE must get its answer).
        self._ctx = zmq.Context()
        # NOTE: ZeroMQ asks the ZAP handler of the socket's context (RFC 27) about every
        # connection during its handshake, before it may send a message: here it admits at
        # most max_connections at once, counted from the socket's monitor events (accepted,
        # disconnected). A refused connection is closed by ZeroMQ. Under a burst of
        # connections, new ones (legitimate or not) are refused until the burst's refused or
        # idle connections are closed; connections already admitted are not affected.
        # With a secret it first checks the PLAIN credentials (see the class docstring).
        self._zap = self._ctx.socket(zmq.REP)
        self._zap.bind("inproc://zeromq.zap.01")
        self._sock = self._ctx.socket(zmq.ROUTER)
        self._sock.setsockopt(zmq.LINGER, 2000)
        self._sock.setsockopt(zmq.ROUTER_MANDATORY, 0)
        self._sock.setsockopt(zmq.ZAP_DOMAIN, b"parafluid")
        if self.secret is not None:
            self._sock.setsockopt(zmq.PLAIN_SERVER, 1)
        # ZeroMQ drops (and disconnects) a peer whose frame is larger than this, checking the
        # frame's declared size before it allocates; the decoder checks the sizes again.
        self._sock.setsockopt(zmq.MAXMSGSIZE, min(self.max_message_bytes, FRAME_BYTES) + 65536)
        # A connection must finish its handshake within the idle time, and answer the
        # ZMTP heartbeat PING within it: a peer that stops in the middle of a frame sends no
        # PONG (that would come after the frame), so it is dropped with its partial frame.
        # The trainers' ZeroMQ I/O threads answer PINGs even while Python is busy.
        idle_ms = max(100, int(idle_timeout_s * 1000))
        self._sock.setsockopt(zmq.HANDSHAKE_IVL, idle_ms)
        self._sock.setsockopt(zmq.HEARTBEAT_IVL, max(50, idle_ms // 3))
        self._sock.setsockopt(zmq.HEARTBEAT_TIMEOUT, idle_ms)
        self._monitor = _monitor_socket(
            self._sock, zmq.EVENT_ACCEPTED | zmq.EVENT_DISCONNECTED | _HANDSHAKE_ENDED)
        try:
            self._sock.bind(tcp_address(endpoint))
        except zmq.ZMQError as e:
            self._close()
            raise OSError(f"pserver cannot bind {endpoint}: {e}") from None
        self.endpoint = _endpoint_of(self._sock.getsockopt_string(zmq.LAST_ENDPOINT))

    # -- serving -----------------------------------------------------------------------------

    def serve_forever(self, handle_sigterm: bool = False,
                      on_ready: Callable[[], None] | None = None) -> None:
        """Serve until :meth:`stop` (or SIGTERM when ``handle_sigterm`` and on the main thread).

        ``on_ready`` is called once the SIGTERM handler is in place, before the first poll.
        The socket is closed on return, after the pending replies are flushed.
        """
        with self._sigterm(handle_sigterm):
            try:
                if on_ready is not None:
                    on_ready()
                poller = zmq.Poller()
                for sock in (self._sock, self._zap, self._monitor):
                    poller.register(sock, zmq.POLLIN)
                while not self._stop.is_set():
                    ready = dict(poller.poll(self.poll_ms))
                    if self._monitor in ready or self._zap in ready:
                        self._admit()
                    if self._sock in ready:
                        self._drain()
                    if self.on_tick is not None and not self._stop.is_set():
                        self.on_tick()
            finally:
                self._close()

    def stop(self) -> None:
        """Ask ``serve_forever`` to return (thread-safe; takes effect within one poll)."""
        self._stop.set()

    def close(self) -> None:
        """Close a server that is not serving (serve_forever closes on its own)."""
        self._close()

    @contextlib.contextmanager
    def _sigterm(self, enabled: bool) -> Iterator[None]:
        if not enabled or threading.current_thread() is not threading.main_thread():
            yield
            return

        def on_term(signum: int, frame: Any) -> None:
            self.stopped_by = "SIGTERM"
            self._stop.set()
        old = signal.signal(signal.SIGTERM, on_term)
        try:
            yield
        finally:
            signal.signal(signal.SIGTERM, old)

    @property
    def connections(self) -> int:
        """TCP connections open now (as the monitor events seen so far say)."""
        return len(self._open)

    def _admit(self) -> None:
        """Count connections (monitor events), then answer pending ZAP requests."""
        while True:
            try:
                event = recv_monitor_message(self._monitor, zmq.NOBLOCK)
            except zmq.Again:
                break
            fd = event["value"]
            if event["event"] == zmq.EVENT_ACCEPTED:
                self._open.add(fd)
                self._handshaking += 1
                link = self._links[fd] = next(self._link_no)
                address = self.link_addresses[link] = _peer_address(fd)
                self._limit_accepted(fd, address)
            elif event["event"] == zmq.EVENT_DISCONNECTED:
                self._open.discard(fd)
                link = self._links.pop(fd, -1)
                if link >= 0 and self.on_disconnect is not None:
                    self.on_disconnect(link)
                self.link_addresses.pop(link, None)
            elif event["event"] & _HANDSHAKE_ENDED:
                # NOTE: these events carry no descriptor, so connections in their handshake
                # are counted, not named; the count never exceeds the open connections (an
                # event lost under a flood must not shut out later connections for good)
                self._handshaking = max(0, self._handshaking - 1)
                if event["event"] & _HANDSHAKE_FAILED:
                    self.refused_handshakes += 1
                    self._log.error("rpc server %s: a connection failed its handshake (%s)",
                                    self.endpoint,
                                    failure_reason(event, self.secret, "server"))
            self._handshaking = min(self._handshaking, len(self._open))
        while True:
            try:
                request = self._zap.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            self._zap.send_multipart(self._zap_reply(request))

    def _limit_accepted(self, fd: int, address: str) -> None:
        """Shut down the connection just accepted on ``fd`` if it is one too many (see the
        class docstring), before ZeroMQ reads its handshake command."""
        if len(self._open) > self.max_connections:
            why = (f"{len(self._open) - 1} connections are open, at most "
                   f"{self.max_connections} are admitted")
        elif self._handshaking > self.max_handshakes:
            why = (f"{self._handshaking - 1} connections are in their handshake, at most "
                   f"{self.max_handshakes} are admitted")
        else:
            return
        if _shutdown(fd, address):
            self.refused_connections += 1
            self._log.error("rpc server %s: shut down a connection from %s as it was "
                            "accepted: %s", self.endpoint, address or "?", why)

    def _zap_reply(self, request: list[bytes]) -> list[bytes]:
        """The ZAP answer (RFC 27) to one handshake: credentials first, then capacity."""
        request_id = request[1] if len(request) > 1 else b""
        address = request[3].decode("ascii", "replace") if len(request) > 3 else "?"
        user = b""
        if self._password is not None:
            mechanism = request[5] if len(request) > 5 else b""
            creds = request[6:8] if mechanism == b"PLAIN" and len(request) == 8 else None
            if creds is None or not _valid_role(creds[0]) or not hmac.compare_digest(
                    creds[1], self._password):
                self.refused_handshakes += 1
                who = creds[0][:_MAX_ROLE_BYTES].decode("ascii", "replace") if creds else "?"
                self._log.error("rpc server %s: refused a connection from %s (user %r) at its "
                                "handshake: wrong or missing credentials (the job's secret, "
                                "$%s)", self.endpoint, address, who, SECRET_ENV)
                return [b"1.0", request_id, b"400", b"wrong credentials", b"", b""]
            user = creds[0]
        if self.connections > self.max_connections:  # this one included
            self.refused_connections += 1
            self._log.error("rpc server %s: refused a connection from %s: %d connections "
                            "are open, at most %d are admitted", self.endpoint, address,
                            self.connections - 1, self.max_connections)
            return [b"1.0", request_id, b"400", b"too many connections", b"", b""]
        return [b"1.0", request_id, b"200", b"OK", user, b""]

    def _drain(self) -> None:
        # NOTE: bounded so that a flood of requests cannot starve on_tick's deadline checks.
        for _ in range(256):
            # NOTE: asked first, rather than a recv that raises zmq.Again (costlier)
            if not self._sock.getsockopt(zmq.EVENTS) & _POLLIN:
                return
            try:
                parts = self._recv_parts()
            except zmq.Again:
                return
            if parts is None:
                continue
            identity, frames = parts
            self._dispatch(identity, frames)
            if self._stop.is_set():
                return

    def _recv_parts(self) -> tuple[bytes, list[zmq.Frame]] | None:
        first = self._sock.recv(zmq.NOBLOCK, copy=False)
        frames: list[zmq.Frame] = []
        extra = 0
        most = self._max_frames
        f = first
        while f.more:
            f = self._sock.recv(copy=False)
            if len(frames) < most:
                frames.append(f)
            else:  # keep reading to the end of the message, but hold on to nothing more
                extra += 1
        identity = first.bytes
        if extra:
            self._reject(identity, first, f"{len(frames) + extra} frames (at most {most})")
            return None
        return identity, frames

    def _dispatch(self, identity: bytes, frames: list[zmq.Frame]) -> None:
        channel = self._channels.get(identity) if self.secret is not None else None
        try:
            msg = decode(frames, secret=self.secret, channel=channel[0] if channel else b"",
                         max_message_bytes=self.max_message_bytes)
        except WireError as e:
            why = str(e)
            if channel is None and self.secret is not None and "MAC mismatch" in why:
                why += ("; this connection has no channel with this server (it did not "
                        "start with a HELLO, the server restarted, or the message was "
                        "captured elsewhere)")
            self._reject(identity, frames[0] if frames else None, why)
            return
        if msg.kind >= Kind.REPLY_OK:
            self._reject(identity, frames[0], f"a reply ({msg.kind.name}) sent to a server")
            return
        if self._shaper is not None:
            self._shaper.pace("in", _nbytes(frames))
        if msg.kind == Kind.HELLO:
            if self.secret is None:  # NOTE: channels need a secret; handlers never see HELLO
                self._reject(identity, frames[0], "a HELLO to a server without a secret")
            else:
                self._hello(identity, frames[0], msg)
            return
        if self.secret is not None:
            if channel is None:
                self._reject(identity, frames[0], f"a {msg.kind.name} outside a channel (the "
                                                  "connection did not start with a HELLO)")
                return
            if msg.counter <= channel[1]:
                self._reject(identity, frames[0], f"a replayed or reordered {msg.kind.name}: "
                                                  f"counter {msg.counter} after {channel[1]}")
                return
            channel[1], channel[2] = msg.counter, True
            self._channels[identity] = self._channels.pop(identity)  # most recently used
        try:  # NOTE: not contextlib.suppress: this runs once per message
            fd = frames[0].get(_SRCFD)
        except (zmq.ZMQError, ValueError, TypeError):
            fd = -1
        self.handler(Request(self, identity, msg, frames[0], self._links.get(fd, -1),
                             channel[0] if channel else b""))

    def _hello(self, identity: bytes, frame: zmq.Frame, msg: Message) -> None:
        """Start a channel for the connection ``identity`` (see the class docstring)."""
        nonce = msg.value.numpy().tobytes() if msg.value is not None else b""
        if len(nonce) != CHANNEL_BYTES:
            self._reject(identity, frame, f"a HELLO with a {len(nonce)}-byte nonce "
                                          f"(expected {CHANNEL_BYTES})")
            return
        if identity not in self._channels and len(self._channels) >= self._max_channels:
            # NOTE: a HELLO can be replayed (it cannot know the channel); a replayed one
            # gets a channel that no captured message fits, so it is never used: those go
            # first, then the least recently used
            unused = next((k for k, v in self._channels.items() if not v[2]), None)
            self._channels.pop(unused if unused is not None else next(iter(self._channels)))
        channel_id = os.urandom(CHANNEL_BYTES)
        self._channels.pop(identity, None)
        self._channels[identity] = [channel_id, 0, False]
        with contextlib.suppress(zmq.ZMQError, ValueError):
            self._send(identity, Kind.REPLY_VALUE, "", channel_id, msg.seq, channel=nonce,
                       counter=msg.counter)

    def _reject(self, identity: bytes, frame: zmq.Frame | None, why: str) -> None:
        self.rejected += 1
        self._log.error("rpc server %s: rejected a message from %s: %s", self.endpoint,
                        _peer(frame, identity), why)
        channel = self._channels.get(identity)
        with contextlib.suppress(zmq.ZMQError, ValueError):
            self._send(identity, Kind.REPLY_ERROR, "", f"rejected by {self.endpoint}: {why}", 0,
                       channel=channel[0] if channel else b"")

    def _send(self, identity: bytes, kind: Kind, name: str, value: Any, seq: int,
              track: bool = False, step: int = -1, channel: bytes = b"",
              counter: int = 0) -> zmq.MessageTracker | None:
        if isinstance(value, bytes):
            value = torch.frombuffer(bytearray(value), dtype=torch.uint8)
        # NOTE: replies go whole: a client's per-frame limit is the message limit (it accepts
        # no connections), and one frame becomes a tensor without a copy
        frames = encode(kind, name, value, seq=seq, step=step, secret=self.secret,
                        channel=channel, counter=counter, split=False)
        if self._shaper is not None:
            self._shaper.pace("out", _nbytes(frames))
        return _send_frames(self._sock, [identity, *frames], track=track)

    def _close(self) -> None:
        self._log.flush()
        if not self._sock.closed:
            with contextlib.suppress(zmq.ZMQError):
                self._sock.disable_monitor()
            self._sock.close()
        for sock in (self._monitor, self._zap):
            if not sock.closed:
                sock.close(linger=0)
        if not self._ctx.closed:
            self._ctx.term()  # waits up to LINGER for the last replies to be sent


def _peer(frame: Any, identity: bytes) -> str:
    addr = user = None
    if frame is not None:
        with contextlib.suppress(Exception):
            addr = frame.get("Peer-Address")
        with contextlib.suppress(Exception):
            user = frame.get("User-Id")
    return f"{addr or 'unknown address'}{f' as {user}' if user else ''} (zmq id {identity.hex()})"


def _peer_address(fd: int) -> str:
    """``ip:port`` of the peer of the accepted connection ``fd`` (a duplicate of it is
    asked, so ZeroMQ's own descriptor is left alone); "" when it is already gone."""
    try:
        dup = os.dup(fd)
    except OSError:
        return ""
    try:
        s = socket.socket(fileno=dup)
    except (OSError, ValueError):  # not a socket (any more): the duplicate is ours to close
        os.close(dup)
        return ""
    try:
        host, port = s.getpeername()[:2]
    except (OSError, ValueError, TypeError):
        return ""
    finally:
        s.close()
    return f"{host}:{port}"


def _shutdown(fd: int, address: str) -> bool:
    """Shut down the TCP connection on ZeroMQ's descriptor ``fd`` (through a duplicate, so
    ZeroMQ sees it end and closes ``fd`` itself) if its peer is still ``address`` (a
    descriptor closed and reused since is left alone)."""
    if not address:
        return False
    try:
        dup = os.dup(fd)
    except OSError:
        return False
    try:
        s = socket.socket(fileno=dup)
    except (OSError, ValueError):
        os.close(dup)
        return False
    try:
        host, port = s.getpeername()[:2]
        if f"{host}:{port}" != address:
            return False
        s.shutdown(socket.SHUT_RDWR)
        return True
    except (OSError, ValueError, TypeError):
        return False
    finally:
        s.close()


def _valid_role(user: bytes) -> bool:
    """A PLAIN user name as parafluid clients send it: a short printable ASCII role."""
    return 0 < len(user) <= _MAX_ROLE_BYTES and all(0x21 <= b < 0x7f for b in user)


_client_ctx: zmq.Context | None = None
_client_ctx_lock = threading.Lock()


def _shared_context() -> zmq.Context:
    global _client_ctx
    with _client_ctx_lock:
        if _client_ctx is None or _client_ctx.closed:
            _client_ctx = zmq.Context()
        return _client_ctx


class RPCClient:
    """A DEALER connection to one RPC server; calls are serialised by a lock (thread-safe).

    Args:
        endpoint: ``host:port`` of the server (it may start later, within the deadline).
        deadline_s: seconds each call waits for its reply; None reads ``FLAGS_rpc_deadline``.
        secret: shared secret; None reads ``$PARAFLUID_RPC_SECRET``.
        trainer_id: sent in every request header.
        role: the user name of the PLAIN handshake when there is a secret (default
            ``trainer-<id>``, or ``client`` without an id).
        peer: what the server is, in error messages.
    """

    def __init__(self, endpoint: str, deadline_s: float | None = None,
                 secret: bytes | str | None = None, *, trainer_id: int = -1,
                 role: str | None = None,
                 max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
                 peer: str = "pserver") -> None:
        self.endpoint = _endpoint_of(endpoint)
        self.peer = peer
        self.address = tcp_address(self.endpoint)
        if self.address.endswith(":*"):
            raise ValueError(f"RPCClient: endpoint {endpoint!r} has port 0")
        self.deadline_s = rpc_deadline_seconds() if deadline_s is None else float(deadline_s)
        self.secret = rpc_secret(secret)
        self.trainer_id = int(trainer_id)
        self.role = role or (f"trainer-{self.trainer_id}" if self.trainer_id >= 0 else "client")
        if not _valid_role(self.role.encode("ascii", "replace")):
            raise ValueError(f"RPCClient: role {self.role!r} must be 1 to {_MAX_ROLE_BYTES} "
                             "printable ASCII characters without spaces")
        self.max_message_bytes = int(max_message_bytes)
        self._shaper = link_shaper()  # benchmarks only (None unless $PARAFLUID_BENCH_LINK)
        self._lock = threading.Lock()
        self._seq = itertools.count(1)
        self._sock: zmq.Socket | None = None
        self._monitor: zmq.Socket | None = None  # the socket's handshake failures
        self._poller: zmq.Poller | None = None  # the socket and its monitor
        self._closed_handshakes = 0  # connections closed mid-handshake, on this socket
        self._probed = False  # whether the server's mechanism was asked, on this socket
        self._channel: bytes | None = None  # with a secret: this socket's channel id
        self._counter = itertools.count(1)  # the MAC counter of this socket's channel

    def _socket(self) -> zmq.Socket:
        if self._sock is None:
            s = _shared_context().socket(zmq.DEALER)
            s.setsockopt(zmq.LINGER, 0)
            # NOTE: a routing id of its own, kept across reconnections, so that the server
            # knows this connection again after a network blip (it binds a trainer id to it)
            s.setsockopt(zmq.ROUTING_ID, b"T" + os.urandom(15))
            s.setsockopt(zmq.MAXMSGSIZE, self.max_message_bytes + 65536)
            if self.secret is not None:  # the credentials of the server's PLAIN handshake
                s.setsockopt(zmq.PLAIN_USERNAME, self.role.encode("ascii"))
                s.setsockopt(zmq.PLAIN_PASSWORD, handshake_password(self.secret))
            # NOTE: a server that refuses the handshake sends no reply: the monitor's event
            # turns that into an error at once instead of a timeout that blames the network
            # (a connection closed mid-handshake too: see _handshake_refused)
            self._monitor = _monitor_socket(s, zmq.EVENT_HANDSHAKE_FAILED_AUTH |
                                            zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL |
                                            zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL)
            s.connect(self.address)
            # NOTE: one poller for the socket's life (building one per call costs more than
            # the poll); the monitor stays in it, so a refused handshake is seen whenever
            # ZeroMQ reconnects (after a server restart too)
            self._poller = zmq.Poller()
            self._poller.register(self._monitor, zmq.POLLIN)
            self._poller.register(s, zmq.POLLIN)
            self._sock = s
        return self._sock

    def _reset(self) -> None:
        # NOTE: after a timeout the unanswered request may still sit in the socket's queue; a
        # new socket makes sure it is never delivered late to a server that starts afterwards.
        if self._sock is not None:
            with contextlib.suppress(zmq.ZMQError):
                self._sock.disable_monitor()
            self._sock.close(linger=0)
            self._sock = None
        if self._monitor is not None:
            self._monitor.close(linger=0)
            self._monitor = None
        self._poller = None
        self._closed_handshakes, self._probed = 0, False
        self._channel, self._counter = None, itertools.count(1)

    def _handshake_refused(self, what: str, dl: Deadline) -> RPCError | None:
        """The error for a handshake the server refused or failed (seen on the monitor), or
        None while none is known to have (the socket reconnects by itself)."""
        assert self._monitor is not None
        while True:
            try:
                event = recv_monitor_message(self._monitor, zmq.NOBLOCK)
            except zmq.Again:
                return None
            if event["event"] == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
                why = (f"refused this connection at its handshake (ZAP status "
                       f"{event['value']}): it requires other credentials (the job's secret, "
                       f"${SECRET_ENV}), or has too many connections open")
            elif event["event"] == zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL:
                # NOTE: a server with a secret on one side only closes the connection as soon
                # as it reads this client's greeting, often before this side has read the
                # server's (then it is this event, not a mismatch, whatever the libzmq
                # version): ask the server's greeting for its mechanism, once a socket.
                # Otherwise the server went away mid-handshake or shut the connection at once
                # (too many open): ZeroMQ reconnects, and a timeout says how often it closed.
                self._closed_handshakes += 1
                if self._probed:
                    continue
                self._probed = True
                theirs = peer_mechanism(self.endpoint, min(2.0, max(dl.remaining(), 0.1)))
                ours = mechanism_of(self.secret)
                if theirs is None or theirs == ours:
                    continue
                who = ("this client has a secret and the server none" if self.secret else
                       "the server has a secret and this client none")
                why = (f"closed this connection during its handshake: the server announces "
                       f"the {theirs} mechanism and this client {ours}, so {who}; "
                       f"{ONE_SIDED_SECRET}")
            else:
                why = (f"and this client failed their handshake "
                       f"({failure_reason(event, self.secret, 'client')})")
            return RPCError(f"{what} to {self.endpoint} (trainer {self.trainer_id}): the "
                            f"server {why}")

    def call(self, kind: Kind, name: str = "", value: Any = None, *,
             deadline_s: float | None = None, seq: int | None = None,
             step: int = -1) -> Message:
        """Send one request and return the reply (REPLY_OK or REPLY_VALUE).

        ``seq``: the header's sequence number (default: this client's call count), for
        receivers that order messages by it (the model-parallel mailboxes). ``step``: the
        sender's step, sent in the header (-1: none).

        Raises RPCTimeoutError when no reply comes within the deadline, RPCError when the
        server answers with an error or the reply is invalid.
        """
        kind_name = _KIND_NAMES.get(kind) or Kind(kind).name.lower()  # ValueError if unknown
        what = f"{kind_name}{f' of {name!r}' if name else ''}"
        dl = Deadline(self.deadline_s if deadline_s is None else deadline_s)
        with self._lock:
            seq = next(self._seq) if seq is None else int(seq)
            channel, counter = b"", 0
            if self.secret is not None:
                if self._channel is None:
                    self._channel = self._hello(what, dl)
                channel, counter = self._channel, next(self._counter)
            frames = encode(kind, name, value, trainer_id=self.trainer_id, seq=seq, step=step,
                            secret=self.secret, channel=channel, counter=counter)
            if self._shaper is not None:
                self._shaper.pace("out", _nbytes(frames))
            return self._exchange(frames, what, seq, dl, channel, counter)

    def _hello(self, what: str, dl: Deadline) -> bytes:
        """Start this socket's channel (see :class:`RPCServer`); returns the channel id."""
        nonce = os.urandom(CHANNEL_BYTES)
        seq = next(self._seq)
        frames = encode(Kind.HELLO, "", nonce, trainer_id=self.trainer_id, seq=seq,
                        secret=self.secret)
        reply = self._exchange(frames, what, seq, dl, nonce, 0)
        got = reply.value.numpy().tobytes() if isinstance(reply.value, torch.Tensor) else b""
        if reply.kind != Kind.REPLY_VALUE or len(got) != CHANNEL_BYTES:
            self._reset()
            raise RPCError(f"{what} to {self.endpoint}: the server answered the channel's "
                           f"HELLO with {reply.kind.name} of {len(got)} bytes, not a channel")
        return got

    def _exchange(self, frames: list[Any], what: str, seq: int, dl: Deadline,
                  channel: bytes, counter: int) -> Message:
        """Send one request's frames and wait for its reply (see :meth:`call`)."""
        sock = self._socket()
        try:
            poller = self._poller
            # NOTE: a refused handshake ends the connection for good (ZeroMQ does not
            # reconnect after it); a blocking send would then wait forever for one, so
            # the request is queued without waiting, and when it cannot be the monitor
            # says why (the socket itself is not polled then: no reply can come)
            try:
                _send_frames(sock, frames, _NOBLOCK)
            except zmq.Again:
                poller = zmq.Poller()
                poller.register(self._monitor, zmq.POLLIN)
            while True:
                left_ms = int(dl.remaining() * 1000)
                ready = dict(poller.poll(left_ms)) if left_ms > 0 else {}
                if self._monitor in ready:
                    refused = self._handshake_refused(what, dl)
                    if refused is not None:
                        self._reset()
                        raise refused
                if not ready:
                    closed = self._closed_handshakes
                    self._reset()
                    raise RPCTimeoutError(
                        f"{what} to {self.peer} {self.endpoint} (trainer {self.trainer_id}): "
                        f"no reply within {dl.seconds:.1f} s; the pserver is down, has "
                        "not started, or is stuck waiting for another trainer "
                        "(deadline: FLAGS_rpc_deadline, in ms)" + (
                            f"; {closed} connection(s) to it were closed during their "
                            "handshake" if closed else ""))
                if sock not in ready:
                    continue
                reply = self._read_reply(sock, what, channel)
                if reply is None or (reply.seq != seq and not (
                        reply.kind == Kind.REPLY_ERROR and reply.seq == 0)):
                    continue  # a late reply to an earlier, timed-out request
                if self.secret is not None and reply.seq != 0 and reply.counter != counter:
                    continue  # a reply replayed from earlier in this channel
                if reply.kind == Kind.REPLY_ERROR:
                    raise RPCError(f"{self.peer} {self.endpoint} refused {what} "
                                   f"(trainer {self.trainer_id}): {reply.text()}")
                return reply
        except zmq.ZMQError as e:
            self._reset()
            raise RPCError(f"{what} to {self.peer} {self.endpoint}: {e}") from None

    def _read_reply(self, sock: zmq.Socket, what: str, channel: bytes) -> Message | None:
        parts = _recv_frames(sock)
        if self._shaper is not None:
            self._shaper.pace("in", _nbytes(parts))
        try:
            try:
                return decode(parts, secret=self.secret, channel=channel,
                              max_message_bytes=self.max_message_bytes)
            except WireError:
                if not channel:
                    raise
                # NOTE: a server that knows no channel for this connection (it restarted, or
                # evicted it) refuses with an error outside the channel: that error is read
                # (and only an error is), so the caller learns why
                reply = decode(parts, secret=self.secret,
                               max_message_bytes=self.max_message_bytes)
                if reply.kind != Kind.REPLY_ERROR or reply.seq != 0:
                    raise
                return reply
        except WireError as e:
            hint = f" (does the {self.peer} have ${SECRET_ENV}?)" \
                if self.secret and "MAC" in str(e) else ""
            raise RPCError(f"{what}: invalid reply from {self.peer} {self.endpoint}: {e}{hint}"
                           ) from None

    def close(self) -> None:
        with self._lock:
            self._reset()

    def __enter__(self) -> RPCClient:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def wait_for_server(endpoint: str, deadline: Deadline | float | None = None,
                    secret: bytes | str | None = None) -> None:
    """Block until the RPC server at ``endpoint`` answers a ping; RPCTimeoutError otherwise.

    ``deadline`` is a Deadline or seconds (None: ``FLAGS_rpc_deadline``). Used by
    ``get_trainer_program(wait_port=True)``.
    """
    if isinstance(deadline, Deadline):
        seconds = max(deadline.remaining(), 1e-3)
    else:
        seconds = rpc_deadline_seconds() if deadline is None else float(deadline)
    with RPCClient(endpoint, seconds, secret) as client:
        try:
            client.call(Kind.PING)
        except RPCTimeoutError:
            raise RPCTimeoutError(f"pserver {client.endpoint} did not answer within "
                                  f"{seconds:.1f} s (waiting for its port; is it started?)"
                                  ) from None
