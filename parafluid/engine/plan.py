"""A block bound to kernels and ready to run: the one run path of every executor.

A ``Plan`` is built once per (program version, feed names, fetch names) from the SSA graph
of a block (``parafluid.engine.graph``; one device for the Executor, N for the
ParallelExecutor). It holds one value dict (``env``) per device and one task per node:

- a replica node runs its op (``runtime.bind_op``) against its device's env; a collective
  node gives the op one value per device and writes the results back to every device;
- every task runs in the same wrapper: a failure becomes ``OpRunError`` naming the op, its
  inputs, device and callsite; a persistable the op wrote is put in the scope at once
  (``RunServices.write_persistable``), so ops that block and serve others see it; values
  whose last reader ran are dropped (``passes.liveness.release_plan``) when releasing is on;
- ``run_plan(plan, scheduler)`` hands the tasks to the scheduler so that a step happens
  whole or not at all (``parafluid.engine.atomic``): the update tail (the program's last ops
  that write persistables: optimizer updates, beta-pow accumulators) starts after a barrier
  task, once every other node finished; SIGINT is held back during the tail; a failure or
  an earlier interrupt restores the persistables the step wrote (the undo log), on every
  device. With one lane the tasks run on the calling thread in program order. While an op
  hook is registered (the profiler) the tasks are wrapped to report their timings, and with
  FLAGS_check_nan_inf to check their outputs: each mode is a task list of its own, chosen
  once per run, so nothing per op is added when they are off.

``Plan.run(scopes, feeds, scheduler)`` is a whole step as every executor runs it: the value
dicts filled from the feeds and the scopes, ``run_plan``, the fetch targets read back, the
values dropped. ``RunServices`` is what the ops bound for one device reach beyond their
inputs (scope, communicator); its ``run_block`` goes to a ``BlockRunner``, which
runs sub-blocks (``RunContext.run_block``) through the same path.

Example (what the Executor does with one device)::

    plan = Plan(build_graph(program, 1), program.global_block(), [cpu], [RunServices(program)],
                feed=("x",), fetch=(loss.name,), serial=True)
    (loss_value,), = plan.run([scope], [{"x": x}], Scheduler(1))
"""

from __future__ import annotations

import heapq
import threading
from collections.abc import Callable, Sequence
from typing import Any

import torch

from ..dtypes import VarType
from ..feed_fetch import batch_feeds, missing_value_message
from ..ops.reader import EOFException
from ..ops.registry import get_op_def
from ..passes.compile_regions import SEGMENT_OP
from ..passes.liveness import release_plan, sub_block_io_listed
from ..passes.memory_optimize import check_fetch_targets
from ..scope import TENSOR_LOD_ATTR, TensorArray
from .atomic import StepGuard, UndoLog, check_finite, nan_inf_flag
from .compiled_functions import bind_compiled_function
from .graph import ALL_DEVICES, GraphOptions, Node, SSAGraph, build_graph
from .lanes import at_home
from .overlap import defer_collectives, hold_collectives
from .runtime import (
    OpRunError,
    RunContext,
    bind_op,
    op_detail,
    op_error,
    op_hooks_active,
    timed,
)
from .scheduler import Scheduler, TaskError, TaskGraph

__all__ = ["Plan", "run_plan", "RunServices", "BlockRunner"]


def _binder(op: Any) -> Callable:
    """How to bind ``op``: a compiled segment as one function of its ops, any other op
    through ``runtime.bind_op``."""
    return bind_compiled_function if op.type == SEGMENT_OP else bind_op

Task = Callable[[], None]


def _commits(op: Any) -> bool:
    """A compiled segment that ends with the updates and commits its new values after the
    call (``compile_regions(fuse_updates=True)``): it never writes a scope value in place."""
    return op.type == SEGMENT_OP and bool(op.attrs.get("commit"))


