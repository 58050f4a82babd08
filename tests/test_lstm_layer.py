"""fluid.layers.lstm (Fluid 1.6's cuDNN LSTM, built from ordinary ops): forward against a NumPy
LSTM on the documented weight layout, gradients against finite differences of that
reference, bidirectional and stacked layers, dropout between layers, training."""

import numpy as np
import pytest

import parafluid as fluid
from parafluid.compat import NotProvided
from parafluid.testing import constant

L = fluid.layers
T, B, D, H = 4, 3, 2, 3


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def _numpy_lstm(x, h0, c0, w, num_layers, dirs):
    """The layout of layers.lstm's docstring: per layer, per direction W_x, W_h, b_x, b_h;
    gates (input, forget, output, candidate)."""
    off = 0

    def take(*shape):
        nonlocal off
        n = int(np.prod(shape))
        piece = w[off:off + n].reshape(shape)
        off += n
        return piece

    layer_in, last_h, last_c = x, [], []
    for layer in range(num_layers):
        outs = []
        for d in range(dirs):
            wx, wh = take(layer_in.shape[2], 4 * H), take(H, 4 * H)
            bx, bh = take(4 * H), take(4 * H)
            h, c = h0[layer * dirs + d], c0[layer * dirs + d]
            hs = [None] * T
            for t in (range(T) if d == 0 else reversed(range(T))):
                g = layer_in[t] @ wx + bx + bh + h @ wh
                i, f, o, cand = np.split(g, 4, axis=1)
                c = _sigmoid(f) * c + _sigmoid(i) * np.tanh(cand)
                h = _sigmoid(o) * np.tanh(c)
                hs[t] = h
            outs.append(np.stack(hs))
            last_h.append(h)
            last_c.append(c)
        layer_in = np.concatenate(outs, axis=2)
    assert off == w.size
    return layer_in, np.stack(last_h), np.stack(last_c)


def _build(num_layers, bidirec, dtype="float64", **kw):
    dirs = 2 if bidirec else 1
    x = L.data(name="x", shape=[T, B, D], dtype=dtype, append_batch_size=False)
    h0 = L.data(name="h0", shape=[num_layers * dirs, B, H], dtype=dtype,
                append_batch_size=False)
    c0 = L.data(name="c0", shape=[num_layers * dirs, B, H], dtype=dtype,
                append_batch_size=False)
    for v in (x, h0, c0):
        v.stop_gradient = False
    out = L.lstm(x, h0, c0, max_len=T, hidden_size=H, num_layers=num_layers,
                 is_bidirec=bidirec,
                 default_initializer=fluid.initializer.Uniform(-0.5, 0.5, seed=3), **kw)
    return (x, h0, c0), out


def _feed(num_layers, dirs, seed=0):
    rng = np.random.RandomState(seed)
    return {"x": rng.uniform(-1, 1, (T, B, D)),
            "h0": rng.uniform(-1, 1, (num_layers * dirs, B, H)),
            "c0": rng.uniform(-1, 1, (num_layers * dirs, B, H))}


@pytest.mark.parametrize("num_layers,bidirec", [(1, False), (2, False), (1, True), (2, True)])
def test_lstm_matches_numpy_and_its_gradients_match_finite_differences(num_layers, bidirec):
    dirs = 2 if bidirec else 1
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        (x, h0, c0), (out, last_h, last_c) = _build(num_layers, bidirec)
        weight = main.all_parameters()[0]
        rng = np.random.RandomState(1)
        r_out, r_h, r_c = (rng.uniform(-1, 1, s) for s in
                           ((T, B, H * dirs), (num_layers * dirs, B, H),
                            (num_layers * dirs, B, H)))
        loss = L.reduce_sum(out * constant(r_out)) + L.reduce_sum(last_h * constant(r_h)) \
            + L.reduce_sum(last_c * constant(r_c))
        grads = fluid.backward.gradients([loss], [x, h0, c0, weight])
    assert len(main.all_parameters()) == 1
    in_size = D
    size = 0
    for _ in range(num_layers):  # Fluid's formula for the flat weight
        size += dirs * (in_size * 4 * H + H * 4 * H + 8 * H)
        in_size = H * dirs
    assert weight.shape == (size,)
    assert out.shape == (T, B, H * dirs) and last_h.shape == (num_layers * dirs, B, H)
    feed = _feed(num_layers, dirs)
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    w = np.array(scope.find_var(weight.name).get_tensor())
    got = exe.run(main, feed=feed, fetch_list=[out, last_h, last_c, *grads], scope=scope)
    want = _numpy_lstm(feed["x"], feed["h0"], feed["c0"], w, num_layers, dirs)
    for g, r in zip(got[:3], want):
        np.testing.assert_allclose(g, r, rtol=1e-10, atol=1e-12)

    def ref_loss(x_, h0_, c0_, w_):
        o, h, c = _numpy_lstm(x_, h0_, c0_, w_, num_layers, dirs)
        return (o * r_out).sum() + (h * r_h).sum() + (c * r_c).sum()

    args = [feed["x"], feed["h0"], feed["c0"], w]
    for k, analytic in enumerate(got[3:]):
        numeric = np.zeros_like(args[k])
        flat = numeric.reshape(-1)
        for j in range(flat.size):
            plus = [a.copy() for a in args]
            minus = [a.copy() for a in args]
            plus[k].reshape(-1)[j] += 1e-6
            minus[k].reshape(-1)[j] -= 1e-6
            flat[j] = (ref_loss(*plus) - ref_loss(*minus)) / 2e-6
        np.testing.assert_allclose(analytic, numeric, rtol=1e-5, atol=1e-7)


