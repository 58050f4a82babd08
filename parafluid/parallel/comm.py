"""The communication interface behind the collective ops (``c_allreduce_sum`` and friends).

A ``Communicator`` joins the local devices of one process (and, in a multi-process setup,
the devices of the other processes). The collective ops of ``parafluid.ops.comm`` call it
through ``ctx.communicator``; nothing else in the executor knows how values travel,
so a communicator spanning processes (torch.distributed) replaces ``LocalCommunicator``
without touching the graph builder or the ops.

Every method takes one value per *local* device, in device order, and returns one value per
local device. Sums run in a fixed device order (``((x0 + x1) + x2) + ...``) so that results
are bitwise reproducible and independent of thread timing. Values are read, never modified;
results may be shared between devices of the same torch device (values in the graph are
immutable once produced: only persistables are updated in place).

Example::

    comm = LocalCommunicator([torch.device("cpu")] * 2)
    comm.all_reduce([torch.ones(3), torch.ones(3)])   # [tensor([2., 2., 2.])] * 2
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import torch

from ..scope import SelectedRows

__all__ = ["Communicator", "LocalCommunicator"]

Value = Any  # a torch.Tensor or a SelectedRows


class Communicator(Protocol):
    """What the collective ops need.

    ``nranks`` counts devices over all processes; ``rank_offset`` is the global index of this
    process's device 0 (a device's global index is ``rank_offset + local index``). ``root``
    arguments are global indices.
    """

    nranks: int
    rank_offset: int
    devices: list[torch.device]

    def all_reduce(self, values: Sequence[Value], name: str = "") -> list[Value]:
        """Sum over all ranks; every local device gets the sum.

        ``name`` (every method): the variables carried, which a communicator spanning
        processes compares across them before the transfer."""

    def reduce(self, values: Sequence[Value], root: int, name: str = "") -> Value | None:
        """Sum over all ranks onto device ``root``; the sum there, None in other processes."""

    def broadcast(self, value: Value | None, root: int, name: str = "") -> list[Value]:
        """``value`` from device ``root`` (None in other processes) to every local device."""


class LocalCommunicator:
    """The devices of this process; sums in device order, on the root's device.

    Dense tensors are added; ``SelectedRows`` are concatenated (rows and values, in device
    order) and never densified.
    """

    def __init__(self, devices: Sequence[torch.device]) -> None:
        if not devices:
            raise ValueError("LocalCommunicator needs at least one device")
        self.devices = list(devices)
        self.nranks = len(self.devices)
        self.rank_offset = 0
        # NOTE: on one torch device (several CPU "devices") a result is shared, not copied.
        self._same_device = len({str(d) for d in self.devices}) == 1

    def _check(self, values: Sequence[Value], what: str) -> None:
        if len(values) != self.nranks:
            raise ValueError(f"{what}: expected one value per device ({self.nranks}), "
                             f"got {len(values)}")

    def _sum(self, values: Sequence[Value], device: torch.device) -> Value:
        first = values[0]
        if isinstance(first, SelectedRows):
            if not all(isinstance(v, SelectedRows) for v in values):
                raise TypeError("cannot sum sparse (SelectedRows) and dense gradients across "
                                "devices: every device must produce the same kind")
            return SelectedRows(torch.cat([v.rows.to(device) for v in values]),
                                torch.cat([v.value.to(device) for v in values]), first.height)
        if len(values) == 1:
            return first
        acc = first.to(device) + values[1].to(device)
        for v in values[2:]:
            acc += v.to(device)
        return acc

    def _spread(self, value: Value) -> list[Value]:
        if self._same_device:
            return [value] * self.nranks
        return [value if value.device == d else value.to(d) for d in self.devices]

    def all_reduce(self, values: Sequence[Value], name: str = "") -> list[Value]:
        self._check(values, "all_reduce")
        return self._spread(self._sum(values, self.devices[0]))

    def reduce(self, values: Sequence[Value], root: int, name: str = "") -> Value:
        self._check(values, "reduce")
        return self._sum(values, self.devices[root])

    def broadcast(self, value: Value, root: int, name: str = "") -> list[Value]:
        out = []
        for i, d in enumerate(self.devices):
            if i == root:
                out.append(value)
            elif isinstance(value, SelectedRows):
                out.append(value.to(d) if not self._same_device else value)
            else:
                # A broadcast parameter is updated in place later on its device: copy it.
                out.append(value.to(d, copy=True))
        return out
