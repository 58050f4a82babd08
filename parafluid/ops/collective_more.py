"""The rest of Fluid's collectives, over parafluid's Communicator (``parafluid.parallel.comm``):

- ``c_allreduce_max`` / ``c_allreduce_min`` / ``c_allreduce_prod``: the elementwise max, min
  or product over all ranks, on every rank;
- ``c_allgather``: every rank's ``X`` concatenated along dim 0 in rank order (``nranks``
  must be the communicator's);
- ``c_reducescatter``: the sum over ranks, split along dim 0 into ``nranks`` parts, part
  ``r`` on rank ``r``;
- ``c_sync_calc_stream`` / ``c_sync_comm_stream``: ``Out`` is ``X`` (CUDA-stream barriers in
  Fluid; parafluid's kernels run on the default stream, so there is nothing to wait for);
- ``allreduce`` / ``broadcast``: Fluid's earlier data-parallel ops (``reduce_type`` 0 sum,
  1 prod, 2 max, 3 min; ``broadcast`` sends ``root``'s ``X`` to every rank, itself too).

Like ``c_allreduce_sum`` (``ops/comm.py``), a program names one variable per slot and the
multi-device graph hands the kernel that variable on every local device. The Communicator
sums but does not gather, so max/min/prod and allgather gather with one broadcast per rank
(each rank's value from its own device) and reduce in rank order: bitwise the same result
on every rank. With one device and no communicator they are the identity (``nranks`` 1).

Example::

    {Out=[m]} = c_allreduce_max(X=[m]) {ring_id=0, use_calc_stream=False}
"""

from __future__ import annotations

from typing import Any

import torch

from .comm import _communicator, _name
from .registry import Meta, register_op

__all__ = ["MORE_COLLECTIVES"]

_REDUCERS = {"max": torch.maximum, "min": torch.minimum, "prod": torch.mul}
_OLD_REDUCE_TYPES = {0: "sum", 1: "prod", 2: "max", 3: "min"}


def _gathered(comm: Any, xs: list[torch.Tensor], name: str) -> list[list[torch.Tensor]]:
    """For each local device, every rank's value in rank order."""
    offset = getattr(comm, "rank_offset", 0)
    per_device: list[list[torch.Tensor]] = [[] for _ in xs]
    for rank in range(comm.nranks):
        local = rank - offset
        value = xs[local] if 0 <= local < len(xs) else None
        for d, v in enumerate(comm.broadcast(value, rank, name=name)):
            per_device[d].append(v)
    return per_device


def _reduce_all(op: str, kind: str, ins: dict, ctx: Any) -> list[torch.Tensor]:
    xs = list(ins["X"])
    comm = _communicator(ctx, len(xs), op)
    if comm is None:
        return xs
    if kind == "sum":
        return comm.all_reduce(xs, name=_name(ctx))
    fn = _REDUCERS[kind]
    out = []
    for values in _gathered(comm, xs, _name(ctx)):
        acc = values[0]
        for v in values[1:]:
            acc = fn(acc, v.to(acc.device))
        out.append(acc)
    return out


def _same_metas(ins: dict, attrs: dict) -> dict:
    return {"Out": list(ins["X"])}


_STREAM = {"ring_id": 0, "use_calc_stream": False}

for _kind in ("max", "min", "prod"):
    def _kernel(ins: dict, attrs: dict, ctx: Any, _kind: str = _kind) -> dict:
        return {"Out": _reduce_all(f"c_allreduce_{_kind}", _kind, ins, ctx)}

    register_op(f"c_allreduce_{_kind}", inputs=("X[]",), outputs=("Out[]",),
                attrs=dict(_STREAM), infer_shape=_same_metas, kernel=_kernel,
                side_effect=True, comm=True)


# ----------------------------------------------------------------------------- gather / scatter


def _nranks(op: str, attrs: dict, comm: Any) -> int:
    n = attrs["nranks"]
    have = 1 if comm is None else comm.nranks
    if n != have:
        raise ValueError(f"{op}: nranks={n} but the run has {have} rank(s)")
    return n


