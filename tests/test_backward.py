"""The backward-pass API: append_backward pairs, op roles, renamed gradient sums,
stop_gradient / no_grad_set, fluid.gradients vs finite differences, and convergence."""

import numpy as np
import pytest

import parafluid as fluid
from parafluid.framework import OpRole

L = fluid.layers
RNG = np.random.RandomState(0)
X = RNG.uniform(-1, 1, (6, 4))
Y = RNG.uniform(-1, 1, (6, 3))


def _attr(name, trainable=True):
    return fluid.ParamAttr(name=name, trainable=trainable)


def _mlp(w0_trainable=True):
    """x -> fc(w0, b0) -> h -> fc(w1, b1) -> squared error; returns (h, loss)."""
    x = L.data(name="x", shape=[4], dtype="float64")
    y = L.data(name="y", shape=[3], dtype="float64")
    h = L.fc(x, size=5, param_attr=_attr("w0", w0_trainable), bias_attr=_attr("b0"))
    pred = L.fc(h, size=3, param_attr=_attr("w1"), bias_attr=_attr("b1"))
    d = L.elementwise_sub(pred, y)
    return h, L.mean(L.elementwise_mul(d, d))


def _programs():
    return fluid.Program(), fluid.Program()


def test_pairs_for_all_trainable_params():
    main, startup = _programs()
    with fluid.program_guard(main, startup):
        _, loss = _mlp(w0_trainable=False)
        pairs = fluid.append_backward(loss)
    assert [(p.name, g.name) for p, g in pairs] == \
        [("b0", "b0@GRAD"), ("w1", "w1@GRAD"), ("b1", "b1@GRAD")]
    for p, g in pairs:
        assert g.shape == p.shape and g.dtype == p.dtype
    main.verify()


def test_parameter_list():
    main, startup = _programs()
    with fluid.program_guard(main, startup):
        _, loss = _mlp()
        pairs = fluid.append_backward(loss, parameter_list=["w1", "w0"])
    assert [p.name for p, _ in pairs] == ["w1", "w0"]


def test_op_roles_and_role_vars():
    main, startup = _programs()
    with fluid.program_guard(main, startup):
        _, loss = _mlp()
        _, pairs = fluid.optimizer.SGD(learning_rate=0.1).minimize(loss)
    ops = main.global_block().ops
    loss_op = next(op for op in ops if loss.name in op.output_arg_names)
    assert loss_op.type == "mean" and loss_op.attr("op_role") == OpRole.Forward | OpRole.Loss
    seed = next(op for op in ops if op.output_arg_names == [loss.name + "@GRAD"])
    assert seed.attr("op_role") == OpRole.Backward | OpRole.Loss
    first_grad = ops.index(seed)
    assert all(op.attr("op_role") == OpRole.Forward for op in ops[:first_grad]
               if op is not loss_op)
    grad_ops = [op for op in ops[first_grad + 1:] if op.type != "sgd"]
    assert grad_ops and all(op.attr("op_role") == OpRole.Backward for op in grad_ops)
    for p, g in pairs:
        producer = [op for op in grad_ops if g.name in op.output_arg_names]
        assert len(producer) == 1
        role_var = producer[0].attr("op_role_var")
        pairs_in_attr = list(zip(role_var[::2], role_var[1::2]))
        assert (p.name, g.name) in pairs_in_attr
    sgd = [op for op in ops if op.type == "sgd"]
    assert len(sgd) == 4
    for op in sgd:
        assert op.attr("op_role") == OpRole.Optimize
        assert op.attr("op_role_var") == [op.input("Param")[0], op.input("Grad")[0]]


def _loss_at(main, scope, loss, name, value):
    scope.find_var(name).get_tensor().set(value, fluid.CPUPlace())
    return float(fluid.Executor().run(main, feed={"x": X, "y": Y}, fetch_list=[loss],
                                      scope=scope)[0][0])


def _finite_difference(main, scope, loss, name, eps=1e-6):
    base = np.array(scope.find_var(name).get_tensor())
    numeric = np.zeros_like(base)
    for i in range(base.size):
        for sign in (1, -1):
            trial = base.copy()
            trial.flat[i] += sign * eps
            numeric.flat[i] += sign * _loss_at(main, scope, loss, name, trial)
    scope.find_var(name).get_tensor().set(base, fluid.CPUPlace())
    return numeric / (2 * eps)


