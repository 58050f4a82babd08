"""Fluid 1.6's cell API (fluid.layers.RNNCell / GRUCell / LSTMCell / rnn) against numpy."""

from __future__ import annotations

import numpy as np
import pytest

import parafluid as fluid
from parafluid.compat import NotProvidedError

B, T, D, H = 3, 4, 2, 5


def _sigmoid(v):
    return 1.0 / (1.0 + np.exp(-v))


def _gru(x, h, p):
    gate = _sigmoid(np.concatenate([x, h], 1) @ p["w_gate"] + p["b_gate"])
    r, u = np.split(gate, 2, axis=1)
    c = np.tanh(np.concatenate([x, r * h], 1) @ p["w_candidate"] + p["b_candidate"])
    return u * h + (1 - u) * c


def _lstm(x, h, c, p, forget_bias=1.0):
    i, j, f, o = np.split(np.concatenate([x, h], 1) @ p["w"] + p["b"], 4, axis=1)
    new_c = c * _sigmoid(f + forget_bias) + _sigmoid(i) * np.tanh(j)
    return np.tanh(new_c) * _sigmoid(o), new_c


def _reference(kind, x, lengths, params, reverse):
    h = np.zeros((B, H))
    c = np.zeros((B, H))
    outs = np.zeros((B, T, H))
    order = range(T - 1, -1, -1) if reverse else range(T)
    for t in order:
        # the mask is reversed with the inputs: a padded step keeps the state either way
        live = (np.arange(B) < B) if lengths is None else (t < lengths)
        if kind == "gru":
            new_h, new_c = _gru(x[:, t], h, params), c
        else:
            new_h, new_c = _lstm(x[:, t], h, c, params)
        outs[:, t] = new_h
        h = np.where(live[:, None], new_h, h)
        c = np.where(live[:, None], new_c, c)
    return outs, h, c


@pytest.mark.parametrize("kind", ["gru", "lstm"])
@pytest.mark.parametrize("masked, reverse", [(False, False), (True, False), (True, True)])
@pytest.mark.parametrize("steps", [T, -1], ids=["steps_known", "steps_known_when_run"])
def test_rnn_runs_the_cell_over_time(kind, masked, reverse, steps):
    main, startup = fluid.Program(), fluid.Program()
    init = fluid.initializer.Uniform(-0.5, 0.5, seed=3)
    with fluid.program_guard(main, startup):
        x = fluid.data(name="x", shape=[B, steps, D], dtype="float64")
        lengths = fluid.data(name="len", shape=[B], dtype="int64")
        attrs = dict(param_attr=fluid.ParamAttr(name="w", initializer=init),
                     bias_attr=fluid.ParamAttr(name="b", initializer=init), dtype="float64")
        cell = fluid.layers.GRUCell(H, **attrs) if kind == "gru" else \
            fluid.layers.LSTMCell(H, **attrs)
        outs, final = fluid.layers.rnn(cell, x, sequence_length=lengths if masked else None,
                                       is_reverse=reverse)
    finals = [final] if kind == "gru" else list(final)
    assert list(outs.shape) == [B, steps, H]
    # a length known only when the program runs: one recurrent op steps through it
    assert ("recurrent" in [op.type for op in main.global_block().ops]) == (steps == -1)
    rng = np.random.RandomState(0)
    x_np = rng.uniform(-1, 1, (B, T, D))
    len_np = np.array([4, 2, 1], "int64")
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    got = exe.run(main, feed={"x": x_np, "len": len_np}, fetch_list=[outs] + finals,
                  scope=scope)
    names = ["w_gate", "b_gate", "w_candidate", "b_candidate"] if kind == "gru" else ["w", "b"]
    params = {n: np.array(scope.find_var(n).get_tensor()) for n in names}
    want_outs, want_h, want_c = _reference(kind, x_np, len_np if masked else None, params,
                                           reverse)
    np.testing.assert_allclose(got[1], want_h, rtol=1e-10)
    if kind == "lstm":
        np.testing.assert_allclose(got[2], want_c, rtol=1e-10)
    if not masked:
        np.testing.assert_allclose(got[0], want_outs, rtol=1e-10)
    else:
        # the steps inside each sequence (past its end the outputs are what the cell
        # computed from the kept state, as in Fluid)
        for b, n in enumerate(len_np):
            for t in range(n):
                np.testing.assert_allclose(got[0][b, t], want_outs[b, t], rtol=1e-10)


def test_rnn_time_major_and_gradients_reach_the_cell():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.data(name="x", shape=[T, B, D], dtype="float32")
        cell = fluid.layers.GRUCell(H)
        outs, final = fluid.layers.rnn(cell, x, time_major=True)
        loss = fluid.layers.mean(final)
        fluid.optimizer.SGD(0.1).minimize(loss)
    assert list(outs.shape) == [T, B, H] and list(final.shape) == [B, H]
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.Scope()
    exe.run(startup, scope=scope)
    feed = {"x": np.random.RandomState(1).rand(T, B, D).astype("float32")}
    first = exe.run(main, feed=feed, fetch_list=[loss], scope=scope)[0]
    second = exe.run(main, feed=feed, fetch_list=[loss], scope=scope)[0]
    assert float(np.ravel(second)[0]) != float(np.ravel(first)[0])


def test_cells_initial_states_and_interface():
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        x = fluid.data(name="x", shape=[None, T, D], dtype="float32")
        lstm = fluid.layers.LSTMCell(H)
        assert lstm.state_shape == [[H], [H]]
        h, c = lstm.get_initial_states(batch_ref=x, init_value=0.5)
        assert list(h.shape) == [-1, H] and list(c.shape) == [-1, H]
        gru = fluid.layers.GRUCell(H)
        assert gru.state_shape == [H]
        s = gru.get_initial_states(batch_ref=x, shape=[7], dtype="float64")
        assert list(s.shape) == [-1, 7] and s.dtype == "float64"
        got = fluid.Executor(fluid.CPUPlace()).run(
            fluid.default_main_program(), feed={"x": np.zeros([2, T, D], "float32")},
            fetch_list=[h])[0]
    np.testing.assert_array_equal(got, np.full([2, H], 0.5, "float32"))
    base = fluid.layers.RNNCell()
    with pytest.raises(NotImplementedError, match="call function"):
        base(None, None)
    with pytest.raises(NotImplementedError, match="state_shape"):
        base.state_shape  # noqa: B018
    with pytest.raises(NotImplementedError, match="state_dtype"):
        base.state_dtype  # noqa: B018
    decoder = fluid.layers.Decoder()
    for call in (lambda: decoder.initialize(None), lambda: decoder.step(None, None, None),
                 lambda: decoder.output_dtype, lambda: decoder.finalize(None, None, None)):
        with pytest.raises(NotImplementedError):
            call()
    with pytest.raises(TypeError, match="cell must be an RNNCell"):
        fluid.layers.rnn(object(), None)
    with pytest.raises(NotProvidedError, match="dynamic decoding"):
        fluid.layers.dynamic_decode(decoder)


def test_rnn_is_the_function_at_layers_rnn_as_in_fluid():
    from parafluid.layers.rnn import GRUCell, RNNCell, rnn

    assert fluid.layers.rnn is rnn and callable(fluid.layers.rnn)
    assert fluid.layers.GRUCell is GRUCell and issubclass(GRUCell, RNNCell)
