"""What a failed ZeroMQ handshake means, in words that say what to do.

A job's secret decides the security mechanism of every RPC connection: PLAIN with a secret,
NULL without (see :mod:`.rpc`). A secret on one side only is a peer announcing NULL to a
server announcing PLAIN, or the reverse. ZeroMQ reports it as a mechanism mismatch on a side
that reads the other's greeting before the connection closes; but both sides close as soon
as they see the mismatch, so which side reads the other's greeting first is a race, and the
side that loses it sees only "connection closed during the handshake" (libzmq 4.3.5 loses it
about a third of the time, on either side). So:

- a mismatch event (``EVENT_HANDSHAKE_FAILED_PROTOCOL`` with
  ``ZMTP_MECHANISM_MISMATCH``) names the one-sided secret at once;
- a client that sees its connection closed during the handshake
  (``EVENT_HANDSHAKE_FAILED_NO_DETAIL``) asks the server which mechanism it announces
  (:func:`peer_mechanism`: the first 64 bytes of the server's ZMTP 3 greeting, which
  every ZeroMQ socket sends before it checks anything) and names the one-sided secret
  when it differs from its own; it does not depend on how a libzmq version closes;
- a server that sees a connection closed during the handshake names the one-sided secret
  as one of the possible causes (it cannot ask a client: clients do not listen).

Example::

    peer_mechanism("127.0.0.1:6174", 1.0)     # "PLAIN" at a pserver with a secret
"""

from __future__ import annotations

import contextlib
import socket
import time
from typing import Any

import zmq

from .endpoints import parse_endpoint
from .wire import SECRET_ENV

__all__ = ["ONE_SIDED_SECRET", "peer_mechanism", "mechanism_of", "failure_reason"]

ONE_SIDED_SECRET = (f"a secret (${SECRET_ENV}) must be given to every process of the job, "
                    "or to none")
# ZMTP 3 greeting (RFC 23): signature %xFF 8*%x00 %x7F, major version 3; a ZeroMQ socket
# answers these 11 bytes with its own greeting: signature, version (2), mechanism (20, NUL
# padded), as-server (1), filler (31).
_GREETING_START = b"\xff" + bytes(8) + b"\x7f" + b"\x03"
_GREETING_SIZE = 64
_MISMATCH = getattr(zmq, "PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH", 0x11000002)


def mechanism_of(secret: bytes | None) -> str:
    """The ZeroMQ security mechanism of a process with ``secret``: PLAIN, or NULL without."""
    return "NULL" if secret is None else "PLAIN"


def peer_mechanism(endpoint: str, timeout_s: float) -> str | None:
    """The security mechanism (``"NULL"``, ``"PLAIN"``, ...) that the ZeroMQ socket bound at
    ``endpoint`` (``host:port``) announces in its greeting; None when nothing there sends a
    ZMTP 3 greeting within ``timeout_s`` (not listening, closed the connection, not ZeroMQ).

    The connection is closed after the greeting: the server sees a handshake that did not
    complete (and may log it).
    """
    host, port = parse_endpoint(endpoint, "endpoint")
    end = time.monotonic() + max(timeout_s, 1e-3)
    try:
        with socket.create_connection((host, port), timeout=max(timeout_s, 1e-3)) as s:
            s.sendall(_GREETING_START)
            got = b""
            while len(got) < _GREETING_SIZE:
                left = end - time.monotonic()
                if left <= 0:
                    return None
                s.settimeout(left)
                chunk = s.recv(_GREETING_SIZE - len(got))
                if not chunk:
                    return None
                got += chunk
    except (OSError, ValueError):
        return None
    if got[0] != 0xFF or got[9] & 1 != 1 or got[10] < 3:
        return None
    name = got[12:32].rstrip(b"\0")
    with contextlib.suppress(UnicodeDecodeError):
        if name and name.isalnum():
            return name.decode("ascii")
    return None


def failure_reason(event: dict[str, Any], own_secret: bytes | None, side: str) -> str:
    """Words for a handshake failure event of a monitor on a socket of ``side`` ("server" or
    "client") that has ``own_secret``."""
    kind = event["event"]
    has = "has a secret" if own_secret is not None else "has no secret"
    if kind == zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL:
        if side == "server":
            which = ("it has no secret while this server has one" if own_secret is not None
                     else "it has a secret while this server has none")
            return (f"closed or timed out before it completed: the peer went away, or {which}; "
                    f"if so, {ONE_SIDED_SECRET}")
        return "closed or timed out before it completed"
    if kind == zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL and event["value"] == _MISMATCH:
        return (f"the peer uses another security mechanism: this {side} {has} and the peer "
                f"{'has none' if own_secret is not None else 'has one'}; {ONE_SIDED_SECRET}")
    return f"protocol error {event['value']:#x}"