def test_variable_used_twice_gets_renamed_and_summed():
    main, startup = _programs()
    with fluid.program_guard(main, startup):
        x = L.data(name="x", shape=[4], dtype="float64")
        y = L.data(name="y", shape=[3], dtype="float64")
        h = L.fc(x, size=3, param_attr=_attr("w0"), bias_attr=_attr("b0"))
        a = L.fc(h, size=3, param_attr=_attr("wa"), bias_attr=False)
        d = L.elementwise_sub(L.elementwise_mul(a, h), y)  # h is read by two ops
        loss = L.mean(L.elementwise_mul(d, d))
        pairs = dict((p.name, g) for p, g in fluid.append_backward(loss))
    main.verify()
    ops = main.global_block().ops
    hg = h.name + "@GRAD"
    parts = [f"{hg}@RENAME@0", f"{hg}@RENAME@1"]
    for part in parts:
        assert sum(part in op.output_arg_names for op in ops) == 1
    summing = [op for op in ops if op.output_arg_names == [hg]]
    assert len(summing) == 1 and summing[0].type == "sum"
    assert sorted(summing[0].input("X")) == parts
    # d is used twice too (d * d).
    assert any(op.type == "sum" and op.output_arg_names == [d.name + "@GRAD"] for op in ops)
    scope, exe = fluid.Scope(), fluid.Executor()
    exe.run(startup, scope=scope)
    for name in ("w0", "wa"):
        analytic = exe.run(main, feed={"x": X, "y": Y}, fetch_list=[pairs[name]],
                           scope=scope)[0]
        np.testing.assert_allclose(analytic, _finite_difference(main, scope, loss, name),
                                   rtol=1e-5, atol=1e-8, err_msg=name)


def _grad_producers(main):
    return {n for op in main.global_block().ops for n in op.output_arg_names
            if n.endswith("@GRAD")}


def test_stop_gradient_blocks_earlier_params():
    main, startup = _programs()
    with fluid.program_guard(main, startup):
        h, loss = _mlp()
        h.stop_gradient = True
        pairs = fluid.append_backward(loss)
    assert [p.name for p, _ in pairs] == ["w1", "b1"]
    assert not {"w0@GRAD", "b0@GRAD", h.name + "@GRAD"} & _grad_producers(main)


def test_no_grad_set():
    main, startup = _programs()
    with fluid.program_guard(main, startup):
        h, loss = _mlp()
        pairs = fluid.append_backward(loss, no_grad_set={"w1"})
    assert [p.name for p, _ in pairs] == ["w0", "b0", "b1"]
    assert "w1@GRAD" not in _grad_producers(main)
    main, startup = _programs()
    with fluid.program_guard(main, startup):
        h, loss = _mlp()
        pairs = fluid.append_backward(loss, no_grad_set={h.name})
    assert [p.name for p, _ in pairs] == ["w1", "b1"]


def test_gradients_match_finite_differences():
    main, startup = _programs()
    with fluid.program_guard(main, startup):
        x = L.data(name="x", shape=[4], dtype="float64", stop_gradient=False)
        y = L.data(name="y", shape=[3], dtype="float64")
        h = L.fc(x, size=5, param_attr=_attr("w0"), bias_attr=_attr("b0"))
        out = L.elementwise_mul(L.fc(h, size=3, param_attr=_attr("w1"), bias_attr=False), y)
        target = L.mean(L.elementwise_mul(out, out))
        unused = L.data(name="unused", shape=[4], dtype="float64", stop_gradient=False)
        gx, gw0, g_unused = fluid.gradients([target], [x, main.global_block().var("w0"), unused])
    assert g_unused is None  # not on any path to the target
    main.verify()
    scope, exe = fluid.Scope(), fluid.Executor()
    exe.run(startup, scope=scope)
    got_x, got_w0 = exe.run(main, feed={"x": X, "y": Y}, fetch_list=[gx, gw0], scope=scope)

    def objective(xv):
        return float(exe.run(main, feed={"x": xv, "y": Y}, fetch_list=[target],
                             scope=scope)[0][0])
    numeric = np.zeros_like(X)
    eps = 1e-6
    for i in range(X.size):
        for sign in (1, -1):
            trial = X.copy()
            trial.flat[i] += sign * eps
            numeric.flat[i] += sign * objective(trial)
    np.testing.assert_allclose(got_x, numeric / (2 * eps), rtol=1e-5, atol=1e-9)
    np.testing.assert_allclose(got_w0, _finite_difference(main, scope, target, "w0"),
                               rtol=1e-5, atol=1e-9)


def test_gradients_with_target_gradients():
    main, startup = _programs()
    with fluid.program_guard(main, startup):
        x = L.data(name="x", shape=[4], dtype="float64", stop_gradient=False)
        h = L.fc(x, size=2, param_attr=_attr("w0"), bias_attr=False)
        seed = L.data(name="seed", shape=[2], dtype="float64")
        (gx,) = fluid.gradients(h, x, target_gradients=seed)
    scope, exe = fluid.Scope(), fluid.Executor()
    exe.run(startup, scope=scope)
    s = RNG.uniform(-1, 1, (6, 2))
    got = exe.run(main, feed={"x": X, "seed": s}, fetch_list=[gx], scope=scope)[0]
    w0 = np.array(scope.find_var("w0").get_tensor())
    np.testing.assert_allclose(got, s @ w0.T, rtol=1e-12)



