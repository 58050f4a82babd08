"""One device instead of several when that is faster (``BuildStrategy.fall_back_to_one_device``).

On a small model, N CPU devices of one process cost more per step than splitting the batch
saves: every device runs every op, an op's Python cost is paid once per device (the
interpreter runs one thread's Python at a time), and on small shards that cost is larger
than the arithmetic the split saves (BENCHMARKS.md, "Data parallelism on a tiny model").
With the option on, a ParallelExecutor measures within the run: a few steps on its N
devices, then a few on device 0 alone with the whole batch (an executor of its own, in the
same scope, so it trains the same parameters). When one device was faster, every later
step runs there and a warning says so once, with both times; otherwise the run goes on with
the N devices, their copies of the parameters refreshed from device 0.

The two are the same step when the loss is a mean over the batch and no op keeps
statistics per device: the N-device step averages the devices' gradients of their shards
(the loss gradient starts at 1/N), which is the whole batch's gradient when the batch
splits evenly. So the option acts only when ``loss_name`` is the output of ``mean`` (or of
``reduce_mean`` over every dimension) of a value with one row per example that no op on its
way made out of the whole batch, the gradient scale strategy is ``CoeffNumDevice``, the
reduce strategy is ``AllReduce`` (``Reduce`` keeps a parameter's optimizer state on its
owner device alone), no ``batch_norm`` keeps per-device statistics (``sync_batch_norm``
off), the program reads no reader, is not placed and every device is in this process;
otherwise ``why_not`` says why and the executor warns at construction and stays on its N
devices. A list of one feed per device runs on the N devices, also once on one.

Once on one device (and during the measuring steps there), a fetched value comes from that
device alone: a ``[1]`` loss stays ``[1]`` instead of ``[N]``
(``ParallelExecutor.devices_in_use`` tells which). After each step of device 0 alone, the
device scopes copy its values to the other devices again before they run (those of an
executor built with ``share_vars_from`` too). With tiered
compilation the measurements wait until no segment is being compiled, so that compiled
steps are compared with compiled steps.

Example::

    bs = fluid.BuildStrategy()
    bs.fall_back_to_one_device = True
    prog = fluid.CompiledProgram(main).with_data_parallel(loss_name=loss.name,
                                                          build_strategy=bs)
"""

from __future__ import annotations

import statistics
import time
import warnings
import weakref
from typing import Any

from ..engine import tiered
from ..framework import Program
from .strategy import BuildStrategy, ExecutionStrategy, GradientScaleStrategy, ReduceStrategy

__all__ = ["OneDeviceFallback", "OneDeviceWarning", "why_not"]

WARM_STEPS = 3  # steps not timed after a switch (plans built, compiled code checked)
TIMED_STEPS = 7  # steps timed on each side; the medians are compared
_clock = time.perf_counter  # (read at each call: tests drive the choice with their own)


class OneDeviceWarning(RuntimeWarning):
    """The warning given once an executor goes on with one device (both step times)."""


def why_not(program: Program, loss_name: str | None, build: BuildStrategy,
            multi_process: bool) -> str | None:
    """Why one device cannot stand in for the N devices of this executor (None: it can)."""
    if multi_process:
        return "the devices of the other trainers cannot be left out"
    if loss_name is None:
        return "loss_name is not set (only a training step can be compared)"
    if build.gradient_scale_strategy != GradientScaleStrategy.CoeffNumDevice:
        return ("the gradient scale strategy is not CoeffNumDevice, so a step on one device "
                "would not compute the same gradient")
    if build.num_microbatches > 1:
        return "the program runs in micro-batches"
    if build.reduce_strategy == ReduceStrategy.Reduce:
        return ("ReduceStrategy.Reduce keeps the optimizer state of a parameter on its owner "
                "device alone, so device 0 does not hold all of it")
    block = program.global_block()
    ops = block.ops
    if any(op.attrs.get("op_device") for op in ops):
        return "the program is placed on devices"
    if any(op.type == "read" for op in ops):
        return ("the program reads its batches from a reader (DataLoader, py_reader): each "
                "device reads a batch of its own, so one device would see fewer")
    producer = next((op for op in reversed(ops) if loss_name in op.output_arg_names), None)
    is_mean = producer is not None and (
        producer.type == "mean" or (producer.type == "reduce_mean"
                                    and producer.attrs.get("reduce_all", False)))
    if not is_mean:
        made_by = producer.type if producer is not None else "no op"
        return (f"the loss {loss_name!r} is made by {made_by}, not mean: only the gradient "
                "of a mean over the batch is the same on one device as on N")
    if not build.sync_batch_norm and any(op.type == "batch_norm" for op in ops):
        return "batch_norm keeps statistics per device (sync_batch_norm is off)"
    return _mixes_the_batch(block, ops[:ops.index(producer)], producer.input("X")[0])


