"""py_func: Python functions as ops, forward and backward, and run for their side effect."""

import numpy as np

import parafluid as fluid


def _tanh(x):
    return np.tanh(np.array(x))


def _tanh_grad(y, dy):
    return np.array(dy) * (1 - np.square(np.array(y)))


def test_py_func_forward_and_backward_train_like_the_native_op():
    """The same net with py_func(tanh) and with layers.tanh: equal losses and gradients."""
    rng = np.random.RandomState(0)
    feed = {"x": rng.randn(8, 3).astype("float32"), "y": rng.randn(8, 1).astype("float32")}

    def run(use_py_func):
        main, startup = fluid.Program(), fluid.Program()
        startup.random_seed = 3
        with fluid.program_guard(main, startup):
            x = fluid.layers.data(name="x", shape=[3], dtype="float32")
            y = fluid.layers.data(name="y", shape=[1], dtype="float32")
            h = fluid.layers.fc(x, size=4, param_attr=fluid.ParamAttr(name="w1"))
            if use_py_func:
                act = main.global_block().create_var(name="act", shape=[-1, 4],
                                                     dtype="float32")
                fluid.layers.py_func(_tanh, h, act, backward_func=_tanh_grad,
                                     skip_vars_in_backward_input=h)
            else:
                act = fluid.layers.tanh(h)
            pred = fluid.layers.fc(act, size=1, param_attr=fluid.ParamAttr(name="w2"))
            loss = fluid.layers.mean(fluid.layers.square_error_cost(pred, y))
            fluid.optimizer.SGD(learning_rate=0.1).minimize(loss)
        exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
        exe.run(startup, scope=scope)
        losses = [exe.run(main, feed=feed, fetch_list=[loss], scope=scope)[0]
                  for _ in range(3)]
        return losses, np.array(scope.find_var("w1").get_tensor())

    (native_losses, native_w1), (py_losses, py_w1) = run(False), run(True)
    np.testing.assert_allclose(py_losses, native_losses, rtol=1e-5)
    np.testing.assert_allclose(py_w1, native_w1, rtol=1e-5)


def test_py_func_without_outputs_runs_for_its_side_effect():
    seen = []
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data(name="x", shape=[2], dtype="float32")
        fluid.layers.py_func(lambda t: seen.append(np.array(t).sum()), x, None)
        out = fluid.layers.scale(x, scale=2.0)
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    exe.run(main, feed={"x": np.ones((3, 2), "float32")}, fetch_list=[out])
    assert seen == [6.0]
