"""Names of Fluid 1.6's API added or aligned with Fluid's signatures, used as Fluid's own
tests and programs use them."""

from __future__ import annotations

import gzip
import logging
import math

import numpy as np
import pytest
import torch

import parafluid as fluid
from parafluid import core
from parafluid.testing.op_test import run_layers


def _run(main, startup, feed, fetch):
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    return exe.run(main, feed=feed, fetch_list=fetch, scope=scope)


# ------------------------------------------------------------------ framework and places


def test_program_blocks_name_scope_and_modes():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        with fluid.name_scope("encoder"):
            x = fluid.layers.data(name="x", shape=[2], dtype="float32")
            fluid.layers.fc(x, 3)
        assert main.current_block() is main.global_block()
    assert not fluid.in_dygraph_mode()
    same = fluid.Program.parse_from_string(binary_str=main.serialize_to_string())
    assert str(same) == str(main)


def test_cuda_pinned_places():
    assert fluid.cuda_pinned_places(2) == [fluid.CUDAPinnedPlace()] * 2
    assert core.CUDAPinnedPlace is fluid.CUDAPinnedPlace
    assert isinstance(fluid.CUDAPinnedPlace(), fluid.CPUPlace)  # host memory


def test_lod_tensor_validity_and_tensor_arrays():
    t = fluid.LoDTensor()
    t.set(np.zeros((5, 1), "float32"), fluid.CPUPlace())
    t.set_recursive_sequence_lengths([[2, 3]])
    assert t.has_valid_recursive_sequence_lengths() and t.lod() == [[0, 2, 5]]
    t.set_recursive_sequence_lengths([[2, 2]])
    assert not t.has_valid_recursive_sequence_lengths()  # covers 4 of 5 rows
    for cls in (fluid.LoDTensorArray, core.LoDTensorArray):
        arr = cls()
        arr.append(t)
        assert len(arr) == 1 and arr[0] is t
        with pytest.raises(TypeError, match="expected a LoDTensor, got ndarray"):
            arr.append(np.zeros(2))


def test_core_eof_exception_is_an_exception_programs_can_catch():
    with pytest.raises(core.EOFException):
        raise core.EOFException("no more batches")
    assert issubclass(core.EOFException, Exception)


# ------------------------------------------------------------------ readers and loaders


def test_reader_decorators_cache_xmap_fake():
    calls = []

    def reader():
        calls.append(1)
        yield from range(6)

    cached = fluid.io.cache(reader)
    assert list(cached()) == list(cached()) == list(range(6)) and len(calls) == 1
    squares = fluid.io.xmap_readers(lambda v: v * v, reader, process_num=3, buffer_size=2,
                                    order=True)
    assert list(squares()) == [0, 1, 4, 9, 16, 25]
    unordered = fluid.io.xmap_readers(lambda v: v + 1, reader, 4, 3, order=False)
    assert sorted(unordered()) == [1, 2, 3, 4, 5, 6]

    def boom(v):
        raise KeyError(f"bad sample {v}")
    with pytest.raises(KeyError, match="bad sample 0"):
        list(fluid.io.xmap_readers(boom, reader, 2, 2)())
    fake = fluid.io.Fake()(reader, 4)
    assert list(fake()) == [0, 0, 0, 0] and list(fake()) == [0, 0, 0, 0]


@pytest.mark.parametrize("file_type", ["plain", "gzip"])
def test_pipe_reader_lines_of_a_command(tmp_path, file_type):
    path = tmp_path / "data.txt"
    text = "1 2\n3 4\nlast"
    path.write_bytes(gzip.compress(text.encode()) if file_type == "gzip" else text.encode())
    reader = fluid.io.PipeReader(f"cat {path}", bufsize=4, file_type=file_type)
    assert list(reader.get_line()) == ["1 2", "3 4", "last"]
    assert "".join(reader.get_line(cut_lines=False)) == text
    with pytest.raises(ValueError, match="file_type must be 'plain' or 'gzip'"):
        fluid.io.PipeReader("cat x", file_type="zip")


def test_py_reader_decorators_feed_a_training_loop():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data(name="x", shape=[2], dtype="float32")
        total = fluid.layers.reduce_sum(x)
    samples = [(np.full([2], i, "float32"),) for i in range(6)]
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)

    reader = fluid.io.PyReader(feed_list=[x], capacity=4, iterable=True)
    reader.decorate_sample_generator(sample_generator=lambda: iter(samples), batch_size=3,
                                     drop_last=True, places=fluid.CPUPlace())
    sums = [float(exe.run(main, feed=f, fetch_list=[total], scope=scope)[0]) for f in reader()]
    assert sums == [2 * (0 + 1 + 2), 2 * (3 + 4 + 5)]

    def batches():
        yield [np.ones((4, 2), "float32")]
    reader.decorate_batch_generator(batches, places=fluid.CPUPlace())
    assert [float(exe.run(main, feed=f, fetch_list=[total], scope=scope)[0])
            for f in reader()] == [8.0]


def test_loader_classes_at_fluids_reader_module():
    from parafluid.reader import DataLoaderBase, GeneratorLoader, PyReader

    assert issubclass(GeneratorLoader, DataLoaderBase) and issubclass(PyReader, GeneratorLoader)
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        x = fluid.layers.data(name="x_loader", shape=[1], dtype="float32")
    loader = fluid.io.DataLoader.from_generator(feed_list=[x], capacity=2)
    assert isinstance(loader, GeneratorLoader) and isinstance(loader, DataLoaderBase)
    base = DataLoaderBase()
    assert base() is base
    with pytest.raises(NotImplementedError):
        iter(base)


