"""Gradient clipping (by value, norm, global norm; sparse gradients) and LR schedules."""

import math

import numpy as np
import pytest
import torch

import parafluid as fluid
from parafluid.framework import OpRole
from parafluid.initializer import Constant
from parafluid.layer_helper import LayerHelper
from parafluid.scope import SelectedRows

SHAPES = {"a": (3, 4), "b": (5,), "c": (2, 2)}


def _grads(scale=3.0, seed=0):
    rng = np.random.RandomState(seed)
    return {n: rng.uniform(-1, 1, s) * scale for n, s in SHAPES.items()}


def _clip_run(grads, setup=None, grad_clip=None, param_clip=None, feeds=None, sparse=()):
    """Apply fed gradients with SGD(lr=1) to zero-initialized parameters.

    Returns the clipped gradients (minus the updated parameters) and the program.
    """
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        pairs = []
        for name, g in grads.items():
            shape = list(g.shape)
            attr = fluid.ParamAttr(name=name, initializer=Constant(0.0),
                                   gradient_clip=(param_clip or {}).get(name))
            p = LayerHelper("t").create_parameter(attr, shape, "float64")
            gv = fluid.layers.data(name=name + "_g", shape=shape, dtype="float64",
                                   append_batch_size=False,
                                   type="selected_rows" if name in sparse else "lod_tensor")
            pairs.append((p, gv))
        if setup is not None:
            setup(main)
        fluid.optimizer.SGD(learning_rate=1.0, grad_clip=grad_clip).apply_gradients(pairs)
    main.verify()
    scope, exe = fluid.Scope(), fluid.Executor()
    exe.run(startup, scope=scope)
    exe.run(main, feed={n + "_g": g for n, g in grads.items()}, scope=scope)
    return {n: -np.array(scope.find_var(n).get_tensor()) for n in grads}, main


def _global_scale(grads, clip_norm):
    norm = math.sqrt(sum(float(np.sum(g * g)) for g in grads.values()))
    return clip_norm / max(norm, clip_norm)


@pytest.mark.parametrize("clip_norm", [1.0, 100.0], ids=["clipped", "within_bound"])
def test_global_norm_matches_numpy(clip_norm):
    grads = _grads()
    got, main = _clip_run(grads, setup=lambda prog: fluid.clip.set_gradient_clip(
        fluid.clip.GradientClipByGlobalNorm(clip_norm=clip_norm), program=prog))
    scale = _global_scale(grads, clip_norm)
    assert (scale < 1) == (clip_norm == 1.0)
    for n, g in grads.items():
        np.testing.assert_allclose(got[n], g * scale, rtol=1e-12, err_msg=n)
    types = [op.type for op in main.global_block().ops]
    assert types.count("squared_l2_norm") == 3 and types.count("clip_by_global_norm") == 3
    assert types.count("sum") == 1


def test_global_norm_groups():
    grads = _grads(seed=1)

    def setup(prog):
        fluid.clip.set_gradient_clip(fluid.clip.GradientClipByGlobalNorm(1.0, "g1"),
                                     param_list=["a"], program=prog)
        fluid.clip.set_gradient_clip(fluid.clip.GradientClipByGlobalNorm(2.0, "g2"),
                                     param_list=[prog.global_block().var("b"), "c"],
                                     program=prog)
    got, _ = _clip_run(grads, setup=setup)
    np.testing.assert_allclose(got["a"], grads["a"] * _global_scale({"a": grads["a"]}, 1.0))
    g2 = {n: grads[n] for n in ("b", "c")}
    for n in g2:
        np.testing.assert_allclose(got[n], grads[n] * _global_scale(g2, 2.0), err_msg=n)


def test_global_norm_group_needs_one_clip_norm():
    clips = {"a": fluid.clip.GradientClipByGlobalNorm(1.0),
             "b": fluid.clip.GradientClipByGlobalNorm(2.0)}
    with pytest.raises(ValueError, match="same clip_norm"):
        _clip_run({n: _grads()[n] for n in ("a", "b")}, param_clip=clips)


