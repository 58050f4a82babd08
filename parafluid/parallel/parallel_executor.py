"""ParallelExecutor: data parallelism over several devices of one process.

The program is replicated on every device (``engine.graph.build_graph``); gradients are summed
across devices by collective ops; a thread pool runs each op as soon as its inputs are ready.

Example::

    os.environ["CPU_NUM"] = "2"
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup_program)
    pe = fluid.ParallelExecutor(use_cuda=False, main_program=train_program,
                                loss_name=loss.name)
    loss_per_device, = pe.run(fetch_list=[loss.name], feed={"x": x, "y": y})  # shape [2]

Scopes: device 0 works in the given scope, device ``i > 0`` in a child scope that gets its
own copy of every persistable variable the first time it is needed. Temporaries of a run
stay in per-device local scopes (children of the device scopes) until they are dropped,
every ``num_iteration_per_drop_scope`` runs or on ``drop_local_exe_scopes()``. ``close()``
(or collecting the executor) frees the device scopes and the threads.

A run is one step, whole or not at all (``parafluid.engine.atomic``): when an op fails on any
device, the NaN/Inf check fires or Ctrl-C arrives, every device's persistables are as
before the run, so the replicas never drift apart; ``check_replicas()`` verifies it.
"""

from __future__ import annotations

import warnings
import weakref
from collections.abc import Sequence
from functools import partial
from typing import Any

import torch

from ..engine.graph import GraphOptions, SSAGraph, build_graph
from ..engine.lanes import placed_parallel_graph
from ..engine.plan import Plan, RunServices
from ..engine.runtime import OpRunError
from ..engine.scheduler import default_num_threads, make_scheduler
from ..feed_fetch import (
    FeedSplitter,
    FeedTypeError,
    FeedValueError,
    as_fetch_list,
    check_batch_sizes,
    feed_to_blame,
    fetch_names,
    merge_fetches,
    missing_value_message,
)
from ..framework import Program, default_main_program
from ..passes.compile_regions import compile_regions
from ..passes.grad_aggregation import find_params_grads, loss_grad_op_index
from ..place import cpu_device_count, to_device
from ..placement import is_placed
from ..scope import Scope, SelectedRows, global_scope
from ..variable import unknown_name_message, var_name
from .comm import LocalCommunicator
from .device_fallback import OneDeviceFallback, one_device_strategies, why_not
from .device_scopes import DeviceScopes
from .strategy import (
    BuildStrategy,
    ExecutionStrategy,
    GradientScaleStrategy,
    build_pipeline,
    strategy_warnings,
)

__all__ = ["ParallelExecutor"]


