"""Op table: ops on row-sparse values (get_tensor_from_selected_rows, merge_selected_rows,
split_selected_rows), fed SelectedRows inputs; a SelectedRows output is compared densified.
References from Fluid 1.6's definitions (duplicate rows add up in the dense value)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from parafluid.scope import SelectedRows
from parafluid.testing import OpCase, check_op, rand


def _sr(rows: list[int], height: int, seed: int = 0, width: int = 3) -> SelectedRows:
    value = torch.from_numpy(rand(len(rows), width, seed=seed))
    return SelectedRows(torch.tensor(rows, dtype=torch.int64), value, height)


def _dense(x: SelectedRows) -> np.ndarray:
    out = np.zeros((x.height, x.value.shape[1]))
    np.add.at(out, x.rows.numpy(), x.value.numpy())
    return out


def _split(X, attrs):
    dense, out, first = _dense(X), [], 0
    for h in attrs["height_sections"]:
        out.append(dense[first:first + h])
        first += h
    return {"Out": out}


_X = _sr([7, 5, 1, 5], 12, seed=1)  # row 5 twice

CASES = [
    OpCase("get_tensor_from_selected_rows", {"X": _X}, ref=lambda X: {"Out": X.value.numpy()}),
    OpCase("get_tensor_from_selected_rows", {"X": _sr([], 4, width=2)},
           ref=lambda X: {"Out": np.zeros((0, 2))}, id="get_tensor_from_selected_rows_empty"),
    # merging sums the repeated rows and keeps the dense value
    OpCase("merge_selected_rows", {"X": _X}, ref=lambda X: {"Out": _dense(X)}),
    # Fluid's documented example: rows {7, 5} of height 12 split by {4, 8}
    OpCase("split_selected_rows", {"X": _sr([7, 5], 12, seed=2)},
           attrs={"height_sections": [4, 8]}, out_counts={"Out": 2}, ref=_split),
    OpCase("split_selected_rows", {"X": _X}, attrs={"height_sections": [2, 4, 6]},
           out_counts={"Out": 3}, ref=_split, id="split_selected_rows_three_sections"),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_op(case):
    check_op(case)

