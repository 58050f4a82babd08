"""ExecutionStrategy and BuildStrategy: how the ParallelExecutor builds and runs its graph.

Example::

    build = fluid.BuildStrategy()
    build.reduce_strategy = fluid.BuildStrategy.ReduceStrategy.Reduce
    build.fuse_all_reduce_ops = False
    exec_ = fluid.ExecutionStrategy()
    exec_.num_threads = 4
    pe = fluid.ParallelExecutor(use_cuda=False, loss_name=loss.name,
                                build_strategy=build, exec_strategy=exec_)

Every field is type-checked when set. A strategy is *finalized* once an executor was built
with it: changing it afterwards raises (the change could not reach the built graph). A field
that is set but cannot apply to the executor being built is explained by a warning
(see ``strategy_warnings``).
"""

from __future__ import annotations

import enum
import math
import sys
from typing import Any

from ..flags import flag
from ..passes import PassPipeline, data_parallel_pipeline
from ..passes.grad_aggregation import AggregationOptions, GradientScaleStrategy, ReduceStrategy

__all__ = ["ExecutionStrategy", "BuildStrategy", "strategy_warnings", "build_pipeline"]


class _Strategy:
    """Shared machinery: a table of typed fields with defaults, and finalization."""

    _FIELDS: dict[str, tuple[Any, Any]] = {}  # name -> (type or tuple of types, default)

    def __init__(self) -> None:
        object.__setattr__(self, "_finalized", False)
        object.__setattr__(self, "_set", set())
        for name, (_, default) in self._FIELDS.items():
            object.__setattr__(self, name, default() if callable(default) else default)

    def __setattr__(self, name: str, value: Any) -> None:
        cls = type(self).__name__
        if name not in self._FIELDS:
            raise AttributeError(f"{cls} has no field {name!r}; fields: {sorted(self._FIELDS)}")
        if self._finalized:
            raise RuntimeError(f"{cls}.{name}: this strategy was already used to build an "
                               "executor and cannot change any more; create a new "
                               f"{cls}() for the next executor")
        kind, _ = self._FIELDS[name]
        value = _check_field(cls, name, kind, value)
        object.__setattr__(self, name, value)
        self._set.add(name)

    def _finalize(self) -> None:
        object.__setattr__(self, "_finalized", True)

    def _is_set(self, name: str) -> bool:
        """True when the user assigned ``name`` (even to its default value)."""
        return name in self._set

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={getattr(self, k)!r}" for k in self._FIELDS)
        return f"{type(self).__name__}({fields})"


_OPTIONAL_BOOL = "None, False or True"  # a field kind: Fluid's boost::optional<bool>


def _check_field(cls: str, name: str, kind: Any, value: Any) -> Any:
    if kind is bool:
        if not isinstance(value, (bool, int)) or isinstance(value, float):
            raise TypeError(f"{cls}.{name} must be a bool, got {type(value).__name__}")
        return bool(value)
    if kind is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{cls}.{name} must be an int, got {type(value).__name__}")
        return value
    if kind is str:
        if not isinstance(value, str):
            raise TypeError(f"{cls}.{name} must be a str, got {type(value).__name__}")
        return value
    if kind is list:
        if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
            raise TypeError(f"{cls}.{name} must be a list of str, got {value!r}")
        return list(value)
    if kind is set:
        if not isinstance(value, (set, frozenset, list, tuple)) or \
                not all(isinstance(v, str) for v in value):
            raise TypeError(f"{cls}.{name} must be a set of str (op types), got {value!r}")
        return set(value)
    if kind is _OPTIONAL_BOOL:
        if value is None:
            return None
        if not isinstance(value, bool):
            raise TypeError(f"{cls}.{name} must be None, False or True, got {value!r}")
        return value
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        if isinstance(value, kind):
            return value
        members = ", ".join(f"{cls}.{kind.__name__}.{m.name}" for m in kind)
        raise TypeError(f"{cls}.{name} must be one of {members}, got {value!r}")
    raise AssertionError(f"unknown field kind {kind!r}")


