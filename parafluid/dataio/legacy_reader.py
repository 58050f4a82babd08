"""Fluid's legacy readers: ``py_reader``, ``create_py_reader_by_data``, ``read_file``,
``double_buffer``, and the queue behind the non-iterable ``DataLoader``.

A ``QueueReader`` holds a bounded queue of ``capacity`` batches, filled by a background
thread that runs the user's generator, checks each value against its data variable (dtype,
shape, LoD) and makes it a tensor. The programs hold Fluid's reader ops
(``parafluid/ops/reader.py``): ``create_py_reader`` in the startup program,
``create_double_buffer_reader`` (when double-buffered) and ``read`` in the main program,
which takes the batches: ``exe.run`` needs no feed, and raises ``fluid.core.EOFException``
once the generator is exhausted. Fluid's training loop::

    reader = fluid.layers.py_reader(capacity=8, shapes=[(-1, 4), (-1, 1)],
                                    dtypes=["float32", "int64"])
    x, y = fluid.layers.read_file(reader)
    ...                                 # build the network on x, y
    reader.decorate_paddle_reader(fluid.io.batch(samples, batch_size=16))
    for epoch in range(2):
        reader.start()
        try:
            while True:
                exe.run(main, fetch_list=[loss])
        except fluid.core.EOFException:
            reader.reset()

With a ParallelExecutor (``CompiledProgram.with_data_parallel``) each device's ``read`` op
takes its own batch: the ``n`` devices of a step get ``n`` consecutive batches, device ``i``
the ``i``-th, so a step equals one Executor step fed with those batches concatenated. When
fewer than ``n`` batches are left the step raises ``EOFException`` (the rest is dropped).
"""

from __future__ import annotations

import functools
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
import torch

from .. import unique_name
from ..dtypes import VarType, convert_dtype
from ..feed_fetch import as_feed_tensor
from ..framework import Block, Program, Variable, default_main_program, default_startup_program
from ..ops.reader import EOFException, register_reader
from ..place import to_device
from ..scope import LoDTensor
from .data_feeder import DataFeeder
from .reader import batch as batch_reader

__all__ = ["QueueReader", "LoDTensorBlockingQueue", "EOFException", "py_reader",
           "create_py_reader_by_data", "read_file", "double_buffer"]

_POLL_S = 0.05
_RESET_WAIT_S = 2.0  # how long reset() waits for a producer busy in the user's generator


class _Epoch:
    """One epoch's batches: a bounded queue, its end, and the generator's error if any.

    A condition, not a ``queue.Queue``: closing wakes a waiting reader at once (the end of
    an epoch costs no polling interval).
    """

    __slots__ = ("items", "capacity", "cond", "closed", "failure", "pushed")

    def __init__(self, capacity: int) -> None:
        self.items: deque[list[torch.Tensor]] = deque()
        self.capacity = capacity
        self.cond = threading.Condition()
        self.closed = False
        self.failure: BaseException | None = None
        self.pushed = 0

    def put(self, batch: list[torch.Tensor]) -> bool:
        """Wait for room; False when the epoch was closed meanwhile (the batch is dropped)."""
        with self.cond:
            while len(self.items) >= self.capacity and not self.closed:
                self.cond.wait(_POLL_S)
            if self.closed:
                return False
            self.items.append(batch)
            self.pushed += 1
            self.cond.notify_all()
            return True

    def get(self, timeout: float) -> list[torch.Tensor] | None:
        """The next batch, or None when there is none after ``timeout`` s (or it closed)."""
        with self.cond:
            if not self.items and not self.closed:
                self.cond.wait(timeout)
            if not self.items:
                return None
            batch = self.items.popleft()
            self.cond.notify_all()
            return batch

    def close(self, failure: BaseException | None = None) -> None:
        with self.cond:
            if failure is not None and not self.closed:
                self.failure = failure
            self.closed = True
            self.cond.notify_all()

    def drain(self) -> None:
        with self.cond:
            self.items.clear()
            self.cond.notify_all()

    def exhausted(self) -> bool:
        with self.cond:
            return self.closed and not self.items


