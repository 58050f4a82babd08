"""enable_inplace: let an elementwise/activation op write into its dead input's buffer.

Only the trivial, provably safe case is handled: the op's registration row declares an
in-place form (``register_op(..., inplace=update)``: activations such as ``relu``,
``scale``, same-shape ``elementwise_*``), its input ``X`` is read by no other node (in
training, e.g. the pre-activation of ``fc(act='relu')``: ``relu_grad`` reads ``Out`` only),
``X`` was produced on the same device by an op whose row declares ``fresh_output=True``
(never a feed, a persistable, a fetch target, a collective's shared result or a view), and
at run time the output has ``X``'s shape, dtype and layout. The in-place form computes
exactly what the registered kernel computes (same torch operation, ``relu_`` for ``relu``),
so results are bitwise identical.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ..ops.common import broadcast_y
from ..ops.registry import get_op_def, has_op
from ..passes.liveness import analyze
from .graph import ALL_DEVICES, SSAGraph

__all__ = ["plan_inplace", "inplace_update", "has_fresh_output"]

Factory = Callable[[dict[str, Any]], Callable[[], None]]


def inplace_update(op_type: str) -> Any:
    """The in-place form ``update(x, y, attrs)`` an op's registration row declares, or None."""
    return get_op_def(op_type).inplace if has_op(op_type) else None


def has_fresh_output(op_type: str) -> bool:
    """Whether an op's registration row declares that its outputs are always new tensors."""
    return has_op(op_type) and get_op_def(op_type).fresh_output


def plan_inplace(graph: SSAGraph, block: Any, feed: set[str], fetch: set[str],
                 devices: list[torch.device]) -> dict[int, Factory]:
    """Node index -> factory ``f(env) -> run()`` for the nodes that may run in place."""
    live = analyze(graph)
    readers = live.readers
    out: dict[int, Factory] = {}
    for node in graph.nodes:
        update = inplace_update(node.type)
        if update is None or node.device == ALL_DEVICES:
            continue
        x_refs, outs = node.inputs.get("X"), node.outputs.get("Out")
        if not x_refs or not outs or len(node.outputs) != 1:
            continue
        x_ref, out_ref = x_refs[0], outs[0]
        src = graph.nodes[live.producer[x_ref]] if x_ref in live.producer else None
        if (readers.get(x_ref) != 1 or src is None or src.device != node.device
                or not has_fresh_output(src.type)):
            continue
        if any(_persist_or_io(block, name, feed, fetch) for name in (x_ref[1], out_ref[1])):
            continue
        y_name = node.inputs["Y"][0][1] if "Y" in node.inputs else None
        out[node.index] = _factory(update, x_ref[1], y_name, out_ref[1], dict(node.attrs),
                                   node.op, devices[node.device])
    return out


def _persist_or_io(block: Any, name: str, feed: set[str], fetch: set[str]) -> bool:
    var = block._find_var_recursive(name)
    return var is None or var.persistable or name in feed or name in fetch


def _factory(update: Any, x: str, y: str | None, out: str, attrs: dict, op: Any,
             device: torch.device) -> Factory:
    from .runtime import bind_op

    def make(env: dict[str, Any]) -> Callable[[], None]:
        fallback = bind_op(op, device)

        def run() -> None:
            xv = env[x]
            yv = env[y] if y is not None else None
            ok = isinstance(xv, torch.Tensor) and xv.is_contiguous() and (
                yv is None or (isinstance(yv, torch.Tensor) and yv.dtype == xv.dtype
                               and _fits(xv, yv, attrs)))
            if not ok:
                fallback(env)  # shapes differ at run time: out of place, like the kernel
                return
            update(xv, yv, attrs)
            env[out] = xv
        return run
    return make


def _fits(x: torch.Tensor, y: torch.Tensor, attrs: dict) -> bool:
    """Y broadcasts into X's shape (so the result has X's shape)."""
    try:
        yb = broadcast_y(x, y, attrs.get("axis", -1))
        return torch.broadcast_shapes(x.shape, yb.shape) == x.shape
    except (RuntimeError, ValueError):
        return False
