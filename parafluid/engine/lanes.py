"""Running a placed program: one lane per device, devices running concurrently.

The Executor runs an unplaced program on one lane, in program order. A program whose ops
are placed on several local devices (``fluid.place_guard``) goes through
``passes.executor_pipeline`` (the copies of ``insert_place_transfers``), then its one-device
SSA graph gets, besides its data dependencies, one chain per device: the ops of a device run
one at a time, in program order, as on a device's stream, while ops of different devices run
concurrently wherever the data flow allows. The Scheduler gets one worker per device, each
with an equal share of the cores for torch's intra-op threads (``make_scheduler(lanes)``).

Random ops drawing from torch's default generator (``seed`` attr 0) also keep their program
order across devices, so that a placed program draws the same numbers as the unplaced one.

Example::

    program, graph, lanes, homes = placed_graph(main, "cpu:0")
    lanes                               # 2 for a program placed on cpu:0 and cpu:1
    sched = make_scheduler(lanes)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ..passes.place_transfers import op_devices, persistable_homes
from ..placement import device_name, torch_device
from .graph import GraphOptions, SSAGraph, build_graph

__all__ = ["placed_graph", "placed_parallel_graph", "chain_by_device", "at_home"]


def placed_graph(program: Any, device: Any) -> tuple[Any, SSAGraph, int, dict[str, Any]]:
    """The placed program (copies inserted), its graph with per-device chains, the number
    of devices (lanes) it uses, and the torch device each persistable it reads must be on
    at the start of a step (see ``at_home``)."""
    from ..passes import executor_pipeline

    placed = executor_pipeline(device_name(device))(program)
    devices = op_devices(placed, device_name(device))
    graph = build_graph(placed, 1)
    # NOTE: CPU devices of one process share torch's one CPU: a CPU value is home anywhere
    homes = {name: torch_device(dev, storage=True)
             for name, dev in persistable_homes(placed, device_name(device)).items()}
    return placed, graph, chain_by_device(graph, devices), homes


def at_home(value: Any, home: torch.device) -> Any:
    """``value`` on its home device: itself when it is there (always so on CPU-only runs),
    else a copy there (a parameter that a GPU initializer made and a CPU optimizer updates).

    Example::

        holder.value = at_home(holder.value, torch.device("cpu"))
    """
    if not isinstance(value, torch.Tensor):
        return value
    if home.type == "cpu":
        return value if value.device.type == "cpu" else value.to(home)
    return value if value.device == home else value.to(home)


def placed_parallel_graph(program: Any, devices: list[torch.device], options: GraphOptions,
                          num_microbatches: int = 1, loss_name: str | None = None,
                          segment: Callable[[Any], Any] | None = None
                          ) -> tuple[Any, SSAGraph, int]:
    """The ParallelExecutor's graph of a placed (or micro-batched) program on one device.

    ``num_microbatches > 1`` first splits the batch (``passes.microbatch``); the copies
    between devices come after, so each micro-batch's activations cross on their own.
    ``segment``: the segmentation pass for compiled execution, run last.
    """
    if len(devices) != 1:
        raise ValueError(
            f"ParallelExecutor: this program places ops on devices (fluid.place_guard) or "
            f"asks for micro-batches, and runs data-parallel on {len(devices)} devices; "
            "data parallelism inside a placed program (hybrid parallelism) is not supported "
            "in one process: run it on one place (CompiledProgram(program, build_strategy) "
            "without with_data_parallel, or places=[one place])")
    from ..passes.microbatch import split_microbatches
    from ..passes.place_transfers import insert_place_transfers

    default = device_name(devices[0])
    fetch = [loss_name] if loss_name else []
    program = split_microbatches(program, num_microbatches, fetch)
    placed = insert_place_transfers(program, default)
    if segment is not None:  # compiled segments, each on one device, between the copies
        placed = segment(placed)
    graph = build_graph(placed, 1, options)
    return placed, graph, chain_by_device(graph, op_devices(placed, default))


def chain_by_device(graph: SSAGraph, devices: list[str]) -> int:
    """Add edges so that each device runs its ops in program order; return the device count.

    ``devices[i]`` is the device of op ``i`` of the block the graph was built from.
    """
    last: dict[str, int] = {}
    last_random: int | None = None
    for node in graph.nodes:  # program order
        dev = devices[node.op_index]
        prev = last.get(dev)
        if prev is not None and prev != node.index:
            node.deps.add(prev)
        last[dev] = node.index
        if node.attrs.get("seed", None) == 0:  # torch's default generator: keep draw order
            if last_random is not None:
                node.deps.add(last_random)
            last_random = node.index
    return max(1, len(last))

