"""DataFeeder: turns a minibatch (a list of samples, one tuple per sample) into a feed dict.

Example::

    img = fluid.layers.data(name="img", shape=[64], dtype="float32")
    label = fluid.layers.data(name="label", shape=[1], dtype="int64")
    feeder = fluid.DataFeeder(feed_list=[img, label], place=fluid.CPUPlace())
    feed = feeder.feed([(np.zeros(64), 3), (np.ones(64), 7)])
    # {"img": float32 array [2, 64], "label": int64 array [2, 1]}
    exe.run(feed=feed, fetch_list=[loss])
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from ..dtypes import to_numpy
from ..framework import Program, Variable, default_main_program
from ..scope import LoDTensor

__all__ = ["DataFeeder"]


class _Slot:
    """How one feed variable's field of each sample becomes one batch array."""

    __slots__ = ("name", "shape", "dtype", "lod_level")

    def __init__(self, var: Variable) -> None:
        self.name = var.name
        self.shape = None if var.shape is None else tuple(var.shape)
        if var.dtype is None:
            raise ValueError(f"DataFeeder: variable {var.name!r} has no dtype")
        self.dtype = to_numpy(var.dtype)
        self.lod_level = var.lod_level

    def convert(self, fields: list[Any]) -> Any:
        if self.lod_level > 1:
            return self._nested(fields)
        arrays = [self._array(f, i) for i, f in enumerate(fields)]
        if self.lod_level == 1:
            return self._sequences(arrays)
        if self.shape is None:
            return np.stack(arrays)
        if self.shape[0] == -1:
            per_sample = self.shape[1:]
            try:
                arrays = [self._fit(a, per_sample, i) for i, a in enumerate(arrays)]
            except ValueError:
                # as Fluid 1.6's converter: a batch of another rank is reshaped whole to the
                # variable's shape (a sample [8, 10] of a [-1, 10] variable gives 8 rows)
                batch = self._whole(arrays)
                if batch is None:
                    raise
                return batch
            return np.stack(arrays)
        batch = np.stack(arrays)
        if batch.size != int(np.prod(self.shape)):
            raise ValueError(f"DataFeeder: {self.name!r} has the fixed shape {list(self.shape)} "
                             f"({int(np.prod(self.shape))} elements) but the minibatch gives "
                             f"{batch.size} elements ({len(fields)} samples of "
                             f"{list(arrays[0].shape)})")
        return batch.reshape(self.shape)

    def _array(self, field: Any, index: int) -> np.ndarray:
        try:
            return np.asarray(field, dtype=self.dtype)
        except (TypeError, ValueError) as e:
            raise ValueError(f"DataFeeder: sample {index}, field {self.name!r}: cannot convert "
                             f"{type(field).__name__} to {np.dtype(self.dtype).name}: {e}") \
                from None

    def _whole(self, arrays: list[np.ndarray]) -> np.ndarray | None:
        """The samples stacked and reshaped to the variable's shape, when they share one
        shape of another rank and fill whole rows of it (else None)."""
        assert self.shape is not None
        if len({a.shape for a in arrays}) != 1 or self.shape.count(-1) != 1 or \
                arrays[0].ndim + 1 == len(self.shape):
            return None
        batch = np.stack(arrays)
        row = int(np.prod(self.shape[1:]))
        if row <= 0 or batch.size % row:
            return None
        return batch.reshape(self.shape)

    def _fit(self, arr: np.ndarray, shape: tuple[int, ...], index: int) -> np.ndarray:
        if len(arr.shape) == len(shape) and \
                all(d == -1 or d == a for d, a in zip(shape, arr.shape)):
            return arr
        known = int(np.prod([d for d in shape if d != -1]))
        if shape.count(-1) <= 1 and known > 0 and \
                (arr.size == known if -1 not in shape else arr.size % known == 0):
            return arr.reshape(shape)
        raise ValueError(f"DataFeeder: sample {index}, field {self.name!r} has shape "
                         f"{list(arr.shape)} ({arr.size} elements) but the variable expects "
                         f"{list(shape)} per sample (shape {list(self.shape or [])} with the "
                         "batch dimension)")

    def _nested(self, fields: list[Any]) -> LoDTensor:
        """lod_level >= 2: each sample's field nests sequences ``lod_level`` deep (a
        paragraph of sentences of words); the LoD's level k counts the items at depth k."""
        lengths: list[list[int]] = [[] for _ in range(self.lod_level)]
        steps: list[np.ndarray] = []

        def walk(item: Any, depth: int, index: int) -> None:
            if isinstance(item, np.ndarray) and item.ndim == 0 or np.isscalar(item):
                raise ValueError(f"DataFeeder: sample {index}, field {self.name!r} (lod_level "
                                 f"{self.lod_level}) must nest sequences {self.lod_level} "
                                 f"deep; found a scalar at depth {depth}")
            if depth == self.lod_level - 1:
                seq = self._array(item, index)
                seq = seq.reshape(len(seq), -1) if seq.ndim == 1 else seq
                lengths[depth].append(len(seq))
                steps.append(seq)
                return
            lengths[depth].append(len(item))
            for sub in item:
                walk(sub, depth + 1, index)

        for i, field in enumerate(fields):
            walk(field, 0, i)
        step = () if self.shape is None else self.shape[1:]
        data = np.concatenate(steps, axis=0) if steps else np.zeros((0, *step), self.dtype)
        if step and data.ndim != len(step) + 1:
            data = data.reshape((data.shape[0], *step))
        tensor = LoDTensor()
        tensor.set(data)
        tensor.set_recursive_sequence_lengths(lengths)
        return tensor

    def _sequences(self, arrays: list[np.ndarray]) -> LoDTensor:
        step = () if self.shape is None else self.shape[1:]
        offsets = [0]
        parts = []
        for i, a in enumerate(arrays):
            if a.ndim == 0:
                raise ValueError(f"DataFeeder: sample {i}, field {self.name!r} (lod_level 1) "
                                 "must be a sequence of steps, got a scalar")
            a = a.reshape((a.shape[0], *step)) if step and a.ndim != len(step) + 1 else a
            parts.append(a)
            offsets.append(offsets[-1] + a.shape[0])
        tensor = LoDTensor()
        tensor.set(np.concatenate(parts, axis=0))
        tensor.set_lod([offsets])
        return tensor


