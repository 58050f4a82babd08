"""Copies where values cross devices: ``insert_place_transfers(program) -> program``.

Ops record their place in ``op_device`` / ``op_node`` attrs (``parafluid.placement``). This
pass walks the global block in program order and keeps, for every variable, the devices that
hold its current value. Where an op reads a variable that its own device does not hold, a
``memcpy`` op is inserted right before it, writing ``<name>@<device>`` on the reader's
device; the reader (and every later reader on that device) reads the copy, until the
variable is written again. So each value crosses to a device at most once per step,
however many readers it has there.

Where a value is at the start of a step:

- a persistable that the block writes (a parameter updated by an optimizer op): on the
  device of its last writer (the scope holds what that op wrote at the previous step), so
  an update on one device and a read on another stay coherent: the reader gets a fresh copy
  every step;
- any other value read before it is written (feeds, persistables the block only reads):
  on the executor's device (``default_device``), where the executor puts feeds.

Unplaced ops run on ``default_device``; ``delete_var`` (``release_memory``) frees a value
where it is and never causes a copy. Node parts are checked against the node this
process runs (``node``; default: the worker or pserver a ``DistributeTranspiler`` split by
node made the program for, else trainer 0): a process runs the ops of its own node and
those with no node id (``/node:worker``); any other node is a ValueError naming the op and
its place, as is a malformed place, a device id this machine does not have, a GPU where
torch sees none, and a device range (the split by node turns a worker's range into a
data-parallel program for the ParallelExecutor).

The caller's program is never modified: a program that needs no copy is returned as is,
otherwise a clone with the copies.

Example::

    placed = insert_place_transfers(main)
    print(placed)   # ... {Out=[fc_1.tmp_2@cpu:1]} = memcpy(X=[fc_1.tmp_2]) {op_device='cpu:1', ...}
"""

from __future__ import annotations

from typing import Any

from ..ops.registry import EMPTY, get_op_def
from ..placement import (
    DEVICE_ATTR,
    NODE_ATTR,
    device_name,
    is_placed,
    local_device_count,
    parse_device,
    parse_node,
    place_of,
)

__all__ = ["insert_place_transfers", "op_devices", "persistable_homes",
           "process_node"]


def _where(op: Any, index: int) -> str:
    return f"op #{index} {op.type} (created at {op.callsite}), placed on {place_of(op)!r}"


def _check_node(op: Any, index: int, node: tuple[str, int]) -> None:
    text = op.attrs.get(NODE_ATTR) or ""
    if not text:
        return
    name, nid = parse_node(text, f"{_where(op, index)}: op_node")
    if name != node[0] or (nid is not None and nid != node[1]):
        here = f"/node:{node[0]}:{node[1]}"
        raise ValueError(
            f"{_where(op, index)}: this process runs {here} (and /node:{node[0]}) only; ops "
            f"placed on another node need one process per node (the DistributeTranspiler "
            f"splits a placed program by node)")


def _op_device(op: Any, index: int, default: str) -> str:
    spec = op.attrs.get(DEVICE_ATTR) or ""
    if not spec:
        return default
    dev = parse_device(spec, f"{_where(op, index)}: op_device")
    if dev.last_id is not None and dev.last_id != dev.first_id:
        raise ValueError(
            f"{_where(op, index)}: a device range means data parallelism over those devices, "
            f"which the single-device executors do not run; place the op on one device "
            f"('{dev.device_type}:{dev.first_id}')")
    have = local_device_count(str(dev.device_type))
    dev_id = dev.first_id or 0
    if dev.device_type == "gpu" and have == 0:
        raise ValueError(f"{_where(op, index)}: torch sees no GPU on this machine; place the "
                         f"op on 'cpu' or run on a machine with a GPU")
    if dev_id >= have:
        raise ValueError(f"{_where(op, index)}: device id {dev_id} does not exist; this "
                         f"process has {have} {dev.device_type} device(s), ids 0-{have - 1}")
    return f"{dev.device_type}:{dev_id}"


def process_node(program: Any, node: tuple[str, int] | None = None) -> tuple[str, int]:
    """The node a process running ``program`` is: ``node`` when given, else the one a split
    by node recorded on the program (``program.meta.placement_node``), else trainer 0."""
    if node is not None:
        return node
    return program.meta.placement_node or ("worker", 0)


def op_devices(program: Any, default_device: str = "cpu:0",
               node: tuple[str, int] | None = None) -> list[str]:
    """The canonical device of each op of the global block (checked: see the module doc)."""
    default = device_name(default_device)
    node = process_node(program, node)
    out = []
    for i, op in enumerate(program.global_block().ops):
        _check_node(op, i, node)
        out.append(_op_device(op, i, default))
    return out