def test_gradients_of_targets_that_feed_each_other():
    """d(y1 + y2)/dx where y2 = 3 * y1: the seed of y1@GRAD and y2's contribution add up;
    a target listed twice counts twice."""
    for targets, want in ((lambda y1, y2: [y1, y2], 2.0 + 6.0), (lambda y1, y2: [y1, y1], 4.0)):
        main, startup = _programs()
        with fluid.program_guard(main, startup):
            x = L.data(name="x", shape=[3], dtype="float64", stop_gradient=False)
            y1 = L.scale(x, scale=2.0)
            y2 = L.scale(y1, scale=3.0)
            (gx,) = fluid.gradients(targets(y1, y2), [x])
        main.verify()
        (got,) = fluid.Executor().run(main, feed={"x": X[:, :3]}, fetch_list=[gx],
                                      scope=fluid.Scope())
        np.testing.assert_allclose(got, np.full((6, 3), want))

@pytest.mark.parametrize("make_opt", [
    lambda: fluid.optimizer.Momentum(learning_rate=0.05, momentum=0.9),
    lambda: fluid.optimizer.Adam(learning_rate=0.1),
], ids=["momentum", "adam"])
def test_small_regression_converges(make_opt):
    rng = np.random.RandomState(1)
    x = rng.uniform(-1, 1, (32, 4)).astype("float32")
    y = (x @ np.array([[1.5], [-2.0], [0.5], [3.0]]) + 0.7).astype("float32")
    main, startup = _programs()
    main.random_seed = startup.random_seed = 1
    with fluid.program_guard(main, startup):
        xv = L.data(name="x", shape=[4], dtype="float32")
        yv = L.data(name="y", shape=[1], dtype="float32")
        d = L.elementwise_sub(L.fc(xv, size=1), yv)
        loss = L.mean(L.elementwise_mul(d, d))
        make_opt().minimize(loss)
    scope, exe = fluid.Scope(), fluid.Executor()
    exe.run(startup, scope=scope)
    losses = [float(exe.run(main, feed={"x": x, "y": y}, fetch_list=[loss], scope=scope)[0][0])
              for _ in range(80)]
    assert losses[-1] < losses[0] / 10, losses[::10]



def test_a_gradient_maker_gets_the_backward_context():
    """A maker's third argument is the backward pass's GradContext (``append_grad_ops``
    differentiates a whole block: while/conditional_block build their gradient blocks with
    it, see test_control_flow_grad.py)."""
    from parafluid.ops.registry import GradContext, register_op, same_as

    seen = []

    def maker(op, no_grad, ctx):
        seen.append(ctx)
        return [{"type": "scale", "inputs": {"X": [op.output("Out")[0] + "@GRAD"]},
                 "outputs": {"Out": [op.input("X")[0] + "@GRAD"]}, "attrs": {"scale": 3.0}}]

    register_op("triple_for_context_test", inputs=("X",), outputs=("Out",),
                infer_shape=same_as("X"),
                kernel=lambda ins, attrs, ctx: {"Out": ins["X"] * 3.0}, grad=maker)
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data(name="x", shape=[1], dtype="float32")
        x.stop_gradient = False
        out = main.global_block().create_var(name="out", shape=[-1, 1], dtype="float32")
        main.global_block().append_op("triple_for_context_test", inputs={"X": [x]},
                                      outputs={"Out": [out]})
        grad, = fluid.backward.gradients([fluid.layers.reduce_sum(out)], [x])
    assert len(seen) == 1 and isinstance(seen[0], GradContext)
    assert callable(seen[0].append_grad_ops)
    g, = fluid.Executor(fluid.CPUPlace()).run(main, feed={"x": np.ones((2, 1), "float32")},
                                              fetch_list=[grad], scope=fluid.Scope())
    np.testing.assert_allclose(g, np.full((2, 1), 3.0))


def test_append_backward_gives_a_data_layer_that_opts_in_its_gradient():
    """As in Fluid: ``x = layers.data(...); x.stop_gradient = False`` makes append_backward
    write ``x@GRAD`` (not returned: it is no parameter); a data layer that keeps the default
    gets none."""
    main, startup = _programs()
    with fluid.program_guard(main, startup):
        _, loss = _mlp()
        x = main.global_block().var("x")
        x.stop_gradient = False
        pairs = fluid.append_backward(loss, parameter_list=["w1"])
    assert [p.name for p, _ in pairs] == ["w1"]
    grads = _grad_producers(main)
    assert "x@GRAD" in grads and "y@GRAD" not in grads
    main.verify()
    scope, exe = fluid.Scope(), fluid.Executor()
    exe.run(startup, scope=scope)
    got, = exe.run(main, feed={"x": X, "y": Y}, fetch_list=["x@GRAD"], scope=scope)
    eps, numeric = 1e-6, np.zeros_like(X)
    for i in range(X.size):
        for sign in (1, -1):
            trial = X.copy()
            trial.flat[i] += sign * eps
            numeric.flat[i] += sign * float(exe.run(main, feed={"x": trial, "y": Y},
                                                    fetch_list=[loss], scope=scope)[0][0])
    np.testing.assert_allclose(got, numeric / (2 * eps), rtol=1e-5, atol=1e-9)
