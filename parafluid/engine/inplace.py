"""enable_inplace: let an elementwise/activation op write into its dead input's buffer.

Only the trivial, provably safe case is handled: the op is one of a small table
(activations, ``scale``, same-shape ``elementwise_*``), its input ``X`` is read by no other
node (in training, e.g. the pre-activation of ``fc(act='relu')``: ``relu_grad`` reads
``Out`` only), ``X`` was produced on the same device by an op that returns a fresh tensor
(never a feed, a persistable, a fetch target, a collective's shared result or a view), and at
run time the output has ``X``'s shape, dtype and layout. The in-place kernel computes exactly
what the registered kernel computes (same torch operation, ``relu_`` for ``relu``), so
results are bitwise identical.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ..ops.common import broadcast_y
from ..passes.liveness import analyze
from .graph import ALL_DEVICES, SSAGraph

__all__ = ["plan_inplace", "INPLACE_KERNELS", "FRESH_OUTPUT_OPS"]

Factory = Callable[[dict[str, Any]], Callable[[], None]]


def _unary(fn: Callable[[torch.Tensor], Any]) -> Any:
    def run(x: torch.Tensor, y: Any, attrs: dict) -> None:
        fn(x)
    return run


def _scale(x: torch.Tensor, y: Any, attrs: dict) -> None:
    s, b = attrs["scale"], attrs["bias"]
    if b == 0.0:
        x.mul_(s)
    elif attrs["bias_after_scale"]:
        x.mul_(s).add_(b)
    else:
        x.add_(b).mul_(s)


def _binary(name: str) -> Any:
    def run(x: torch.Tensor, y: torch.Tensor, attrs: dict) -> None:
        getattr(x, name)(broadcast_y(x, y, attrs["axis"]))
    return run


# op type -> in-place update of X (the result is X itself)
INPLACE_KERNELS: dict[str, Any] = {
    "relu": _unary(torch.relu_),
    "sigmoid": _unary(torch.sigmoid_),
    "tanh": _unary(torch.tanh_),
    "scale": _scale,
    "elementwise_add": _binary("add_"),
    "elementwise_sub": _binary("sub_"),
    "elementwise_mul": _binary("mul_"),
    "elementwise_div": _binary("div_"),
}

# Ops whose output is always a freshly allocated tensor (never a view of an input).
FRESH_OUTPUT_OPS = frozenset({
    "mul", "matmul", "elementwise_add", "elementwise_sub", "elementwise_mul", "elementwise_div",
    "relu", "sigmoid", "tanh", "conv2d", "pool2d", "batch_norm", "softmax",
    "fused_elemwise_activation",
})


def plan_inplace(graph: SSAGraph, block: Any, feed: set[str], fetch: set[str],
                 devices: list[torch.device]) -> dict[int, Factory]:
    """Node index -> factory ``f(env) -> run()`` for the nodes that may run in place."""
    live = analyze(graph)
    readers = live.readers
    out: dict[int, Factory] = {}
    for node in graph.nodes:
        update = INPLACE_KERNELS.get(node.type)
        if update is None or node.device == ALL_DEVICES:
            continue
        x_refs, outs = node.inputs.get("X"), node.outputs.get("Out")
        if not x_refs or not outs or len(node.outputs) != 1:
            continue
        x_ref, out_ref = x_refs[0], outs[0]
        src = graph.nodes[live.producer[x_ref]] if x_ref in live.producer else None
        if (readers.get(x_ref) != 1 or src is None or src.device != node.device
                or src.type not in FRESH_OUTPUT_OPS):
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
