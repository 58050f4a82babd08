"""DataLoader.from_generator: batches prepared in a background thread, fed to Executor.run.

A bounded queue of ``capacity`` batches sits between a producer thread (which runs the user's
generator and converts its output into feed dicts) and the training loop. Waits poll in
short steps, so Ctrl-C works and a dead producer is noticed; an exception in the generator
is re-raised in the loop, with its original type and traceback.

Iterable mode (``iterable=True``, the default): each batch is passed to
``exe.run(feed=...)``. As Fluid's loader, each step yields a list with one feed dict per place
(a list of one for a single place), which ``exe.run`` and ``exe.run(compiled_program, ...)``
take as they are; in the imperative mode a step is the batch as a list of variables::

    loader = fluid.io.DataLoader.from_generator(feed_list=[img, label], capacity=8)
    loader.set_sample_generator(samples, batch_size=32, places=fluid.CPUPlace())
    for epoch in range(2):
        for feed in loader():
            exe.run(main, feed=feed, fetch_list=[loss])

Non-iterable mode (``iterable=False``): the loader puts a ``read`` op writing the
``feed_list`` variables at the start of the main program, and the program takes its
batches itself (``legacy_reader.py``); ``start()`` begins an epoch, ``exe.run``
raises ``fluid.core.EOFException`` at its end, ``reset()`` ends it::

    loader = fluid.io.DataLoader.from_generator(feed_list=[img, label], capacity=8,
                                                iterable=False)
    loader.set_sample_list_generator(fluid.io.batch(samples, batch_size=32))
    for epoch in range(2):
        loader.start()
        try:
            while True:
                exe.run(main, fetch_list=[loss])
        except fluid.core.EOFException:
            loader.reset()
"""

from __future__ import annotations

import logging
import queue
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from ..dtypes import to_numpy
from ..framework import Variable, default_startup_program, in_dygraph_mode
from ..scope import LoDTensor
from .data_feeder import DataFeeder
from .dataset import DatasetBase, build_feed
from .legacy_reader import QueueReader, add_reader_ops, append_read_op, reader_names
from .reader import batch as batch_reader

__all__ = ["DataLoader", "DataLoaderBase", "GeneratorLoader", "DatasetLoader", "PyReader"]

_log = logging.getLogger(__name__)

_END = object()
_POLL_S = 0.05


class _Failure:
    __slots__ = ("exc",)

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


class DataLoader:
    """Fluid's ``fluid.io.DataLoader``; build one with ``DataLoader.from_generator``."""

    @staticmethod
    def from_generator(feed_list: Sequence[Variable] | None = None, capacity: int | None = None,
                       use_double_buffer: bool = True, iterable: bool = True,
                       return_list: bool = False, use_multiprocess: bool = False,
                       drop_last: bool = True, timeout: float | None = None) -> GeneratorLoader:
        """A loader fed by a Python generator through a queue of ``capacity`` batches.

        Args:
            feed_list: the data Variables, in the order of each sample's (or batch's) fields.
            capacity: how many batches to prepare ahead.
            use_double_buffer, use_multiprocess: accepted for compatibility; batches are
                prepared in one background thread.
            iterable: True: iterate over the loader and feed each batch; False: the program
                reads the batches itself, between ``start()`` and ``reset()`` (see the
                module docstring).
            return_list: yield lists of arrays in ``feed_list`` order instead of dicts.
            drop_last: with several places, drop a last group of batches smaller than the
                number of places (else yield the shorter group).
            timeout: seconds to wait for a batch before raising (None: wait, interruptibly).

        Then call ``set_sample_generator``, ``set_sample_list_generator`` or
        ``set_batch_generator``, and iterate over ``loader()``.
        """
        return GeneratorLoader(feed_list, capacity, use_double_buffer, iterable, return_list,
                               drop_last, timeout)

    @staticmethod
    def from_dataset(dataset: DatasetBase, places: Any, drop_last: bool = True
                     ) -> DatasetLoader:
        """A loader over the batches of a ``fluid.DatasetFactory`` Dataset, one reader per
        place: each step yields one feed per place (a dict of ``LoDTensor`` on that place).

        Args:
            dataset: a QueueDataset (its file list split among the readers, files ``i, i +
                n, ...`` to reader ``i``) or a loaded InMemoryDataset (its instances split in
                ``n`` near-equal parts); ``set_use_var`` and ``set_batch_size`` done.
            places: the places (``fluid.cpu_places()``); one reader each.
            drop_last: a reader's last batch shorter than the batch size ends that reader
                without being yielded (False: it is yielded).

        As Fluid's: a step takes the next batch of each reader still going, in turn (a
        reader may give two when others have ended); when fewer batches than places are
        left, the epoch ends (those are not yielded).

        Example::

            loader = fluid.io.DataLoader.from_dataset(dataset, fluid.cpu_places())
            for data in loader:
                exe.run(compiled, feed=data, fetch_list=[loss])
        """
        return DatasetLoader(dataset, places, drop_last)