def _event_name(op: Any) -> str:
    """The profiler's name for a node's task: the op type; a compiled segment lists its
    ops."""
    if op.type != SEGMENT_OP:
        return op.type
    types = [o.type for o in op.attrs["sub_block"].ops]
    shown = ", ".join(types[:8]) + (", ..." if len(types) > 8 else "")
    return f"{SEGMENT_OP} {op.attrs.get('segment', 0)} ({len(types)} ops: {shown})"


def _handle_names(block: Any) -> frozenset[str]:
    """The variables the block's ops read only through ``handle_inputs`` slots (a reader,
    its queue): a run without their value hands the ops None."""
    handles, values = set(), set()
    for op in block.ops:
        slots = get_op_def(op.type).handle_inputs
        for slot, names in op.inputs.items():
            (handles if slot in slots else values).update(names)
    return frozenset(handles - values)


class RunServices:
    """What the ops bound for one device of one executor reach outside their inputs.

    Args:
        program: the program being run (for ``run_block``).
        scope: where persistables live; the executor sets it at the start of each run.
        communicator: joins this device with the others (collective ops), or None.
        device_index: this device's index in a data-parallel run (0 for the Executor).
        local_writes: write persistables into ``scope`` itself, never into a parent scope
            (the per-device scopes of a ParallelExecutor keep their own copies).

    ``pending``: what the ops of the running step started and did not wait for (a
    parameter-server trainer's sends, ``ClientPool.send_async``): objects with
    ``wait_sends()`` (raises the first failure) and ``settle_sends()`` (returns it). The step
    waits for them before it ends, whole or failed, so nothing it started outlives it.
    """

    __slots__ = ("program", "scope", "communicator", "device_index",
                 "local_writes", "device", "pending", "_block_runner")

    def __init__(self, program: Any = None, scope: Any = None, communicator: Any = None,
                 device_index: int = 0, local_writes: bool = False,
                 device: torch.device | None = None) -> None:
        self.program = program
        self.scope = scope
        self.communicator = communicator
        self.device_index = device_index
        self.local_writes = local_writes
        self.device = device if device is not None else torch.device("cpu")
        self.pending: set[Any] = set()
        self._block_runner: Any = None

    def write_persistable(self, name: str, value: Any) -> None:
        """Make a persistable written by an op visible in the scope at once."""
        scope = self.scope
        if scope is None:
            return
        holder = None if self.local_writes else scope.find_var(name)
        if holder is None:
            holder = scope.var(name)
        holder.value = value
        # the scope variable keeps the LoD beside the value (what a LoDTensor view reads)
        holder.lod = [list(level) for level in getattr(value, TENSOR_LOD_ATTR, None) or ()]

    def run_block(self, block_idx: int, scope: Any = None, feed: dict[str, Any] | None = None,
                  fetch: Sequence[str] = ()) -> list[Any]:
        """Run sub-block ``block_idx`` of the program against ``scope`` (default: this one)."""
        if self.program is None:
            raise RuntimeError("run_block: this op was bound without a program")
        if self._block_runner is None:
            self._block_runner = BlockRunner(self.program, self.device, self)
        return self._block_runner.run(block_idx, scope if scope is not None else self.scope,
                                      feed or {}, tuple(fetch))



