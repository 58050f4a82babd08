"""The sequential Executor: runs the ops of a Program's global block in order.

Example::

    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(fluid.default_startup_program())
    loss, = exe.run(feed={"x": x, "y": y}, fetch_list=[avg_cost])

Persistable variables (parameters, optimizer state) live in the scope across runs; every
other variable lives only during one run, as in Fluid. A program is compiled once per
(program version, feed names, fetch names) into a ``parafluid.engine.plan.Plan`` over its
one-device SSA graph, the same run path as the ParallelExecutor's, run on one lane (the
calling thread) in program order. A temporary is dropped right after the last op that uses
it (Fluid's eager deletion), which keeps the peak memory of a step low: holding every
temporary to the end made the allocator return and re-fault a few MB per step.

A run is one step, whole or not at all (``parafluid.engine.atomic``): if an op fails, the NaN/Inf
check fires or Ctrl-C arrives, the persistables (parameters, optimizer state, counters) are
as before the run. ``check_nan_inf=True`` (or ``FLAGS_check_nan_inf=1``) checks every op's
outputs for NaN and Inf.
"""

from __future__ import annotations

import contextlib
import threading
import warnings
import weakref
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import torch

from .engine.graph import build_graph
from .engine.lanes import placed_graph
from .engine.plan import Plan, RunServices
from .engine.scheduler import Scheduler, make_scheduler
from .feed_fetch import (  # noqa: F401  (FeedTypeError, FeedValueError: their old home)
    FeedTypeError,
    FeedValueError,
    as_feed_tensor,
    as_fetch_list,
    batch_size_mismatch,
    check_batch_sizes,
    feed_to_blame,
    fetch_names,
    fetch_value,
    strip_feed_fetch_ops,
    without_feed_fetch_ops,
)
from .fetch_handler import FetchHandler, FetchHandlerMonitor
from .framework import Program, default_main_program
from .parallel.compiled_program import CompiledProgram
from .passes.release_memory import eager_deletion_enabled
from .place import to_device
from .placement import is_placed
from .scope import LoDTensor, Scope, global_scope, scope_guard
from .variable import Variable, unknown_name_message

__all__ = ["Executor", "global_scope", "scope_guard", "compile_program", "FetchHandler",
           "as_numpy"]


_MAX_PLANS = 64  # compiled (program, feed, fetch) signatures an Executor keeps


