"""fluid.contrib.mixed_precision: the float16 rewrite (casts around white-list ops, float32
master weights), static and dynamic loss scaling with the inf/nan check, the op lists, and
training losses close to float32 training on the CPU."""

import numpy as np
import pytest

import parafluid as fluid
from parafluid.contrib import mixed_precision
from parafluid.contrib.mixed_precision import fp16_lists

L = fluid.layers
RNG = np.random.RandomState(0)
X = RNG.normal(0, 1, (32, 16)).astype("float32")
Y = X[:, :4].argmax(1).reshape(-1, 1).astype("int64")
IMG = RNG.normal(0, 1, (8, 3, 8, 8)).astype("float32")
IMG_Y = (IMG.mean(axis=(1, 2, 3)) > 0).astype("int64").reshape(-1, 1)


def mlp(x):
    h = L.fc(x, 32, act="relu")
    return L.fc(h, 4, act="softmax")


def convnet(img):
    c = L.conv2d(img, num_filters=4, filter_size=3, padding=1)
    c = L.batch_norm(c, act="relu")
    c = L.pool2d(c, pool_size=2, pool_stride=2)
    return L.fc(c, 2, act="softmax")


def _build(net, shape, amp, lr=0.5, **kwargs):
    main, start = fluid.Program(), fluid.Program()
    main.random_seed = start.random_seed = 5
    with fluid.program_guard(main, start), fluid.unique_name.guard():
        x = L.data("x", shape=shape, dtype="float32")
        y = L.data("y", shape=[1], dtype="int64")
        loss = L.mean(L.cross_entropy(net(x), y))
        opt = fluid.optimizer.SGD(lr)
        if amp:
            opt = mixed_precision.decorate(opt, **kwargs)
        opt.minimize(loss)
    return main, start, loss, opt


def _train(main, start, loss, feed, steps, fetch=()):
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    out = []
    with fluid.scope_guard(scope):
        exe.run(start)
        for _ in range(steps):
            r = exe.run(main, feed=feed, fetch_list=[loss, *fetch])
            out.append([float(np.asarray(v).reshape(-1)[0]) for v in r])
    return np.array(out), scope


def _reads(main, op_type, slot):
    block = main.global_block()
    return [block.var(op.input(slot)[0]).dtype for op in block.ops if op.type == op_type]


@pytest.mark.parametrize("net,shape,feed", [
    (mlp, [16], {"x": X, "y": Y}), (convnet, [3, 8, 8], {"x": IMG, "y": IMG_Y})],
    ids=["mlp", "convnet"])
def test_float16_training_follows_float32_training(net, shape, feed):
    ref, _ = _train(*_build(net, shape, amp=False)[:3], feed, 8)
    main, start, loss, opt = _build(net, shape, amp=True, init_loss_scaling=128.0)
    main.verify()
    got, scope = _train(main, start, loss, feed, 8)
    np.testing.assert_allclose(got[:, 0], ref[:, 0], rtol=2e-2, atol=2e-3)
    assert got[-1, 0] < got[0, 0]
    # white-list ops read float16, black-list ops float32; parameters stay float32
    white = "mul" if net is mlp else "conv2d"
    assert set(_reads(main, white, "X" if white == "mul" else "Input")) == {"float16"}
    assert _reads(main, "softmax", "X") == ["float32"]
    assert all(p.dtype == "float32" for p in main.global_block().all_parameters())
    assert all(np.asarray(scope.find_var(p.name).get_tensor()).dtype == np.float32
               for p in main.global_block().all_parameters())
    casts = [op for op in main.global_block().ops if op.type == "cast"]
    assert any(op.attr("out_dtype") == "float16" for op in casts)
    assert any(op.attr("out_dtype") == "float32" for op in casts)


def test_static_loss_scaling_scales_the_loss_and_unscales_the_gradients():
    main, start, loss, opt = _build(mlp, [16], amp=True, init_loss_scaling=64.0,
                                    use_dynamic_loss_scaling=False)
    assert "isfinite" not in str(main)
    got, _ = _train(main, start, loss, {"x": X, "y": Y}, 4,
                    fetch=[opt.get_scaled_loss(), opt.get_loss_scaling()])
    np.testing.assert_allclose(got[:, 1], got[:, 0] * 64.0, rtol=1e-6)
    assert list(got[:, 2]) == [64.0] * 4
    ref, _ = _train(*_build(mlp, [16], amp=False)[:3], {"x": X, "y": Y}, 4)
    np.testing.assert_allclose(got[:, 0], ref[:, 0], rtol=2e-2)


