"""The collective mode's rendezvous store: a bounded key-value server behind the RPC handshake.

Trainer 0 hosts a :class:`StoreServer` at its own endpoint; every trainer (and each heartbeat
thread) talks to it through an :class:`RPCStore`, a ``torch.distributed.Store`` written in
Python, so that gloo and NCCL build their process groups through it like through torch's
TCPStore. Requests travel as :data:`~.wire.Kind` ``STORE`` messages of the pservers' RPC
(:mod:`.rpc`): with the job's secret (``PARAFLUID_RPC_SECRET``) a connection must pass the
PLAIN handshake and every message carries the session's MAC, so a process without the secret
cannot write, read or wait for anything; without one, every process that reaches the port
is trusted, as before, but what it can make the server hold is bounded all the same.

What the server holds is bounded: a value of at most ``max_value_bytes`` (4 MiB), at most
``max_keys`` keys (65,536) and ``max_total_bytes`` (64 MiB: keys, values and 64 bytes a key)
in all. A request larger than a value plus 64 KiB is refused by the RPC layer before its
payload is allocated; a write past a bound is refused with an error naming the bound. Every
refusal is logged at a bounded rate, nothing refused is stored, and the server goes on.
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
    store = RPCStore(server.endpoint, deadline_s=5)
    store.set("a/1", "x"); store.get("a/1")          # b'x'
    store.set_list("a/2", "y", ["a"])                # {'a/1': b'x', 'a/2': b'y'}
    store.close(); server.stop()
"""

from __future__ import annotations

import collections
import datetime
import itertools
import logging
import struct
import threading
import time
from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist

from .deadline import rpc_deadline_seconds
from .rpc import RateLimitedLog, Request, RPCClient, RPCError, RPCServer, RPCTimeoutError
from .wire import Kind, Message