class Executor:
    """Runs programs on one place (``CPUPlace()`` or ``CUDAPlace(i)``).

    Args:
        place: where to run (default ``CPUPlace()``).
        check_nan_inf: check every op's outputs and raise, naming the op and the variable,
            at the first NaN or Inf, before any parameter is updated (also turned on by
            ``FLAGS_check_nan_inf=1`` in the environment). Off by default: it reads every
            output once more.

    Example::

        exe = fluid.Executor(fluid.CPUPlace(), check_nan_inf=True)
    """

    def __init__(self, place: Any = None, check_nan_inf: bool = False) -> None:
        from .place import CPUPlace

        if not isinstance(check_nan_inf, bool):
            raise TypeError(f"Executor: check_nan_inf must be a bool, got "
                            f"{type(check_nan_inf).__name__}")
        self.check_nan_inf = check_nan_inf
        self.place = place if place is not None else CPUPlace()
        self.device = to_device(self.place)
        self._cache: dict[tuple, Plan] = {}
        self._lock = threading.Lock()
        self._scheduler = Scheduler(1)
        self._lane_schedulers: dict[int, Scheduler] = {}  # placed programs: device count
        self._closed = False
        self._ps_trainers: set[int] = set()  # trainer ids of the pserver-mode ops it ran
        self._ps_scanned: set[tuple[int, int]] = set()  # compiled programs looked at
        # programs holding feed/fetch ops -> (version, the copy without them)
        self._stripped: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    # ------------------------------------------------------------------ public API
    def run(self, program: Any = None, feed: dict[str, Any] | None = None,
            fetch_list: Sequence[Any] | None = None, feed_var_name: str = "feed",
            fetch_var_name: str = "fetch", scope: Scope | None = None,
            return_numpy: bool = True, use_program_cache: bool = False) -> list[Any]:
        """Run ``program`` (default: the default main program) once.

        Args:
            program: a Program, or a CompiledProgram (then it runs data-parallel).
            feed: ``{name: ndarray}`` for the data variables.
            fetch_list: Variables or names to return.
            scope: where persistable variables live (default: ``global_scope()``).
            return_numpy: return numpy arrays (else LoDTensors).
        """
        self._check_open()
        if program is None:
            program = default_main_program()
        scope = scope if scope is not None else global_scope()
        feed = {} if feed is None else feed
        fetch_list = [] if fetch_list is None else as_fetch_list(fetch_list)
        if isinstance(program, CompiledProgram):  # may take a list feed
            # a compiled pserver-mode trainer program: close() tells its pservers it is done
            if program._executor is None and not program._is_inference and \
                    isinstance(program._program, Program):
                # a program saved by Fluid: its feed/fetch ops are checked against this run,
                # then the CompiledProgram compiles the copy without them
                first = feed[0] if isinstance(feed, (list, tuple)) and feed else feed
                program._program = self._without_feed_fetch(
                    program._program, list(first or {}), fetch_names(fetch_list),
                    feed_var_name, fetch_var_name)
            key = (id(program._program), program._program._version)
            if key not in self._ps_scanned:
                self._ps_scanned.add(key)
                self._ps_trainers.update(_rpc_trainer_ids(program._program))
            return program._run_from_executor(self, feed, fetch_list, scope, return_numpy)
        if isinstance(feed, (list, tuple)) and all(isinstance(f, dict) for f in feed):
            # one feed dict per place, as loaders over places yield; one place here
            if len(feed) != 1:
                raise TypeError(f"Executor.run: feed is a list of {len(feed)} feed dicts, one "
                                "per device; an Executor runs one device: give one dict, or "
                                "run a CompiledProgram(...).with_data_parallel(...)")
            feed = feed[0]
        if not isinstance(feed, dict):
            raise TypeError(f"Executor.run: feed must be a dict of name -> array, "
                            f"got {type(feed).__name__}")
        if not isinstance(program, Program):
            raise TypeError(f"Executor.run: program must be a Program or CompiledProgram, "
                            f"got {type(program).__name__}")
        if any(isinstance(v, Variable) for v in feed.values()):
            feed = _without_overwritten_variable_feeds(program, feed)
        fetch = fetch_names(fetch_list)
        # a program saved by Fluid holds feed/fetch ops: checked, then run without them
        program = self._without_feed_fetch(program, list(feed), fetch, feed_var_name,
                                           fetch_var_name)
        plan = self._take_plan(program, tuple(sorted(feed)), tuple(fetch))
        block = program.global_block()
        try:
            notes: list[tuple[type, str, str]] = []  # feeds Fluid takes unchecked that differ
            fed = {name: as_feed_tensor(block, name, value, self.device, notes)
                   for name, value in feed.items()}
            mismatch = None
            if plan.batch_feeds:
                # as Fluid, feeds whose dim 0 is -1 may differ in rows (two -1 dims of a
                # matmul are not a batch); when an op then fails, the rows are the reason
                check_batch_sizes(plan.batch_feeds, fed, agree=False)
                mismatch = batch_size_mismatch(plan.batch_feeds, fed)
        except BaseException:
            plan.in_use = False
            raise
        try:
            (values,) = plan.run([scope], [fed], self._scheduler_for(plan),
                                 check_nan_inf=self.check_nan_inf)
        except Exception as e:
            blamed = feed_to_blame(block, e, notes)
            if blamed is not None:
                kind = FeedTypeError if blamed[0] is TypeError else FeedValueError
                raise kind(f"{blamed[1]}; then {e}") from e
            if mismatch is None:
                raise
            raise ValueError(mismatch) from e
        return [fetch_value(name, value, return_numpy)
                for name, value in zip(plan.fetch, values)]

    def train_from_dataset(self, program: Any = None, dataset: Any = None,
                           scope: Scope | None = None, thread: int = 0, debug: bool = False,
                           fetch_list: Sequence[Any] | None = None,
                           fetch_info: Sequence[str] | None = None,
                           print_period: int = 100, fetch_handler: Any = None) -> None:
        """Train ``program`` on every batch of ``dataset`` (a ``fluid.DatasetFactory``
        Dataset) with ``thread`` worker threads sharing the parameters (0: the dataset's
        ``set_thread``): the Dataset runs it (``parafluid/dataio/dataset_trainer.py``).

        Args:
            program: a Program or CompiledProgram (default: the default main program).
            dataset: the Dataset, its ``set_use_var`` / ``set_filelist`` / ``set_batch_size``
                done (an InMemoryDataset loaded).
            scope: where the parameters live (default: ``global_scope()``).
            thread: worker threads (one thread runs the batches in order, exactly as
                ``Executor.run`` over them).
            debug: print the batches per thread and the time at the end.
            fetch_list, fetch_info: variables printed, with these names, every
                ``print_period`` batches.
            fetch_handler: a ``FetchHandler`` whose ``handler`` gets its variables every
                ``period_secs`` on a thread of its own while the run lasts
                (``parafluid/fetch_handler.py``).

        Example::

            exe.train_from_dataset(main, dataset, thread=2, fetch_list=[loss],
                                   fetch_info=["loss"], print_period=10)
        """
        self._check_open()
        with _timed_fetch(scope, fetch_handler):
            _dataset_run(dataset, False)(self, program, scope, thread, debug, fetch_list,
                                           fetch_info, print_period, is_infer=False)

    def infer_from_dataset(self, program: Any = None, dataset: Any = None,
                           scope: Scope | None = None, thread: int = 0, debug: bool = False,
                           fetch_list: Sequence[Any] | None = None,
                           fetch_info: Sequence[str] | None = None,
                           print_period: int = 100, fetch_handler: Any = None) -> None:
        """Run the test clone of ``program`` (no backward or optimizer ops: the parameters
        stay) on every batch of ``dataset``; the arguments are those of
        ``train_from_dataset``.

        Example::

            exe.infer_from_dataset(main, dataset, fetch_list=[acc], fetch_info=["acc"])
        """
        self._check_open()
        with _timed_fetch(scope, fetch_handler):
            _dataset_run(dataset, True)(self, program, scope, thread, debug, fetch_list,
                                           fetch_info, print_period, is_infer=True)

    def _without_feed_fetch(self, program: Program, feed: list[str], fetch: list[str],
                            feed_holder: str, fetch_holder: str) -> Program:
        """``program`` itself, or (checked against this run's feeds and fetches) its cached
        copy without the feed/fetch ops it holds."""
        with self._lock:
            hit = self._stripped.get(program)
        if hit is None or hit[0] != program._version:
            has = any(op.type in ("feed", "fetch") for op in program.global_block().ops)
            hit = (program._version, strip_feed_fetch_ops(program) if has else None)
            with self._lock:
                self._stripped[program] = hit
        stripped = hit[1]
        if stripped is None:
            return program
        return without_feed_fetch_ops(program, feed, fetch, feed_holder, fetch_holder,
                                      lambda _: stripped)

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("Executor.run() after close(): create a new Executor")

    def close(self) -> None:
        """Drop the compiled plans; the executor refuses to run afterwards.

        A trainer of the parameter-server mode also tells every pserver it talked to that it
        is done (the pservers go on with the other trainers, and end when all are done).
        """
        if self._closed:
            return
        self._closed = True
        self._cache.clear()
        if self._ps_trainers:
            from .distributed.ps_registry import complete

            ids, self._ps_trainers = sorted(self._ps_trainers), set()
            complete(ids)
        for sched in self._lane_schedulers.values():
            sched.close()
        self._lane_schedulers.clear()

    def _scheduler_for(self, plan: Plan) -> Scheduler:
        """One lane, or one worker per device for a program placed on several."""
        lanes = plan.lanes
        if lanes == 1:
            return self._scheduler
        with self._lock:
            sched = self._lane_schedulers.get(lanes)
            if sched is None:
                sched = self._lane_schedulers[lanes] = make_scheduler(lanes)
        return sched

    # ------------------------------------------------------------------ compilation
    def _take_plan(self, program: Program, feed: tuple[str, ...], fetch: tuple[str, ...]
                   ) -> Plan:
        """The cached plan for this signature, marked in use (a fresh one if it is busy: a
        run from another thread, or from inside a kernel)."""
        key = (program, program._version, feed, fetch)
        with self._lock:
            plan = self._cache.get(key)
            if plan is not None and not plan.in_use:
                plan.in_use = True
                return plan
        fresh = compile_program(program, feed, fetch, self.device)
        fresh.in_use = True
        self._ps_trainers.update(_rpc_trainer_ids(program))
        with self._lock:
            if key not in self._cache:
                # Plans of older versions of this program are dead; other feed/fetch
                # signatures of the same version stay (a loop may alternate fetch lists). The
                # cache is bounded so that a script building a program per evaluation does
                # not keep them all.
                self._cache = {k: v for k, v in self._cache.items()
                               if k[0] is not program or k[1] == program._version}
                while len(self._cache) >= _MAX_PLANS:
                    del self._cache[next(iter(self._cache))]  # the oldest entry
                self._cache[key] = fresh
        return fresh