class ParallelExecutor:
    """Run a Program data-parallel on every device (CPU_NUM CPU devices, or all GPUs).

    Args:
        use_cuda: True for the visible GPUs, False for ``CPU_NUM`` CPU devices.
        loss_name: the loss variable's name; needed to aggregate gradients (training).
        main_program: the program to run (default: the default main program).
        share_vars_from: another ParallelExecutor whose device scopes (so parameters) this
            one uses, e.g. a test executor next to the training one.
        exec_strategy, build_strategy: see ExecutionStrategy / BuildStrategy.
        num_trainers, trainer_id: multi-process training (the nccl2 mode): this process is
            trainer ``trainer_id`` of ``num_trainers``; every all-reduce spans all devices
            of all trainers. The trainer endpoints come from the program transpiled in
            nccl2 mode (``DistributeTranspiler``) or ``BuildStrategy.trainers_endpoints``;
            the communicator is the one the transpiled startup program set up (or it is set
            up here).
        scope: where parameters live (default ``fluid.global_scope()``).
        places: (parafluid extension, used by CompiledProgram) the exact places to run on,
            e.g. ``fluid.cpu_places(4)``; overrides use_cuda's device discovery.
    """

    def __init__(self, use_cuda: bool, loss_name: str | None = None,
                 main_program: Program | None = None, share_vars_from: Any = None,
                 exec_strategy: ExecutionStrategy | None = None,
                 build_strategy: BuildStrategy | None = None, num_trainers: int = 1,
                 trainer_id: int = 0, scope: Scope | None = None, places: Any = None) -> None:
        if not isinstance(use_cuda, bool):
            raise TypeError(f"ParallelExecutor: use_cuda must be a bool, got {use_cuda!r}")
        if loss_name is not None:
            loss_name = var_name(loss_name, "ParallelExecutor: loss_name")
        if share_vars_from is not None and not isinstance(share_vars_from, ParallelExecutor):
            raise TypeError("ParallelExecutor: share_vars_from must be a ParallelExecutor, got "
                            f"{type(share_vars_from).__name__}")
        program = main_program if main_program is not None else default_main_program()
        if not isinstance(program, Program):
            raise TypeError(f"ParallelExecutor: main_program must be a Program, got "
                            f"{type(program).__name__}")
        exec_strategy = exec_strategy if exec_strategy is not None else ExecutionStrategy()
        build_strategy = build_strategy if build_strategy is not None else BuildStrategy()
        if not isinstance(exec_strategy, ExecutionStrategy):
            raise TypeError(f"ParallelExecutor: exec_strategy must be an ExecutionStrategy, "
                            f"got {type(exec_strategy).__name__}")
        if not isinstance(build_strategy, BuildStrategy):
            raise TypeError(f"ParallelExecutor: build_strategy must be a BuildStrategy, got "
                            f"{type(build_strategy).__name__}")
        trainers = max(num_trainers, build_strategy.num_trainers)
        trainer_id = trainer_id or build_strategy.trainer_id
        endpoints = list(build_strategy.trainers_endpoints) or \
            list(program.meta.trainers_endpoints)
        if trainers > 1 or len(endpoints) > 1:
            _check_trainers(trainers, trainer_id, endpoints)
        scope = scope if scope is not None else global_scope()
        if not isinstance(scope, Scope):
            raise TypeError(f"ParallelExecutor: scope must be a Scope, got {type(scope).__name__}")

        self._use_cuda = use_cuda
        self._devices = _devices(use_cuda, places, multi_process=trainers > 1)
        self._program = program
        self._loss_name = loss_name
        self._exec_strategy = exec_strategy
        self._build_strategy = build_strategy
        self._scope = scope
        self._share_from = share_vars_from
        ndev = len(self._devices)
        if share_vars_from is not None and share_vars_from.device_count != ndev:
            raise ValueError(f"ParallelExecutor: share_vars_from has "
                             f"{share_vars_from.device_count} devices, this executor "
                             f"{ndev}; they must run on the same devices")
        self._scopes = DeviceScopes(scope, self._devices, share=None if share_vars_from is None
                                    else share_vars_from._scopes)
        self._communicator: Any = LocalCommunicator(self._devices)
        self._multi = trainers > 1
        if self._multi:
            from ..distributed.collective import get_collective, init_collective

            comm = get_collective(endpoints, trainer_id) or \
                init_collective(endpoints, trainer_id, self._devices)
            if len(comm.devices) != ndev:
                raise ValueError(f"ParallelExecutor: trainer {trainer_id} joined the job with "
                                 f"{len(comm.devices)} devices but this executor runs {ndev} "
                                 "(CPU_NUM / places must be the same as when the startup "
                                 "program ran)")
            self._communicator = comm
        self._steps = 0
        # (each run gives the services its device scope: Plan.run)
        self._services = [RunServices(program, communicator=self._communicator,
                                      device_index=d, local_writes=d > 0,
                                      device=self._devices[d]) for d in range(ndev)]
        self._graphs: dict[tuple, tuple[Program, SSAGraph]] = {}
        self._plans: dict[tuple, Plan] = {}
        self._feeds = FeedSplitter(self._devices)
        self._has_run = False
        self._runs_since_drop = 0
        # NOTE: what close() and collection free, reachable without the executor, so that a
        # dropped executor is collected and its finalizer frees the device copies
        self._owned = _Owned(self._scopes, owner=share_vars_from is None)
        self._finalizer = weakref.finalize(self, self._owned.release)
        self._closed = False
        nthreads = exec_strategy.num_threads
        if nthreads == 0:
            nthreads = default_num_threads(ndev, use_cuda)
        self._num_threads = nthreads
        self._graph()  # build now: errors and warnings surface at construction, as in Fluid
        self._fallback: OneDeviceFallback | None = None
        if build_strategy.fall_back_to_one_device and ndev > 1:
            why = why_not(program, loss_name, build_strategy, self._multi)
            if why is None:
                self._fallback = OneDeviceFallback(self)
            else:
                warnings.warn(f"ParallelExecutor: BuildStrategy.fall_back_to_one_device has "
                              f"no effect: {why}; the run stays on {ndev} devices",
                              stacklevel=2)
        # NOTE: only once built: a strategy whose executor failed to build may still be fixed
        exec_strategy._finalize()
        build_strategy._finalize()

    # ------------------------------------------------------------------ public API
    @property
    def device_count(self) -> int:
        """The number of devices the program is replicated on."""
        return len(self._devices)

    def run(self, fetch_list: Sequence[Any], feed: Any = None, feed_dict: Any = None,
            return_numpy: bool = True, return_merged: bool = True) -> list[Any]:
        """Run the program on every device; return the fetched values.

        Args:
            fetch_list: Variables or names; each comes back concatenated over devices
                along dim 0 (a ``[1]`` loss becomes ``[device_count]``).
            feed: a dict (each array is split along dim 0 over the devices: ``batch // n``
                rows each, the last device also gets the remainder; LoDTensors by whole
                sequences, see ``feed_fetch._SequenceSplit``) or a list of one dict
                per device (fed as is).
            feed_dict: deprecated alias of ``feed``.
            return_numpy: numpy arrays (else LoDTensors).
            return_merged: False gives, per fetch target, the list of per-device values.
        """
        if feed is None and feed_dict is not None:
            warnings.warn("ParallelExecutor.run: feed_dict is deprecated, use feed",
                          DeprecationWarning, stacklevel=2)
            feed = feed_dict
        return self._run(fetch_list, feed, return_numpy, return_merged)

    @property
    def devices_in_use(self) -> int:
        """How many devices run the steps: ``device_count``, or 1 once
        ``BuildStrategy.fall_back_to_one_device`` found one device faster."""
        return 1 if self._fallback is not None and self._fallback.on_one else self.device_count

    def _run(self, fetch_list: Sequence[Any], feed: Any, return_numpy: bool,
             return_merged: bool, check_nan_inf: bool = False) -> list[Any]:
        if self._closed:
            raise RuntimeError("ParallelExecutor.run() after close(): its device scopes were "
                               "freed; create a new ParallelExecutor")
        if self._fallback is not None:
            return self._fallback.run(fetch_list, feed, return_numpy, return_merged,
                                      check_nan_inf)
        return self._run_devices(fetch_list, feed, return_numpy, return_merged, check_nan_inf)

    def _one_device_executor(self) -> ParallelExecutor:
        """An executor of this program on device 0 alone, in the same scope (the fallback)."""
        build, exec_ = one_device_strategies(self._build_strategy, self._exec_strategy)
        # NOTE: device 0's scope, not self._scope: with share_vars_from the device scopes
        # (parameters included) are the source's, whatever scope this executor was given
        return ParallelExecutor(self._use_cuda, loss_name=self._loss_name,
                                main_program=self._program, exec_strategy=exec_,
                                build_strategy=build, scope=self._scopes.scopes[0],
                                places=[self._devices[0]])

    def _run_devices(self, fetch_list: Sequence[Any], feed: Any, return_numpy: bool,
                     return_merged: bool, check_nan_inf: bool = False) -> list[Any]:
        fetch = tuple(fetch_names(as_fetch_list(fetch_list)))
        program, graph = self._graph(fetch)
        block = program.global_block()
        feeds = self._feeds.split(feed, block)
        plan = self._plan(program, graph, tuple(sorted(feeds[0])), fetch)
        if plan.batch_feeds:
            if isinstance(feed, dict):
                check_batch_sizes(plan.batch_feeds, feed)
            else:
                for d, item in enumerate(feeds):
                    check_batch_sizes(plan.batch_feeds, item, f" of feed[{d}]")
        if not self._has_run:
            self._check_share_source()
            if self._multi:
                self._communicator.check_consistent("program", _fingerprint(program, ndev=len(
                    self._devices)))
                self._start_equal(block)
        self._scopes.materialize(plan.persist_reads)
        if self._fallback is not None:
            self._fallback.copies_refreshed()
        steps = self._exec_strategy.num_iteration_per_run
        check = check_nan_inf or self._exec_strategy.check_nan_inf
        # NOTE: Plan.run drops the step's values (feeds, activations) whatever happens, so
        # that a caller retrying after an error (out of memory) gets them back
        try:
            for _ in range(steps):
                self._steps += 1
                if self._multi:
                    self._communicator.step = self._steps
                fetches = self._run_plan(plan, feeds, check)
        except OpRunError as e:
            # an unchecked (layers.data) feed that did not match its variable, read by the
            # failing op: name it, as the Executor does
            blamed = feed_to_blame(block, e, self._feeds.notes)
            if not self._multi:
                if blamed is not None:
                    kind = FeedTypeError if blamed[0] is TypeError else FeedValueError
                    raise kind(f"{blamed[1]}; then {e}") from e
                raise
            self._give_up(e)
            # which step of the job: the other trainers report the same number
            raise OpRunError(f"{e} (trainer {self._communicator.trainer_id}, step "
                             f"{self._steps})", e.op_index, e.op_type, e.device) from e.__cause__
        except BaseException as e:
            if self._multi:
                self._give_up(e)
            raise
        results = [merge_fetches(name, list(values), return_numpy, return_merged)
                   for name, values in zip(fetch, zip(*fetches))]
        self._has_run = True
        return results

    def _give_up(self, e: BaseException) -> None:
        """Multi-process: a step that failed here cannot complete on the other trainers (they
        wait for this one's collectives), and a retry here would pair its collectives with
        theirs of another step. So the job stops: the other trainers fail at once, naming
        this one and the error; this executor refuses to run again."""
        comm = self._communicator
        if comm.broken is not None:
            return  # a collective failed: every trainer finds out through the transport
        text = " ".join(line.strip() for line in str(e).strip().splitlines())
        text = text if len(text) <= 400 else text[:200] + " ... " + text[-195:]
        comm.abort(f"step {self._steps} failed on trainer {comm.trainer_id}: "
                   f"{type(e).__name__}: {text}")
        if hasattr(e, "add_note"):
            e.add_note("parafluid: in a multi-trainer job a failed step ends the job on every "
                       "trainer (the others cannot finish it); restart from a checkpoint")

    def drop_local_exe_scopes(self) -> None:
        """Drop the per-device scopes holding the temporaries of past runs now."""
        self._scopes.drop_locals()
        self._runs_since_drop = 0
        if self._fallback is not None and self._fallback.one_pe is not None:
            self._fallback.one_pe.drop_local_exe_scopes()

    def close(self) -> None:
        """Free the per-device scopes (parameter copies, optimizer state, temporaries) and
        stop the scheduler's threads; the executor refuses to run afterwards. Collecting an
        executor does the same. An executor built with ``share_vars_from`` leaves the
        device scopes to its source.

        Example::

            pe = fluid.ParallelExecutor(False, loss_name=loss.name)
            pe.run([loss], feed=feed)
            pe.close()
        """
        self._closed = True
        if self._fallback is not None:
            self._fallback.close()
        self._finalizer()

    def check_replicas(self) -> int:
        """Check that every device holds the same value as device 0 for each persistable it
        mirrors (parameters, optimizer state, counters); return how many were compared.

        Raises RuntimeError naming the variables that differ, the device and the largest
        difference. batch_norm's moving statistics are per device by design (each device
        sees its own shard) and are not compared, unless sync_batch_norm makes them equal.

        Example::

            try:
                pe.run([loss], feed=feed)
            except KeyboardInterrupt:
                pe.check_replicas()   # the interrupted step left no device behind
        """
        if self._fallback is not None and self._fallback.behind:
            # device 0 ran the last step alone; the others copy its values before their next
            return self._fallback.one_pe.check_replicas()
        root = self._scopes.scopes[0]
        per_device = self._per_device_vars()
        compared: set[str] = set()
        diffs = []
        for d in range(1, self.device_count):
            dscope = self._scopes.scopes[d]
            for name in sorted(dscope.local_var_names()):
                if name in per_device:
                    continue
                mine, ref = dscope.find_local_var(name), root.find_var(name)
                if mine is None or ref is None or mine.value is None or ref.value is None:
                    continue
                a, b = _dense(mine.value), _dense(ref.value)
                if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):
                    continue
                compared.add(name)
                a, b = a.detach().cpu(), b.detach().cpu()
                if a.shape != b.shape or a.dtype != b.dtype:
                    diffs.append(f"{name!r} on device {d}: shape {list(a.shape)} {a.dtype}, "
                                 f"device 0: {list(b.shape)} {b.dtype}")
                elif not torch.equal(a, b):
                    gap = (a.double() - b.double()).abs().max().item()
                    diffs.append(f"{name!r} on device {d} differs from device 0 (largest "
                                 f"difference {gap:.3g})")
        if diffs:
            shown = "; ".join(diffs[:8]) + (f"; and {len(diffs) - 8} more" if len(diffs) > 8
                                            else "")
            raise RuntimeError(f"ParallelExecutor.check_replicas: {len(diffs)} device "
                               f"copies differ: {shown}")
        return len(compared)

    def _per_device_vars(self) -> set[str]:
        """Persistables each device keeps for itself (batch_norm's moving statistics)."""
        names: set[str] = set()
        for op in self.program.global_block().ops:
            if op.type == "batch_norm":
                for slot in ("MeanOut", "VarianceOut"):
                    names.update(op.outputs.get(slot, ()))
        return names

    # ------------------------------------------------------------------ building
    def _graph(self, fetch: Sequence[str] = ()) -> tuple[Program, SSAGraph]:
        """The program after the build passes and its multi-device graph. With
        ``BuildStrategy.enable_compile`` the runs of compilable ops become compiled segments
        that keep ``fetch`` (and the loss) readable: one variant per fetch list."""
        bs = self._build_strategy
        keep: tuple[str, ...] = ()
        if bs.enable_compile:
            keep = tuple(sorted({*fetch, *([self._loss_name] if self._loss_name else [])}))
        key = (self._program._version, keep)
        hit = self._graphs.get(key)
        if hit is not None:
            return hit
        comm = self._communicator
        pipeline = build_pipeline(bs, comm.nranks, self._loss_name, in_process=not self._multi)
        program = pipeline(self._program)
        options = GraphOptions(sequential=bs.enable_sequential_execution,
                               rank_offset=comm.rank_offset)
        segment = partial(compile_regions, keep=keep,
                          background=bs.compile_in_background) if bs.enable_compile else None
        if is_placed(program) or bs.num_microbatches > 1:
            # operator placement in one process (docs/placement.md): one lane per device
            program, graph, lanes = placed_parallel_graph(
                program, self._devices, options, bs.num_microbatches, self._loss_name,
                segment=segment)
            if lanes > 1 and self._owned.scheduler is None:
                self._owned.scheduler = make_scheduler(lanes)  # closed with the executor
        else:
            if segment is not None:
                program = segment(program)
            graph = build_graph(program, self.device_count, options)
        if not any(k[0] == key[0] for k in self._graphs):
            self._warn()  # once per program version
            self._graphs = {}
            self._plans.clear()
            self._feeds.clear()
        if bs.debug_graphviz_path:
            from .graphviz import write_graphs

            write_graphs(program, graph, bs.debug_graphviz_path)
        for svc in self._services:
            svc.program = program
        self._graphs[key] = (program, graph)
        return program, graph

    @property
    def program(self) -> Program:
        """The program after the build passes (gradient aggregation ops included)."""
        return self._graph()[0]

    def _warn(self) -> None:
        ndev = self._communicator.nranks
        program = self._program
        aggregated = self._loss_name is not None and ndev > 1 and bool(find_params_grads(program))
        msgs = strategy_warnings(self._build_strategy, self._exec_strategy, ndev, aggregated)
        has_backward = any(op.attrs.get("op_role_var") for op in program.global_block().ops)
        if self._loss_name is None and ndev > 1 and has_backward:
            msgs.append("ParallelExecutor: loss_name is not set, so gradients are NOT "
                        "aggregated across devices and each device trains on its own shard; "
                        "pass loss_name=loss.name for data-parallel training")
        # NOTE: a stage of a model split by node (node_recv) may hold no loss: the stage that
        # has it scales the loss gradient, the others receive gradients already scaled
        other_stage = any(op.type == "node_recv" for op in program.global_block().ops)
        if aggregated and loss_grad_op_index(program, self._loss_name) is None and \
                not other_stage and \
                self._build_strategy.gradient_scale_strategy != GradientScaleStrategy.Customized:
            msgs.append(f"ParallelExecutor: no op fills {self._loss_name}@GRAD (was the "
                        "program built with append_backward/minimize on this loss?), so the "
                        "gradient scale strategy could not be applied")
        for msg in msgs:
            warnings.warn(msg, stacklevel=4)

    def _plan(self, program: Program, graph: SSAGraph, feed: tuple[str, ...],
              fetch: tuple[str, ...]) -> Plan:
        key = (feed, fetch)
        plan = self._plans.get(key)
        if plan is None:
            block = program.global_block()
            for name in fetch:
                if block._find_var_recursive(name) is None:
                    raise ValueError(unknown_name_message("fetch target", name, block))
            inplace = None
            if self._build_strategy.enable_inplace:
                from ..engine.inplace import plan_inplace

                inplace = plan_inplace(graph, block, set(feed), set(fetch), self._devices)
                if not inplace:
                    warnings.warn(
                        "BuildStrategy.enable_inplace has no effect on this program: no "
                        "elementwise/activation op has a dead input produced on its device "
                        "that it could overwrite (see parafluid.engine.inplace)",
                        stacklevel=3)
            # one worker thread runs the nodes one at a time in node order: a value's last
            # reader drops it alone (no shared count)
            sched = self._owned.scheduler
            serial = (sched.num_threads if sched is not None else self._num_threads) == 1
            plan = Plan(graph, block, self._devices, self._services, feed, fetch,
                        release=bool(self._build_strategy.memory_optimize), inplace=inplace,
                        serial=serial,
                        overlap=self._build_strategy.overlap_communication)
            self._plans[key] = plan
        return plan

    # ------------------------------------------------------------------ running
    def _check_share_source(self) -> None:
        src = self._share_from
        if src is not None and not src._has_run:
            raise RuntimeError("ParallelExecutor: share_vars_from names an executor that has "
                               "not run yet, so its devices hold no parameters to share; run "
                               "the source (training) executor once before this one")

    def _start_equal(self, block: Any) -> None:
        """Multi-process: every trainer starts from trainer 0's parameters and optimizer
        state (as DDP does), whatever seeds their startup programs ran with.

        NOTE: the list comes from the program, never from what this trainer's devices read:
        in Reduce mode each device reads the optimizer state of the parameters it owns, and
        the owners differ from trainer to trainer, so per-device lists would pair one
        trainer's broadcast of a variable with another's receive of a different one. The
        trainers compare the list (names, shapes, dtypes) before the first broadcast.
        """
        comm = self._communicator
        root = self._scopes.scopes[0]
        state = []
        for name in sorted(v.name for v in block.vars.values() if v.persistable):
            holder = root.find_var(name)
            value = None if holder is None else holder.value
            if isinstance(value, (torch.Tensor, SelectedRows)):
                state.append((name, holder, value))
        comm.check_consistent("the persistables broadcast from trainer 0", "\n".join(
            f"{name} {_describe(value)}" for name, _, value in state))
        for name, holder, value in state:
            values = comm.broadcast(value if comm.rank_offset == 0 else None, 0, name=name)
            if comm.rank_offset != 0:
                holder.value = values[0]

    def _run_plan(self, plan: Plan, feeds: list[dict[str, Any]], check_nan_inf: bool
                  ) -> list[list[Any]]:
        """One step on every device; its temporaries stay in the local scopes."""
        owned = self._owned
        if owned.scheduler is None:
            devices = self._devices
            owned.scheduler = make_scheduler(self._num_threads, replicas=len(devices),
                                             share_cores=devices[0].type == "cpu")
        scopes = self._scopes
        # NOTE: reads come from the device scope, not the local scope of past runs'
        # temporaries: a feed left out must not silently reuse the previous batch kept there
        fetches = plan.run(scopes.scopes, feeds, owned.scheduler, check_nan_inf=check_nan_inf,
                           missing=self._missing_message,
                           keep_temps=[scopes.local(d) for d in range(len(feeds))])
        if len(feeds) > 1:  # (only a reason not to copy to the other devices again)
            scopes.note_own_writes(plan.persist_writes[0])
        self._runs_since_drop += 1
        if self._runs_since_drop >= self._exec_strategy.num_iteration_per_drop_scope:
            self.drop_local_exe_scopes()
        return fetches

    def _missing_message(self, block: Any, name: str, feed: dict[str, Any]) -> str:
        if self._loss_name is not None and name == self._loss_name + "@GRAD":
            return (f"variable {name!r} must be fed: with "
                    "gradient_scale_strategy=Customized the loss gradient comes from the feed "
                    "(one value per device)")
        return missing_value_message(block, name, feed)


