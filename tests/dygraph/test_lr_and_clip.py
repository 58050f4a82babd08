"""Learning-rate decays of the imperative mode against the Program's decay layers; the
imperative gradient clips."""

from __future__ import annotations

import numpy as np
import pytest

import parafluid as fluid
from parafluid import dygraph, dygraph_grad_clip

STEPS = 12

# (imperative decay, the same decay as a layer of a Program)
DECAYS = {
    "noam": (lambda: dygraph.NoamDecay(d_model=64, warmup_steps=4),
             lambda: fluid.layers.noam_decay(64, 4)),
    "piecewise": (lambda: dygraph.PiecewiseDecay([3, 7], [0.5, 0.1, 0.01], begin=0),
                  lambda: fluid.layers.piecewise_decay([3, 7], [0.5, 0.1, 0.01])),
    "natural_exp": (lambda: dygraph.NaturalExpDecay(0.5, decay_steps=3, decay_rate=0.3),
                    lambda: fluid.layers.natural_exp_decay(0.5, 3, 0.3)),
    "natural_exp_staircase": (
        lambda: dygraph.NaturalExpDecay(0.5, decay_steps=3, decay_rate=0.3, staircase=True),
        lambda: fluid.layers.natural_exp_decay(0.5, 3, 0.3, staircase=True)),
    "exponential": (lambda: dygraph.ExponentialDecay(0.5, decay_steps=4, decay_rate=0.6),
                    lambda: fluid.layers.exponential_decay(0.5, 4, 0.6)),
    "exponential_staircase": (
        lambda: dygraph.ExponentialDecay(0.5, decay_steps=4, decay_rate=0.6, staircase=True),
        lambda: fluid.layers.exponential_decay(0.5, 4, 0.6, staircase=True)),
    "inverse_time": (lambda: dygraph.InverseTimeDecay(0.5, decay_steps=2, decay_rate=0.5),
                     lambda: fluid.layers.inverse_time_decay(0.5, 2, 0.5)),
    "polynomial": (lambda: dygraph.PolynomialDecay(0.5, decay_steps=8, end_learning_rate=0.01,
                                                   power=2.0),
                   lambda: fluid.layers.polynomial_decay(0.5, 8, 0.01, power=2.0)),
    "polynomial_cycle": (
        lambda: dygraph.PolynomialDecay(0.5, decay_steps=5, end_learning_rate=0.01, cycle=True),
        lambda: fluid.layers.polynomial_decay(0.5, 5, 0.01, cycle=True)),
    "cosine": (lambda: dygraph.CosineDecay(0.5, step_each_epoch=2, epochs=5),
               lambda: fluid.layers.cosine_decay(0.5, 2, 5)),
}


def _static_lrs(make_layer):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        lr = make_layer()
    exe = fluid.Executor(fluid.CPUPlace())
    with fluid.scope_guard(fluid.Scope()):
        exe.run(startup)
        return [exe.run(main, fetch_list=[lr])[0].item() for _ in range(STEPS)]


class _Scalar(dygraph.Layer):
    def __init__(self):
        super().__init__("scalar")
        self.w = self.create_parameter(None, [2], "float32",
                                       default_initializer=fluid.initializer.Constant(1.0))

    def forward(self):
        return fluid.layers.reduce_sum(self.w)


def _imperative_lrs(make_decay):
    lrs, steps = [], []
    with dygraph.guard():
        model = _Scalar()
        opt = fluid.optimizer.SGD(learning_rate=make_decay())
        for _ in range(STEPS):
            before = model.w.numpy()
            loss = model()
            loss.backward()
            opt.minimize(loss)
            model.clear_gradients()
            lrs.append(opt._global_learning_rate().numpy().item())
            steps.append((before - model.w.numpy())[0])  # the gradient of reduce_sum is 1
    return lrs, steps


@pytest.mark.parametrize("name", sorted(DECAYS))
def test_decay_matches_the_static_decay_layer(name):
    make_decay, make_layer = DECAYS[name]
    expected = _static_lrs(make_layer)
    lrs, steps = _imperative_lrs(make_decay)
    assert len(set(np.round(expected, 7))) > 1  # the schedule changes over the steps
    np.testing.assert_allclose(lrs, expected, rtol=1e-6)
    np.testing.assert_allclose(steps, expected, rtol=1e-5)  # the SGD step used that rate


class _Halving(dygraph.LearningRateDecay):
    """A user-defined decay: step() returns a variable made with create_lr_var."""

    def step(self):
        return self.create_lr_var(1.0 / 2 ** self.step_num)


