"""Operator placement: ``place_guard`` and ``device_guard`` record where each op runs.

A place follows the grammar of Fluid's operator placement design::

    place  ::= "/node:" NODE_NAME [":" NODE_ID] "/" DEVICE [":" DEVICE_ID]
    NODE_NAME ::= "worker" | "ps"          NODE_ID ::= a number (which worker)
    DEVICE ::= "cpu" | "gpu"               DEVICE_ID ::= a number, or a range "a-b"

Every op appended inside a guard (to any program) records its place in two plain string
attrs, printed by ``str(program)``, kept by serialization and ``clone``:

- ``op_device``: the device part (``"cpu"``, ``"cpu:1"``, ``"gpu:0"``, ``"gpu:0-7"``); the
  runtime binds the op's kernel there (``parafluid.engine.runtime.op_device``);
- ``op_node``: the node part (``"worker"``, ``"worker:1"``, ``"ps"``), set by
  ``place_guard`` only.

Guards nest and the innermost wins; ``device_guard`` inside a ``place_guard`` replaces only
the device part. Ops appended outside any guard get neither attr, so unplaced programs are
exactly what they were before placement existed. Where the values cross devices is decided
later by ``parafluid.passes.place_transfers.insert_place_transfers``, which the executors
apply.

Example::

    with fluid.place_guard("/node:worker/cpu:0"):
        h = fluid.layers.fc(input=x, size=64, act="relu")
    with fluid.place_guard("/node:worker/cpu:1"):
        y = fluid.layers.fc(input=h, size=1)
    print(fluid.default_main_program())   # ... {op_device='cpu:1', op_node='worker'}
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["Place", "parse_place", "parse_device", "parse_node", "device_name", "torch_device",
           "place_guard", "device_guard", "place_of", "place_attrs", "follow_place", "is_placed",
           "GRAMMAR", "DEVICE_GRAMMAR", "DEVICE_ATTR", "NODE_ATTR", "local_device_count"]

DEVICE_ATTR = "op_device"
NODE_ATTR = "op_node"
GRAMMAR = ('place ::= "/node:NODE_NAME[:NODE_ID]/DEVICE[:DEVICE_ID]" with NODE_NAME worker '
           'or ps, NODE_ID a number, DEVICE cpu or gpu, DEVICE_ID a number or a range a-b '
           '(e.g. "/node:worker/gpu:0", "/node:worker:1/cpu", "/node:ps/cpu", '
           '"/node:worker/gpu:0-7")')

DEVICE_GRAMMAR = ("'cpu', 'cpu:N', 'gpu', 'gpu:N' or a range 'gpu:a-b' (torch's 'cuda' spelling "
                  "is read as 'gpu')")

_PLACE_RE = re.compile(r"/node:(worker|ps)(?::(\d+))?/(cpu|gpu)(?::(\d+)(?:-(\d+))?)?")
_DEVICE_RE = re.compile(r"(cpu|gpu|cuda)(?::(\d+)(?:-(\d+))?)?")
_NODE_RE = re.compile(r"(worker|ps)(?::(\d+))?")


@dataclass(frozen=True)
class Place:
    """A parsed place; ``None`` fields were not given (``device_guard`` sets no node).

    Example::

        p = parse_place("/node:worker:1/gpu:0-3")
        p.node, p.device, p.device_ids       # 'worker:1', 'gpu:0-3', (0, 1, 2, 3)
    """

    node_name: str | None
    node_id: int | None
    device_type: str | None
    first_id: int | None = None
    last_id: int | None = None

    @property
    def node(self) -> str | None:
        """The ``op_node`` attr value (``"worker"``, ``"worker:1"``, ``"ps"``)."""
        if self.node_name is None:
            return None
        return self.node_name if self.node_id is None else f"{self.node_name}:{self.node_id}"

    @property
    def device(self) -> str | None:
        """The ``op_device`` attr value (``"cpu"``, ``"gpu:2"``, ``"cpu:0-1"``)."""
        if self.device_type is None:
            return None
        if self.first_id is None:
            return self.device_type
        if self.last_id is None or self.last_id == self.first_id:
            return f"{self.device_type}:{self.first_id}"
        return f"{self.device_type}:{self.first_id}-{self.last_id}"

    @property
    def device_ids(self) -> tuple[int, ...]:
        """The device ids the place covers (``(0,)`` when no id was given)."""
        first = self.first_id or 0
        last = self.last_id if self.last_id is not None else first
        return tuple(range(first, last + 1))

    def attrs(self) -> dict[str, str]:
        """The op attrs recording this place."""
        out = {}
        if self.device is not None:
            out[DEVICE_ATTR] = self.device
        if self.node is not None:
            out[NODE_ATTR] = self.node
        return out

    def __str__(self) -> str:
        if self.node is None:
            return self.device or ""
        return f"/node:{self.node}/{self.device}"


def _range(text: str, first: str | None, last: str | None) -> tuple[int | None, int | None]:
    a = None if first is None else int(first)
    b = None if last is None else int(last)
    if a is not None and b is not None and b < a:
        raise ValueError(f"place {text!r}: the device range {a}-{b} is empty (the first id "
                         f"must not exceed the last); {GRAMMAR}")
    return a, b


def parse_place(place: str | Place) -> Place:
    """Parse a place string (``"/node:worker/cpu:1"``); ValueError quoting it and the grammar.

    Example::

        parse_place("/node:ps/cpu").node      # 'ps'
    """
    if isinstance(place, Place):
        return place
    if not isinstance(place, str):
        raise TypeError(f"place_guard: place must be a str like '/node:worker/cpu:0', got "
                        f"{type(place).__name__}: {place!r}")
    m = _PLACE_RE.fullmatch(place.strip())
    if m is None:
        raise ValueError(f"malformed place {place!r}; expected {GRAMMAR}")
    name, node_id, dev, first, last = m.groups()
    a, b = _range(place, first, last)
    return Place(name, None if node_id is None else int(node_id), dev, a, b)


def parse_device(device: Any, what: str = "device") -> Place:
    """Parse a device (``"cpu"``, ``"gpu:1"``, ``"cpu:0-1"``, a ``torch.device``) as a
    node-less Place: the one reading of an ``op_device`` attr, a ``device_guard`` argument
    or an executor's device. ValueError naming ``what``, the expected forms and the value.

    Example::

        parse_device("gpu:0-3").device_ids           # (0, 1, 2, 3)
        parse_device(torch.device("cuda", 1)).device  # 'gpu:1'
    """
    if isinstance(device, Place):
        return device
    if isinstance(device, torch.device):
        device = str(device)
    if not isinstance(device, str):
        raise TypeError(f"{what} must be a str like 'gpu:0', got "
                        f"{type(device).__name__}: {device!r}")
    m = _DEVICE_RE.fullmatch(device.strip())
    if m is None:
        raise ValueError(f"malformed device {device!r}: {what} must be {DEVICE_GRAMMAR}, "
                         f"got {device!r}")
    dev, first, last = m.groups()
    a, b = _range(device, first, last)
    return Place(None, None, "gpu" if dev == "cuda" else dev, a, b)


def parse_node(node: str, what: str = "op_node") -> tuple[str, int | None]:
    """Parse a node part (``"worker"``, ``"worker:1"``, ``"ps"``) -> ``(name, id or None)``.

    Example::

        parse_node("worker:1")   # ('worker', 1)
    """
    m = _NODE_RE.fullmatch(str(node).strip())
    if m is None:
        raise ValueError(f"malformed node {node!r}: {what} must be 'worker', 'worker:N', 'ps' "
                         f"or 'ps:N' (the NODE_NAME[:NODE_ID] part of {GRAMMAR})")
    name, nid = m.groups()
    return name, None if nid is None else int(nid)


def _one_device(device: Any, what: str) -> Place:
    dev = parse_device(device, what)
    if len(dev.device_ids) > 1:
        raise ValueError(
            f"{what} {dev.device!r} is a device range, which means data parallelism over "
            f"those devices; one op runs on one device ('{dev.device_type}:{dev.first_id}')")
    return dev


def device_name(device: Any, what: str = "device") -> str:
    """One device in the canonical form ``"cpu:N"`` / ``"gpu:N"`` (no id means id 0).

    Example::

        device_name("gpu"), device_name(torch.device("cpu"))   # 'gpu:0', 'cpu:0'
    """
    dev = _one_device(device, what)
    return f"{dev.device_type}:{dev.first_id or 0}"


def op_device_name(op: Any, what: str) -> str | None:
    """The one device of ``op``'s ``op_device`` attr in the canonical form (``"gpu:1"``), or
    None when the op is not placed on a device: the runtime's reading of that attr when it
    binds an op (the transfer pass parses it with ``parse_device`` too, and words its own
    refusals). A range is refused (one op runs on one device); errors name ``what``.

    Example::

        op_device_name(op, f"op {op.type}: op_device")   # 'cpu:1' for op_device="cpu:1"
    """
    spec = op.attrs.get(DEVICE_ATTR) or ""
    return device_name(spec, what) if spec else None


def torch_device(device: Any, what: str = "device", storage: bool = False) -> torch.device:
    """The ``torch.device`` of one device: ``"gpu:N"`` -> ``cuda:N``; ``"cpu:N"`` -> torch's
    CPU with index N, so that an op bound there knows which CPU place it is, or with
    ``storage=True`` torch's one CPU (where a tensor of any CPU place lives). A GPU that
    torch does not see is a ValueError naming ``what``.

    Example::

        torch_device("cpu:1"), torch_device("cpu:1", storage=True)   # cpu:1, cpu
    """
    dev = _one_device(device, what)
    if dev.device_type == "cpu":
        if storage or dev.first_id is None:
            return torch.device("cpu")
        return torch.device("cpu", dev.first_id)
    if not torch.cuda.is_available():
        raise ValueError(f"{what} is {dev.device!r} but torch sees no CUDA device here; use "
                         "'cpu' or run on a GPU machine")
    return torch.device("cuda", dev.first_id or 0)


# The guards in force, outermost first: (place, replaces_node). A module-level stack, as
# Fluid's own device_guard: a guard applies to every program ops are appended to.
_STACK: list[tuple[Place, bool]] = []


def current_place() -> Place | None:
    """The place ops appended now get, folding the guards (the innermost wins)."""
    if not _STACK:
        return None
    node_name = node_id = dev = first = last = None
    for place, full in _STACK:
        if full:
            node_name, node_id = place.node_name, place.node_id
        dev, first, last = place.device_type, place.first_id, place.last_id
    return Place(node_name, node_id, dev, first, last)


@contextlib.contextmanager
def _guard(place: Place, full: bool) -> Iterator[Place]:
    _STACK.append((place, full))
    try:
        yield place
    finally:
        _STACK.pop()


def place_guard(place: str | Place) -> contextlib.AbstractContextManager[Place]:
    """Ops appended inside run at ``place`` (Fluid's placement grammar, see ``GRAMMAR``).

    Args:
        place: ``"/node:NODE_NAME[:NODE_ID]/DEVICE[:DEVICE_ID]"``. A malformed place is a
            ValueError at this call, quoting it and the grammar.

    Example::

        with fluid.place_guard("/node:worker/cpu:1"):
            y = fluid.layers.fc(input=h, size=10)   # mul, elementwise_add on cpu:1
    """
    return _guard(parse_place(place), True)


def device_guard(device: str | None = None) -> contextlib.AbstractContextManager[Any]:
    """Ops appended inside run on ``device`` (``"cpu"``, ``"gpu"``, ``"gpu:N"``, ``"cpu:N"``).

    Later Fluid's spelling of the device part of a place; inside a ``place_guard`` it keeps
    the node and replaces the device. ``None`` changes nothing. A malformed device is a
    ValueError at this call.

    Example::

        with fluid.device_guard("gpu:0"):
            h = fluid.layers.fc(input=x, size=64)
    """
    if device is None:
        return contextlib.nullcontext()
    return _guard(parse_device(device, "device_guard: device"), False)


def follow_place(attrs: dict[str, Any]) -> contextlib.AbstractContextManager[Any]:
    """Append ops at the place recorded in ``attrs`` (an op's ``place_attrs``) unless a
    guard is in force; no place there changes nothing. The optimizer uses it so that an
    update runs where its gradient is made.

    Example::

        with follow_place(place_attrs(grad_op)):
            block.append_op("sgd", ...)
    """
    if _STACK or not (attrs.get(DEVICE_ATTR) or attrs.get(NODE_ATTR)):
        return contextlib.nullcontext()
    return _guard(place_of_attrs(attrs), True)


def apply_current_place(attrs: dict[str, Any]) -> None:
    """Record the guards' place in a new op's ``attrs`` (an explicit place there wins)."""
    if not _STACK or attrs.get(DEVICE_ATTR) or attrs.get(NODE_ATTR):
        return
    place = current_place()
    if place is not None:
        attrs.update(place.attrs())


def place_attrs(op: Any) -> dict[str, str]:
    """The placement attrs of ``op`` (empty when it is unplaced)."""
    return {k: op.attrs[k] for k in (DEVICE_ATTR, NODE_ATTR) if op.attrs.get(k)}


def place_of_attrs(attrs: dict[str, Any]) -> Place:
    name, nid = parse_node(attrs[NODE_ATTR]) if attrs.get(NODE_ATTR) else (None, None)
    dev = parse_device(attrs[DEVICE_ATTR], DEVICE_ATTR) if attrs.get(DEVICE_ATTR) else None
    return Place(name, nid, dev.device_type if dev else None, dev.first_id if dev else None,
                 dev.last_id if dev else None)


def place_of(op: Any) -> str:
    """The place of ``op`` as text (``"/node:worker/cpu:1"``, ``"cpu:1"``, or ``""``)."""
    attrs = place_attrs(op)
    if not attrs:
        return ""
    node, dev = attrs.get(NODE_ATTR), attrs.get(DEVICE_ATTR)
    if node is None:
        return str(dev)
    return f"/node:{node}/{dev or 'cpu'}"


def is_placed(program: Any) -> bool:
    """Whether any op of ``program`` records a place (``op_device`` or ``op_node``)."""
    return any(op.attrs.get(DEVICE_ATTR) or op.attrs.get(NODE_ATTR)
               for block in program.blocks for op in block.ops)


def local_device_count(device_type: str) -> int:
    """How many devices of a type this process has: GPUs torch sees; CPU devices: one per
    core (``os.cpu_count()``), or ``CPU_NUM`` if that is larger (Fluid's CPU device count)."""
    if device_type == "gpu":
        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    cores = os.cpu_count() or 1
    raw = os.environ.get("CPU_NUM", "")
    return max(cores, int(raw)) if raw.isdigit() else cores