# ---------------------------------------------------------------------- helpers


def _check_trainers(trainers: int, trainer_id: int, endpoints: list[str]) -> None:
    if not endpoints:
        raise ValueError(
            f"ParallelExecutor: num_trainers={trainers} needs the trainers' endpoints: "
            "transpile the program in nccl2 mode (config.mode = 'nccl2'; "
            "DistributeTranspiler(config).transpile(trainer_id, trainers='ip:port,...', "
            "current_endpoint=...)) and run its startup program, or set "
            "BuildStrategy.trainers_endpoints")
    if len(endpoints) != trainers:
        raise ValueError(f"ParallelExecutor: num_trainers={trainers} but "
                         f"{len(endpoints)} trainer endpoints are known ({endpoints}); this "
                         "process would train with the wrong gradient scale")
    if not 0 <= trainer_id < trainers:
        raise ValueError(f"ParallelExecutor: trainer_id must be in 0..{trainers - 1}, got "
                         f"{trainer_id}")


def _fingerprint(program: Program, ndev: int) -> str:
    """What every trainer must agree on: devices, parameters and the collectives issued, one
    line each (a mismatch names the first line that differs)."""
    block = program.global_block()
    parts = [f"devices={ndev}"]
    parts += [f"param {p.name} {list(p.shape)} {p.dtype}"
              for p in sorted(block.all_parameters(), key=lambda v: v.name)]
    parts += [f"{op.type} {op.input_arg_names} root={op.attrs.get('root', '')}"
              for op in block.ops if op.type.startswith("c_")]
    return "\n".join(parts)


