"""The imperative MLP against the same model as a Program run by the Executor."""

from __future__ import annotations

import numpy as np
import pytest

import parafluid as fluid
from parafluid.param_attr import ParamAttr

RNG = np.random.RandomState(7)
W1 = RNG.uniform(-0.5, 0.5, (6, 8)).astype("float32")
B1 = RNG.uniform(-0.1, 0.1, (8,)).astype("float32")
W2 = RNG.uniform(-0.5, 0.5, (8, 3)).astype("float32")
B2 = RNG.uniform(-0.1, 0.1, (3,)).astype("float32")
XS = [RNG.randn(5, 6).astype("float32") for _ in range(4)]
YS = [RNG.randint(0, 3, (5, 1)).astype("int64") for _ in range(4)]


def _init(value: np.ndarray) -> ParamAttr:
    return ParamAttr(initializer=fluid.initializer.NumpyArrayInitializer(value))


class MLP(fluid.dygraph.Layer):
    """Two fc layers (parameters made once, by the Layer); the same code builds a Program."""

    def __init__(self, name_scope):
        super().__init__(name_scope)
        self.w1 = self.create_parameter(_init(W1), W1.shape, "float32")
        self.b1 = self.create_parameter(_init(B1), B1.shape, "float32", is_bias=True)
        self.w2 = self.create_parameter(_init(W2), W2.shape, "float32")
        self.b2 = self.create_parameter(_init(B2), B2.shape, "float32", is_bias=True)

    def forward(self, x, y):
        h = fluid.layers.tanh(fluid.layers.elementwise_add(fluid.layers.matmul(x, self.w1),
                                                           self.b1))
        logits = fluid.layers.matmul(h, self.w2) + self.b2
        loss = fluid.layers.softmax_with_cross_entropy(logits, y)
        return fluid.layers.mean(loss)


def _static(make_opt):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = fluid.layers.data("x", shape=[6])
        y = fluid.layers.data("y", shape=[1], dtype="int64")
        loss = MLP("mlp")(x, y)
        make_opt().minimize(loss)
    scope = fluid.Scope()
    exe = fluid.Executor(fluid.CPUPlace())
    with fluid.scope_guard(scope):
        exe.run(startup)
        losses = [exe.run(main, feed={"x": xb, "y": yb}, fetch_list=[loss])[0].item()
                  for xb, yb in zip(XS, YS)]
        params = {p.name: np.array(scope.find_var(p.name).get_tensor())
                  for p in main.all_parameters()}
    return losses, params


def _imperative(make_opt):
    with fluid.dygraph.guard():
        model = MLP("mlp")
        opt = make_opt()
        losses = []
        for xb, yb in zip(XS, YS):
            loss = model(fluid.dygraph.to_variable(xb), fluid.dygraph.to_variable(yb))
            loss.backward()
            opt.minimize(loss)
            model.clear_gradients()
            losses.append(loss.numpy().item())
        params = {p.name: p.numpy() for p in model.parameters()}
    return losses, params


OPTIMIZERS = {
    "sgd": lambda: fluid.optimizer.SGD(learning_rate=0.5),
    "adam": lambda: fluid.optimizer.Adam(learning_rate=0.05),
    "momentum": lambda: fluid.optimizer.Momentum(0.2, momentum=0.9),
    "nesterov_l2": lambda: fluid.optimizer.Momentum(
        0.2, momentum=0.9, use_nesterov=True, regularization=fluid.regularizer.L2Decay(0.01)),
    "adagrad": lambda: fluid.optimizer.Adagrad(learning_rate=0.2),
    "rmsprop": lambda: fluid.optimizer.RMSProp(learning_rate=0.05),
    "adamax": lambda: fluid.optimizer.Adamax(learning_rate=0.05),
    "decayed_adagrad": lambda: fluid.optimizer.DecayedAdagrad(learning_rate=0.2),
    "adadelta": lambda: fluid.optimizer.Adadelta(learning_rate=0.5),
    "ftrl": lambda: fluid.optimizer.Ftrl(learning_rate=0.2),
    "lamb": lambda: fluid.optimizer.Lamb(learning_rate=0.05),
    "lars": lambda: fluid.optimizer.LarsMomentum(learning_rate=0.2, momentum=0.9),
    "sgd_global_norm_clip": lambda: fluid.optimizer.SGD(
        learning_rate=0.5, grad_clip=fluid.clip.GradientClipByGlobalNorm(0.5)),
}


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_mlp_matches_static_program(name):
    make_opt = OPTIMIZERS[name]
    s_losses, s_params = _static(make_opt)
    d_losses, d_params = _imperative(make_opt)
    assert s_losses[0] != s_losses[-1]  # it trains
    np.testing.assert_allclose(d_losses, s_losses, rtol=1e-5, atol=1e-6)
    assert sorted(d_params) == sorted(s_params)
    for name, value in s_params.items():
        np.testing.assert_allclose(d_params[name], value, rtol=1e-5, atol=1e-6, err_msg=name)


