"""Op table: losses over class scores (cross_entropy, softmax_with_cross_entropy, sigmoid CE,
log_loss, kldiv_loss, bpr_loss, teacher_student_sigmoid_loss, label_smooth), hsigmoid / nce,
and the loss layers."""

import re

import numpy as np
import pytest

import parafluid as fluid
from parafluid.testing import OpCase, check_op, rand, run_layers, run_op


def softmax(z, axis=-1):
    e = np.exp(z - z.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


PROBS = softmax(rand(4, 5, low=-2, high=2))

SOFT = softmax(rand(4, 5, seed=9))

LABEL = np.array([[0], [2], [4], [1]], "int64")


def ce_ref(X, Label, attrs):
    if attrs["soft_label"]:
        return {"Y": -(Label * np.log(X)).sum(-1, keepdims=True)}
    picked = np.take_along_axis(X, np.where(Label == attrs["ignore_index"], 0, Label), -1)
    return {"Y": np.where(Label == attrs["ignore_index"], 0.0, -np.log(picked))}


def ce2_ref(X, Label, attrs):
    ignored = Label == attrs["ignore_index"]
    picked = np.take_along_axis(X, np.where(ignored, 0, Label), -1)
    return {"Y": np.where(ignored, 0.0, -np.log(picked)), "MatchX": np.where(ignored, 0.0, picked),
            "XShape": np.zeros((0, *X.shape), X.dtype)}


def sce_ref(Logits, Label, attrs):
    axis = attrs["axis"]
    sm = softmax(Logits, axis)
    if attrs["soft_label"]:
        loss = -(Label * np.log(sm)).sum(axis, keepdims=True)
    else:
        ignored = Label == attrs["ignore_index"]
        picked = np.take_along_axis(sm, np.where(ignored, 0, Label), axis)
        loss = np.where(ignored, 0.0, -np.log(picked))
    return {"Softmax": sm, "Loss": loss}


def kldiv_ref(X, Target, attrs):
    loss = np.where(Target > 0, Target * (np.log(np.where(Target > 0, Target, 1)) - X), 0)
    red = attrs["reduction"]
    if red == "none":
        return {"Loss": loss}
    div = {"batchmean": len(X), "mean": X.size, "sum": 1}[red]
    return {"Loss": np.array([loss.sum() / div])}


def bpr_ref(X, Label):
    n, c = X.shape
    out = np.zeros((n, 1))
    for i in range(n):
        lab = Label[i, 0]
        out[i] = -sum(np.log(1 / (1 + np.exp(-(X[i, lab] - X[i, j]))))
                      for j in range(c) if j != lab) / (c - 1)
    return {"Y": out}


def ts_ref(X, Label):
    """Fluid's kernel, case by case."""
    sp = np.log1p(np.exp(-np.abs(X))) + np.maximum(X, 0)
    y = np.where(Label < -1, sp, np.where(Label < 0, sp - X,
                                          np.where(Label < 1, 2 * sp - X * Label,
                                                   2 * sp - X - X * (Label - 1))))
    return {"Y": y}


KL_TARGET = np.abs(rand(3, 4, seed=5)) * np.array([1, 0, 1, 1])  # some zero targets


def _run_layers(build, feed):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        outs = build()
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.Scope()
    exe.run(startup, scope=scope)
    return main, exe.run(main, feed=feed, fetch_list=list(outs), scope=scope)


def _sig(x):
    return 1 / (1 + np.exp(-x))


LOGITS = rand(4, 3, low=-3, high=3, seed=21)

TARGET = rand(4, 3, low=0, high=1, seed=22)

TARGET_IGN = TARGET.copy()

TARGET_IGN[1, 2] = -100

EXTRA_CASES = [
    OpCase("sigmoid_cross_entropy_with_logits", {"X": LOGITS, "Label": TARGET},
           ref=lambda X, Label: {"Out": -Label * np.log(_sig(X)) - (1 - Label) * np.log(
               1 - _sig(X))}, grad=["X"]),
    OpCase("sigmoid_cross_entropy_with_logits", {"X": LOGITS, "Label": TARGET_IGN},
           attrs={"normalize": True},
           ref=lambda X, Label: {"Out": np.where(
               Label == -100, 0.0, -Label * np.log(_sig(X)) - (1 - Label) * np.log(
                   1 - _sig(X))) / 11}, grad=["X"], id="sigmoid_ce_ignore_normalize"),
    OpCase("log_loss", {"Predicted": _sig(LOGITS), "Labels": TARGET}, attrs={"epsilon": 1e-4},
           ref=lambda Predicted, Labels: {"Loss": -Labels * np.log(Predicted + 1e-4) - (
               1 - Labels) * np.log(1 - Predicted + 1e-4)}, grad=["Predicted"]),
    OpCase("label_smooth", {"X": np.eye(4)[[0, 2, 3]]}, attrs={"epsilon": 0.1},
           ref=lambda X: {"Out": 0.9 * X + 0.025}, grad=["X"]),
    OpCase("label_smooth", {"X": np.eye(3)[[0, 2]], "PriorDist": np.array([[0.5, 0.3, 0.2]])},
           attrs={"epsilon": 0.2}, ref=lambda X, PriorDist: {"Out": 0.8 * X + 0.2 * PriorDist},
           grad=["X"], id="label_smooth_prior"),
]


def hsig_ref(X, W, Label, Bias, attrs):
    """Fluid's default tree, written out: leaf c + C of a heap, nodes (code >> (j+1)) - 1.
    The ids are the first N = rows(X) of Label's buffer (a [N, 1] Label: all of them)."""
    classes = attrs["num_classes"]
    length = (classes - 1).bit_length()
    out, pre_out = np.zeros((X.shape[0], 1)), np.zeros((X.shape[0], length))
    for i, c in enumerate(Label.reshape(-1)[:X.shape[0]]):
        code = int(c) + classes
        for j in range(code.bit_length() - 1):
            node, bit = (code >> (j + 1)) - 1, (code >> j) & 1
            pre = np.clip(W[node] @ X[i] + Bias[node, 0], -40, 40)
            pre_out[i, j] = pre
            out[i] -= bit * pre
        out[i] += np.log1p(np.exp(pre_out[i])).sum()  # padding adds log 2, as Fluid
    return {"Out": out, "PreOut": np.log1p(np.exp(pre_out))}  # Fluid keeps the softplus


HSIG_CASES = [
    OpCase("hierarchical_sigmoid",
           {"X": rand(5, 4, seed=31), "W": rand(5, 4, seed=32),
            "Label": np.array([[0], [5], [3], [2], [5]], "int64"), "Bias": rand(5, 1, seed=33)},
           attrs={"num_classes": 6}, ref=hsig_ref, grad=["X", "W", "Bias"],
           grad_outputs=["Out"]),
]


def nce_check(got, attrs):
    """The cost from the returned samples (random negatives), as Fluid defines it."""
    labels, o = got["SampleLabels"], got["SampleLogits"]
    assert labels.shape == (4, 4) and (labels[:, 0] == NCE_LABEL[:, 0]).all()
    assert labels.min() >= 0 and labels.max() < 7
    z = np.einsum("nkd,nd->nk", NCE_W[labels], NCE_X) + NCE_B[labels, 0]
    np.testing.assert_allclose(o, _sig(z), rtol=1e-6)
    q = 3 / 7
    want = -np.log(o[:, :1] / (o[:, :1] + q)).sum(1) - np.log(q / (o[:, 1:] + q)).sum(1)
    np.testing.assert_allclose(got["Cost"][:, 0], want, rtol=1e-6)


NCE_X, NCE_W, NCE_B = rand(4, 5, seed=41), rand(7, 5, seed=42), rand(7, 1, seed=43)

NCE_LABEL = np.array([[1], [6], [0], [3]], "int64")

NCE_CASES = [
    OpCase("nce", {"Input": NCE_X, "Label": NCE_LABEL, "Weight": NCE_W, "Bias": NCE_B},
           attrs={"num_total_classes": 7, "num_neg_samples": 3, "seed": 5}, check=nce_check,
           grad=["Input", "Weight", "Bias"], grad_outputs=["Cost"]),
    OpCase("nce", {"Input": NCE_X, "Label": NCE_LABEL, "Weight": NCE_W, "Bias": NCE_B,
                   "SampleWeight": rand(4, 1, low=0.5, high=2, seed=44)},
           attrs={"num_total_classes": 7, "num_neg_samples": 2, "seed": 6,
                  "sampler": "log_uniform"},
           grad=["Input", "Weight", "Bias"], grad_outputs=["Cost"], id="nce_log_uniform"),
]

CASES = [
    OpCase("cross_entropy", {"X": PROBS, "Label": LABEL}, ref=ce_ref, grad=["X"]),
    OpCase("cross_entropy", {"X": PROBS, "Label": np.array([[0], [2], [3], [2]], "int64")},
           attrs={"ignore_index": 2}, ref=ce_ref, grad=["X"], id="cross_entropy_ignore"),
    OpCase("cross_entropy", {"X": PROBS, "Label": SOFT}, attrs={"soft_label": True},
           ref=ce_ref, grad=["X"], id="cross_entropy_soft"),
    OpCase("cross_entropy", {"X": softmax(rand(2, 3, 4)),
                             "Label": np.array([[[0], [3], [1]], [[2], [2], [0]]], "int64")},
           ref=ce_ref, grad=["X"], id="cross_entropy_3d"),
    OpCase("cross_entropy2", {"X": PROBS, "Label": LABEL}, ref=ce2_ref, grad=["X"],
           grad_outputs=["Y"]),
    OpCase("cross_entropy2", {"X": PROBS, "Label": np.array([[0], [2], [3], [2]], "int64")},
           attrs={"ignore_index": 2}, ref=ce2_ref, grad=["X"], grad_outputs=["Y"],
           id="cross_entropy2_ignore"),
    OpCase("cross_entropy2", {"X": softmax(rand(2, 3, 4)),
                              "Label": np.array([[[0], [3], [1]], [[2], [2], [0]]], "int64")},
           ref=ce2_ref, grad=["X"], grad_outputs=["Y"], id="cross_entropy2_3d"),
    OpCase("softmax_with_cross_entropy", {"Logits": rand(4, 5, low=-3, high=3),
                                          "Label": LABEL}, ref=sce_ref, grad=["Logits"]),
    OpCase("softmax_with_cross_entropy", {"Logits": rand(4, 5, low=-3, high=3),
                                          "Label": LABEL},
           ref=sce_ref, grad=["Logits"], grad_outputs=["Loss"], id="sce_loss_only"),
    OpCase("softmax_with_cross_entropy", {"Logits": rand(4, 5), "Label": SOFT},
           attrs={"soft_label": True}, ref=sce_ref, grad=["Logits"], grad_outputs=["Loss"],
           id="sce_soft"),
    OpCase("softmax_with_cross_entropy", {"Logits": rand(4, 5), "Label": SOFT * 1.7},
           attrs={"soft_label": True}, ref=sce_ref, grad=["Logits"],
           id="sce_soft_unnormalized"),
    OpCase("softmax_with_cross_entropy", {"Logits": rand(4, 5),
                                          "Label": np.array([[1], [-1], [4], [-1]], "int64")},
           attrs={"ignore_index": -1}, ref=sce_ref, grad=["Logits"], id="sce_ignore"),
    OpCase("softmax_with_cross_entropy",
           {"Logits": rand(2, 4, 3), "Label": np.array([[[0, 3, 1]], [[2, 2, 0]]], "int64")},
           attrs={"axis": 1}, ref=sce_ref, grad=["Logits"], id="sce_axis1"),
    OpCase("kldiv_loss", {"X": rand(3, 4), "Target": KL_TARGET}, ref=kldiv_ref, grad=["X"]),
    OpCase("kldiv_loss", {"X": rand(3, 4), "Target": KL_TARGET},
           attrs={"reduction": "batchmean"}, ref=kldiv_ref, grad=["X"],
           id="kldiv_loss_batchmean"),
    OpCase("kldiv_loss", {"X": rand(3, 4), "Target": KL_TARGET}, attrs={"reduction": "none"},
           ref=kldiv_ref, grad=["X"], id="kldiv_loss_none"),
    OpCase("teacher_student_sigmoid_loss",
           {"X": np.array([[0.3], [-1.2], [2.0], [0.7], [-0.4]]),
            "Label": np.array([[-2.0], [-1.0], [0.3], [1.6], [0.0]])},
           ref=ts_ref, grad=["X"]),
    OpCase("bpr_loss", {"X": rand(4, 5), "Label": np.array([[0], [3], [4], [1]], "int64")},
           ref=bpr_ref, grad=["X"]),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_op(case):
    check_op(case)


@pytest.mark.parametrize("op,inputs,attrs,message", [
    ("cross_entropy", {"X": PROBS, "Label": np.array([[0], [5], [1], [1]], "int64")}, {},
     "label 5 is out of range for 5 classes"),
    ("softmax_with_cross_entropy",
     {"Logits": PROBS, "Label": np.array([[0], [-3], [1], [1]], "int64")}, {},
     "label -3 is out of range for 5 classes"),
    # the dtype is checked when the kernel runs, as in Fluid (the program builds)
    ("cross_entropy", {"X": PROBS, "Label": LABEL.astype("float64")}, {},
     "cross_entropy: Label must be int64 class ids when soft_label=False, got float64"),
    ("softmax_with_cross_entropy", {"Logits": PROBS, "Label": LABEL.astype("float32")}, {},
     "Label must be int64 class ids when soft_label=False, got float32"),
])
def test_label_out_of_range(op, inputs, attrs, message):
    with pytest.raises(fluid.OpRunError, match=re.escape(message)):
        run_op(OpCase(op, inputs, attrs=attrs))


@pytest.mark.parametrize("op,inputs,attrs,message", [
    ("cross_entropy", {"X": PROBS, "Label": np.zeros((4, 2), "int64")}, {},
     "Label must have shape [4, 1]"),
    ("softmax_with_cross_entropy", {"Logits": PROBS, "Label": LABEL}, {"soft_label": True},
     "Label must have the shape of the input"),
    ("softmax_with_cross_entropy", {"Logits": PROBS, "Label": LABEL}, {"axis": 2},
     "axis 2 is out of range"),
])
def test_bad_labels_name_the_op(op, inputs, attrs, message):
    with pytest.raises((ValueError, TypeError), match=r"(?s)" + op + ".*" + re.escape(message)):
        run_op(OpCase(op, inputs, attrs=attrs))


def test_loss_layers_build_and_compute():
    x_np = rand(4, 5, seed=2).astype("float32")
    y_np = rand(4, 5, seed=3).astype("float32")

    def build():
        x = fluid.layers.data(name="x", shape=[5], dtype="float32")
        y = fluid.layers.data(name="y", shape=[5], dtype="float32")
        label = fluid.layers.data(name="label", shape=[1], dtype="int64")
        sq = fluid.layers.square_error_cost(x, y)
        loss, sm = fluid.layers.softmax_with_cross_entropy(x, label, return_softmax=True)
        ce = fluid.layers.cross_entropy(sm, label)
        acc = fluid.layers.accuracy(input=x, label=label, k=1)
        return sq, loss, sm, ce, acc

    main, (sq, loss, sm, ce, acc) = _run_layers(
        build, {"x": x_np, "y": y_np, "label": LABEL})
    np.testing.assert_allclose(sq, (x_np - y_np) ** 2, rtol=1e-6)
    np.testing.assert_allclose(sm, softmax(x_np.astype("float64")), rtol=1e-5)
    np.testing.assert_allclose(loss, ce, rtol=1e-5)
    assert loss.shape == (4, 1)
    want = (x_np.argmax(1) == LABEL[:, 0]).mean()
    np.testing.assert_allclose(acc, [want])
    types = [op.type for op in main.global_block().ops]
    assert types == ["elementwise_sub", "square", "softmax_with_cross_entropy",
                     "cross_entropy2", "accuracy"]


@pytest.mark.parametrize("case", EXTRA_CASES, ids=str)
def test_more_loss_ops(case):
    check_op(case)


@pytest.mark.parametrize("case", HSIG_CASES, ids=str)
def test_hsigmoid_op(case):
    check_op(case)


def test_hsigmoid_layer_trains_word_prediction():
    rng = np.random.RandomState(0)
    x = rng.normal(size=(32, 8)).astype("float32")
    y = (np.abs(x[:, :3]).argmax(1) * 2 + (x[:, 0] > 0)).reshape(-1, 1).astype("int64")

    def build():
        xv = fluid.layers.data(name="x", shape=[8], dtype="float32")
        yv = fluid.layers.data(name="y", shape=[1], dtype="int64")
        cost = fluid.layers.mean(fluid.layers.hsigmoid(input=xv, label=yv, num_classes=6))
        fluid.optimizer.Adam(learning_rate=0.1).minimize(cost)
        return [cost]

    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        cost = build()[0]
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    losses = [float(exe.run(main, feed={"x": x, "y": y}, fetch_list=[cost], scope=scope)[0])
              for _ in range(30)]
    assert losses[-1] < losses[0] * 0.6, losses


@pytest.mark.parametrize("case", NCE_CASES, ids=str)
def test_nce_op(case):
    check_op(case)


def test_teacher_student_gradient_is_zero_beyond_the_bounds():
    case = OpCase("teacher_student_sigmoid_loss_grad",
                  {"X": np.array([[16.0], [-15.0], [3.0]]), "Label": np.array([[1.5]] * 3),
                   "Y@GRAD": np.ones((3, 1))}, outputs=["X@GRAD"])
    got = run_op(case)["X@GRAD"]
    np.testing.assert_allclose(got, [[0.0], [0.0], [2 / (1 + np.exp(-3.0)) - 1.5]])


def test_dice_loss_matches_numpy():
    prob = np.random.RandomState(0).dirichlet(np.ones(3), size=(2, 4)).astype("float32")
    label = np.random.RandomState(1).randint(0, 3, (2, 4, 1)).astype("int64")

    def build():
        p = fluid.layers.data(name="p", shape=[4, 3], dtype="float32")
        y = fluid.layers.data(name="y", shape=[4, 1], dtype="int64")
        return [fluid.layers.dice_loss(p, y)]

    got, = run_layers(build, {"p": prob, "y": label})
    onehot = np.eye(3)[label[..., 0]]
    inse = (prob * onehot).sum((1, 2))
    want = (1 - 2 * inse / (prob.sum((1, 2)) + onehot.sum((1, 2)) + 1e-5)).mean()
    np.testing.assert_allclose(got, [want], rtol=1e-5)


def test_npair_loss_matches_numpy():
    rng = np.random.RandomState(2)
    a, p = rng.randn(4, 3).astype("float32"), rng.randn(4, 3).astype("float32")
    labels = np.array([[1], [2], [1], [0]], "float32")

    def build():
        anchor = fluid.layers.data(name="a", shape=[4, 3], dtype="float32",
                                   append_batch_size=False)
        pos = fluid.layers.data(name="p", shape=[4, 3], dtype="float32",
                                append_batch_size=False)
        lab = fluid.layers.data(name="l", shape=[4, 1], dtype="float32",
                                append_batch_size=False)
        return [fluid.layers.npair_loss(anchor, pos, lab, l2_reg=0.01)]

    got, = run_layers(build, {"a": a, "p": p, "l": labels})
    same = (labels == labels.T).astype("float64")
    targets = same / same.sum(1, keepdims=True)
    sim = a.astype("float64") @ p.T
    logp = sim - sim.max(1, keepdims=True)
    logp = logp - np.log(np.exp(logp).sum(1, keepdims=True))
    ce = -(targets * logp).sum(1, keepdims=True)
    want = (targets * ce).sum(0).mean() + 0.25 * 0.01 * (
        (a ** 2).sum(1).mean() + (p ** 2).sum(1).mean())
    np.testing.assert_allclose(got, [want], rtol=1e-5)


def test_npair_loss_needs_a_known_batch():
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        a = fluid.layers.data(name="a", shape=[3], dtype="float32")
        lab = fluid.layers.data(name="l", shape=[1], dtype="float32")
        with pytest.raises(ValueError, match="npair_loss: the batch size"):
            fluid.layers.npair_loss(a, a, lab)
