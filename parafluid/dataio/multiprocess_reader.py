"""``fluid.io.multiprocess_reader``: readers run in child processes, their samples merged.

Each reader runs in a forked child; its samples cross to the parent in a small binary
encoding of this module (never pickle): numpy arrays of numeric dtypes, ints, floats,
bools, strings, bytes, and lists / tuples of those. The parent checks every frame before it
allocates anything (known tags, lengths within the frame, dtype allowed, shape matching the
bytes, bounded nesting).

- ``use_pipe=True``: the children are read in turn, one sample each (Fluid's order).
- ``use_pipe=False``: samples are taken as they arrive, from whichever child is ready.

A child has at most ``queue_size / len(readers)`` samples (at least one) that the parent
has not taken, so a fast reader does not fill memory. A reader that raises, a child that
dies, or a sample that is ``None`` makes the merged reader raise, naming the reader (its
index and pid) and what happened. Every child is stopped (by its pid) when the merged
reader ends, fails, or is closed early.

Example::

    def part(lo, hi):
        def reader():
            for i in range(lo, hi):
                yield np.full([4], i, "float32"), i
        return reader

    merged = fluid.io.multiprocess_reader([part(0, 50), part(50, 100)], use_pipe=False)
    for x, i in merged():
        ...
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection as mpc
import os
import struct
import sys
import time
import traceback
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from ..flags import flag

__all__ = ["multiprocess_reader", "encode_sample", "decode_sample"]

_DTYPES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
           "float16", "float32", "float64")
_MAX_DEPTH = 32
_MAX_NDIM = 32
_POLL_S = 0.2  # how often the parent looks whether a silent child is still alive

# frame kinds (first byte of a frame)
_SAMPLE, _END, _ERROR = b"S", b"E", b"X"
_ACK = b"A"


# ------------------------------------------------------------------------------ encoding
def encode_sample(value: Any) -> bytes:
    """The bytes of one sample (numpy arrays, numbers, strings, bytes, lists, tuples).

    Example::

        decode_sample(encode_sample((np.ones([2, 3], "float32"), 7)))
    """
    out: list[bytes] = []
    _encode(value, out, 0)
    return b"".join(out)


def _encode(value: Any, out: list[bytes], depth: int) -> None:
    if depth > _MAX_DEPTH:
        raise ValueError(f"multiprocess_reader: a sample nests deeper than {_MAX_DEPTH}")
    if isinstance(value, (bool, np.bool_)):
        out.append(b"b" + (b"\x01" if value else b"\x00"))
    elif isinstance(value, (int, np.integer)):
        v = int(value)
        if not -(1 << 63) <= v < (1 << 63):
            raise ValueError(f"multiprocess_reader: the int {v} does not fit in 64 bits; "
                             "send it as a numpy array of a wide dtype or as a string")
        out.append(b"i" + struct.pack("<q", v))
    elif isinstance(value, (float, np.floating)):
        out.append(b"f" + struct.pack("<d", float(value)))
    elif isinstance(value, str):
        raw = value.encode("utf-8")
        out.append(b"s" + struct.pack("<Q", len(raw)) + raw)
    elif isinstance(value, (bytes, bytearray)):
        out.append(b"y" + struct.pack("<Q", len(value)) + bytes(value))
    elif isinstance(value, np.ndarray):
        name = value.dtype.name
        if name not in _DTYPES:
            raise TypeError(f"multiprocess_reader: arrays of dtype {name} cannot be sent; the "
                            f"dtypes are {', '.join(_DTYPES)}")
        raw = np.ascontiguousarray(value).astype(value.dtype.newbyteorder("<"),
                                                 copy=False).tobytes()
        dt = name.encode()
        out.append(b"a" + bytes([len(dt)]) + dt + bytes([value.ndim])
                   + struct.pack(f"<{value.ndim}Q", *value.shape) + raw)
    elif isinstance(value, (list, tuple)):
        out.append((b"l" if isinstance(value, list) else b"t") + struct.pack("<Q", len(value)))
        for item in value:
            _encode(item, out, depth + 1)
    else:
        raise TypeError(f"multiprocess_reader: a sample holds a {type(value).__name__}; "
                        "samples may hold numpy arrays, numbers, strings, bytes and "
                        "lists / tuples of them")


def decode_sample(data: bytes) -> Any:
    """The sample ``encode_sample`` wrote; malformed bytes are a ValueError saying where."""
    value, pos = _decode(memoryview(data), 0, 0)
    if pos != len(data):
        raise ValueError(f"multiprocess_reader: {len(data) - pos} bytes after the sample")
    return value


def _need(buf: memoryview, pos: int, n: int, what: str) -> None:
    if n < 0 or pos + n > len(buf):
        raise ValueError(f"multiprocess_reader: a sample's {what} needs {n} bytes at offset "
                         f"{pos} but the frame has {len(buf) - pos} left")


def _decode(buf: memoryview, pos: int, depth: int) -> tuple[Any, int]:
    if depth > _MAX_DEPTH:
        raise ValueError(f"multiprocess_reader: a sample nests deeper than {_MAX_DEPTH}")
    _need(buf, pos, 1, "tag")
    tag = bytes(buf[pos:pos + 1])
    pos += 1
    if tag == b"b":
        _need(buf, pos, 1, "bool")
        if buf[pos] not in (0, 1):
            raise ValueError(f"multiprocess_reader: a bool byte is {buf[pos]}, not 0 or 1")
        return bool(buf[pos]), pos + 1
    if tag in (b"i", b"f"):
        _need(buf, pos, 8, "number")
        return struct.unpack_from("<q" if tag == b"i" else "<d", buf, pos)[0], pos + 8
    if tag in (b"s", b"y", b"l", b"t"):
        _need(buf, pos, 8, "length")
        (n,) = struct.unpack_from("<Q", buf, pos)
        pos += 8
        if tag in (b"s", b"y"):
            _need(buf, pos, n, "text" if tag == b"s" else "bytes")
            raw = bytes(buf[pos:pos + n])
            return (raw.decode("utf-8") if tag == b"s" else raw), pos + n
        # every item takes at least 2 bytes: a longer list cannot be in the frame
        _need(buf, pos, 2 * n, f"list of {n} items")
        items = []
        for _ in range(n):
            item, pos = _decode(buf, pos, depth + 1)
            items.append(item)
        return (items if tag == b"l" else tuple(items)), pos
    if tag == b"a":
        _need(buf, pos, 1, "dtype length")
        n = buf[pos]
        _need(buf, pos + 1, n + 1, "dtype")
        name = bytes(buf[pos + 1:pos + 1 + n]).decode("ascii", "replace")
        if name not in _DTYPES:
            raise ValueError(f"multiprocess_reader: an array has dtype {name!r}; the dtypes "
                             f"are {', '.join(_DTYPES)}")
        pos += 1 + n
        ndim = buf[pos]
        pos += 1
        if ndim > _MAX_NDIM:
            raise ValueError(f"multiprocess_reader: an array has {ndim} dimensions (at most "
                             f"{_MAX_NDIM})")
        _need(buf, pos, 8 * ndim, "shape")
        shape = struct.unpack_from(f"<{ndim}Q", buf, pos)
        pos += 8 * ndim
        dtype = np.dtype(name).newbyteorder("<")
        count = 1
        for d in shape:
            count *= d
        _need(buf, pos, count * dtype.itemsize, f"array of shape {list(shape)} ({name})")
        arr = np.frombuffer(buf, dtype, count, pos).reshape(shape).astype(name)
        return arr, pos + count * dtype.itemsize
    raise ValueError(f"multiprocess_reader: unknown tag {tag!r} at offset {pos - 1}")


# ------------------------------------------------------------------------------ children
def _child(reader: Callable[[], Iterable[Any]], conn: Any, window: int) -> None:
    """Run ``reader`` and send its samples; at most ``window`` not yet taken."""
    code = 0
    try:
        unacked = 0
        for sample in reader():
            if sample is None:
                raise ValueError("the reader yielded None (a sample must hold data)")
            frame = _SAMPLE + encode_sample(sample)
            # NOTE: take the parent's acknowledgements as they come (not only when the window
            # is full): unread, they would fill the socket and block the parent's next one
            while unacked >= window or conn.poll(0):
                conn.recv_bytes()  # the parent took one; EOFError when it is gone
                unacked -= 1
            conn.send_bytes(frame)
            unacked += 1
        conn.send_bytes(_END)
    except (EOFError, BrokenPipeError):
        code = 0  # the parent stopped reading
    except BaseException as e:
        code = 1
        text = "".join(traceback.format_exception_only(type(e), e)).strip()
        try:
            conn.send_bytes(_ERROR + text.encode("utf-8", "replace"))
        except OSError:
            pass
    finally:
        try:
            conn.close()
        finally:
            sys.stdout.flush()
            os._exit(code)  # NOTE: no parent atexit handlers or finalizers in a fork


class _Child:
    def __init__(self, index: int, process: Any, conn: Any) -> None:
        self.index, self.process, self.conn = index, process, conn
        self.done = False

    def name(self) -> str:
        return f"reader {self.index} (pid {self.process.pid})"

    def take(self) -> tuple[bool, Any]:
        """(True, sample) or (False, None) at its end; raises naming the child."""
        try:
            frame = self.conn.recv_bytes()
        except (EOFError, OSError):
            self.process.join(timeout=1.0)
            raise RuntimeError(f"multiprocess_reader: {self.name()} died (exit code "
                               f"{self.process.exitcode}) before the end of its "
                               "samples") from None
        kind, body = frame[:1], frame[1:]
        if kind == _END:
            self.done = True
            return False, None
        if kind == _ERROR:
            raise RuntimeError(f"multiprocess_reader: {self.name()} raised "
                               f"{body.decode('utf-8', 'replace')}")
        if kind != _SAMPLE:
            raise ValueError(f"multiprocess_reader: {self.name()} sent a frame of unknown "
                             f"kind {kind!r}")
        try:
            sample = decode_sample(body)
        except ValueError as e:
            raise ValueError(f"{e} (from {self.name()})") from None
        try:
            self.conn.send_bytes(_ACK)
        except OSError:
            pass  # it ended meanwhile; its END frame or death is seen next
        return True, sample

    def stop(self) -> None:
        self.conn.close()
        if self.process.is_alive():
            self.process.kill()
        self.process.join(timeout=5.0)


def multiprocess_reader(readers: Sequence[Callable[[], Iterable[Any]]], use_pipe: bool = True,
                        queue_size: int = 1000) -> Callable[[], Iterator[Any]]:
    """A reader yielding the samples of ``readers``, each run in a child process.

    Args:
        readers: reader functions (no argument, returning an iterable of samples).
        use_pipe: take the children's samples in turn (True) or as they arrive (False).
        queue_size: samples the children may have ready that the parent has not taken.

    Example::

        merged = fluid.io.multiprocess_reader([reader_a, reader_b], use_pipe=True)
        for sample in merged():
            ...
    """
    if isinstance(readers, (str, bytes)) or not isinstance(readers, Sequence) or not readers:
        raise TypeError("multiprocess_reader: readers must be a non-empty list of reader "
                        f"functions, got {readers!r}")
    for i, r in enumerate(readers):
        if not callable(r):
            raise TypeError(f"multiprocess_reader: readers[{i}] is a {type(r).__name__}, not "
                            "a reader function (pass the function, not its result)")
    if isinstance(queue_size, bool) or not isinstance(queue_size, int) or queue_size <= 0:
        raise ValueError(f"multiprocess_reader: queue_size must be a positive int, got "
                         f"{queue_size!r}")
    readers = list(readers)
    window = max(1, queue_size // len(readers))

    def merged() -> Iterator[Any]:
        # NOTE: fork, as Fluid: a reader is usually a closure, which no other start
        # method can hand to a child without pickling it
        ctx = multiprocessing.get_context("fork")
        children: list[_Child] = []
        try:
            for i, reader in enumerate(readers):
                parent_conn, child_conn = ctx.Pipe(duplex=True)
                proc = ctx.Process(target=_child, args=(reader, child_conn, window),
                                   name=f"multiprocess_reader-{i}", daemon=True)
                proc.start()
                child_conn.close()
                children.append(_Child(i, proc, parent_conn))
            if use_pipe:
                yield from _in_turn(children)
            else:
                yield from _as_ready(children)
        finally:
            for child in children:
                child.stop()

    return merged


def _check_alive(child: _Child) -> None:
    """Raise if ``child`` is gone with no frame left to read."""
    if not child.process.is_alive() and not child.conn.poll(0):
        child.process.join(timeout=1.0)
        raise RuntimeError(f"multiprocess_reader: {child.name()} died (exit code "
                           f"{child.process.exitcode}) before the end of its samples")


def _deadline_s() -> float:
    return flag("FLAGS_reader_deadline") / 1000.0


def _stuck(children: list[_Child], waited_s: float) -> RuntimeError:
    names = ", ".join(c.name() for c in children)
    return RuntimeError(f"multiprocess_reader: {names} sent no sample for {waited_s:.1f} s "
                        "and is still running: its reader is stuck (or slower than "
                        "FLAGS_reader_deadline, in ms, allows; raise it for a reader that "
                        "takes longer)")


def _wait_readable(child: _Child) -> None:
    """Wait until ``child`` has a frame (or is gone), looking at its liveness meanwhile;
    past FLAGS_reader_deadline, raise naming it."""
    limit = _deadline_s()
    start = time.monotonic()
    while not child.conn.poll(_POLL_S):
        _check_alive(child)
        if time.monotonic() - start > limit:
            raise _stuck([child], time.monotonic() - start)


def _in_turn(children: list[_Child]) -> Iterator[Any]:
    live = list(children)
    while live:
        for child in list(live):
            _wait_readable(child)
            ok, sample = child.take()
            if ok:
                yield sample
            else:
                live.remove(child)


def _as_ready(children: list[_Child]) -> Iterator[Any]:
    live = {child.conn: child for child in children}
    limit = _deadline_s()
    last = time.monotonic()
    while live:
        ready = mpc.wait(list(live), timeout=_POLL_S)
        if not ready:
            for child in live.values():
                _check_alive(child)
            if time.monotonic() - last > limit:
                raise _stuck(list(live.values()), time.monotonic() - last)
            continue
        last = time.monotonic()
        for conn in ready:
            child = live[conn]
            ok, sample = child.take()
            if ok:
                yield sample
            else:
                del live[conn]
