"""Op table: spectral_norm, crop_tensor, shard_index, merge_selected_rows,
get_tensor_from_selected_rows; and the layers."""

import numpy as np
import pytest

import parafluid as fluid
from parafluid.testing import OpCase, check_op, rand, run_op


def spectral_ref(Weight, U, V, attrs):
    dim = attrs["dim"]
    mat = np.moveaxis(Weight, dim, 0).reshape(Weight.shape[dim], -1)
    u, v = U, V
    for _ in range(attrs["power_iters"]):
        v = mat.T @ u
        v = v / (np.linalg.norm(v) + attrs["eps"])
        u = mat @ v
        u = u / (np.linalg.norm(u) + attrs["eps"])
    return {"Out": Weight / (u @ mat @ v)}


W = rand(3, 4, 2, seed=5)

CASES = [
    OpCase("spectral_norm", {"Weight": W, "U": rand(4, seed=1), "V": rand(6, seed=2)},
           attrs={"dim": 1, "power_iters": 2}, ref=spectral_ref),
    # enough iterations for the power method to converge: the gradient with u, v held
    # constant is then the exact one
    OpCase("spectral_norm", {"Weight": W, "U": rand(3, seed=1), "V": rand(8, seed=2)},
           attrs={"dim": 0, "power_iters": 60}, ref=spectral_ref, grad=["Weight"],
           grad_atol=1e-4, id="spectral_norm_converged_grad"),
    OpCase("crop_tensor", {"X": rand(3, 4, 5)},
           attrs={"shape": [2, -1, 3], "offsets": [1, 1, 2]},
           ref=lambda X: {"Out": X[1:3, 1:, 2:5]}, grad=["X"]),
    OpCase("crop_tensor", {"X": rand(3, 4), "Shape": np.array([2, 2], "int32"),
                           "Offsets": np.array([0, 2], "int32")},
           ref=lambda X, Shape, Offsets: {"Out": X[0:2, 2:4]}, grad=["X"],
           id="crop_tensor_tensors"),
    OpCase("shard_index", {"X": np.array([[1], [6], [12], [19]], "int64")},
           attrs={"index_num": 20, "nshards": 2, "shard_id": 0},
           ref=lambda X: {"Out": np.array([[1], [6], [-1], [-1]])}),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_op(case):
    check_op(case)


def test_selected_rows_layers_on_a_sparse_gradient():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        ids = fluid.layers.data(name="ids", shape=[1], dtype="int64")
        emb = fluid.layers.embedding(ids, size=[6, 2], is_sparse=True,
                                     param_attr=fluid.ParamAttr(name="table"))
        loss = fluid.layers.reduce_sum(emb)
        fluid.backward.append_backward(loss)
        grad = main.global_block().var("table@GRAD")
        merged = fluid.layers.merge_selected_rows(grad)
        rows = fluid.layers.get_tensor_from_selected_rows(merged)
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    got, = exe.run(main, feed={"ids": np.array([[4], [1], [4]], "int64")}, fetch_list=[rows])
    np.testing.assert_allclose(got, [[1.0, 1.0], [2.0, 2.0]])  # rows 1 and 4, 4 seen twice


def test_spectral_norm_layer_divides_by_the_top_singular_value():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        w = fluid.layers.data(name="w", shape=[4, 6], dtype="float32",
                              append_batch_size=False)
        out = fluid.layers.spectral_norm(w, dim=0, power_iters=50)
    params = main.global_block().all_parameters()
    assert sorted(p.shape for p in params) == [(4,), (6,)]
    assert not any(p.trainable for p in params)
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    x = rand(4, 6, seed=3).astype("float32")
    got, = exe.run(main, feed={"w": x}, fetch_list=[out])
    np.testing.assert_allclose(got, x / np.linalg.svd(x, compute_uv=False)[0], rtol=1e-4)


def test_merge_selected_rows_refuses_a_dense_variable():
    with pytest.raises(TypeError, match="merge_selected_rows: X must be a SelectedRows"):
        run_op(OpCase("merge_selected_rows", {"X": rand(2, 2)}))


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


def test_random_crop_draws_in_bounds_crops_that_change_between_runs():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        img = fluid.layers.data(name="img", shape=[2, 6, 6], dtype="float32")
        patch = fluid.layers.random_crop(img, shape=[2, 3, 3], seed=11)
    assert patch.shape == (-1, 2, 3, 3)
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    x = np.arange(4 * 2 * 6 * 6, dtype="float32").reshape(4, 2, 6, 6)
    firsts = []
    for _ in range(3):
        got, = exe.run(main, feed={"img": x}, fetch_list=[patch])
        for n in range(4):  # each patch is a contiguous 3x3 window of its own image
            r, c = divmod(int(got[n, 0, 0, 0] - x[n, 0, 0, 0]), 6)
            np.testing.assert_array_equal(got[n], x[n, :, r:r + 3, c:c + 3])
        firsts.append(got[:, 0, 0, 0].tolist())
    assert firsts[0] != firsts[1] or firsts[1] != firsts[2]  # the seed advanced
