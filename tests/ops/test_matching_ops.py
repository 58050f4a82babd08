"""Op table: similarity_focus (no gradient), filter_by_instag (gradient to the kept rows) and
lod_reset appending a LoD level (Fluid's lod_append)."""

import itertools

import numpy as np
import pytest

from parafluid.testing import OpCase, check_op, rand


def _best_matching_mask(m):
    """Reference: the greedy matching by brute force over the order of picks (distinct
    values, so the greedy choice is the unique largest remaining pair each time)."""
    rows, cols = m.shape
    mask = np.zeros_like(m)
    free_r, free_c = set(range(rows)), set(range(cols))
    for _ in range(min(rows, cols)):
        r, c = max(itertools.product(free_r, free_c), key=lambda rc: m[rc])
        mask[r, c] = 1
        free_r.discard(r)
        free_c.discard(c)
    return mask


def focus_ref(X, attrs):
    moved = np.moveaxis(X, attrs["axis"], 1)
    out = np.zeros_like(moved)
    for n in range(moved.shape[0]):
        out[n] = np.max([_best_matching_mask(moved[n, i]) for i in attrs["indexes"]], axis=0)
    return {"Out": np.moveaxis(out, 1, attrs["axis"])}


TAGS = np.array([[1], [3], [2], [5], [1], [4], [7]], "int64")
TAG_OFFS = [0, 2, 3, 5, 6, 7]  # instance tags: {1, 3}, {2}, {5, 1}, {4}, {7}


def instag_ref(Ins, Ins_tag, Filter_tag, attrs):
    offs = [0, 1, 3, 4, 6, 7] if attrs["is_lod"] else list(range(Ins.shape[0] + 1))
    want = set(Filter_tag.reshape(-1).tolist())
    rows, index, start = [], [], 0
    for i in range(len(TAG_OFFS) - 1):
        if want & set(Ins_tag[TAG_OFFS[i]:TAG_OFFS[i + 1], 0].tolist()):
            n = offs[i + 1] - offs[i]
            rows.append(Ins[offs[i]:offs[i + 1]])
            index.append([start, offs[i], n])
            start += n
    return {"Out": np.concatenate(rows), "LossWeight": np.ones((len(rows), 1)),
            "IndexMap": np.array(index, "int64")}


CASES = [
    OpCase("similarity_focus", {"X": rand(2, 3, 4, 5, seed=1)},
           attrs={"axis": 1, "indexes": [0, 2]}, ref=focus_ref),
    OpCase("similarity_focus", {"X": rand(2, 3, 4, 5, seed=2)},
           attrs={"axis": 3, "indexes": [4]}, ref=focus_ref, id="similarity_focus_axis3"),
    OpCase("filter_by_instag",
           {"Ins": rand(5, 3, seed=4), "Ins_tag": TAGS, "Filter_tag": np.array([1, 4], "int64")},
           attrs={"is_lod": False}, lod={"Ins_tag": [TAG_OFFS]}, ref=instag_ref, grad=["Ins"],
           grad_outputs=["Out"]),
    OpCase("filter_by_instag",
           {"Ins": rand(7, 2, seed=5), "Ins_tag": TAGS, "Filter_tag": np.array([2, 7], "int64")},
           attrs={"is_lod": True}, lod={"Ins": [[0, 1, 3, 4, 6, 7]], "Ins_tag": [TAG_OFFS]},
           ref=instag_ref, grad=["Ins"], grad_outputs=["Out"], id="filter_by_instag_lod"),
    OpCase("lod_reset", {"X": rand(6, 2, seed=6)}, attrs={"target_lod": [0, 1, 4, 6],
                                                         "append": True},
           ref=lambda X: {"Out": X}, grad=["X"], id="lod_append"),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_op(case):
    check_op(case)