def test_clip_by_value():
    grads = _grads(scale=1.0, seed=2)
    got, _ = _clip_run(grads, grad_clip=fluid.clip.GradientClipByValue(max=0.3))
    for n, g in grads.items():
        np.testing.assert_array_equal(got[n], np.clip(g, -0.3, 0.3))
    got, _ = _clip_run(grads, grad_clip=fluid.clip.GradientClipByValue(max=0.5, min=-0.1))
    np.testing.assert_array_equal(got["a"], np.clip(grads["a"], -0.1, 0.5))
    with pytest.raises(ValueError, match="min"):
        fluid.clip.GradientClipByValue(max=-1.0, min=1.0)


def test_clip_by_norm_per_parameter():
    grads = _grads(seed=3)
    grads["c"] = grads["c"] * 0.01  # already within the bound: unchanged
    got, _ = _clip_run(grads, setup=lambda prog: fluid.clip.set_gradient_clip(
        fluid.clip.GradientClipByNorm(clip_norm=0.5), program=prog))
    for n, g in grads.items():
        norm = np.linalg.norm(g)
        np.testing.assert_allclose(got[n], g * 0.5 / max(norm, 0.5), rtol=1e-12, err_msg=n)
    np.testing.assert_array_equal(got["c"], grads["c"])


def test_param_attr_clip_and_optimizer_precedence():
    grads = _grads(seed=4)
    per_param = {"a": fluid.clip.GradientClipByValue(0.1)}
    got, main = _clip_run(grads, param_clip=per_param)
    np.testing.assert_array_equal(got["a"], np.clip(grads["a"], -0.1, 0.1))
    np.testing.assert_array_equal(got["b"], grads["b"])  # no clip configured
    # The optimizer's grad_clip applies to every parameter and wins over ParamAttr.
    got, _ = _clip_run(grads, param_clip=per_param,
                       grad_clip=fluid.clip.GradientClipByGlobalNorm(1.0))
    for n, g in grads.items():
        np.testing.assert_allclose(got[n], g * _global_scale(grads, 1.0), err_msg=n)


def test_clip_ops_roles():
    _, main = _clip_run(_grads(), grad_clip=fluid.clip.GradientClipByGlobalNorm(1.0))
    for op in main.global_block().ops:
        assert op.attr("op_role") == OpRole.Optimize, op
        param, grad = op.attr("op_role_var")
        if op.type == "sgd":  # the update reads the clipped gradient
            assert grad == op.input("Grad")[0] and grad.startswith(param + "_g@CLIP"), op
        else:
            assert grad == param + "_g", op


def _sparse(rows, seed, height=6):
    value = np.random.RandomState(seed).uniform(-2, 2, (len(rows), 3))
    return SelectedRows(torch.tensor(rows), torch.from_numpy(value), height)


@pytest.mark.parametrize("clip", [fluid.clip.GradientClipByGlobalNorm(1.0),
                                  fluid.clip.GradientClipByNorm(1.0),
                                  fluid.clip.GradientClipByValue(0.5)], ids=repr)
def test_sparse_gradients_with_repeated_rows(clip):
    sparse = {"e": _sparse([4, 1, 4, 0], 5), "d": np.random.RandomState(6).uniform(-1, 1, (3,))}
    dense = {"e": sparse["e"].to_dense().numpy(), "d": sparse["d"]}
    got_sparse, _ = _clip_run(sparse, grad_clip=clip, sparse=("e",))
    got_dense, _ = _clip_run(dense, grad_clip=clip)
    for n in dense:
        np.testing.assert_allclose(got_sparse[n], got_dense[n], rtol=1e-12, err_msg=n)
    assert not np.allclose(got_dense["e"], dense["e"])  # the clip did something


