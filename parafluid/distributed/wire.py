"""The parameter-server wire format: one ZeroMQ multipart message per request or reply.

A message is ``[header, *payload, mac?]``:

* ``header``: a fixed little-endian struct (:data:`HEADER`) followed by the UTF-8 variable
  name and ``ndim`` signed 64-bit dims. It says everything the decoder needs to check the rest
  before it allocates anything: kind, dtype, shape, payload size, trainer id, sequence number.
* ``payload``: raw tensor bytes, sent from memoryviews of the CPU tensor (no pickle, no
  serialisation step). A dense tensor is one part; a SelectedRows is two (int64 rows, then
  the ``[len(rows), ...]`` values, with ``height`` in the header). A request's parts go as
  frames of at most :data:`FRAME_BYTES` (the last one shorter; header flag ``split``), so
  that a server's per-frame limit, which ZeroMQ applies before it has authenticated anyone,
  can stay a few MiB whatever the tensor's size; a reply's parts go whole (a client accepts
  no connections, and the receiver then takes over the frame's memory without a copy). Kinds
  without a value have no payload frame.
* ``mac``: present when the sender has a shared secret (``PARAFLUID_RPC_SECRET``): the
  sender's message counter (8 bytes) and an HMAC-SHA256, keyed with the secret, of the
  channel id, that counter, the header and the payload frames. A receiver with a secret
  refuses messages without a valid one. The channel id binds a message to one connection of
  one server's life (see :mod:`.rpc`: it is agreed by a HELLO exchange when the connection
  starts, and a HELLO itself is MAC'd without one), the counter lets the receiver refuse a
  message it has seen before.

:func:`decode` validates magic, version, kind, flags, name, dtype, rank, dims, sizes, frame
count, the message size limit and the MAC, and only then copies the payload into fresh tensors,
so a hostile message can make it raise :class:`WireError` and nothing else. Payloads received
by ZeroMQ without a copy become tensors over the same memory; other buffers are copied.

Example::

    frames = encode(Kind.SEND, "fc_0.w_0@GRAD", torch.ones(2, 3), trainer_id=1, seq=7)
    msg = decode([bytes(memoryview(f)) for f in frames])
    msg.kind, msg.name, msg.value.shape   # (Kind.SEND, 'fc_0.w_0@GRAD', torch.Size([2, 3]))
"""

from __future__ import annotations

import enum
import functools
import hashlib
import hmac
import math
import os
import re
import struct
from collections.abc import Sequence
from typing import Any, NamedTuple, Union

import numpy as np
import torch

from ..scope import SelectedRows

__all__ = ["Kind", "Message", "WireError", "encode", "decode", "rpc_secret", "HEADER",
           "MAGIC", "VERSION", "DEFAULT_MAX_MESSAGE_BYTES", "WIRE_DTYPES", "SECRET_ENV",
           "FRAME_BYTES", "CHANNEL_BYTES", "max_frames"]

MAGIC = b"PFRP"
VERSION = 3
SECRET_ENV = "PARAFLUID_RPC_SECRET"
DEFAULT_MAX_MESSAGE_BYTES = 1 << 30  # 1 GiB of payload per message
MAX_NAME_BYTES = 512
MAX_NDIM = 8
MAX_TEXT_BYTES = 64 * 1024  # error texts and checkpoint directory names
FRAME_BYTES = 4 << 20  # payload bytes per frame: larger parts are split
CHANNEL_BYTES = 16  # a HELLO's nonce and a channel id
_COUNTER = struct.Struct("<Q")
MAC_BYTES = _COUNTER.size + 32  # the counter, then HMAC-SHA256

# magic, version, kind, dtype code, ndim, flags, name length, trainer id, seq, nbytes, height,
# step (a request: the sender's step with this server; a reply: the server's step; -1: none)
HEADER = struct.Struct("<4sBBBBHHiQQqq")
_DIM = struct.Struct("<q")
_DIMS = [struct.Struct(f"<{n}q") for n in range(MAX_NDIM + 1)]  # the dims of each rank