def _rpc_trainer_ids(program: Program) -> set[int]:
    """Trainer ids of the send/recv/barrier ops of ``program`` (pserver mode)."""
    from .ops.rpc import RPC_OP_TYPES

    return {int(op.attrs.get("trainer_id", 0)) for block in program.blocks for op in block.ops
            if op.type in RPC_OP_TYPES}


def compile_program(program: Program, feed: Sequence[str], fetch: Sequence[str], device: Any,
                    services: RunServices | None = None, block_idx: int = 0) -> Plan:
    """The one-device Plan of a block of ``program`` for a feed/fetch signature."""
    block = program.block(block_idx)
    for name in feed:
        if block._find_var_recursive(name) is None:
            raise ValueError(unknown_name_message("feed", name, block))
    for name in fetch:
        if block._find_var_recursive(name) is None:
            raise ValueError(unknown_name_message("fetch target", name, block))
    device = torch.device(device) if isinstance(device, str) else to_device(device)
    lanes, homes = 1, None
    if block_idx == 0 and is_placed(program):
        # ops placed on several devices: copies between them, one lane per device
        program, graph, lanes, homes = placed_graph(program, device)
        block = program.global_block()
    else:
        graph = build_graph(program, 1, block_idx=block_idx)
    svc = services if services is not None else RunServices(program, device=device)
    # FLAGS_eager_delete_tensor_gb < 0 turns eager deletion off, as in Fluid
    return Plan(graph, block, [device], [svc], tuple(feed), tuple(fetch),
                release=eager_deletion_enabled(), name_devices=False, serial=True,
                lanes=lanes, homes=homes)