def test_lstm_dropout_only_between_layers_and_only_in_training():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        _, (out, _, _) = _build(3, False, dropout_prob=0.5, seed=7)
    assert [op.type for op in main.global_block().ops].count("dropout") == 2
    test_main, test_startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(test_main, test_startup):
        _, (test_out, _, _) = _build(3, False, dropout_prob=0.5, is_test=True)
    assert "dropout" not in [op.type for op in test_main.global_block().ops]
    feed = _feed(3, 1)
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    w = np.array(scope.find_var(main.all_parameters()[0].name).get_tensor())
    train_out, = exe.run(main, feed=feed, fetch_list=[out], scope=scope)
    clean = _numpy_lstm(feed["x"], feed["h0"], feed["c0"], w, 3, 1)[0]
    assert not np.allclose(train_out, clean)
    scope2 = fluid.Scope()
    exe.run(test_startup, scope=scope2)
    scope2.find_var(test_main.all_parameters()[0].name).get_tensor().set(w, fluid.CPUPlace())
    got, = exe.run(test_main, feed=feed, fetch_list=[test_out], scope=scope2)
    np.testing.assert_allclose(got, clean, rtol=1e-10)


def test_lstm_trains_a_sequence_task():
    """Predict, at each step, the running sum of the inputs' first feature."""
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 1
    with fluid.program_guard(main, startup):
        x = L.data(name="x", shape=[T, 8, D], dtype="float32", append_batch_size=False)
        y = L.data(name="y", shape=[T, 8, 1], dtype="float32", append_batch_size=False)
        zeros = L.fill_constant([4, 8, H], "float32", 0.0)
        out, _, _ = L.lstm(x, zeros, zeros, max_len=T, hidden_size=H, num_layers=2,
                           is_bidirec=True, dropout_prob=0.1,
                           default_initializer=fluid.initializer.Uniform(-0.3, 0.3, seed=2))
        pred = L.fc(out, size=1, num_flatten_dims=2)
        loss = L.reduce_mean(L.square(pred - y))
        fluid.optimizer.Adam(learning_rate=0.05).minimize(loss)
    rng = np.random.RandomState(0)
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    losses = []
    for _ in range(60):
        xs = rng.uniform(-1, 1, (T, 8, D)).astype("float32")
        ys = np.cumsum(xs[:, :, :1], axis=0)
        losses.append(float(exe.run(main, feed={"x": xs, "y": ys}, fetch_list=[loss],
                                    scope=scope)[0]))
    assert np.mean(losses[-10:]) < 0.3 * np.mean(losses[:5])


def test_lstm_is_provided_and_checks_its_input():
    assert not isinstance(fluid.layers.lstm, NotProvided)
    assert fluid.layers.nn.lstm is fluid.layers.lstm
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        x = L.data(name="x", shape=[-1, B, D], dtype="float32", append_batch_size=False)
        h0 = L.fill_constant([1, B, H], "float32", 0.0)
        with pytest.raises(ValueError, match=r"lstm: input 'x' has shape \[-1, 3, 2\]"):
            L.lstm(x, h0, h0, max_len=T, hidden_size=H, num_layers=1)
        x = L.data(name="x2", shape=[T, B, D], dtype="float32", append_batch_size=False)
        with pytest.raises(ValueError, match=r"init_h .* must be \[num_layers \* 2"):
            L.lstm(x, h0, h0, max_len=T, hidden_size=H, num_layers=1, is_bidirec=True)
        with pytest.raises(ValueError, match="seq_len 4 > max_len 2"):
            L.lstm(x, h0, h0, max_len=2, hidden_size=H, num_layers=1)


def test_lstm_in_the_imperative_mode_matches_numpy():
    feed = _feed(2, 2)
    with fluid.dygraph.guard():
        x, h0, c0 = (fluid.dygraph.to_variable(feed[k]) for k in ("x", "h0", "c0"))
        outs = L.lstm(x, h0, c0, max_len=T, hidden_size=H, num_layers=2, is_bidirec=True,
                      default_initializer=fluid.initializer.Uniform(-0.5, 0.5, seed=3))
        weight = fluid.framework._dygraph_tracer().all_parameters()[-1]
        got = [o.numpy() for o in outs]
        L.reduce_sum(outs[0]).backward()
        assert weight.gradient().shape == weight.shape
        want = _numpy_lstm(feed["x"], feed["h0"], feed["c0"], weight.numpy(), 2, 2)
    for g, r in zip(got, want):
        np.testing.assert_allclose(g, r, rtol=1e-10, atol=1e-12)