_FLAG_MAC = 1
_FLAG_SELECTED_ROWS = 2
_FLAG_SPLIT = 4  # payload parts go as frames of at most FRAME_BYTES
_KNOWN_FLAGS = _FLAG_MAC | _FLAG_SELECTED_ROWS | _FLAG_SPLIT


class Kind(enum.IntEnum):
    """Message kinds: requests from trainers, then the three kinds of reply."""

    PING = 1            # is the server up? (wait_for_server)
    SEND = 2            # a gradient (dense or SelectedRows) for the pserver
    GET = 3             # read a parameter block (Fluid's recv op)
    SEND_BARRIER = 4    # this trainer sent all its gradients of the step
    FETCH_BARRIER = 5   # this trainer read all its parameters of the step
    PREFETCH = 6        # rows of a distributed lookup table (value: int64 row ids)
    CHECKPOINT = 7      # save your blocks (value: the directory as UTF-8 bytes)
    COMPLETE = 8        # this trainer is done (Executor.close())
    HELLO = 9           # start a channel (value: the client's nonce; the reply: the channel)
    STORE = 10          # a rendezvous store request (name: the operation; value: its fields)
    REPLY_OK = 16
    REPLY_VALUE = 17
    REPLY_ERROR = 18    # value: the error text as UTF-8 bytes


# What each kind carries: name required?, value: None | "any" | "dense" | "rows" | "text" | "bytes"
_RULES: dict[Kind, tuple[bool, str | None]] = {
    Kind.PING: (False, None),
    Kind.SEND: (True, "any"),
    Kind.GET: (True, None),
    Kind.SEND_BARRIER: (False, None),
    Kind.FETCH_BARRIER: (False, None),
    Kind.PREFETCH: (True, "rows"),
    Kind.CHECKPOINT: (False, "text"),
    Kind.COMPLETE: (False, None),
    Kind.HELLO: (False, "text"),
    Kind.STORE: (True, "bytes"),
    Kind.REPLY_OK: (False, None),
    Kind.REPLY_VALUE: (False, "any"),
    Kind.REPLY_ERROR: (False, "text"),
}

# Wire dtype codes: fixed forever (a new dtype gets a new code, old codes never move).
WIRE_DTYPES: dict[int, tuple[str, torch.dtype, int]] = {
    1: ("float16", torch.float16, 2),
    2: ("bfloat16", torch.bfloat16, 2),
    3: ("float32", torch.float32, 4),
    4: ("float64", torch.float64, 8),
    5: ("int8", torch.int8, 1),
    6: ("uint8", torch.uint8, 1),
    7: ("int16", torch.int16, 2),
    8: ("int32", torch.int32, 4),
    9: ("int64", torch.int64, 8),
    10: ("bool", torch.bool, 1),
}
_CODE_OF = {tdt: code for code, (_, tdt, _) in WIRE_DTYPES.items()}
# the numpy dtype a payload is read as (numpy has no bfloat16: its bytes are read as int16)
_NP_OF = {torch.float16: np.float16, torch.bfloat16: np.int16, torch.float32: np.float32,
          torch.float64: np.float64, torch.int8: np.int8, torch.uint8: np.uint8,
          torch.int16: np.int16, torch.int32: np.int32, torch.int64: np.int64,
          torch.bool: np.bool_}
_ITEMSIZE = {tdt: size for _, tdt, size in WIRE_DTYPES.values()}
_KIND_OF = {int(k): k for k in Kind}

# Fluid variable names: letters, digits and _ . @ : / - (e.g. fc_0.w_0@GRAD.block1.trainer_0)
_NAME_RE = re.compile(r"[A-Za-z0-9_.@:/\-]+")

Value = Union[torch.Tensor, SelectedRows]  # noqa: UP007 (a runtime alias on 3.10)


