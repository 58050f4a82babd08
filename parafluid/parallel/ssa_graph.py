"""The multi-device SSA graph: a Program replicated on N devices plus communication nodes.

``build_graph(program, ndev, options)`` walks the ops of the global block in order and
replicates each op once per device. Variables are versioned per ``(device, name)``: a read
takes the latest version (version 0 has no producer: parameters, feeds), a write appends a
new version. Edges: read-after-write (producer -> reader), write-after-read (every reader of
the old version -> the writer of the new one) and write-after-write. This module knows
nothing of threads or tensors: it only describes nodes and their dependencies; the
ParallelExecutor binds the nodes to kernels and hands the DAG to the scheduler.

Gradient aggregation (only with a loss, as in Fluid):
- the op filling ``loss@GRAD`` becomes a scale-loss-grad fill of ``1/nranks``
  (CoeffNumDevice), ``1`` (One), or disappears (Customized: the user feeds it);
- AllReduce mode: a ``c_allreduce_sum`` right after the op producing each dense gradient
  (found through ``op_role_var``), or one ``c_allreduce_coalesced`` per group of gradients
  when fusing; row-sparse gradients are reduced to one device (``c_reduce_sum``, rows
  concatenated) and broadcast (``c_broadcast``), never densified;
- Reduce mode: each gradient gets an owner by greedy balance of element counts; it is
  reduced to the owner, only the owner runs the parameter's optimizer ops, and the updated
  parameter is broadcast right after its last optimizer op.

Collective nodes are chained in program order, so every rank issues them in the same order.

Example::

    g = build_graph(program, 2, GraphOptions(loss_name=loss.name))
    print(g)           # one node a line, e.g. "#7 dev0 {Out=[fc_0.tmp_0]} = mul(...)"
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..framework import GRAD_SUFFIX, Operator, OpRole
from ..ops.common import numel
from ..ops.registry import EMPTY
from .strategy import GradientScaleStrategy

__all__ = ["Node", "SSAGraph", "GraphOptions", "build_graph", "ALL_DEVICES"]

ALL_DEVICES = -1
Key = tuple[int, str]  # (device, variable name)
VarRef = tuple[int, str, int]  # (device, name, version)

_LOSS_GRAD_ROLE = OpRole.Backward | OpRole.Loss
# Collective ops that may appear in a program (one device's view): one node across devices.
PROGRAM_COLLECTIVES = frozenset({"c_allreduce_sum"})


@dataclass(eq=False)
class Node:
    """One op of the multi-device graph: a per-device replica or a collective."""

    index: int
    type: str
    attrs: dict[str, Any]
    inputs: dict[str, list[VarRef]]
    outputs: dict[str, list[VarRef]]
    device: int  # ALL_DEVICES for collectives
    op: Operator | None  # the program op a replica runs (None for collectives)
    op_index: int  # position of the program op it comes from (or follows)
    kind: str = "compute"  # compute | scale_loss_grad | collective
    deps: set[int] = field(default_factory=set)
    dummy: VarRef | None = None  # stands for the effect of a node that writes no variable

    def to_string(self) -> str:
        def slots(d: dict[str, list[VarRef]]) -> str:
            return ", ".join(f"{k}=[{', '.join(f'{n}@{dev}#{v}' for dev, n, v in refs)}]"
                             for k, refs in d.items())

        where = "all" if self.device == ALL_DEVICES else f"dev{self.device}"
        outs = slots(self.outputs)
        if self.dummy is not None:
            outs = f"@DUMMY@=[{self.dummy[1]}@{self.dummy[0]}#{self.dummy[2]}]"
        attrs = {k: v for k, v in sorted(self.attrs.items())
                 if k not in ("op_role", "op_role_var", "op_namescope")}
        tail = (" {" + ", ".join(f"{k}={v!r}" for k, v in attrs.items()) + "}") if attrs else ""
        return f"#{self.index} {where} {{{outs}}} = {self.type}({slots(self.inputs)}){tail}"

    __repr__ = to_string


@dataclass
class GraphOptions:
    """What shapes the graph (from BuildStrategy and the executor)."""

    loss_name: str | None = None
    reduce: bool = False  # ReduceStrategy.Reduce
    scale: GradientScaleStrategy = GradientScaleStrategy.CoeffNumDevice
    fuse_all_reduce: bool = False
    fuse_cap_bytes: int = 32 << 20
    sequential: bool = False
    nranks: int | None = None  # default: ndev (num_trainers x local devices in general)


@dataclass(repr=False)
class SSAGraph:
    """The built graph plus what the executor needs to bind and run it."""

    ndev: int
    nodes: list[Node]
    params_grads: list[tuple[str, str]]  # aggregated (param, grad) pairs, production order
    owners: dict[str, int]  # param -> owner device (Reduce mode, sparse roots)
    reads0: list[list[str]]  # per device: names read before any write (scope or feed)
    last_writer: dict[Key, int]  # final version's producer node
    last_readers: dict[Key, list[int]]  # readers of the final version
    absent: set[Key]  # Reduce mode: values that exist only on another device
    scale_loss_grad: bool = False

    def __str__(self) -> str:
        return "\n".join(n.to_string() for n in self.nodes)

    def __repr__(self) -> str:
        return (f"SSAGraph({self.ndev} devices, {len(self.nodes)} nodes, "
                f"{len(self.params_grads)} aggregated gradients)")

    def count(self, type: str) -> int:
        return sum(1 for n in self.nodes if n.type == type)


class _Builder:
    def __init__(self, ndev: int) -> None:
        self.ndev = ndev
        self.nodes: list[Node] = []
        self.version: dict[Key, int] = {}
        self.writer: dict[Key, int] = {}
        self.readers: dict[Key, list[int]] = {}
        self.reads0: list[list[str]] = [[] for _ in range(ndev)]
        self.seen0: list[set[str]] = [set() for _ in range(ndev)]
        self.absent: set[Key] = set()
        self.last_collective: int | None = None

    def add(self, type: str, attrs: dict[str, Any], ins: dict[str, list[Key]],
            outs: dict[str, list[Key]], device: int, op: Operator | None, op_index: int,
            kind: str) -> Node:
        node = Node(len(self.nodes), type, attrs, {}, {}, device, op, op_index, kind)
        idx = node.index
        for slot, keys in ins.items():
            refs = []
            for key in keys:
                w = self.writer.get(key)
                if w is not None:
                    node.deps.add(w)
                elif key[1] not in self.seen0[key[0]]:
                    self.seen0[key[0]].add(key[1])
                    self.reads0[key[0]].append(key[1])
                readers = self.readers.setdefault(key, [])
                if not readers or readers[-1] != idx:
                    readers.append(idx)
                refs.append((key[0], key[1], self.version.get(key, 0)))
            node.inputs[slot] = refs
        for slot, keys in outs.items():
            refs = []
            for key in keys:
                for r in self.readers.get(key, ()):  # write-after-read
                    if r != idx:
                        node.deps.add(r)
                w = self.writer.get(key)
                if w is not None and w != idx:  # write-after-write
                    node.deps.add(w)
                v = self.version.get(key, 0) + 1
                self.version[key] = v
                self.writer[key] = idx
                self.readers[key] = []
                self.absent.discard(key)
                refs.append((key[0], key[1], v))
            node.outputs[slot] = refs
        if not any(node.outputs.values()):
            node.dummy = (max(device, 0), f"@DUMMY@{idx}", 1)
        if kind == "collective":
            # NOTE: one global order of collectives, so that ranks in other processes, which
            # must issue them identically, never wait on each other in a cycle.
            if self.last_collective is not None:
                node.deps.add(self.last_collective)
            self.last_collective = idx
        self.nodes.append(node)
        return node


def _op_keys(op: Operator, slots: dict[str, list[str]], dev: int) -> dict[str, list[Key]]:
    return {s: [(dev, n) for n in names if n != EMPTY] for s, names in slots.items() if names}


def _collective_keys(op: Operator, slots: dict[str, list[str]],
                     devs: list[int]) -> dict[str, list[Key]]:
    """A program-level collective names one variable; the node takes it on every device."""
    out = {}
    for slot, names in slots.items():
        if len(names) != 1:
            raise ValueError(f"{op.type} (created at {op.callsite}): slot {slot} must name one "
                             f"variable in a program (the graph adds one per device), got "
                             f"{names}")
        out[slot] = [(d, names[0]) for d in devs]
    return out


def _role_pairs(op: Operator) -> list[tuple[str, str]]:
    rv = list(op.attrs.get("op_role_var") or [])
    return list(zip(rv[0::2], rv[1::2]))


def build_graph(program: Any, ndev: int, options: GraphOptions | None = None) -> SSAGraph:
    """Replicate ``program``'s global block on ``ndev`` devices and add aggregation nodes."""
    opts = options or GraphOptions()
    if ndev < 1:
        raise ValueError(f"build_graph: ndev must be >= 1, got {ndev}")
    block = program.global_block()
    ops = block.ops
    nranks = opts.nranks or ndev
    if opts.loss_name is not None and block._find_var_recursive(opts.loss_name) is None:
        raise ValueError(f"loss_name {opts.loss_name!r} is not a variable of the program")
    aggregate = opts.loss_name is not None and nranks > 1
    reduce_mode = opts.reduce and aggregate

    # Gradients: the backward op that finally writes each param's gradient (op_role_var).
    producer: dict[str, int] = {}
    param_of: dict[str, str] = {}
    for i, op in enumerate(ops):
        if not op.attrs.get("op_role", 0) & OpRole.Backward:
            continue
        outs = set(op.output_arg_names)
        for p, g in _role_pairs(op):
            if g in outs:
                producer[g] = i
                param_of[g] = p
    grads = sorted(producer, key=lambda g: (producer[g], g)) if aggregate else []
    params_grads = [(param_of[g], g) for g in grads]
    grads_at: dict[int, list[str]] = {}
    for g in grads:
        grads_at.setdefault(producer[g], []).append(g)

    def grad_var(g: str) -> Any:
        return block._find_var_recursive(g)

    def is_sparse(g: str) -> bool:
        var = grad_var(g)
        return var is not None and var.type == "selected_rows"

    def size_of(name: str) -> int:
        var = block._find_var_recursive(name)
        shape = [d for d in (var.shape or ()) if d > 0] if var is not None else []
        return max(1, numel(shape))

    owners: dict[str, int] = {}
    load = [0] * ndev
    for p, g in params_grads:
        if reduce_mode or is_sparse(g):
            dev = min(range(ndev), key=lambda d: (load[d], d))  # greedy balance
            owners[p] = dev
            load[dev] += size_of(p)

    groups_at: dict[int, list[list[str]]] = {}
    if aggregate and opts.fuse_all_reduce and not reduce_mode:
        groups_at = _fuse_groups([g for g in grads if not is_sparse(g)], producer, grad_var,
                                 size_of, opts.fuse_cap_bytes)

    last_opt: dict[int, list[str]] = {}
    if reduce_mode:
        last: dict[str, int] = {}
        for i, op in enumerate(ops):
            if op.attrs.get("op_role", 0) & OpRole.Optimize:
                for p, _ in _role_pairs(op):
                    if p in owners:
                        last[p] = i
        for p, i in last.items():
            last_opt.setdefault(i, []).append(p)

    b = _Builder(ndev)
    all_devs = list(range(ndev))
    scaled = False
    for i, op in enumerate(ops):
        role = op.attrs.get("op_role", 0)
        kind = "compute"
        if (aggregate and role == _LOSS_GRAD_ROLE and op.type == "fill_constant"
                and op.output_arg_names == [opts.loss_name + GRAD_SUFFIX]):
            scaled = True
            if opts.scale == GradientScaleStrategy.Customized:
                continue  # the user feeds loss@GRAD
            value = 1.0 / nranks if opts.scale == GradientScaleStrategy.CoeffNumDevice else 1.0
            op = Operator(op.block, op.type, op.inputs, op.outputs,
                          {**op.attrs, "value": value}, op.callsite)
            kind = "scale_loss_grad"
        if op.type in PROGRAM_COLLECTIVES:
            b.add(op.type, op.attrs, _collective_keys(op, op.inputs, all_devs),
                  _collective_keys(op, op.outputs, all_devs), ALL_DEVICES, None, i,
                  "collective")
            continue
        devices = all_devs
        if reduce_mode and role & OpRole.Optimize:
            owned = [owners[p] for p, _ in _role_pairs(op) if p in owners]
            if owned:
                devices = [owned[0]]
        for d in devices:
            ins = _op_keys(op, op.inputs, d)
            outs = _op_keys(op, op.outputs, d)
            missing = [k for keys in ins.values() for k in keys if k in b.absent]
            if missing:
                _skip_or_fail(op, i, d, missing, devices is not all_devs, block)
                b.absent.update(k for keys in outs.values() for k in keys)
                continue
            b.add(op.type, op.attrs, ins, outs, d, op, i, kind)
        if devices is not all_devs:  # an owner-only op: its results exist on the owner only
            b.absent.update((d, n) for d in all_devs if d not in devices
                            for n in op.output_arg_names if n != EMPTY)
        if not aggregate:
            continue
        for g in grads_at.get(i, []):
            p = param_of[g]
            keys = [(d, g) for d in all_devs]
            if is_sparse(g) or reduce_mode:
                root = owners[p]
                b.add("c_reduce_sum", {"root": root}, {"X": keys}, {"Out": [(root, g)]},
                      ALL_DEVICES, None, i, "collective")
                others = [(d, g) for d in all_devs if d != root]
                if reduce_mode:
                    b.absent.update(others)
                else:
                    b.add("c_broadcast", {"root": root}, {"X": [(root, g)]}, {"Out": others},
                          ALL_DEVICES, None, i, "collective")
            elif not opts.fuse_all_reduce:
                b.add("c_allreduce_sum", {}, {"X": keys}, {"Out": keys}, ALL_DEVICES, None, i,
                      "collective")
        for group in groups_at.get(i, []):
            keys = [(d, g) for d in all_devs for g in group]
            b.add("c_allreduce_coalesced", {"nvars": len(group)}, {"X": keys}, {"Out": keys},
                  ALL_DEVICES, None, i, "collective")
        for p in last_opt.get(i, []):
            root = owners[p]
            b.add("c_broadcast", {"root": root}, {"X": [(root, p)]},
                  {"Out": [(d, p) for d in all_devs if d != root]}, ALL_DEVICES, None, i,
                  "collective")
    if opts.sequential:
        _chain_per_device(b.nodes, ndev)
    return SSAGraph(ndev, b.nodes, params_grads, owners, b.reads0, dict(b.writer),
                    {k: list(v) for k, v in b.readers.items()}, set(b.absent), scaled)