def test_minimize_with_global_norm_matches_torch():
    rng = np.random.RandomState(7)
    x, y = rng.uniform(-1, 1, (8, 4)), rng.uniform(-3, 3, (8, 2))
    main, startup = fluid.Program(), fluid.Program()
    startup.random_seed = 3
    with fluid.program_guard(main, startup):
        xv = fluid.layers.data(name="x", shape=[4], dtype="float64")
        yv = fluid.layers.data(name="y", shape=[2], dtype="float64")
        pred = fluid.layers.fc(xv, size=2, param_attr=fluid.ParamAttr(name="w"),
                               bias_attr=fluid.ParamAttr(name="b"))
        d = fluid.layers.elementwise_sub(pred, yv)
        loss = fluid.layers.mean(fluid.layers.elementwise_mul(d, d))
        fluid.optimizer.SGD(learning_rate=0.1,
                            grad_clip=fluid.clip.GradientClipByGlobalNorm(0.5)).minimize(loss)
    scope, exe = fluid.Scope(), fluid.Executor()
    exe.run(startup, scope=scope)
    w, b = (torch.tensor(np.array(scope.find_var(n).get_tensor()), requires_grad=True)
            for n in ("w", "b"))
    opt = torch.optim.SGD([w, b], lr=0.1)
    for _ in range(3):
        exe.run(main, feed={"x": x, "y": y}, scope=scope)
        opt.zero_grad()
        ((torch.from_numpy(x) @ w + b - torch.from_numpy(y)) ** 2).mean().backward()
        # Fluid's rule, clip_norm / max(norm, clip_norm) (torch's clip_grad_norm_ adds 1e-6
        # to the norm, a relative difference of about 2e-6 here)
        norm = torch.sqrt(sum((p.grad ** 2).sum() for p in (w, b)))
        assert norm > 0.5  # clipping is active
        for p in (w, b):
            p.grad.mul_(0.5 / torch.clamp(norm, min=0.5))
        opt.step()
        np.testing.assert_allclose(np.array(scope.find_var("w").get_tensor()),
                                   w.detach().numpy(), rtol=1e-6, atol=1e-8)


# ---------------------------------------------------------------------- LR schedules

RUNS = 7


def _lr_values(make_lr, runs=RUNS):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        lr = make_lr()
    main.verify()
    scope, exe = fluid.Scope(), fluid.Executor()
    exe.run(startup, scope=scope)
    return np.array([exe.run(main, fetch_list=[lr], scope=scope)[0][0] for _ in range(runs)])


