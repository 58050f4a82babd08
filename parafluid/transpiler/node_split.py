"""Splitting a placed program by node: one program per worker process (model parallelism).

``DistributeTranspiler.transpile(trainer_id, program, trainers="ip:port,ip:port")`` on a
program with ops placed on ``/node:worker:<i>`` (``fluid.place_guard``) runs
:class:`NodeSplit`, which rewrites the (main, startup) pair, in place as Fluid's transpiler
does, into worker ``trainer_id``'s programs:

- **which ops**: those placed on ``/node:worker:<trainer_id>``; ops with no node id
  (``/node:worker/...``, or no place) run on every worker;
- **what crosses**: the pass walks the ops in program order and tracks, for every variable,
  the workers that hold its current value. At the start of a step, fed values and the
  persistables the program only reads are on every worker (each process is fed, each
  startup initializes what its ops read); a persistable the program writes is on the
  worker(s) of its last writer (what their scopes hold since the previous step). Where an op
  reads a value its worker does not hold, the producer's program gets a ``node_send`` right
  after the op that made the value and the reader's program a ``node_recv`` right before
  the op: activations forward, activation gradients backward. A value crosses to a worker
  once per step, however many readers it has there;
- **startup**: each worker initializes the persistables its own ops read or write. The
  random initializers of the other workers' parameters that draw from torch's default
  generator (``seed`` 0) before this worker's own still run, into a discarded
  ``<name>@UNUSED`` temporary, so that this worker's initializers draw what they draw in the
  unplaced program (seeded initializers draw from their own generator and are left out).

The transport is ``parafluid.distributed.node_mailbox`` (ZeroMQ, the parameter servers' wire
format, ``FLAGS_rpc_deadline`` on every wait).

Example (worker 1 of a 2-stage MLP)::

    t = fluid.DistributeTranspiler()
    t.transpile(1, trainers="127.0.0.1:7000,127.0.0.1:7001")
    print(t.get_trainer_program())   # {Out=[fc_0.tmp_2]} = node_recv() {peer=0, ...} ...
"""

from __future__ import annotations

from typing import Any

from ..distributed.endpoints import parse_endpoints
from ..framework import OpRole, Program
from ..ops.registry import EMPTY, get_op_def
from ..placement import (
    DEVICE_ATTR,
    NODE_ATTR,
    local_device_count,
    parse_device,
    parse_node,
    place_of,
)

__all__ = ["NodeSplit", "node_ids", "has_numbered_workers", "op_workers", "split_startup",
           "Transfer"]

Transfer = tuple[str, int, int]  # (variable, from worker, to worker)


def node_ids(program: Program) -> set[str]:
    """The ``op_node`` values of ``program``'s ops (``"worker:1"``, ``"ps"``, ...)."""
    return {str(op.attrs.get(NODE_ATTR)) for block in program.blocks for op in block.ops
            if op.attrs.get(NODE_ATTR)}


def has_numbered_workers(program: Program) -> bool:
    """Whether an op of ``program`` is placed on a numbered worker (``/node:worker:<i>``)."""
    return any(n.startswith("worker:") for n in node_ids(program))


def _where(op: Any, index: int, what: str = "op") -> str:
    return f"{what} #{index} {op.type} (created at {op.callsite}), placed on {place_of(op)!r}"


def op_workers(op: Any, index: int, workers: int, what: str = "op") -> frozenset[int]:
    """The workers that run ``op``: its node id, or all of them when it has none.

    ValueError naming the op and its place for a worker id ``>= workers`` and for an op
    placed on ``/node:ps`` (which the parameter-server split handles, not this one).
    """
    node = str(op.attrs.get(NODE_ATTR) or "")
    name, wid = parse_node(node, f"{_where(op, index, what)}: op_node") if node else (None, None)
    if name == "ps":
        raise ValueError(f"{_where(op, index, what)}: ops placed on /node:ps together with "
                         "ops on numbered workers (/node:worker:<i>) are not supported; place "
                         "the parameter updates on the workers, or drop the worker ids (data "
                         "parallelism over trainers with the updates on the pservers)")
    if wid is None:
        return frozenset(range(workers))
    if wid >= workers:
        raise ValueError(f"{_where(op, index, what)}: worker id {wid} does not exist; "
                         f"transpile(trainers=...) gives {workers} worker(s), ids "
                         f"0-{workers - 1}")
    return frozenset((wid,))