class WireError(ValueError):
    """A message that is malformed, too large, or fails authentication."""


class Message(NamedTuple):
    """One decoded message. ``value`` is a CPU tensor or SelectedRows it owns, or None.

    NOTE: a named tuple: immutable, and built in a third of a dataclass's time (one per
    message).
    """

    kind: Kind
    name: str = ""
    value: Value | None = None
    trainer_id: int = -1
    seq: int = 0
    step: int = -1
    counter: int = 0  # the sender's message counter (from the MAC frame; 0 without one)

    def text(self) -> str:
        """The UTF-8 text of a REPLY_ERROR or CHECKPOINT message."""
        if not isinstance(self.value, torch.Tensor):
            return ""
        return bytes(self.value.numpy()).decode("utf-8", errors="replace")


def rpc_secret(secret: bytes | str | None = None) -> bytes | None:
    """The shared secret: ``secret`` if given, else ``$PARAFLUID_RPC_SECRET``, else None."""
    if secret is None:
        secret = os.environ.get(SECRET_ENV) or None
    if isinstance(secret, str):
        secret = secret.encode("utf-8")
    return secret or None


# ---------------------------------------------------------------------------------------------
# encoding


def _as_cpu_tensor(value: Any, what: str) -> torch.Tensor:
    if isinstance(value, np.ndarray):
        value = torch.from_numpy(np.ascontiguousarray(value))
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{what}: expected a torch.Tensor, numpy array or SelectedRows, "
                        f"got {type(value).__name__}")
    if value.dtype not in _CODE_OF:
        raise TypeError(f"{what}: dtype {value.dtype} cannot be sent; allowed: "
                        f"{sorted(n for n, _, _ in WIRE_DTYPES.values())}")
    t = value.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    return t.contiguous()  # NOTE: a no-op (no copy) for the usual contiguous tensor


def _buffer(t: torch.Tensor) -> memoryview:
    """A zero-copy byte view of a contiguous CPU tensor."""
    if t.dtype == torch.bfloat16:  # numpy has no bfloat16: view the same bytes as int16
        t = t.view(torch.int16)
    return memoryview(t.numpy().reshape(-1)).cast("B")


def _dense(value: Any, kind: Kind, name: str) -> tuple[int, tuple[int, ...], memoryview]:
    """(dtype code, shape, zero-copy byte view) of a dense value.

    NOTE: the usual value, a contiguous CPU tensor without grad, takes one torch call
    (``numpy()``): every torch call costs microseconds more than the work it does, most of
    all on a loaded machine where each message finds the caches cold.
    """
    if type(value) is torch.Tensor and not value.requires_grad:
        code = _CODE_OF.get(value.dtype)
        if code is not None and value.dtype is not torch.bfloat16:
            try:
                view = memoryview(value.numpy())  # raises off the CPU, or with conj/neg bits
                # NOTE: cast raises unless the view is C-contiguous (and has no 0 in its shape)
                return code, view.shape, view.cast("B")
            except (TypeError, RuntimeError):
                pass
    t = _as_cpu_tensor(value, f"rpc {kind.name} {name!r}")
    return _CODE_OF[t.dtype], tuple(t.shape), _buffer(t)


@functools.lru_cache(maxsize=4096)
def _name_bytes(name: str) -> bytes | None:
    """A variable name as it goes in a header, or None when it is not a valid name
    (cached: a job sends the same few names over and over)."""
    name_b = name.encode("utf-8")
    if len(name_b) > MAX_NAME_BYTES or (name and not _NAME_RE.fullmatch(name)):
        return None
    return name_b


def _text_tensor(text: str | bytes) -> torch.Tensor:
    raw = text.encode("utf-8") if isinstance(text, str) else bytes(text)
    raw = raw[:MAX_TEXT_BYTES]
    return torch.frombuffer(bytearray(raw), dtype=torch.uint8) if raw else \
        torch.empty(0, dtype=torch.uint8)