def _dataset_run(dataset: Any, is_infer: bool) -> Any:
    """The dataset's own loop (``DatasetBase._run_from_executor``): the data family is
    built on the executors, so the executor asks the dataset instead of importing it."""
    where = "infer_from_dataset" if is_infer else "train_from_dataset"
    if dataset is None:
        raise RuntimeError("dataset is need and should be initialized")  # Fluid's words
    run = getattr(dataset, "_run_from_executor", None)
    if run is None:
        raise TypeError(f"{where}: dataset must be a Dataset of fluid.DatasetFactory, got "
                        f"{type(dataset).__name__}")
    return run


@contextlib.contextmanager
def _timed_fetch(scope: Scope | None, fetch_handler: FetchHandler | None) -> Iterator[None]:
    """Fluid's FetchHandler thread around a Dataset run (nothing when there is none)."""
    if fetch_handler is None:
        yield
        return
    monitor = FetchHandlerMonitor(scope if scope is not None else global_scope(),
                                  fetch_handler)
    monitor.start()
    try:
        yield
    finally:
        monitor.stop()


def as_numpy(tensor: Any) -> Any:
    """A fetched ``LoDTensor`` (or a list of them) as numpy arrays (Fluid's
    ``executor.as_numpy``); a tensor holding a LoD cannot be one array."""
    if isinstance(tensor, (list, tuple)):
        return [as_numpy(t) for t in tensor]
    if isinstance(tensor, np.ndarray):
        return tensor
    if tensor.lod():
        raise RuntimeError("as_numpy: this tensor holds LoD information and cannot be one "
                           "array; fetch it with return_numpy=False")
    return np.array(tensor) if tensor._is_initialized() else None