# ------------------------------------------------------------------ initializers


def _init_value(initializer, shape):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        w = fluid.layers.create_parameter(shape, "float32", attr=fluid.ParamAttr(
            name="w", initializer=initializer))
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    return np.array(scope.find_var(w.name).get_tensor())


def test_initializers_by_their_long_names():
    I = fluid.initializer  # noqa: E741
    assert (_init_value(I.ConstantInitializer(value=2.5), [3, 4]) == 2.5).all()
    normal = _init_value(I.NormalInitializer(loc=1.0, scale=0.01, seed=3), [200, 50])
    assert abs(normal.mean() - 1.0) < 0.01 and 0.005 < normal.std() < 0.02
    trunc = _init_value(I.TruncatedNormalInitializer(loc=0.0, scale=1.0, seed=3), [100, 100])
    assert np.abs(trunc).max() <= 2.0 and 0.7 < trunc.std() < 0.95
    xavier = _init_value(I.XavierInitializer(uniform=True, seed=3), [30, 20])
    assert np.abs(xavier).max() <= math.sqrt(6.0 / 50) and xavier.std() > 0.1
    msra = _init_value(I.MSRAInitializer(uniform=False, seed=3), [400, 50])
    assert abs(msra.std() - math.sqrt(2.0 / 400)) < 0.01
    assert I.Normal is I.NormalInitializer and I.TruncatedNormal is I.TruncatedNormalInitializer


def test_uniform_initializer_sets_fluids_diagonal():
    w = _init_value(fluid.initializer.UniformInitializer(
        low=-0.1, high=0.1, seed=5, diag_num=3, diag_step=4, diag_val=7.0), [4, 4])
    flat = w.reshape(-1)
    assert flat[0] == flat[5] == flat[10] == 7.0 and flat[15] != 7.0  # 3 diagonal elements
    rest = np.delete(flat, [0, 5, 10])
    assert np.abs(rest).max() < 0.1 and rest.std() > 0.01
    with pytest.raises(ValueError, match="reaches past the 16 elements"):
        _init_value(fluid.initializer.UniformInitializer(diag_num=5, diag_step=4), [4, 4])


@pytest.mark.parametrize("name", ["Bilinear", "BilinearInitializer"])
def test_bilinear_initializer_upsamples_by_interpolation(name):
    init = getattr(fluid.initializer, name)()
    w = _init_value(init, [2, 1, 4, 4])
    tent = np.array([0.25, 0.75, 0.75, 0.25], "float32")  # K = 4: factor 2
    assert np.allclose(w, np.broadcast_to(np.outer(tent, tent), (2, 1, 4, 4)))
    # a channel-wise transposed convolution with this filter upsamples a ramp linearly
    ramp = np.tile(np.arange(4, dtype="float32"), (1, 2, 4, 1))

    def build():
        img = fluid.layers.data(name="img", shape=[2, 4, 4], dtype="float32")
        return [fluid.layers.conv2d_transpose(
            img, num_filters=2, filter_size=4, stride=2, padding=1, groups=2, bias_attr=False,
            param_attr=fluid.ParamAttr(initializer=getattr(fluid.initializer, name)()))]
    up, = run_layers(build, {"img": ramp})
    row = up[0, 0, 3]
    assert up.shape == (1, 2, 8, 8) and np.allclose(np.diff(row[1:-1]), 0.5)
    with pytest.raises(ValueError, match="square kernels"):
        _init_value(init, [2, 3])


# ------------------------------------------------------------------ layers


def test_hard_swish_forward_and_gradient_match_fluids_formula():
    xs = np.array([[-5.0, -3.0, -1.0, 0.0, 1.5, 2.9, 3.1, 8.0]], "float32")

    def build():
        x = fluid.layers.data(name="x", shape=[1, 8], dtype="float32", append_batch_size=False)
        x.stop_gradient = False
        y = fluid.layers.hard_swish(x, threshold=6.0, scale=6.0, offset=3.0)
        return [y, fluid.gradients([fluid.layers.reduce_sum(y)], [x])[0]]
    y, dx = run_layers(build, {"x": xs})
    assert np.allclose(y, xs * np.clip(xs + 3, 0, 6) / 6, atol=1e-6)
    want = np.where(xs + 3 <= 0, 0.0, np.where(xs + 3 < 6, (2 * xs + 3) / 6, 1.0))
    assert np.allclose(dx, want, atol=1e-6)


def test_rank_table_layers_at_control_flows_module_path():
    from parafluid.layers.control_flow import (
        array_to_lod_tensor,
        lod_rank_table,
        lod_tensor_to_array,
        max_sequence_len,
        reorder_lod_tensor_by_rank,
        shrink_memory,
    )

    def build():
        words = fluid.layers.data(name="w", shape=[1], dtype="float32", lod_level=1)
        per_seq = fluid.layers.data(name="s", shape=[1], dtype="float32")
        table = lod_rank_table(words, level=0)
        arr = lod_tensor_to_array(words, table)
        back = array_to_lod_tensor(arr, table)
        ordered = reorder_lod_tensor_by_rank(per_seq, table)
        one = fluid.layers.fill_constant([1], "int64", 1)
        running = shrink_memory(ordered, one, table)
        return [table, max_sequence_len(table), back, ordered, running]
    seq = fluid.create_lod_tensor(np.arange(6, dtype="float32").reshape(6, 1), [[1, 3, 2]],
                                  fluid.CPUPlace())
    table, longest, back, ordered, running = run_layers(
        build, {"w": seq, "s": np.array([[10.0], [20.0], [30.0]], "float32")})
    assert table.tolist() == [[1, 3], [2, 2], [0, 1]] and int(longest) == 3
    assert back.reshape(-1).tolist() == list(range(6))
    assert ordered.reshape(-1).tolist() == [20.0, 30.0, 10.0]
    assert running.reshape(-1).tolist() == [20.0, 30.0]  # sequences longer than step 1


