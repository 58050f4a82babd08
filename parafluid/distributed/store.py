"""The collective mode's rendezvous store: a bounded key-value server behind the RPC handshake.

Trainer 0 hosts a :class:`StoreServer` at its own endpoint; every trainer (and each heartbeat
thread) talks to it through an ``RPCStore`` (``store_client.py``), a ``torch.distributed.Store``
written in Python, so that gloo and NCCL build their process groups through it like through torch's
TCPStore. Requests travel as :data:`~.wire.Kind` ``STORE`` messages of the pservers' RPC
(:mod:`.rpc`): with the job's secret (``PARAFLUID_RPC_SECRET``) a connection must pass the
PLAIN handshake and every message carries the channel's MAC, so a process without the secret
cannot write, read or wait for anything; without one, every process that reaches the port
is trusted, but what it can make the server hold is bounded all the same.

What the server holds is bounded: a value of at most ``max_value_bytes`` (4 MiB), at most
``max_keys`` keys (65,536) and ``max_total_bytes`` (64 MiB: keys, values and 64 bytes a key)
in all. A request larger than a value plus 64 KiB is refused by the RPC decoder from its
header (ZeroMQ holds its frames, of at most 4 MiB each, until then; nothing copies them); a
write past a bound is refused with an error naming the bound. Every refusal is logged at a
bounded rate, nothing refused is stored, and the server goes on.
Nothing is pickled: a request is the operation's name and length-prefixed fields
(:func:`pack_fields`), checked before anything is sliced out of them.

Waits (``get`` of a missing key, ``wait``, ``multi_get``) are held by the server and answered
when the keys appear, in slices of at most a second, so that a client can be closed, and
notices a dead host, between two slices. Every call has a deadline (``deadline_s``: default
``FLAGS_rpc_deadline``, else 300 s); errors name the store's endpoint and what was awaited.

``set_list`` writes one key and returns every entry of a few "directories" (the keys up to
their last ``/``) in the same request: a trainer's heartbeat (``health.py``) costs one request
a beat, whatever the number of trainers.

Example::

    server = StoreServer("127.0.0.1:0")
    store = RPCStore(server.endpoint, deadline_s=5)  # from .store_client
    store.set("a/1", "x"); store.get("a/1")          # b'x'
    store.set_list("a/2", "y", ["a"])                # {'a/1': b'x', 'a/2': b'y'}
    store.close(); server.stop()
"""

from __future__ import annotations

import collections
import heapq
import itertools
import logging
import struct
import threading
import time
from collections.abc import Sequence
from typing import Any

import torch

from .rpc import DEFAULT_MAX_CONNECTIONS, RateLimitedLog, Request, RPCServer

__all__ = ["StoreServer", "StoreError", "StoreTimeoutError", "pack_fields", "unpack_fields",
           "DEFAULT_MAX_VALUE_BYTES", "DEFAULT_MAX_TOTAL_BYTES", "DEFAULT_MAX_KEYS",
           "DEFAULT_STORE_DEADLINE_S", "WAIT_SLICE_S"]

log = logging.getLogger("parafluid.distributed.store")

DEFAULT_MAX_VALUE_BYTES = 4 << 20
DEFAULT_MAX_TOTAL_BYTES = 64 << 20
DEFAULT_MAX_KEYS = 65536
DEFAULT_MAX_WAITERS = 4096  # requests held at once, waiting for keys
DEFAULT_STORE_DEADLINE_S = 300.0
MAX_KEY_BYTES = 4096
MAX_FIELDS = 4096
_KEY_COST = 64  # what a key costs the server besides its bytes (the dict's entry)
_OVERHEAD = 64 * 1024  # a request's bytes besides its value (fields, key)
WAIT_SLICE_S = 1.0  # the longest a server holds one waiting request
_MAX_WAIT_MS = 60_000
_U32 = struct.Struct("<I")
I64 = struct.Struct("<q")
YES, NO = b"\x01", b"\x00"


class StoreError(RuntimeError):
    """A store request that was refused, or whose reply could not be used."""


class StoreTimeoutError(StoreError, TimeoutError):
    """No reply, or the awaited keys were not set, within the deadline."""


class _Refused(Exception):
    """A request the server refuses (the text says why)."""


# ---------------------------------------------------------------------- fields on the wire

def pack_fields(fields: Sequence[bytes]) -> bytes:
    """``[count][len]*count[bytes]*count``, little-endian u32 lengths."""
    return b"".join([_U32.pack(len(fields)), *(_U32.pack(len(f)) for f in fields), *fields])