__all__ = ["StoreServer", "RPCStore", "StoreError", "StoreTimeoutError", "pack_fields",
           "unpack_fields", "DEFAULT_MAX_VALUE_BYTES", "DEFAULT_MAX_TOTAL_BYTES",
           "DEFAULT_MAX_KEYS", "DEFAULT_STORE_DEADLINE_S"]

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
_WAIT_SLICE_S = 1.0  # the longest a server holds one waiting request
_MAX_WAIT_MS = 60_000
_U32 = struct.Struct("<I")
_I64 = struct.Struct("<q")
_YES, _NO = b"\x01", b"\x00"


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
    if len(raw) != _I64.size:
        raise _Refused(f"{what} of {len(raw)} bytes (expected {_I64.size})")
    return _I64.unpack(raw)[0]


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

    ``requests`` counts the requests served, by operation; ``refused`` those refused here
    (the RPC layer counts the ones it refused before they reached the store:
    ``rpc.rejected``, ``rpc.refused_handshakes``).
    """

    def __init__(self, endpoint: str, secret: bytes | str | None = None, *,
                 max_value_bytes: int = DEFAULT_MAX_VALUE_BYTES,
                 max_total_bytes: int = DEFAULT_MAX_TOTAL_BYTES,
                 max_keys: int = DEFAULT_MAX_KEYS,
                 max_waiters: int = DEFAULT_MAX_WAITERS,
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
        self._waiter_ids = itertools.count(1)
        self._log = RateLimitedLog(log)
        self.rpc = RPCServer(endpoint, self._handle, secret,
                             max_message_bytes=self.max_value_bytes + _OVERHEAD,
                             poll_interval_s=poll_interval_s, on_tick=self._expire)
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
        req.reply(_tensor(pack_fields([_I64.pack(value)])))

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
        req.reply(_tensor(pack_fields([current])))

    def _op_check(self, req: Request, fields: list[bytes]) -> None:
        keys = [_key(f) for f in fields]
        req.reply(_tensor(pack_fields([bytes(int(k in self._data) for k in keys)])))

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
        req.reply(_tensor(pack_fields([_YES if old is not None else _NO])))

    def _op_num_keys(self, req: Request, fields: list[bytes]) -> None:
        req.reply(_tensor(pack_fields([_I64.pack(len(self._data))])))

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
        req.reply(_tensor(pack_fields(out)))

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
            req.reply(_tensor(pack_fields([_NO])))
            return
        if len(self._waiters) >= self.max_waiters:
            raise _Refused(f"{len(self._waiters)} requests are waiting for keys, at most "
                           f"{self.max_waiters}")
        wid = next(self._waiter_ids)
        self._waiters[wid] = (req, keys, time.monotonic() + wait_ms / 1000.0, op)
        for k in keys:
            self._waiting_on.setdefault(k, set()).add(wid)

    def _answer(self, req: Request, keys: tuple[str, ...], op: str) -> bool:
        if any(k not in self._data for k in keys):
            return False
        values = [] if op == "wait" else [self._data[k] for k in keys]
        req.reply(_tensor(pack_fields([_YES, *values])))
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
        if not self._waiters:
            return
        now = time.monotonic()
        for wid in [w for w, (_, _, end, _) in self._waiters.items() if end <= now]:
            req = self._drop_waiter(wid)[0]
            req.reply(_tensor(pack_fields([_NO])))


_OPS = {name[len("_op_"):]: fn for name, fn in vars(StoreServer).items()
        if name.startswith("_op_")}


def _tensor(raw: bytes) -> torch.Tensor:
    return torch.frombuffer(bytearray(raw), dtype=torch.uint8)


# ---------------------------------------------------------------------- the client

class RPCStore(dist.Store):
    """A connection to a :class:`StoreServer`, usable wherever torch wants a ``Store``
    (``ProcessGroupGloo``, ``PrefixStore``, ``init_process_group(store=...)``).

    Args:
        endpoint: the server's ``host:port``.
        secret: the job's secret; None reads ``$PARAFLUID_RPC_SECRET``.
        deadline_s: seconds each request waits for its reply (default ``FLAGS_rpc_deadline``,
            else 300 s); also how long ``get`` and ``wait`` wait for keys unless told.
        prefix: prepended (with a ``/``) to every key, as ``torch.distributed.PrefixStore``.
        trainer_id, role: sent with every request / as the handshake's user name.

    Keep a reference to it while torch uses it: torch holds only its C++ half.
    """

    def __init__(self, endpoint: str, *, secret: bytes | str | None = None,
                 deadline_s: float | None = None, prefix: str = "", trainer_id: int = -1,
                 role: str | None = None, _client: RPCClient | None = None) -> None:
        super().__init__()
        self.endpoint = endpoint
        self.deadline_s = rpc_deadline_seconds(DEFAULT_STORE_DEADLINE_S) \
            if deadline_s is None else float(deadline_s)
        self.prefix = prefix.rstrip("/") + "/" if prefix else ""
        self._secret, self._trainer_id, self._role = secret, trainer_id, role
        self._client = _client or RPCClient(
            endpoint, self.deadline_s, secret, trainer_id=trainer_id, role=role,
            peer="rendezvous store")
        self._owns_client = _client is None
        self._clones: list[RPCStore] = []
        self._closed = False

    # -- plumbing --------------------------------------------------------------------------

    def with_prefix(self, prefix: str) -> RPCStore:
        """The same connection, with ``prefix`` (under this store's own) on every key."""
        return RPCStore(self.endpoint, deadline_s=self.deadline_s,
                        prefix=self.prefix + prefix, _client=self._client)

    def clone(self) -> RPCStore:
        """A new connection to the same store, with the same prefix (torch calls it)."""
        c = RPCStore(self.endpoint, secret=self._secret, deadline_s=self.deadline_s,
                     prefix=self.prefix, trainer_id=self._trainer_id, role=self._role)
        self._clones.append(c)  # NOTE: torch keeps only the C++ half alive
        return c

    def close(self) -> None:
        self._closed = True
        for c in self._clones:
            c.close()
        if self._owns_client:
            self._client.close()

    def _k(self, key: str) -> bytes:
        return (self.prefix + key).encode("utf-8")

    def _call(self, op: str, fields: Sequence[bytes], what: str, extra_s: float = 0.0,
              deadline_s: float | None = None) -> list[bytes]:
        if self._closed:
            raise StoreError(f"rendezvous store at {self.endpoint}: {what}: this connection "
                             "is closed")
        seconds = (self.deadline_s if deadline_s is None else deadline_s) + extra_s
        try:
            reply = self._client.call(Kind.STORE, op, _tensor(pack_fields(fields)),
                                      deadline_s=seconds)
        except RPCTimeoutError:
            raise StoreTimeoutError(
                f"rendezvous store at {self.endpoint}: {what}: no reply within {seconds:.1f} s "
                "(its host, trainer 0, died, was stopped or hangs, or another program holds "
                "the port)") from None
        except RPCError as e:
            raise StoreError(f"{what}: {e}") from None
        return _reply_fields(reply, self.endpoint, what)

    def _await(self, op: str, keys: Sequence[str], timeout_s: float, what: str
               ) -> list[bytes]:
        """``[values...]`` once every key is set (the server holds each request up to a
        second); StoreTimeoutError naming the missing keys after ``timeout_s``."""
        end = time.monotonic() + timeout_s
        raw = [self._k(k) for k in keys]
        while True:
            left = max(0.0, end - time.monotonic())
            slice_s = min(_WAIT_SLICE_S, left)
            got = self._call(op, [_I64.pack(int(slice_s * 1000)), *raw], what, slice_s)
            if got and got[0] == _YES:
                return got[1:]
            if time.monotonic() >= end:
                try:
                    missing = [k for k, p in zip(keys, self.present(keys)) if not p]
                except StoreError:
                    missing = list(keys)
                raise StoreTimeoutError(
                    f"rendezvous store at {self.endpoint}: {what}: after {timeout_s:.1f} s "
                    f"still not set: {', '.join(repr(k) for k in missing[:8])}"
                    + (f" and {len(missing) - 8} more" if len(missing) > 8 else ""))

    @staticmethod
    def _seconds(timeout: Any, default: float) -> float:
        if timeout is None:
            return default
        if isinstance(timeout, datetime.timedelta):
            return timeout.total_seconds()
        return float(timeout)

    # -- torch.distributed.Store -----------------------------------------------------------

    def set(self, key: str, value: str | bytes) -> None:
        self._call("set", [self._k(key), self._value(value, key)], f"set of {key!r}")

    def _value(self, value: str | bytes, key: str) -> bytes:
        raw = _bytes(value)
        # NOTE: the server would refuse it too, or drop the connection when the request is
        # larger than its message limit: say so at once instead of timing out
        if len(raw) > DEFAULT_MAX_VALUE_BYTES:
            raise StoreError(f"rendezvous store at {self.endpoint}: a value of {len(raw)} "
                             f"bytes for {key!r} (at most {DEFAULT_MAX_VALUE_BYTES})")
        return raw

    def get(self, key: str) -> bytes:
        """The value of ``key``, waiting (up to ``deadline_s``) until it is set."""
        return self._await("get", [key], self.deadline_s, f"get of {key!r}")[0]

    def multi_get(self, keys: list[str]) -> list[bytes]:
        return self._await("multi_get", keys, self.deadline_s, f"get of {len(keys)} keys")

    def multi_set(self, keys: list[str], values: list[str | bytes]) -> None:
        fields: list[bytes] = []
        for k, v in zip(keys, values):
            fields += [self._k(k), self._value(v, k)]
        self._call("multi_set", fields, f"set of {len(keys)} keys")

    def add(self, key: str, value: int) -> int:
        got = self._call("add", [self._k(key), _I64.pack(int(value))], f"add to {key!r}")
        return _I64.unpack(_one(got, _I64.size, self.endpoint, "add"))[0]

    def compare_set(self, key: str, expected_value: str | bytes,
                    desired_value: str | bytes) -> bytes:
        got = self._call("compare_set", [self._k(key), self._value(expected_value, key),
                                         self._value(desired_value, key)],
                         f"compare_set of {key!r}")
        return _one(got, None, self.endpoint, "compare_set")

    def check(self, keys: list[str]) -> bool:
        return all(self.present(keys))

    def present(self, keys: Sequence[str]) -> list[bool]:
        """Whether each key is set, in one request."""
        got = self._call("check", [self._k(k) for k in keys], f"check of {len(keys)} keys")
        return [b == 1 for b in _one(got, len(keys), self.endpoint, "check")]

    def wait(self, keys: list[str], timeout: Any = None) -> None:
        self._await("wait", keys, self._seconds(timeout, self.deadline_s),
                    f"wait for {', '.join(repr(k) for k in keys[:4])}"
                    + (f" and {len(keys) - 4} more" if len(keys) > 4 else ""))

    def delete_key(self, key: str) -> bool:
        return _one(self._call("delete_key", [self._k(key)], f"delete of {key!r}"), 1,
                    self.endpoint, "delete_key") == _YES

    def num_keys(self) -> int:
        return _I64.unpack(_one(self._call("num_keys", [], "num_keys"), _I64.size,
                                self.endpoint, "num_keys"))[0]

    # -- parafluid's own -------------------------------------------------------------------

    def ping(self, deadline_s: float | None = None, what: str = "ping") -> None:
        """One round trip (the connection's handshake, the first time)."""
        self._call("ping", [], what, deadline_s=deadline_s)

    def set_list(self, key: str, value: str | bytes, dirs: Sequence[str],
                 deadline_s: float | None = None) -> dict[str, bytes]:
        """Set ``key``, then every entry under each of ``dirs`` (keys up to their last
        ``/``), by key without this store's prefix: one request."""
        got = self._call("set_list", [self._k(key), self._value(value, key),
                                      *(self.prefix.encode() + d.encode() for d in dirs)],
                         f"set_list of {key!r}", deadline_s=deadline_s)
        if len(got) % 2:
            raise StoreError(f"rendezvous store at {self.endpoint}: set_list: a reply of "
                             f"{len(got)} fields is not key/value pairs")
        out, skip = {}, len(self.prefix)
        for i in range(0, len(got), 2):
            name = got[i].decode("utf-8", "replace")
            if name.startswith(self.prefix):
                out[name[skip:]] = got[i + 1]
        return out


def _bytes(value: str | bytes) -> bytes:
    return value.encode("utf-8") if isinstance(value, str) else bytes(value)


def _reply_fields(reply: Message, endpoint: str, what: str) -> list[bytes]:
    if reply.kind == Kind.REPLY_OK:
        return []
    value = reply.value
    if not isinstance(value, torch.Tensor) or value.dtype != torch.uint8 or value.dim() != 1:
        raise StoreError(f"rendezvous store at {endpoint}: {what}: a reply that is not "
                         "store fields (another program on the port?)")
    try:
        return unpack_fields(value.numpy())
    except ValueError as e:
        raise StoreError(f"rendezvous store at {endpoint}: {what}: a malformed reply "
                         f"({e})") from None


def _one(fields: list[bytes], size: int | None, endpoint: str, what: str) -> bytes:
    if len(fields) != 1 or (size is not None and len(fields[0]) != size):
        raise StoreError(f"rendezvous store at {endpoint}: {what}: a malformed reply "
                         f"({len(fields)} fields)")
    return fields[0]
