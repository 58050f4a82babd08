"""The reader ops of Fluid's ``py_reader`` and non-iterable ``DataLoader``.

A reader (``fluid.layers.py_reader``, ``create_py_reader_by_data``, or a non-iterable
``DataLoader``) fills a bounded queue from a background thread. As in Fluid, the startup
program holds ``create_py_reader`` (the queue variable in, the reader variable out), the main
program ``create_double_buffer_reader`` (when double-buffered) and ``read``, which takes the
next batch and writes one output per data variable. Readers live in a process-local table and
these ops hold their index (``reader_id``), as ``py_func`` does for its functions: nothing
about the queue is serialized, and a program with a reader runs only in the process that
built it.

The reader variables (type ``READER``) and the queue variable hold a ``ReaderHandle`` once
their op ran; the ops find the reader by their ``reader_id`` attr, so a main program runs
whether or not its startup program ran in the same scope (the inputs are ``handle_inputs``:
the executors hand None where the scope holds no value).

When the data of an epoch is used up the ``read`` op raises ``EOFException`` (Fluid's
``fluid.core.EOFException``), which the executors pass to the caller as it is: the training
loop catches it and calls ``reader.reset()``.

In a data-parallel run the op runs once per device; the ``n`` reads of one step take ``n``
consecutive batches, device ``i`` the ``i``-th (``ReaderSource.take``), whatever order
the threads run them in. The op has a side effect, so it is never pruned and keeps its
place among the other side-effect ops.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import torch

from ..lod import attach_lod, get_lod
from .registry import Meta, register_op

__all__ = ["EOFException", "ReaderSource", "ReaderHandle", "register_reader", "reader_source"]


class EOFException(Exception):
    """The reader's data for this epoch is used up (``fluid.core.EOFException``).

    Raised by ``exe.run`` when a ``read`` op finds the reader's queue finished; call
    ``reader.reset()`` and ``reader.start()`` for the next epoch.
    """


class ReaderSource(Protocol):
    """What a ``read`` op asks of the reader it names."""

    name: str

    def take(self, device_index: int, device_count: int) -> list[torch.Tensor]:
        """The batch for ``device_index`` of this step (EOFException at the end)."""


_READERS: list[ReaderSource] = []


def register_reader(reader: ReaderSource) -> int:
    """Keep ``reader`` for read ops; return its id."""
    _READERS.append(reader)
    return len(_READERS) - 1


def reader_source(idx: int) -> ReaderSource:
    if not 0 <= idx < len(_READERS):
        raise ValueError(f"read: no reader with id {idx} in this process; a program with a "
                         "py_reader runs only in the process that built it")
    return _READERS[idx]


@dataclass(frozen=True)
class ReaderHandle:
    """What a reader variable (or a reader's queue variable) holds in a scope: the reader's
    id in this process's table and its name."""

    reader_id: int
    name: str


def _handle(attrs: dict) -> ReaderHandle:
    return ReaderHandle(int(attrs["reader_id"]), str(attrs["reader_name"]))


def _create_py_reader(ins: dict, attrs: dict, ctx: Any) -> dict:
    return {"Out": [_handle(attrs) for _ in ctx.op.output("Out")]}


def _create_double_buffer_reader(ins: dict, attrs: dict, ctx: Any) -> dict:
    # NOTE: the reader's producer thread prepares the batches ahead already (and moves them
    # to double_buffer's place); the decorated reader is the same reader
    return {"Out": _handle(attrs)}


_HANDLE_OP = "a reader handle, not a tensor"

register_op("create_py_reader", inputs=("blocking_queue",), outputs=("Out[]",),
            attrs={"shape_concat": [], "ranks": [], "lod_levels": [], "use_data_config": True,
                   "reader_id": -1, "reader_name": ""},
            kernel=_create_py_reader, side_effect=True, handle_inputs=("blocking_queue",),
            no_compile=_HANDLE_OP)

register_op("create_double_buffer_reader", inputs=("UnderlyingReader",), outputs=("Out",),
            attrs={"place": "AUTO", "reader_id": -1, "reader_name": ""},
            kernel=_create_double_buffer_reader, handle_inputs=("UnderlyingReader",),
            no_compile=_HANDLE_OP)


def _read_shape(ins: dict, attrs: dict) -> dict:
    shapes, dtypes = attrs["shapes"], attrs["dtypes"]
    if len(shapes) != len(dtypes):
        raise ValueError(f"read: {len(shapes)} shapes but {len(dtypes)} dtypes; give one of "
                         "each per data variable")
    return {"Out": [Meta(tuple(int(d) for d in s), str(t)) for s, t in zip(shapes, dtypes)]}


def _read(ins: dict, attrs: dict, ctx: Any) -> dict:
    if not attrs["throw_eof_exp"]:
        raise ValueError("read: attribute throw_eof_exp must be True (Fluid sets False only "
                         "for its ParallelExecutor's data balancing, which parafluid does not "
                         "do), got False")
    comm = ctx.communicator
    ndev = 1 if comm is None else len(comm.devices)
    reader = reader_source(int(attrs["reader_id"]))
    if attrs["reader_name"] and reader.name != attrs["reader_name"]:
        raise ValueError(f"read: reader {int(attrs['reader_id'])} of this process is "
                         f"{reader.name!r}, the op expects {attrs['reader_name']!r}; a program "
                         "with a py_reader runs only in the process that built it")
    values = reader.take(ctx.device_index, ndev)
    names = ctx.op.output("Out")
    if len(values) != len(names):
        raise ValueError(f"read: reader {reader.name!r} gave {len(values)} values for "
                         f"{len(names)} outputs ({', '.join(names)})")
    outs = []
    for t in values:
        if t.device != ctx.device:
            t = attach_lod(t.to(ctx.device), get_lod(t))
        outs.append(t)
    return {"Out": outs}


register_op("read", inputs=("Reader",), outputs=("Out[]",),
            attrs={"throw_eof_exp": True, "infer_out": True, "reader_id": -1,
                   "reader_name": "", "shapes": [], "dtypes": [], "lod_levels": []},
            infer_shape=_read_shape, kernel=_read, side_effect=True, handle_inputs=("Reader",))