def _skip_or_fail(op: Operator, index: int, dev: int, missing: list[Key], owner_op: bool,
                  block: Any) -> None:
    """Reduce mode: a replica reading a value another device owns is skipped, if harmless."""
    names = sorted({n for _, n in missing})
    persist = [n for n in op.output_arg_names
               if (v := block._find_var_recursive(n)) is not None and v.persistable]
    if owner_op or persist:
        raise ValueError(
            f"ReduceStrategy.Reduce cannot place op #{index} {op.type} (created at "
            f"{op.callsite}) on device {dev}: it reads {names}, which exist only on their "
            "owner devices after the gradient reduce"
            + (f", and it updates persistable {persist}" if persist else "")
            + ". Ops that mix several parameters' gradients (e.g. clipping by global norm) "
            "need ReduceStrategy.AllReduce")


def _fuse_groups(dense: list[str], producer: dict[str, int], grad_var: Any, size_of: Any,
                 cap_bytes: int) -> dict[int, list[list[str]]]:
    """Consecutive gradients of one dtype, up to ``cap_bytes``; keyed by the closing op."""
    from ..dtypes import to_torch

    groups: list[list[str]] = []
    cur: list[str] = []
    cur_bytes, cur_dtype = 0, None
    for g in dense:
        dtype = grad_var(g).dtype
        nbytes = size_of(g) * to_torch(dtype).itemsize
        if cur and (dtype != cur_dtype or cur_bytes + nbytes > cap_bytes):
            groups.append(cur)
            cur, cur_bytes = [], 0
        cur.append(g)
        cur_bytes += nbytes
        cur_dtype = dtype
    if cur:
        groups.append(cur)
    out: dict[int, list[list[str]]] = {}
    for group in groups:
        # NOTE: the fused node waits for the whole group: it follows the group's last producer.
        out.setdefault(max(producer[g] for g in group), []).append(group)
    return out


def _chain_per_device(nodes: list[Node], ndev: int) -> None:
    """enable_sequential_execution: each device runs its ops in program order."""
    prev: list[int | None] = [None] * ndev
    for node in nodes:
        devs = range(ndev) if node.device == ALL_DEVICES else (node.device,)
        for d in devs:
            if prev[d] is not None and prev[d] != node.index:
                node.deps.add(prev[d])
            prev[d] = node.index
