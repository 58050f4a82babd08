"""matmul, square_error_cost and the random-tensor layers, built as a user would."""

import numpy as np
import pytest

import parafluid as fluid


def test_matmul_layer_broadcasts_batch_dims():
    x = fluid.layers.data(name="x", shape=[3, 4], dtype="float32")
    y = fluid.layers.data(name="y", shape=[4, 2], dtype="float32", append_batch_size=False)
    out = fluid.layers.matmul(x, y, alpha=2.0)
    assert out.shape == (-1, 3, 2)
    xs = np.random.RandomState(0).rand(5, 3, 4).astype("float32")
    ys = np.random.RandomState(1).rand(4, 2).astype("float32")
    got, = fluid.Executor(fluid.CPUPlace()).run(feed={"x": xs, "y": ys}, fetch_list=[out])
    np.testing.assert_allclose(got, 2.0 * xs @ ys, rtol=1e-5)


def test_matmul_shape_error_names_both_shapes():
    x = fluid.layers.data(name="x", shape=[3, 4], dtype="float32", append_batch_size=False)
    y = fluid.layers.data(name="y", shape=[5, 2], dtype="float32", append_batch_size=False)
    with pytest.raises(ValueError, match=r"matmul: X \[3, 4\] and Y \[5, 2\].*contract 4 with 5"):
        fluid.layers.matmul(x, y)


def test_square_error_cost_is_fluids_sub_and_square_and_trains():
    x = fluid.layers.data(name="x", shape=[2], dtype="float32")
    y = fluid.layers.data(name="y", shape=[1], dtype="float32")
    cost = fluid.layers.square_error_cost(input=fluid.layers.fc(x, size=1), label=y)
    loss = fluid.layers.mean(cost)
    fluid.optimizer.SGD(learning_rate=0.1).minimize(loss)
    types = [op.type for op in fluid.default_main_program().global_block().ops]
    # as Fluid 1.6's layer builds it (its transpiler tests read these op types)
    assert types[2:4] == ["elementwise_sub", "square"]
    assert "square_grad" in types and "elementwise_sub_grad" in types
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(fluid.default_startup_program())
    xs = np.random.RandomState(0).rand(16, 2).astype("float32")
    ys = xs.sum(1, keepdims=True)
    first = exe.run(feed={"x": xs, "y": ys}, fetch_list=[loss])[0][0]
    for _ in range(100):
        last = exe.run(feed={"x": xs, "y": ys}, fetch_list=[loss])[0][0]
    assert last < 0.1 * first


def test_random_layers_draw_each_run_and_respect_seed():
    u = fluid.layers.uniform_random([50, 40], min=2.0, max=3.0)
    g = fluid.layers.gaussian_random([50, 40], mean=1.0, std=0.5, seed=3)
    exe = fluid.Executor(fluid.CPUPlace())
    a_u, a_g = exe.run(fetch_list=[u, g])
    b_u, b_g = exe.run(fetch_list=[u, g])
    assert a_u.min() >= 2.0 and a_u.max() < 3.0 and not np.array_equal(a_u, b_u)
    assert abs(a_g.mean() - 1.0) < 0.05 and abs(a_g.std() - 0.5) < 0.05
    # a seeded op draws Fluid's values for its seed, the same on every run (Fluid reseeds its
    # engine each run)
    np.testing.assert_array_equal(a_g, b_g)
    with pytest.raises(TypeError, match="uniform_random: shape must be"):
        fluid.layers.uniform_random("3x4")