def unpack_fields(buf: Any, max_fields: int = MAX_FIELDS) -> list[bytes]:
    """The fields of :func:`pack_fields`; ValueError for anything else (checked before a
    single field is copied out)."""
    view = memoryview(buf).cast("B")
    if view.nbytes < _U32.size:
        raise ValueError(f"{view.nbytes} bytes hold no field count")
    count = _U32.unpack_from(view)[0]
    if count > max_fields:
        raise ValueError(f"{count} fields (at most {max_fields})")
    head = _U32.size * (1 + count)
    if view.nbytes < head:
        raise ValueError(f"{view.nbytes} bytes cannot hold {count} field lengths")
    sizes = [_U32.unpack_from(view, _U32.size * (1 + i))[0] for i in range(count)]
    if head + sum(sizes) != view.nbytes:
        raise ValueError(f"the field lengths add up to {sum(sizes)} bytes, the request "
                         f"holds {view.nbytes - head}")
    out, off = [], head
    for n in sizes:
        out.append(bytes(view[off:off + n]))
        off += n
    return out


def _key(raw: bytes) -> str:
    if not 0 < len(raw) <= MAX_KEY_BYTES:
        raise _Refused(f"a key of {len(raw)} bytes (1 to {MAX_KEY_BYTES})")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise _Refused("a key that is not UTF-8") from None


def _int(raw: bytes, what: str) -> int:
    if len(raw) != I64.size:
        raise _Refused(f"{what} of {len(raw)} bytes (expected {I64.size})")
    return I64.unpack(raw)[0]


def _dir(key: str) -> str:
    return key.rsplit("/", 1)[0] if "/" in key else ""


# ---------------------------------------------------------------------- the server

