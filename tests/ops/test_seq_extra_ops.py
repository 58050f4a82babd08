"""Op table: sequence_reverse, sequence_slice, sequence_enumerate, sequence_erase,
im2sequence, row_conv, add_position_encoding, edit_distance, ctc_align, lstm_unit, gru_unit,
bilinear_tensor_product; and their layers with LoD feeds."""

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


def lstm_unit_ref(X, C_prev, attrs):
    sig = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    xi, xf, xo, xg = np.split(X, 4, axis=1)
    c = sig(xf + attrs["forget_bias"]) * C_prev + sig(xi) * np.tanh(xg)
    return {"C": c, "H": sig(xo) * np.tanh(c)}


def gru_unit_ref(Input, HiddenPrev, Weight, Bias, attrs):
    sig = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    d = HiddenPrev.shape[1]
    flat = Weight.reshape(-1)
    w_ur, w_c = flat[:2 * d * d].reshape(d, 2 * d), flat[2 * d * d:].reshape(d, d)
    g = Input + Bias
    ur = sig(g[:, :2 * d] + HiddenPrev @ w_ur)
    u, r = ur[:, :d], ur[:, d:]
    c = np.tanh(g[:, 2 * d:] + (r * HiddenPrev) @ w_c)
    h = u * HiddenPrev + (1 - u) * c if attrs["origin_mode"] else (1 - u) * HiddenPrev + u * c
    return {"Gate": np.concatenate([u, r, c], 1), "ResetHiddenPrev": r * HiddenPrev,
            "Hidden": h}


def levenshtein(a, b):
    d = np.arange(len(b) + 1)
    for i, x in enumerate(a, 1):
        prev, d[0] = d.copy(), i
        for j, y in enumerate(b, 1):
            d[j] = min(prev[j] + 1, d[j - 1] + 1, prev[j - 1] + (x != y))
    return d[-1]


def seq_scatter_ref(X, Ids, Updates):
    out = X.copy()
    for row, (a, b) in enumerate(zip([0, 3, 3], [3, 3, 5])):
        for j in range(a, b):
            out[row, Ids[j, 0]] += Updates[j, 0]
    return {"Out": out}


IDS = np.array([[3], [1], [4], [1], [5], [9]], "int64")
GRU_IN = {"Input": rand(3, 6), "HiddenPrev": rand(3, 2, seed=1),
          "Weight": rand(2, 6, seed=2), "Bias": rand(1, 6, seed=3)}

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
    OpCase("edit_distance", {"Hyps": np.array([[1], [2], [3], [4], [5]], "int64"),
                             "Refs": np.array([[1], [3], [4], [6], [7]], "int64")},
           attrs={"normalized": True},
           ref=lambda Hyps, Refs: {"Out": np.array([[levenshtein([1, 2, 3], [1, 3]) / 2],
                                                    [levenshtein([4, 5], [4, 6, 7]) / 3]],
                                                   "float32"),
                                   "SequenceNum": np.array([2])},
           lod={"Hyps": [[0, 3, 5]], "Refs": [[0, 2, 5]]}),
    OpCase("ctc_align", {"Input": np.array([[0], [2], [2], [0], [2], [1], [1], [0], [0]],
                                           "int64")}, attrs={"blank": 0},
           ref=lambda Input: {"Output": np.array([[2], [2], [1], ], "int64")},
           lod={"Input": [[0, 5, 7, 9]]}),
    OpCase("lstm_unit", {"X": rand(3, 8), "C_prev": rand(3, 2, seed=1)},
           attrs={"forget_bias": 0.5}, ref=lstm_unit_ref, grad=["X", "C_prev"]),
    OpCase("gru_unit", dict(GRU_IN), ref=gru_unit_ref,
           grad=["Input", "HiddenPrev", "Weight", "Bias"], grad_outputs=["Hidden"]),
    OpCase("gru_unit", dict(GRU_IN), attrs={"origin_mode": True}, ref=gru_unit_ref,
           grad=["Input", "HiddenPrev", "Weight", "Bias"], grad_outputs=["Hidden"],
           id="gru_unit_origin_mode"),
    OpCase("sequence_scatter", {"X": rand(3, 4), "Ids": np.array([[1], [3], [1], [0], [2]],
                                                                  "int64"),
                                "Updates": rand(5, 1, seed=1)},
           ref=seq_scatter_ref, lod={"Ids": [[0, 3, 3, 5]], "Updates": [[0, 3, 3, 5]]},
           grad=["X", "Updates"]),
    OpCase("bilinear_tensor_product", {"X": rand(3, 2), "Y": rand(3, 4, seed=1),
                                       "Weight": rand(5, 2, 4, seed=2),
                                       "Bias": rand(1, 5, seed=3)},
           ref=lambda X, Y, Weight, Bias: {"Out": np.einsum("ni,kij,nj->nk", X, Weight, Y)
                                           + Bias},
           grad=["X", "Y", "Weight", "Bias"]),
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