class LoDTensorBlockingQueue:
    """The queue between Python and a reader's ``read`` op (``reader.queue``, as Fluid's).

    ``push(batch)`` from any thread (a list with one array or LoDTensor per field; waits
    while the queue is full; False once it is closed), ``close()`` when the data ends (the
    reads then take what is left and raise ``EOFException``). ``reader.start()`` runs a
    thread that pushes what the decorated generator yields; ``reader.reset()`` reopens the
    queue empty.
    """

    def __init__(self, reader: QueueReader, capacity: int) -> None:
        self._reader = reader
        self._capacity = capacity
        self._epoch = _Epoch(capacity)

    def push(self, batch: Sequence[Any]) -> bool:
        epoch = self._epoch
        if epoch.closed:
            return False
        return epoch.put(self._reader._tensors(batch, epoch.pushed))

    def close(self) -> None:
        self._epoch.close()

    def kill(self) -> None:
        """Close and drop the batches not read."""
        self._epoch.close()
        self._epoch.drain()

    def is_closed(self) -> bool:
        return self._epoch.closed

    def size(self) -> int:
        return len(self._epoch.items)

    def capacity(self) -> int:
        return self._capacity

    def _reopen(self) -> _Epoch:
        old, self._epoch = self._epoch, _Epoch(self._capacity)
        return old


