"""Level-of-detail (sequence) information: how a batch of variable-length sequences travels.

A LoDTensor holds the steps of every sequence of a batch stacked along dim 0, plus offsets:
``lod = [[0, 2, 5]]`` says rows 0-1 are the first sequence and rows 2-4 the second. Fluid
code builds one with ``fluid.create_lod_tensor``, ``LoDTensor.set_lod`` or a ``DataFeeder``
over a ``lod_level=1`` variable.

At run time the offsets ride on the tensor itself (``attach_lod`` / ``get_lod``): an op
whose registration row declares ``share_lod=(input, outputs)`` hands its input's offsets to
those outputs (as Fluid's ShareLoD does; ``engine.runtime.bind_op`` does it), and the sequence ops
read them. Only the last (finest) level is interpreted by the ops; the levels above it are
carried along.

Example::

    import numpy as np, parafluid as fluid
    t = fluid.create_lod_tensor(np.arange(5).reshape(5, 1), [[2, 3]], fluid.CPUPlace())
    t.lod()                          # [[0, 2, 5]]
    t.recursive_sequence_lengths()   # [[2, 3]]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from .scope import TENSOR_LOD_ATTR, LoDTensor

__all__ = ["create_lod_tensor", "create_random_int_lodtensor", "split_by_sequences",
           "sequence_ranges", "slice_lod", "merge_lods", "lengths_to_offsets",
           "offsets_to_lengths", "attach_lod", "get_lod", "require_lod"]

LOD_ATTR = TENSOR_LOD_ATTR  # the attribute of a run-time tensor holding its LoD


def lengths_to_offsets(lengths: Sequence[int]) -> list[int]:
    """``[2, 3]`` -> ``[0, 2, 5]``."""
    offsets = [0]
    for n in lengths:
        offsets.append(offsets[-1] + int(n))
    return offsets


def offsets_to_lengths(offsets: Sequence[int]) -> list[int]:
    """``[0, 2, 5]`` -> ``[2, 3]``."""
    return [int(b) - int(a) for a, b in zip(offsets, offsets[1:])]


def check_lod(lod: Sequence[Sequence[int]], rows: int, where: str) -> list[list[int]]:
    """Validate offsets (start at 0, non-decreasing, each level indexes the next, the last
    ends at ``rows``); return them as plain lists."""
    lod = [[int(v) for v in level] for level in lod]
    for i, level in enumerate(lod):
        if not level or level[0] != 0 or any(b < a for a, b in zip(level, level[1:])):
            raise ValueError(f"{where}: LoD level {i} {level} must start at 0 and never "
                             "decrease")
        end = rows if i == len(lod) - 1 else len(lod[i + 1]) - 1
        if level[-1] != end:
            what = f"the {rows} rows of the tensor" if i == len(lod) - 1 else \
                f"the {end} sequences of level {i + 1}"
            raise ValueError(f"{where}: LoD level {i} {level} ends at {level[-1]} but must "
                             f"cover {what}")
    return lod


# ----------------------------------------------------------------------------- user API


def create_lod_tensor(data: Any, recursive_seq_lens: Sequence[Sequence[int]],
                      place: Any = None) -> LoDTensor:
    """A LoDTensor from an array (or a list of sequences) and sequence lengths per level.

    Args:
        data: a numpy array whose rows are the steps of all sequences, a LoDTensor, or a list
            of sequences of ints (lists or numpy arrays; each becomes rows of one int64
            column, as in Fluid).
        recursive_seq_lens: lengths per level, e.g. ``[[2, 3]]`` for two sequences of 2 and
            3 steps.
        place: where the tensor lives (default CPU).

    Example::

        words = fluid.create_lod_tensor([[1, 2], [3, 4, 5]], [[2, 3]], fluid.CPUPlace())
    """
    if isinstance(data, LoDTensor):
        data = np.array(data)
    elif isinstance(data, list):
        # NOTE: a sequence may be a list or a numpy array (Fluid's book feeds
        # [np.array([10, 8, 9])]); a bare number is a sequence of one
        def is_seq(seq: Any) -> bool:
            return isinstance(seq, (list, tuple)) or (isinstance(seq, np.ndarray)
                                                      and seq.ndim >= 1)
        flat = [v for seq in data for v in (seq if is_seq(seq) else [seq])]
        lens = [len(seq) if is_seq(seq) else 1 for seq in data]
        if list(lens) != [int(n) for n in recursive_seq_lens[-1]]:
            raise ValueError(f"create_lod_tensor: the sequences have lengths {lens} but "
                             f"recursive_seq_lens ends with {list(recursive_seq_lens[-1])}")
        data = np.asarray(flat, dtype="int64").reshape(-1, 1)
    arr = np.asarray(data)
    if arr.ndim == 0:
        raise ValueError("create_lod_tensor: data must have at least one dimension (the steps)")
    lod = check_lod([lengths_to_offsets(level) for level in recursive_seq_lens],
                    arr.shape[0], "create_lod_tensor")
    tensor = LoDTensor()
    tensor.set(arr, place)
    tensor.set_lod(lod)
    return tensor


def create_random_int_lodtensor(recursive_seq_lens: Sequence[Sequence[int]],
                                base_shape: Sequence[int], place: Any = None, low: int = 0,
                                high: int = 1) -> LoDTensor:
    """A LoDTensor of random int64 values in ``[low, high]`` (both inclusive, as Fluid).

    The shape is ``[total steps] + base_shape``.

    Example::

        ids = fluid.create_random_int_lodtensor([[2, 3]], [1], fluid.CPUPlace(), 0, 9)
    """
    if low > high:
        raise ValueError(f"create_random_int_lodtensor: low ({low}) must be <= high ({high})")
    rows = sum(int(n) for n in recursive_seq_lens[-1])
    data = np.random.randint(low, high + 1, size=[rows, *base_shape]).astype("int64")
    return create_lod_tensor(data, recursive_seq_lens, place)


def split_by_sequences(tensor: LoDTensor, parts: int) -> list[LoDTensor]:
    """Cut a LoDTensor into ``parts`` LoDTensors of whole top-level sequences (``n // parts``
    sequences each, the last part also the remainder), e.g. one per device.

    This is what a data-parallel run does with a dict feed's LoDTensors; it is also useful to
    build a list feed of one dict per device by hand. With several LoD levels the cut is at
    the top level (a paragraph is never split across devices) and every level is re-based.

    Example::

        words = fluid.create_lod_tensor([[1, 2], [3], [4, 5, 6], [7]], [[2, 1, 3, 1]], None)
        per_device = fluid.lod.split_by_sequences(words, 2)      # 2 + 2 sequences
        exe.run(compiled, feed=[{"words": w, "label": l} for w, l in zip(per_device, labels)])
    """
    if isinstance(parts, bool) or not isinstance(parts, int) or parts < 1:
        raise ValueError(f"split_by_sequences: parts must be a positive int, got {parts!r}")
    lod = tensor.lod()
    if not lod:
        raise ValueError("split_by_sequences: the tensor has no LoD (set one with set_lod or "
                         "create_lod_tensor)")
    value = tensor.value
    if value is None:
        raise ValueError("split_by_sequences: the LoDTensor has no value; call .set(array)")
    out = []
    for a, b in sequence_ranges(len(lod[0]) - 1, parts, "split_by_sequences"):
        rows, piece_lod = slice_lod(lod, a, b)
        piece = LoDTensor()
        piece._holder.value = value[rows[0]:rows[1]]
        piece.set_lod(piece_lod)
        out.append(piece)
    return out


def sequence_ranges(sequences: int, parts: int, where: str) -> list[tuple[int, int]]:
    """``[start, end)`` sequence indices of each of ``parts`` parts: ``sequences // parts``
    each, the last part also the remainder (as rows are split over devices)."""
    if sequences < parts:
        raise ValueError(f"{where}: {sequences} sequences cannot be split over {parts} "
                         "devices, so some device would get no data; use fewer devices or a "
                         "larger batch (at least one sequence per device)")
    k = sequences // parts
    bounds = [i * k for i in range(parts)] + [sequences]
    return list(zip(bounds, bounds[1:]))


def slice_lod(lod: Sequence[Sequence[int]], start: int,
              end: int) -> tuple[tuple[int, int], list[list[int]]]:
    """Top-level sequences ``[start, end)`` of a LoD: the rows they cover and their own LoD
    (every level re-based to start at 0).

    Example::

        slice_lod([[0, 2, 3], [0, 1, 4, 6]], 1, 2)   # ((4, 6), [[0, 1], [0, 2]])
    """
    out = []
    a, b = start, end
    for level in lod:
        offsets = [int(o) for o in level[a:b + 1]]
        out.append([o - offsets[0] for o in offsets])
        a, b = offsets[0], offsets[-1]
    return (a, b), out


def merge_lods(lods: Sequence[Sequence[Sequence[int]]]) -> list[list[int]] | None:
    """The LoD of per-device values stacked along dim 0 (a merged fetch): each level's
    offsets appended, shifted; None unless every part has a LoD of the same depth.

    Example::

        merge_lods([[[0, 2, 3]], [[0, 4]]])   # [[0, 2, 3, 7]]
    """
    if not lods or any(not lod or len(lod) != len(lods[0]) for lod in lods):
        return None
    merged = []
    for i in range(len(lods[0])):
        level = [0]
        for lod in lods:
            base = level[-1]
            level.extend(base + int(o) for o in lod[i][1:])
        merged.append(level)
    return merged


# ----------------------------------------------------------------------------- run time


def attach_lod(tensor: Any, lod: list[list[int]] | None) -> Any:
    """Record ``lod`` on a run-time tensor (no-op for None or an empty LoD); return it."""
    if lod and isinstance(tensor, torch.Tensor):
        setattr(tensor, LOD_ATTR, lod)
    return tensor


def get_lod(tensor: Any) -> list[list[int]] | None:
    """The LoD a run-time tensor carries, or None."""
    return getattr(tensor, LOD_ATTR, None)


def require_lod(op: str, slot: str, tensor: Any) -> list[int]:
    """The finest-level offsets of ``tensor``; a ValueError saying how to feed them if absent."""
    lod = get_lod(tensor)
    if not lod:
        raise ValueError(f"{op}: input {slot} carries no sequence information (LoD); feed a "
                         "LoDTensor (fluid.create_lod_tensor, or a DataFeeder over a data "
                         "variable declared with lod_level=1)")
    offsets = lod[-1]
    if offsets[-1] != tensor.shape[0]:
        raise ValueError(f"{op}: input {slot} has {tensor.shape[0]} rows but its LoD "
                         f"{offsets} covers {offsets[-1]}")
    return offsets