class DataLoaderBase:
    """Fluid's base class of the loaders: calling one returns it, iterating yields batches."""

    def __call__(self) -> Any:
        return self

    def __iter__(self) -> Any:
        raise NotImplementedError(f"{type(self).__name__} does not define __iter__")

    def __next__(self) -> Any:
        raise NotImplementedError(f"{type(self).__name__} does not define __next__")

    def next(self) -> Any:
        return self.__next__()


class GeneratorLoader(DataLoaderBase):
    """What ``DataLoader.from_generator`` returns; iterate it (or call it) once per epoch."""

    def __init__(self, feed_list: Sequence[Variable] | None = None, capacity: int | None = None,
                 use_double_buffer: bool = True, iterable: bool = True,
                 return_list: bool = False, drop_last: bool = True,
                 timeout: float | None = None) -> None:
        self._dygraph = in_dygraph_mode()
        if self._dygraph:
            # NOTE: the imperative mode, as Fluid's: no feed_list, the batches are lists of
            # arrays (one per field) turned into variables
            if not iterable:
                raise ValueError("DataLoader: the imperative mode reads iterable loaders only "
                                 "(iterable=True)")
            feed_list = None
        elif not feed_list or not all(isinstance(v, Variable) for v in feed_list):
            raise TypeError("DataLoader: feed_list must be a non-empty list of data Variables, "
                            f"got {feed_list!r}")
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity <= 0:
            raise ValueError(f"DataLoader: capacity must be a positive int, got {capacity!r}")
        if timeout is not None and timeout <= 0:
            raise ValueError(f"DataLoader: timeout must be > 0 seconds or None, got {timeout!r}")
        self._feed_list = list(feed_list or [])
        self._names = [v.name for v in self._feed_list]
        self._capacity = capacity
        self._return_list = return_list
        self._drop_last = drop_last
        self._timeout = timeout
        self._source: Callable[[], Iterable[dict[str, Any]]] | None = None
        self._num_places = 1
        self._places: list[Any] = [None]
        # NOTE: a weak reference: an abandoned iterator must be collectable, which stops its
        # thread (the thread itself holds no reference to the iterator).
        self._live: weakref.ref[_LoaderIterator] | None = None
        self._reader: QueueReader | None = None
        if not iterable:
            # NOTE: Fluid's reader ops (create_py_reader in the startup program), first in
            # the main program, so that every op reading the data comes after them
            names = reader_names(None)
            self._reader = QueueReader(names[1], self._feed_list, capacity, use_double_buffer,
                                       timeout)
            main = self._feed_list[0].block.program.global_block()
            add_reader_ops(self._reader, main, default_startup_program().global_block(), names,
                           use_double_buffer, prepend=True)
            append_read_op(main, self._reader, self._feed_list,
                           index=1 if use_double_buffer else 0)

    @property
    def iterable(self) -> bool:
        """False when the program reads the batches itself (``start()`` / ``reset()``)."""
        return self._reader is None

    # ---- sources
    def set_sample_generator(self, reader: Callable[[], Iterable[Any]], batch_size: int,
                             drop_last: bool = True, places: Any = None) -> GeneratorLoader:
        """``reader()`` yields samples (tuples, one field per feed variable); batch them."""
        return self.set_sample_list_generator(batch_reader(reader, batch_size, drop_last), places)

    def set_sample_list_generator(self, reader: Callable[[], Iterable[Any]],
                                  places: Any = None) -> GeneratorLoader:
        """``reader()`` yields minibatches: lists of samples (as ``fluid.io.batch`` makes)."""
        _check_callable(reader)
        if self._dygraph:
            def source() -> Iterator[Any]:
                for minibatch in reader():
                    yield [np.stack([np.asarray(sample[i]) for sample in minibatch])
                           for i in range(len(minibatch[0]))]

            return self._set_source(source, places)
        feeder = DataFeeder(self._feed_list, places)

        def source() -> Iterator[dict[str, Any]]:
            for minibatch in reader():
                yield feeder.feed(minibatch)

        return self._set_source(source, places)

    def set_batch_generator(self, reader: Callable[[], Iterable[Any]],
                            places: Any = None) -> GeneratorLoader:
        """``reader()`` yields whole batches: a list/tuple of arrays in ``feed_list`` order."""
        _check_callable(reader)
        if self._dygraph:
            def source() -> Iterator[Any]:
                for fields in reader():
                    yield [np.asarray(f) for f in fields]

            return self._set_source(source, places)
        names, dtypes = self._names, [to_numpy(v.dtype) for v in self._feed_list]

        def source() -> Iterator[dict[str, Any]]:
            for i, fields in enumerate(reader()):
                if isinstance(fields, dict):
                    fields = [fields[n] if n in fields else _missing(n, i) for n in names]
                if not isinstance(fields, (list, tuple)) or len(fields) != len(names):
                    raise ValueError(f"DataLoader: batch {i} from the batch generator must be a "
                                     f"list of {len(names)} arrays ({', '.join(names)}), got "
                                     f"{_describe(fields)}")
                for f in fields:
                    if isinstance(f, (list, tuple)):
                        self._check_input_array(f)
                yield {n: np.asarray(f, dtype=d) if isinstance(f, (list, tuple)) else f
                       for n, f, d in zip(names, fields, dtypes)}

        return self._set_source(source, places)

    @classmethod
    def _check_input_array(cls, item: Any) -> None:
        """A TypeError (Fluid's words) when ``item`` is no regular array: nested lists of
        different lengths, which a LoDTensor made with ``fluid.create_lod_tensor`` holds."""
        try:
            ragged = np.array(item).dtype == object
        except ValueError:  # numpy refuses an inhomogeneous nesting outright
            ragged = True
        if ragged:
            raise TypeError(
                "\n\tFaild to convert input data to a regular ndarray :\n\t* Usually this "
                "means the input data contains nested lists with different lengths. \n\t* "
                "Check the reader function passed to 'decorate_batch_generator' to locate "
                "the data causes this issue.\n\t* Please consider using "
                "'fluid.create_lod_tensor' to convert it to a LoD-Tensor.")

    def _set_source(self, source: Callable[[], Iterable[dict[str, Any]]],
                    places: Any) -> GeneratorLoader:
        if isinstance(places, (list, tuple)):
            if not places:
                raise ValueError("DataLoader: places is an empty list")
            self._num_places = len(places)
            self._places = list(places)
        else:
            self._num_places = 1
            self._places = [places]
        self._source = source
        if self._reader is not None:
            names = self._names

            def batches() -> Iterator[list[Any]]:
                for feed in source():
                    yield [feed[n] for n in names]

            self._reader.decorate_tensor_provider(batches)
        return self

    # ---- iteration
    def __call__(self) -> _LoaderIterator:
        return self.__iter__()

    def __iter__(self) -> _LoaderIterator:
        if self._reader is not None:
            raise RuntimeError("DataLoader: a non-iterable loader (iterable=False) is read by "
                               "the program itself: call start(), run the program until it "
                               "raises fluid.core.EOFException, then reset()")
        if self._source is None:
            raise RuntimeError("DataLoader: no data source; call set_sample_generator, "
                               "set_sample_list_generator or set_batch_generator first")
        previous = self._live() if self._live is not None else None
        if previous is not None:
            previous.close()  # a new epoch abandons the previous one's read-ahead
        live = _LoaderIterator(self._batches, self._capacity, self._timeout)
        self._live = weakref.ref(live)
        return live

    def _batches(self) -> Iterator[Any]:
        assert self._source is not None
        if self._dygraph:
            # NOTE: as Fluid's loader in the imperative mode: one place, the batch as a list
            # of variables, one per field
            from ..dygraph.base import to_variable
            for fields in self._source():
                yield [to_variable(f) for f in fields]
            return
        # NOTE: as Fluid 1.6's read_next(): always a list with one item per place, also for
        # a single place (programs index it as data[0]['x'])
        # NOTE: and as Fluid's, the values are LoDTensors on their place (np.array(t) reads
        # one; the executors take them as they are)
        group: list[Any] = []
        for feed in self._source():
            place = self._places[len(group)]
            tensors = {n: _on_place(feed[n], place) for n in self._names}
            group.append([tensors[n] for n in self._names] if self._return_list else tensors)
            if len(group) == self._num_places:
                yield group
                group = []
        if group and not self._drop_last:
            yield group

    def start(self) -> None:
        """Non-iterable mode: start preparing the batches of an epoch."""
        self._non_iterable("start").start()

    def reset(self) -> None:
        """Non-iterable mode: end the epoch (after ``fluid.core.EOFException``)."""
        self._non_iterable("reset").reset()

    def _non_iterable(self, what: str) -> QueueReader:
        if self._reader is None:
            raise RuntimeError(f"DataLoader.{what}(): only a non-iterable loader "
                               "(iterable=False) is started and reset; iterate over this one "
                               "and pass each batch to exe.run(feed=batch)")
        return self._reader