class QueueReader:
    """A reader fed from Python through a queue: what ``py_reader`` returns.

    ``decorate_paddle_reader`` / ``decorate_sample_list_generator`` take a function
    returning minibatches (lists of samples, as ``fluid.io.batch`` makes);
    ``decorate_tensor_provider`` / ``decorate_batch_generator`` one returning whole batches
    (a list of arrays or LoDTensors, one per data variable); ``decorate_sample_generator``
    one returning samples, batched here. ``start()`` begins an epoch, ``reset()`` ends it.

    Args:
        name: the reader's name (in errors and in the ``read`` op's attrs).
        fields: the data variables describing each batch field (shape, dtype, lod_level).
        capacity: how many batches to prepare ahead.
        use_double_buffer: accepted as in Fluid: batches are always prepared ahead, as
            tensors; ``double_buffer(reader, place)`` also moves them to ``place`` ahead.
        timeout: seconds a ``read`` waits for a batch before raising (None: no limit).
    """

    def __init__(self, name: str, fields: Sequence[Variable], capacity: int,
                 use_double_buffer: bool = True, timeout: float | None = None) -> None:
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity <= 0:
            raise ValueError(f"{name}: capacity must be a positive int (batches to prepare "
                             f"ahead), got {capacity!r}")
        if timeout is not None and timeout <= 0:
            raise ValueError(f"{name}: timeout must be > 0 seconds or None, got {timeout!r}")
        self.name = name
        self.capacity = capacity
        self.use_double_buffer = use_double_buffer
        self._fields = list(fields)
        self._timeout = timeout
        self._device = torch.device("cpu")  # where the producer puts the batches
        self._provider: Callable[[], Iterable[Sequence[Any]]] | None = None
        self._lock = threading.Lock()
        self.queue = LoDTensorBlockingQueue(self, capacity)
        self._thread: threading.Thread | None = None
        self._group: dict[int, list[torch.Tensor]] = {}
        self._eof = False
        self.reader_id = register_reader(self)
        # the main program's reader variable the read ops take from (add_reader_ops)
        self.var: Variable | None = None

    @property
    def thread(self) -> threading.Thread | None:
        """The producer thread of the epoch ``start()`` began (None before)."""
        return self._thread

    @property
    def exited(self) -> bool:
        """True once the producer was told to stop (setting it True stops it, as in Fluid)."""
        return self.queue.is_closed()

    @exited.setter
    def exited(self, value: bool) -> None:
        if value:
            self.queue.close()

    # ---- what the data looks like
    @property
    def shapes(self) -> list[list[int]]:
        return [list(v.shape) for v in self._fields]

    @property
    def dtypes(self) -> list[str]:
        return [v.dtype for v in self._fields]

    @property
    def lod_levels(self) -> list[int]:
        return [v.lod_level for v in self._fields]

    # ---- sources
    def decorate_tensor_provider(self, reader: Callable[[], Iterable[Sequence[Any]]]
                                 ) -> QueueReader:
        """``reader()`` yields whole batches: a list of arrays (or LoDTensors), one per
        data variable, in order."""
        _check_callable(reader, self.name)
        self._provider = reader
        return self

    decorate_batch_generator = decorate_tensor_provider

    def decorate_paddle_reader(self, reader: Callable[[], Iterable[Any]],
                               places: Any = None) -> QueueReader:
        """``reader()`` yields minibatches: lists of samples (``fluid.io.batch`` output)."""
        _check_callable(reader, self.name)
        feeder = DataFeeder(self._fields, None, program=self._fields[0].block.program)
        names = [v.name for v in self._fields]

        def batches() -> Iterable[list[Any]]:
            for minibatch in reader():
                feed = feeder.feed(minibatch)
                yield [feed[n] for n in names]

        self._provider = batches
        return self

    decorate_sample_list_generator = decorate_paddle_reader

    def decorate_sample_generator(self, sample_generator: Callable[[], Iterable[Any]],
                                  batch_size: int, drop_last: bool = True,
                                  places: Any = None) -> QueueReader:
        """``sample_generator()`` yields samples; they are batched by ``batch_size``."""
        _check_callable(sample_generator, self.name)
        return self.decorate_paddle_reader(batch_reader(sample_generator, batch_size,
                                                        drop_last), places)

    # ---- epochs
    def start(self) -> None:
        """Start filling the queue for an epoch (after ``decorate_*``, and after ``reset()``
        when an epoch ran before)."""
        if self._provider is None:
            raise RuntimeError(f"{self.name}.start(): no data source; call "
                               "decorate_paddle_reader, decorate_sample_list_generator, "
                               "decorate_tensor_provider or decorate_batch_generator first")
        if self._thread is not None:
            raise RuntimeError(f"{self.name}.start(): the reader is already started; call "
                               "reset() at the end of an epoch (after EOFException) before "
                               "starting the next")
        epoch = self.queue._epoch
        self._thread = threading.Thread(target=self._produce, args=(self._provider, epoch),
                                        name=f"parafluid-{self.name}", daemon=True)
        self._thread.start()

    def reset(self) -> None:
        """End the epoch: stop the producer, drop the batches not read; ``start()`` again
        for the next epoch."""
        old = self.queue._reopen()
        old.close()
        old.drain()
        thread = self._thread
        if thread is not None:
            deadline = time.monotonic() + _RESET_WAIT_S
            while thread.is_alive() and time.monotonic() < deadline:
                thread.join(timeout=_POLL_S)
            # NOTE: a generator still inside next() after that is left to finish on its own:
            # the thread pushes into its own, closed epoch, so it exits at its next batch
            # without touching the next epoch's queue
        with self._lock:
            self._thread = None
            self._group = {}
            self._eof = False

    # ---- the producer thread
    def _produce(self, provider: Callable[[], Iterable[Sequence[Any]]], epoch: _Epoch
                 ) -> None:
        try:
            for i, fields in enumerate(provider()):
                if epoch.closed or not epoch.put(self._tensors(fields, i)):
                    return
        except BaseException as e:  # noqa: BLE001 (raised by the read op, in the run)
            epoch.close(failure=e)
            return
        epoch.close()

    def _tensors(self, fields: Any, index: int) -> list[torch.Tensor]:
        """One batch from the generator, checked against the data variables."""
        n = len(self._fields)
        if isinstance(fields, dict):
            fields = [fields[v.name] if v.name in fields else _missing(self.name, v.name, index)
                      for v in self._fields]
        if not isinstance(fields, (list, tuple)) or len(fields) != n:
            got = f"{type(fields).__name__} of {len(fields)}" \
                if isinstance(fields, (list, tuple)) else type(fields).__name__
            raise ValueError(f"{self.name}: batch {index} from the generator must be a list of "
                             f"{n} values ({', '.join(v.name for v in self._fields)}), got {got}")
        block = self._fields[0].block
        out = []
        for var, value in zip(self._fields, fields):
            if isinstance(value, (np.ndarray, torch.Tensor)):
                value = value.copy() if isinstance(value, np.ndarray) else value.clone()
                # (the generator may reuse its buffer for the next batch)
            elif not isinstance(value, (LoDTensor, torch.Tensor)):
                value = np.array(value, dtype=var.dtype)
            try:
                out.append(as_feed_tensor(block, var.name, value, self._device,
                                          shape_checked=_same_row_size(var, value)))
            except (TypeError, ValueError) as e:
                raise type(e)(f"{self.name}: batch {index}, field {var.name!r}: {e}") from None
        return out

    # ---- what the read op calls
    def take(self, device_index: int, device_count: int) -> list[torch.Tensor]:
        """The batch for ``device_index`` of this step: the step's ``device_count`` reads
        take consecutive batches, device ``i`` the ``i``-th, in whatever order they come."""
        with self._lock:
            if device_count == 1:
                return self._next()
            if device_index not in self._group:
                # NOTE: a new step; leftovers of a step that failed on another device go
                self._group = {}
                batches = [self._next() for _ in range(device_count)]
                self._group = dict(enumerate(batches))
            return self._group.pop(device_index)

    def _next(self) -> list[torch.Tensor]:
        if self._eof:
            raise EOFException(f"{self.name}: the data of this epoch is used up; call "
                               "reset() and start() for the next")
        epoch = self.queue._epoch
        if self._provider is not None and self._thread is None and not epoch.pushed \
                and not epoch.closed:
            raise RuntimeError(f"{self.name}: the program reads from the reader before "
                               f"start(); call {self.name}.start() before exe.run (and "
                               "reset() after EOFException)")
        deadline = None if self._timeout is None else time.monotonic() + self._timeout
        while True:
            batch = epoch.get(_POLL_S)
            if batch is not None:
                return batch
            if epoch.exhausted():
                self._eof = True
                if epoch.failure is not None:
                    raise epoch.failure  # the epoch is over; the error says why
                raise EOFException(f"{self.name}: the data of this epoch is used up; call "
                                   "reset() and start() for the next")
            thread = self._thread
            if thread is not None and not thread.is_alive() and not epoch.closed:
                raise RuntimeError(f"{self.name}: the producer thread stopped without "
                                   "finishing the epoch")
            if deadline is not None and time.monotonic() >= deadline:
                raise RuntimeError(f"{self.name}: no batch for {self._timeout:g} s; is the "
                                   "generator stuck?")

    def __repr__(self) -> str:
        return (f"<QueueReader {self.name}: capacity {self.capacity}, fields "
                f"{', '.join(f'{v.name} {list(v.shape)} {v.dtype}' for v in self._fields)}>")


