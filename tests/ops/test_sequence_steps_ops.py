"""Op table: sequence_reverse, sequence_slice, sequence_enumerate, sequence_erase,
sequence_scatter, add_position_encoding, row_conv, im2sequence; and their layers with LoD feeds."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import parafluid as fluid
from parafluid.testing import OpCase, check_op, rand, run_op

OFFS = [0, 2, 5, 6]  # three sequences of 2, 3 and 1 steps


def _seqs(x, offs):
    return [x[a:b] for a, b in zip(offs, offs[1:])]


def reverse_ref(X):
    return {"Y": np.concatenate([s[::-1] for s in _seqs(X, OFFS)])}


def row_conv_ref(X, Filter):
    out = np.zeros_like(X)
    for a, b in zip(OFFS, OFFS[1:]):
        for t in range(a, b):
            for i in range(Filter.shape[0]):
                if t + i < b:
                    out[t] += X[t + i] * Filter[i]
    return {"Out": out}


def enumerate_ref(X, attrs):
    win, pad = attrs["win_size"], attrs["pad_value"]
    out = np.full((len(X), win), pad, X.dtype)
    for a, b in zip(OFFS, OFFS[1:]):
        for t in range(a, b):
            for i in range(win):
                if t + i < b:
                    out[t, i] = X[t + i, 0]
    return {"Out": out}


def pe_table(length, width):
    half = width // 2
    pe = np.zeros((length, width))
    for pos in range(length):
        for k in range(half):
            val = pos / 10000.0 ** (k / (half - 1)) if half > 1 else pos / 10000.0
            pe[pos, k], pe[pos, half + k] = np.sin(val), np.cos(val)
    return pe


def im2seq_ref(X, attrs):
    (kh, kw), (sh, sw) = attrs["kernels"], attrs["strides"]
    pu, pl, pd, pr = attrs["paddings"]
    xp = np.pad(X, [(0, 0), (0, 0), (pu, pd), (pl, pr)])
    n, c, h, w = xp.shape
    rows = []
    for img in xp:
        for i in range(0, h - kh + 1, sh):
            for j in range(0, w - kw + 1, sw):
                rows.append(img[:, i:i + kh, j:j + kw].reshape(-1))
    return {"Out": np.stack(rows)}


def seq_scatter_ref(X, Ids, Updates):
    out = X.copy()
    for row, (a, b) in enumerate(zip([0, 3, 3], [3, 3, 5])):
        for j in range(a, b):
            out[row, Ids[j, 0]] += Updates[j, 0]
    return {"Out": out}


IDS = np.array([[3], [1], [4], [1], [5], [9]], "int64")


def _lod(rows, lengths, dtype="float32"):
    return fluid.create_lod_tensor(np.asarray(rows, dtype), [lengths], fluid.CPUPlace())


CASES = [
    OpCase("sequence_reverse", {"X": rand(6, 3)}, ref=reverse_ref, lod={"X": [OFFS]},
           grad=["X"]),
    OpCase("sequence_slice", {"X": rand(6, 2), "Offset": np.array([[1], [0], [0]], "int64"),
                              "Length": np.array([[1], [2], [1]], "int64")},
           ref=lambda X, Offset, Length: {"Out": X[[1, 2, 3, 5]]}, lod={"X": [OFFS]},
           grad=["X"]),
    OpCase("sequence_enumerate", {"X": IDS}, attrs={"win_size": 3, "pad_value": -1},
           ref=enumerate_ref, lod={"X": [OFFS]}),
    OpCase("sequence_erase", {"X": IDS}, attrs={"tokens": [1, 9]},
           ref=lambda X: {"Out": np.array([[3], [4], [5]], "int64")}, lod={"X": [OFFS]}),
    OpCase("im2sequence", {"X": rand(2, 2, 4, 5)},
           attrs={"kernels": [2, 3], "strides": [2, 1], "paddings": [0, 1, 1, 0]},
           ref=im2seq_ref, grad=["X"]),
    OpCase("row_conv", {"X": rand(6, 3), "Filter": rand(3, 3, seed=1)}, ref=row_conv_ref,
           lod={"X": [OFFS]}, grad=["X", "Filter"]),
    OpCase("add_position_encoding", {"X": rand(2, 5, 4)}, attrs={"alpha": 0.5, "beta": 2.0},
           ref=lambda X: {"Out": 0.5 * X + 2.0 * pe_table(5, 4)[None]}, grad=["X"]),
    OpCase("add_position_encoding", {"X": rand(6, 6)}, attrs={"alpha": 1.0, "beta": 1.0},
           ref=lambda X: {"Out": X + np.concatenate([pe_table(n, 6) for n in (2, 3, 1)])},
           lod={"X": [OFFS]}, grad=["X"], id="add_position_encoding_lod"),
    OpCase("sequence_scatter", {"X": rand(3, 4), "Ids": np.array([[1], [3], [1], [0], [2]],
                                                                  "int64"),
                                "Updates": rand(5, 1, seed=1)},
           ref=seq_scatter_ref, lod={"Ids": [[0, 3, 3, 5]], "Updates": [[0, 3, 3, 5]]},
           grad=["X", "Updates"]),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_op(case):
    check_op(case)


def test_im2sequence_matches_torch_unfold_and_gives_one_sequence_per_image():
    x = rand(3, 2, 5, 5, seed=4)
    case = OpCase("im2sequence", {"X": x}, attrs={"kernels": [3, 3], "strides": [2, 2],
                                                  "paddings": [1, 1, 1, 1]})
    got = run_op(case)["Out"]
    want = F.unfold(torch.from_numpy(x), 3, padding=1, stride=2).transpose(1, 2)
    np.testing.assert_allclose(got, want.reshape(-1, 18).numpy())


def test_sequence_layers_keep_lod_through_a_program():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        words = fluid.layers.data(name="w", shape=[1], dtype="int64", lod_level=1)
        grams = fluid.layers.sequence_enumerate(words, win_size=2)
        emb = fluid.layers.embedding(words, size=[10, 4])
        rev = fluid.layers.sequence_reverse(emb)
        conv = fluid.layers.row_conv(rev, future_context_size=1)
        pooled = fluid.layers.sequence_pool(conv, pool_type="sum")
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    ids = _lod([[3], [1], [4], [1], [5]], [2, 3], "int64")
    g, p = exe.run(main, feed={"w": ids}, fetch_list=[grams, pooled], return_numpy=False)
    np.testing.assert_array_equal(np.array(g), [[3, 1], [1, 0], [4, 1], [1, 5], [5, 0]])
    assert g.lod() == [[0, 2, 5]]
    assert np.array(p).shape == (2, 4)