class DatasetLoader(DataLoaderBase):
    """What ``DataLoader.from_dataset`` returns; iterate it once per epoch."""

    def __init__(self, dataset: DatasetBase, places: Any, drop_last: bool = True) -> None:
        if not isinstance(dataset, DatasetBase):
            raise TypeError(f"DataLoader.from_dataset: dataset must be a Dataset of "
                            f"fluid.DatasetFactory, got {type(dataset).__name__}")
        if in_dygraph_mode():
            raise RuntimeError("DataLoader.from_dataset is not supported in the imperative "
                               "mode (as in Fluid)")
        self._places = list(places) if isinstance(places, (list, tuple)) else [places]
        if not self._places:
            raise ValueError("DataLoader.from_dataset: places is an empty list")
        n = len(self._places)
        if len(dataset.filelist) < n:
            raise ValueError(f"DataLoader.from_dataset: the dataset's file list has "
                             f"{len(dataset.filelist)} files, fewer than the {n} places "
                             "(one reader per place reads whole files)")
        if dataset.thread_num not in (0, n):
            _log.warning("DataLoader.from_dataset: thread_num %d set in the Dataset is "
                         "ignored: one reader per place (%d)", dataset.thread_num, n)
        dataset.set_thread(n)
        self._dataset = dataset
        self._drop_last = bool(drop_last)

    def __call__(self) -> Iterator[list[dict[str, LoDTensor]]]:
        return self.__iter__()

    def __iter__(self) -> Iterator[list[dict[str, LoDTensor]]]:
        self._dataset._prepare_to_run()
        return self._steps()

    def _steps(self) -> Iterator[list[dict[str, LoDTensor]]]:
        n, size = len(self._places), self._dataset.proto_desc.batch_size
        slots = self._dataset._used_slots()
        readers = [self._batches(self._dataset._reader_instances(i, n), size)
                   for i in range(n)]
        going = list(range(n))
        while True:
            step: list[dict[str, Any]] = []
            while len(step) < n and going:
                for i in list(going):
                    batch = next(readers[i], None)
                    if batch is None or (self._drop_last and len(batch) < size):
                        going.remove(i)
                        continue
                    step.append(build_feed(batch, slots))
                    if len(step) == n:
                        break
            if len(step) < n:
                return  # as Fluid's: fewer batches than places end the epoch
            yield [self._on_place(feed, place) for feed, place in zip(step, self._places)]

    @staticmethod
    def _batches(instances: Iterator[Any], size: int) -> Iterator[list[Any]]:
        pending: list[Any] = []
        for inst in instances:
            pending.append(inst)
            if len(pending) == size:
                yield pending
                pending = []
        if pending:
            yield pending

    @staticmethod
    def _on_place(feed: dict[str, Any], place: Any) -> dict[str, LoDTensor]:
        out = {}
        for name, value in feed.items():
            t = LoDTensor()
            if isinstance(value, LoDTensor):
                t.set(value.value, place)
                t.set_lod(value.lod())
            else:
                t.set(value, place)
            out[name] = t
        return out