def test_ptb_language_model_cudnn_path_trains():
    """The cuDNN path of the PaddlePaddle models' PTB language model (lm_model.py,
    rnn_model="cudnn"), as written there (trained with Adam here, for a short run), on a
    synthetic corpus whose next token is determined by the current one: perplexity falls."""
    batch_size, num_steps, num_layers, hidden_size, vocab_size = 4, 6, 2, 16, 12
    init_scale, dropout = 0.1, 0.1
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 1
    with fluid.program_guard(main, startup):
        x = L.data(name="x", shape=[batch_size, num_steps, 1], dtype='int64',
                   append_batch_size=False)
        y = L.data(name="y", shape=[batch_size * num_steps, 1], dtype='int64',
                   append_batch_size=False)
        init_hidden = L.data(name="init_hidden", shape=[num_layers, batch_size, hidden_size],
                             dtype='float32', append_batch_size=False)
        init_cell = L.data(name="init_cell", shape=[num_layers, batch_size, hidden_size],
                           dtype='float32', append_batch_size=False)
        init_cell.persistable = True
        init_hidden.persistable = True
        init_hidden_reshape = L.reshape(init_hidden, shape=[num_layers, -1, hidden_size])
        init_cell_reshape = L.reshape(init_cell, shape=[num_layers, -1, hidden_size])
        x_emb = L.embedding(
            input=x, size=[vocab_size, hidden_size], dtype='float32', is_sparse=False,
            param_attr=fluid.ParamAttr(
                name='embedding_para',
                initializer=fluid.initializer.UniformInitializer(low=-init_scale,
                                                                 high=init_scale)))
        x_emb = L.reshape(x_emb, shape=[-1, num_steps, hidden_size])
        if dropout is not None and dropout > 0.0:
            x_emb = L.dropout(x_emb, dropout_prob=dropout,
                              dropout_implementation='upscale_in_train')
        x_emb = L.transpose(x_emb, perm=[1, 0, 2])
        rnn_out, last_hidden, last_cell = L.lstm(
            x_emb, init_hidden_reshape, init_cell_reshape, num_steps, hidden_size, num_layers,
            is_bidirec=False,
            default_initializer=fluid.initializer.UniformInitializer(low=-init_scale,
                                                                     high=init_scale))
        rnn_out = L.transpose(rnn_out, perm=[1, 0, 2])
        rnn_out = L.reshape(rnn_out, shape=[-1, num_steps, hidden_size])
        softmax_weight = L.create_parameter(
            [hidden_size, vocab_size], dtype="float32", name="softmax_weight",
            default_initializer=fluid.initializer.UniformInitializer(low=-init_scale,
                                                                     high=init_scale))
        softmax_bias = L.create_parameter(
            [vocab_size], dtype="float32", name='softmax_bias',
            default_initializer=fluid.initializer.UniformInitializer(low=-init_scale,
                                                                     high=init_scale))
        projection = L.matmul(rnn_out, softmax_weight)
        projection = L.elementwise_add(projection, softmax_bias)
        projection = L.reshape(projection, shape=[-1, vocab_size])
        loss = L.softmax_with_cross_entropy(logits=projection, label=y, soft_label=False)
        loss = L.reshape(loss, shape=[-1, num_steps])
        loss = L.reduce_mean(loss, dim=[0])
        loss = L.reduce_sum(loss)
        loss.persistable = True
        fluid.clip.set_gradient_clip(clip=fluid.clip.GradientClipByGlobalNorm(clip_norm=5.0))
        fluid.optimizer.Adam(learning_rate=0.01).minimize(loss)

    rng = np.random.RandomState(0)
    successor = rng.permutation(vocab_size)
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    zeros = np.zeros((num_layers, batch_size, hidden_size), "float32")
    ppl = []
    for _ in range(80):
        seq = np.empty((batch_size, num_steps + 1), "int64")
        seq[:, 0] = rng.randint(0, vocab_size, batch_size)
        for t in range(num_steps):
            seq[:, t + 1] = successor[seq[:, t]]
        cost, h = exe.run(main, feed={"x": seq[:, :-1, None], "y": seq[:, 1:].reshape(-1, 1),
                                      "init_hidden": zeros, "init_cell": zeros},
                          fetch_list=[loss, last_hidden], scope=scope)
        assert h.shape == (num_layers, batch_size, hidden_size)
        ppl.append(float(np.exp(cost.item() / num_steps)))
    assert ppl[0] > 0.8 * vocab_size and np.mean(ppl[-5:]) < 0.4 * ppl[0]
