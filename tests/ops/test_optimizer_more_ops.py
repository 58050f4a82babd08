"""Op table: proximal_gd, proximal_adagrad and dpsgd (Fluid 1.6's update rules), and the
Dpsgd optimizer that emits dpsgd."""

import numpy as np
import pytest

import parafluid as fluid
from parafluid.testing import OpCase, check_op, rand, run_op

P = rand(3, 4, seed=1)
G = rand(3, 4, seed=2)
M = rand(3, 4, low=0.1, high=1.0, seed=3)
LR = np.array([0.1])


def _prox(prox, lr, l1, l2):
    if l1 > 0:
        return np.sign(prox) * np.maximum(np.abs(prox) - lr * l1, 0) / (1 + lr * l2)
    return prox / (1 + lr * l2)


def _proximal_gd(Param, Grad, LearningRate, attrs):
    return {"ParamOut": _prox(Param - LearningRate * Grad, LearningRate, attrs["l1"],
                              attrs["l2"])}


def _proximal_adagrad(Param, Moment, Grad, LearningRate, attrs):
    m = Moment + Grad * Grad
    prox = Param - LearningRate * Grad / np.sqrt(m)
    return {"ParamOut": _prox(prox, LearningRate, attrs["l1"], attrs["l2"]), "MomentOut": m}


def _dpsgd_no_noise(Param, Grad, LearningRate, attrs):
    norm = np.sqrt((Grad ** 2).sum())
    scale = norm / attrs["clip"] if norm > attrs["clip"] else 1.0
    return {"ParamOut": Param - LearningRate * Grad / scale}


CASES = [
    OpCase("proximal_gd", {"Param": P, "Grad": G, "LearningRate": LR}, ref=_proximal_gd,
           id="proximal_gd_plain"),
    OpCase("proximal_gd", {"Param": P, "Grad": G, "LearningRate": LR},
           attrs={"l1": 0.5, "l2": 0.2}, ref=_proximal_gd, id="proximal_gd_l1_l2"),
    OpCase("proximal_gd", {"Param": P, "Grad": G, "LearningRate": LR},
           attrs={"l2": 0.3}, ref=_proximal_gd, id="proximal_gd_l2_only"),
    OpCase("proximal_adagrad", {"Param": P, "Moment": M, "Grad": G, "LearningRate": LR},
           ref=_proximal_adagrad, id="proximal_adagrad_plain"),
    OpCase("proximal_adagrad", {"Param": P, "Moment": M, "Grad": G, "LearningRate": LR},
           attrs={"l1": 0.5, "l2": 0.2}, ref=_proximal_adagrad, id="proximal_adagrad_l1_l2"),
    # sigma 0: the deterministic part (clipping by the gradient's L2 norm)
    OpCase("dpsgd", {"Param": P, "Grad": G, "LearningRate": LR},
           attrs={"clip": 0.5, "batch_size": 4.0, "sigma": 0.0}, ref=_dpsgd_no_noise,
           id="dpsgd_clipped_no_noise"),
    OpCase("dpsgd", {"Param": P, "Grad": G, "LearningRate": LR},
           attrs={"clip": 100.0, "batch_size": 4.0, "sigma": 0.0}, ref=_dpsgd_no_noise,
           id="dpsgd_unclipped_no_noise"),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_op(case):
    check_op(case)


def test_dpsgd_noise_is_one_gaussian_value_per_run_over_batch_size():
    """Fluid draws one N(0, sigma) value per run, shared by every element, divided by
    batch_size (and scaled by the learning rate)."""
    sigma, batch, lr = 2.0, 4.0, 0.5
    zeros = np.zeros((2, 3))
    case = OpCase("dpsgd", {"Param": zeros, "Grad": zeros, "LearningRate": np.array([lr])},
                  attrs={"clip": 1.0, "batch_size": batch, "sigma": sigma})
    draws = []
    for _ in range(300):
        out = run_op(case)["ParamOut"]
        assert np.all(out == out.flat[0])  # one value for every element
        draws.append(-out.flat[0] * batch / lr)  # back to the noise itself
    draws = np.array(draws)
    assert abs(draws.mean()) < 4 * sigma / np.sqrt(len(draws))
    assert 0.8 * sigma < draws.std() < 1.2 * sigma
    assert len(np.unique(draws)) == len(draws)


def test_dpsgd_optimizer_emits_dpsgd_with_fluids_attrs():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [None, 3], dtype="float32")
        loss = fluid.layers.mean(fluid.layers.fc(x, 1))
        fluid.optimizer.DpsgdOptimizer(learning_rate=0.1, clip=5.0, batch_size=8.0,
                                       sigma=0.0).minimize(loss)
    ops = [op for op in main.global_block().ops if op.type == "dpsgd"]
    assert len(ops) == 2
    assert {k: ops[0].attr(k) for k in ("clip", "batch_size", "sigma")} == \
        {"clip": 5.0, "batch_size": 8.0, "sigma": 0.0}
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    w0 = np.array(scope.find_var(ops[0].input("Param")[0]).get_tensor())
    exe.run(main, feed={"x": np.ones((2, 3), "float32")}, scope=scope)
    w1 = np.array(scope.find_var(ops[0].input("Param")[0]).get_tensor())
    # d mean(x @ w + b) / dw = mean of x's rows = 1 (norm sqrt(3) < clip): w -= 0.1
    np.testing.assert_allclose(w0 - w1, np.full_like(w0, 0.1), rtol=1e-5)