class Plan:
    """Tasks for the nodes of ``graph``, and the scope traffic around a run.

    Args:
        graph: the SSA graph of ``block``.
        block: the block the graph was built from.
        devices: one torch device per graph device.
        services: one RunServices per graph device (scope, communicator, ...).
        feed, fetch: the names fed and fetched (fetch targets are never released).
        release: drop temporaries after their last reader (eager deletion); the inputs of
            ``delete_var`` ops are dropped either way.
        inplace: node index -> factory ``f(env) -> task`` for nodes run in place.
        name_devices: say "on device d" in errors (data-parallel runs).
        serial: the plan only ever runs on one lane in node order (the Executor): a value
            read by several ops is dropped by its last reader alone, with no count to keep.
        lanes: scheduler lanes the plan wants (one per device of a placed program).
        homes: where each persistable must be before a step (placement's
            ``persistable_homes``), or None.
        overlap: start the all-reduces and go on with the backward pass; the first op that
            reads a sum waits for it (a communicator across processes; see
            ``engine.overlap``).
    """

    def __init__(self, graph: SSAGraph, block: Any, devices: list[torch.device],
                 services: list[RunServices], feed: tuple[str, ...], fetch: tuple[str, ...],
                 release: bool = True, inplace: dict[int, Any] | None = None,
                 name_devices: bool = True, serial: bool = False, lanes: int = 1,
                 homes: dict[str, Any] | None = None, overlap: bool | None = None) -> None:
        self.graph = graph
        self.block = block
        self.lanes = lanes
        self.homes = homes
        self.ndev = graph.ndev
        self.feed = feed
        self.fetch = fetch
        self.services = services
        self.envs: list[dict[str, Any]] = [{} for _ in range(self.ndev)]
        check_fetch_targets(block.program, fetch)  # a buffer memory_optimize handed on
        self.in_use = False
        feed_set = set(feed)
        self.reads = [[n for n in graph.reads0[d] if n not in feed_set]
                      for d in range(self.ndev)]
        self.handles = _handle_names(block)

        def persistable(name: str) -> bool:
            var = block._find_var_recursive(name)
            return var is not None and var.persistable

        self.persist_reads = [[n for n in names if persistable(n)] for names in self.reads]
        self.persist_writes: list[list[str]] = [[] for _ in range(self.ndev)]
        self.temps: list[list[str]] = [[] for _ in range(self.ndev)]
        written = sorted(graph.written | {(d, n) for d in range(self.ndev) for n in feed})
        for d, name in written:
            if persistable(name):
                if (d, name) not in graph.absent:
                    self.persist_writes[d].append(name)
            else:
                self.temps[d].append(name)
        if release and (block.idx != 0 or not sub_block_io_listed(block)):
            # NOTE: a sub-block may run many times against its parent's values, and an op
            # with a sub-block may read outer variables that its slots do not list
            # (listen_and_serv): such blocks keep every value to the end of the run. The
            # control-flow ops list what their sub-blocks read and write, so the liveness
            # seen through their slots is exact.
            release = False
        # delete_var ops (release_memory) are honoured whether or not eager deletion is on
        releases = release_plan(graph, lambda n: not persistable(n), set(fetch), eager=release,
                                serial=serial and lanes == 1)
        # node index -> names dropped after it (for inspection: tests, debugging)
        self.releases = {i: [key[1] for key, _ in items] for i, items in releases.items()}
        self._counts: dict[tuple, int] = {
            key: n for items in releases.values() for key, n in items if n > 1}
        self._pending: dict[tuple, int] = {}
        self._lock = threading.Lock()
        self.inplace_nodes = sorted(inplace or {})
        self._name_devices = name_devices
        self.batch_feeds = batch_feeds(block, feed)
        self.undo = UndoLog()
        self.proven = False  # a run of this plan succeeded (see _graph_for)
        self._fns: list[Task] = []
        self._inline: list[Task | None] = []
        self._writes: list[list[tuple[RunServices, dict, str]]] = []
        self._records: list[list[tuple[RunServices, str, bool]]] = []
        self._releases = releases
        for node in graph.nodes:
            self._fns.append(self._bind(node, devices, (inplace or {}).get(node.index)))
            # NOTE: a replica that writes no persistable and is the only last reader of what
            # it releases drops those values itself: the plain run's task is then the bound
            # op alone (the hot path). Checked runs use the plain binding (outputs are read
            # after the op) and release in the task.
            rel = releases.get(node.index) or []
            inline = None
            if node.device != ALL_DEVICES and not (inplace or {}).get(node.index) and rel \
                    and all(n == 1 for _, n in rel) and not any(
                        persistable(n) for refs in node.outputs.values() for _, n, _ in refs):
                inline = _binder(node.op)(node.op, devices[node.device],
                                          self.services[node.device],
                                          env=self.envs[node.device],
                                          drop=tuple(key[1] for key, _ in rel))
            self._inline.append(inline)
            self._writes.append([(self.services[d], self.envs[d], n)
                                 for refs in node.outputs.values() for d, n, _ in refs
                                 if persistable(n)])
            reads = {(d, n) for refs in node.inputs.values() for d, n, _ in refs}
            # NOTE: a committing segment (forward, backward and update in one compiled call)
            # computes its new values into fresh tensors and they reach the scope after the
            # call: the old values are kept by reference, nothing is copied
            commit = _commits(node.op)
            self._records.append([(self.services[d], n, (d, n) in reads and not commit)
                                  for refs in node.outputs.values() for d, n, _ in refs
                                  if persistable(n)])
        self.edges = [(dep, node.index) for node in graph.nodes for dep in sorted(node.deps)]
        self.names = [f"{n.type}#{n.index}@{'all' if n.device == ALL_DEVICES else n.device}"
                      for n in graph.nodes]
        # The update tail: the last nodes in program order, as long as each writes a
        # persistable (optimizer updates, beta-pow accumulators, parameter broadcasts). It
        # runs after every other node succeeded (after a barrier task, see engine.atomic).
        # NOTE: a suffix of the program order, not any set closed under successors: an op
        # may read a persistable through ctx.scope without an edge, and one lane keeps
        # program order. A writer followed by another op (an evaluation after minimize) is
        # recorded in the undo log instead.
        tail = [False] * len(graph.nodes)
        for i in reversed(range(len(graph.nodes))):
            # a committing segment is a compute node: it changes nothing until it returns
            if not self._writes[i] or _commits(graph.nodes[i].op):
                break
            tail[i] = True
        self.tail_nodes = [i for i, c in enumerate(tail) if c]
        self.compute_nodes = [i for i, c in enumerate(tail) if not c]
        # compute nodes that write persistables: recorded in the undo log every run
        self.recorded_nodes = [i for i in self.compute_nodes if self._writes[i]]
        recorded = set(self.recorded_nodes)
        self._in_tail = set(self.tail_nodes)
        self.guard = StepGuard()
        self.deferred = defer_collectives(self, bool(overlap))
        # in one process, overlap turned off: the all-reduces wait for every device's backward
        self.held = hold_collectives(self) if overlap is False else []
        n = len(graph.nodes)
        self._order: list[int] = list(range(n))
        self._edges = list(self.edges) + self.held
        self._names = list(self.names)
        if self.tail_nodes and self.compute_nodes:
            # the barrier (task n): after every compute node, before every tail node
            compute = set(self.compute_nodes)
            has_compute_succ = {a for a, b in self.edges if b in compute}
            self._edges += [(i, n) for i in self.compute_nodes if i not in has_compute_succ]
            self._edges += [(n, i) for i in self.tail_nodes]
            k = len(self.compute_nodes)  # the tail is a suffix of the node order
            self._order = list(range(k)) + [n] + list(range(k, n))
            self._names.append("barrier: every compute node done, the updates begin")
        if self.held:  # one lane runs in a topological order: each held sum after its waits
            self._order = _order_with(self._order, self._edges)
        # the tasks of the common run mode, one per node (node order)
        self.tasks = [self._task(i, record=i in recorded, check=False)
                      for i in range(len(graph.nodes))]
        self._variants: dict[tuple, TaskGraph] = {}
        self._graph_for(False, False, False)  # build the common one now

    # ------------------------------------------------------------------ overlap
    def _wait_deferred(self) -> None:
        """Wait for the all-reduces started so far; a failure names the op that started it."""
        try:
            self.services[0].communicator.wait_pending()
        except Exception as e:
            node = self.graph.nodes[getattr(e, "tag", self.deferred[0])]
            raise op_error(node.op, node.op_index, e,
                           node.device if self._name_devices else None) from e

    def _barrier(self) -> None:
        """Wait for the deferred all-reduces, then enter the update tail."""
        self._wait_deferred()
        self.guard.enter_tail()

    def drop_pending(self) -> None:
        """A failed step: forget the all-reduces it started (nobody reads them)."""
        if self.deferred:
            self.services[0].communicator.drop_pending()

    def wait_started(self, failed: bool = False) -> str | None:
        """Wait for what the step's ops started and left running (``RunServices.pending``).

        The step's ops succeeded: raise the first failure. The step ``failed``: return a
        failure of theirs as a note for the step's error (None: none failed).
        """
        note = None
        for svc in self.services:
            if not svc.pending:
                continue
            started, svc.pending = list(svc.pending), set()
            for obj in started:
                if not failed:
                    obj.wait_sends()
                    continue
                err = obj.settle_sends()
                if err is not None and note is None:
                    note = f"parafluid: a send this step started failed too: {err}"
        return note

    # ------------------------------------------------------------------ binding
    def _bind(self, node: Node, devices: list[torch.device], inplace: Any) -> Task:
        if node.device != ALL_DEVICES:
            env = self.envs[node.device]
            if inplace is not None:
                return inplace(env)
            return _binder(node.op)(node.op, devices[node.device], self.services[node.device],
                                    env=env)
        opdef = get_op_def(node.type)
        kernel, attrs = opdef.kernel, dict(node.attrs)
        ctx = RunContext(node.op, devices[0], self.services[0])
        envs = self.envs

        def spec(slots: dict, by_name: dict) -> list:
            return [(s, [(envs[d], n) for d, n, _ in refs], by_name[s].duplicable)
                    for s, refs in slots.items()]

        ins_spec = spec(node.inputs, opdef.input_by_name)
        outs_spec = spec(node.outputs, opdef.output_by_name)

        def run_collective() -> None:
            ins = {s: [env[n] for env, n in refs] if dup else
                   (refs[0][0][refs[0][1]] if refs else None) for s, refs, dup in ins_spec}
            outs = kernel(ins, attrs, ctx)
            for s, refs, dup in outs_spec:
                if not refs:
                    continue
                values = outs[s] if dup else [outs[s]]
                if len(values) != len(refs):
                    raise RuntimeError(f"{node.type} returned {len(values)} values for "
                                       f"{len(refs)} outputs")
                for (env, n), v in zip(refs, values):
                    env[n] = v
        return run_collective

    def _task(self, i: int, record: bool, check: bool) -> Task:
        """The task of node ``i``: its op, then its scope writes and releases.

        ``record``: note the persistables it writes in the undo log first. ``check``: raise
        on a NaN/Inf output (FLAGS_check_nan_inf) before the value reaches the scope.
        NOTE: each is a closure of its own, built only when asked for: the task of the
        common mode is the op, its error, its writes and its releases, nothing per op more.
        """
        node = self.graph.nodes[i]
        fn, writes = self._fns[i], self._writes[i]
        if not check and self._inline[i] is not None:
            return self._inline[i]  # (it writes no persistable: nothing to record)
        lock, pending, envs = self._lock, self._pending, self.envs
        drops = [(envs[key[0]], key[1], key if n > 1 else None)
                 for key, n in self._releases.get(i) or ()]
        if check and hasattr(fn, "checked"):  # a compiled segment checks its own outputs
            fn = fn.checked
        elif check:
            outputs = [(slot, envs[d], n) for slot, refs in node.outputs.items()
                       for d, n, _ in refs]
            run_op = fn

            def fn() -> None:
                run_op()
                check_finite((slot, n, env[n]) for slot, env, n in outputs if n in env)

        # NOTE: an op's exception becomes its OpRunError in run_plan (by task index), so a
        # task without writes or releases is the bound op itself: no frame added per op
        if not writes and not drops:
            task = fn
        else:
            def task() -> None:
                fn()
                if writes:
                    for svc, env, name in writes:
                        svc.write_persistable(name, env[name])
                if drops:
                    for env, name, key in drops:
                        if key is None:
                            env.pop(name, None)
                            continue
                        with lock:
                            pending[key] -= 1
                            last = pending[key] == 0
                        if last:
                            env.pop(name, None)
        if not record or not self._records[i]:
            return task
        records, undo = self._records[i], self.undo

        def recorded_task() -> None:
            for svc, name, in_place in records:
                undo.record(svc.scope, name, in_place, svc.local_writes)
            task()
        return recorded_task

    # ------------------------------------------------------------------ running
    def begin(self) -> None:
        """Reset per-run state (values, release counters, undo log)."""
        for env in self.envs:
            env.clear()
        self.undo.clear()
        if self._counts:
            self._pending.clear()
            self._pending.update(self._counts)

    def end(self) -> None:
        """Drop the run's values (and the undo log's copies)."""
        for env in self.envs:
            env.clear()
        self.undo.clear()

    def run(self, scopes: Sequence[Any], feeds: Sequence[dict[str, Any]],
            scheduler: Scheduler, check_nan_inf: bool = False, timeout: float | None = None,
            missing: Callable[[Any, str, dict[str, Any]], str] | None = None,
            keep_temps: Sequence[Any] | None = None, update_scope_vars: bool = False
            ) -> list[list[Any]]:
        """Run one step: the feeds and the scopes' values in, each device's fetches out.

        Args:
            scopes: one scope per device: what the block reads and is not fed comes from it
                (parameters, optimizer state; each moved to its ``homes`` device first), and
                its ops see it as ``ctx.scope`` and write their persistables there.
            feeds: one dict per device, name -> value (already checked tensors).
            scheduler: runs the tasks (``run_plan``); ``check_nan_inf``, ``timeout``: as there.
            missing: ``missing(block, name, feed)``, the message for a value neither fed nor
                in the scope (default ``feed_fetch.missing_value_message``).
            keep_temps: one scope per device that keeps the step's temporaries afterwards
                (the ParallelExecutor's local scopes); a fetch target with no value is then
                looked up there rather than in ``scopes``.
            update_scope_vars: a temporary whose variable the scope holds gets its new value
                (a sub-block writing variables of the block around it).

        Returns ``fetches[d][i]``, the value of ``fetch[i]`` on device ``d``. Afterwards, and
        whatever happened, the plan holds no value nor scope and is free (``in_use`` False).
        """
        self.in_use = True
        services = self.services
        try:
            self.begin()
            homes = self.homes
            for d, env in enumerate(self.envs):
                scope, feed = scopes[d], feeds[d]
                services[d].scope = scope
                env.update(feed)
                for name in self.reads[d]:
                    holder = scope.find_var(name)
                    if holder is None or holder.value is None:
                        if self._starts_empty(name):
                            env[name] = TensorArray()
                            continue
                        if name in self.handles:  # the op finds its reader by its attrs
                            env[name] = None
                            continue
                        raise RuntimeError((missing or missing_value_message)(self.block, name,
                                                                              feed))
                    if homes and name in homes:  # placed: where the copies expect it (once)
                        holder.value = at_home(holder.value, homes[name])
                    env[name] = holder.value
            run_plan(self, scheduler, timeout=timeout, check_nan_inf=check_nan_inf)
            if keep_temps is not None or update_scope_vars:
                self._keep_temps(scopes, keep_temps)
            fetches = []
            for d, env in enumerate(self.envs):
                values = []
                for name in self.fetch:
                    value = env.get(name)
                    if value is None:
                        scope = keep_temps[d] if keep_temps is not None else scopes[d]
                        holder = scope.find_var(name)
                        value = None if holder is None else holder.value
                        if value is None:
                            raise RuntimeError(self._no_value_message(name, d))
                    values.append(value)
                fetches.append(values)
            return fetches
        finally:
            self.end()
            for svc in services:
                svc.scope = None  # (a scope is the run's: the plan keeps none alive)
            self.in_use = False

    def _keep_temps(self, scopes: Sequence[Any], keep: Sequence[Any] | None) -> None:
        for d, env in enumerate(self.envs):
            for name in self.temps[d]:
                value = env.get(name)
                if value is None:
                    continue
                if keep is not None:
                    keep[d].var(name).value = value
                else:
                    holder = scopes[d].find_var(name)
                    if holder is not None:
                        holder.value = value

    def _starts_empty(self, name: str) -> bool:
        """A tensor array the program declares and reads before any op writes it starts
        empty in each run, as Fluid creates it in the run's scope."""
        var = self.block._find_var_recursive(name)
        return (var is not None and not var.persistable
                and var.type == VarType.LOD_TENSOR_ARRAY)

    def _no_value_message(self, name: str, d: int) -> str:
        where = f" on device {d}" if self._name_devices else ""
        block = f" of block {self.block.idx}" if self.block.idx else ""
        return (f"fetch target {name!r} has no value{where} after the run{block}: no op wrote "
                "it there and the scope does not hold it")

    def _graph_for(self, record_tail: bool, check: bool, timed_: bool) -> TaskGraph:
        """The task graph of one run mode, built on first use.

        ``record_tail``: the update tail records its writes in the undo log whatever the
        moment (a plan's first run, and while checking NaN/Inf); ``check``: outputs checked
        for NaN/Inf; ``timed_``: tasks report to the op hooks (the profiler).
        """
        detail = timed_ and op_detail()  # segments report their ops themselves
        key = (record_tail, check, timed_, detail)
        hit = self._variants.get(key)
        if hit is not None:
            return hit
        if not (record_tail or check):
            tasks = self.tasks
        else:
            recorded = set(self.recorded_nodes) | (self._in_tail if record_tail else set())
            tasks = [self._task(i, i in recorded, check) for i in range(len(self.tasks))]
        if timed_:
            tasks = [t if detail and n.type == SEGMENT_OP else
                     timed(t, _event_name(n.op), n.op_index, n.device)
                     for t, n in zip(tasks, self.graph.nodes)]
        if len(self._order) > len(tasks):
            tasks = [*tasks, self._barrier if self.deferred else self.guard.enter_tail]
        # NOTE: node order is program order, a topological order: one lane runs in it (the
        # barrier before the update tail, a suffix of it), so random ops draw in the order
        # the program lists them.
        graph = TaskGraph.from_edges(tasks, self._edges, names=self._names,
                                     order=self._order)
        self._variants[key] = graph
        return graph

    def graph_for_run(self, check_nan_inf: bool = False) -> tuple[TaskGraph, bool]:
        """(the task graph to run now, whether it records the update tail); the mode is
        decided once per run: NaN/Inf check (the option or FLAGS_check_nan_inf), the tail
        recorded (a first run, or checking), op hooks."""
        check = check_nan_inf or nan_inf_flag()
        record_tail = check or not self.proven
        return self._graph_for(record_tail, check, op_hooks_active()), record_tail