class ExecutionStrategy(_Strategy):
    """How the ParallelExecutor runs its graph.

    Fields:
        num_threads: size of the scheduler's thread pool; 0 means automatic (see
            ``parafluid.engine.scheduler.default_num_threads``). 1 runs every op on one thread.
        num_iteration_per_drop_scope: the per-device local scopes that keep the temporaries
            of a run are dropped every this many runs (default 100, as Fluid 1.6).
        num_iteration_per_run: one ``run()`` executes the graph this many times (same feed),
            fetching on the last.
        allow_op_delay: accepted for compatibility; Fluid documents it as having no effect and
            so does parafluid (setting it to True warns).
        use_experimental_executor: accepted; parafluid has one scheduler, the design of
            Fluid's experimental fast-threaded executor, whatever the value.
        use_cuda, use_thread_barrier: accepted, no effect (the places decide the devices; the
            thread barrier belongs to Fluid's asynchronous pserver executor).
        _dry_run: accepted; parafluid always runs the ops (setting True warns).
        check_nan_inf: check every op's outputs on every device and raise, naming the op,
            the device and the variable, at the first NaN or Inf, before any parameter is
            updated (as ``FLAGS_check_nan_inf=1`` in the environment does). Off by default.

    Example::

        s = fluid.ExecutionStrategy()
        s.num_threads = 4
        s.num_iteration_per_drop_scope = 10
    """

    _FIELDS = {
        "num_threads": (int, 0),
        "num_iteration_per_drop_scope": (int, 100),
        "num_iteration_per_run": (int, 1),
        "allow_op_delay": (bool, False),
        "use_experimental_executor": (bool, False),
        "use_cuda": (bool, True),
        "use_thread_barrier": (bool, False),
        "_dry_run": (bool, False),
        "check_nan_inf": (bool, False),
    }

    def __setattr__(self, name: str, value: Any) -> None:
        super().__setattr__(name, value)
        low = {"num_threads": 0, "num_iteration_per_drop_scope": 1, "num_iteration_per_run": 1}
        if name in low and value < low[name]:
            object.__setattr__(self, name, self._FIELDS[name][1])
            raise ValueError(f"ExecutionStrategy.{name} must be >= {low[name]}, got {value}")