class PyReader(GeneratorLoader):
    """Fluid 1.5's ``fluid.io.PyReader``: the same loader with ``decorate_*`` method names."""

    def __init__(self, feed_list: Sequence[Variable] | None = None, capacity: int | None = None,
                 use_double_buffer: bool = True, iterable: bool = True,
                 return_list: bool = False) -> None:
        super().__init__(feed_list, capacity, use_double_buffer, iterable, return_list)

    def decorate_sample_generator(self, sample_generator: Callable[[], Iterable[Any]],
                                  batch_size: int, drop_last: bool = True,
                                  places: Any = None) -> GeneratorLoader:
        """Batches of ``batch_size`` samples from ``sample_generator`` (Fluid's keywords)."""
        return self.set_sample_generator(sample_generator, batch_size, drop_last, places)

    decorate_sample_list_generator = GeneratorLoader.set_sample_list_generator
    decorate_batch_generator = GeneratorLoader.set_batch_generator


class _LoaderIterator:
    """One epoch: a producer thread filling a bounded queue, read by ``__next__``."""

    def __init__(self, produce: Callable[[], Iterator[Any]], capacity: int,
                 timeout: float | None) -> None:
        self._queue: queue.Queue = queue.Queue(maxsize=capacity)
        self._stop = threading.Event()
        self._timeout = timeout
        self._done = False
        self._thread = threading.Thread(target=_produce,
                                        args=(produce, self._queue, self._stop),
                                        name="parafluid-dataloader", daemon=True)
        self._thread.start()

    def __iter__(self) -> _LoaderIterator:
        return self

    def __next__(self) -> Any:
        if self._done:
            raise StopIteration
        deadline = None if self._timeout is None else time.monotonic() + self._timeout
        while True:
            try:
                item = self._queue.get(timeout=_POLL_S)
                break
            except queue.Empty:
                if not self._thread.is_alive() and self._queue.empty():
                    self._finish()
                    raise RuntimeError("DataLoader: the producer thread stopped without "
                                       "finishing the epoch") from None
                if deadline is not None and time.monotonic() >= deadline:
                    self.close()
                    raise RuntimeError(f"DataLoader: no batch from the generator for "
                                       f"{self._timeout:g} s; is it stuck?") from None
        if item is _END:
            self._finish()
            raise StopIteration
        if isinstance(item, _Failure):
            self._finish()
            raise item.exc
        return item

    def _finish(self) -> None:
        self._done = True
        self._thread.join(timeout=1.0)

    def close(self) -> None:
        """Stop the producer (used when an epoch is abandoned)."""
        self._done = True
        self._stop.set()
        deadline = time.monotonic() + 1.0
        while self._thread.is_alive() and time.monotonic() < deadline:
            try:  # make room so that a blocked put sees the stop flag
                self._queue.get_nowait()
            except queue.Empty:
                pass
            self._thread.join(timeout=_POLL_S)

    def __del__(self) -> None:
        if not self._done:
            self._stop.set()


def _on_place(value: Any, place: Any) -> LoDTensor:
    """A batch's value as a LoDTensor on ``place`` (None: the host)."""
    if isinstance(value, LoDTensor):
        return value
    t = LoDTensor()
    t.set(value, place)
    return t


def _put(q: queue.Queue, stop: threading.Event, item: Any) -> bool:
    while not stop.is_set():
        try:
            q.put(item, timeout=_POLL_S)
            return True
        except queue.Full:
            continue
    return False


def _produce(produce: Callable[[], Iterator[Any]], q: queue.Queue, stop: threading.Event) -> None:
    try:
        for item in produce():
            if not _put(q, stop, item):
                return
    except BaseException as e:  # noqa: BLE001 (re-raised in the consumer)
        _put(q, stop, _Failure(e))
        return
    _put(q, stop, _END)


def _check_callable(reader: Any) -> None:
    if not callable(reader):
        raise TypeError(f"DataLoader: the generator must be a function returning an iterable, "
                        f"got {type(reader).__name__}; pass the function, not its result")


def _missing(name: str, index: int) -> Any:
    raise ValueError(f"DataLoader: batch {index} (a dict) has no entry for {name!r}")


def _describe(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return f"{type(value).__name__} of {len(value)}"
    return type(value).__name__