def test_a_user_defined_decay_with_create_lr_var():
    lrs, steps = _imperative_lrs(_Halving)
    np.testing.assert_allclose(lrs, [1.0 / 2 ** i for i in range(STEPS)])
    np.testing.assert_allclose(steps, lrs, rtol=1e-6)


def test_decay_of_the_imperative_mode_refused_in_a_program():
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        x = fluid.layers.data("x", shape=[2])
        loss = fluid.layers.mean(fluid.layers.fc(x, 1))
        opt = fluid.optimizer.SGD(learning_rate=dygraph.ExponentialDecay(0.1, 2, 0.5))
        with pytest.raises(TypeError, match="ExponentialDecay is a learning-rate decay of the "
                                            "imperative mode"):
            opt.minimize(loss)


G1 = np.array([[3.0, -4.0], [0.5, 0.2]], dtype="float32")   # norm 5.03
G2 = np.array([0.3, -12.0], dtype="float32")                 # norm 12.0


class _Two(dygraph.Layer):
    def __init__(self):
        super().__init__("two")
        zero = fluid.initializer.Constant(0.0)
        self.a = self.create_parameter(None, [2, 2], "float32", default_initializer=zero)
        self.b = self.create_parameter(None, [2], "float32", default_initializer=zero)

    def forward(self):
        # d/da = G1, d/db = G2
        g1, g2 = dygraph.to_variable(G1), dygraph.to_variable(G2)
        return fluid.layers.reduce_sum(self.a * g1) + fluid.layers.reduce_sum(self.b * g2)


def _clipped_update(clip):
    with dygraph.guard():
        model = _Two()
        loss = model()
        loss.backward()
        fluid.optimizer.SGD(learning_rate=1.0).minimize(loss, grad_clip=clip)
        return -model.a.numpy(), -model.b.numpy()


def test_grad_clip_by_value():
    a, b = _clipped_update(dygraph_grad_clip.GradClipByValue(-1.0, 0.4))
    np.testing.assert_allclose(a, np.clip(G1, -1.0, 0.4))
    np.testing.assert_allclose(b, np.clip(G2, -1.0, 0.4))
    a, _ = _clipped_update(dygraph_grad_clip.GradClipByValue(0.4))  # one bound: [-0.4, 0.4]
    np.testing.assert_allclose(a, np.clip(G1, -0.4, 0.4))


def test_grad_clip_by_norm():
    a, b = _clipped_update(dygraph_grad_clip.GradClipByNorm(clip_norm=6.0))
    np.testing.assert_allclose(a, G1, rtol=1e-6)  # under the norm: unchanged
    np.testing.assert_allclose(b, G2 * 6.0 / np.linalg.norm(G2), rtol=1e-5)


def test_grad_clip_by_global_norm():
    a, b = _clipped_update(dygraph_grad_clip.GradClipByGlobalNorm(max_global_norm=2.0))
    total = np.sqrt((G1 ** 2).sum() + (G2 ** 2).sum())
    np.testing.assert_allclose(a, G1 * 2.0 / total, rtol=1e-5)
    np.testing.assert_allclose(b, G2 * 2.0 / total, rtol=1e-5)
    a, b = _clipped_update(dygraph_grad_clip.GradClipByGlobalNorm(max_global_norm=100.0))
    np.testing.assert_allclose(a, G1, rtol=1e-6)


def test_grad_clip_arguments_are_checked():
    with pytest.raises(ValueError, match="min_value 1.0 is larger than max_value 0.5"):
        dygraph_grad_clip.GradClipByValue(1.0, 0.5)
    with pytest.raises(ValueError, match="clip_norm must be positive, got -1"):
        dygraph_grad_clip.GradClipByNorm(-1)
    with pytest.raises(TypeError, match="max_global_norm must be a number, got str"):
        dygraph_grad_clip.GradClipByGlobalNorm("1")
    with pytest.raises(TypeError, match="grad_clip must be a fluid.dygraph_grad_clip object"):
        _clipped_update(3.0)


def test_a_decay_adds_no_persistable_variable_per_step():
    with dygraph.guard():
        model = _Scalar()
        opt = fluid.optimizer.Adam(learning_rate=dygraph.NoamDecay(8, 2))
        tracer = fluid.framework._dygraph_tracer()
        counts = []
        for _ in range(4):
            loss = model()
            loss.backward()
            opt.minimize(loss)
            model.clear_gradients()
            counts.append(len(tracer._vars))
    assert counts[1:] == counts[:1] * 3, counts  # the parameter and Adam's state only
