"""Overlapping a multi-trainer step's all-reduces with the backward pass.

The gradient aggregation pass puts each gradient's all-reduce right after the op that
produces it, in the order the backward pass produces them. ``defer_collectives(plan)``
makes those tasks only *start* their all-reduce (the communicator's ``defer``: an
asynchronous work handle) and return, so that the backward ops go on while the transport
sums; the plan waits for them (``communicator.wait_pending``) before the first op that reads
a result: the barrier before the update tail, or a compute op that first waits. The profiler
sees each started all-reduce as ``<op type> in flight`` until the transport completes it.
An all-reduce of parameter gradients also carries its signature check in its own data
(``distributed/data_check.py``) instead of a second collective.

In one process (the ParallelExecutor's devices, ``LocalCommunicator``) an all-reduce is a
node of the step's graph over all devices: it runs as soon as every device produced its
gradient, on whichever worker thread is free, while the devices' backward goes on; the
updates, its only readers, run after the barrier. ``hold_collectives(plan)`` (overlap off)
gives the edges that hold each such all-reduce until every device's backward ended, for a
measurement of what the overlap is worth and for tests.

Example (what ``Plan`` does with ``overlap=True``)::

    plan.deferred = defer_collectives(plan)     # node indices of the started all-reduces
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from .graph import ALL_DEVICES, Node
from .runtime import OpRecord, op_hooks_active, report

__all__ = ["defer_collectives", "hold_collectives"]

GRAD = "@GRAD"

Task = Callable[[], None]


def defer_collectives(plan: Any, overlap: bool = True) -> list[int]:
    """With ``overlap``, make the all-reduces start and return at once, so that the backward
    pass goes on while the transport sums; each is waited for before the first op that
    reads its result: the barrier before the update tail, or a compute op (a compiled
    segment that ends with the updates, gradient clipping) that waits first. Returns their
    node indices. Either way, an all-reduce of parameter gradients carries its signature
    check in its data (the communicator's ``sizes_agreed``).

    NOTE: the sizes of parameter gradients agree across the trainers: the ParallelExecutor's
    first-step program check compared every parameter's shape and the variables every
    collective carries. Other all-reduces (a user's, of activations whose batch may differ)
    keep the separate check, which fails cleanly on a size mismatch.

    NOTE: a node is deferred only when it has readers and none of them is a collective;
    its other successors (the one order of collectives) only order the starts.
    Collectives start in program order as before, so every trainer pairs them the same
    way.
    """
    comm = plan.services[0].communicator if plan.services else None
    if comm is None or not hasattr(comm, "wait_pending") or comm.num_trainers < 2:
        return []
    succ: dict[int, list[int]] = {}
    for a, b in plan.edges:
        succ.setdefault(a, []).append(b)
    nodes = plan.graph.nodes
    params = {p.name for p in plan.block.program.global_block().all_parameters()}
    out: list[int] = []
    wait_in: set[int] = set()
    for i in range(len(nodes)):
        node = nodes[i]
        if node.type not in ("c_allreduce_sum", "c_allreduce_coalesced") \
                or node.device != ALL_DEVICES:
            continue
        if all(x.endswith(GRAD) and x[:-len(GRAD)] in params for x in node.op.input("X")):
            plan._fns[i] = _agreed(plan._fns[i], comm)
        if not overlap or i in plan._in_tail:
            continue
        mine = {(d, n) for refs in node.outputs.values() for d, n, _ in refs}
        readers = [b for b in succ.get(i, ()) if mine & {
            (d, n) for slots in (nodes[b].inputs, nodes[b].outputs)
            for refs in slots.values() for d, n, _ in refs}]
        if not readers or any(nodes[b].device == ALL_DEVICES for b in readers):
            continue
        plan._fns[i] = _deferring(plan._fns[i], comm, node)
        out.append(i)
        wait_in.update(b for b in readers if b not in plan._in_tail)
    for b in sorted(wait_in):
        plan._fns[b] = _after(plan._wait_deferred, plan._fns[b])
        plan._inline[b] = None
    return out


def _tail_read(plan: Any, i: int, succ: dict[int, list[int]]) -> bool:
    """Whether node ``i``'s results are read, and only by the update tail."""
    nodes = plan.graph.nodes
    mine = {(d, n) for refs in nodes[i].outputs.values() for d, n, _ in refs}
    readers = [b for b in succ.get(i, ()) if mine & {
        (d, n) for slots in (nodes[b].inputs, nodes[b].outputs)
        for refs in slots.values() for d, n, _ in refs}]
    return bool(readers) and all(b in plan._in_tail for b in readers)


def hold_collectives(plan: Any) -> list[tuple[int, int]]:
    """Edges that make each in-process all-reduce that only the updates read wait for every
    device op before it that it does not feed: the all-reduces then run after the backward
    pass of every device instead of during it (``overlap_communication=False``). Same
    values: only the moment of the sums changes, not their operands nor their order.

    NOTE: an edge ``x -> a`` is added only when ``x`` is not reachable from ``a`` in the
    graph with the edges added so far, so the graph stays acyclic.
    """
    comm = plan.services[0].communicator if plan.services else None
    if comm is None or (hasattr(comm, "wait_pending") and comm.num_trainers > 1):
        return []
    nodes = plan.graph.nodes
    succ: dict[int, list[int]] = {}
    for a, b in plan.edges:
        succ.setdefault(a, []).append(b)
    held = [i for i, node in enumerate(nodes)
            if node.type in ("c_allreduce_sum", "c_allreduce_coalesced")
            and node.device == ALL_DEVICES and i not in plan._in_tail
            and _tail_read(plan, i, succ)]
    compute = [i for i in plan.compute_nodes if nodes[i].device != ALL_DEVICES]
    added: list[tuple[int, int]] = []
    for a in held:
        seen, stack = {a}, [a]
        while stack:
            for b in succ.get(stack.pop(), ()):
                if b not in seen:
                    seen.add(b)
                    stack.append(b)
        for x in compute:
            if x not in seen:
                added.append((x, a))
                succ.setdefault(x, []).append(a)
    return added


def _agreed(fn: Task, comm: Any) -> Task:
    """``fn`` (a collective node's task) with the communicator told that the sizes agree."""
    def run() -> None:
        comm.sizes_agreed = True
        try:
            fn()
        finally:
            comm.sizes_agreed = False
    return run


def _after(first: Callable[[], None], fn: Task) -> Task:
    """``fn`` run after ``first``."""
    def run() -> None:
        first()
        fn()
    return run


def _deferring(fn: Task, comm: Any, node: Node) -> Task:
    """``fn`` (a collective node's task) with the communicator's all-reduces only started.

    While an op hook is registered (the profiler), each all-reduce also reports its time in
    flight, from its start to the transport's completion, as ``<op type> in flight`` on the
    thread that completed it: the timeline shows it beside the backward ops it overlaps."""
    index, name = node.index, f"{node.type} in flight"

    def run() -> None:
        hooked = op_hooks_active()
        before = len(comm.in_flight()) if hooked else 0
        start = time.perf_counter_ns()
        comm.defer = index
        try:
            fn()
        finally:
            comm.defer = None
        if hooked:
            for fut in comm.in_flight()[before:]:
                fut.add_done_callback(lambda _: report(OpRecord(
                    name, node.op_index, ALL_DEVICES, start, time.perf_counter_ns(),
                    threading.get_ident())))
    return run
