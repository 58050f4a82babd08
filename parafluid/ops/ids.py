"""Fluid 1.6's id-routing ops of distributed lookup tables:

- ``split_ids``: the distinct ids of all ``Ids`` tensors, sorted, sent to shard
  ``id % len(Out)``; each ``Out`` is ``[n, 1]``;
- ``merge_ids``: ``Out[i]`` row ``j`` is the row of ``X`` whose id (in the ``Rows`` tensor
  beside it) is ``Ids[i][j]`` (the first such row), keeping ``Ids[i]``'s LoD;
- ``ref_by_trainer_id``: ``Out = X[TrainerId]``.

None has a gradient.
"""

from __future__ import annotations

from typing import Any

import torch

from ..lod import attach_lod, get_lod
from ..scope import SelectedRows
from .registry import Meta, register_op

__all__: list[str] = []


def _split_ids(ins: dict, attrs: dict, ctx: Any) -> dict:
    ids = ins["Ids"]
    n = len(ctx.op.output("Out"))  # one output per shard
    if any(isinstance(t, SelectedRows) for t in ids):
        # one row-sparse input (Fluid's second form): its rows go to shard id % n with their
        # values, in the order X lists them
        if len(ids) != 1:
            raise ValueError(f"split_ids: a row-sparse Ids must be the only input, got "
                             f"{len(ids)} inputs")
        x = ids[0]
        shard = x.rows % n
        return {"Out": [SelectedRows(x.rows[shard == i], x.value[shard == i], x.height)
                        for i in range(n)]}
    flat = torch.unique(torch.cat([t.reshape(-1) for t in ids]), sorted=True)
    return {"Out": [flat[flat % n == i].reshape(-1, 1) for i in range(n)]}


register_op("split_ids", inputs=("Ids[]",), outputs=("Out[]",),
            infer_shape=lambda ins, attrs: {"Out": (
                ins["Ids"][0] if ins["Ids"][0].type == "selected_rows"
                else Meta((-1, 1), ins["Ids"][0].dtype))},
            kernel=_split_ids, no_compile="value-dependent output sizes")


def _merge_ids(ins: dict, attrs: dict, ctx: Any) -> dict:
    ids, rows, xs = ins["Ids"], ins["Rows"], ins["X"]
    if len(rows) != len(xs):
        raise ValueError(f"merge_ids: Rows and X must have as many tensors, got {len(rows)} "
                         f"and {len(xs)}")
    where: dict[int, tuple[int, int]] = {}
    for i, r in enumerate(rows):
        if r.shape[0] != xs[i].shape[0]:
            raise ValueError(f"merge_ids: Rows[{i}] has {r.shape[0]} ids but X[{i}] has "
                             f"{xs[i].shape[0]} rows")
        for j, key in enumerate(r.reshape(-1).tolist()):
            where.setdefault(int(key), (i, j))
    outs = []
    for t in ids:
        picked = []
        for key in t.reshape(-1).tolist():
            if int(key) not in where:
                raise ValueError(f"merge_ids: id {int(key)} is in no Rows tensor")
            i, j = where[int(key)]
            picked.append(xs[i][j])
        width = xs[0].shape[1]
        out = torch.stack(picked) if picked else xs[0].new_zeros((0, width))
        outs.append(attach_lod(out, get_lod(t)))
    return {"Out": outs}


register_op("merge_ids", inputs=("Ids[]", "Rows[]", "X[]"), outputs=("Out[]",),
            infer_shape=lambda ins, attrs: {"Out": [
                Meta((t.shape[0], ins["X"][0].shape[1]), ins["X"][0].dtype)
                for t in ins["Ids"]]},
            kernel=_merge_ids, no_compile="value-dependent row lookups on the host")


def _ref_by_trainer_id(ins: dict, attrs: dict, ctx: Any) -> dict:
    xs, tid = ins["X"], int(ins["TrainerId"].reshape(-1)[0])
    if not 0 <= tid < len(xs):
        raise ValueError(f"ref_by_trainer_id: TrainerId {tid} is outside [0, {len(xs)})")
    return {"Out": xs[tid]}


register_op("ref_by_trainer_id", inputs=("X[]", "TrainerId"), outputs=("Out",),
            infer_shape=lambda ins, attrs: {"Out": ins["X"][0]}, kernel=_ref_by_trainer_id,
            no_compile="picks its input by a run-time value")
