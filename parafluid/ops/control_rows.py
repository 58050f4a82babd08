"""IfElse's branches: ``split_lod_tensor`` / ``merge_lod_tensor``.

``split_lod_tensor`` sends each item of ``X`` to ``OutTrue`` or ``OutFalse`` by a bool
``Mask`` column with one entry per item: an item is a row when ``X`` has no LoD, else a
sequence of LoD level ``level`` with everything beneath it (its rows and finer levels). The
outputs carry the LoD of the items they received, from level ``level`` down.
``merge_lod_tensor`` is the inverse: item ``i`` of ``Out`` is the next top-level item of
``InTrue`` or ``InFalse`` as ``Mask[i]`` says, and ``X``'s LoD levels above ``level`` are put
back on top.

Example (a LoD of lengths [3, 6, 1], mask [0, 1, 0])::

    split_lod_tensor -> OutTrue: rows 3..8, lengths [[6]]; OutFalse: rows 0..2 and 9,
                        lengths [[3, 1]]
"""

from __future__ import annotations

from typing import Any

import torch

from .registry import Meta, register_op

__all__: list[str] = []

# one copied run of rows: (branch: True/False, first row in the branch's tensor, end row)
_Range = tuple[bool, int, int]


def _mask_of(mask: torch.Tensor) -> list[bool]:
    return [bool(v) for v in mask.reshape(-1).tolist()]


def _sub_lod(lod: list, start: int, end: int, level: int) -> tuple[list[list[int]], int, int]:
    """Lengths of items ``[start, end)`` of ``level`` and of everything beneath them, and the
    rows they cover (Fluid's GetSubLoDAndAbsoluteOffset)."""
    lengths = []
    for offsets in lod[level:]:
        lengths.append([int(offsets[i + 1]) - int(offsets[i]) for i in range(start, end)])
        start, end = int(offsets[start]), int(offsets[end])
    return lengths, start, end


def _append_lod(lod: list[list[int]], lengths: list[list[int]]) -> None:
    """Append per-level lengths to a LoD of offsets (Fluid's AppendLoD)."""
    if not lod:
        lod.extend([0] for _ in lengths)
    for offsets, lens in zip(lod, lengths):
        for n in lens:
            offsets.append(offsets[-1] + n)


def _split_plan(op_type: str, x: torch.Tensor, mask: torch.Tensor,
                level: int) -> tuple[list[_Range], dict[bool, list[list[int]]]]:
    """Which rows of ``x`` go to which branch, in order, and each branch's LoD."""
    from ..lod import get_lod

    lod = get_lod(x) or []
    m = _mask_of(mask)
    if level < 0 or (lod and level >= len(lod)):
        raise ValueError(f"{op_type}: attribute level={level} is not a LoD level of X, which "
                         f"has {len(lod)} level(s)")
    items = len(lod[level]) - 1 if lod else x.shape[0]
    if len(m) != items:
        what = f"sequences at LoD level {level}" if lod else "rows"
        raise ValueError(f"{op_type}: the mask has {len(m)} entries but the input has "
                         f"{items} {what}")
    ranges: list[_Range] = []
    lods: dict[bool, list[list[int]]] = {True: [], False: []}
    for i, branch in enumerate(m):
        lengths, a, b = _sub_lod(lod, i, i + 1, level) if lod else ([], i, i + 1)
        _append_lod(lods[branch], lengths)
        ranges.append((branch, a, b))
    return ranges, lods


def _split_lod_tensor(ins: dict, attrs: dict, ctx: Any) -> dict:
    from ..lod import attach_lod

    x = ins["X"]
    ranges, lods = _split_plan("split_lod_tensor", x, ins["Mask"], attrs["level"])
    out = {}
    for branch, slot in ((True, "OutTrue"), (False, "OutFalse")):
        rows = [torch.arange(a, b) for br, a, b in ranges if br == branch]
        idx = torch.cat(rows) if rows else torch.zeros(0, dtype=torch.int64)
        out[slot] = attach_lod(x[idx.to(x.device)], lods[branch])
    return out


def _split_shape(ins: dict, attrs: dict) -> dict:
    x = ins["X"]
    meta = Meta((-1, *x.shape[1:]), x.dtype)
    return {"OutTrue": meta, "OutFalse": meta}


