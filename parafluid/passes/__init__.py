"""Every Program -> Program transformation, one module each, one public entry point each.

- ``prune.prune(program, targets, feeds)``: keep what computes the targets (and every
  side-effect op); ``prune.eliminate_dead_code(program, keep)``: drop ops whose results
  nothing uses, never a side-effect op.
- ``fuse_elewise_add_act.fuse_elewise_add_act(program)``: elementwise_add + activation.
- ``sync_batch_norm.sync_batch_norm(program)``: batch statistics over all devices.
- ``grad_aggregation.aggregate_gradients(program, opts)``: all-reduce / reduce + broadcast
  of gradients and the loss-gradient scale, as ops; ``find_params_grads(program)``.
- ``liveness.analyze(graph)`` / ``release_plan(...)`` / ``block_liveness(block)``: the one
  liveness analysis (eager deletion, delete_var, memory_optimize, release_memory, inplace).
- ``inplace.plan_inplace(graph, ...)``: let an activation overwrite its dead input.
- ``memory_optimize.memory_optimize(program, ...)`` and ``release_memory.release_memory(
  program, ...)``: Fluid's transpiler functions (``fluid.memory_optimize``,
  ``fluid.release_memory``), in place as in Fluid; reuse dead variables' names by renaming,
  or insert ``delete_var`` ops after last uses (see docs/memory.md).

- ``place_transfers.insert_place_transfers(program)``: a ``memcpy`` wherever a value
  produced on one device is read on another (placed programs, see docs/placement.md).

``PassPipeline`` runs an ordered list of them and can dump the program after each
(``PARAFLUID_DEBUG=1`` or ``PARAFLUID_DUMP_PASSES=DIR``). ``data_parallel_pipeline`` is the
list the ParallelExecutor runs (``parallel.strategy.build_pipeline`` fills its options from a
BuildStrategy); the backward pass stays ``parafluid.append_backward``. Passes take plain
options, never an executor's strategy object.

Example::

    opts = AggregationOptions(loss_name=loss.name, nranks=2)
    pipe = data_parallel_pipeline(opts)
    print(pipe)             # grad_aggregation
    print(pipe(program))    # ... c_allreduce_sum ...
"""

from __future__ import annotations

from functools import partial

from .grad_aggregation import AggregationOptions, aggregate_gradients
from .pipeline import PassPipeline

__all__ = ["PassPipeline", "data_parallel_pipeline", "executor_pipeline", "AggregationOptions"]


def data_parallel_pipeline(opts: AggregationOptions, *, fuse_elewise_add_act: bool = False,
                           sync_batch_norm: bool = False) -> PassPipeline:
    """The passes a data-parallel run applies, in order: the optional fusion and batch-norm
    synchronization (the latter only with several devices), then gradient aggregation."""
    passes: list = []
    if fuse_elewise_add_act:
        from .fuse_elewise_add_act import fuse_elewise_add_act as fuse

        passes.append(("fuse_elewise_add_act", fuse))
    if sync_batch_norm and opts.nranks > 1:
        from .sync_batch_norm import sync_batch_norm as sync

        passes.append(("sync_batch_norm", sync))
    passes.append(("grad_aggregation", partial(aggregate_gradients, opts=opts)))
    return PassPipeline(passes)


def executor_pipeline(default_device: str = "cpu:0") -> PassPipeline:
    """The passes the sequential Executor applies to a placed program (``fluid.place_guard``):
    copies where values cross devices. Unplaced programs run as written."""
    from .place_transfers import insert_place_transfers

    return PassPipeline([("place_transfers",
                          partial(insert_place_transfers, default_device=default_device))])