def _is_batch(block: Any, name: str) -> bool | None:
    """Whether ``name`` holds one row per example (dim 0 is the batch: -1); None: unknown."""
    var = block._find_var_recursive(name)
    if var is None or var.shape is None:
        return None
    return len(var.shape) > 0 and var.shape[0] == -1


def _mixes_the_batch(block: Any, forward: list[Any], mean_of: str) -> str | None:
    """Why the loss is not a mean of per-example values computed row by row (None: it is).

    A step on N devices computes each shard's loss alone: an op on the loss's path that
    makes a value out of the whole batch (a sum or mean over it) sees one shard there and
    the whole batch on one device, so the two would train differently. Such an op takes a
    batch-sized input (dim 0 is -1) and gives a value that is not batch-sized; values that
    are not floating point (a ``shape``) carry no gradient and are left out.
    """
    if _is_batch(block, mean_of) is False:
        return (f"the loss is a mean of {mean_of!r}, which is not one row per example (its "
                "dim 0 is not the batch), so a mean over each device's shard is not the "
                "mean over the batch")
    needed = {mean_of}
    for op in reversed(forward):
        made = [n for n in op.output_arg_names if n in needed]
        if not made:
            continue
        needed.update(op.input_arg_names)
        if not any(_is_batch(block, n) for n in op.input_arg_names):
            continue
        for name in made:
            var = block._find_var_recursive(name)
            floating = var is not None and str(var.dtype).startswith(("float", "bfloat"))
            if floating and _is_batch(block, name) is False:
                return (f"{op.type} makes {name!r} out of the whole batch, so each device "
                        "would compute it from its shard alone")
    return None


def _copy(strategy: Any, **changes: Any) -> Any:
    """A fresh strategy with the fields the user set on ``strategy``, and ``changes``."""
    out = type(strategy)()
    for name in strategy._FIELDS:
        if strategy._is_set(name) and name not in changes:
            setattr(out, name, getattr(strategy, name))
    for name, value in changes.items():
        setattr(out, name, value)
    return out


