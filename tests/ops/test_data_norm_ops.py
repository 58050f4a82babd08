"""Op table: data_norm (normalization by accumulated statistics), and its layer: the
statistics' "gradients" are the batch summaries an optimizer step adds in."""

import numpy as np
import pytest

import parafluid as fluid
from parafluid.testing import OpCase, check_op, rand


def data_norm_ref(X, BatchSize, BatchSum, BatchSquareSum):
    means = BatchSum / BatchSize
    scales = np.sqrt(BatchSize / BatchSquareSum)
    return {"Y": (X - means) * scales, "Means": means, "Scales": scales}


STATS = {"BatchSize": rand(4, low=5, high=9, seed=2), "BatchSum": rand(4, seed=3),
         "BatchSquareSum": rand(4, low=2, high=6, seed=4)}

CASES = [
    OpCase("data_norm", {"X": rand(5, 4, seed=1), **STATS}, ref=data_norm_ref, grad=["X"],
           grad_outputs=["Y"]),
    OpCase("data_norm", {"X": rand(1, 3, seed=5), "BatchSize": np.full(3, 1e4),
                         "BatchSum": np.zeros(3), "BatchSquareSum": np.full(3, 1e4)},
           ref=data_norm_ref, grad=["X"], grad_outputs=["Y"], id="data_norm_initial_stats"),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_op(case):
    check_op(case)


def test_data_norm_layer_stats_gradients_and_sgd_update():
    x_np = rand(6, 3, seed=7, dtype="float32")
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data(name="x", shape=[3], dtype="float32")
        y = fluid.layers.data_norm(input=x, epsilon=1e-3, name="dn",
                                   param_attr={"batch_size": 100.0, "batch_sum": 5.0,
                                               "batch_square": 400.0})
        loss = fluid.layers.reduce_sum(y)
        fluid.optimizer.SGD(learning_rate=0.5).minimize(loss)
    assert [p.name for p in main.all_parameters()] == [
        "dn.batch_size", "dn.batch_sum", "dn.batch_square_sum"]
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.Scope()
    exe.run(startup, scope=scope)
    out, = exe.run(main, feed={"x": x_np}, fetch_list=[y], scope=scope)
    mean, scale = 5.0 / 100.0, np.sqrt(100.0 / 400.0)
    np.testing.assert_allclose(out, (x_np - mean) * scale, rtol=1e-5)
    # the statistics move by -lr * (count, sum, centred square sum + N * eps)
    size = np.asarray(scope.find_var("dn.batch_size").get_tensor())
    total = np.asarray(scope.find_var("dn.batch_sum").get_tensor())
    square = np.asarray(scope.find_var("dn.batch_square_sum").get_tensor())
    np.testing.assert_allclose(size, 100.0 - 0.5 * 6, rtol=1e-6)
    np.testing.assert_allclose(total, 5.0 - 0.5 * x_np.sum(0), rtol=1e-5)
    np.testing.assert_allclose(
        square, 400.0 - 0.5 * (((x_np - mean) ** 2).sum(0) + 6 * 1e-3), rtol=1e-5)


def test_data_norm_rejects_non_2d_input():
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        x = fluid.layers.data(name="x", shape=[3, 4], dtype="float32")
        with pytest.raises(ValueError, match=r"data_norm: input must be 2-D \[N, C\]"):
            fluid.layers.data_norm(input=x)
