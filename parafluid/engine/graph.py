"""The multi-device SSA graph: a Program replicated on N devices, with dependencies.

``build_graph(program, ndev, options)`` walks the ops of the global block in order and
replicates each op once per device. Variables are versioned per ``(device, name)``: a read
takes the latest version (version 0 has no producer: parameters, feeds), a write appends a
new version. Edges: read-after-write (producer -> reader), write-after-read (every reader of
the old version -> the writer of the new one) and write-after-write. This module knows
nothing of threads or tensors: it only describes nodes and their dependencies.

What to communicate is decided before, by the gradient aggregation pass
(``parafluid.passes.grad_aggregation``), which writes collective ops into the program. Here:

- a collective op (``c_allreduce_sum``, ``c_allreduce_coalesced``, ``c_reduce_sum``,
  ``c_broadcast``, ``c_dgc_allreduce``) names one variable per slot; it becomes ONE node
  whose slots hold that variable on every local device (``c_reduce_sum`` writes the root
  only, ``c_broadcast`` reads the root only; the root is a global device index,
  ``rank_offset`` maps it here);
- an op with the attr ``owner_device`` runs on that device only; its results exist only
  there, and a replica elsewhere that would read them is skipped (or is an error when it
  updates a persistable);
- ops with a side effect (``OpDef.side_effect``: collectives, send/recv) keep their program
  order on every device they touch, so every process issues them identically.

Example::

    g = build_graph(aggregate_gradients(program, opts), 2)
    print(g)           # one node a line, e.g. "#7 dev0 {Out=[fc_0.tmp_0]} = mul(...)"
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..framework import Operator
from ..ops.collective_more import MORE_COLLECTIVES
from ..ops.registry import EMPTY, declared_inputs, get_op_def, listed_attrs

__all__ = ["Node", "SSAGraph", "GraphOptions", "build_graph", "ALL_DEVICES", "COLLECTIVE_OPS"]

ALL_DEVICES = -1
Key = tuple[int, str]  # (device, variable name)
VarRef = tuple[int, str, int]  # (device, name, version)

# Ops of a program (one device's view) that become one node across the devices.
COLLECTIVE_OPS = frozenset({"c_allreduce_sum", "c_allreduce_coalesced", "c_reduce_sum",
                            "c_broadcast", "c_dgc_allreduce"}) | MORE_COLLECTIVES
OWNER_ATTR = "owner_device"


@dataclass(eq=False)
class Node:
    """One op of the multi-device graph: a per-device replica or a collective."""

    index: int
    type: str
    attrs: dict[str, Any]
    inputs: dict[str, list[VarRef]]
    outputs: dict[str, list[VarRef]]
    device: int  # ALL_DEVICES for collectives
    op: Operator  # the program op this node runs
    op_index: int  # position of that op in its block
    kind: str = "compute"  # compute | collective
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
        attrs = listed_attrs(self.type, self.attrs)
        tail = (" {" + ", ".join(f"{k}={v!r}" for k, v in attrs.items()) + "}") if attrs else ""
        return f"#{self.index} {where} {{{outs}}} = {self.type}({slots(self.inputs)}){tail}"

    __repr__ = to_string


@dataclass
class GraphOptions:
    """What shapes the graph besides the program."""

    sequential: bool = False  # enable_sequential_execution: program order on each device
    rank_offset: int = 0  # global index of local device 0 (multi-process)


@dataclass(repr=False)
class SSAGraph:
    """The built graph plus what the executor needs to bind and run it."""

    ndev: int
    nodes: list[Node]
    reads0: list[list[str]]  # per device: names read before any write (scope or feed)
    written: set[Key]  # (device, name) some node writes
    absent: set[Key]  # values that exist only on another device (owner-only results)

    def __str__(self) -> str:
        return "\n".join(n.to_string() for n in self.nodes)

    def __repr__(self) -> str:
        return f"SSAGraph({self.ndev} devices, {len(self.nodes)} nodes)"

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
        self.last_effect: list[int | None] = [None] * ndev

    def add(self, op: Operator, op_index: int, ins: dict[str, list[Key]],
            outs: dict[str, list[Key]], device: int, side_effect: bool) -> Node:
        kind = "collective" if device == ALL_DEVICES else "compute"
        node = Node(len(self.nodes), op.type, op.attrs, {}, {}, device, op, op_index, kind)
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
        if side_effect:
            # NOTE: side-effect ops keep their program order on each device they touch; for
            # collectives this is one global order, so ranks in other processes, which issue
            # them identically, never wait on each other in a cycle.
            devs = range(self.ndev) if device == ALL_DEVICES else (device,)
            for d in devs:
                prev = self.last_effect[d]
                if prev is not None:
                    node.deps.add(prev)
                self.last_effect[d] = idx
        self.nodes.append(node)
        return node


def _op_keys(slots: dict[str, list[str]], dev: int) -> dict[str, list[Key]]:
    return {s: [(dev, n) for n in names if n != EMPTY] for s, names in slots.items() if names}


def _one_name(op: Operator, slot: str, names: list[str]) -> str:
    if len(names) != 1:
        raise ValueError(f"{op.type} (created at {op.callsite}): slot {slot} must name one "
                         f"variable in a program (the graph adds one per device), got {names}")
    return names[0]


def _collective_keys(op: Operator, ndev: int, local_root: int | None
                     ) -> tuple[dict[str, list[Key]], dict[str, list[Key]]]:
    """The per-device variables a program-level collective reads and writes here."""
    devs = range(ndev)
    if op.type == "c_allreduce_coalesced":
        xs, outs = op.input("X"), op.output("Out")
        return ({"X": [(d, n) for d in devs for n in xs]},
                {"Out": [(d, n) for d in devs for n in outs]})
    if op.type == "c_dgc_allreduce":  # every slot: its one variable on every device
        return ({s: [(d, _one_name(op, s, op.input(s))) for d in devs] for s in op.inputs},
                {"Out": [(d, _one_name(op, "Out", op.output("Out"))) for d in devs]})
    x = _one_name(op, "X", op.input("X"))
    out = _one_name(op, "Out", op.output("Out"))
    if op.type == "c_reduce_sum":
        return ({"X": [(d, x) for d in devs]},
                {"Out": [] if local_root is None else [(local_root, out)]})
    if op.type == "c_broadcast":
        return ({"X": [] if local_root is None else [(local_root, x)]},
                {"Out": [(d, out) for d in devs if d != local_root]})
    return {"X": [(d, x) for d in devs]}, {"Out": [(d, out) for d in devs]}


def _local(index: int, opts: GraphOptions, ndev: int) -> int | None:
    """A global device index as a local one (None: it lives in another process)."""
    local = index - opts.rank_offset
    return local if 0 <= local < ndev else None


def build_graph(program: Any, ndev: int, options: GraphOptions | None = None,
                block_idx: int = 0) -> SSAGraph:
    """Replicate the ops of a block of ``program`` on ``ndev`` devices, with dependencies."""
    opts = options or GraphOptions()
    if ndev < 1:
        raise ValueError(f"build_graph: ndev must be >= 1, got {ndev}")
    block = program.block(block_idx)
    b = _Builder(ndev)
    all_devs = list(range(ndev))
    for i, op in enumerate(block.ops):
        side_effect = get_op_def(op.type).side_effect
        if op.type in COLLECTIVE_OPS:
            root = _local(int(op.attrs.get("root", 0)), opts, ndev)
            ins, outs = _collective_keys(op, ndev, root)
            b.add(op, i, ins, outs, ALL_DEVICES, side_effect)
            if op.type == "c_reduce_sum":  # the sum exists on the root only
                out = op.output("Out")[0]
                b.absent.update((d, out) for d in all_devs if d != root)
            continue
        owner = op.attrs.get(OWNER_ATTR, -1)
        owner_only = owner is not None and owner >= 0
        if owner_only:
            local = _local(int(owner), opts, ndev)
            devices = [] if local is None else [local]
        else:
            devices = all_devs
        for d in devices:
            ins = _op_keys(declared_inputs(op), d)
            outs = _op_keys(op.outputs, d)
            missing = [k for keys in ins.values() for k in keys if k in b.absent]
            if missing:
                _skip_or_fail(op, i, d, missing, owner_only or side_effect, block)
                b.absent.update(k for keys in outs.values() for k in keys)
                continue
            b.add(op, i, ins, outs, d, side_effect)
        if owner_only:  # an owner-only op: its results exist on the owner only
            b.absent.update((d, n) for d in all_devs if d not in devices
                            for n in op.output_arg_names if n != EMPTY)
    if opts.sequential:
        _chain_per_device(b.nodes, ndev)
    return SSAGraph(ndev, b.nodes, b.reads0, set(b.writer), set(b.absent))


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


def _chain_per_device(nodes: list[Node], ndev: int) -> None:
    """enable_sequential_execution: each device runs its ops in program order."""
    prev: list[int | None] = [None] * ndev
    for node in nodes:
        devs = range(ndev) if node.device == ALL_DEVICES else (node.device,)
        for d in devs:
            if prev[d] is not None and prev[d] != node.index:
                node.deps.add(prev[d])
            prev[d] = node.index
