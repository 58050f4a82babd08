"""Matching ops: ``similarity_focus`` marks, in chosen channels of a 4-D similarity tensor,
a greedy one-to-one matching of its last two axes (Fluid 1.6's op; no gradient).

For each index ``i`` of ``indexes`` the slice ``X[n, i]`` (taken along ``axis`` 1, 2 or 3;
the other two of the last three axes form a ``A x B`` matrix) is matched greedily: the
largest remaining element is selected and its row and column are excluded, ``min(A, B)``
times. The output is 1 at the selected positions of any index, 0 elsewhere, repeated along
``axis``.
"""

from __future__ import annotations

from typing import Any

import torch

from .registry import Meta, register_op

__all__: list[str] = []


def _focus_shape(ins: dict, attrs: dict) -> dict:
    x = ins["X"]
    if len(x.shape) != 4:
        raise ValueError(f"similarity_focus: X must be 4-D [N, C, A, B], got {list(x.shape)}")
    if attrs["axis"] not in (1, 2, 3):
        raise ValueError(f"similarity_focus: axis must be 1, 2 or 3, got {attrs['axis']}")
    if not attrs["indexes"]:
        raise ValueError("similarity_focus: indexes must not be empty")
    size = x.shape[attrs["axis"]]
    bad = [i for i in attrs["indexes"] if i < 0 or (size != -1 and i >= size)]
    if bad:
        raise ValueError(f"similarity_focus: index {bad[0]} is out of range for axis "
                         f"{attrs['axis']} of size {size}")
    return {"Out": Meta(x.shape, x.dtype)}


def _greedy_match(m: torch.Tensor) -> torch.Tensor:
    """1 where the greedy one-to-one matching of the matrix ``m`` picks."""
    rows, cols = m.shape
    mask = torch.zeros_like(m)
    order = torch.argsort(m.reshape(-1), descending=True, stable=True).tolist()
    used_r, used_c = set(), set()
    for flat in order:
        r, c = divmod(flat, cols)
        if r in used_r or c in used_c:
            continue
        mask[r, c] = 1
        used_r.add(r)
        used_c.add(c)
        if len(used_r) == min(rows, cols):
            break
    return mask


def _similarity_focus(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, axis = ins["X"], attrs["axis"]
    moved = x.movedim(axis, 1)  # [N, K, A, B]: the matrices are the last two axes
    out = torch.zeros_like(moved)
    for n in range(moved.shape[0]):
        mask = torch.zeros_like(moved[n, 0])
        for i in attrs["indexes"]:
            mask = torch.maximum(mask, _greedy_match(moved[n, i]))
        out[n] = mask
    return {"Out": out.movedim(1, axis).contiguous()}


register_op("similarity_focus", inputs=("X",), outputs=("Out",),
            attrs={"axis": 1, "indexes": []}, infer_shape=_focus_shape,
            kernel=_similarity_focus)