L = fluid.layers
SCHEDULES = {
    "exponential": (lambda: L.exponential_decay(0.1, decay_steps=2, decay_rate=0.5),
                    lambda t: 0.1 * 0.5 ** (t / 2)),
    "exponential_staircase": (
        lambda: L.exponential_decay(0.1, decay_steps=2, decay_rate=0.5, staircase=True),
        lambda t: 0.1 * 0.5 ** (t // 2)),
    "natural_exp": (lambda: L.natural_exp_decay(0.1, decay_steps=2, decay_rate=0.5),
                    lambda t: 0.1 * math.exp(-0.5 * t / 2)),
    "natural_exp_staircase": (
        lambda: L.natural_exp_decay(0.1, decay_steps=3, decay_rate=0.5, staircase=True),
        lambda t: 0.1 * math.exp(-0.5 * (t // 3))),
    "inverse_time": (lambda: L.inverse_time_decay(0.1, decay_steps=2, decay_rate=0.5),
                     lambda t: 0.1 / (1 + 0.5 * t / 2)),
    "polynomial": (lambda: L.polynomial_decay(0.1, decay_steps=3, end_learning_rate=0.01,
                                              power=2.0),
                   lambda t: 0.09 * (1 - min(t, 3) / 3) ** 2 + 0.01),
    "polynomial_cycle": (
        lambda: L.polynomial_decay(0.1, decay_steps=3, end_learning_rate=0.01, cycle=True),
        lambda t: 0.09 * (1 - t / (3 * max(1, math.ceil(t / 3)))) + 0.01),
    "piecewise": (lambda: L.piecewise_decay(boundaries=[2, 4], values=[1.0, 0.5, 0.1]),
                  lambda t: 1.0 if t < 2 else 0.5 if t < 4 else 0.1),
    "noam": (lambda: L.noam_decay(d_model=4, warmup_steps=3),
             lambda t: 4 ** -0.5 * min((t + 1) ** -0.5, 3 ** -1.5 * (t + 1))),
    "cosine": (lambda: L.cosine_decay(0.1, step_each_epoch=2, epochs=3),
               lambda t: 0.1 * 0.5 * (math.cos((t // 2) * math.pi / 3) + 1)),
    "warmup": (lambda: L.linear_lr_warmup(0.1, warmup_steps=3, start_lr=0.0, end_lr=0.3),
               lambda t: 0.1 * t if t < 3 else 0.1),
    "warmup_then_piecewise": (
        lambda: L.linear_lr_warmup(L.piecewise_decay([5], [0.2, 0.05]), warmup_steps=2,
                                   start_lr=0.1, end_lr=0.2),
        lambda t: 0.1 + 0.05 * t if t < 2 else 0.2 if t < 5 else 0.05),
    "exponential_of_variable": (
        lambda: L.exponential_decay(L.create_global_var([1], 0.4, "float32", persistable=True),
                                    decay_steps=1, decay_rate=0.5),
        lambda t: 0.4 * 0.5 ** t),
}


@pytest.mark.parametrize("name", sorted(SCHEDULES))
def test_schedule_values_per_run(name):
    make_lr, formula = SCHEDULES[name]
    want = np.array([formula(t) for t in range(RUNS)])  # the first run sees step 0
    np.testing.assert_allclose(_lr_values(make_lr), want, rtol=1e-6)


def test_schedules_share_one_counter_and_roles():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        L.exponential_decay(0.1, 10, 0.5)
        L.piecewise_decay([3], [0.1, 0.01])
    ops = main.global_block().ops
    types = [op.type for op in ops]
    # one counter, Fluid 1.6's ops: exponential_decay is scalar arithmetic on the float32
    # step, piecewise_decay a Switch over it
    assert types[:6] == ["increment", "cast", "scale", "fill_constant", "elementwise_pow",
                         "scale"] and types.count("increment") == 1
    assert types[6:] == ["cast", "fill_constant", "fill_constant", "less_than", "logical_not",
                         "conditional_block", "fill_constant", "conditional_block"]
    assert all(op.attr("op_role") == OpRole.LRSched for op in ops)
    for op in ops:  # the ops of the Switch's cases too
        if op.type == "conditional_block":
            assert [o.type for o in op.attr("sub_block").ops] == ["assign"]
            assert all(o.attr("op_role") == OpRole.LRSched for o in op.attr("sub_block").ops)
    counter = main.global_block().var("@LR_DECAY_COUNTER@")
    assert counter.persistable and counter.dtype == "int64"
    assert main.clone(for_test=True).global_block().ops == []


def test_sgd_follows_schedule():
    g = np.array([1.0, -2.0])
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        p = LayerHelper("t").create_parameter(
            fluid.ParamAttr(name="p", initializer=Constant(0.0)), [2], "float64")
        gv = L.data(name="g", shape=[2], dtype="float64", append_batch_size=False)
        lr = L.piecewise_decay([1, 2], [1.0, 0.1, 0.01])
        fluid.optimizer.SGD(learning_rate=lr).apply_gradients([(p, gv)])
    scope, exe = fluid.Scope(), fluid.Executor()
    exe.run(startup, scope=scope)
    for _ in range(3):
        exe.run(main, feed={"g": g}, scope=scope)
    np.testing.assert_allclose(np.array(scope.find_var("p").get_tensor()), -1.11 * g,
                               rtol=1e-6)


def test_step_counter():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        step = L.autoincreased_step_counter(counter_name="my_step", begin=5, step=2)
        again = L.autoincreased_step_counter(counter_name="my_step")
    assert step is again
    scope, exe = fluid.Scope(), fluid.Executor()
    exe.run(startup, scope=scope)
    got = [int(exe.run(main, fetch_list=[step], scope=scope)[0][0]) for _ in range(3)]
    assert got == [5, 7, 9]


def test_schedule_argument_errors():
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        with pytest.raises(ValueError, match="one more entry"):
            L.piecewise_decay([1, 2], [0.1, 0.2])
        with pytest.raises(ValueError, match="increasing"):
            L.piecewise_decay([3, 1], [0.1, 0.2, 0.3])
        with pytest.raises(ValueError, match="decay_steps"):
            L.exponential_decay(0.1, decay_steps=0, decay_rate=0.5)
        with pytest.raises(TypeError, match="learning_rate"):
            L.cosine_decay("0.1", step_each_epoch=2, epochs=3)
