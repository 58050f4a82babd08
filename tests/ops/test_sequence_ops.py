"""Op table: sequence ops over LoD inputs (sequence_pool, sequence_softmax, sequence_expand,
sequence_concat, sequence_reshape, sequence_conv), and LoD passing through ordinary ops."""

import numpy as np
import pytest

import parafluid as fluid
from parafluid.testing import OpCase, check_op, rand, run_layers

OFFS = [0, 2, 2, 5, 6]  # four sequences of 2, 0, 3 and 1 steps
X = rand(6, 3, seed=3)


def seqs(x, offs):
    return [x[a:b] for a, b in zip(offs, offs[1:])]


def pool_ref(kind):
    def ref(X, attrs):
        rows = []
        for s in seqs(X, OFFS):
            if len(s) == 0:
                rows.append(np.full(X.shape[1:], attrs["pad_value"]))
            elif kind == "SUM":
                rows.append(s.sum(0))
            elif kind == "AVERAGE":
                rows.append(s.mean(0))
            elif kind == "SQRT":
                rows.append(s.sum(0) / np.sqrt(len(s)))
            elif kind == "MAX":
                rows.append(s.max(0))
            elif kind == "FIRST":
                rows.append(s[0])
            else:
                rows.append(s[-1])
        return {"Out": np.stack(rows)}
    return ref


def softmax_ref(X):
    out = []
    for s in seqs(X.reshape(-1), OFFS):
        e = np.exp(s - s.max()) if len(s) else s
        out.append(e / e.sum() if len(s) else s)
    return {"Out": np.concatenate(out).reshape(X.shape)}


def expand_ref(X, Y):
    y_off = [0, 1, 4, 6]
    reps = np.diff(y_off)
    return {"Out": np.repeat(X, reps, axis=0)}


def expand_lod_ref(X, Y):
    x_seqs = seqs(X, [0, 2, 3])
    reps = np.diff([0, 2, 3])
    return {"Out": np.concatenate([s for s, r in zip(x_seqs, reps) for _ in range(r)])}


A, B = rand(5, 2, seed=4), rand(3, 2, seed=5)


def concat_ref(X):
    a, b = seqs(X[0], [0, 3, 5]), seqs(X[1], [0, 1, 3])
    return {"Out": np.concatenate([a[0], b[0], a[1], b[1]])}


def conv_ref(X, Filter, attrs):
    length, start = attrs["contextLength"], attrs["contextStart"]
    cols = []
    for a, b in zip(OFFS, OFFS[1:]):
        for t in range(a, b):
            row = []
            for k in range(length):
                src = t + start + k
                row.append(X[src] if a <= src < b else np.zeros(X.shape[1]))
            cols.append(np.concatenate(row))
    return {"Out": np.stack(cols) @ Filter}


CASES = [OpCase("sequence_pool", {"X": X}, attrs={"pooltype": k, "pad_value": 0.5},
                ref=pool_ref(k), lod={"X": [OFFS]}, grad=["X"], grad_outputs=["Out"],
                id=f"sequence_pool_{k.lower()}")
         for k in ("SUM", "AVERAGE", "SQRT", "MAX", "FIRST", "LAST")]
