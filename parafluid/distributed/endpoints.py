"""Endpoints: the one reader of ``"ip:port"`` and of ``"ip:port,ip:port"`` lists.

The transpiler, the launcher, the rendezvous, the RPC runtime and ``fluid.distributed.env()``
all read endpoints here, so that one spelling is accepted (or refused, with the same words)
everywhere.

Example::

    parse_endpoint("127.0.0.1:6170")                  # ('127.0.0.1', 6170)
    parse_endpoints("127.0.0.1:6170, 127.0.0.1:6171")  # ['127.0.0.1:6170', '127.0.0.1:6171']
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["parse_endpoint", "parse_endpoints"]


def parse_endpoint(text: str, what: str = "endpoint", allow_port_zero: bool = False
                   ) -> tuple[str, int]:
    """``"ip:port"`` -> ``(ip, port)``; ValueError naming ``what`` when malformed.

    Args:
        text: the endpoint.
        what: what it is, for the error (``"PADDLE_CURRENT_ENDPOINT"``, ``"--servers"``).
        allow_port_zero: accept port 0 (a server binding any free port).
    """
    if not isinstance(text, str):
        raise TypeError(f"{what} must be a string 'ip:port', got {type(text).__name__}: "
                        f"{text!r}")
    host, sep, port = text.strip().rpartition(":")
    if not sep or not host:
        raise ValueError(f"{what} must look like 'ip:port', got {text!r}")
    if not port.isdigit():
        raise ValueError(f"{what}: the port of 'ip:port' must be an integer, got {text!r}")
    p = int(port)
    if not (0 if allow_port_zero else 1) <= p < 65536:
        low = 0 if allow_port_zero else 1
        raise ValueError(f"{what}: port must be in {low}..65535 (in 'ip:port'), got {text!r}")
    return host, p


def parse_endpoints(endpoints: str | Sequence[str], what: str = "trainers") -> list[str]:
    """``"a:1,b:2"`` or ``["a:1", "b:2"]`` -> a validated list without duplicates.

    ValueError naming ``what`` when the list is empty, an entry is not ``"ip:port"`` or an
    endpoint is listed twice.
    """
    items = endpoints.split(",") if isinstance(endpoints, str) else list(endpoints)
    items = [e.strip() if isinstance(e, str) else e for e in items]
    items = [e for e in items if e != ""]
    if not items:
        raise ValueError(f"{what}: expected at least one endpoint 'ip:port', got {endpoints!r}")
    for e in items:
        parse_endpoint(e, what)
    dup = sorted({e for e in items if items.count(e) > 1})
    if dup:
        raise ValueError(f"{what}: endpoint(s) {', '.join(dup)} listed twice in {items}")
    return items