class NodeSplit:
    """The split of one (main, startup) pair for worker ``trainer_id`` (see the module doc).

    Args:
        program, startup: the placed programs; changed in place into this worker's.
        trainer_id: this worker's id.
        endpoints: every worker's ``"ip:port"`` (its mailbox), in worker order.
    """

    def __init__(self, program: Program, startup: Program, trainer_id: int,
                 endpoints: Any) -> None:
        self.endpoints = parse_endpoints(endpoints, "trainers")
        self.workers = len(self.endpoints)
        if isinstance(trainer_id, bool) or not isinstance(trainer_id, int) or \
                not 0 <= trainer_id < self.workers:
            raise ValueError(f"transpile: trainer_id must be in 0..{self.workers - 1} for the "
                             f"{self.workers} worker endpoints {self.endpoints}, got "
                             f"{trainer_id!r}")
        self.trainer_id = trainer_id
        self.origin = program.clone()
        self.program, self.startup = program, startup
        block = program.global_block()
        self._check_no_sub_blocks(block)
        self.op_workers = [op_workers(op, i, self.workers) for i, op in enumerate(block.ops)]
        for i, op in enumerate(startup.global_block().ops):
            op_workers(op, i, self.workers, "startup op")  # the same checks, at transpile
        self.ranges = self._device_ranges(block)
        self.transfers = self._plan_transfers(block)

    @property
    def endpoint(self) -> str:
        return self.endpoints[self.trainer_id]

    @property
    def replicas(self) -> int:
        """Data-parallel replicas of each worker: the size of its device range (1: none)."""
        sizes = {len(ids) for _, ids in self.ranges.values()}
        return sizes.pop() if sizes else 1

    def _device_ranges(self, block: Any) -> dict[int, tuple[str, tuple[int, ...]]]:
        """``{worker: (device type, ids)}`` of the workers whose ops are placed on a device
        range (data parallelism inside the stage: hybrid parallelism). Checked: a range
        covers all of its worker's ops, and every worker has as many replicas (replica i of
        one stage exchanges values with replica i of the next)."""
        found: dict[int, dict[str, tuple[int, Any]]] = {}
        for i, (op, ws) in enumerate(zip(block.ops, self.op_workers)):
            spec = str(op.attrs.get(DEVICE_ATTR) or "")
            for w in ws:
                found.setdefault(w, {}).setdefault(spec, (i, op))
        ranges: dict[int, tuple[str, tuple[int, ...]]] = {}
        for w, specs in sorted(found.items()):
            ranged = {sp: io for sp, io in specs.items()
                      if sp and len(parse_device(sp, DEVICE_ATTR).device_ids) > 1}
            if not ranged:
                continue
            others = {sp: io for sp, io in specs.items() if sp and sp not in ranged}
            if len(ranged) > 1 or others:
                (ia, oa), (ib, ob) = sorted({**ranged, **others}.values(),
                                            key=lambda io: io[0])[:2]
                raise ValueError(
                    f"transpile: worker {w} runs {_where(oa, ia)} and {_where(ob, ib)}; a "
                    "device range (data parallelism) must hold all the ops of its worker, "
                    "and a worker's ops on one range are not combined with other devices or "
                    "ranges in that process")
            spec, (i, op) = next(iter(ranged.items()))
            dev = parse_device(spec, DEVICE_ATTR)
            ranges[w] = (str(dev.device_type), dev.device_ids)
            if w == self.trainer_id:
                have = local_device_count(str(dev.device_type))
                if max(dev.device_ids) >= have:
                    raise ValueError(f"transpile: {_where(op, i)}: device id "
                                     f"{max(dev.device_ids)} does not exist; this process has "
                                     f"{have} {dev.device_type} device(s)")
        sizes = {w: len(ids) for w, (_, ids) in ranges.items()}
        if ranges and (len(set(sizes.values())) > 1 or len(sizes) < self.workers):
            counts = ", ".join(f"worker {w}: {sizes.get(w, 1)}" for w in range(self.workers))
            raise ValueError(f"transpile: every worker of a hybrid-parallel program needs as "
                             f"many data-parallel devices (replica i of a stage exchanges "
                             f"values with replica i of the others); got {counts}")
        return ranges

    @staticmethod
    def _check_no_sub_blocks(block: Any) -> None:
        if any(op.sub_blocks for op in block.ops):
            raise ValueError("transpile: an op of this placed program holds a sub-block "
                             "(control flow), whose reads the split by node cannot see; place "
                             "such programs on one worker")

    # ------------------------------------------------------------------ planning

    def _plan_transfers(self, block: Any) -> dict[tuple[str, int], list[Transfer]]:
        """``{("after", i) | ("before", i): [(var, src, dst), ...]}``; ``("after", -1)`` is
        the start of the step."""
        ops = block.ops
        everyone = frozenset(range(self.workers))
        persistable = {n for n, v in block.vars.items() if v.persistable}
        made: dict[str, frozenset[int]] = {}  # the workers whose value is the truth
        writer: dict[str, int] = {}           # the op that made it (-1: before the step)
        for op, ws in zip(ops, self.op_workers):
            for name in op.output_arg_names:
                if name in persistable:
                    made[name] = ws  # the last writer's workers hold it at the next step
        held = dict(made)
        out: dict[tuple[str, int], list[Transfer]] = {}
        for i, (op, ws) in enumerate(zip(ops, self.op_workers)):
            if not get_op_def(op.type).releases_inputs:  # delete_var frees where it is
                for name in dict.fromkeys(op.input_arg_names):
                    if name == EMPTY:
                        continue
                    have = held.get(name, everyone)
                    for dst in sorted(ws - have):
                        src = min(made.get(name, have))
                        out.setdefault(("after", writer.get(name, -1)), []).append(
                            (name, src, dst))
                        out.setdefault(("before", i), []).append((name, src, dst))
                    held[name] = have | ws
            for name in op.output_arg_names:
                if name != EMPTY:
                    held[name] = made[name] = ws
                    writer[name] = i
        return out

    def crossings(self) -> list[Transfer]:
        """Every (variable, from, to) crossing of a step, in program order of the receives."""
        return [t for (where, _), ts in sorted(self.transfers.items(), key=lambda kv: kv[0][1])
                if where == "before" for t in ts]

    # ------------------------------------------------------------------ rewriting

    def build(self) -> None:
        """Rewrite ``self.program`` and ``self.startup`` into this worker's programs."""
        me = self.trainer_id
        block = self.program.global_block()
        ops = list(block.ops)
        result = [self._comm_op(block, "node_send", t, ops[0] if ops else None)
                  for t in self.transfers.get(("after", -1), []) if t[1] == me]
        for i, (op, ws) in enumerate(zip(ops, self.op_workers)):
            result += [self._comm_op(block, "node_recv", t, op)
                       for t in self.transfers.get(("before", i), []) if t[2] == me]
            if me in ws:
                result.append(op)
            result += [self._comm_op(block, "node_send", t, op)
                       for t in self.transfers.get(("after", i), []) if t[1] == me]
        block.ops = result
        if me in self.ranges:
            # NOTE: a plain data-parallel program, run over the range's places by a
            # ParallelExecutor: one replica per device, each with its share of the batch
            for op in result:
                op.attrs.pop(NODE_ATTR, None)
                op.attrs.pop(DEVICE_ATTR, None)
            kind, ids = self.ranges[me]
            self.program.meta.data_parallel_devices = [f"{kind}:{i}" for i in ids]
        self.program._bump()
        self.program.meta.placement_node = ("worker", me)
        self.program.meta.trainer_id = me
        used = {n for op in result for n in op.input_arg_names + op.output_arg_names}
        split_startup(self.startup, used, ("worker", me))

    def _comm_op(self, block: Any, kind: str, t: Transfer, near: Any) -> Any:
        name, src, dst = t
        me, peer = (src, dst) if kind == "node_send" else (dst, src)
        # NOTE: the role of the op it follows (send) or precedes (recv): a gradient's
        # transfer is part of the backward pass (micro-batching and clone(for_test) see it so)
        role = near.attrs.get("op_role", 0) & ~OpRole.Loss if near is not None else 0
        attrs = {"worker_id": me, "endpoint": self.endpoints[me], "peer": peer,
                 "peer_endpoint": self.endpoints[peer], "replicas": self.replicas,
                 "op_role": role, NODE_ATTR: f"worker:{me}"}
        if near is not None and near.attrs.get(DEVICE_ATTR):
            attrs[DEVICE_ATTR] = near.attrs[DEVICE_ATTR]
        if kind == "node_send":
            return block._make_op(kind, {"X": [name]}, {}, attrs, infer=False)
        return block._make_op(kind, {}, {"Out": [name]}, attrs, infer=False)