def max_frames(limit: int) -> int:
    """The most frames a message with at most ``limit`` payload bytes has."""
    return 1 + 2 + max(0, int(limit)) // FRAME_BYTES + 1  # header, two parts, MAC


def _split(view: memoryview) -> list[memoryview]:
    """A payload part as frames of at most FRAME_BYTES (one frame when it is empty)."""
    if view.nbytes <= FRAME_BYTES:
        return [view]
    return [view[i:i + FRAME_BYTES] for i in range(0, view.nbytes, FRAME_BYTES)]


def _frame_sizes(size: int, split: bool) -> list[int]:
    """The sizes of the frames of a part of ``size`` bytes (what _split makes, if ``split``)."""
    if size <= FRAME_BYTES or not split:
        return [size]
    full, rest = divmod(size, FRAME_BYTES)
    return [FRAME_BYTES] * full + ([rest] if rest else [])


def encode(kind: Kind, name: str = "", value: Any = None, *, trainer_id: int = -1,
           seq: int = 0, step: int = -1, secret: bytes | None = None,
           channel: bytes = b"", counter: int = 0, split: bool = True) -> list[Any]:
    """The frames of one message: ``[header, *payload, mac?]``; payloads are zero-copy views.

    ``value`` is a tensor (or numpy array), a SelectedRows, or for CHECKPOINT, REPLY_ERROR and
    HELLO a str or bytes. The caller must not modify the tensor until the message has been
    sent. With a ``secret``, the MAC covers ``channel`` (ignored for a HELLO) and ``counter``.
    ``split``: send parts larger than FRAME_BYTES as several frames (requests; a receiver
    with a per-frame limit of FRAME_BYTES needs it).
    """
    if type(kind) is not Kind:  # NOTE: a table, not an enum call
        given, kind = kind, _KIND_OF.get(kind)
        if kind is None:
            raise ValueError(f"rpc: unknown message kind {given!r}")
    if kind in (Kind.CHECKPOINT, Kind.REPLY_ERROR, Kind.HELLO) and \
            isinstance(value, (str, bytes)):
        value = _text_tensor(value)
    name_b = _name_bytes(name)
    if name_b is None:
        raise ValueError(f"rpc {kind.name}: variable name {name!r} is not a valid name "
                         f"(letters, digits, _ . @ : / -; at most {MAX_NAME_BYTES} bytes)")
    flags = _FLAG_MAC if secret else 0
    height = 0
    if value is None:
        code, dims, payload = 0, (), []
    elif isinstance(value, SelectedRows):
        rows = _as_cpu_tensor(value.rows, f"rpc {kind.name} {name!r} rows").to(torch.int64)
        vals = _as_cpu_tensor(value.value, f"rpc {kind.name} {name!r}")
        if vals.dim() < 1 or vals.shape[0] != rows.numel():
            raise ValueError(f"rpc {kind.name} {name!r}: SelectedRows has {rows.numel()} rows "
                             f"but values of shape {list(vals.shape)}")
        flags |= _FLAG_SELECTED_ROWS
        code, dims, height = _CODE_OF[vals.dtype], tuple(vals.shape), value.height
        payload = [_buffer(rows.contiguous()), _buffer(vals)]
    else:
        code, dims, view = _dense(value, kind, name)
        payload = [view]
    if len(dims) > MAX_NDIM:
        raise ValueError(f"rpc {kind.name} {name!r}: rank {len(dims)} > {MAX_NDIM}")
    nbytes = payload[0].nbytes if len(payload) == 1 else sum(p.nbytes for p in payload)
    split = split and nbytes > FRAME_BYTES and any(p.nbytes > FRAME_BYTES for p in payload)
    flags |= _FLAG_SPLIT if split else 0
    header = HEADER.pack(MAGIC, VERSION, kind, code, len(dims), flags, len(name_b),
                         int(trainer_id), int(seq), nbytes, height, int(step)) + name_b + \
        _DIMS[len(dims)].pack(*dims)
    frames: list[Any] = [header]
    for p in payload:
        frames += _split(p) if split else [p]
    if secret:
        frames.append(_mac(secret, _channel_of(kind, channel), int(counter), header,
                           frames[1:]))
    return frames