def test_tensor_array_to_tensor_joins_items_and_its_gradient_cuts_them_back():
    def build():
        a = fluid.layers.data(name="a", shape=[2, 1], dtype="float32", append_batch_size=False)
        b = fluid.layers.data(name="b", shape=[2, 3], dtype="float32", append_batch_size=False)
        a.stop_gradient = b.stop_gradient = False
        arr = fluid.layers.create_array("float32")
        i = fluid.layers.fill_constant([1], "int64", 0)
        fluid.layers.array_write(a, i, array=arr)
        fluid.layers.array_write(b, fluid.layers.increment(i, in_place=False), array=arr)
        joined, sizes = fluid.layers.tensor.tensor_array_to_tensor(input=arr, axis=1)
        weights = fluid.layers.assign(np.arange(8, dtype="float32").reshape(2, 4))
        loss = fluid.layers.reduce_sum(joined * weights)
        return [joined, sizes] + fluid.gradients([loss], [a, b])
    av = np.array([[1.0], [2.0]], "float32")  # items of different widths, as Fluid allows
    bv = np.arange(6, dtype="float32").reshape(2, 3)
    joined, sizes, ga, gb = run_layers(build, {"a": av, "b": bv})
    assert np.array_equal(joined, np.concatenate([av, bv], 1)) and sizes.tolist() == [1, 3]
    w = np.arange(8, dtype="float32").reshape(2, 4)
    assert np.array_equal(ga, w[:, :1]) and np.array_equal(gb, w[:, 1:])


def test_lod_append_adds_an_inner_level():
    def build():
        x = fluid.layers.data(name="x", shape=[1], dtype="float32")
        offsets = fluid.layers.data(name="o", shape=[3, 1], dtype="int32",
                                    append_batch_size=False)
        nested = fluid.layers.lod_append(x, [0, 1, 3, 4, 6])
        by_var = fluid.layers.nn.lod_append(x, offsets)
        return [nested, by_var, fluid.layers.sequence_pool(nested, "sum")]
    x = np.arange(6, dtype="float32").reshape(6, 1)
    exe = fluid.Executor(fluid.CPUPlace())
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        fetch = build()
    assert fetch[0].lod_level == 1
    nested, by_var, pooled = exe.run(
        main, feed={"x": x, "o": np.array([[0], [3], [6]], "int32")}, fetch_list=fetch,
        return_numpy=False)
    assert nested.lod() == [[0, 1, 3, 4, 6]] and by_var.lod() == [[0, 3, 6]]
    assert np.array(pooled).reshape(-1).tolist() == [0.0, 3.0, 3.0, 9.0]
    with pytest.raises(fluid.OpRunError, match=r"lod_append: LoD level 0 \[0, 5\] ends at 5"):
        run_layers(lambda: [fluid.layers.lod_append(
            fluid.layers.data(name="x", shape=[1], dtype="float32"), [0, 5])], {"x": x})


def test_dynamic_rnn_static_input_follows_the_running_sequences():
    def build():
        words = fluid.layers.data(name="w", shape=[1], dtype="float32", lod_level=1)
        bias = fluid.layers.data(name="b", shape=[1], dtype="float32")
        drnn = fluid.layers.DynamicRNN()
        with drnn.block():
            step = drnn.step_input(words)
            b = drnn.static_input(bias)
            drnn.output(step + b)
        return [drnn()]
    seq = fluid.create_lod_tensor(np.arange(6, dtype="float32").reshape(6, 1), [[1, 3, 2]],
                                  fluid.CPUPlace())
    out, = run_layers(build, {"w": seq, "b": np.array([[100.0], [200.0], [300.0]], "float32")})
    assert out.reshape(-1).tolist() == [100.0, 201.0, 202.0, 203.0, 304.0, 305.0]