def _same_row_size(var: Variable, value: Any) -> bool:
    """True when each row of ``value`` holds as many values as a row of the field ``var``
    declares, in another shape (a ``[N, 1, 1]`` label for a ``(-1, 1)`` field): Fluid's
    readers hand such a batch on as it is, and so does this one."""
    shape = value.shape() if isinstance(value, LoDTensor) and value.value is not None \
        else getattr(value, "shape", None)
    declared = var.shape
    if shape is None or declared is None or not declared or len(shape) == 0 or \
            any(d < 0 for d in declared[1:]) or tuple(shape) == tuple(declared):
        return False
    if declared[0] >= 0 and declared[0] != shape[0]:
        return False
    return math.prod(shape[1:]) == math.prod(declared[1:])


def _check_callable(reader: Any, where: str) -> None:
    if not callable(reader):
        raise TypeError(f"{where}: the generator must be a function returning an iterable, "
                        f"got {type(reader).__name__}; pass the function, not its result")


def _missing(where: str, name: str, index: int) -> Any:
    raise ValueError(f"{where}: batch {index} (a dict) has no entry for {name!r}")


# ---------------------------------------------------------------------- layers


def py_reader(capacity: int, shapes: Sequence[Sequence[int]], dtypes: Sequence[Any],
              lod_levels: Sequence[int] | None = None, name: str | None = None,
              use_double_buffer: bool = True) -> QueueReader:
    """A reader fed from Python (Fluid's ``fluid.layers.py_reader``); read it with
    ``read_file``.

    Args:
        capacity: how many batches to prepare ahead.
        shapes: one shape per field, batch dimension included (``(-1, 784)``).
        dtypes: one dtype per field.
        lod_levels: one LoD level per field (default 0 each).
        name: the reader's name (default ``create_py_reader_<n>``).
        use_double_buffer: accepted; batches are always prepared ahead.

    Example::

        reader = fluid.layers.py_reader(capacity=64, shapes=[(-1, 784), (-1, 1)],
                                        dtypes=["float32", "int64"])
        img, label = fluid.layers.read_file(reader)
    """
    if isinstance(shapes, (str, bytes)) or not isinstance(shapes, (list, tuple)) or not shapes:
        raise TypeError(f"py_reader: shapes must be a non-empty list of shapes, got {shapes!r}")
    if not isinstance(dtypes, (list, tuple)) or len(dtypes) != len(shapes):
        raise ValueError(f"py_reader: give one dtype per shape: {len(shapes)} shapes, dtypes "
                         f"{dtypes!r}")
    lod_levels = [0] * len(shapes) if lod_levels is None else list(lod_levels)
    if len(lod_levels) != len(shapes):
        raise ValueError(f"py_reader: give one lod level per shape: {len(shapes)} shapes, "
                         f"lod_levels {lod_levels!r}")
    names = reader_names(name)
    name = name if name is not None else names[1]
    # NOTE: the fields live in a program of their own: they describe the batches (for the
    # checks and the DataFeeder), the program's variables are the outputs of read_file
    block = Program().global_block()
    fields = []
    for i, (shape, dtype, lod) in enumerate(zip(shapes, dtypes, lod_levels)):
        dims = [-1 if d is None else int(d) for d in shape]
        fields.append(block.create_var(name=f"{name}.field_{i}", shape=dims,
                                       dtype=convert_dtype(dtype), lod_level=int(lod),
                                       type=VarType.LOD_TENSOR, is_data=True))
    reader = QueueReader(name, fields, capacity, use_double_buffer)
    add_reader_ops(reader, default_main_program().current_block(),
                   default_startup_program().current_block(), names, use_double_buffer)
    return reader


