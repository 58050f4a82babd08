"""Op table: lstm (dynamic_lstm) and gru (dynamic_gru) over LoD inputs, against a numpy
step-by-step reference, with gradients vs finite differences; the single-step cells
lstm_unit / gru_unit."""

import numpy as np
import pytest

import parafluid as fluid
from parafluid.testing import OpCase, check_op, rand

D = 3
OFFS = [0, 3, 4, 6]  # sequences of 3, 1 and 2 steps


def sig(x):
    return 1 / (1 + np.exp(-x))


def lstm_ref(Input, Weight, Bias, attrs, H0=None, C0=None):
    peep, rev = attrs["use_peepholes"], attrs["is_reverse"]
    b = Bias.reshape(-1)
    hidden, cell = np.zeros((Input.shape[0], D)), np.zeros((Input.shape[0], D))
    for s, (a, e) in enumerate(zip(OFFS, OFFS[1:])):
        h = H0[s] if H0 is not None else np.zeros(D)
        c = C0[s] if C0 is not None else np.zeros(D)
        for row in (range(e - 1, a - 1, -1) if rev else range(a, e)):
            g = Input[row] + h @ Weight + b[:4 * D]
            cand, i, f, o = np.split(g, 4)
            if peep:
                i, f = i + c * b[4 * D:5 * D], f + c * b[5 * D:6 * D]
            cand, i, f = np.tanh(cand), sig(i), sig(f)
            c = f * c + i * cand
            o = sig(o + c * b[6 * D:]) if peep else sig(o)
            h = o * np.tanh(c)
            hidden[row], cell[row] = h, c
    return {"Hidden": hidden, "Cell": cell}


def gru_ref(Input, Weight, attrs, Bias=None, H0=None):
    rev, origin = attrs["is_reverse"], attrs["origin_mode"]
    x = Input + (Bias.reshape(-1) if Bias is not None else 0)
    hidden = np.zeros((Input.shape[0], D))
    # Fluid's layout: the flat weight's first 2D*D values are [D, 2D], the rest [D, D]
    w_ur = Weight.reshape(-1)[:2 * D * D].reshape(D, 2 * D)
    w_c = Weight.reshape(-1)[2 * D * D:].reshape(D, D)
    for s, (a, e) in enumerate(zip(OFFS, OFFS[1:])):
        h = H0[s] if H0 is not None else np.zeros(D)
        for row in (range(e - 1, a - 1, -1) if rev else range(a, e)):
            ur = sig(x[row, :2 * D] + h @ w_ur)
            u, r = ur[:D], ur[D:]
            cand = np.tanh(x[row, 2 * D:] + (r * h) @ w_c)
            h = u * h + (1 - u) * cand if origin else (1 - u) * h + u * cand
            hidden[row] = h
    return {"Hidden": hidden}


def lstm_case(peep, rev, h0=False, id=None):
    inputs = {"Input": rand(6, 4 * D, seed=1), "Weight": rand(D, 4 * D, seed=2) * 0.5,
              "Bias": rand(1, (7 if peep else 4) * D, seed=3)}
    if h0:
        inputs["H0"], inputs["C0"] = rand(3, D, seed=4), rand(3, D, seed=5)
    return OpCase("lstm", inputs, attrs={"use_peepholes": peep, "is_reverse": rev},
                  ref=lstm_ref, lod={"Input": [OFFS]}, grad=list(inputs), rtol=1e-5,
                  outputs=["Hidden", "Cell"], id=id)


def gru_case(rev, origin, h0=False, id=None):
    inputs = {"Input": rand(6, 3 * D, seed=6), "Weight": rand(D, 3 * D, seed=7) * 0.5,
              "Bias": rand(1, 3 * D, seed=8)}
    if h0:
        inputs["H0"] = rand(3, D, seed=9)
    return OpCase("gru", inputs, attrs={"is_reverse": rev, "origin_mode": origin},
                  ref=gru_ref, lod={"Input": [OFFS]}, grad=list(inputs), outputs=["Hidden"],
                  id=id)


def lstm_unit_ref(X, C_prev, attrs):
    sig = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    xi, xf, xo, xg = np.split(X, 4, axis=1)
    c = sig(xf + attrs["forget_bias"]) * C_prev + sig(xi) * np.tanh(xg)
    return {"C": c, "H": sig(xo) * np.tanh(c)}

def gru_unit_ref(Input, HiddenPrev, Weight, Bias, attrs):
    sig = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    d = HiddenPrev.shape[1]
    flat = Weight.reshape(-1)
    w_ur, w_c = flat[:2 * d * d].reshape(d, 2 * d), flat[2 * d * d:].reshape(d, d)
    g = Input + Bias
    ur = sig(g[:, :2 * d] + HiddenPrev @ w_ur)
    u, r = ur[:, :d], ur[:, d:]
    c = np.tanh(g[:, 2 * d:] + (r * HiddenPrev) @ w_c)
    h = u * HiddenPrev + (1 - u) * c if attrs["origin_mode"] else (1 - u) * HiddenPrev + u * c
    return {"Gate": np.concatenate([u, r, c], 1), "ResetHiddenPrev": r * HiddenPrev,
            "Hidden": h}