def _channel_of(kind: Kind, channel: bytes) -> bytes:
    # NOTE: a HELLO asks for the channel, so it cannot carry one
    return b"" if kind is Kind.HELLO else bytes(channel)


def _mac(secret: bytes, channel: bytes, counter: int, header: Any,
         payload: Sequence[Any]) -> bytes:
    """The MAC frame: the counter, then HMAC-SHA256 of channel, counter, header, payload."""
    count = _COUNTER.pack(counter)
    h = hmac.new(secret, digestmod=hashlib.sha256)
    h.update(bytes([len(channel)]) + channel + count)
    h.update(header)
    for p in payload:
        h.update(p)
    return count + h.digest()


# ---------------------------------------------------------------------------------------------
# decoding


def _view(frame: Any) -> memoryview:
    buf = getattr(frame, "buffer", None)  # a zmq.Frame received with copy=False
    return (buf if buf is not None else memoryview(frame)).cast("B")


def _alloc(nbytes: int) -> torch.Tensor:
    """Every payload allocation of the decoder goes through here (the fuzz test watches it).

    NOTE: numpy's allocation, not torch's: glibc then reuses the memory of freed buffers of
    up to 32 MiB instead of mapping fresh pages for each message (page faults cost more
    than the copy into them).
    """
    if nbytes == 0:  # NOTE: an empty numpy array becomes a tensor of stride 0
        return torch.empty(0, dtype=torch.uint8)
    return torch.from_numpy(np.empty(nbytes, dtype=np.uint8))


def _tensor_of(frame: Any, view: memoryview, dtype: torch.dtype,
               shape: tuple[int, ...]) -> torch.Tensor:
    """The payload as a tensor: the frame's own memory when that is safe, else a copy.

    A zmq.Frame received with ``copy=False`` owns writable memory that nothing else uses:
    the tensor takes it over (it keeps the frame alive), so a large payload is never copied
    after ZeroMQ read it. Immutable buffers (bytes) and misaligned data are copied.
    NOTE: the view is made by numpy, with one torch call (``from_numpy``; see _dense).
    """
    if view.nbytes and hasattr(frame, "buffer") and not view.readonly:
        t = torch.from_numpy(np.frombuffer(view, dtype=_NP_OF[dtype]).reshape(shape))
        if not t.data_ptr() % _ITEMSIZE[dtype]:  # NOTE: from_numpy takes misaligned data too
            return t.view(torch.bfloat16) if dtype is torch.bfloat16 else t
    out = _alloc(view.nbytes)
    if view.nbytes:
        out.numpy()[:] = np.frombuffer(view, dtype=np.uint8)
    return out.view(dtype).reshape(shape)


def _part_tensor(frames: Sequence[Any], views: Sequence[memoryview], size: int,
                 dtype: torch.dtype, shape: tuple[int, ...]) -> torch.Tensor:
    """A payload part as a tensor: one frame's own memory (see _tensor_of), or the frames of
    a part sent in pieces copied into one fresh buffer of the declared size."""
    if len(frames) == 1:
        return _tensor_of(frames[0], views[0], dtype, shape)
    out = _alloc(size)
    np.concatenate([np.frombuffer(v, dtype=np.uint8) for v in views], out=out.numpy())
    return out.view(dtype).reshape(shape)