def create_py_reader_by_data(capacity: int, feed_list: Sequence[Variable],
                             name: str | None = None,
                             use_double_buffer: bool = True) -> QueueReader:
    """A ``py_reader`` whose fields are shaped like the data variables of ``feed_list``
    (Fluid's ``fluid.layers.create_py_reader_by_data``); read it with ``read_file``.

    Example::

        img = fluid.layers.data(name="img", shape=[784], dtype="float32")
        label = fluid.layers.data(name="label", shape=[1], dtype="int64")
        reader = fluid.layers.create_py_reader_by_data(capacity=64, feed_list=[img, label])
        img, label = fluid.layers.read_file(reader)
    """
    if isinstance(feed_list, Variable) or not isinstance(feed_list, (list, tuple)) or \
            not feed_list or not all(isinstance(v, Variable) for v in feed_list):
        raise TypeError("create_py_reader_by_data: feed_list must be a non-empty list of data "
                        f"Variables, got {feed_list!r}")
    names = reader_names(name)
    reader = QueueReader(name if name is not None else names[1], list(feed_list), capacity,
                         use_double_buffer)
    add_reader_ops(reader, default_main_program().current_block(),
                   default_startup_program().current_block(), names, use_double_buffer)
    return reader


def reader_names(name: str | None) -> tuple[str, str, str]:
    """Fluid's names of a reader's queue, reader and double-buffer variables (new unique
    ones when ``name`` is None)."""
    if name is None:
        return (unique_name.generate("lod_tensor_blocking_queue"),
                unique_name.generate("create_py_reader"), unique_name.generate("double_buffer"))
    return f"{name}_queue", f"{name}_reader", f"{name}_double_buffer"


def add_reader_ops(reader: QueueReader, main: Block, startup: Block,
                   names: tuple[str, str, str], use_double_buffer: bool,
                   prepend: bool = False) -> None:
    """Fluid's reader ops of ``reader``: ``create_py_reader`` (queue variable in, reader
    variable out) at the end of ``startup``; the reader variable in ``main``, and with
    ``use_double_buffer`` a ``create_double_buffer_reader`` after it (at the start of
    ``main`` with ``prepend``). ``reader.var`` becomes the variable the read ops take from."""
    queue_name, reader_name, buffer_name = names
    fields = reader._fields
    ident = {"reader_id": reader.reader_id, "reader_name": reader.name}
    queue = startup.create_var(name=queue_name, type=VarType.RAW, persistable=True)
    created = _reader_var(startup, reader_name, fields)
    startup.append_op("create_py_reader", inputs={"blocking_queue": [queue]},
                      outputs={"Out": [created]},
                      attrs={"shape_concat": [int(d) for f in fields for d in f.shape],
                             "ranks": [len(f.shape) for f in fields],
                             "lod_levels": [int(f.lod_level) for f in fields], **ident})
    reader.var = _reader_var(main, reader_name, fields)
    if use_double_buffer:
        _double_buffer_op(reader, main, buffer_name, "AUTO", prepend)


