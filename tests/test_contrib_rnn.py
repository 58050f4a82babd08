"""fluid.contrib.basic_gru / basic_lstm (Fluid 1.6 contrib/layers/rnn_impl.py): forward against
NumPy cells with Fluid's gate orders, sequence_length masking, several layers and both
directions, batch_first, Fluid's parameter names, gradients and training."""

import numpy as np
import pytest

import parafluid as fluid
from parafluid.testing import constant

L = fluid.layers
B, T, D, H = 3, 4, 2, 3
UNIFORM = fluid.initializer.Uniform(-0.6, 0.6, seed=4)


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def _gru_step(x, h, p):
    gw, gb, cw, cb = p
    g = _sigmoid(np.concatenate([x, h], 1) @ gw + gb)
    r, u = np.split(g, 2, axis=1)
    m = np.tanh(np.concatenate([x, r * h], 1) @ cw + cb)
    return (u * h + (1 - u) * m,)


def _lstm_step(x, h, c, p, forget_bias=1.0):
    w, b = p
    i, j, f, o = np.split(np.concatenate([x, h], 1) @ w + b, 4, axis=1)
    c = c * _sigmoid(f + forget_bias) + _sigmoid(i) * np.tanh(j)
    return np.tanh(c) * _sigmoid(o), c


def _numpy_rnn(kind, x, inits, params, num_layers, dirs, lengths=None):
    """x [B, T, D] (batch first); params[d][i] the cell's parameters; returns
    (out [B, T, H * dirs], lasts [num_layers * dirs, B, H] per state)."""
    step = _gru_step if kind == "gru" else _lstm_step
    xs = x.transpose(1, 0, 2)
    mask = np.ones((T, B)) if lengths is None else \
        (np.arange(T)[:, None] < lengths[None, :]).astype(x.dtype)
    outs, lasts = [], [[None] * (num_layers * dirs) for _ in inits]
    for d in range(dirs):
        order = range(T) if d == 0 else reversed(range(T))
        state = [[init[i * dirs + d] for init in inits] for i in range(num_layers)]
        out = [None] * T
        for t in order:
            inp = xs[t]
            for i in range(num_layers):
                new = step(inp, *state[i], params[d][i])
                m = mask[t][:, None]
                state[i] = [n * m + p * (1 - m) for n, p in zip(new, state[i])]
                inp = state[i][0]
            out[t] = inp
        outs.append(np.stack(out))
        for i in range(num_layers):
            for k in range(len(inits)):
                lasts[k][i * dirs + d] = state[i][k]
    return np.concatenate(outs, 2).transpose(1, 0, 2), [np.stack(s) for s in lasts]


def _names(kind, num_layers, dirs):
    """Fluid's names for named param_attr 'w' / bias_attr 'b'."""
    out = []
    for d in range(dirs):
        per = []
        for i in range(num_layers):
            w, b = f"w_{'fb'[d]}w_w_{i}", f"b_{'fb'[d]}w_b_{i}"
            per.append([w + "_gate", b + "_gate", w + "_candidate", b + "_candidate"]
                       if kind == "gru" else [w, b])
        out.append(per)
    return out


def _build(kind, num_layers, bidirec, with_init, with_lengths, dtype="float64", **kw):
    dirs = 2 if bidirec else 1
    x = L.data(name="x", shape=[B, T, D], dtype=dtype, append_batch_size=False)
    x.stop_gradient = False
    n_state = 1 if kind == "gru" else 2
    inits = [L.data(name=f"s{k}", shape=[num_layers * dirs, B, H], dtype=dtype,
                    append_batch_size=False) for k in range(n_state)] if with_init \
        else [None] * n_state
    lengths = L.data(name="len", shape=[B], dtype="int64", append_batch_size=False) \
        if with_lengths else None
    attrs = dict(param_attr=fluid.ParamAttr(name="w", initializer=UNIFORM),
                 bias_attr=fluid.ParamAttr(name="b", initializer=UNIFORM))
    if kind == "gru":
        outs = fluid.contrib.basic_gru(x, inits[0], H, num_layers=num_layers,
                                       sequence_length=lengths, bidirectional=bidirec,
                                       dtype=dtype, **attrs, **kw)
    else:
        outs = fluid.contrib.basic_lstm(x, inits[0], inits[1], H, num_layers=num_layers,
                                        sequence_length=lengths, bidirectional=bidirec,
                                        dtype=dtype, **attrs, **kw)
    return x, outs