def _order_with(order: list[int], edges: list[tuple[int, int]]) -> list[int]:
    """The topological order of ``edges`` closest to ``order``: each step takes the ready
    task that comes first in ``order``."""
    rank = {t: k for k, t in enumerate(order)}
    succ: dict[int, list[int]] = {}
    indeg = dict.fromkeys(order, 0)
    for a, b in set(edges):
        succ.setdefault(a, []).append(b)
        indeg[b] += 1
    ready = [(rank[t], t) for t in order if not indeg[t]]
    heapq.heapify(ready)
    out: list[int] = []
    while ready:
        _, t = heapq.heappop(ready)
        out.append(t)
        for b in succ.get(t, ()):
            indeg[b] -= 1
            if not indeg[b]:
                heapq.heappush(ready, (rank[b], b))
    assert len(out) == len(order), "the held all-reduces made the step's graph cyclic"
    return out


def run_plan(plan: Plan, scheduler: Scheduler, timeout: float | None = None,
             check_nan_inf: bool = False) -> None:
    """Run every task of ``plan`` (values already in its envs) as one step, whole or not at
    all (see ``parafluid.engine.atomic``): on a failure, or a Ctrl-C before the update tail, the
    persistables the step wrote are restored on every device; a Ctrl-C during the updates
    is raised once they are done. Re-raise an op's error."""
    graph, record_tail = plan.graph_for_run(check_nan_inf)
    guard = plan.guard
    # NOTE: a run that writes no persistable has nothing to protect: SIGINT stays as it is
    guarded = bool(plan.tail_nodes or plan.recorded_nodes)
    if guarded:
        guard.start(tail_only=not plan.compute_nodes, recorded=record_tail)
    try:
        scheduler.run(graph, timeout=timeout)
        plan.wait_started()
        plan.proven = True
    except BaseException as e:
        guard.hold()  # a second Ctrl-C must not cut the restore short
        plan.drop_pending()
        late = plan.wait_started(failed=True)
        if late is not None:
            # NOTE: on the error that is raised below: the op's own, or this one
            (e.__cause__ if isinstance(e, TaskError) and e.__cause__ is not None
             else e).add_note(late)
        plan.undo.rollback()
        if guard.in_tail and guard.unrecorded:
            # NOTE: only an update op failing on a later run than the plan's first and
            # without the NaN/Inf check gets here
            e.add_note("parafluid: the failure came during the parameter updates, which this "
                       "run does not record: the step may be partly applied "
                       "(ParallelExecutor.check_replicas tells whether the devices still "
                       "agree); restore a checkpoint")
        if isinstance(e, TaskError):
            cause = e.__cause__
            if isinstance(cause, EOFException):
                raise cause from None  # the end of a reader's epoch, for the caller's loop
            if isinstance(cause, OpRunError):
                if guard.in_tail and guard.unrecorded:
                    cause.add_note(e.__notes__[-1])
                raise cause from cause.__cause__
            if isinstance(cause, Exception) and e.task_index < len(plan.graph.nodes):
                # the one error of a failing op: which op, its inputs, device and callsite
                node = plan.graph.nodes[e.task_index]
                err = op_error(node.op, node.op_index, cause,
                               node.device if plan._name_devices else None)
                if late is not None:
                    err.add_note(late)
                for note in getattr(e, "__notes__", ())[-1:] if guard.in_tail and \
                        guard.unrecorded else ():
                    err.add_note(note)
                raise err from cause
        raise
    finally:
        plan.undo.clear()
        if guarded:
            guard.finish()  # raises a Ctrl-C held during the updates, the step done