def _split_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    x = ins["X"]
    ranges, _ = _split_plan("split_lod_tensor_grad", x, ins["Mask"], attrs["level"])
    g = torch.zeros_like(x)
    for branch, slot in ((True, "OutTrue@GRAD"), (False, "OutFalse@GRAD")):
        src = ins[slot]
        if src is None:
            continue
        at = 0
        for br, a, b in ranges:
            if br == branch:
                g[a:b] = src[at:at + b - a]
                at += b - a
    return {"X@GRAD": g}


register_op("split_lod_tensor", inputs=("X", "Mask"), outputs=("OutTrue", "OutFalse"),
            attrs={"level": 0}, infer_shape=_split_shape, kernel=_split_lod_tensor,
            grad_kernel=_split_grad, grad_uses=("X", "Mask"), no_grad_inputs=("Mask",))


def _merge_plan(ins: dict) -> tuple[list[tuple[bool, int, int, int]], list[list[int]], int]:
    """Each copied run (branch, first row in the branch, end row, first row of Out), the
    LoD of Out beneath ``level``, and Out's rows."""
    from ..lod import get_lod

    parts = {True: ins["InTrue"], False: ins["InFalse"]}
    nxt = {True: 0, False: 0}
    runs, lod, at = [], [], 0
    for i, branch in enumerate(_mask_of(ins["Mask"])):
        part = parts[branch]
        name = "InTrue" if branch else "InFalse"
        part_lod = (get_lod(part) or []) if part is not None else []
        k = nxt[branch]
        items = len(part_lod[0]) - 1 if part_lod else (0 if part is None else part.shape[0])
        if k >= items:
            raise ValueError(f"merge_lod_tensor: the mask selects more than the {items} "
                             f"item(s) of {name} (entry {i} asks for item {k})")
        lengths, a, b = _sub_lod(part_lod, k, k + 1, 0) if part_lod else ([], k, k + 1)
        _append_lod(lod, lengths)
        if b == a:  # NOTE: as Fluid, an empty item does not move its branch on
            continue
        runs.append((branch, a, b, at))
        at += b - a
        nxt[branch] = k + 1
    for branch, part in parts.items():
        used = sum(b - a for br, a, b, _ in runs if br == branch)
        if part is not None and used != part.shape[0]:
            name = "InTrue" if branch else "InFalse"
            raise ValueError(f"merge_lod_tensor: the mask selects {used} rows of {name}, "
                             f"which has {part.shape[0]} rows")
    return runs, lod, at


def _merge_lod_tensor(ins: dict, attrs: dict, ctx: Any) -> dict:
    from ..lod import attach_lod, get_lod

    t, f = ins["InTrue"], ins["InFalse"]
    some = t if t is not None else f
    if some is None:
        raise ValueError("merge_lod_tensor: InTrue and InFalse are both missing; give at "
                         "least one")
    runs, lod, rows = _merge_plan(ins)
    out = torch.zeros((rows, *some.shape[1:]), dtype=some.dtype, device=some.device)
    parts = {True: t, False: f}
    for branch, a, b, at in runs:
        out[at:at + b - a] = parts[branch][a:b]
    level = attrs["level"]
    if level:
        x_lod = get_lod(ins["X"]) or []
        if len(x_lod) < level:
            raise ValueError(f"merge_lod_tensor: attribute level={level} needs X to have "
                             f"{level} LoD level(s) to put back, it has {len(x_lod)}")
        lod = [list(o) for o in x_lod[:level]] + lod
    return {"Out": attach_lod(out, lod)}


def _merge_shape(ins: dict, attrs: dict) -> dict:
    some = ins["InTrue"] if ins["InTrue"] is not None else ins["InFalse"]
    return {"Out": Meta((-1, *some.shape[1:]), some.dtype)}


def _merge_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    g = ins["Out@GRAD"]
    runs, _, _ = _merge_plan(ins)
    out = {}
    for branch, slot in ((True, "InTrue"), (False, "InFalse")):
        part = ins[slot]
        if part is None:
            continue
        gp = torch.zeros(part.shape, dtype=g.dtype, device=g.device)
        for br, a, b, at in runs:
            if br == branch:
                gp[a:b] = g[at:at + b - a]
        out[slot + "@GRAD"] = gp
    return out


register_op("merge_lod_tensor", inputs=("X", "Mask", "InTrue?", "InFalse?"), outputs=("Out",),
            attrs={"level": 0}, infer_shape=_merge_shape, kernel=_merge_lod_tensor,
            grad_kernel=_merge_grad, grad_uses=("Mask", "InTrue", "InFalse"),
            no_grad_inputs=("X", "Mask"))