class BuildStrategy(_Strategy):
    """How the ParallelExecutor turns a Program into its multi-device graph.

    Fields:
        reduce_strategy: ``ReduceStrategy.AllReduce`` (every device gets the summed gradient
            and updates its own parameters) or ``ReduceStrategy.Reduce`` (each gradient is
            summed on one owner device, only the owner runs that parameter's optimizer, then
            the parameter is broadcast).
        gradient_scale_strategy: the loss gradient on each device starts at ``1/nranks``
            (``CoeffNumDevice``, for a mean loss), ``1`` (``One``, for a sum loss), or is fed
            by the user as ``<loss>@GRAD`` (``Customized``).
        fuse_all_reduce_ops: one all-reduce per group of gradients (AllReduce mode only).
            Unset, it reads True as in Fluid 1.6, and the executor decides where fusing
            pays (measured in BENCHMARKS.md): across processes and in compiled steps the
            gradients go out in groups, each closed once it holds
            ``FLAGS_fuse_parameter_memory_size`` MB (32 MB while the flag is -1, its
            default); the devices of one process in an interpreted
            step sum each gradient on its own, overlapping the backward pass. Set True or
            False, it is obeyed everywhere.
        fuse_elewise_add_act_ops: fuse ``elementwise_add`` + activation into one op.
        sync_batch_norm: batch_norm statistics over all devices (forward and backward).
        memory_optimize: free each temporary as soon as its last reader has run (None, the
            default, is Fluid's "let the framework decide": off).
        enable_inplace: an elementwise/activation op writes into its dead input's buffer.
        enable_sequential_execution: every device runs its ops in program order.
        debug_graphviz_path: write dot files of the program and of the multi-device graph.
        fuse_all_optimizer_ops, fuse_relu_depthwise_conv, fuse_broadcast_ops,
        remove_unnecessary_lock, enable_backward_optimizer_op_deps,
        use_hierarchical_allreduce, is_distribution, async_mode: accepted; they have no effect
            in parafluid (a warning says so when one is turned on). ``fuse_all_optimizer_ops``
            and ``fuse_broadcast_ops`` read True until set, as Fluid 1.6's getters do.
        cache_runtime_context, mkldnn_enabled_op_types, nccl_comm_num,
        hierarchical_allreduce_inter_nranks: performance knobs of Fluid's C++ engine,
            accepted with Fluid's defaults and types; no effect (no warning).
        num_trainers, trainer_id, trainers_endpoints: the multi-process setting
            (``nranks = num_trainers * devices``).
        num_microbatches: split each batch into this many micro-batches, GPipe-style, so
            that the stages of a placed program overlap (one place only; docs/placement.md).
        enable_compile: run the runs of compilable ops as compiled segments
            (torch.compile / Inductor), each device its own; the rest stays interpreted
            (docs/compiled.md).
        overlap_communication: in a multi-trainer job, start each all-reduce whose result
            only the parameter updates read and go on with the backward pass, waiting for
            it before the updates; in one process, run it as soon as every device produced
            the gradient, beside the backward (False: after every device's backward). The
            default is True; the results are the same bits either way.
        compile_in_background: with ``enable_compile``, tiered compilation: the run starts
            at once with every segment running op by op, and a worker process compiles
            the segments; the run switches over when their code is ready (docs/compiled.md).
        fall_back_to_one_device: (parafluid extension) measure a few steps on all the
            devices and a few on one device with the whole batch, and run on one device
            from then on when that was faster, with a warning saying so (a model too small
            for data parallelism in one process). Acts only when one device computes the
            same step: a mean loss over per-example values, AllReduce, no per-device
            batch_norm statistics, one process (``parafluid.parallel.device_fallback``).

    Example::

        b = fluid.BuildStrategy()
        b.reduce_strategy = fluid.BuildStrategy.ReduceStrategy.Reduce
        b.gradient_scale_strategy = fluid.BuildStrategy.GradientScaleStrategy.One
    """

    ReduceStrategy = ReduceStrategy
    GradientScaleStrategy = GradientScaleStrategy

    _FIELDS = {
        "reduce_strategy": (ReduceStrategy, ReduceStrategy.AllReduce),
        "gradient_scale_strategy": (GradientScaleStrategy, GradientScaleStrategy.CoeffNumDevice),
        "debug_graphviz_path": (str, ""),
        "enable_sequential_execution": (bool, False),
        "fuse_elewise_add_act_ops": (bool, False),
        "fuse_all_reduce_ops": (bool, True),  # unset: the executor decides (see above)
        "overlap_communication": (bool, True),
        "fuse_all_optimizer_ops": (bool, True),
        "fuse_relu_depthwise_conv": (bool, False),
        "fuse_broadcast_ops": (bool, True),
        "sync_batch_norm": (bool, False),
        "memory_optimize": (_OPTIONAL_BOOL, None),
        "enable_inplace": (bool, False),
        "remove_unnecessary_lock": (bool, True),
        "enable_backward_optimizer_op_deps": (bool, False),
        "use_hierarchical_allreduce": (bool, False),
        "hierarchical_allreduce_inter_nranks": (int, 0),
        "nccl_comm_num": (int, 1),
        "is_distribution": (bool, False),
        "async_mode": (bool, False),
        "cache_runtime_context": (bool, False),
        "mkldnn_enabled_op_types": (set, set),
        "num_trainers": (int, 1),
        "trainer_id": (int, 0),
        "trainers_endpoints": (list, list),
        "num_microbatches": (int, 1),
        "enable_compile": (bool, False),
        "compile_in_background": (bool, False),
        "fall_back_to_one_device": (bool, False),
    }

    def __setattr__(self, name: str, value: Any) -> None:
        super().__setattr__(name, value)
        if name == "num_trainers" and value < 1:
            object.__setattr__(self, name, 1)
            raise ValueError(f"BuildStrategy.num_trainers must be >= 1, got {value}")
        if name == "trainer_id" and value < 0:
            object.__setattr__(self, name, 0)
            raise ValueError(f"BuildStrategy.trainer_id must be >= 0, got {value}")
        if name == "nccl_comm_num" and value < 1:
            object.__setattr__(self, name, 1)
            raise ValueError(f"BuildStrategy.nccl_comm_num must be >= 1, got {value}")
        if name == "num_microbatches" and value < 1:
            object.__setattr__(self, name, 1)
            raise ValueError(f"BuildStrategy.num_microbatches must be >= 1, got {value}")


_NO_EFFECT = {
    "fuse_all_optimizer_ops": "parafluid runs each parameter's optimizer op on its own; "
                              "fusing them into one op over a flat buffer is not implemented",
    "fuse_relu_depthwise_conv": "no relu + depthwise_conv fusion pass exists in parafluid",
    "fuse_broadcast_ops": "it only applies to Reduce mode across processes in Fluid; "
                          "parafluid's in-process broadcasts are already one op per parameter",
    "enable_backward_optimizer_op_deps": "parafluid orders optimizer ops by data dependencies "
                                         "only",
    "use_hierarchical_allreduce": "in-process all-reduce has a single level",
    "is_distribution": "parameter-server training runs through the send/recv ops that "
                       "fluid.DistributeTranspiler puts in the program",
    "async_mode": "asynchronous parameter-server training is chosen when transpiling "
                  "(DistributeTranspiler(...).transpile(..., sync_mode=False))",
}