GRU_IN = {"Input": rand(3, 6), "HiddenPrev": rand(3, 2, seed=1),
          "Weight": rand(2, 6, seed=2), "Bias": rand(1, 6, seed=3)}

CASES = [
    lstm_case(True, False, id="lstm_peepholes"),
    lstm_case(False, True, id="lstm_reverse_no_peepholes"),
    lstm_case(True, False, h0=True, id="lstm_initial_state"),
    gru_case(False, False, id="gru"),
    gru_case(True, True, id="gru_reverse_origin_mode"),
    gru_case(False, False, h0=True, id="gru_initial_state"),
    OpCase("lstm_unit", {"X": rand(3, 8), "C_prev": rand(3, 2, seed=1)},
           attrs={"forget_bias": 0.5}, ref=lstm_unit_ref, grad=["X", "C_prev"]),
    OpCase("gru_unit", dict(GRU_IN), ref=gru_unit_ref,
           grad=["Input", "HiddenPrev", "Weight", "Bias"], grad_outputs=["Hidden"]),
    OpCase("gru_unit", dict(GRU_IN), attrs={"origin_mode": True}, ref=gru_unit_ref,
           grad=["Input", "HiddenPrev", "Weight", "Bias"], grad_outputs=["Hidden"],
           id="gru_unit_origin_mode"),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_rnn_op(case):
    check_op(case)


def test_stacked_lstm_text_classifier_trains():
    """understand_sentiment's stacked_lstm_net shape: fc -> dynamic_lstm -> max pools."""
    rng = np.random.RandomState(0)
    samples = []
    for _ in range(16):
        pos = rng.rand() < 0.5
        ids = rng.randint(0, 10, rng.randint(2, 5)) + (0 if pos else 10)
        samples.append((ids.tolist(), [int(pos)]))
    main, startup = fluid.Program(), fluid.Program()
    startup.random_seed = 2
    with fluid.program_guard(main, startup):
        words = fluid.data(name="words", shape=[None], dtype="int64", lod_level=1)
        label = fluid.data(name="label", shape=[None, 1], dtype="int64")
        emb = fluid.embedding(words, size=[20, 8])
        fc1 = fluid.layers.fc(input=emb, size=4 * 8)
        lstm1, _ = fluid.layers.dynamic_lstm(input=fc1, size=4 * 8)
        gru = fluid.layers.dynamic_gru(fluid.layers.fc(input=lstm1, size=3 * 8), size=8,
                                       is_reverse=True)
        pooled = [fluid.layers.sequence_pool(fc1, "max"), fluid.layers.sequence_pool(gru, "max")]
        prediction = fluid.layers.fc(input=pooled, size=2, act="softmax")
        cost = fluid.layers.mean(fluid.layers.cross_entropy(prediction, label))
        fluid.optimizer.Adam(learning_rate=0.1).minimize(cost)
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    feeder = fluid.DataFeeder(feed_list=[words, label], place=fluid.CPUPlace())
    losses = [float(exe.run(main, feed=feeder.feed(samples), fetch_list=[cost],
                            scope=scope)[0]) for _ in range(8)]
    assert losses[-1] < losses[0] / 2, losses


def test_lstm_wants_a_4d_projection():
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        x = fluid.data(name="x", shape=[None, 10], dtype="float32", lod_level=1)
        with pytest.raises(ValueError, match=r"Input has 10 columns.*fc\(size=12\)"):
            fluid.layers.dynamic_lstm(input=x, size=12)


def test_lstm_unit_and_gru_unit_layers_train_a_step_loop():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        xs = [fluid.layers.data(name=f"x{t}", shape=[3], dtype="float32") for t in range(3)]
        y = fluid.layers.data(name="y", shape=[1], dtype="float32")
        h = fluid.layers.fill_constant_batch_size_like(xs[0], [-1, 4], "float32", 0.0)
        c = fluid.layers.fill_constant_batch_size_like(xs[0], [-1, 4], "float32", 0.0)
        g = fluid.layers.fill_constant_batch_size_like(xs[0], [-1, 2], "float32", 0.0)
        lstm_attr, gru_attr = fluid.ParamAttr(name="lstm_w"), fluid.ParamAttr(name="gru_w")
        for x in xs:
            h, c = fluid.layers.lstm_unit(x, h, c, param_attr=lstm_attr,
                                          bias_attr=fluid.ParamAttr(name="lstm_b"))
            g, _, _ = fluid.layers.gru_unit(fluid.layers.fc(x, size=6), g, size=6,
                                            param_attr=gru_attr,
                                            bias_attr=fluid.ParamAttr(name="gru_b"))
        pred = fluid.layers.fc(fluid.layers.bilinear_tensor_product(h, g, size=3), size=1)
        loss = fluid.layers.mean(fluid.layers.square_error_cost(pred, y))
        fluid.optimizer.Adam(learning_rate=0.05).minimize(loss)
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    rng = np.random.RandomState(0)
    feed = {f"x{t}": rng.randn(16, 3).astype("float32") for t in range(3)}
    feed["y"] = (feed["x0"][:, :1] * feed["x2"][:, 1:2]).astype("float32")
    losses = [float(exe.run(main, feed=feed, fetch_list=[loss])[0][0]) for _ in range(40)]
    assert losses[-1] < 0.5 * losses[0], losses
