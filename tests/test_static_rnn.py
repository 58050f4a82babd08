"""StaticRNN (unrolled at build time; a recurrent op when the sequence length is not known
then): forward against numpy, training against the same recurrence written step by step in
Python, gradient against finite differences."""

import numpy as np
import pytest

import parafluid as fluid

L = fluid.layers
T, B, D, H = 4, 3, 2, 5
RNG = np.random.RandomState(5)
XS = RNG.uniform(-1, 1, (T, B, D))
WX = RNG.uniform(-0.5, 0.5, (D, H))
WH = RNG.uniform(-0.5, 0.5, (H, H))


def _attrs():
    return [fluid.ParamAttr(name="wx", initializer=fluid.initializer.NumpyArrayInitializer(WX)),
            fluid.ParamAttr(name="wh", initializer=fluid.initializer.NumpyArrayInitializer(WH))]


def _static_rnn(dtype="float64", boot=None):
    x = L.data(name="x", shape=[T, B, D], dtype=dtype, append_batch_size=False)
    x.stop_gradient = False
    rnn = L.StaticRNN()
    with rnn.step():
        word = rnn.step_input(x)
        prev = rnn.memory(init=boot) if boot is not None else \
            rnn.memory(shape=[-1, H], batch_ref=word)
        hidden = L.fc(input=[word, prev], size=H, act="tanh", param_attr=_attrs(),
                      bias_attr=False)
        rnn.update_memory(prev, hidden)
        rnn.step_output(hidden)
    return x, rnn()


def _numpy_rnn(xs, h0=None):
    h = np.zeros((B, H)) if h0 is None else h0
    out = []
    for t in range(T):
        h = np.tanh(xs[t] @ WX + h @ WH)
        out.append(h)
    return np.stack(out)


def _run(main, startup, feed, fetch):
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    return exe.run(main, feed=feed, fetch_list=fetch, scope=scope)


def test_static_rnn_matches_numpy_and_shares_its_parameters():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x, out = _static_rnn()
    assert out.shape == (T, B, H)
    assert sorted(p.name for p in main.all_parameters()) == ["wh", "wx"]
    assert main.num_blocks == 1  # unrolled: no step block is left behind
    got, = _run(main, startup, {"x": XS}, [out])
    np.testing.assert_allclose(got, _numpy_rnn(XS), rtol=1e-10)


def test_static_rnn_memory_from_an_initial_value():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        h0 = L.data(name="h0", shape=[B, H], dtype="float64", append_batch_size=False)
        x, out = _static_rnn(boot=h0)
    h0v = RNG.uniform(-1, 1, (B, H))
    got, = _run(main, startup, {"x": XS, "h0": h0v}, [out])
    np.testing.assert_allclose(got, _numpy_rnn(XS, h0v), rtol=1e-10)


def test_static_rnn_gradient_matches_finite_differences():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x, out = _static_rnn()
        loss = L.reduce_sum(L.square(out))
        gx, gw = fluid.backward.gradients([loss], [x, main.global_block().var("wh")])
    got_x, got_w = _run(main, startup, {"x": XS}, [gx, gw])

    def f(xs, wh):
        h, total = np.zeros((B, H)), 0.0
        for t in range(T):
            h = np.tanh(xs[t] @ WX + h @ wh)
            total += (h ** 2).sum()
        return total

    for arr, got, other in ((XS, got_x, lambda a: f(a, WH)), (WH, got_w, lambda a: f(XS, a))):
        fd = np.zeros_like(arr)
        for k in np.ndindex(arr.shape):
            d = np.zeros_like(arr)
            d[k] = 1e-6
            fd[k] = (other(arr + d) - other(arr - d)) / 2e-6
        np.testing.assert_allclose(got, fd, rtol=1e-5, atol=1e-8)


def test_static_rnn_misuse_is_named():
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        rnn = L.StaticRNN()
        with pytest.raises(ValueError, match="inside 'with rnn.step"):
            rnn.step_input(L.data(name="x", shape=[T, B, D], append_batch_size=False))
        with pytest.raises(ValueError, match="is never updated"):
            with rnn.step():
                word = rnn.step_input(L.data(name="y", shape=[T, B, D],
                                             append_batch_size=False))
                rnn.memory(shape=[-1, H], batch_ref=word)
                rnn.step_output(word)


def test_static_rnn_with_seq_len_unknown_when_built_runs_a_recurrent_op():
    results = []
    for steps in (T, -1):
        main, startup = fluid.Program(), fluid.Program()
        with fluid.program_guard(main, startup):
            x = L.data(name="x", shape=[steps, B, D], dtype="float64",
                       append_batch_size=False)
            x.stop_gradient = False
            rnn = L.StaticRNN()
            with rnn.step():
                word = rnn.step_input(x)
                prev = rnn.memory(shape=[-1, H], batch_ref=word)
                hidden = L.fc(input=[word, prev], size=H, act="tanh", param_attr=_attrs(),
                              bias_attr=False)
                rnn.update_memory(prev, hidden)
                rnn.step_output(hidden)
            out = rnn()
            loss = L.reduce_mean(out)
            x_grad, = fluid.backward.gradients([loss], [x])
            fluid.optimizer.SGD(0.5).minimize(loss)
        types = [op.type for op in main.global_block().ops]
        assert (types.count("recurrent"), main.num_blocks > 1) == \
            ((1, True) if steps == -1 else (0, False))
        assert list(out.shape) == [steps, B, H]
        main.verify()
        exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
        exe.run(startup, scope=scope)
        results.append([exe.run(main, feed={"x": XS}, fetch_list=[out, x_grad], scope=scope)
                        for _ in range(2)])  # the second run after one SGD step
    np.testing.assert_allclose(results[1][0][0], _numpy_rnn(XS), rtol=1e-10)
    for unrolled, recurrent in zip(*results):
        for a, b in zip(unrolled, recurrent):
            np.testing.assert_allclose(b, a, rtol=1e-10, atol=1e-14)