def test_layers_named_in_fluids_nn_module():
    def build():
        vol = fluid.layers.data(name="v", shape=[2, 4, 4, 4], dtype="float32")
        img = fluid.layers.data(name="i", shape=[1, 2, 2], dtype="float32")
        seq = fluid.layers.data(name="q", shape=[1], dtype="float32", lod_level=1)
        ctr = fluid.layers.data(name="c", shape=[4], dtype="float32")
        show = fluid.layers.data(name="sc", shape=[2], dtype="float32")
        return [fluid.layers.nn.adaptive_pool3d(vol, pool_size=2, pool_type="avg"),
                fluid.layers.nn.image_resize(img, out_shape=[4, 4], resample="BILINEAR"),
                fluid.layers.resize_bilinear(img, out_shape=[4, 4]),
                fluid.layers.nn.sequence_first_step(seq),
                fluid.layers.nn.continuous_value_model(ctr, show, use_cvm=True)]
    v = np.random.RandomState(0).rand(1, 2, 4, 4, 4).astype("float32")
    i = np.array([[[[1.0, 2.0], [3.0, 4.0]]]], "float32")
    q = fluid.create_lod_tensor(np.arange(5, dtype="float32").reshape(5, 1), [[2, 3]], None)
    c = np.array([[3.0, 1.0, 0.5, -0.5]], "float32")
    pooled, resized, bilinear, first, cvm = run_layers(
        build, {"v": v, "i": i, "q": q, "c": c, "sc": np.ones((1, 2), "float32")})
    want = torch.nn.functional.adaptive_avg_pool3d(torch.from_numpy(v), 2).numpy()
    assert np.allclose(pooled, want, atol=1e-6)
    assert np.allclose(resized, bilinear) and resized.shape == (1, 1, 4, 4)
    assert first.reshape(-1).tolist() == [0.0, 2.0]
    assert np.allclose(cvm, [[math.log(4), math.log(2) - math.log(4), 0.5, -0.5]], atol=1e-6)


# ------------------------------------------------------------------ distributions


def test_normal_distribution_densities_and_kl():
    from parafluid.layers.distributions import Normal

    def build():
        value = fluid.layers.data(name="val", shape=[2], dtype="float32",
                                  append_batch_size=False)
        a = Normal(loc=[0.0, 1.0], scale=[1.0, 2.0])
        b = Normal(loc=[1.0, 1.0], scale=[2.0, 0.5])
        return [a.entropy(), a.log_prob(value), a.kl_divergence(b), a.sample([5000], seed=7)]
    ent, lp, kl, sample = run_layers(build, {"val": np.array([0.5, -1.0], "float32")})
    mu, sd = np.array([0.0, 1.0]), np.array([1.0, 2.0])
    mu2, sd2 = np.array([1.0, 1.0]), np.array([2.0, 0.5])
    assert np.allclose(ent, 0.5 + 0.5 * np.log(2 * np.pi) + np.log(sd), atol=1e-5)
    v = np.array([0.5, -1.0])
    assert np.allclose(lp, -(v - mu) ** 2 / (2 * sd ** 2) - np.log(sd * np.sqrt(2 * np.pi)),
                       atol=1e-5)
    want_kl = np.log(sd2 / sd) + (sd ** 2 + (mu - mu2) ** 2) / (2 * sd2 ** 2) - 0.5
    assert np.allclose(kl, want_kl, atol=1e-5)
    assert sample.shape == (5000, 2)
    assert np.allclose(sample.mean(0), mu, atol=0.1) and np.allclose(sample.std(0), sd, atol=0.1)


def test_uniform_distribution_densities():
    from parafluid.layers.distributions import Uniform

    def build():
        value = fluid.layers.data(name="uval", shape=[2], dtype="float32",
                                  append_batch_size=False)
        u = Uniform(low=[0.0, -1.0], high=[2.0, 3.0])
        return [u.entropy(), u.log_prob(value), u.sample([2000], seed=3)]
    ent, lp, sample = run_layers(build, {"uval": np.array([1.0, 5.0], "float32")})
    assert np.allclose(ent, np.log([2.0, 4.0]))
    assert np.isclose(lp[0], -np.log(2.0)) and lp[1] == -np.inf  # 5 is outside [-1, 3)
    assert sample.shape == (2000, 2) and (sample[:, 0] >= 0).all() and (sample[:, 0] < 2).all()
    assert (sample[:, 1] >= -1).all() and (sample[:, 1] < 3).all()
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        with pytest.raises(NotImplementedError, match="kl_divergence is not defined"):
            Uniform(0.0, 1.0).kl_divergence(Uniform(0.0, 2.0))
        with pytest.raises(ValueError, match="finite"):
            Uniform(0.0, float("inf"))


# ------------------------------------------------------------------ optimizers, regularizers

OPTIMIZERS = {
    "SGDOptimizer": dict(learning_rate=0.1),
    "MomentumOptimizer": dict(learning_rate=0.1, momentum=0.9, use_nesterov=True),
    "AdagradOptimizer": dict(learning_rate=0.1, epsilon=1e-6, initial_accumulator_value=0.1),
    "AdamOptimizer": dict(learning_rate=0.05, beta1=0.9, beta2=0.999, lazy_mode=False),
    "AdamaxOptimizer": dict(learning_rate=0.05, beta1=0.9, beta2=0.999),
    "DecayedAdagradOptimizer": dict(learning_rate=0.1, decay=0.95),
    "FtrlOptimizer": dict(learning_rate=0.1, l1=0.0, l2=0.0, lr_power=-0.5),
    "RMSPropOptimizer": dict(learning_rate=0.01, rho=0.95, momentum=0.0, centered=False),
    "LambOptimizer": dict(learning_rate=0.01, lamb_weight_decay=0.01),
    "AdadeltaOptimizer": dict(learning_rate=0.01, epsilon=1e-6, rho=0.95),
    "LarsMomentumOptimizer": dict(learning_rate=0.1, momentum=0.9, lars_coeff=0.01,
                                  lars_weight_decay=0.0005),
}


def _linear_w():
    """``x @ w`` for a data ``x`` of 2 columns and ``w`` [2, 1] starting at [[0.5], [-1]]."""
    x = fluid.layers.data(name="x", shape=[2], dtype="float32")
    return fluid.layers.fc(x, 1, bias_attr=False, param_attr=fluid.ParamAttr(
        name="w", initializer=fluid.initializer.NumpyArrayInitializer(
            np.array([[0.5], [-1.0]], "float32"))))


