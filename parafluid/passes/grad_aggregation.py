"""Pass: sum the gradients of data-parallel replicas, written into the program as ops.

``aggregate_gradients(program, opts)`` returns a copy of ``program`` (one device's view)
where, for training with ``opts.nranks`` devices in all:

- the loss gradient gets its scale: a ``scale`` op of ``1/nranks`` right after the op that
  fills ``loss@GRAD`` (``CoeffNumDevice``); nothing for ``One``; for ``Customized`` the
  filling op is removed (the user feeds ``loss@GRAD``);
- AllReduce mode: a ``c_allreduce_sum`` right after the op producing each dense gradient, or
  one ``c_allreduce_coalesced`` per group of gradients when fusing; a row-sparse gradient is
  reduced to an owner device (``c_reduce_sum``, rows concatenated) and broadcast back
  (``c_broadcast``), never densified; a gradient that deep gradient compression
  all-reduces itself (its producer is ``c_dgc_allreduce``, appended by
  ``DGCMomentumOptimizer``: one node over the devices, like the ops written here) gets
  nothing more, and is left out of the fused groups;
- Reduce mode: each gradient is reduced to an owner device (greedy balance of element
  counts over all devices of the job); the parameter's optimizer ops get the attr
  ``owner_device`` (only that device runs them) and the updated parameter is broadcast
  right after its last optimizer op.

The graph builder (``parafluid.engine.graph``) turns each collective op into one node
spanning the devices and replicates every other op; ``owner_device`` limits an op to one
device. ``find_params_grads`` is the (param, grad) discovery the transpilers reuse.

Example::

    dp = aggregate_gradients(main, AggregationOptions(loss_name=loss.name, nranks=2))
    print(dp)   # ... {Out=[fc_0.w_0@GRAD]} = c_allreduce_sum(X=[fc_0.w_0@GRAD]) ...
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from ..framework import GRAD_SUFFIX, Operator, OpRole, Program
from ..ops.common import numel

__all__ = ["AggregationOptions", "ReduceStrategy", "GradientScaleStrategy", "find_params_grads",
           "loss_grad_op_index", "aggregate_gradients", "OWNER_ATTR"]

OWNER_ATTR = "owner_device"
_LOSS_GRAD_ROLE = OpRole.Backward | OpRole.Loss


class ReduceStrategy(enum.IntEnum):
    """How gradients are aggregated across devices (Fluid's ``BuildStrategy.ReduceStrategy``)."""

    AllReduce = 0
    Reduce = 1


class GradientScaleStrategy(enum.IntEnum):
    """What the loss gradient starts from on each device (Fluid's
    ``BuildStrategy.GradientScaleStrategy``): ``1/nranks``, ``1``, or fed by the user."""

    CoeffNumDevice = 0
    One = 1
    Customized = 2


@dataclass(frozen=True)
class AggregationOptions:
    """How gradients are summed (the ParallelExecutor fills it from its BuildStrategy and
    device count)."""

    loss_name: str | None
    nranks: int  # devices of the whole job (processes x local devices)
    reduce: bool = False  # ReduceStrategy.Reduce: each gradient summed on one owner device
    scale: GradientScaleStrategy = GradientScaleStrategy.CoeffNumDevice
    fuse_all_reduce: bool = False
    fuse_cap_bytes: int = 32 << 20  # a group closes once it holds this many bytes
    fuse_max_grads: int = 0  # ... or more than this many gradients (0: no limit)


def role_pairs(op: Operator) -> list[tuple[str, str]]:
    """The (param, grad) pairs an op's ``op_role_var`` names."""
    rv = list(op.attrs.get("op_role_var") or [])
    return list(zip(rv[0::2], rv[1::2]))


def find_params_grads(program: Program) -> list[tuple[str, str, int]]:
    """``(param, grad, producer op index)`` for every parameter gradient, in production order.

    The producer is the backward op that finally writes the gradient (its ``op_role_var``
    names the pair), so gradients summed over several uses are taken after the sum.
    """
    producer: dict[str, int] = {}
    param_of: dict[str, str] = {}
    for i, op in enumerate(program.global_block().ops):
        if not op.attrs.get("op_role", 0) & OpRole.Backward:
            continue
        outs = set(op.output_arg_names)
        for p, g in role_pairs(op):
            if g in outs:
                producer[g] = i
                param_of[g] = p
    return [(param_of[g], g, producer[g])
            for g in sorted(producer, key=lambda g: (producer[g], g))]


def loss_grad_op_index(program: Program, loss_name: str) -> int | None:
    """Index of the op that fills ``loss@GRAD`` (appended by the backward pass), if any.

    Without one, the one op of the loss-gradient role that fills a gradient, as Fluid finds
    the seed by its role: a loss scaled before it is differentiated (mixed precision's
    ``loss * loss_scaling``) seeds ``<scaled loss>@GRAD``, and that is the gradient to
    scale by the number of devices."""
    target = [loss_name + GRAD_SUFFIX]
    seeds = []
    for i, op in enumerate(program.global_block().ops):
        if op.attrs.get("op_role", 0) == _LOSS_GRAD_ROLE:
            if op.output_arg_names == target:
                return i
            if len(op.output_arg_names) == 1 and op.output_arg_names[0].endswith(GRAD_SUFFIX):
                seeds.append(i)
    return seeds[0] if len(seeds) == 1 else None


def aggregate_gradients(program: Program, opts: AggregationOptions) -> Program:
    """A copy of ``program`` with the gradient aggregation ops of ``opts`` inserted."""
    if opts.loss_name is None or opts.nranks <= 1:
        return program
    block = program.global_block()
    if block._find_var_recursive(opts.loss_name) is None:
        raise ValueError(f"loss_name {opts.loss_name!r} is not a variable of the program")
    nranks = opts.nranks
    reduce_mode = opts.reduce
    pairs = find_params_grads(program)
    ops = block.ops
    # deep gradient compression: the gradient's producer is its own (sparse) all-reduce
    compressed = {g for _, g, i in pairs if ops[i].type == "c_dgc_allreduce"}
    if compressed and reduce_mode:
        raise ValueError(f"deep gradient compression (DGCMomentumOptimizer) all-reduces "
                         f"{sorted(compressed)[:3]}: it needs ReduceStrategy.AllReduce, not "
                         "Reduce")
    pairs = [pg for pg in pairs if pg[1] not in compressed]

    def is_sparse(g: str) -> bool:
        var = block._find_var_recursive(g)
        return var is not None and var.type == "selected_rows"

    def size_of(name: str) -> int:
        var = block._find_var_recursive(name)
        shape = [d for d in (var.shape or ()) if d > 0] if var is not None else []
        return max(1, numel(shape))

    owners: dict[str, int] = {}
    load = [0] * nranks
    for p, g, _ in pairs:
        if reduce_mode or is_sparse(g):
            dev = min(range(nranks), key=lambda d: (load[d], d))  # greedy balance
            owners[p] = dev
            load[dev] += size_of(p)

    grads_at: dict[int, list[tuple[str, str]]] = {}
    for p, g, i in pairs:
        grads_at.setdefault(i, []).append((p, g))
    groups_at: dict[int, list[list[str]]] = {}
    if opts.fuse_all_reduce and not reduce_mode:
        dense = [(p, g, i) for p, g, i in pairs if not is_sparse(g)]
        groups_at = _fuse_groups(dense, block, size_of, opts.fuse_cap_bytes,
                                 opts.fuse_max_grads)
    last_opt: dict[int, list[str]] = {}
    if reduce_mode:
        last: dict[str, int] = {}
        for i, op in enumerate(block.ops):
            if op.attrs.get("op_role", 0) & OpRole.Optimize:
                for p, _ in role_pairs(op):
                    if p in owners:
                        last[p] = i
        for p, i in last.items():
            last_opt.setdefault(i, []).append(p)
    loss_grad_at = loss_grad_op_index(program, opts.loss_name)

    out = program.clone()
    oblock = out.global_block()
    src_ops = oblock.ops
    new_ops: list[Operator] = []

    def emit(type: str, x: list[str], o: list[str], attrs: dict[str, Any], after: Operator,
             role: int = OpRole.Backward) -> None:
        op = oblock._make_op(type, {"X": x}, {"Out": o}, {**attrs, "op_role": role},
                             infer=False)
        op.callsite = after.callsite
        new_ops.append(op)

    for i, op in enumerate(src_ops):
        if i == loss_grad_at and opts.scale == GradientScaleStrategy.Customized:
            continue  # the user feeds loss@GRAD
        if reduce_mode and op.attrs.get("op_role", 0) & OpRole.Optimize:
            owned = [owners[p] for p, _ in role_pairs(op) if p in owners]
            if owned:
                op.attrs[OWNER_ATTR] = owned[0]
        new_ops.append(op)
        if i == loss_grad_at and opts.scale == GradientScaleStrategy.CoeffNumDevice:
            name = op.output_arg_names[0]
            emit("scale", [name], [name], {"scale": 1.0 / nranks, "bias": 0.0,
                                          "bias_after_scale": True}, op, _LOSS_GRAD_ROLE)
        for p, g in grads_at.get(i, []):
            if is_sparse(g) or reduce_mode:
                root = owners[p]
                emit("c_reduce_sum", [g], [g], {"root": root}, op)
                if not reduce_mode:
                    emit("c_broadcast", [g], [g], {"root": root}, op)
            elif not opts.fuse_all_reduce:
                emit("c_allreduce_sum", [g], [g], {}, op)
        for group in groups_at.get(i, []):
            emit("c_allreduce_coalesced", group, group, {"nvars": len(group)}, op)
        for p in last_opt.get(i, []):
            emit("c_broadcast", [p], [p], {"root": owners[p]}, op, OpRole.Optimize)
    oblock.ops = new_ops
    out._bump()
    return out


def _fuse_groups(dense: list[tuple[str, str, int]], block: Any, size_of: Any, cap_bytes: int,
                 max_grads: int = 0) -> dict[int, list[list[str]]]:
    """Groups of gradients in the order the backward pass produces them, keyed by the op
    that closes each group (the fused all-reduce waits for the whole group).

    As Fluid's coalescing: the gradients of one layer (parameters named ``<layer>.<x>``,
    produced one after the other) stay together; layers are added to a group until it
    holds ``cap_bytes`` or more, or more than ``max_grads`` gradients (when > 0); a group
    holds one dtype.
    """
    from ..dtypes import to_torch

    layers: list[list[tuple[str, int, Any]]] = []  # consecutive gradients of one layer
    prev_key = None
    for p, g, _ in dense:
        dtype = block._find_var_recursive(g).dtype
        nbytes = size_of(g) * to_torch(dtype).itemsize
        key = (p.split(".", 1)[0], dtype)
        if key != prev_key:
            layers.append([])
            prev_key = key
        layers[-1].append((g, nbytes, dtype))
    groups: list[list[str]] = []
    cur: list[str] = []
    cur_bytes, cur_dtype = 0, None
    for layer in layers:
        dtype = layer[0][2]
        if cur and dtype != cur_dtype:
            groups.append(cur)
            cur, cur_bytes = [], 0
        cur.extend(g for g, _, _ in layer)
        cur_bytes += sum(n for _, n, _ in layer)
        cur_dtype = dtype
        if cur_bytes >= cap_bytes or (max_grads > 0 and len(cur) > max_grads):
            groups.append(cur)
            cur, cur_bytes = [], 0
    if cur:
        groups.append(cur)
    producer = {g: i for _, g, i in dense}
    out: dict[int, list[list[str]]] = {}
    for group in groups:
        out.setdefault(max(producer[g] for g in group), []).append(group)
    return out
