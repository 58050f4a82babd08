"""A connection to the collective mode's rendezvous store (``store.py``), as a torch ``Store``.

``RPCStore`` subclasses ``torch.distributed.Store`` in Python: gloo and NCCL build their
process groups through it (``ProcessGroupGloo(PrefixStore("pg", store), rank, size, ...)``)
as through torch's TCPStore. Every request has a deadline; a wait for keys is held by the
server a second at a time, so that a closed connection or a dead host is noticed between two
slices; errors name the store's endpoint and what was awaited.

Example::

    store = RPCStore("127.0.0.1:6170", deadline_s=5, prefix="job")
    store.set("rdzv/0", "{}"); store.present(["rdzv/0", "rdzv/1"])   # [True, False]
    store.close()
"""

from __future__ import annotations

import datetime
import threading
import time
from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist

from .deadline import rpc_deadline_seconds
from .rpc import RPCClient, RPCError, RPCTimeoutError
from .store import (
    DEFAULT_MAX_VALUE_BYTES,
    DEFAULT_STORE_DEADLINE_S,
    I64,
    WAIT_SLICE_S,
    YES,
    StoreError,
    StoreTimeoutError,
    as_tensor,
    pack_fields,
    unpack_fields,
)
from .wire import Kind, Message

__all__ = ["RPCStore"]


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
        self._clones: list[RPCStore] = []
        self._closed = False

    # -- plumbing --------------------------------------------------------------------------

    def with_prefix(self, prefix: str) -> RPCStore:
        """The same connection, with ``prefix`` (under this store's own) on every key; closing
        either closes the connection."""
        return RPCStore(self.endpoint, deadline_s=self.deadline_s,
                        prefix=self.prefix + prefix, _client=self._client)

    def clone(self) -> RPCStore:
        """A new connection to the same store, with the same prefix (torch calls it)."""
        c = RPCStore(self.endpoint, secret=self._secret, deadline_s=self.deadline_s,
                     prefix=self.prefix, trainer_id=self._trainer_id, role=self._role)
        self._clones.append(c)  # NOTE: torch keeps only the C++ half alive
        return c

    def close(self) -> None:
        """Close the connection (shared with the views of ``with_prefix``: closes them too).

        Does not wait: a request in flight on another thread (to a host that died, say)
        keeps the connection until its deadline, and it is closed then.
        """
        self._closed = True
        for c in self._clones:
            c.close()
        threading.Thread(target=self._client.close, daemon=True,
                         name=f"parafluid-store-close-{self.endpoint}").start()

    def _k(self, key: str) -> bytes:
        return (self.prefix + key).encode("utf-8")

    def _call(self, op: str, fields: Sequence[bytes], what: str, extra_s: float = 0.0,
              deadline_s: float | None = None) -> list[bytes]:
        if self._closed:
            raise StoreError(f"rendezvous store at {self.endpoint}: {what}: this connection "
                             "is closed")
        seconds = (self.deadline_s if deadline_s is None else deadline_s) + extra_s
        try:
            reply = self._client.call(Kind.STORE, op, as_tensor(pack_fields(fields)),
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
            slice_s = min(WAIT_SLICE_S, left)
            got = self._call(op, [I64.pack(int(slice_s * 1000)), *raw], what, slice_s)
            if got and got[0] == YES:
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
        got = self._call("add", [self._k(key), I64.pack(int(value))], f"add to {key!r}")
        return I64.unpack(_one(got, I64.size, self.endpoint, "add"))[0]

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
                    self.endpoint, "delete_key") == YES

    def num_keys(self) -> int:
        return I64.unpack(_one(self._call("num_keys", [], "num_keys"), I64.size,
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