def _two_steps(opt):
    """Two updates of ``w`` [2, 1] under ``loss = mean(x @ w)`` with x = [[1, 3]]: the
    gradient is x^T every step."""
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        out = _linear_w()
        opt.minimize(fluid.layers.mean(out))
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    seen = []
    for _ in range(2):
        exe.run(main, feed={"x": np.array([[1.0, 3.0]], "float32")}, scope=scope)
        seen.append(np.array(scope.find_var("w").get_tensor()))
    return seen


def test_adadelta_matches_fluids_update():
    got = _two_steps(fluid.optimizer.Adadelta(learning_rate=0.5, epsilon=1e-2, rho=0.9))
    w, g = np.array([[0.5], [-1.0]]), np.array([[1.0], [3.0]])
    sq_g, sq_u = np.zeros_like(w), np.zeros_like(w)
    for step in got:  # the learning rate plays no part, as in Fluid
        sq_g = 0.9 * sq_g + 0.1 * g * g
        update = -np.sqrt((sq_u + 1e-2) / (sq_g + 1e-2)) * g
        sq_u = 0.9 * sq_u + 0.1 * update * update
        w = w + update
        assert np.allclose(step, w, atol=1e-6)


def test_lars_momentum_matches_fluids_update():
    got = _two_steps(fluid.optimizer.LarsMomentum(learning_rate=0.1, momentum=0.9,
                                                  lars_coeff=0.01, lars_weight_decay=0.5))
    w, g, v = np.array([[0.5], [-1.0]]), np.array([[1.0], [3.0]]), np.zeros((2, 1))
    for step in got:
        local = 0.1 * 0.01 * np.linalg.norm(w) / (np.linalg.norm(g) + 0.5 * np.linalg.norm(w))
        v = 0.9 * v + local * (g + 0.5 * w)
        w = w - v
        assert np.allclose(step, w, atol=1e-6)


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_optimizer_backward_then_apply_optimize_trains(name):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data(name="x", shape=[3], dtype="float32")
        y = fluid.layers.data(name="y", shape=[1], dtype="float32")
        loss = fluid.layers.mean(fluid.layers.square_error_cost(fluid.layers.fc(x, 1), y))
        opt = getattr(fluid.optimizer, name)(**OPTIMIZERS[name])
        params_grads = opt.backward(loss, startup_program=startup)
        opt.apply_optimize(loss, startup_program=startup, params_grads=params_grads)
    state = opt.get_opti_var_name_list()
    assert (state == []) == (name == "SGDOptimizer")
    assert all(main.global_block().var(n).persistable for n in state)
    with pytest.raises(TypeError, match="only in dygraph mode"):
        opt.load({})
    rng = np.random.RandomState(0)
    xs = rng.rand(32, 3).astype("float32")
    feed = {"x": xs, "y": xs.sum(1, keepdims=True)}
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    losses = [float(exe.run(main, feed=feed, fetch_list=[loss], scope=scope)[0])
              for _ in range(20)]
    assert losses[-1] < losses[0]


def test_minimize_accepts_grad_clip_as_fluid_does_in_static_mode():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data(name="x", shape=[3], dtype="float32")
        loss = fluid.layers.mean(fluid.layers.fc(x, 1))
        ops, params_grads = fluid.optimizer.SGDOptimizer(0.1).minimize(
            loss, grad_clip=fluid.clip.GradientClipByValue(max=1.0))
    assert [op.type for op in ops] == ["sgd", "sgd"] and len(params_grads) == 2


@pytest.mark.parametrize("cls,decay", [("L2DecayRegularizer", lambda w: 0.5 * w),
                                       ("L1DecayRegularizer", lambda w: 0.5 * np.sign(w))])
def test_regularizers_take_fluids_keyword(cls, decay):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data(name="x", shape=[2], dtype="float32")
        out = fluid.layers.fc(x, 1, bias_attr=False, param_attr=fluid.ParamAttr(
            name="w", initializer=fluid.initializer.NumpyArrayInitializer(
                np.array([[1.0], [-2.0]], "float32"))))
        loss = fluid.layers.mean(out)
        reg = getattr(fluid.regularizer, cls)(regularization_coeff=0.5)
        fluid.optimizer.SGD(learning_rate=0.1, regularization=reg).minimize(loss)
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    exe.run(main, feed={"x": np.array([[1.0, 1.0]], "float32")}, scope=scope)
    w0 = np.array([[1.0], [-2.0]])
    want = w0 - 0.1 * (np.ones((2, 1)) + decay(w0))  # d mean(x w) / dw = x = 1
    assert np.allclose(np.array(scope.find_var("w").get_tensor()), want)
    with pytest.raises(ValueError, match="regularization_coeff must be >= 0"):
        getattr(fluid.regularizer, cls)(regularization_coeff=-1.0)


# ------------------------------------------------------------------ metrics, tools


def test_metric_base_is_the_base_of_user_metrics():
    class Mean(fluid.metrics.MetricBase):
        def __init__(self, name=None):
            super().__init__(name)
            self.total, self.count = 0.0, 0

        def update(self, value):
            self.total += float(np.mean(value))
            self.count += 1

        def eval(self):
            return self.total / self.count

    m = Mean("loss")
    for v in (1.0, 2.0, 6.0):
        m.update(np.array([v], "float32"))
    assert m.eval() == 3.0 and m.get_config()["name"] == "loss"
    m.reset()
    assert m.total == 0.0 and m.count == 0


