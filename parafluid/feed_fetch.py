"""Feeds in, fetches out: the boundary between user values (numpy) and the run's tensors.

Every executor goes through these functions:

- ``fetch_names(fetch_list)``: Variables or names -> names;
- ``as_feed_tensor(block, name, value, device)``: check a fed value against its variable
  (dtype, shape) and return a tensor on ``device``;
- ``FeedSplitter``: split each fed batch along dim 0 over the devices of a data-parallel run
  (or check a list of per-device feeds), caching the checks of feeds seen before;
- ``batch_feeds`` / ``check_batch_sizes``: the fed variables whose dim 0 is the batch (-1 in
  the program) must agree on it, and hold at least one row;
- ``fetch_value`` / ``merge_fetches``: turn run values into what ``run`` returns (numpy
  arrays or LoDTensors; per-device values concatenated along dim 0).

Example::

    t = as_feed_tensor(program.global_block(), "x", np.ones([4, 3], "float32"), cpu)
    per_device = FeedSplitter(devices).split({"x": batch}, block)   # one dict per device
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from .dtypes import convert_dtype, to_numpy
from .engine.runtime import EnforceNotMet
from .lod import attach_lod, check_lod, get_lod, merge_lods, sequence_ranges, slice_lod
from .ops.registry import shapes_compatible
from .scope import FetchedArray, LoDTensor, ScopeVariable, SelectedRows, TensorArray, as_numpy
from .variable import Variable, unknown_name_message, var_names

__all__ = ["fetch_names", "without_feed_fetch_ops", "strip_feed_fetch_ops",
           "as_feed_tensor", "lod_feed_tensor", "as_lod_tensor", "FeedSplitter",
           "fetch_value", "merge_fetches", "missing_value_message", "batch_feeds",
           "check_batch_sizes"]


def as_fetch_list(fetch_list: Any) -> list[Any]:
    """An executor's ``fetch_list`` argument as a list: one Variable or name stands for the
    list of it (``Executor.run`` and ``ParallelExecutor.run`` both take that)."""
    return list(fetch_list) if isinstance(fetch_list, (list, tuple)) else [fetch_list]


def fetch_names(fetch_list: Sequence[Any]) -> list[str]:
    """Names of a fetch list of Variables or names."""
    return var_names(fetch_list, "fetch_list")


def as_feed_tensor(block: Any, name: str, value: Any, device: torch.device,
                   notes: list[tuple[type, str, str]] | None = None,
                   shape_checked: bool = False) -> Any:
    """Check a fed value against the variable's shape and dtype; return it as a tensor.

    With ``notes`` (a list), a variable Fluid does not check feeds of (``layers.data``,
    whose ``need_check_feed`` is False) takes the value as it is, as Fluid's Executor does
    (an int32 shape tensor fed into a float32-declared one); what did not match is added
    to ``notes`` (error type, message, variable) for the caller to raise if an op reading
    that variable then fails."""
    var = block._find_var_recursive(name)
    if var is None:
        raise ValueError(unknown_name_message("feed", name, block))
    if isinstance(value, SelectedRows):
        return value.to(device)
    if isinstance(value, LoDTensor):
        return lod_feed_tensor(block, name, value, device, notes, shape_checked)
    if isinstance(value, torch.Tensor):
        arr_dtype = convert_dtype(value.dtype)
        shape = tuple(value.shape)
    else:
        value = _as_array(name, value, var)
        if value.dtype == np.uint16:
            value = value.view(np.float16)  # float16 bits, as Fluid's Python side passes them
        arr_dtype = convert_dtype(value.dtype)
        shape = value.shape
    lenient = notes is not None and not var.need_check_feed
    # NOTE: the messages are Fluid's own (its programs and tests compare them)
    if var.dtype is not None and arr_dtype != var.dtype:
        problem = (TypeError, f"The data type of feeded Variable {name!r} must be "
                              f"{var.dtype!r}, but received {arr_dtype!r}", name)
        if not lenient:
            raise FeedDtypeError(problem[1])
        notes.append(problem)  # type: ignore[union-attr,arg-type]
    if not shape_checked and var.shape is not None and not shapes_compatible(var.shape, shape):
        problem = (ValueError, f"The feeded Variable {name!r} should have dimensions = "
                               f"{len(var.shape)}, shape = {tuple(var.shape)!r}, but received "
                               f"feeded shape {list(shape)!r}", name)
        if not lenient:
            raise problem[0](problem[1])
        notes.append(problem)  # type: ignore[union-attr,arg-type]
    # NOTE: a persistable may be updated in place later (optimizer ops): never alias the
    # caller's memory for one.
    if isinstance(value, torch.Tensor):
        return value.to(device, copy=var.persistable)
    if not value.flags.c_contiguous or not value.flags.writeable:
        value = np.array(value, order="C")
    elif var.persistable:
        value = value.copy()
    t = torch.from_numpy(value)
    return t if device.type == "cpu" else t.to(device)


class FeedSplitError(ValueError, EnforceNotMet):
    """A feed the devices of a data-parallel run cannot share (Fluid's EnforceNotMet)."""


class FeedDtypeError(TypeError, ValueError):
    """A fed value's dtype differs from its (checked) variable's: a ValueError as Fluid's
    error, and a TypeError (a value of the wrong type)."""


def lod_feed_tensor(block: Any, name: str, value: LoDTensor, device: torch.device,
                    notes: list[tuple[type, str, str]] | None = None,
                    shape_checked: bool = False) -> Any:
    """What the executors make of a fed LoDTensor: its tensor, carrying the LoD."""
    if value.value is None:
        raise ValueError(f"feed {name!r}: the LoDTensor has no value; call .set(array, place)")
    t = as_feed_tensor(block, name, value.value, device, notes, shape_checked)
    lod = value.lod()
    if not lod:
        return t
    check_lod(lod, t.shape[0], f"feed {name!r}")
    if t is value.value:
        t = t.view(t.shape)  # a new tensor object, so that the LoD is not left on the holder's
    return attach_lod(t, [list(level) for level in lod])


def as_lod_tensor(name: str, value: Any) -> LoDTensor:
    """A LoDTensor holding a copy of a run value (``return_numpy=False``)."""
    if isinstance(value, TensorArray):
        return [as_lod_tensor(f"{name}[{i}]", v) for i, v in enumerate(value)]  # type: ignore
    holder = ScopeVariable(name)
    holder.value = value.clone() if isinstance(value, torch.Tensor) else value
    lod = get_lod(value) if isinstance(value, torch.Tensor) else None
    if lod:
        holder.lod = lod
    return LoDTensor(holder)


def fetch_value(name: str, value: Any, return_numpy: bool) -> Any:
    return as_numpy(value) if return_numpy else as_lod_tensor(name, value)


def merge_fetches(name: str, values: list[Any], return_numpy: bool, return_merged: bool) -> Any:
    """Per-device values of one fetch target: concatenated along dim 0, or the list. A
    merged LoDTensor (``return_numpy=False``) carries the devices' LoDs appended."""
    if not return_merged:
        return [fetch_value(name, v, return_numpy) for v in values]
    if return_numpy:
        merged = np.concatenate([np.atleast_1d(_numpy_view(v)) for v in values])
        # NOTE: one device's [1] loss converts with float() as the Executor's does; one row
        # per device ([ndev]) is refused by numpy as in Fluid: take np.mean(loss)
        return merged.view(FetchedArray)
    dense = [as_numpy(v) for v in values]
    merged = torch.from_numpy(np.concatenate([np.atleast_1d(v) for v in dense]))
    lods = [get_lod(v) if isinstance(v, torch.Tensor) else None for v in values]
    return as_lod_tensor(name, attach_lod(merged, merge_lods(lods)))


def missing_value_message(block: Any, name: str, feed: dict[str, Any]) -> str:
    """Why a variable the program reads has no value, and what to do about it."""
    var = block._find_var_recursive(name)
    if var is not None and var.persistable:
        return (f"variable {name!r} is read by the program but not initialized in the scope: "
                "run the startup program first (exe.run(fluid.default_startup_program()))")
    readers = [f"#{i} {op.type}" for i, op in enumerate(block.ops) if name in op.input_arg_names]
    return (f"variable {name!r} is needed by op {readers[0] if readers else '?'} but was not fed "
            f"and no earlier op computes it; feed it (fed: {sorted(feed) or 'nothing'})")


class FeedTypeError(TypeError, EnforceNotMet):
    """An op failed on a fed value whose dtype differs from its variable's (an unchecked
    ``layers.data`` feed): a TypeError naming the feed, and the op's EnforceNotMet."""


class FeedValueError(ValueError, EnforceNotMet):
    """As FeedTypeError, for a fed value whose shape differs from its variable's."""


def feed_to_blame(block: Any, error: BaseException,
                   notes: list[tuple[type, str, str]]) -> tuple[type, str, str] | None:
    """The unchecked feed that did not match its variable and that the failing op reads."""
    index = getattr(error, "op_index", None)
    if not notes or index is None or not 0 <= index < len(block.ops):
        return None
    read = set(block.ops[index].input_arg_names)
    return next((note for note in notes if note[2] in read), None)


class FeedSplitter:
    """Turns a data-parallel run's feed into one dict of tensors per device.

    A dict feed is split along dim 0 (``batch // n`` rows each, the last device also gets the
    remainder), or by whole sequences when it holds LoDTensors (``_SequenceSplit``); a list
    feed gives one dict per device as is. Numpy feeds already checked
    against the program (same name, dtype, shape) are fed as views without checking again.
    """

    def __init__(self, devices: list[torch.device]) -> None:
        self.devices = devices
        # the last split's feeds of unchecked variables (layers.data: need_check_feed False)
        # that did not match them, as Fluid takes them: (error type, message, variable)
        self.notes: list[tuple[type, str, str]] = []
        # (feed name, numpy dtype, shape) -> per-device row ranges
        self._checked: dict[tuple, list[tuple[int, int]]] = {}

    def clear(self) -> None:
        """Forget the checked feeds (the program changed)."""
        self._checked.clear()

    def split(self, feed: Any, block: Any) -> list[dict[str, Any]]:
        n = len(self.devices)
        self.notes = []
        if feed is None:
            return [{} for _ in range(n)]
        if isinstance(feed, dict):
            return self._split_dict(feed, block)
        if isinstance(feed, (list, tuple)):
            if len(feed) != n:
                raise ValueError(f"ParallelExecutor.run: a list feed needs one dict per device: "
                                 f"got {len(feed)} dicts for {n} devices (device_count)")
            for i, item in enumerate(feed):
                if not isinstance(item, dict):
                    raise TypeError(f"ParallelExecutor.run: feed[{i}] must be a dict of name -> "
                                    f"array, got {type(item).__name__}")
            names = set(feed[0])
            for i, item in enumerate(feed[1:], 1):
                if set(item) != names:
                    raise ValueError(f"ParallelExecutor.run: feed[{i}] feeds {sorted(item)} but "
                                     f"feed[0] feeds {sorted(names)}; every device needs the "
                                     "same variables")
            return [{name: as_feed_tensor(block, name, value, self.devices[d], self.notes)
                     for name, value in item.items()} for d, item in enumerate(feed)]
        raise ValueError(f"ParallelExecutor.run: feed must be a dict (split over the devices) "
                         f"or a list of one dict per device, got {type(feed).__name__}")

    def _split_dict(self, feed: dict[str, Any], block: Any) -> list[dict[str, Any]]:
        n = len(self.devices)
        per: list[dict[str, Any]] = [{} for _ in range(n)]
        sequences = _SequenceSplit.of(feed, n)
        checked = self._checked if sequences is None else {}
        for name, value in feed.items():
            bounds = checked.get((name, value.dtype, value.shape)) \
                if type(value) is np.ndarray else None
            if bounds is not None and value.flags.c_contiguous and value.flags.writeable:
                # NOTE: what as_feed_tensor would give (a view of the caller's array),
                # without checking the var's dtype and shape again
                t = torch.from_numpy(value)
                for d, (a, b) in enumerate(bounds):
                    per[d][name] = t[a:b]
                continue
            var = block._find_var_recursive(name)
            if sequences is not None and (name in sequences.lods or (
                    not (var is not None and var.persistable)
                    and _rows(value) in (sequences.count, sequences.steps))):
                pieces = sequences.split(name, value, var)
            else:
                pieces = _split_value(name, value, n, var)
            # NOTE: as Fluid's ParallelExecutor, a checked variable (fluid.data) is checked
            # against the whole feed, before the split: its declared dim 0 is the whole
            # batch's, not a device's
            whole = var is not None and var.need_check_feed and not var.persistable
            if whole:
                as_feed_tensor(block, name, value, torch.device("cpu"))
            for d in range(n):
                per[d][name] = as_feed_tensor(block, name, pieces[d], self.devices[d],
                                              self.notes, shape_checked=whole)
            if sequences is None and type(value) is np.ndarray and var is not None \
                    and not var.persistable and self.devices[0].type == "cpu" \
                    and not any(note[2] == name for note in self.notes):
                k = int(value.shape[0]) // n
                checked[(name, value.dtype, value.shape)] = \
                    [(d * k, (d + 1) * k) for d in range(n - 1)] + \
                    [((n - 1) * k, int(value.shape[0]))]
        return per


class _SequenceSplit:
    """How a dict feed holding LoDTensors is split over ``n`` devices: by whole top-level
    sequences, never through one.

    Every LoDTensor of the feed must hold the same number of top-level sequences; each is cut
    into the same per-device counts (``count // n``, the last device also the remainder, as
    rows are). A feed without LoD whose rows are one per sequence (a label) is cut into those
    same counts; one whose rows are one per step of the (first) LoDTensor is cut at its
    sequence boundaries; any other feed is split by rows as usual.
    """

    def __init__(self, lods: dict[str, list[list[int]]], n: int) -> None:
        self.lods = lods
        first, lod = next(iter(lods.items()))
        self.count = len(lod[0]) - 1
        for name, other in lods.items():
            if len(other[0]) - 1 != self.count:
                raise ValueError(
                    f"feeds {first!r} and {name!r} are LoDTensors with different numbers of "
                    f"top-level sequences ({self.count} and {len(other[0]) - 1}): a "
                    "data-parallel run splits them over the devices by whole sequences and "
                    "needs the same count in every LoD feed of a step")
        ranges = sequence_ranges(self.count, n, f"feed {first!r}")
        self.ranges = ranges
        self.steps = lod[-1][-1]
        self.step_ranges = [slice_lod(lod, a, b)[0] for a, b in ranges]
        self._slice_lod = slice_lod

    @classmethod
    def of(cls, feed: dict[str, Any], n: int) -> _SequenceSplit | None:
        """The split of ``feed`` when it holds a LoDTensor with a LoD, else None."""
        lods = {name: value.lod() for name, value in feed.items()
                if isinstance(value, LoDTensor) and value.lod()}
        return cls(lods, n) if lods else None

    def split(self, name: str, value: Any, var: Variable | None) -> list[Any]:
        """``value`` cut into one piece per device (LoDTensors keep their LoD)."""
        if name in self.lods:
            lod = self.lods[name]
            pieces = []
            for a, b in self.ranges:
                (r0, r1), piece_lod = self._slice_lod(lod, a, b)
                holder = ScopeVariable(name)
                holder.value, holder.lod = value.value[r0:r1], piece_lod
                pieces.append(LoDTensor(holder))
            return pieces
        if isinstance(value, LoDTensor):
            value = value.value
        if not isinstance(value, torch.Tensor):
            value = _as_array(name, value, var)  # as the Executor does
        rows = _rows(value)
        bounds = self.ranges if rows == self.count else self.step_ranges
        return [value[a:b] for a, b in bounds]


def _split_value(name: str, value: Any, n: int, var: Variable | None) -> list[Any]:
    if isinstance(value, LoDTensor):
        value = value.value
    if not isinstance(value, torch.Tensor):
        value = _as_array(name, value, var)  # as the Executor does
    persistable = var is not None and var.persistable
    if value.ndim == 0:
        raise ValueError(f"feed {name!r}: a 0-d value cannot be split over {n} devices along "
                         "dim 0; give it a leading dimension, or feed a list of per-device dicts")
    rows = int(value.shape[0])
    if persistable:
        if rows == 1:
            return [value] * n
        if rows == n:
            return [value[i:i + 1] for i in range(n)]
        raise FeedSplitError(f"feed {name!r}: a persistable variable is fed with {rows} rows "
                             f"on {n} devices; feed exactly 1 row (copied to every device) or "
                             f"{n} rows (one per device)")
    if rows == 0:
        raise ValueError(f"feed {name!r}: the batch is empty (0 rows, shape "
                         f"{list(value.shape)}); every device needs at least one row: skip "
                         "empty batches")
    if rows < n:
        raise ValueError(f"feed {name!r}: the batch has {rows} rows but there are {n} devices, "
                         "so some device would get no data; drop the last (incomplete) batch, "
                         f"or use at most {rows} devices (set CPU_NUM={rows} or fewer GPUs)")
    k = rows // n
    return [value[i * k:(i + 1) * k] for i in range(n - 1)] + [value[(n - 1) * k:]]


def _expected(var: Variable | None) -> str:
    if var is None:
        return "an array"
    shape = "" if var.shape is None else f" of shape {list(var.shape)} (-1 = any)"
    return f"an array of {var.dtype or 'numbers'}{shape}"


def _as_array(name: str, value: Any, var: Variable | None) -> np.ndarray:
    """A fed value as a numpy array of numbers; an error naming the feed otherwise."""
    if isinstance(value, np.ndarray) and value.dtype != object \
            and value.dtype.kind not in "USV":
        return value
    if isinstance(value, Variable):
        # NOTE: a Variable is a name in a program, not data (Fluid's conversion refuses
        # it too, as an object numpy cannot read numbers from)
        raise TypeError(f"feed {name!r}: expected {_expected(var)}, got the Variable "
                        f"{value.name!r}, which is a name in a program, not data; feed its "
                        "value (a numpy array or a LoDTensor)")
    if value is None or isinstance(value, (str, bytes, dict, set)) or (
            isinstance(value, np.ndarray) and value.dtype.kind in "USV"):
        raise TypeError(f"feed {name!r}: expected {_expected(var)} (numpy, torch or nested "
                        f"lists of numbers), got a {type(value).__name__}: "
                        f"{_short(value)}")
    dtype = to_numpy(var.dtype) if var is not None and var.dtype else None
    try:
        arr = np.asarray(value, dtype=dtype)
    except (TypeError, ValueError, OverflowError) as e:
        ragged = "inhomogeneous" in str(e) or "sequence" in str(e)
        what = ("a ragged nested list (rows of different lengths, or a mix of lists and "
                "numbers)") if ragged else f"a {type(value).__name__} holding non-numbers"
        raise TypeError(f"feed {name!r}: expected {_expected(var)}, got {what}: "
                        f"{_short(value)} ({type(e).__name__}: {e})") from e
    if arr.dtype == object or arr.dtype.kind in "USV":
        raise TypeError(f"feed {name!r}: expected {_expected(var)}, got a "
                        f"{type(value).__name__} of {arr.dtype} values: {_short(value)}")
    return arr


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def batch_feeds(block: Any, feed: Sequence[str]) -> tuple[str, ...]:
    """The fed variables the program says share the batch: dim 0 is -1, no LoD, not
    persistable. ``check_batch_sizes`` holds them to one batch size.

    Example::

        batch_feeds(program.global_block(), ["x", "label", "lr"])   # ('x', 'label')
    """
    names = []
    for name in feed:
        var = block._find_var_recursive(name)
        if var is not None and not var.persistable and not var.lod_level and var.shape \
                and var.shape[0] == -1:
            names.append(name)
    return tuple(names)


def _rows(value: Any) -> int | None:
    if isinstance(value, LoDTensor):
        value = value.value
    shape = getattr(value, "shape", None)
    if shape is not None:
        return int(shape[0]) if len(shape) else None
    if isinstance(value, (list, tuple)):
        return len(value)
    return None


def check_batch_sizes(names: Sequence[str], feed: dict[str, Any], where: str = "",
                      agree: bool = True) -> None:
    """Raise ValueError when the fed batch variables ``names`` hold 0 rows or (``agree``)
    disagree.

    Example::

        check_batch_sizes(("x", "label"), {"x": x8, "label": label6})
        # ValueError: feeds 'x' and 'label' must have the same batch size ...
    """
    for name in names:
        if _rows(feed[name]) == 0:
            raise ValueError(f"feed {name!r}{where}: the batch is empty (0 rows); dim 0 of "
                             f"{name!r} is the batch (-1 in the program) and needs at least "
                             "one row: skip empty batches")
    problem = batch_size_mismatch(names, feed, where) if agree else None
    if problem:
        raise ValueError(problem)


def batch_size_mismatch(names: Sequence[str], feed: dict[str, Any],
                        where: str = "") -> str | None:
    """What is wrong when the fed batch variables ``names`` have different row counts."""
    first: tuple[str, int] | None = None
    for name in names:
        rows = _rows(feed[name])
        if rows is None:
            continue  # a 0-d value: the shape check reports it
        if first is None:
            first = (name, rows)
        elif rows != first[1]:
            return (f"feeds {first[0]!r} and {name!r}{where} must have the same batch size "
                    f"(dim 0 is -1, the batch, in the program for both): {first[0]!r} has "
                    f"{first[1]} rows, {name!r} has {rows}")
    return None


def _numpy_view(value: Any) -> np.ndarray:
    """A numpy view of a CPU tensor (the caller copies it), else ``as_numpy``'s copy."""
    if type(value) is torch.Tensor and value.device.type == "cpu" and \
            value.dtype != torch.bfloat16:
        return value.detach().numpy()
    return as_numpy(value)


def without_feed_fetch_ops(program: Any, feed: Sequence[str], fetch: Sequence[str],
                           feed_holder: str = "feed", fetch_holder: str = "fetch",
                           strip: Any = None) -> Any:
    """A program holding Fluid's ``feed``/``fetch`` ops (a program saved by Fluid, or built
    with ``prepend_feed_ops``), checked against a run's feed and fetch names as Fluid's
    Executor checks them, and returned without them: the executors bind feeds and fetches by
    name. A program without such ops is returned as it is. ``strip(program)`` makes the
    copy (default ``strip_feed_fetch_ops``; the Executor passes a cached one).

    Every ``feed`` op must read ``feed_holder`` and write a fed variable, one op per fed
    name; every ``fetch`` op must read the fetch target at its ``col`` in ``fetch`` and write
    ``fetch_holder``, one op per target.
    """
    block = program.global_block()
    feeds = [op for op in block.ops if op.type == "feed"]
    fetches = [op for op in block.ops if op.type == "fetch"]
    if not feeds and not fetches:
        return program
    for op in feeds:
        holder, target = op.input("X")[0], op.output("Out")[0]
        if holder != feed_holder:
            raise ValueError(f"Executor.run: the program's feed op reads {holder!r}, not the "
                             f"feed holder {feed_holder!r}; pass feed_var_name={holder!r}")
        if target not in feed:
            raise ValueError(f"Executor.run: the program's feed op (col {op.attr('col')}) "
                             f"writes {target!r}, which the feed dict does not have; feed it "
                             f"(fed: {sorted(feed)})")
    if feeds and len(feeds) != len(feed):
        extra = sorted(set(feed) - {op.output("Out")[0] for op in feeds})
        raise ValueError(f"Executor.run: the program's feed ops do not match the feed dict: "
                         f"{extra} have no feed op")
    for op in fetches:
        holder, target, col = op.output("Out")[0], op.input("X")[0], op.attr("col")
        if holder != fetch_holder:
            raise ValueError(f"Executor.run: the program's fetch op writes {holder!r}, not "
                             f"the fetch holder {fetch_holder!r}; pass "
                             f"fetch_var_name={holder!r}")
        if target not in fetch:
            raise ValueError(f"Executor.run: the program's fetch op (col {col}) reads "
                             f"{target!r}, which fetch_list does not have (fetch_list: "
                             f"{list(fetch)})")
        if not 0 <= col < len(fetch) or fetch[col] != target:
            raise ValueError(f"Executor.run: the program's fetch op reads {target!r} at col "
                             f"{col}, but fetch_list has it at {list(fetch).index(target)}: "
                             f"list the fetch targets in the program's order")
    if fetches and len(fetches) != len(fetch):
        extra = [n for n in fetch if n not in {op.input("X")[0] for op in fetches}]
        raise ValueError(f"Executor.run: the program's fetch ops do not match fetch_list: "
                         f"{extra} have no fetch op")
    return (strip or strip_feed_fetch_ops)(program)


def strip_feed_fetch_ops(program: Any) -> Any:
    """A copy of ``program`` without the ``feed``/``fetch`` ops of its global block."""
    stripped = program.clone()
    sblock = stripped.global_block()
    for i in reversed(range(len(sblock.ops))):
        if sblock.ops[i].type in ("feed", "fetch"):
            sblock._remove_op(i)
    return stripped
