"""Op table: smooth_l1_loss, kldiv_loss, margin_rank_loss, rank_loss, bpr_loss; and the
composed dice_loss and npair_loss layers against numpy."""

import numpy as np
import pytest

import parafluid as fluid
from parafluid.testing import OpCase, check_op, rand, run_layers, run_op


def smooth_l1_ref(X, Y, attrs, InsideWeight=None, OutsideWeight=None):
    s2 = attrs["sigma"] ** 2
    d = (X - Y) * (1 if InsideWeight is None else InsideWeight)
    v = np.where(np.abs(d) < 1 / s2, 0.5 * d * d * s2, np.abs(d) - 0.5 / s2)
    v = v * (1 if OutsideWeight is None else OutsideWeight)
    return {"Diff": d, "Out": v.reshape(len(X), -1).sum(1, keepdims=True)}


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


LABEL_PM = np.array([[1.0], [-1.0], [1.0], [-1.0]])
TARGET = np.abs(rand(3, 4, seed=5)) * np.array([1, 0, 1, 1])  # some zero targets

CASES = [
    OpCase("smooth_l1_loss", {"X": rand(3, 4), "Y": rand(3, 4, seed=1)},
           attrs={"sigma": 2.0}, ref=smooth_l1_ref, grad=["X", "Y"], grad_outputs=["Out"]),
    OpCase("smooth_l1_loss", {"X": rand(2, 3, 2), "Y": rand(2, 3, 2, seed=1),
                              "InsideWeight": rand(2, 3, 2, low=0.5, high=2.0, seed=2),
                              "OutsideWeight": rand(2, 3, 2, low=0.5, high=2.0, seed=3)},
           ref=smooth_l1_ref, grad=["X", "Y"], grad_outputs=["Out"],
           id="smooth_l1_loss_weights"),
    OpCase("kldiv_loss", {"X": rand(3, 4), "Target": TARGET}, ref=kldiv_ref, grad=["X"]),
    OpCase("kldiv_loss", {"X": rand(3, 4), "Target": TARGET},
           attrs={"reduction": "batchmean"}, ref=kldiv_ref, grad=["X"],
           id="kldiv_loss_batchmean"),
    OpCase("kldiv_loss", {"X": rand(3, 4), "Target": TARGET}, attrs={"reduction": "none"},
           ref=kldiv_ref, grad=["X"], id="kldiv_loss_none"),
    OpCase("margin_rank_loss", {"Label": LABEL_PM, "X1": np.array([[0.5], [0.2], [-0.3],
                                                                   [0.9]]),
                                "X2": np.array([[0.1], [0.6], [0.4], [0.2]])},
           attrs={"margin": 0.1},
           ref=lambda Label, X1, X2: {"Out": np.maximum(0, -Label * (X1 - X2) + 0.1)},
           grad=["X1", "X2"], grad_outputs=["Out"]),
    OpCase("rank_loss", {"Label": np.array([[1.0], [0.0], [0.5]]), "Left": rand(3, 1),
                         "Right": rand(3, 1, seed=1)},
           ref=lambda Label, Left, Right: {"Out": np.log1p(np.exp(Left - Right))
                                           - Label * (Left - Right)},
           grad=["Left", "Right"]),
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


def test_loss_layers_train_a_ranker():
    """margin_rank_loss, rank_loss and smooth_l1 drive a linear scorer's loss down."""
    rng = np.random.RandomState(3)
    left, right = rng.randn(32, 4).astype("float32"), rng.randn(32, 4).astype("float32")
    w_true = np.array([1.0, -2.0, 0.5, 1.0], "float32")
    label = np.where(left @ w_true > right @ w_true, 1.0, -1.0).astype("float32")[:, None]
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        lx = fluid.layers.data(name="lx", shape=[4], dtype="float32")
        rx = fluid.layers.data(name="rx", shape=[4], dtype="float32")
        y = fluid.layers.data(name="y", shape=[1], dtype="float32")
        attr = fluid.ParamAttr(name="score_w")
        ls = fluid.layers.fc(lx, size=1, param_attr=attr, bias_attr=False)
        rs = fluid.layers.fc(rx, size=1, param_attr=attr, bias_attr=False)
        prob_label = fluid.layers.scale(y, scale=0.5, bias=0.5)
        loss = fluid.layers.mean(fluid.layers.margin_rank_loss(y, ls, rs, margin=0.5)) \
            + fluid.layers.mean(fluid.layers.rank_loss(prob_label, ls, rs)) \
            + 0.1 * fluid.layers.mean(fluid.layers.smooth_l1(ls - rs, y))
        fluid.optimizer.SGD(learning_rate=0.2).minimize(loss)
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    feed = {"lx": left, "rx": right, "y": label}
    losses = [float(exe.run(main, feed=feed, fetch_list=[loss])[0][0]) for _ in range(30)]
    assert losses[-1] < 0.5 * losses[0], losses


def center_loss_ref(X, Label, Centers, CenterUpdateRate, attrs):
    diff = X - Centers[Label[:, 0]]
    out = Centers.copy()
    if attrs["need_update"]:
        for k in range(len(Centers)):
            rows = Label[:, 0] == k
            out[k] += CenterUpdateRate[0] * diff[rows].sum(0) / (1 + rows.sum())
    return {"SampleCenterDiff": diff, "Loss": 0.5 * (diff ** 2).sum(1, keepdims=True),
            "CentersOut": out}


CENTER_IN = {"X": rand(5, 3), "Label": np.array([[0], [2], [0], [1], [0]], "int64"),
             "Centers": rand(4, 3, seed=1), "CenterUpdateRate": np.array([0.5])}


@pytest.mark.parametrize("update", [True, False])
def test_center_loss_op(update):
    check_op(OpCase("center_loss", dict(CENTER_IN), attrs={"need_update": update},
                    ref=center_loss_ref, grad=["X"], grad_outputs=["Loss"]))


def test_center_loss_layer_moves_the_centers_in_place():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data(name="x", shape=[3], dtype="float32")
        y = fluid.layers.data(name="y", shape=[1], dtype="int64")
        loss = fluid.layers.mean(fluid.layers.center_loss(
            x, y, num_classes=4, alpha=0.5,
            param_attr=fluid.ParamAttr(name="centers",
                                       initializer=fluid.initializer.Constant(0.0))))
        fluid.optimizer.SGD(learning_rate=0.1).minimize(loss)
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    feed = {"x": CENTER_IN["X"].astype("float32"), "y": CENTER_IN["Label"]}
    exe.run(main, feed=feed, fetch_list=[loss], scope=scope)
    want = center_loss_ref(feed["x"], feed["y"], np.zeros((4, 3), "float32"), [0.5],
                           {"need_update": True})["CentersOut"]
    np.testing.assert_allclose(np.array(scope.find_var("centers").get_tensor()), want,
                               rtol=1e-5)


CVM_X = np.abs(rand(3, 4, seed=6)) * 5
CVM_IN = np.abs(rand(3, 2, seed=7))


@pytest.mark.parametrize("use_cvm", [True, False])
def test_cvm_forward_and_fluid_gradient_rule(use_cvm):
    show = np.log(CVM_X[:, :1] + 1)
    want = np.concatenate([show, np.log(CVM_X[:, 1:2] + 1) - show, CVM_X[:, 2:]], 1) \
        if use_cvm else CVM_X[:, 2:]
    check_op(OpCase("cvm", {"X": CVM_X, "CVM": CVM_IN}, attrs={"use_cvm": use_cvm},
                    ref=lambda X, CVM: {"Y": want}))
    dy = rand(*want.shape, seed=8)
    grad = run_op(OpCase("cvm_grad", {"X": CVM_X, "CVM": CVM_IN, "Y@GRAD": dy},
                         attrs={"use_cvm": use_cvm}, outputs=["X@GRAD"]))["X@GRAD"]
    np.testing.assert_allclose(grad[:, :2], CVM_IN)
    np.testing.assert_allclose(grad[:, 2:], dy[:, 2:] if use_cvm else dy)
