"""``filter_by_instag`` (Fluid 1.6): keep the instances whose tags meet a filter.

Instance ``i`` of ``Ins`` (a row, or with ``is_lod`` a sequence of rows) carries the tags of
sequence ``i`` of ``Ins_tag`` (int64, one level of LoD; one tag per row without LoD). It is
kept when one of its tags is in ``Filter_tag``. ``Out`` holds the kept instances in order,
with a LoD of their lengths; ``LossWeight`` is 1 per kept instance; ``IndexMap`` rows are
``(out start, in start, length)``. When nothing is kept, ``Out`` is one row of zeros and its
``LossWeight`` 0, as in Fluid. The gradient copies ``Out@GRAD`` back to the kept rows.
"""

from __future__ import annotations

from typing import Any

import torch

from ..lod import attach_lod, get_lod
from .registry import Meta, register_op

__all__: list[str] = []


def _shape(ins: dict, attrs: dict) -> dict:
    x, tag, keep = ins["Ins"], ins["Ins_tag"], ins["Filter_tag"]
    for slot, meta in (("Ins_tag", tag), ("Filter_tag", keep)):
        if meta.dtype != "int64":
            raise TypeError(f"filter_by_instag: {slot} must be int64 tags, got {meta.dtype}")
    return {"Out": Meta((-1, *x.shape[1:]), x.dtype),
            "LossWeight": Meta((-1, 1), "float32"), "IndexMap": Meta((-1, 3), "int64")}


def _offsets(t: torch.Tensor, use_lod: bool, what: str) -> list[int]:
    lod = get_lod(t)
    if use_lod:
        if not lod:
            raise ValueError(f"filter_by_instag: {what} has no LoD; feed a LoDTensor (or set "
                             "is_lod=False for one instance per row)")
        return list(lod[-1])
    return list(range(t.shape[0] + 1))


def _filter(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, tag, keep = ins["Ins"], ins["Ins_tag"], ins["Filter_tag"]
    x_off = _offsets(x, attrs["is_lod"], "Ins")
    tag_lod = get_lod(tag)
    tag_off = list(tag_lod[-1]) if tag_lod else list(range(tag.shape[0] + 1))
    if len(tag_off) != len(x_off):
        raise ValueError(f"filter_by_instag: Ins has {len(x_off) - 1} instances but Ins_tag "
                         f"tags {len(tag_off) - 1}")
    wanted = set(keep.reshape(-1).tolist())
    tags = tag.reshape(-1).tolist()
    rows, index, out_off = [], [], [0]
    for i in range(len(x_off) - 1):
        if wanted.intersection(tags[tag_off[i]:tag_off[i + 1]]):
            n = x_off[i + 1] - x_off[i]
            index.append([out_off[-1], x_off[i], n])
            rows.append(x[x_off[i]:x_off[i + 1]])
            out_off.append(out_off[-1] + n)
    # LossWeight (float32, as Fluid's kernel writes it) and IndexMap have one row per kept
    # instance, each its own sequence
    if not rows:
        return {"Out": attach_lod(x.new_zeros((1, *x.shape[1:])), [[0, 1]]),
                "LossWeight": attach_lod(torch.zeros((1, 1), device=x.device), [[0, 1]]),
                "IndexMap": attach_lod(torch.tensor([[0, 1, 1]], dtype=torch.int64,
                                                    device=x.device), [[0, 1]])}
    each = [list(range(len(rows) + 1))]
    return {"Out": attach_lod(torch.cat(rows), [out_off]),
            "LossWeight": attach_lod(torch.ones((len(rows), 1), device=x.device), each),
            "IndexMap": attach_lod(torch.tensor(index, dtype=torch.int64, device=x.device),
                                   each)}


def _filter_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, g, index, weight = ins["Ins"], ins["Out@GRAD"], ins["IndexMap"], ins["LossWeight"]
    grad = torch.zeros_like(x)
    if weight.numel() == 1 and float(weight.reshape(())) == 0.0:
        return {"Ins@GRAD": grad}  # nothing was kept: the one output row is a placeholder
    for out_start, in_start, n in index.tolist():
        if n:
            grad[in_start:in_start + n] = g[out_start:out_start + n]
    return {"Ins@GRAD": grad}


register_op("filter_by_instag", inputs=("Ins", "Ins_tag", "Filter_tag"),
            outputs=("Out", "LossWeight", "IndexMap"), attrs={"is_lod": True},
            infer_shape=_shape, kernel=_filter, grad_kernel=_filter_grad,
            grad_uses=("Ins", "IndexMap", "LossWeight"),
            no_grad_inputs=("Ins_tag", "Filter_tag"))