class BlockRunner:
    """Runs sub-blocks of a program for ``RunContext.run_block``, one lane, same path."""

    def __init__(self, program: Any, device: torch.device, parent: RunServices) -> None:
        self.program = program
        self.device = device
        self.parent = parent
        self._plans: dict[tuple, Plan] = {}
        self._scheduler = Scheduler(1)

    def run(self, block_idx: int, scope: Any, feed: dict[str, Any], fetch: tuple[str, ...]
            ) -> list[Any]:
        if scope is None:
            raise RuntimeError("run_block: no scope to run the sub-block against")
        if not 0 <= block_idx < self.program.num_blocks:
            raise ValueError(f"run_block: the program has {self.program.num_blocks} blocks, "
                             f"got block index {block_idx}")
        key = (self.program._version, block_idx, tuple(sorted(feed)), fetch)
        plan = self._plans.get(key)
        if plan is None or plan.in_use:  # a nested run of the same block gets its own plan
            block = self.program.block(block_idx)
            p = self.parent
            svc = RunServices(self.program, None, p.communicator, p.device_index,
                              device=self.device)
            graph = build_graph(self.program, 1, GraphOptions(), block_idx=block_idx)
            plan = Plan(graph, block, [self.device], [svc], key[2], fetch, release=False,
                        name_devices=False)
            if key not in self._plans:
                self._plans = {k: v for k, v in self._plans.items()
                               if k[0] == self.program._version}
                self._plans[key] = plan
        (values,) = plan.run([scope], [feed], self._scheduler, missing=_missing_in_sub_block,
                             update_scope_vars=True)
        return values


def _missing_in_sub_block(block: Any, name: str, feed: dict[str, Any]) -> str:
    return (f"run_block: sub-block {block.idx} reads {name!r}, which is neither fed nor in the "
            "scope")