def test_install_check_trains_and_says_so(capsys):
    fluid.install_check.run_check()
    assert "parafluid works" in capsys.readouterr().out


def test_log_helper_get_logger(capsys):
    from parafluid.log_helper import get_logger

    logger = get_logger("parafluid.test.log_helper", logging.INFO, fmt="%(levelname)s|%(message)s")
    again = get_logger("parafluid.test.log_helper", logging.INFO, fmt="%(message)s")
    assert again is logger and len(logger.handlers) == 1
    logger.info("epoch %d", 3)
    logger.debug("hidden")
    assert capsys.readouterr().err == "INFO|epoch 3\n"


def test_fluid_one_hot_keeps_every_dim():
    def build():
        ids = fluid.data(name="ids", shape=[None], dtype="int64")
        col = fluid.data(name="col", shape=[None, 1], dtype="int64")
        return [fluid.one_hot(ids, depth=4), fluid.one_hot(input=col, depth=3)]
    a, b = run_layers(build, {"ids": np.array([2, 0], "int64"),
                              "col": np.array([[1], [2]], "int64")})
    assert a.tolist() == [[0, 0, 1, 0], [1, 0, 0, 0]]
    assert b.shape == (2, 1, 3) and b[:, 0].tolist() == [[0, 1, 0], [0, 0, 1]]


def test_fluid_save_and_load_parameters_and_optimizer_state(tmp_path):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data(name="x", shape=[3], dtype="float32")
        loss = fluid.layers.mean(fluid.layers.fc(x, 2))
        fluid.optimizer.Adam(0.1).minimize(loss)
    exe = fluid.Executor(fluid.CPUPlace())
    feed = {"x": np.ones((4, 3), "float32")}
    with fluid.scope_guard(fluid.Scope()):
        exe.run(startup)
        exe.run(main, feed=feed)
        fluid.save(main, str(tmp_path / "model"))
        after_save = [float(exe.run(main, feed=feed, fetch_list=[loss])[0]) for _ in range(3)]
    assert {p.name for p in tmp_path.iterdir()} == {"model.pdparams", "model.pdopt",
                                                   "model.pdmodel"}
    with fluid.scope_guard(fluid.Scope()):
        exe.run(startup)
        fluid.load(main, str(tmp_path / "model"), exe)
        resumed = [float(exe.run(main, feed=feed, fetch_list=[loss])[0]) for _ in range(3)]
    assert resumed == after_save  # parameters and Adam's moments both restored
    with pytest.raises(ValueError, match="model_path must name a file prefix"):
        fluid.save(main, str(tmp_path) + "/")


@pytest.mark.parametrize("thres", [False, True])
def test_exponential_moving_average_apply_and_restore(thres):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data(name="x", shape=[2], dtype="float32")
        pred = fluid.layers.fc(x, 1, bias_attr=False, param_attr=fluid.ParamAttr(name="w"))
        loss = fluid.layers.mean(fluid.layers.square_error_cost(pred, fluid.layers.reduce_sum(
            x, dim=1, keep_dim=True)))
        fluid.optimizer.SGD(0.1).minimize(loss)
        steps = fluid.layers.autoincreased_step_counter(begin=0) if thres else None
        ema = fluid.optimizer.ExponentialMovingAverage(0.9, thres_steps=steps)
        ema.update()
    exe = fluid.Executor(fluid.CPUPlace())
    feed = {"x": np.array([[1.0, 2.0], [3.0, -1.0]], "float32")}
    with fluid.scope_guard(fluid.Scope()):
        exe.run(startup)
        seen, avg, pow_ = [], np.zeros((2, 1)), 1.0
        for t in range(4):
            exe.run(main, feed=feed)
            w = np.array(fluid.global_scope().find_var("w").get_tensor())
            decay = min(0.9, (t + 1.0) / (t + 10.0)) if thres else 0.9
            avg, pow_ = decay * avg + (1 - decay) * w, pow_ * decay
            seen.append(w)
        value = lambda: np.array(fluid.global_scope().find_var("w").get_tensor())  # noqa: E731
        with ema.apply(exe):
            applied = value()
        restored = value()
        with ema.apply(exe, need_restore=False):
            pass
        kept = value()
        ema.restore(exe)
        restored_again = value()
    assert np.allclose(applied, avg / (1 - pow_), atol=1e-5)
    assert not np.allclose(applied, seen[-1]) and np.array_equal(restored, seen[-1])
    assert np.array_equal(kept, applied) and np.array_equal(restored_again, seen[-1])


def test_lookahead_pulls_slow_weights_every_k_steps():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        out = _linear_w()
        loss = fluid.layers.mean(out)  # gradient x^T every step
        inner = fluid.optimizer.SGD(learning_rate=0.1)
        fluid.optimizer.LookaheadOptimizer(inner, alpha=0.25, k=2).minimize(
            loss, startup_program=startup)
    exe = fluid.Executor(fluid.CPUPlace())
    g = np.array([[1.0], [3.0]])
    fast = slow = np.array([[0.5], [-1.0]])
    with fluid.scope_guard(fluid.Scope()):
        exe.run(startup)
        for step in range(1, 6):
            exe.run(main, feed={"x": np.array([[1.0, 3.0]], "float32")})
            fast = fast - 0.1 * g
            if step % 2 == 0:
                slow = 0.25 * fast + 0.75 * slow
                fast = slow
            got = np.array(fluid.global_scope().find_var("w").get_tensor())
            assert np.allclose(got, fast, atol=1e-6), step
    with pytest.raises(ValueError, match="k must be a positive int"):
        fluid.optimizer.LookaheadOptimizer(inner, k=0)