def _feed(num_layers, dirs, n_state, seed=0):
    rng = np.random.RandomState(seed)
    feed = {"x": rng.uniform(-1, 1, (B, T, D)), "len": np.array([4, 2, 1])}
    for k in range(n_state):
        feed[f"s{k}"] = rng.uniform(-1, 1, (num_layers * dirs, B, H))
    return feed


CASES = [("gru", 1, False, False, False), ("gru", 2, True, True, True),
         ("gru", 2, False, True, False), ("lstm", 1, False, False, False),
         ("lstm", 2, True, True, True), ("lstm", 1, True, False, True)]


@pytest.mark.parametrize("kind,num_layers,bidirec,with_init,with_lengths", CASES)
def test_basic_rnn_matches_numpy(kind, num_layers, bidirec, with_init, with_lengths):
    dirs, n_state = (2 if bidirec else 1), (1 if kind == "gru" else 2)
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x, outs = _build(kind, num_layers, bidirec, with_init, with_lengths)
    names = _names(kind, num_layers, dirs)
    assert sorted(p.name for p in main.all_parameters()) == \
        sorted(n for per in names for ns in per for n in ns)
    assert outs[0].shape == (B, T, H * dirs)
    feed = _feed(num_layers, dirs, n_state)
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    run_feed = {k: v for k, v in feed.items() if main.global_block().has_var(k)}
    got = exe.run(main, feed=run_feed, fetch_list=list(outs), scope=scope)
    params = [[[np.array(scope.find_var(n).get_tensor()) for n in ns] for ns in per]
              for per in names]
    inits = [feed[f"s{k}"] if with_init else np.zeros((num_layers * dirs, B, H))
             for k in range(n_state)]
    out, lasts = _numpy_rnn(kind, feed["x"], inits, params, num_layers, dirs,
                            feed["len"] if with_lengths else None)
    np.testing.assert_allclose(got[0], out, rtol=1e-10, atol=1e-12)
    for g, r in zip(got[1:], lasts):
        assert g.shape == (num_layers * dirs, B, H)
        np.testing.assert_allclose(g, r, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("kind", ["gru", "lstm"])
def test_basic_rnn_gradient_matches_finite_differences(kind):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x, outs = _build(kind, 2, True, False, True)
        rng = np.random.RandomState(3)
        r = rng.uniform(-1, 1, (B, T, 2 * H))
        loss = L.reduce_sum(outs[0] * constant(r)) + L.reduce_sum(L.square(outs[1]))
        names = _names(kind, 2, 2)
        w0 = main.global_block().var(names[1][0][0])
        gx, gw = fluid.backward.gradients([loss], [x, w0])
    feed = _feed(2, 2, 1 if kind == "gru" else 2)
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    run_feed = {k: v for k, v in feed.items() if main.global_block().has_var(k)}
    got_x, got_w = exe.run(main, feed=run_feed, fetch_list=[gx, gw], scope=scope)
    params = [[[np.array(scope.find_var(n).get_tensor()) for n in ns] for ns in per]
              for per in names]
    zeros = np.zeros((4, B, H))
    n_state = 1 if kind == "gru" else 2

    def ref_loss(xv, w):
        params[1][0][0] = w
        out, lasts = _numpy_rnn(kind, xv, [zeros] * n_state, params, 2, 2, feed["len"])
        return (out * r).sum() + (lasts[0] ** 2).sum()

    w_ref = params[1][0][0].copy()
    for analytic, arg in ((got_x, 0), (got_w, 1)):
        base = [feed["x"].copy(), w_ref.copy()]
        numeric = np.zeros_like(base[arg])
        for j in range(numeric.size):
            plus = [a.copy() for a in base]
            minus = [a.copy() for a in base]
            plus[arg].reshape(-1)[j] += 1e-6
            minus[arg].reshape(-1)[j] -= 1e-6
            numeric.reshape(-1)[j] = (ref_loss(*plus) - ref_loss(*minus)) / 2e-6
        np.testing.assert_allclose(analytic, numeric, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("kind", ["gru", "lstm"])
def test_basic_rnn_trains(kind):
    """Classify whether the sum of the first feature over the valid steps is positive."""
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 1
    with fluid.program_guard(main, startup):
        x = L.data(name="x", shape=[16, T, D], dtype="float32", append_batch_size=False)
        lengths = L.data(name="len", shape=[16], dtype="int64", append_batch_size=False)
        y = L.data(name="y", shape=[16, 1], dtype="int64", append_batch_size=False)
        if kind == "gru":
            _, last = fluid.contrib.basic_gru(x, None, 8, num_layers=2, sequence_length=lengths,
                                              dropout_prob=0.1)
        else:
            _, last, _ = fluid.contrib.basic_lstm(x, None, None, 8, num_layers=2,
                                                  sequence_length=lengths, dropout_prob=0.1)
        top = L.reshape(L.slice(last, axes=[0], starts=[1], ends=[2]), [-1, 8])
        loss = L.mean(L.softmax_with_cross_entropy(L.fc(top, size=2), y))
        fluid.optimizer.Adam(learning_rate=0.03).minimize(loss)
    rng = np.random.RandomState(0)
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    losses = []
    for _ in range(80):
        xs = rng.uniform(-1, 1, (16, T, D)).astype("float32")
        ls = rng.randint(1, T + 1, 16)
        valid = np.arange(T)[None, :] < ls[:, None]
        ys = ((xs[:, :, 0] * valid).sum(1) > 0).astype("int64")[:, None]
        losses.append(float(exe.run(main, feed={"x": xs, "len": ls, "y": ys},
                                    fetch_list=[loss], scope=scope)[0]))
    assert np.mean(losses[-10:]) < 0.5 * np.mean(losses[:5])


def test_basic_rnn_checks_its_arguments():
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        x = L.data(name="x", shape=[B, T, -1], dtype="float32", append_batch_size=False)
        with pytest.raises(ValueError, match=r"basic_gru: input 'x' has shape \[3, 4, -1\]"):
            fluid.contrib.basic_gru(x, None, H)
        x = L.data(name="x2", shape=[B, T, D], dtype="float32", append_batch_size=False)
        h = L.data(name="h", shape=[1, B, H], dtype="float32", append_batch_size=False)
        with pytest.raises(ValueError, match=r"init_hidden 'h' must be \[num_layers \* 2"):
            fluid.contrib.basic_gru(x, h, H, bidirectional=True)
        with pytest.raises(ValueError, match="give both init_hidden and init_cell"):
            fluid.contrib.basic_lstm(x, h, None, H)


@pytest.mark.parametrize("kind", ["gru", "lstm"])
def test_basic_units_are_layers_computing_one_step(kind):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x, h, c = (L.data(name=n, shape=[B, s], dtype="float64", append_batch_size=False)
                   for n, s in (("x", D), ("h", H), ("c", H)))
        attrs = dict(param_attr=fluid.ParamAttr(name="w", initializer=UNIFORM),
                     bias_attr=fluid.ParamAttr(name="b", initializer=UNIFORM), dtype="float64")
        if kind == "gru":
            unit = fluid.contrib.BasicGRUUnit("gru_unit", H, **attrs)
            outs = [unit(x, h)]
            names = ["w_gate", "b_gate", "w_candidate", "b_candidate"]
        else:
            unit = fluid.contrib.BasicLSTMUnit("lstm_unit", H, forget_bias=0.5, **attrs)
            outs = list(unit(x, h, c))
            names = ["w", "b"]
        unit(x, h) if kind == "gru" else unit(x, h, c)  # a second step: the same parameters
    assert isinstance(unit, fluid.dygraph.Layer)
    assert sorted(p.name for p in unit.parameters()) == sorted(names)
    assert sorted(p.name for p in main.all_parameters()) == sorted(names)
    rng = np.random.RandomState(2)
    feed = {n: rng.uniform(-1, 1, (B, s)) for n, s in (("x", D), ("h", H), ("c", H))}
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    if kind == "gru":
        del feed["c"]
    got = exe.run(main, feed=feed, fetch_list=outs, scope=scope)
    params = [np.array(scope.find_var(n).get_tensor()) for n in names]
    want = _gru_step(feed["x"], feed["h"], params) if kind == "gru" else \
        _lstm_step(feed["x"], feed["h"], feed["c"], params, forget_bias=0.5)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-12)


def test_basic_lstm_unit_in_the_imperative_mode_equals_numpy():
    rng = np.random.RandomState(4)
    x, h, c = (rng.uniform(-1, 1, (B, s)) for s in (D, H, H))
    with fluid.dygraph.guard():
        unit = fluid.contrib.BasicLSTMUnit("lstm_unit", H, dtype="float64")
        xv, hv, cv = (fluid.dygraph.to_variable(v) for v in (x, h, c))
        new_h, new_c = unit(xv, hv, cv)
        params = [p.numpy() for p in unit.parameters()]
        loss = L.reduce_sum(new_h)
        loss.backward()
        assert unit.parameters()[0].gradient().shape == (D + H, 4 * H)
        got = new_h.numpy(), new_c.numpy()
    for g, w in zip(got, _lstm_step(x, h, c, params)):
        np.testing.assert_allclose(g, w, rtol=1e-12)


def test_the_units_import_from_fluid_contrib_layers_as_in_fluid():
    from parafluid.contrib.layers import BasicGRUUnit, BasicLSTMUnit, basic_gru, basic_lstm

    assert (BasicGRUUnit, BasicLSTMUnit, basic_gru, basic_lstm) == (
        fluid.contrib.BasicGRUUnit, fluid.contrib.BasicLSTMUnit, fluid.contrib.basic_gru,
        fluid.contrib.basic_lstm)


def _basic_rnn_program(kind, dynamic, batch_first):
    """basic_gru / basic_lstm over x whose seq_len is known (T) or not (-1: the program
    runs a recurrent op), from initial states given [num_layers * 2, B, H] or, as Fluid's
    test gives them, [-1, H]."""
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 3
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        steps = None if dynamic else T
        x = fluid.data(name="x", shape=[None, steps, D] if batch_first else [steps, None, D],
                       dtype="float64")
        state_shape = [None, H] if dynamic else [4, None, H]
        inits = [fluid.data(name=n, shape=state_shape, dtype="float64")
                 for n in (("h0",) if kind == "gru" else ("h0", "c0"))]
        lengths = fluid.data(name="lengths", shape=[None], dtype="int32")
        fn = fluid.contrib.basic_gru if kind == "gru" else fluid.contrib.basic_lstm
        out, *lasts = fn(x, *inits, hidden_size=H, num_layers=2, sequence_length=lengths,
                         bidirectional=True, batch_first=batch_first, dtype="float64",
                         param_attr=fluid.ParamAttr(initializer=UNIFORM))
        loss = L.reduce_mean(out) + L.reduce_mean(lasts[-1])
        fluid.optimizer.SGD(0.5).minimize(loss)
    return main, startup, [out, *lasts, loss]


@pytest.mark.parametrize("kind", ["gru", "lstm"])
@pytest.mark.parametrize("batch_first", [True, False])
def test_basic_rnn_with_seq_len_unknown_when_built_equals_the_known_one(kind, batch_first):
    rng = np.random.RandomState(8)
    x = rng.uniform(-1, 1, (B, T, D) if batch_first else (T, B, D))
    states = {n: rng.uniform(-1, 1, (4, B, H)) for n in ("h0", "c0")}
    feed = {"x": x, "lengths": np.array([4, 2, 3], "int32")}
    got = []
    for dynamic in (False, True):
        main, startup, fetch = _basic_rnn_program(kind, dynamic, batch_first)
        if dynamic:
            assert "recurrent" in [op.type for op in main.global_block().ops]
        exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
        exe.run(startup, scope=scope)
        feed.update({n: v.reshape(-1, H) if dynamic else v for n, v in states.items()
                     if n in main.global_block().vars})
        got.append([exe.run(main, feed=feed, fetch_list=fetch, scope=scope)
                    for _ in range(2)])  # the second run after one SGD step
    for static_run, dynamic_run in zip(*got):
        for a, b in zip(static_run, dynamic_run):
            np.testing.assert_allclose(b, a, rtol=1e-10, atol=1e-12)