def _reader_var(block: Block, name: str, fields: Sequence[Variable]) -> Variable:
    var = block.create_var(name=name, type=VarType.READER, persistable=True,
                           stop_gradient=True)
    _describe(block, name, fields)
    return var


def _describe(block: Block, name: str, fields: Sequence[Variable]) -> None:
    """A reader variable's shapes, dtypes and LoD levels (Fluid's ``var.desc.shapes()``...)."""
    desc = block.desc.var(name)
    desc.set_shapes([list(f.shape) for f in fields])
    desc.set_dtypes([f.dtype for f in fields])
    desc.set_lod_levels([int(f.lod_level) for f in fields])


def _double_buffer_op(reader: QueueReader, main: Block, name: str, place: str,
                      prepend: bool) -> None:
    assert reader.var is not None
    out = main.create_var(name=name, type=VarType.READER, stop_gradient=True)
    _describe(main, name, reader._fields)
    add = functools.partial(main._insert_op, 0) if prepend else main.append_op
    add("create_double_buffer_reader", inputs={"UnderlyingReader": [reader.var]},
        outputs={"Out": [out]},
        attrs={"place": place, "reader_id": reader.reader_id, "reader_name": reader.name})
    reader.var = out


def read_file(reader: QueueReader) -> Variable | list[Variable]:
    """Append the ``read`` op taking the next batch of ``reader``; return its data variables
    (one, or a list), shaped as the reader's fields.

    Example::

        img, label = fluid.layers.read_file(reader)
    """
    if not isinstance(reader, QueueReader):
        raise TypeError(f"read_file: reader must be what py_reader, create_py_reader_by_data "
                        f"or double_buffer returned, got {type(reader).__name__}")
    block = default_main_program().current_block()
    prefix = unique_name.generate("read_file")
    outs = [block.create_var(name=unique_name.generate(f"{prefix}.tmp"), shape=f.shape,
                             dtype=f.dtype, lod_level=f.lod_level, stop_gradient=True)
            for f in reader._fields]
    append_read_op(block, reader, outs)
    return outs[0] if len(outs) == 1 else outs


def append_read_op(block: Any, reader: QueueReader, outs: Sequence[Variable],
                   index: int | None = None) -> Any:
    """The ``read`` op writing the next batch of ``reader`` into ``outs`` (inserted at
    ``index``, or appended)."""
    attrs = {"reader_id": reader.reader_id, "reader_name": reader.name,
             "shapes": reader.shapes, "dtypes": reader.dtypes, "lod_levels": reader.lod_levels}
    add = block.append_op if index is None else functools.partial(block._insert_op, index)
    return add("read", inputs={"Reader": [reader.var]}, outputs={"Out": list(outs)},
               attrs=attrs)


def double_buffer(reader: QueueReader, place: Any = None, name: str | None = None
                  ) -> QueueReader:
    """Prepare the reader's batches on ``place`` ahead of the reads (Fluid's
    ``fluid.layers.double_buffer``); returns the same reader.

    Batches are always prepared ahead in the producer thread; with a ``place`` (a
    ``CUDAPlace``) they are also copied there before the program asks for them.

    Example::

        reader = fluid.layers.double_buffer(fluid.layers.py_reader(...))
    """
    if not isinstance(reader, QueueReader):
        raise TypeError(f"double_buffer: reader must be what py_reader or "
                        f"create_py_reader_by_data returned, got {type(reader).__name__}")
    if place is not None:
        reader._device = to_device(place)
    reader.use_double_buffer = True
    # NOTE: as Fluid's: a create_double_buffer_reader decorating the reader's variable
    _double_buffer_op(reader, default_main_program().current_block(),
                      name if name is not None else unique_name.generate("double_buffer"),
                      "AUTO" if place is None else str(place).upper(), prepend=False)
    return reader