CASES += [
    OpCase("sequence_softmax", {"X": rand(6, 1, seed=7)}, ref=softmax_ref, lod={"X": [OFFS]},
           grad=["X"]),
    OpCase("sequence_expand", {"X": rand(3, 2, seed=8), "Y": rand(6, 1, seed=9)},
           ref=expand_ref, lod={"Y": [[0, 1, 4, 6]]}, grad=["X"], id="sequence_expand_rows"),
    OpCase("sequence_expand", {"X": rand(3, 2, seed=8), "Y": rand(3, 1, seed=9)},
           ref=expand_lod_ref, lod={"X": [[0, 2, 3]], "Y": [[0, 2, 3]]}, grad=["X"],
           id="sequence_expand_seqs"),
    OpCase("sequence_concat", {"X": [A, B]}, ref=concat_ref,
           lod={"X": [[[0, 3, 5]], [[0, 1, 3]]]}, grad=["X"]),
    OpCase("sequence_reshape", {"X": rand(6, 2, seed=10)}, attrs={"new_dim": 4},
           ref=lambda X: {"Out": X.reshape(-1, 4)}, lod={"X": [[0, 2, 6]]}, grad=["X"]),
    OpCase("sequence_conv", {"X": X, "Filter": rand(9, 4, seed=11)},
           attrs={"contextLength": 3, "contextStart": -1}, ref=conv_ref, lod={"X": [OFFS]},
           grad=["X", "Filter"]),
    OpCase("sequence_conv", {"X": X, "Filter": rand(6, 2, seed=12)},
           attrs={"contextLength": 2, "contextStart": 0}, ref=conv_ref, lod={"X": [OFFS]},
           grad=["X", "Filter"], id="sequence_conv_causal"),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_sequence_op(case):
    check_op(case)




def test_lod_passes_through_embedding_fc_and_activation():
    """embedding -> fc -> relu keep the ids' sequences, so sequence_pool pools per sentence."""
    ids = fluid.create_lod_tensor(np.array([[1], [2], [3], [4], [0]], "int64"), [[2, 3]],
                                  fluid.CPUPlace())

    def build():
        words = fluid.layers.data(name="words", shape=[1], dtype="int64", lod_level=1)
        emb = fluid.layers.embedding(words, size=[5, 4])
        h = fluid.layers.fc(emb, size=3, act="relu")
        return [h, fluid.layers.sequence_pool(h, "sum")]

    h, pooled = run_layers(build, {"words": ids})
    np.testing.assert_allclose(pooled, np.stack([h[:2].sum(0), h[2:].sum(0)]), rtol=1e-6)


def test_lod_passes_through_one_and_two_input_ops_bound_on_the_hot_path():
    """scale (one input) and elementwise_mul (two) hand X's sequences on to sequence_pool;
    an elementwise_add whose X is dense and whose Y carries the LoD still computes."""
    x = fluid.create_lod_tensor(np.arange(10, dtype="float32").reshape(5, 2), [[1, 4]],
                                fluid.CPUPlace())
    dense = np.ones((5, 2), "float32")

    def build():
        xs = fluid.layers.data(name="xs", shape=[2], dtype="float32", lod_level=1)
        d = fluid.layers.data(name="d", shape=[2], dtype="float32")
        h = fluid.layers.elementwise_mul(fluid.layers.scale(xs, scale=2.0), d)
        return [fluid.layers.sequence_pool(h, "sum"), fluid.layers.elementwise_add(d, h)]

    pooled, added = run_layers(build, {"xs": x, "d": dense})
    h = np.arange(10, dtype="float32").reshape(5, 2) * 2.0
    np.testing.assert_allclose(pooled, np.stack([h[:1].sum(0), h[1:].sum(0)]), rtol=1e-6)
    np.testing.assert_allclose(added, h + 1.0, rtol=1e-6)


def test_sequence_op_without_lod_says_how_to_feed():
    def build():
        x = fluid.layers.data(name="x", shape=[3], dtype="float32", lod_level=1)
        return [fluid.layers.sequence_pool(x, "sum")]

    with pytest.raises(fluid.OpRunError, match="create_lod_tensor"):
        run_layers(build, {"x": np.ones((4, 3), "float32")})


def test_sequence_reshape_rejects_an_uneven_sequence():
    case = OpCase("sequence_reshape", {"X": rand(3, 2)}, attrs={"new_dim": 4},
                  lod={"X": [[0, 1, 3]]})
    with pytest.raises(fluid.OpRunError, match="does not divide into rows of new_dim=4"):
        check_op(case)


def test_bad_lod_is_rejected_at_feed():
    t = fluid.LoDTensor()
    t.set(np.ones((4, 3), "float32"))
    t.set_lod([[0, 2, 3]])

    def build():
        x = fluid.layers.data(name="x", shape=[3], dtype="float32", lod_level=1)
        return [fluid.layers.sequence_pool(x, "sum")]

    with pytest.raises(ValueError, match=r"ends at 3 but must cover the 4 rows"):
        run_layers(build, {"x": t})


def pad_ref(X, PadValue):
    rows = seqs(X, OFFS)
    out = np.full((4, 3, X.shape[1]), PadValue[0])
    for i, s in enumerate(rows):
        out[i, :len(s)] = s
    return {"Out": out, "Length": np.array([len(s) for s in rows], "int64")}


PADDED = rand(3, 4, 2, seed=13)
MORE_CASES = [
    OpCase("sequence_expand_as", {"X": rand(4, 2, seed=14), "Y": rand(6, 1)},
           ref=lambda X, Y: {"Out": np.repeat(X, np.diff(OFFS), axis=0)}, lod={"Y": [OFFS]},
           grad=["X"]),
    OpCase("sequence_pad", {"X": X, "PadValue": np.array([-1.0])}, ref=pad_ref,
           lod={"X": [OFFS]}, grad=["X"], grad_outputs=["Out"]),
    OpCase("sequence_pad", {"X": X, "PadValue": np.array([0.5])}, attrs={"padded_length": 5},
           ref=lambda X, PadValue: {"Out": np.concatenate(
               [pad_ref(X, PadValue)["Out"], np.full((4, 2, 3), 0.5)], 1)},
           lod={"X": [OFFS]}, grad=["X"], grad_outputs=["Out"], id="sequence_pad_maxlen"),
    OpCase("sequence_unpad", {"X": PADDED, "Length": np.array([2, 0, 4], "int64")},
           ref=lambda X, Length: {"Out": np.concatenate([X[0, :2], X[2, :4]])}, grad=["X"]),
    OpCase("sequence_mask", {"X": np.array([[3], [0], [1]], "int64")},
           attrs={"maxlen": 4, "out_dtype": "float32"},
           ref=lambda X: {"Y": (np.arange(4) < X[..., None]).astype("float32")}),
    OpCase("lod_reset", {"X": X}, attrs={"target_lod": [0, 1, 6]}, ref=lambda X: {"Out": X},
           grad=["X"]),
]


@pytest.mark.parametrize("case", MORE_CASES, ids=str)
def test_more_sequence_ops(case):
    check_op(case)


def test_pad_then_unpad_and_lod_reset_round_trip():
    """sequence_pad -> sequence_unpad gives back the sequences; lod_reset re-cuts them."""
    ids = fluid.create_lod_tensor(np.arange(6, dtype="float32").reshape(6, 1), [[2, 4]],
                                  fluid.CPUPlace())

    def build():
        x = fluid.layers.data(name="x", shape=[1], dtype="float32", lod_level=1)
        pad = fluid.layers.fill_constant([1], "float32", 0.0)
        padded, length = fluid.layers.sequence_pad(x, pad_value=pad)
        back = fluid.layers.sequence_unpad(padded, length)
        recut = fluid.layers.lod_reset(back, target_lod=[0, 3, 6])
        return [padded, length, fluid.layers.sequence_pool(back, "sum"),
                fluid.layers.sequence_pool(recut, "sum"),
                fluid.layers.sequence_mask(length, dtype="int64")]

    padded, length, sums, recut_sums, mask = run_layers(build, {"x": ids})
    assert padded.shape == (2, 4, 1) and length.tolist() == [2, 4]
    assert sums[:, 0].tolist() == [1.0, 14.0] and recut_sums[:, 0].tolist() == [3.0, 12.0]
    assert mask.tolist() == [[1, 1, 0, 0], [1, 1, 1, 1]]

def _lod(rows, lengths, dtype="float32"):
    return fluid.create_lod_tensor(np.asarray(rows, dtype), [lengths], fluid.CPUPlace())


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