@pytest.mark.parametrize("dim", [0, 1, None])
def test_weight_norm_param_attr_reparameterizes_and_trains(dim):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data(name="x", shape=[3], dtype="float32")
        out = fluid.layers.fc(x, 2, bias_attr=False, param_attr=fluid.WeightNormParamAttr(
            dim=dim, name="wn", initializer=fluid.initializer.Normal(0.0, 1.0, seed=4)))
        loss = fluid.layers.mean(fluid.layers.square(out - 1.0))
        fluid.optimizer.SGD(0.1).minimize(loss)
    names = {p.name: p.shape for p in main.all_parameters()}
    g_shape = {0: (3, 1), 1: (1, 2), None: (1, 1)}[dim]
    assert names == {"wn_v": (3, 2), "wn_g": g_shape}
    xs = np.array([[1.0, 2.0, -1.0], [0.5, -1.0, 2.0]], "float32")
    exe = fluid.Executor(fluid.CPUPlace())
    with fluid.scope_guard(fluid.Scope()):
        exe.run(startup)
        scope = fluid.global_scope()
        v0 = np.array(scope.find_var("wn_v").get_tensor())
        axes = tuple(i for i in range(2) if i != dim)
        assert np.allclose(np.array(scope.find_var("wn_g").get_tensor()),
                           np.sqrt((v0 ** 2).sum(axis=axes, keepdims=True)), atol=1e-6)
        first, = exe.run(main, feed={"x": xs}, fetch_list=[out])
        assert np.allclose(first, xs @ v0, atol=1e-5)  # w starts equal to v
        losses = [float(exe.run(main, feed={"x": xs}, fetch_list=[loss])[0]) for _ in range(5)]
        v, g = (np.array(scope.find_var(n).get_tensor()) for n in ("wn_v", "wn_g"))
        now, = exe.run(main, feed={"x": xs}, fetch_list=[out])
    w = g * v / np.sqrt((v ** 2).sum(axis=axes, keepdims=True))
    assert losses[-1] < losses[0] and not np.allclose(v, v0)
    assert np.allclose(now, xs @ w, atol=1e-4)


def test_error_clip_by_value_clips_a_variables_gradient():
    def build(clip):
        x = fluid.layers.data(name="x", shape=[3], dtype="float32")
        hidden = fluid.layers.fc(x, 2, bias_attr=False, param_attr=fluid.ParamAttr(
            name="w", initializer=fluid.initializer.Constant(1.0)))
        if clip:
            hidden.error_clip = fluid.clip.ErrorClipByValue(max=2.0, min=-0.5)
        loss = fluid.layers.reduce_sum(hidden * hidden)  # d loss / d hidden = 2 * hidden
        fluid.backward.append_backward(loss, callbacks=[fluid.clip.error_clip_callback])
        block = loss.block
        return [block.var("w@GRAD"), block.var(hidden.name + "@GRAD")]
    xs = np.array([[0.1, 0.2, 0.3], [-1.0, 0.5, 0.1]], "float32")
    gw, gh = run_layers(lambda: build(True), {"x": xs})
    h = xs @ np.ones((3, 2))
    assert np.allclose(gh, np.clip(2 * h, -0.5, 2.0))
    assert np.allclose(gw, xs.T @ gh, atol=1e-6)  # the clipped error flows on
    gw_plain, _ = run_layers(lambda: build(False), {"x": xs})
    assert np.allclose(gw_plain, xs.T @ (2 * h), atol=1e-6)
    with pytest.raises(ValueError, match="min .* must be <= max"):
        fluid.clip.ErrorClipByValue(max=-1.0, min=0.0)


def test_similarity_focus_marks_fluids_greedy_matching():
    x = np.array([[[[0.8, 0.1], [0.4, 0.5]],
                   [[0.9, 0.7], [0.9, 0.95]],
                   [[0.8, 0.9], [0.1, 0.2]]],
                  [[[0.2, 0.5], [0.3, 0.4]],
                   [[0.9, 0.7], [0.8, 0.4]],
                   [[0.0, 0.2], [0.4, 0.7]]]], "float32")

    def build(axis, indexes):
        def layers():
            v = fluid.layers.data(name="x", shape=[3, 2, 2], dtype="float32")
            return [fluid.layers.similarity_focus(input=v, axis=axis, indexes=indexes)]
        return layers
    out, = run_layers(build(1, [0]), {"x": x})
    # channel 0 of sample 0: 0.8 first, then 0.5 (row and column of 0.8 excluded)
    assert out[0, :, 0, 0].tolist() == [1, 1, 1] and out[0, :, 1, 1].tolist() == [1, 1, 1]
    assert out[0, :, 0, 1].sum() == out[0, :, 1, 0].sum() == 0
    # sample 1: 0.5 at (0, 1) first, then 0.3 at (1, 0)
    assert out[1, 0].tolist() == [[0, 1], [1, 0]]
    union, = run_layers(build(1, [0, 2]), {"x": x})
    # channel 2 of sample 0 picks 0.9 at (0, 1), then 0.1 at (1, 0): with channel 0, all
    assert union[0, 0].tolist() == [[1, 1], [1, 1]]
    along_last, = run_layers(build(3, [1]), {"x": x})
    # axis 3: the matrices are X[n, :, :, 1] ([C, A] = [3, 2]); sample 0 picks 0.95 at
    # (1, 1), then 0.9 at (2, 0) (row 1 and column 1 are taken)
    assert along_last[0, :, :, 0].tolist() == [[0, 0], [0, 1], [1, 0]]
    assert np.array_equal(along_last[..., 0], along_last[..., 1])
    with pytest.raises(ValueError, match="index 3 is out of range for axis 1 of size 3"):
        run_layers(build(1, [3]), {"x": x})


