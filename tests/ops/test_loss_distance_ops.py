"""Op table: losses of distances (square_error_cost, huber_loss, smooth_l1_loss,
margin_rank_loss, rank_loss, center_loss) and the layers that train with them."""

import numpy as np
import pytest

import parafluid as fluid
from parafluid.testing import OpCase, check_op, rand


def smooth_l1_ref(X, Y, attrs, InsideWeight=None, OutsideWeight=None):
    s2 = attrs["sigma"] ** 2
    d = (X - Y) * (1 if InsideWeight is None else InsideWeight)
    v = np.where(np.abs(d) < 1 / s2, 0.5 * d * d * s2, np.abs(d) - 0.5 / s2)
    v = v * (1 if OutsideWeight is None else OutsideWeight)
    return {"Diff": d, "Out": v.reshape(len(X), -1).sum(1, keepdims=True)}


LABEL_PM = np.array([[1.0], [-1.0], [1.0], [-1.0]])


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

HUBER_X = rand(4, 3, low=-3, high=3, seed=21)

CASES = [
    OpCase("smooth_l1_loss", {"X": rand(3, 4), "Y": rand(3, 4, seed=1)},
           attrs={"sigma": 2.0}, ref=smooth_l1_ref, grad=["X", "Y"], grad_outputs=["Out"]),
    OpCase("smooth_l1_loss", {"X": rand(2, 3, 2), "Y": rand(2, 3, 2, seed=1),
                              "InsideWeight": rand(2, 3, 2, low=0.5, high=2.0, seed=2),
                              "OutsideWeight": rand(2, 3, 2, low=0.5, high=2.0, seed=3)},
           ref=smooth_l1_ref, grad=["X", "Y"], grad_outputs=["Out"],
           id="smooth_l1_loss_weights"),
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
    OpCase("square_error_cost", {"X": rand(4, 3), "Y": rand(4, 3, seed=1)},
           ref=lambda X, Y: {"Out": (X - Y) ** 2}, grad=["X", "Y"]),
    OpCase("square_error_cost", {"X": rand(4, 3), "Y": rand(4, 1, seed=2)},
           ref=lambda X, Y: {"Out": (X - Y) ** 2}, grad=["X", "Y"],
           id="square_error_cost_broadcast_label"),
    OpCase("huber_loss", {"X": HUBER_X, "Y": rand(4, 3, low=-3, high=3, seed=23)},
           attrs={"delta": 1.0},
           ref=lambda X, Y: {"Out": np.where(np.abs(Y - X) <= 1.0, 0.5 * (Y - X) ** 2,
                                             np.abs(Y - X) - 0.5), "Residual": Y - X},
           grad=["X", "Y"], grad_outputs=["Out"]),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_op(case):
    check_op(case)


def test_loss_layers_train_a_ranker():
    """margin_rank_loss, rank_loss and smooth_l1 drive a linear scorer's loss down."""
    rng = np.random.RandomState(3)
    left, right = rng.randn(32, 4).astype("float32"), rng.randn(32, 4).astype("float32")
    w_true = np.array([1.0, -2.0, 0.5, 1.0], "float32")
    label = np.where(left @ w_true > right @ w_true, 1.0, -1.0).astype("float32")[:, None]
    main, startup = fluid.Program(), fluid.Program()
    # NOTE: a seeded start, so the result does not depend on the tests that ran before (from
    # about one start in ten, 30 steps take the loss to 0.55x instead of below 0.5x)
    startup.random_seed = 2
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