class StoreServer:
    """The store, served on a daemon thread at ``endpoint`` (exactly that address) until
    :meth:`stop`.

    Args:
        endpoint: ``host:port`` to bind (port 0: a free one; read ``self.endpoint``).
        secret: the job's secret; None reads ``$PARAFLUID_RPC_SECRET`` (none: no handshake).
        max_value_bytes, max_total_bytes, max_keys: what it will hold (see the module).
        max_waiters: requests it holds at once while they wait for keys.
        max_connections: connections admitted at once (each trainer opens two: its own and
            its heartbeat's).

    ``requests`` counts the requests served, by operation; ``refused`` those refused here
    (the RPC layer counts the ones it refused before they reached the store:
    ``rpc.rejected``, ``rpc.refused_handshakes``).
    """

    def __init__(self, endpoint: str, secret: bytes | str | None = None, *,
                 max_value_bytes: int = DEFAULT_MAX_VALUE_BYTES,
                 max_total_bytes: int = DEFAULT_MAX_TOTAL_BYTES,
                 max_keys: int = DEFAULT_MAX_KEYS,
                 max_waiters: int = DEFAULT_MAX_WAITERS,
                 max_connections: int = DEFAULT_MAX_CONNECTIONS,
                 poll_interval_s: float = 0.02) -> None:
        self.max_value_bytes = int(max_value_bytes)
        self.max_total_bytes = int(max_total_bytes)
        self.max_keys = int(max_keys)
        self.max_waiters = int(max_waiters)
        self.requests: collections.Counter[str] = collections.Counter()
        self.refused = 0
        self.bytes_held = 0
        self._data: dict[str, bytes] = {}
        self._dirs: dict[str, set[str]] = {}
        self._waiters: dict[int, tuple[Request, tuple[str, ...], float, str]] = {}
        self._waiting_on: dict[str, set[int]] = {}
        self._deadlines: list[tuple[float, int]] = []  # a heap of the waiters' deadlines
        self._waiter_ids = itertools.count(1)
        self._log = RateLimitedLog(log)
        self.rpc = RPCServer(endpoint, self._handle, secret,
                             max_message_bytes=self.max_value_bytes + _OVERHEAD,
                             poll_interval_s=poll_interval_s, on_tick=self._expire,
                             max_connections=max_connections)
        self.endpoint = self.rpc.endpoint
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._serve, daemon=True,
                                        name=f"parafluid-store-{self.endpoint}")
        self._thread.start()

    def _serve(self) -> None:
        try:
            self.rpc.serve_forever()
        except BaseException as e:  # noqa: BLE001 - kept for stop(); the clients time out
            self.error = e
            log.exception("rendezvous store %s stopped", self.endpoint)

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop serving (thread-safe); the last replies are flushed."""
        self.rpc.stop()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout=timeout_s)

    @property
    def num_keys(self) -> int:
        return len(self._data)

    # -- requests (the serving thread only) ------------------------------------------------

    def _handle(self, req: Request) -> None:
        op = req.msg.name
        self.requests[op] += 1
        try:
            fn = _OPS.get(op)
            if fn is None:
                raise _Refused(f"unknown operation {op[:40]!r}")
            try:
                fields = unpack_fields(req.msg.value.numpy())
            except ValueError as e:
                raise _Refused(f"malformed fields: {e}") from None
            fn(self, req, fields)
        except _Refused as e:
            self.refused += 1
            self._log.error("rendezvous store %s: refused %s from %s (trainer %d): %s",
                            self.endpoint, op[:40], req.peer, req.msg.trainer_id, e)
            if not req.replied:
                req.reply_error(str(e))

    def _cost(self, key: str, value: bytes | None) -> int:
        return 0 if value is None else len(key.encode("utf-8")) + len(value) + _KEY_COST

    def _check_put(self, items: Sequence[tuple[str, bytes]]) -> None:
        """Refuse writes that would exceed a bound (all or nothing)."""
        total, keys = self.bytes_held, len(self._data)
        seen: dict[str, bytes | None] = {}
        for key, value in items:
            if len(value) > self.max_value_bytes:
                raise _Refused(f"a value of {len(value)} bytes for {key[:80]!r} (at most "
                               f"{self.max_value_bytes})")
            old = seen[key] if key in seen else self._data.get(key)
            keys += old is None
            total += self._cost(key, value) - self._cost(key, old)
            seen[key] = value
        if keys > self.max_keys:
            raise _Refused(f"the store holds {len(self._data)} keys, at most {self.max_keys}")
        if total > self.max_total_bytes:
            raise _Refused(f"the store holds {self.bytes_held} bytes, at most "
                           f"{self.max_total_bytes}; this write needs {total - self.bytes_held}")

    def _put(self, key: str, value: bytes) -> None:
        old = self._data.get(key)
        self.bytes_held += self._cost(key, value) - self._cost(key, old)
        self._data[key] = value
        if old is None:
            self._dirs.setdefault(_dir(key), set()).add(key)
        for wid in list(self._waiting_on.get(key, ())):
            self._try_wake(wid)

    def _op_ping(self, req: Request, fields: list[bytes]) -> None:
        req.reply()

    def _op_set(self, req: Request, fields: list[bytes]) -> None:
        if len(fields) != 2:
            raise _Refused(f"set needs a key and a value, got {len(fields)} fields")
        item = (_key(fields[0]), fields[1])
        self._check_put([item])
        self._put(*item)
        req.reply()

    def _op_multi_set(self, req: Request, fields: list[bytes]) -> None:
        if len(fields) % 2:
            raise _Refused(f"multi_set needs key and value pairs, got {len(fields)} fields")
        items = [(_key(fields[i]), fields[i + 1]) for i in range(0, len(fields), 2)]
        self._check_put(items)
        for item in items:
            self._put(*item)
        req.reply()

    def _op_add(self, req: Request, fields: list[bytes]) -> None:
        if len(fields) != 2:
            raise _Refused(f"add needs a key and an amount, got {len(fields)} fields")
        key, delta = _key(fields[0]), _int(fields[1], "an amount")
        old = self._data.get(key, b"0")
        try:
            value = int(old.decode("ascii")) + delta
        except (UnicodeDecodeError, ValueError):
            raise _Refused(f"add to {key[:80]!r}, which holds no number") from None
        item = (key, str(value).encode("ascii"))
        self._check_put([item])
        self._put(*item)
        req.reply(as_tensor(pack_fields([I64.pack(value)])))

    def _op_compare_set(self, req: Request, fields: list[bytes]) -> None:
        if len(fields) != 3:
            raise _Refused(f"compare_set needs a key and two values, got {len(fields)} fields")
        key, expected, desired = _key(fields[0]), fields[1], fields[2]
        old = self._data.get(key)
        # NOTE: torch's TCPStore: a missing key counts as the empty value
        if (old is None and not expected) or (old is not None and old == expected):
            self._check_put([(key, desired)])
            self._put(key, desired)
            current = desired
        else:
            current = expected if old is None else old
        req.reply(as_tensor(pack_fields([current])))

    def _op_check(self, req: Request, fields: list[bytes]) -> None:
        keys = [_key(f) for f in fields]
        req.reply(as_tensor(pack_fields([bytes(int(k in self._data) for k in keys)])))

    def _op_delete_key(self, req: Request, fields: list[bytes]) -> None:
        if len(fields) != 1:
            raise _Refused(f"delete_key needs one key, got {len(fields)} fields")
        key = _key(fields[0])
        old = self._data.pop(key, None)
        if old is not None:
            self.bytes_held -= self._cost(key, old)
            d = self._dirs.get(_dir(key))
            if d is not None:
                d.discard(key)
                if not d:
                    del self._dirs[_dir(key)]
        req.reply(as_tensor(pack_fields([YES if old is not None else NO])))

    def _op_num_keys(self, req: Request, fields: list[bytes]) -> None:
        req.reply(as_tensor(pack_fields([I64.pack(len(self._data))])))

    def _op_set_list(self, req: Request, fields: list[bytes]) -> None:
        if len(fields) < 2:
            raise _Refused(f"set_list needs a key, a value and directories, got {len(fields)} "
                           "fields")
        item = (_key(fields[0]), fields[1])
        dirs = [f.decode("utf-8", "replace") for f in fields[2:]]
        self._check_put([item])
        self._put(*item)
        out, size = [], 0
        for d in dirs:
            for key in sorted(self._dirs.get(d, ())):
                value = self._data[key]
                size += len(key) + len(value)
                # NOTE: bounded, so that a directory filled by others cannot make every
                # heartbeat's reply (and this server's memory) grow without end
                if size > self.max_value_bytes or len(out) >= MAX_FIELDS - 2:
                    raise _Refused(f"the directories {dirs} hold more than "
                                   f"{self.max_value_bytes} bytes or {MAX_FIELDS // 2} keys")
                out += [key.encode("utf-8"), value]
        req.reply(as_tensor(pack_fields(out)))

    # -- waiting for keys ------------------------------------------------------------------

    def _op_get(self, req: Request, fields: list[bytes]) -> None:
        self._park(req, fields, "get")

    def _op_wait(self, req: Request, fields: list[bytes]) -> None:
        self._park(req, fields, "wait")

    def _op_multi_get(self, req: Request, fields: list[bytes]) -> None:
        self._park(req, fields, "multi_get")

    def _park(self, req: Request, fields: list[bytes], op: str) -> None:
        """``[wait_ms, key, ...]``: answer ``[1, values...]`` once every key is set, or
        ``[0]`` when ``wait_ms`` pass first."""
        if not fields:
            raise _Refused(f"{op} needs a wait time and keys")
        wait_ms = min(max(_int(fields[0], "a wait time"), 0), _MAX_WAIT_MS)
        keys = tuple(_key(f) for f in fields[1:])
        if not keys or (op == "get" and len(keys) != 1):
            raise _Refused(f"{op} of {len(keys)} keys")
        if self._answer(req, keys, op):
            return
        if wait_ms == 0:
            req.reply(as_tensor(pack_fields([NO])))
            return
        if len(self._waiters) >= self.max_waiters:
            raise _Refused(f"{len(self._waiters)} requests are waiting for keys, at most "
                           f"{self.max_waiters}")
        wid = next(self._waiter_ids)
        end = time.monotonic() + wait_ms / 1000.0
        self._waiters[wid] = (req, keys, end, op)
        heapq.heappush(self._deadlines, (end, wid))
        for k in keys:
            self._waiting_on.setdefault(k, set()).add(wid)

    def _answer(self, req: Request, keys: tuple[str, ...], op: str) -> bool:
        if any(k not in self._data for k in keys):
            return False
        values = [] if op == "wait" else [self._data[k] for k in keys]
        req.reply(as_tensor(pack_fields([YES, *values])))
        return True

    def _drop_waiter(self, wid: int) -> tuple[Request, tuple[str, ...], float, str]:
        waiter = self._waiters.pop(wid)
        for k in waiter[1]:
            ids = self._waiting_on.get(k)
            if ids is not None:
                ids.discard(wid)
                if not ids:
                    del self._waiting_on[k]
        return waiter

    def _try_wake(self, wid: int) -> None:
        req, keys, _, op = self._waiters[wid]
        if all(k in self._data for k in keys):
            self._drop_waiter(wid)
            self._answer(req, keys, op)

    def _expire(self) -> None:
        now = time.monotonic()
        while self._deadlines and self._deadlines[0][0] <= now:
            _, wid = heapq.heappop(self._deadlines)
            if wid in self._waiters:  # NOTE: not answered yet
                req = self._drop_waiter(wid)[0]
                req.reply(as_tensor(pack_fields([NO])))
        if not self._waiters:
            self._deadlines.clear()


_OPS = {name[len("_op_"):]: fn for name, fn in vars(StoreServer).items()
        if name.startswith("_op_")}


def as_tensor(raw: bytes) -> torch.Tensor:
    return torch.frombuffer(bytearray(raw), dtype=torch.uint8)