def split_startup(startup: Program, used: set[str], node: tuple[str, int]) -> None:
    """Keep (in place) the startup ops writing a variable in ``used`` (and those writing
    nothing); a random initializer of another node's variable that draws from torch's default
    generator (``seed`` 0) before one of this node's still draws, into a ``<name>@UNUSED``
    temporary, so that the draws of the kept initializers are those of the whole program.
    The kept ops lose their node attr (they all run on ``node`` now)."""
    block = startup.global_block()
    kept, draws_only = [], []
    for op in block.ops:
        outs = [n for n in op.output_arg_names if n != EMPTY]
        if any(n in used for n in outs) or not outs:
            kept.append(op)
        elif op.attrs.get("seed", None) == 0:
            draws_only.append(op)
            kept.append(op)
    own_draws = [i for i, op in enumerate(kept)
                 if op.attrs.get("seed", None) == 0 and op not in draws_only]
    # NOTE: torch's default generator: the other nodes' draws before this node's last one
    # must happen, in program order, for its own initializers to draw what the unplaced
    # program does; those after it change nothing here
    kept = [op for i, op in enumerate(kept)
            if op not in draws_only or (own_draws and i < own_draws[-1])]
    for op in kept:
        if op in draws_only:
            for slot, names in op.outputs.items():
                op.outputs[slot] = [_unused(block, n) for n in names]
    for op in kept:
        op.attrs.pop(NODE_ATTR, None)
        spec = op.attrs.get(DEVICE_ATTR)
        if spec and len(parse_device(spec, DEVICE_ATTR).device_ids) > 1:
            op.attrs.pop(DEVICE_ATTR)  # initialized once, then copied to every replica
    block.ops = kept
    startup._bump()
    startup.meta.placement_node = node


def _unused(block: Any, name: str) -> str:
    tmp = f"{name}@UNUSED"
    if not block.has_var(tmp):
        var = block._find_var_recursive(name)
        meta = {} if var is None else {"shape": var.shape, "dtype": var.dtype}
        block.create_var(name=tmp, persistable=False, **meta)
    return tmp
