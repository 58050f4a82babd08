"""Fluid's ``recurrent`` op (StaticRNN as a Fluid program holds it): a tanh RNN step block
run over x [T, B, D] against a numpy loop, forward and reverse; its gradient (recurrent_grad,
BPTT through the step's gradient block) against central differences of the numpy loop."""

import numpy as np
import pytest

import parafluid as fluid
from parafluid import backward
from parafluid.dtypes import VarType
from parafluid.testing import rand

T, B, D, H = 4, 2, 3, 2


def numpy_rnn(x, h0, wx, wh, reverse=False):
    h, outs = h0, [None] * T
    for t in (range(T - 1, -1, -1) if reverse else range(T)):
        h = np.tanh(x[t] @ wx + h @ wh)
        outs[t] = 2.0 * h
    return np.stack(outs), h


def build(reverse=False, is_train=True):
    """The program Fluid's StaticRNN writes: names shared across the step block's boundary."""
    main = fluid.Program()
    block = main.global_block()
    x = block.create_var(name="x", shape=[T, B, D], dtype="float64", is_data=True,
                         stop_gradient=False)
    h0 = block.create_var(name="h0", shape=[B, H], dtype="float64", is_data=True,
                          stop_gradient=False)
    wx = block.create_var(name="wx", shape=[D, H], dtype="float64", is_data=True,
                          stop_gradient=False)
    wh = block.create_var(name="wh", shape=[H, H], dtype="float64", is_data=True,
                          stop_gradient=False)
    out = block.create_var(name="h_out", shape=[T, B, H], dtype="float64")
    scopes = block.create_var(name="rnn_scopes", type=VarType.RAW)
    step = main._create_block()
    step.create_var(name="x", shape=[B, D], dtype="float64")
    step.create_var(name="h_pre", shape=[B, H], dtype="float64")
    step.append_op("mul", inputs={"X": ["x"], "Y": ["wx"]}, outputs={"Out": ["xw"]})
    step.append_op("mul", inputs={"X": ["h_pre"], "Y": ["wh"]}, outputs={"Out": ["hw"]})
    step.append_op("elementwise_add", inputs={"X": ["xw"], "Y": ["hw"]},
                   outputs={"Out": ["pre"]})
    step.append_op("tanh", inputs={"X": ["pre"]}, outputs={"Out": ["h"]})
    step.append_op("scale", inputs={"X": ["h"]}, outputs={"Out": ["h2"]}, attrs={"scale": 2.0})
    step.create_var(name="h_out", shape=[B, H], dtype="float64")
    step.append_op("rnn_memory_helper", inputs={"X": ["h2"]}, outputs={"Out": ["h_out"]})
    main._rollback()
    outputs = {"outputs": [out]}
    if is_train:
        outputs["step_scopes"] = [scopes]
    block.append_op("recurrent", inputs={"inputs": [x], "initial_states": [h0],
                                         "parameters": [wx, wh]},
                    outputs=outputs,
                    attrs={"has_states": True, "ex_states": ["h_pre"], "states": ["h"],
                           "sub_block": step, "reverse": reverse, "is_train": is_train})
    return main, [x, h0, wx, wh], out


FEED = {"x": rand(T, B, D, seed=1), "h0": rand(B, H, seed=2), "wx": rand(D, H, seed=3),
        "wh": rand(H, H, seed=4)}


@pytest.mark.parametrize("reverse", [False, True])
def test_recurrent_forward_equals_a_numpy_loop(reverse):
    main, _, out = build(reverse)
    got, = fluid.Executor(fluid.CPUPlace()).run(main, feed=FEED, fetch_list=[out],
                                                scope=fluid.Scope())
    want, _ = numpy_rnn(FEED["x"], FEED["h0"], FEED["wx"], FEED["wh"], reverse)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("reverse", [False, True])
def test_recurrent_gradient_equals_finite_differences(reverse):
    main, wrt, out = build(reverse)
    weight = rand(T, B, H, seed=9)
    with fluid.program_guard(main, fluid.Program()):
        seed = main.global_block().create_var(name="seed", shape=[T, B, H], dtype="float64",
                                              is_data=True)
        grads = backward.gradients([out], wrt, target_gradients=[seed])
    assert all(g is not None for g in grads)
    main.verify()
    got = fluid.Executor(fluid.CPUPlace()).run(main, feed={**FEED, "seed": weight},
                                               fetch_list=[g.name for g in grads],
                                               scope=fluid.Scope())

    def loss(values):
        outs, _ = numpy_rnn(values["x"], values["h0"], values["wx"], values["wh"], reverse)
        return float(np.sum(weight * outs))

    for name, analytic in zip(("x", "h0", "wx", "wh"), got):
        numeric = np.zeros_like(FEED[name])
        for idx in np.ndindex(*numeric.shape):
            for sign in (1, -1):
                trial = {k: v.copy() for k, v in FEED.items()}
                trial[name][idx] += sign * 1e-6
                numeric[idx] += sign * loss(trial)
        numeric /= 2e-6
        np.testing.assert_allclose(analytic, numeric, rtol=1e-6, atol=1e-8,
                                   err_msg=f"gradient of {name}")


def test_recurrent_without_step_scopes_has_no_gradient():
    main, wrt, out = build(is_train=False)
    with fluid.program_guard(main, fluid.Program()):
        with pytest.raises(ValueError, match="records no step_scopes"):
            backward.gradients([out], wrt)