class _Owned:
    """What a ParallelExecutor frees on close() or collection; holds no reference to it."""

    __slots__ = ("scopes", "owner", "scheduler")

    def __init__(self, scopes: DeviceScopes, owner: bool) -> None:
        self.scopes = scopes
        self.owner = owner
        self.scheduler: Any = None

    def release(self) -> None:
        if self.scheduler is not None:
            self.scheduler.close()
            self.scheduler = None
        self.scopes.release(self.owner)


def _describe(value: Any) -> str:
    if isinstance(value, SelectedRows):
        return f"rows of {list(value.value.shape[1:])} {value.value.dtype}, height {value.height}"
    return f"{list(value.shape)} {value.dtype}"


def _dense(value: Any) -> Any:
    to_dense = getattr(value, "to_dense", None)
    return to_dense() if to_dense is not None and not isinstance(value, torch.Tensor) else value


def _devices(use_cuda: bool, places: Any, multi_process: bool = False) -> list[torch.device]:
    if places is not None:
        places = list(places) if isinstance(places, (list, tuple)) else [places]
        if not places:
            raise ValueError("ParallelExecutor: places is empty")
        devices = [to_device(p) for p in places]
        if len({d.type for d in devices}) != 1:
            raise ValueError(f"ParallelExecutor: places mix device types: {places}")
        return devices
    if multi_process:
        from ..distributed.collective import local_devices

        return local_devices(use_cuda)
    if use_cuda:
        if not torch.cuda.is_available():
            raise RuntimeError("ParallelExecutor(use_cuda=True): torch sees no CUDA device on "
                               "this machine (check CUDA_VISIBLE_DEVICES); use use_cuda=False "
                               "with CPU_NUM=N to run N CPU devices")
        return [torch.device("cuda", i) for i in range(torch.cuda.device_count())]
    return [torch.device("cpu")] * cpu_device_count()
