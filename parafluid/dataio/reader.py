"""Reader decorators (Fluid's ``paddle.reader``): a *reader* is a function taking no
argument that returns an iterable of samples; a decorator wraps readers into new readers.

Example::

    def reader():
        for i in range(10):
            yield np.full([4], i, "float32"), i % 2

    for minibatch in fluid.io.batch(fluid.io.shuffle(reader, buf_size=10), batch_size=4)():
        print(len(minibatch))   # 4, 4, 2
"""

from __future__ import annotations

import collections
import gzip
import itertools
import queue
import random
import shlex
import subprocess
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any

from .multiprocess_reader import multiprocess_reader

__all__ = ["batch", "shuffle", "buffered", "chain", "compose", "firstn", "map_readers",
           "ComposeNotAligned", "cache", "xmap_readers", "PipeReader", "Fake",
           "multiprocess_reader"]

Reader = Callable[[], Iterable[Any]]


def _check_reader(reader: Any, where: str) -> None:
    if not callable(reader):
        raise TypeError(f"{where}: a reader is a function returning an iterable of samples, "
                        f"got {type(reader).__name__}; pass the function, not its result")


def _check_positive_int(value: Any, name: str, where: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{where}: {name} must be a positive int, got {value!r}")


def batch(reader: Reader, batch_size: int, drop_last: bool = False) -> Reader:
    """Group the samples of ``reader`` into lists of ``batch_size`` (the last may be shorter).

    Args:
        reader: a function returning an iterable of samples.
        batch_size: samples per batch.
        drop_last: drop a last batch shorter than ``batch_size``.

    Example::

        train_reader = fluid.io.batch(reader, batch_size=32, drop_last=True)
        for minibatch in train_reader():
            feed = feeder.feed(minibatch)
    """
    _check_reader(reader, "batch")
    _check_positive_int(batch_size, "batch_size", "batch")

    def batch_reader() -> Iterator[list[Any]]:
        group: list[Any] = []
        for sample in reader():
            group.append(sample)
            if len(group) == batch_size:
                yield group
                group = []
        if group and not drop_last:
            yield group

    return batch_reader


def shuffle(reader: Reader, buf_size: int) -> Reader:
    """Shuffle within windows of ``buf_size`` samples (Python's ``random``; seed it to repeat)."""
    _check_reader(reader, "shuffle")
    _check_positive_int(buf_size, "buf_size", "shuffle")

    def shuffled() -> Iterator[Any]:
        buf: list[Any] = []
        for sample in reader():
            buf.append(sample)
            if len(buf) >= buf_size:
                random.shuffle(buf)
                yield from buf
                buf = []
        random.shuffle(buf)
        yield from buf

    return shuffled


def chain(*readers: Reader) -> Reader:
    """The samples of each reader in turn."""
    for r in readers:
        _check_reader(r, "chain")

    def chained() -> Iterator[Any]:
        for r in readers:
            yield from r()

    return chained


class ComposeNotAligned(ValueError):
    """``compose``: the readers yielded different numbers of samples."""


def compose(*readers: Reader, check_alignment: bool = True) -> Reader:
    """Zip readers: each output sample is the concatenation of their samples (as tuples).

    With ``check_alignment`` (the default), readers of different lengths raise
    ``ComposeNotAligned``; otherwise the output stops at the shortest.
    """
    for r in readers:
        _check_reader(r, "compose")

    def as_tuple(x: Any) -> tuple:
        return x if isinstance(x, tuple) else (x,)

    def composed() -> Iterator[tuple]:
        its = [iter(r()) for r in readers]
        if not check_alignment:
            for parts in zip(*its):
                yield sum((as_tuple(p) for p in parts), ())
            return
        sentinel = object()
        for parts in itertools.zip_longest(*its, fillvalue=sentinel):
            if any(p is sentinel for p in parts):
                raise ComposeNotAligned("compose: the readers yielded different numbers of "
                                        "samples; pass check_alignment=False to stop at the "
                                        "shortest")
            yield sum((as_tuple(p) for p in parts), ())

    return composed


def firstn(reader: Reader, n: int) -> Reader:
    """At most the first ``n`` samples."""
    _check_reader(reader, "firstn")
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"firstn: n must be an int >= 0, got {n!r}")

    def first() -> Iterator[Any]:
        yield from itertools.islice(reader(), n)

    return first


def map_readers(func: Callable[..., Any], *readers: Reader) -> Reader:
    """``func(s1, s2, ...)`` for each tuple of samples of the readers (stops at the shortest)."""
    for r in readers:
        _check_reader(r, "map_readers")

    def mapped() -> Iterator[Any]:
        for parts in zip(*(r() for r in readers)):
            yield func(*parts)

    return mapped


_END = object()


class _Failure:
    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