@pytest.mark.parametrize("is_lod", [False, True])
def test_filter_by_instag_keeps_tagged_instances_and_routes_their_gradient(is_lod):
    rows = np.arange(12, dtype="float64").reshape(6, 2)
    lengths = [1, 2, 1, 2] if is_lod else [1] * 6
    tags = [[1, 3], [2], [5, 1], [4]] if is_lod else [[1], [2], [3], [1, 2], [7], [3]]

    def build():
        ins = fluid.layers.data(name="ins", shape=[2], dtype="float64",
                                lod_level=1 if is_lod else 0)
        ins.stop_gradient = False
        ins_tag = fluid.layers.data(name="tag", shape=[1], dtype="int64", lod_level=1)
        keep = fluid.layers.data(name="keep", shape=[2, 1], dtype="int64",
                                 append_batch_size=False)
        out, weight = fluid.layers.filter_by_instag(ins, ins_tag, keep, is_lod)
        loss = fluid.layers.reduce_sum(out * out)
        return [out, weight, fluid.gradients([loss], [ins])[0]]
    feed = {"ins": fluid.create_lod_tensor(rows, [lengths], None) if is_lod else rows,
            "tag": fluid.create_lod_tensor(np.array(sum(tags, []), "int64").reshape(-1, 1),
                                           [[len(t) for t in tags]], None),
            "keep": np.array([[1], [3]], "int64")}
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        fetch = build()
    exe = fluid.Executor(fluid.CPUPlace())
    out, weight, grad = exe.run(main, feed=feed, fetch_list=fetch, return_numpy=False)
    kept = [0, 2] if is_lod else [0, 2, 3, 5]  # instances with tag 1 or 3
    starts = np.cumsum([0] + lengths)
    kept_rows = np.concatenate([rows[starts[i]:starts[i + 1]] for i in kept])
    assert np.array_equal(np.array(out), kept_rows)
    assert out.recursive_sequence_lengths() == [[lengths[i] for i in kept]]
    assert np.array(weight).tolist() == [[1.0]] * len(kept)
    mask = np.zeros((6, 1))
    for i in kept:
        mask[starts[i]:starts[i + 1]] = 1
    assert np.array_equal(np.array(grad), 2 * rows * mask)


def test_filter_by_instag_with_nothing_kept_gives_a_zero_row_of_weight_zero():
    def build():
        ins = fluid.layers.data(name="ins", shape=[2], dtype="float32")
        ins_tag = fluid.layers.data(name="tag", shape=[1], dtype="int64", lod_level=1)
        keep = fluid.layers.data(name="keep", shape=[1, 1], dtype="int64",
                                 append_batch_size=False)
        return list(fluid.layers.nn.filter_by_instag(ins, ins_tag, keep, is_lod=False))
    tag = fluid.create_lod_tensor(np.array([[1], [2]], "int64"), [[1, 1]], None)
    out, weight = run_layers(build, {"ins": np.ones((2, 2), "float32"), "tag": tag,
                                     "keep": np.array([[9]], "int64")})
    assert out.tolist() == [[0.0, 0.0]] and weight.tolist() == [[0.0]]


def test_model_average_applies_the_window_average_as_fluids_kernel_keeps_it():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        out = _linear_w()
        fluid.optimizer.SGD(0.1).minimize(fluid.layers.mean(out))
        average = fluid.optimizer.ModelAverage(0.5, min_average_window=2,
                                               max_average_window=3)
    exe = fluid.Executor(fluid.CPUPlace())
    w = np.array([[0.5], [-1.0]])
    sums, n_acc, n_old, n_upd = [np.zeros((2, 1))] * 3, 0, 0, 0
    with fluid.scope_guard(fluid.Scope()):
        exe.run(startup)
        for _ in range(7):
            exe.run(main, feed={"x": np.array([[1.0, 3.0]], "float32")})
            w = w - 0.1 * np.array([[1.0], [3.0]])
            s1, s2, s3 = sums
            n_acc, n_upd = n_acc + 1, n_upd + 1
            new1 = s1 + w
            if n_acc >= 2 and n_acc >= min(3, n_upd * 0.5):  # the window restarts
                sums, n_old, n_acc = [np.zeros((2, 1)), np.zeros((2, 1)), s1 + s2], n_acc, 0
            else:
                sums = [new1, s2, s3]
        with average.apply(exe):
            applied = np.array(fluid.global_scope().find_var("w").get_tensor())
        restored = np.array(fluid.global_scope().find_var("w").get_tensor())
    assert np.allclose(applied, sum(sums) / (n_acc + n_old), atol=1e-5)
    assert np.allclose(restored, w, atol=1e-6)
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        with pytest.raises(ValueError, match="no trainable parameters to average"):
            fluid.optimizer.ModelAverage(0.1)
