"""warpctc: Fluid 1.6's CTC loss in both layouts (LoD and padded), against a brute-force sum
over every alignment, with gradients vs finite differences and a small training run;
ctc_align and the greedy decoder."""

import itertools

import numpy as np
import pytest

import parafluid as fluid
from parafluid.testing import OpCase, check_op, rand

C = 4  # classes, the blank included


def _collapse(path, blank):
    out, prev = [], None
    for p in path:
        if p != prev and p != blank:
            out.append(p)
        prev = p
    return out


def ctc_brute_force(logits, label, blank):
    """-log of the summed probability of every path of len(logits) steps that collapses
    (merge repeats, drop blanks) to ``label``; softmax over the classes first."""
    z = logits - logits.max(1, keepdims=True)
    prob = np.exp(z) / np.exp(z).sum(1, keepdims=True)
    total = 0.0
    for path in itertools.product(range(logits.shape[1]), repeat=logits.shape[0]):
        if _collapse(path, blank) == list(label):
            total += np.prod([prob[t, p] for t, p in enumerate(path)])
    return -np.log(total)


LOGIT_OFFS, LABEL_OFFS = [0, 3, 7, 9], [0, 2, 4, 5]
LOD_X = rand(9, C, seed=71, low=-2.0, high=2.0)
LOD_Y = np.array([[1], [2], [3], [3], [2]], "int32")   # [1, 2], [3, 3], [2]


def lod_ref(blank):
    def ref(Logits, Label, attrs=None):
        out = [ctc_brute_force(Logits[a:b], Label[c:d, 0], blank)
               for a, b, c, d in zip(LOGIT_OFFS, LOGIT_OFFS[1:], LABEL_OFFS, LABEL_OFFS[1:])]
        return {"Loss": np.array(out).reshape(-1, 1)}
    return ref


PAD_T, PAD_LEN, PAD_LABEL_LEN = 4, np.array([4, 2, 3], "int64"), np.array([2, 1, 2], "int64")
PAD_X = rand(PAD_T, 3, C, seed=72, low=-2.0, high=2.0)
# blank 3; [0, 2], [1], [2, 2] packed one after another, as Fluid 1.6's padded form takes them
PAD_Y = np.array([[0], [2], [1], [2], [2]], "int64")


def pad_ref(Logits, Label, LogitsLength, LabelLength):
    offs = np.concatenate([[0], np.cumsum(LabelLength)])
    out = [ctc_brute_force(Logits[:LogitsLength[i], i], Label[offs[i]:offs[i + 1], 0], 3)
           for i in range(Logits.shape[1])]
    return {"Loss": np.array(out).reshape(-1, 1)}


def _lod(rows, lengths, dtype="float32"):
    return fluid.create_lod_tensor(np.asarray(rows, dtype), [lengths], fluid.CPUPlace())


CTC_CASES = [
    OpCase("warpctc", {"Logits": LOD_X, "Label": LOD_Y}, ref=lod_ref(0),
           lod={"Logits": [LOGIT_OFFS], "Label": [LABEL_OFFS]}, grad=["Logits"],
           grad_outputs=["Loss"], id="lod"),
    OpCase("warpctc", {"Logits": LOD_X, "Label": LOD_Y - 1}, ref=lod_ref(3),
           attrs={"blank": 3}, lod={"Logits": [LOGIT_OFFS], "Label": [LABEL_OFFS]},
           grad=["Logits"], grad_outputs=["Loss"], id="lod_blank_last"),
    OpCase("warpctc", {"Logits": PAD_X, "Label": PAD_Y, "LogitsLength": PAD_LEN,
                       "LabelLength": PAD_LABEL_LEN}, ref=pad_ref, attrs={"blank": 3},
           grad=["Logits"], grad_outputs=["Loss"], id="padded"),
    OpCase("ctc_align", {"Input": np.array([[0], [2], [2], [0], [2], [1], [1], [0], [0]],
                                           "int64")}, attrs={"blank": 0},
           ref=lambda Input: {"Output": np.array([[2], [2], [1], ], "int64")},
           lod={"Input": [[0, 5, 7, 9]]}),
]


@pytest.mark.parametrize("case", CTC_CASES, ids=str)
def test_warpctc_op(case):
    check_op(case)