def buffered(reader: Reader, size: int) -> Reader:
    """Read ahead up to ``size`` samples in a background thread.

    An exception in ``reader`` is re-raised where the samples are consumed; abandoning the
    iteration stops the thread.
    """
    _check_reader(reader, "buffered")
    _check_positive_int(size, "size", "buffered")

    def buffered_reader() -> Iterator[Any]:
        q: queue.Queue = queue.Queue(maxsize=size)
        stop = threading.Event()

        def put(item: Any) -> bool:
            while not stop.is_set():
                try:
                    q.put(item, timeout=0.1)
                    return True
                except queue.Full:
                    continue
            return False

        def produce() -> None:
            try:
                for sample in reader():
                    if not put(sample):
                        return
            except BaseException as e:  # noqa: BLE001 (handed to the consumer)
                put(_Failure(e))
                return
            put(_END)

        worker = threading.Thread(target=produce, name="parafluid-buffered", daemon=True)
        worker.start()
        try:
            while True:
                try:
                    item = q.get(timeout=0.1)
                except queue.Empty:
                    if not worker.is_alive() and q.empty():
                        raise RuntimeError("buffered: the reader thread ended without "
                                           "finishing its samples") from None
                    continue
                if item is _END:
                    return
                if isinstance(item, _Failure):
                    raise item.exc
                yield item
        finally:
            stop.set()

    return buffered_reader


def cache(reader: Reader) -> Reader:
    """Read all samples of ``reader`` once (at the first pass) and replay them from memory.

    Example::

        train = fluid.io.cache(slow_reader)
        for epoch in range(3):
            for sample in train():   # slow_reader runs once
                ...
    """
    _check_reader(reader, "cache")
    samples: list[Any] = []
    filled = []

    def cached() -> Iterator[Any]:
        if not filled:
            samples.extend(reader())
            filled.append(True)
        yield from samples
    return cached


def xmap_readers(mapper: Callable[[Any], Any], reader: Reader, process_num: int,
                 buffer_size: int, order: bool = False) -> Reader:
    """``mapper`` applied to each sample by ``process_num`` threads, at most ``buffer_size``
    samples in flight; ``order=True`` keeps the reader's order. An exception in ``mapper``
    is raised in the consumer.

    Example::

        decoded = fluid.io.xmap_readers(decode_image, file_reader, process_num=4,
                                        buffer_size=32, order=True)
    """
    _check_reader(reader, "xmap_readers")
    _check_positive_int(process_num, "process_num", "xmap_readers")
    _check_positive_int(buffer_size, "buffer_size", "xmap_readers")

    def xmapped() -> Iterator[Any]:
        pending: collections.deque[Future] = collections.deque()
        with ThreadPoolExecutor(max_workers=process_num,
                                thread_name_prefix="xmap_readers") as pool:
            try:
                for sample in reader():
                    pending.append(pool.submit(mapper, sample))
                    while len(pending) >= buffer_size:
                        yield from _take(pending, order)
                while pending:
                    yield from _take(pending, order)
            finally:
                for f in pending:
                    f.cancel()
    return xmapped


def _take(pending: collections.deque[Future], order: bool) -> Iterator[Any]:
    if order:
        yield pending.popleft().result()
        return
    done, _ = wait(pending, return_when=FIRST_COMPLETED)
    for f in [f for f in pending if f in done]:
        pending.remove(f)
        yield f.result()


class PipeReader:
    """Lines of the standard output of ``command`` (``file_type`` ``"plain"`` or ``"gzip"``).

    Example::

        for line in fluid.io.PipeReader("cat data.txt").get_line():
            ...
    """

    def __init__(self, command: str, bufsize: int = 8192, file_type: str = "plain") -> None:
        if not isinstance(command, str) or not command.strip():
            raise TypeError(f"PipeReader: command must be a non-empty str, got {command!r}")
        if file_type not in ("plain", "gzip"):
            raise ValueError(f"PipeReader: file_type must be 'plain' or 'gzip', got "
                             f"{file_type!r}")
        self.command, self.bufsize, self.file_type = command, int(bufsize), file_type

    def get_line(self, cut_lines: bool = True, line_break: str = "\n") -> Iterator[str]:
        """The lines (``cut_lines``; without ``line_break``) or raw chunks of the output."""
        proc = subprocess.Popen(shlex.split(self.command), bufsize=self.bufsize,
                                stdout=subprocess.PIPE)
        try:
            stream: Any = gzip.GzipFile(fileobj=proc.stdout) if self.file_type == "gzip" \
                else proc.stdout
            remained = ""
            while True:
                chunk = stream.read(self.bufsize)
                if not chunk:
                    break
                text = chunk.decode("utf-8")
                if not cut_lines:
                    yield text
                    continue
                lines = (remained + text).split(line_break)
                remained = lines.pop()
                yield from lines
            if cut_lines and remained:
                yield remained
        finally:
            proc.kill()
            proc.wait()


class Fake:
    """A reader that repeats the first sample of ``reader`` ``data_num`` times (to time a
    model without the cost of reading).

    Example::

        fake_reader = fluid.io.Fake()(reader, data_num=1000)
    """

    def __init__(self) -> None:
        self.data: Any = None
        self.yield_num = 0

    def __call__(self, reader: Reader, data_num: int) -> Reader:
        _check_reader(reader, "Fake")

        def fake_reader() -> Iterator[Any]:
            if self.data is None:
                self.data = next(iter(reader()))
            while self.yield_num < data_num:
                yield self.data
                self.yield_num += 1
            self.yield_num = 0
        return fake_reader


def __getattr__(name: str) -> object:
    from ..compat import missing_attribute

    return missing_attribute("reader", name, __all__)
