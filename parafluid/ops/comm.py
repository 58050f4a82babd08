"""Collective communication ops: all-reduce, reduce, broadcast, coalesced all-reduce.

In a program (one device's view, as the gradient aggregation pass writes them) a collective
names one variable per slot: ``{Out=[g]} = c_allreduce_sum(X=[g])``. The multi-device graph
turns it into one node whose kernel gets that variable *on every local device* as a list:
``c_allreduce_sum`` reads ``g`` of devices 0 and 1 and writes the sum back to both. With one
device and no communicator the ops are the identity, so such a program also runs in the
plain Executor.

``root`` (``c_reduce_sum``, ``c_broadcast``) is a global device index (over all processes);
``ctx.communicator.rank_offset`` is the global index of this process's device 0.

The kernels call ``ctx.communicator`` (see ``parafluid.parallel.comm``), which decides how
values travel; the sum order is fixed by the communicator.

Example (a printed data-parallel program)::

    {Out=[fc_0.w_0@GRAD]} = c_allreduce_sum(X=[fc_0.w_0@GRAD])
"""

from __future__ import annotations

from typing import Any

import torch

from .registry import register_op

__all__: list[str] = []


def _communicator(ctx: Any, n: int, op: str) -> Any:
    comm = ctx.communicator
    if comm is None:
        if n == 1:
            return None
        raise RuntimeError(f"{op} over {n} values needs a communicator: run the program with "
                           "a ParallelExecutor (or CompiledProgram.with_data_parallel)")
    if len(comm.devices) != n:
        raise RuntimeError(f"{op}: got {n} values but the communicator has "
                           f"{len(comm.devices)} local devices")
    return comm


def _name(ctx: Any) -> str:
    """The variables a collective carries, for the communicator's signature check (two
    trainers pairing the all-reduce of ``w@GRAD`` with that of ``b@GRAD`` are told so)."""
    op = getattr(ctx, "op", None)
    return "" if op is None else ",".join(op.input("X")[:4])


def _same_metas(ins: dict, attrs: dict) -> dict:
    return {"Out": list(ins["X"])}


def _allreduce(ins: dict, attrs: dict, ctx: Any) -> dict:
    xs = ins["X"]
    comm = _communicator(ctx, len(xs), "c_allreduce_sum")
    return {"Out": list(xs) if comm is None else comm.all_reduce(xs, name=_name(ctx))}


register_op("c_allreduce_sum", inputs=("X[]",), outputs=("Out[]",), attrs={"ring_id": 0},
            infer_shape=_same_metas, kernel=_allreduce, side_effect=True, comm=True,
            # d(sum over ranks)/dx_i: every rank's output gradient, summed again.
            grad=lambda op, no_grad, ctx: [] if all(x in no_grad for x in op.input("X")) else [
                {"type": "c_allreduce_sum",
                 "inputs": {"X": [o + "@GRAD" for o in op.output("Out")]},
                 "outputs": {"Out": [x + "@GRAD" for x in op.input("X")]}, "attrs": {}}])


def _reduce(ins: dict, attrs: dict, ctx: Any) -> dict:
    """The sum on the root device (None in a process that does not hold the root)."""
    xs = ins["X"]
    comm = _communicator(ctx, len(xs), "c_reduce_sum")
    return {"Out": xs[0] if comm is None else comm.reduce(xs, attrs["root"], name=_name(ctx))}


register_op("c_reduce_sum", inputs=("X[]",), outputs=("Out",), attrs={"root": 0, "ring_id": 0},
            infer_shape=lambda ins, attrs: {"Out": ins["X"][0]}, kernel=_reduce,
            side_effect=True, comm=True)


def _broadcast(ins: dict, attrs: dict, ctx: Any) -> dict:
    """X: the root's value (None where the root is in another process)."""
    comm = ctx.communicator
    if comm is None:
        return {"Out": []}
    root = attrs["root"]
    values = comm.broadcast(ins["X"], root, name=_name(ctx))
    offset = getattr(comm, "rank_offset", 0)
    return {"Out": [v for i, v in enumerate(values) if i + offset != root]}


# Out lists the local devices other than the root, in device order: the root keeps its value.
register_op("c_broadcast", inputs=("X",), outputs=("Out[]",), attrs={"root": 0, "ring_id": 0},
            infer_shape=lambda ins, attrs: {"Out": ins["X"]}, kernel=_broadcast,
            side_effect=True, comm=True)


def _allreduce_coalesced(ins: dict, attrs: dict, ctx: Any) -> dict:
    """Flatten each device's group into one buffer, all-reduce it, split it back."""
    xs, k = ins["X"], attrs["nvars"]
    if k <= 0 or len(xs) % k:
        raise ValueError(f"c_allreduce_coalesced: {len(xs)} inputs is not a multiple of "
                         f"nvars={k}")
    ndev = len(xs) // k
    comm = _communicator(ctx, ndev, "c_allreduce_coalesced")
    if comm is None:
        return {"Out": list(xs)}
    groups = [xs[d * k:(d + 1) * k] for d in range(ndev)]
    flat = [torch.cat([x.reshape(-1) for x in g]) for g in groups]
    summed = comm.all_reduce(flat, name=_name(ctx))
    sizes = [x.numel() for x in groups[0]]
    out = []
    for d in range(ndev):
        parts = torch.split(summed[d], sizes)
        out.extend(p.view(x.shape) for p, x in zip(parts, groups[d]))
    return {"Out": out}


register_op("c_allreduce_coalesced", inputs=("X[]",), outputs=("Out[]",),
            attrs={"nvars": 1, "ring_id": 0}, infer_shape=_same_metas,
            kernel=_allreduce_coalesced, side_effect=True, comm=True)