def _rows_metas(op: str, scale: float) -> Any:
    def infer(ins: dict, attrs: dict) -> dict:
        n = attrs["nranks"]
        if n is None or n < 1:
            raise ValueError(f"{op}: nranks (required) must be a positive int, got {n}")
        out = []
        for x in ins["X"]:
            rows = x.shape[0] if x.shape else 1
            if rows != -1 and scale < 1 and rows % n:
                raise ValueError(f"{op}: X has {rows} rows, not a multiple of nranks={n}")
            new = -1 if rows == -1 else int(rows * n if scale > 1 else rows // n)
            out.append(Meta((new, *x.shape[1:]), x.dtype))
        return {"Out": out}
    return infer


def _allgather(ins: dict, attrs: dict, ctx: Any) -> dict:
    xs = list(ins["X"])
    comm = _communicator(ctx, len(xs), "c_allgather")
    _nranks("c_allgather", attrs, comm)
    if comm is None:
        return {"Out": xs}
    return {"Out": [torch.cat(values, 0) for values in _gathered(comm, xs, _name(ctx))]}


register_op("c_allgather", inputs=("X[]",), outputs=("Out[]",),
            attrs={**_STREAM, "nranks": None}, infer_shape=_rows_metas("c_allgather", 2.0),
            kernel=_allgather, side_effect=True, comm=True)


def _reducescatter(ins: dict, attrs: dict, ctx: Any) -> dict:
    xs = list(ins["X"])
    comm = _communicator(ctx, len(xs), "c_reducescatter")
    n = _nranks("c_reducescatter", attrs, comm)
    if xs and xs[0].shape[0] % n:
        raise ValueError(f"c_reducescatter: X has {xs[0].shape[0]} rows, not a multiple of "
                         f"nranks={n}")
    if comm is None:
        return {"Out": xs}
    offset = getattr(comm, "rank_offset", 0)
    summed = comm.all_reduce(xs, name=_name(ctx))
    return {"Out": [s.chunk(n, 0)[offset + d].clone() for d, s in enumerate(summed)]}


register_op("c_reducescatter", inputs=("X[]",), outputs=("Out[]",),
            attrs={**_STREAM, "nranks": 1}, infer_shape=_rows_metas("c_reducescatter", 0.5),
            kernel=_reducescatter, side_effect=True, comm=True)

# ----------------------------------------------------------------------------- stream barriers

for _op in ("c_sync_calc_stream", "c_sync_comm_stream"):
    register_op(_op, inputs=("X[]",), outputs=("Out[]",),
                attrs={"ring_id": 0} if _op == "c_sync_comm_stream" else {},
                infer_shape=_same_metas, kernel=lambda ins, attrs, ctx: {"Out": list(ins["X"])},
                side_effect=True, comm=True)

# ----------------------------------------------------------------------------- Fluid's older ops


def _old_allreduce(ins: dict, attrs: dict, ctx: Any) -> dict:
    kind = _OLD_REDUCE_TYPES.get(attrs["reduce_type"])
    if kind is None:
        raise ValueError(f"allreduce: reduce_type must be one of {_OLD_REDUCE_TYPES}, got "
                         f"{attrs['reduce_type']!r}")
    return {"Out": _reduce_all("allreduce", kind, ins, ctx)}


register_op("allreduce", inputs=("X[]",), outputs=("Out[]",),
            attrs={"reduce_type": 0, "sync_mode": False}, infer_shape=_same_metas,
            kernel=_old_allreduce, side_effect=True, comm=True)


def _old_broadcast(ins: dict, attrs: dict, ctx: Any) -> dict:
    xs = list(ins["X"])
    comm = _communicator(ctx, len(xs), "broadcast")
    root = attrs["root"]
    if comm is None:
        if root != 0:
            raise ValueError(f"broadcast: root={root} but the run has one rank")
        return {"Out": xs}
    local = root - getattr(comm, "rank_offset", 0)
    value = xs[local] if 0 <= local < len(xs) else None
    return {"Out": list(comm.broadcast(value, root, name=_name(ctx)))}


register_op("broadcast", inputs=("X[]",), outputs=("Out[]",),
            attrs={"root": 0, "sync_mode": False}, infer_shape=_same_metas,
            kernel=_old_broadcast, side_effect=True, comm=True)

# the multi-device graph makes each of these one node over every local device
MORE_COLLECTIVES = frozenset({"c_allreduce_max", "c_allreduce_min", "c_allreduce_prod",
                              "c_allgather", "c_reducescatter", "c_sync_calc_stream",
                              "c_sync_comm_stream", "allreduce", "broadcast"})