def _as_lodtensor(data: Any, place: Any) -> LoDTensor:
    """A numpy array as a LoDTensor on ``place`` (Fluid's executor helper); a list, which
    may hold sequences of several lengths, must be made a LoDTensor by the caller."""
    if isinstance(data, list):
        raise RuntimeError("Some of your feed data hold LoD information. They can not be "
                           "completely cast from a list of Python ndarray to LoDTensor. Please "
                           "convert data to LoDTensor directly before feeding the data.")
    tensor = LoDTensor()
    tensor.set(data, place)
    return tensor


def _fetch_var(name: str, scope: Scope | None = None, return_numpy: bool = True) -> Any:
    """The value of variable ``name`` in ``scope`` (default: the global scope), as Fluid's
    ``executor._fetch_var``: a numpy array, or the ``LoDTensor`` handle."""
    if not isinstance(name, str):
        raise TypeError(f"_fetch_var: name must be a str, got {type(name).__name__}")
    scope = scope if scope is not None else global_scope()
    var = scope.find_var(name)
    if var is None:
        raise ValueError(f"Cannot find {name} in scope. Perhaps you need to make the variable "
                         "persistable by using var.persistable = True in your program.")
    tensor = var.get_tensor()
    return as_numpy(tensor) if return_numpy else tensor


def _without_overwritten_variable_feeds(program: Program, feed: dict[str, Any]
                                        ) -> dict[str, Any]:
    """``feed`` without the entries whose value is a Variable and whose variable the program
    writes before any op reads it (a warning says so).

    Fluid 1.6 takes any object as a fed value (its tensor setter turns one it cannot read
    numbers from into a boolean scalar); programs rely on that when they feed a variable
    its own Variable and compute it in the program (``assign``) first: the fed value is
    overwritten before anything reads it, so nothing needs feeding. A Variable fed for a
    variable that is read first is still refused, naming it (``as_feed_tensor``)."""
    first_use: dict[str, str] = {}
    for op in program.global_block().ops:
        for name in op.input_arg_names:
            first_use.setdefault(name, "read")
        for name in op.output_arg_names:
            first_use.setdefault(name, "written")
    out = {}
    for name, value in feed.items():
        if isinstance(value, Variable) and first_use.get(name) == "written":
            warnings.warn(f"Executor.run: feed {name!r} is the Variable {value.name!r} (a name "
                          "in a program), not data; the program writes it before reading "
                          "it, so nothing is fed (feed a numpy array or a LoDTensor)",
                          stacklevel=3)
            continue
        out[name] = value
    return out