def test_dynamic_loss_scaling_grows_after_finite_steps():
    main, start, loss, opt = _build(mlp, [16], amp=True, init_loss_scaling=8.0,
                                    incr_every_n_steps=2, incr_ratio=2.0)
    got, _ = _train(main, start, loss, {"x": X, "y": Y}, 6,
                    fetch=[opt.get_loss_scaling()])
    # Fluid 1.6's counting: the step after incr_every_n_steps finite steps grows it
    assert list(got[:, 1]) == [8.0, 8.0, 16.0, 16.0, 16.0, 32.0]


def test_inf_gradients_skip_the_update_and_shrink_the_loss_scaling():
    # a scaled loss whose float16 gradients overflow (65504 is float16's largest value)
    main, start, loss, opt = _build(mlp, [16], amp=True, init_loss_scaling=2.0 ** 30,
                                    decr_every_n_nan_or_inf=1, decr_ratio=0.5)
    params = [p.name for p in main.global_block().all_parameters()]
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    with fluid.scope_guard(scope):
        exe.run(start)
        before = {n: np.array(scope.find_var(n).get_tensor()) for n in params}
        scalings = []
        for _ in range(4):
            scalings.append(float(exe.run(main, feed={"x": X, "y": Y},
                                          fetch_list=[opt.get_loss_scaling()])[0][0]))
            for n in params:  # SGD with the zeroed gradients: nothing moves
                np.testing.assert_array_equal(np.array(scope.find_var(n).get_tensor()),
                                              before[n])
        # Fluid 1.6's counting: the bad step after decr_every_n_nan_or_inf bad steps in a
        # row shrinks it, and a change restarts the count
        assert scalings == [2.0 ** 30, 2.0 ** 29, 2.0 ** 29, 2.0 ** 28]
        # once the scaling is small enough the gradients are finite and training moves on
        scope.find_var(opt.get_loss_scaling().name).get_tensor().set(
            np.array([128.0], "float32"), fluid.CPUPlace())
        exe.run(main, feed={"x": X, "y": Y})
        assert any(not np.array_equal(np.array(scope.find_var(n).get_tensor()), before[n])
                   for n in params)


def test_custom_lists_move_ops_between_precisions():
    lists = mixed_precision.AutoMixedPrecisionLists(custom_white_list=["softmax"],
                                                    custom_black_list=["mul"])
    assert "softmax" in lists.white_list and "softmax" not in lists.black_list
    assert "mul" in lists.black_list and "mul" not in lists.white_list
    main, start, loss, _ = _build(mlp, [16], amp=True, amp_lists=lists)
    assert set(_reads(main, "mul", "X")) == {"float32"}
    # elementwise_add and relu follow the float32 mul; softmax itself is float16
    assert _reads(main, "softmax", "X") == ["float16"]
    got, _ = _train(main, start, loss, {"x": X, "y": Y}, 3)
    assert np.isfinite(got).all()
    with pytest.raises(ValueError, match=r"\['mul'\] are in both"):
        mixed_precision.AutoMixedPrecisionLists(custom_white_list=["mul"],
                                                custom_black_list=["mul"])


def test_an_op_without_a_float16_cpu_kernel_runs_in_float32():
    assert "pool3d" in fp16_lists.cpu_float32_only

    def net(x):
        h = L.reshape(L.fc(x, 64), shape=[-1, 1, 4, 4, 4])
        p = L.pool3d(h, pool_size=2, pool_type="avg", pool_stride=2)
        return L.fc(p, 4, act="softmax")

    lists = mixed_precision.AutoMixedPrecisionLists(custom_white_list=["pool3d", "reshape2"])
    main, start, loss, _ = _build(net, [16], amp=True, amp_lists=lists)
    assert _reads(main, "pool3d", "X") == ["float32"]
    assert set(_reads(main, "mul", "X")) == {"float16"}
    got, _ = _train(main, start, loss, {"x": X, "y": Y}, 4)
    ref, _ = _train(*_build(net, [16], amp=False)[:3], {"x": X, "y": Y}, 4)
    np.testing.assert_allclose(got[:, 0], ref[:, 0], rtol=2e-2)