class DataFeeder:
    """Converts minibatches of samples into ``{name: array}`` feed dicts for ``Executor.run``.

    Args:
        feed_list: the data Variables (or their names) in the order of each sample's fields.
        place: where the data will be used (kept for Fluid compatibility; arrays are numpy).
        program: where to look up names (default: the default main program).
    """

    def __init__(self, feed_list: Sequence[Variable | str], place: Any,
                 program: Program | None = None) -> None:
        if isinstance(feed_list, (Variable, str)) or not feed_list:
            raise TypeError("DataFeeder: feed_list must be a non-empty list of Variables or "
                            f"names, got {feed_list!r}")
        block = (program or default_main_program()).global_block()
        self._slots = []
        for item in feed_list:
            if isinstance(item, str):
                var = block._find_var_recursive(item)
                if var is None:
                    raise ValueError(f"DataFeeder: {item!r} is not a variable of the program")
                item = var
            if not isinstance(item, Variable):
                raise TypeError(f"DataFeeder: feed_list items must be Variables or names, "
                                f"got {type(item).__name__}")
            self._slots.append(_Slot(item))
        self.feed_names = [s.name for s in self._slots]
        self.place = place

    def feed(self, iterable: Iterable[Sequence[Any]]) -> dict[str, Any]:
        """Convert one minibatch (samples, each a tuple with one field per feed variable).

        Example::

            feed = feeder.feed([(x0, y0), (x1, y1)])
        """
        samples = list(iterable)
        if not samples:
            raise ValueError("DataFeeder.feed: the minibatch is empty")
        n = len(self._slots)
        for i, sample in enumerate(samples):
            if not isinstance(sample, (tuple, list)) or len(sample) != n:
                got = f"{len(sample)} fields" if isinstance(sample, (tuple, list)) else \
                    f"a {type(sample).__name__}"
                raise ValueError(f"DataFeeder.feed: sample {i} has {got} but feed_list has {n} "
                                 f"variables ({', '.join(self.feed_names)}); each sample must "
                                 "be a tuple with one field per variable")
        return {slot.name: slot.convert([s[k] for s in samples])
                for k, slot in enumerate(self._slots)}

    def feed_parallel(self, iterable: Iterable[Sequence[Sequence[Any]]],
                      num_places: int | None = None) -> Iterator[dict[str, Any]]:
        """One feed dict per device from a list of minibatches, one minibatch per device.

        ``num_places`` defaults to ``CPU_NUM`` (1 if unset).
        """
        batches = list(iterable)
        n = _num_places(num_places)
        if len(batches) != n:
            raise ValueError(f"DataFeeder.feed_parallel: got {len(batches)} minibatches for "
                             f"{n} devices; pass one minibatch per device")
        for minibatch in batches:
            yield self.feed(minibatch)

    def decorate_reader(self, reader: Callable[[], Iterable[Any]], multi_devices: bool,
                        num_places: int | None = None,
                        drop_last: bool = True) -> Callable[[], Iterator[Any]]:
        """Turn a minibatch reader into a reader of feed dicts (lists of them if multi-device).

        With ``multi_devices``, groups of ``num_places`` minibatches become one list of feed
        dicts; a last incomplete group is dropped if ``drop_last`` else a ValueError.
        """
        def single() -> Iterator[Any]:
            for minibatch in reader():
                yield self.feed(minibatch)

        def multi() -> Iterator[Any]:
            n = _num_places(num_places)
            group: list[Any] = []
            for minibatch in reader():
                group.append(minibatch)
                if len(group) == n:
                    yield list(self.feed_parallel(group, n))
                    group = []
            if group and not drop_last:
                raise ValueError(f"DataFeeder.decorate_reader: {len(group)} minibatches left "
                                 f"for {n} devices; use drop_last=True or a reader whose "
                                 "number of minibatches is a multiple of the device count")

        return multi if multi_devices else single


def _num_places(num_places: int | None) -> int:
    if num_places is not None:
        if isinstance(num_places, bool) or not isinstance(num_places, int) or num_places <= 0:
            raise ValueError(f"num_places must be a positive int, got {num_places!r}")
        return num_places
    env = os.environ.get("CPU_NUM", "1")
    try:
        n = int(env)
    except ValueError:
        raise ValueError(f"CPU_NUM must be a positive int, got {env!r}") from None
    if n <= 0:
        raise ValueError(f"CPU_NUM must be a positive int, got {env!r}")
    return n