def _lod(rows, lengths, dtype="float32"):
    return fluid.create_lod_tensor(np.asarray(rows, dtype), [lengths], fluid.CPUPlace())


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


def test_edit_distance_and_ctc_greedy_decoder_layers():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        scores = fluid.layers.data(name="s", shape=[4], dtype="float32", lod_level=1)
        label = fluid.layers.data(name="l", shape=[1], dtype="int64", lod_level=1)
        decoded = fluid.layers.ctc_greedy_decoder(scores, blank=3)
        dist, num = fluid.layers.edit_distance(decoded, label, normalized=False,
                                               ignored_tokens=[2])
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    best = [1, 1, 3, 1, 0, 0, 2, 3]  # per-step arg max: seq 0 = 1 1 3 1 0, seq 1 = 0 2 3
    s = np.full((8, 4), -1.0, "float32")
    s[np.arange(8), best] = 1.0
    feed = {"s": _lod(s, [5, 3]), "l": _lod([[1], [0], [2], [0], [2]], [3, 2], "int64")}
    out, d, n = exe.run(main, feed=feed, fetch_list=[decoded, dist, num], return_numpy=False)
    np.testing.assert_array_equal(np.array(out).ravel(), [1, 1, 0, 0, 2])
    assert out.lod() == [[0, 3, 5]]
    # after erasing token 2: hyps [1 1 0], [0]; refs [1 0], [0]
    np.testing.assert_allclose(np.array(d).ravel(), [1.0, 0.0])
    np.testing.assert_array_equal(np.array(n), [2])


def test_lstm_unit_and_gru_unit_layers_train_a_step_loop():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        xs = [fluid.layers.data(name=f"x{t}", shape=[3], dtype="float32") for t in range(3)]
        y = fluid.layers.data(name="y", shape=[1], dtype="float32")
        h = fluid.layers.fill_constant_batch_size_like(xs[0], [-1, 4], "float32", 0.0)
        c = fluid.layers.fill_constant_batch_size_like(xs[0], [-1, 4], "float32", 0.0)
        g = fluid.layers.fill_constant_batch_size_like(xs[0], [-1, 2], "float32", 0.0)
        lstm_attr, gru_attr = fluid.ParamAttr(name="lstm_w"), fluid.ParamAttr(name="gru_w")
        for x in xs:
            h, c = fluid.layers.lstm_unit(x, h, c, param_attr=lstm_attr,
                                          bias_attr=fluid.ParamAttr(name="lstm_b"))
            g, _, _ = fluid.layers.gru_unit(fluid.layers.fc(x, size=6), g, size=6,
                                            param_attr=gru_attr,
                                            bias_attr=fluid.ParamAttr(name="gru_b"))
        pred = fluid.layers.fc(fluid.layers.bilinear_tensor_product(h, g, size=3), size=1)
        loss = fluid.layers.mean(fluid.layers.square_error_cost(pred, y))
        fluid.optimizer.Adam(learning_rate=0.05).minimize(loss)
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    rng = np.random.RandomState(0)
    feed = {f"x{t}": rng.randn(16, 3).astype("float32") for t in range(3)}
    feed["y"] = (feed["x0"][:, :1] * feed["x2"][:, 1:2]).astype("float32")
    losses = [float(exe.run(main, feed=feed, fetch_list=[loss])[0][0]) for _ in range(40)]
    assert losses[-1] < 0.5 * losses[0], losses


def test_lod_passes_through_l2_normalize_prelu_mod_and_clip_by_norm():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data(name="x", shape=[3], dtype="float32", lod_level=1)
        two = fluid.layers.fill_constant([1], "float32", 2.0)
        h = fluid.layers.prelu(fluid.layers.l2_normalize(x, axis=1), mode="all")
        h = fluid.layers.clip_by_norm(fluid.layers.elementwise_mod(h, two), max_norm=10.0)
        pooled = fluid.layers.sequence_pool(h, "sum")
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    got, = exe.run(main, feed={"x": _lod(np.ones((5, 3)), [2, 3])}, fetch_list=[pooled])
    np.testing.assert_allclose(got, np.array([[2.0], [3.0]]) / np.sqrt(3) * np.ones(3),
                               rtol=1e-5)