def test_data_parallel_mixed_precision_equals_one_device_on_the_whole_batch():
    # the loss-gradient seed is <scaled loss>@GRAD: the data-parallel executor finds it by
    # its role and scales it by 1/devices, so the averaged step is the whole-batch step
    feed = {"x": X, "y": Y}
    single, _ = _train(*_build(mlp, [16], amp=True, init_loss_scaling=64.0,
                               incr_every_n_steps=2)[:3], feed, 5)
    main, start, loss, opt = _build(mlp, [16], amp=True, init_loss_scaling=64.0,
                                    incr_every_n_steps=2)
    compiled = fluid.CompiledProgram(main).with_data_parallel(
        loss_name=loss.name, places=[fluid.CPUPlace()] * 2)
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    got = []
    with fluid.scope_guard(scope):
        exe.run(start)
        for _ in range(5):
            lv, scaling = exe.run(compiled, feed=feed,
                                  fetch_list=[loss, opt.get_loss_scaling()])
            got.append([float(np.mean(lv)), float(np.asarray(scaling).reshape(-1)[0])])
    got = np.array(got)
    np.testing.assert_allclose(got[:, 0], single[:, 0], rtol=2e-3)
    assert list(got[:, 1]) == [64.0, 64.0, 128.0, 128.0, 128.0]


def _words():
    rng = np.random.RandomState(2)
    lens = [3, 1, 4, 2]
    ids = rng.randint(0, 20, (sum(lens), 1)).astype("int64")
    return {"x": fluid.create_lod_tensor(ids, [lens], fluid.CPUPlace()),
            "y": np.array([[0], [1], [2], [3]], "int64")}


def rnn_net(words):
    emb = L.embedding(words, size=[20, 8], is_sparse=True)
    proj = L.fc(emb, 8, act="tanh")  # float16 (a white mul) before the loop
    rnn = L.DynamicRNN()
    with rnn.block():
        word = rnn.step_input(proj)
        prev = rnn.memory(shape=[8])
        h = L.fc([word, prev], 8, act="tanh")
        rnn.update_memory(prev, h)
        rnn.output(h)
    return L.fc(L.sequence_last_step(rnn()), 4, act="softmax")


def _build_words(amp, **kwargs):
    main, start = fluid.Program(), fluid.Program()
    main.random_seed = start.random_seed = 5
    with fluid.program_guard(main, start), fluid.unique_name.guard():
        words = L.data("x", shape=[1], dtype="int64", lod_level=1)
        y = L.data("y", shape=[1], dtype="int64")
        loss = L.mean(L.cross_entropy(rnn_net(words), y))
        opt = fluid.optimizer.SGD(0.5)
        if amp:
            opt = mixed_precision.decorate(opt, **kwargs)
        opt.minimize(loss)
    return main, start, loss, opt


def test_sparse_gradients_and_a_recurrent_loop_in_mixed_precision():
    ref, _ = _train(*_build_words(amp=False)[:3], _words(), 6)
    main, start, loss, opt = _build_words(amp=True, init_loss_scaling=32.0)
    block = main.global_block()
    # the loop and what it reads stay float32; the projection before it is float16
    while_op = next(op for op in block.ops if op.type == "while")
    assert all(block.var(n).dtype != "float16" for n in while_op.input_arg_names)
    assert "float16" in _reads(main, "mul", "X")
    got, _ = _train(main, start, loss, _words(), 6)
    np.testing.assert_allclose(got[:, 0], ref[:, 0], rtol=2e-2)
    assert got[-1, 0] < got[0, 0]
    # overflowing gradients: the sparse embedding gradient is zeroed like the dense ones
    main, start, loss, opt = _build_words(amp=True, init_loss_scaling=2.0 ** 40)
    emb = next(op.input("W")[0] for op in main.global_block().ops if op.type == "lookup_table")
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    with fluid.scope_guard(scope):
        exe.run(start)
        before = np.array(scope.find_var(emb).get_tensor())
        exe.run(main, feed=_words())
        np.testing.assert_array_equal(np.array(scope.find_var(emb).get_tensor()), before)