class OneDeviceFallback:
    """The measuring and the choice for one ParallelExecutor (see the module's text)."""

    def __init__(self, pe: Any) -> None:
        # NOTE: a proxy, not a reference: an executor dropped by its user is freed at once
        # (its finalizer stops its threads), not when the cycle collector next runs
        self._pe = weakref.proxy(pe)
        self._state = "many"  # many -> try_one -> wait_one -> one_measure -> one | stay
        self._untimed = 0
        self._many: list[float] = []
        self._one: list[float] = []
        self.one_pe: Any = None
        self._behind = False
        self.note: str | None = None  # the warning given, once the choice was one device
        build = pe._build_strategy
        # NOTE: only an executor with tiered segments of its own waits for the compile jobs
        # (the queue is the process's: another program's jobs say nothing of these steps)
        self._tiered = bool(build.enable_compile and build.compile_in_background)

    @property
    def on_one(self) -> bool:
        return self._state == "one"

    @property
    def decided(self) -> bool:
        """True once both sides were measured and the choice is made."""
        return self._state in ("one", "stay")

    def run(self, fetch_list: Any, feed: Any, *args: Any) -> list[Any]:
        if self._state == "stay" or not isinstance(feed, dict):
            # (a list of one feed per device cannot run on one device, even after the switch)
            return self._many_step(fetch_list, feed, args)
        if self._state == "one":
            return self._one_step(fetch_list, feed, args)
        compiling = self._tiered and not tiered.jobs_idle(0)
        if self._state == "many":
            start = _clock()
            out = self._many_step(fetch_list, feed, args)
            self._count(self._many, _clock() - start, compiling, "try_one")
            return out
        if self._state == "try_one":  # its first step builds its plan (and queues compiles)
            out = self._one_step(fetch_list, feed, args)
            self._state, self._untimed = "wait_one", 1
            return out
        if self._state == "wait_one" and compiling:
            return self._many_step(fetch_list, feed, args)
        self._state = "one_measure"
        start = _clock()
        out = self._one_step(fetch_list, feed, args)
        self._count(self._one, _clock() - start, compiling, "decide")
        if self._state == "decide":
            self._decide()
        return out

    def close(self) -> None:
        if self.one_pe is not None:
            self.one_pe.close()

    # ------------------------------------------------------------------ internals
    def _count(self, times: list[float], seconds: float, compiling: bool, then: str) -> None:
        if compiling or self._untimed < WARM_STEPS:
            self._untimed += 0 if compiling else 1
            return
        times.append(seconds)
        if len(times) == TIMED_STEPS:
            self._state, self._untimed = then, 0

    def _many_step(self, fetch_list: Any, feed: Any, args: tuple) -> list[Any]:
        return self._pe._run_devices(fetch_list, feed, *args)

    def copies_refreshed(self) -> None:
        """The N-device executor copied device 0's values to the devices (a step of its own
        is under way): they are no longer behind. A step refused before (a bad feed) leaves
        them behind, to be copied before the next."""
        self._behind = False

    def _one_step(self, fetch_list: Any, feed: Any, args: tuple) -> list[Any]:
        if self.one_pe is None:
            self.one_pe = self._pe._one_device_executor()
        self._behind = True  # the other devices' copies are now behind device 0's
        try:
            return self.one_pe._run(fetch_list, feed, *args)
        finally:
            # device 0 may have updated its values in place: every executor using these
            # device scopes (share_vars_from too) copies them again before its next run
            self._pe._scopes.refresh()

    @property
    def behind(self) -> bool:
        """True when device 0 ran the last step alone (the other copies are older)."""
        return self._behind

    def _decide(self) -> None:
        many, one = statistics.median(self._many), statistics.median(self._one)
        n = self._pe.device_count
        if one < many:
            self._state = "one"
            self.note = (f"ParallelExecutor: running on 1 device instead of {n} from now on: "
                         f"a step took {many * 1e3:.2f} ms on {n} devices and {one * 1e3:.2f} "
                         f"ms on 1 with the whole batch (medians of {TIMED_STEPS} steps of "
                         "this run; BuildStrategy.fall_back_to_one_device). Fetched values now "
                         "come from that one device")
            warnings.warn(self.note, OneDeviceWarning, stacklevel=4)
        else:
            self._state = "stay"


def one_device_strategies(build: BuildStrategy, exec_: ExecutionStrategy
                          ) -> tuple[BuildStrategy, ExecutionStrategy]:
    """The strategies of the one-device executor: the user's, without the fallback (nor
    ``fuse_all_reduce_ops``, which would tell that one device has no all-reduce to fuse,
    nor ``debug_graphviz_path``, whose files show the N devices' graph asked for)."""
    return (_copy(build, fall_back_to_one_device=False, fuse_all_reduce_ops=False,
                  debug_graphviz_path=""), _copy(exec_))