def decode(frames: Sequence[Any], *, secret: bytes | None = None, channel: bytes = b"",
           max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES) -> Message:
    """Validate the frames of one message, then turn its payload into CPU tensors.

    Raises WireError (and nothing else) naming the first problem found. With a ``secret``, a
    message without a valid MAC (over ``channel``, except for a HELLO) is refused; without
    one, a MAC frame is accepted unchecked. Whether the counter is new is the caller's check.
    """
    try:
        return _decode(frames, secret, channel, max_message_bytes)
    except WireError:
        raise
    except Exception as e:  # NOTE: defence in depth; every path above should be a WireError
        raise WireError(f"undecodable message ({type(e).__name__}: {e})") from None


_new_message = tuple.__new__  # Message(...) without its Python-level __new__


def _decode(frames: Sequence[Any], secret: bytes | None, channel: bytes,
            limit: int) -> Message:
    n_frames = len(frames)
    most = max_frames(limit)
    if not 1 <= n_frames <= most:
        raise WireError(f"expected 1 to {most} frames, got {n_frames}")
    head = _view(frames[0])
    if head.nbytes < HEADER.size:
        raise WireError(f"header of {head.nbytes} bytes is shorter than {HEADER.size}")
    (magic, version, kind_code, code, ndim, flags, name_len, trainer_id, seq, nbytes,
     height, step) = HEADER.unpack_from(head)
    if magic != MAGIC:
        raise WireError(f"bad magic {bytes(magic)!r} (not a parafluid RPC message)")
    if version != VERSION:
        raise WireError(f"wire version {version}, this build speaks version {VERSION}")
    kind = _KIND_OF.get(kind_code)
    if kind is None:
        raise WireError(f"unknown message kind {kind_code}")
    if flags & ~_KNOWN_FLAGS:
        raise WireError(f"unknown flag bits {flags:#x}")
    if ndim > MAX_NDIM:
        raise WireError(f"rank {ndim} > {MAX_NDIM}")
    if name_len > MAX_NAME_BYTES:
        raise WireError(f"name of {name_len} bytes > {MAX_NAME_BYTES}")
    expect = HEADER.size + name_len + _DIM.size * ndim
    if head.nbytes != expect:
        raise WireError(f"header is {head.nbytes} bytes, its fields say {expect}")
    if trainer_id < -1:
        raise WireError(f"trainer id {trainer_id} < -1")
    if step < -1:
        raise WireError(f"step {step} < -1")
    try:
        name = bytes(head[HEADER.size:HEADER.size + name_len]).decode("ascii")
    except UnicodeDecodeError:
        raise WireError("variable name is not ASCII") from None
    if name and not _NAME_RE.fullmatch(name):
        raise WireError(f"variable name {name[:80]!r} has characters outside [A-Za-z0-9_.@:/-]")
    need_name, value_rule = _RULES[kind]
    if need_name and not name:
        raise WireError(f"{kind.name} without a variable name")
    off = HEADER.size + name_len
    dims = _DIMS[ndim].unpack_from(head, off)

    selected = bool(flags & _FLAG_SELECTED_ROWS)
    if code == 0:
        if ndim or nbytes or height or selected:
            raise WireError("a message without a value declares a shape, size or rows")
        if value_rule is not None and kind is not Kind.REPLY_VALUE:
            raise WireError(f"{kind.name} needs a value")
        payload_sizes: list[int] = []
        itemsize, tdtype = 0, None
    else:
        if code not in WIRE_DTYPES:
            raise WireError(f"dtype code {code} is not an allowed dtype")
        if value_rule is None:
            raise WireError(f"{kind.name} carries no value, but one is declared")
        _, tdtype, itemsize = WIRE_DTYPES[code]
        if dims and min(dims) < 0:
            raise WireError(f"negative dimension in shape {list(dims)}")
        numel = math.prod(dims)
        if selected:
            if value_rule != "any":
                raise WireError(f"{kind.name} cannot carry SelectedRows")
            if ndim < 1:
                raise WireError("SelectedRows values need rank >= 1")
            if height < 0:
                raise WireError(f"SelectedRows height {height} < 0")
            payload_sizes = [dims[0] * 8, numel * itemsize]
        else:
            if height:
                raise WireError("a dense tensor declares a SelectedRows height")
            if value_rule == "rows" and (tdtype is not torch.int64 or ndim != 1):
                raise WireError(f"{kind.name} needs a 1-D int64 tensor of row ids")
            if value_rule == "text" and (tdtype is not torch.uint8 or ndim != 1
                                         or numel > MAX_TEXT_BYTES):
                raise WireError(f"{kind.name} needs 1-D uint8 text of <= {MAX_TEXT_BYTES} bytes")
            if value_rule == "bytes" and (tdtype is not torch.uint8 or ndim != 1):
                raise WireError(f"{kind.name} needs 1-D uint8 bytes")
            payload_sizes = [numel * itemsize]
        if sum(payload_sizes) != nbytes:
            raise WireError(f"header says {nbytes} payload bytes, shape {list(dims)} of "
                            f"{WIRE_DTYPES[code][0]} needs {sum(payload_sizes)}")
    if nbytes > limit:
        raise WireError(f"payload of {nbytes} bytes exceeds the limit of {limit}")
    has_mac = bool(flags & _FLAG_MAC)
    if flags & _FLAG_SPLIT:
        part_frames = [_frame_sizes(size, True) for size in payload_sizes]
        sizes = [size for part in part_frames for size in part]
    else:  # NOTE: the usual message: one frame per part
        part_frames = [[size] for size in payload_sizes]
        sizes = payload_sizes
    n_payload = len(sizes)
    want = 1 + n_payload + has_mac
    if len(frames) != want:
        raise WireError(f"{kind.name} with {n_payload} payload frame(s)"
                        f"{' and a MAC' if has_mac else ''} needs {want} frames, got "
                        f"{len(frames)}")
    payload = []
    for i in range(n_payload):
        p = _view(frames[1 + i])
        if p.nbytes != sizes[i]:
            raise WireError(f"payload frame {i} has {p.nbytes} bytes, header says {sizes[i]}")
        payload.append(p)
    counter = 0
    if has_mac:
        mac = _view(frames[-1])
        if mac.nbytes != MAC_BYTES:
            raise WireError(f"MAC frame of {mac.nbytes} bytes, expected {MAC_BYTES}")
        counter = _COUNTER.unpack_from(mac)[0]
    if secret:
        if not has_mac:
            raise WireError("message is not authenticated (no MAC) but this endpoint "
                            f"requires the shared secret (${SECRET_ENV})")
        if not hmac.compare_digest(bytes(mac), _mac(secret, _channel_of(kind, channel),
                                                    counter, head, payload)):
            raise WireError(f"MAC mismatch: the peer does not know this endpoint's shared "
                            f"secret (${SECRET_ENV}), or the message belongs to another "
                            "channel (another connection, job or server)")

    # Everything is checked: now allocate exactly what was declared.
    value: Value | None = None
    first = 1
    parts = []
    for sizes, size in zip(part_frames, payload_sizes):
        parts.append((frames[first:first + len(sizes)], payload[first - 1:first - 1 + len(sizes)],
                      size))
        first += len(sizes)
    if tdtype is not None and selected:
        rows = _part_tensor(*parts[0], torch.int64, (dims[0],))
        if rows.numel() and (int(rows.min()) < 0 or int(rows.max()) >= height):
            raise WireError(f"SelectedRows row ids outside [0, {height})")
        value = SelectedRows(rows, _part_tensor(*parts[1], tdtype, dims), height)
    elif tdtype is not None:
        value = _part_tensor(*parts[0], tdtype, dims)
    if tdtype is torch.bool:  # NOTE: a bool byte other than 0 or 1 is undefined behaviour
        data = value.value if isinstance(value, SelectedRows) else value
        if data.numel() and int(data.view(torch.uint8).max()) > 1:
            raise WireError("bool payload has bytes other than 0 and 1")
    return _new_message(Message, (kind, name, value, trainer_id, seq, step, counter))