def insert_place_transfers(program: Any, default_device: str = "cpu:0",
                           node: tuple[str, int] | None = None) -> Any:
    """``program`` with a ``memcpy`` wherever a value is read on another device.

    Args:
        program: a Program whose ops may carry places (``fluid.place_guard``).
        default_device: where unplaced ops run and feeds arrive (the executor's device).
        node: the ``(NODE_NAME, NODE_ID)`` this process runs (default: the one the
            DistributeTranspiler's split by node recorded, else ``("worker", 0)``).

    Returns ``program`` itself when it is unplaced or nothing crosses devices, else a clone
    with the copies.

    Example::

        with fluid.place_guard("/node:worker/cpu:1"):
            y = fluid.layers.relu(x)            # x is fed on cpu:0
        print(insert_place_transfers(main))     # memcpy(X=[x]) -> x@cpu:1, relu(X=[x@cpu:1])
    """
    if not is_placed(program):
        return program
    default = device_name(default_device)
    devices = op_devices(program, default, node)
    block = program.global_block()
    if any(op.sub_blocks for op in block.ops) and len(set(devices)) > 1:
        raise ValueError("insert_place_transfers: an op of this program holds a sub-block "
                         "(control flow), whose reads the pass cannot see; place such "
                         "programs on one device")
    home = _homes(block, devices)  # where a persistable is at the start of a step
    crossing = _crossings(block.ops, devices, home, default)
    if not crossing:
        return program
    out = program.clone()
    new_block = out.global_block()
    ops = list(new_block.ops)
    held: dict[str, dict[str, str]] = {}  # name -> {device: name of the copy there}
    result = []
    for op, dev in zip(ops, devices):
        if _releases(op):  # delete_var frees the value where it is: nothing to copy
            result.append(op)
            continue
        for names in op.inputs.values():
            for k, name in enumerate(names):
                if name == EMPTY:
                    continue
                where = held.setdefault(name, {home.get(name, default): name})
                if dev not in where:
                    src = next(d for d, n in where.items() if n == name)
                    where[dev] = _copy(new_block, op, name, src, dev, result)
                names[k] = where[dev]
        for name in op.output_arg_names:
            if name != EMPTY:
                held[name] = {dev: name}
        result.append(op)
    new_block.ops = result
    out._bump()
    return out


def _homes(block: Any, devices: list[str]) -> dict[str, str]:
    persistable = {n for n, v in block.vars.items() if v.persistable}
    home: dict[str, str] = {}
    for op, dev in zip(block.ops, devices):
        for name in op.output_arg_names:
            if name in persistable:
                home[name] = dev  # the last writer wins
    return home


def persistable_homes(program: Any, default_device: str = "cpu:0") -> dict[str, str]:
    """Where the pass assumes each persistable the global block reads is at the start of a
    step: its last writer's device, else ``default_device``. The Executor moves a scope
    value that is elsewhere (a parameter its initializer made on a GPU, updated on the CPU)
    there before the step, once."""
    default = device_name(default_device)
    block = program.global_block()
    devices = op_devices(program, default)
    home = _homes(block, devices)
    reads = {n for op in block.ops for n in op.input_arg_names}
    return {n: home.get(n, default) for n in sorted(reads)
            if (v := block._find_var_recursive(n)) is not None and v.persistable}


def _crossings(ops: list[Any], devices: list[str], home: dict[str, str], default: str
               ) -> bool:
    at: dict[str, set[str]] = {}
    for op, dev in zip(ops, devices):
        if _releases(op):
            continue
        for name in op.input_arg_names:
            if name != EMPTY and dev not in at.setdefault(name, {home.get(name, default)}):
                return True
        for name in op.output_arg_names:
            at[name] = {dev}
    return False


def _copy(block: Any, reader: Any, name: str, src_dev: str, dev: str, result: list[Any]
          ) -> str:
    """Append to ``result`` a memcpy of ``name`` from ``src_dev`` to ``dev``; return the
    copy's name."""
    copy_name = f"{name}@{dev}"
    var = block._find_var_recursive(name)
    if copy_name not in block.vars:
        meta = {} if var is None else {"shape": var.shape, "dtype": var.dtype,
                                       "type": var.type, "lod_level": var.lod_level}
        block.create_var(name=copy_name, stop_gradient=True, **meta)
    attrs = {DEVICE_ATTR: dev, "src_device": src_dev,
             "op_role": reader.attrs.get("op_role", 0) & ~0x0100}  # not the loss op
    if reader.attrs.get(NODE_ATTR):
        attrs[NODE_ATTR] = reader.attrs[NODE_ATTR]
    result.append(block._make_op("memcpy", {"X": [name]}, {"Out": [copy_name]}, attrs))
    return copy_name


def _releases(op: Any) -> bool:
    return get_op_def(op.type).releases_inputs