def _run_padded(norm_by_times):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.data(name="x", shape=[PAD_T, 3, C], dtype="float64")
        x.stop_gradient = False
        y = fluid.data(name="y", shape=[5, 1], dtype="int64")
        xl = fluid.data(name="xl", shape=[3], dtype="int64")
        yl = fluid.data(name="yl", shape=[3], dtype="int64")
        loss = fluid.layers.warpctc(x, y, blank=3, norm_by_times=norm_by_times,
                                    input_length=xl, label_length=yl)
        total = fluid.layers.reduce_sum(loss)
        grad, = fluid.backward.gradients([total], [x])
    exe = fluid.Executor(fluid.CPUPlace())
    return exe.run(main, feed={"x": PAD_X, "y": PAD_Y, "xl": PAD_LEN, "yl": PAD_LABEL_LEN},
                   fetch_list=[loss, grad])


def test_norm_by_times_scales_the_gradient_not_the_loss():
    loss, grad = _run_padded(False)
    loss_n, grad_n = _run_padded(True)
    np.testing.assert_allclose(loss_n, loss)
    np.testing.assert_allclose(grad_n, grad / PAD_LEN.reshape(1, 3, 1), rtol=1e-12)
    assert np.all(grad[2:, 1] == 0)                     # steps past a sequence's length
    np.testing.assert_allclose(grad[:2, 1].sum(-1), 0, atol=1e-12)   # softmax: rows sum to 0


def test_warpctc_errors_name_the_problem():
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        x = fluid.data(name="x", shape=[None, C], dtype="float32", lod_level=1)
        y = fluid.data(name="y", shape=[None, 1], dtype="int64", lod_level=1)
        with pytest.raises(ValueError, match=r"blank must be in \[0, 4\)"):
            fluid.layers.warpctc(x, y, blank=4)
        with pytest.raises(ValueError, match="give both input_length and label_length"):
            fluid.layers.warpctc(x, y, input_length=y)
        loss = fluid.layers.warpctc(x, y)
    exe = fluid.Executor(fluid.CPUPlace())
    xs = fluid.create_lod_tensor(np.zeros([3, C], "float32"), [[3]], fluid.CPUPlace())
    ys = fluid.create_lod_tensor(np.array([[1], [0]], "int64"), [[2]], fluid.CPUPlace())
    with pytest.raises(Exception, match=r"holds the blank token 0: \[1, 0\]"):
        exe.run(main, feed={"x": xs, "y": ys}, fetch_list=[loss])
    two = fluid.create_lod_tensor(np.array([[1], [2]], "int64"), [[1, 1]], fluid.CPUPlace())
    with pytest.raises(Exception, match="Logits holds 1 sequences but Label 2"):
        exe.run(main, feed={"x": xs, "y": two}, fetch_list=[loss])


def test_ctc_recognizer_learns():
    """A tiny OCR-style model: per-step features -> fc -> warpctc over LoD, Adam; the mean
    loss drops by well over half."""
    rng = np.random.RandomState(5)
    feat, classes = 6, 5   # tokens 1..4, blank 0
    codebook = rng.normal(0, 1, (classes, feat)).astype("float32")
    lengths, labels, steps = [], [], []
    for _ in range(8):
        tokens = list(rng.randint(1, classes, rng.randint(1, 4)))
        frames = []
        for tok in tokens:   # each token shown for 2 frames, then a blank frame
            frames += [tok, tok, 0]
        steps.append(codebook[frames] + rng.normal(0, 0.1, (len(frames), feat)))
        labels += tokens
        lengths.append(len(tokens))
    x = fluid.create_lod_tensor(np.concatenate(steps).astype("float32"),
                                [[len(s) for s in steps]], fluid.CPUPlace())
    y = fluid.create_lod_tensor(np.array(labels, "int32").reshape(-1, 1), [lengths],
                                fluid.CPUPlace())
    main, startup = fluid.Program(), fluid.Program()
    startup.random_seed = 3
    with fluid.program_guard(main, startup):
        frames = fluid.layers.data(name="x", shape=[feat], dtype="float32", lod_level=1)
        label = fluid.layers.data(name="y", shape=[1], dtype="int32", lod_level=1)
        hidden = fluid.layers.fc(frames, size=16, act="tanh")
        logits = fluid.layers.fc(hidden, size=classes)
        cost = fluid.layers.mean(fluid.layers.warpctc(logits, label, blank=0,
                                                      norm_by_times=True))
        fluid.optimizer.Adam(learning_rate=0.05).minimize(cost)
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    losses = [float(exe.run(main, feed={"x": x, "y": y}, fetch_list=[cost])[0])
              for _ in range(60)]
    assert np.isfinite(losses).all()
    assert losses[-1] < 0.3 * losses[0], losses[::10]


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