CONV_W = RNG.uniform(-0.3, 0.3, (4, 2, 3, 3)).astype("float32")
FC_W = RNG.uniform(-0.3, 0.3, (4 * 3 * 3, 3)).astype("float32")
IMGS = [RNG.randn(4, 2, 6, 6).astype("float32") for _ in range(3)]
LABELS = [RNG.randint(0, 3, (4, 1)).astype("int64") for _ in range(3)]


def _cnn(img, label):
    """fluid.layers functions called at every step: named ParamAttrs make them reuse their
    parameters (in a Program, in the imperative mode alike)."""
    conv = fluid.layers.conv2d(img, num_filters=4, filter_size=3, padding=1,
                               param_attr=ParamAttr("conv_w", initializer=fluid.initializer
                                                    .NumpyArrayInitializer(CONV_W)),
                               bias_attr=ParamAttr("conv_b"))
    bn = fluid.layers.batch_norm(conv, act="relu", param_attr=ParamAttr("bn_s"),
                                 bias_attr=ParamAttr("bn_b"), moving_mean_name="bn_mean",
                                 moving_variance_name="bn_var")
    pool = fluid.layers.pool2d(bn, pool_size=2, pool_stride=2, pool_type="max")
    logits = fluid.layers.fc(pool, size=3, param_attr=ParamAttr(
        "fc_w", initializer=fluid.initializer.NumpyArrayInitializer(FC_W)),
        bias_attr=ParamAttr("fc_b"))
    return fluid.layers.mean(fluid.layers.softmax_with_cross_entropy(logits, label))


def test_layer_functions_with_named_parameters_train_as_the_program():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        img = fluid.layers.data("img", shape=[2, 6, 6])
        label = fluid.layers.data("label", shape=[1], dtype="int64")
        loss = _cnn(img, label)
        fluid.optimizer.Momentum(0.1, momentum=0.9).minimize(loss)
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    with fluid.scope_guard(scope):
        exe.run(startup)
        s_losses = [exe.run(main, feed={"img": i, "label": lb}, fetch_list=[loss])[0].item()
                    for i, lb in zip(IMGS, LABELS)]
        names = sorted(v.name for v in main.list_vars() if v.persistable and
                       v.name.startswith(("conv", "bn", "fc")))
        s_state = {n: np.array(scope.find_var(n).get_tensor()) for n in names}
    with fluid.dygraph.guard():
        opt = fluid.optimizer.Momentum(0.1, momentum=0.9)
        d_losses = []
        for i, lb in zip(IMGS, LABELS):
            loss = _cnn(fluid.dygraph.to_variable(i), fluid.dygraph.to_variable(lb))
            loss.backward()
            opt.minimize(loss)
            for p in fluid.framework._dygraph_tracer().all_parameters():
                p.clear_gradient()
            d_losses.append(loss.numpy().item())
        tracer = fluid.framework._dygraph_tracer()
        d_state = {n: tracer._vars[n].numpy() for n in names}
    assert {"bn_b", "bn_mean", "bn_s", "bn_var", "conv_b", "conv_w", "fc_b", "fc_w",
            "conv_w_velocity_0"} <= set(names)
    np.testing.assert_allclose(d_losses, s_losses, rtol=1e-5, atol=1e-6)
    for n in names:  # parameters, moving statistics, velocities
        np.testing.assert_allclose(d_state[n], s_state[n], rtol=1e-5, atol=1e-6, err_msg=n)