def build_pipeline(build: BuildStrategy, nranks: int, loss_name: str | None,
                   in_process: bool = False) -> PassPipeline:
    """The passes a ParallelExecutor applies for ``build`` on ``nranks`` devices in all, with
    the plain options each pass takes. ``in_process``: every device is in this process.

    ``fuse_all_reduce_ops`` left unset fuses the all-reduces across processes and in
    compiled steps, and not between the devices of one process in an interpreted step
    (BENCHMARKS.md has the measurements). Across processes each collective has a latency
    and a CPU cost on the transport's threads that a group pays once; in a compiled step
    each all-reduce would split the step into more calls (a segment ends before a
    collective); between the devices of one process a sum is an addition of tensors, and
    the copies into and out of a group's buffer cost more than the overlap they give up.

    Example::

        print(build_pipeline(fluid.BuildStrategy(), 2, loss.name))   # grad_aggregation
    """
    opts = AggregationOptions(
        loss_name=loss_name, nranks=nranks,
        reduce=build.reduce_strategy == ReduceStrategy.Reduce,
        scale=build.gradient_scale_strategy,
        fuse_all_reduce=fuse_all_reduce(build, in_process), fuse_cap_bytes=fuse_cap_bytes(),
        fuse_max_grads=fuse_max_grads())
    return data_parallel_pipeline(opts, fuse_elewise_add_act=build.fuse_elewise_add_act_ops,
                                  sync_batch_norm=build.sync_batch_norm)


def fuse_all_reduce(build: BuildStrategy, in_process: bool) -> bool:
    """Whether the gradient all-reduces go out in groups: ``fuse_all_reduce_ops`` when set,
    else across processes and in compiled steps (see ``build_pipeline``)."""
    if build._is_set("fuse_all_reduce_ops"):
        return build.fuse_all_reduce_ops
    return not in_process or build.enable_compile


def fuse_cap_bytes() -> int:
    """The size at which a group of gradients closes: ``FLAGS_fuse_parameter_memory_size``
    MB when it is > 0 (Fluid's flag), else 32 MB; infinite: no size limit, as Fluid's
    comparison in doubles reads it."""
    mb = flag("FLAGS_fuse_parameter_memory_size")
    if mb == math.inf:
        return sys.maxsize
    return int(mb * (1 << 20)) if mb > 0 else 32 << 20


def fuse_max_grads() -> int:
    """The most gradients a group holds: ``FLAGS_fuse_parameter_groups_size`` when it is
    > 1 (Fluid's flag), else no limit (0)."""
    n = flag("FLAGS_fuse_parameter_groups_size")
    return n if n > 1 else 0


def strategy_warnings(build: BuildStrategy, exec_: ExecutionStrategy, nranks: int,
                      has_grads: bool) -> list[str]:
    """Explanations for fields that are set but cannot apply to this executor."""
    out = []
    reduce_mode = build.reduce_strategy == ReduceStrategy.Reduce
    fuse = build._is_set("fuse_all_reduce_ops") and build.fuse_all_reduce_ops
    if fuse and reduce_mode and nranks > 1:
        out.append("BuildStrategy.fuse_all_reduce_ops has no effect in Reduce mode: gradients "
                   "are reduced to their owner device and parameters broadcast, there is no "
                   "all-reduce to fuse (use ReduceStrategy.AllReduce to fuse)")
    if fuse and nranks == 1:
        out.append("BuildStrategy.fuse_all_reduce_ops has no effect with a single device: "
                   "there is no all-reduce")
    if reduce_mode and nranks == 1 and build._is_set("reduce_strategy"):
        out.append("BuildStrategy.reduce_strategy=Reduce has no effect with a single device "
                   "(it falls back to AllReduce, which is a no-op with one rank)")
    if (fuse or reduce_mode) and nranks > 1 and not has_grads:
        out.append("BuildStrategy: the program has no parameter gradients to aggregate "
                   "(no loss_name, or no backward pass), so the reduce strategy has no effect")
    for name, why in _NO_EFFECT.items():
        if getattr(build, name) and build._is_set(name):
            out.append(f"BuildStrategy.{name} has no effect: {why}")
    if exec_._dry_run:
        out.append("ExecutionStrategy._dry_run has no effect: parafluid always runs the ops "
                   "(time the scheduler with fluid.profiler instead)")
    if exec_.allow_op_delay:
        out.append("ExecutionStrategy.allow_op_delay has no effect (Fluid documents it as "
                   "invalid; communication ops already run as soon as their inputs are ready)")
    return out
