"""Op table: cudnn_lstm (layers.lstm's op in Fluid) against a numpy multi-layer,
bidirectional LSTM, gradients by finite differences; and against parafluid's unrolled
layers.lstm given the same flat weight."""

import numpy as np
import pytest

import parafluid as fluid
from parafluid.testing import OpCase, check_grad, check_op, rand, run_layers, run_op

T, B, IN, H = 3, 2, 2, 2


def sig(v):
    return 1 / (1 + np.exp(-v))


def weight_size(layers, dirs):
    size, width = 0, IN
    for _ in range(layers):
        size += dirs * (width * 4 * H + H * 4 * H + 8 * H)
        width = H * dirs
    return size


def lstm_ref(Input, InitH, InitC, W, attrs):
    layers, dirs = attrs["num_layers"], 2 if attrs["is_bidirec"] else 1
    flat, pos = W.reshape(-1), 0

    def take(*shape):
        nonlocal pos
        n = int(np.prod(shape))
        piece = flat[pos:pos + n].reshape(shape)
        pos += n
        return piece

    x, width = Input, IN
    last_h, last_c = [], []
    for layer in range(layers):
        outs = []
        for d in range(dirs):
            wx, wh, bx, bh = take(width, 4 * H), take(H, 4 * H), take(4 * H), take(4 * H)
            h, c = InitH[layer * dirs + d], InitC[layer * dirs + d]
            hs = [None] * T
            for t in (range(T) if d == 0 else range(T - 1, -1, -1)):
                g = x[t] @ wx + bx + bh + h @ wh
                i, f, o, cand = sig(g[:, :H]), sig(g[:, H:2 * H]), sig(g[:, 2 * H:3 * H]), \
                    np.tanh(g[:, 3 * H:])
                c = f * c + i * cand
                h = o * np.tanh(c)
                hs[t] = h
            outs.append(np.stack(hs))
            last_h.append(h)
            last_c.append(c)
        x, width = np.concatenate(outs, 2), H * dirs
    return {"Out": x, "last_h": np.stack(last_h), "last_c": np.stack(last_c)}


def case(layers, bidirec, tag):
    dirs = 2 if bidirec else 1
    inputs = {"Input": rand(T, B, IN, seed=1), "InitH": rand(layers * dirs, B, H, seed=2),
              "InitC": rand(layers * dirs, B, H, seed=3),
              "W": rand(weight_size(layers, dirs), seed=4)}
    return OpCase("cudnn_lstm", inputs,
                  attrs={"num_layers": layers, "is_bidirec": bidirec, "input_size": IN,
                         "hidden_size": H, "max_len": T},
                  outputs=["Out", "last_h", "last_c"], ref=lstm_ref,
                  grad=["Input", "InitH", "InitC", "W"], id=f"cudnn_lstm-{tag}")


CASES = [case(1, False, "1layer"), case(2, True, "2layers-bidirec"),
         case(2, False, "2layers")]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_op(case):
    check_op(case)


def test_cudnn_lstm_equals_the_unrolled_layers_lstm():
    c = CASES[1]
    ins = c.inputs

    def build():
        x = fluid.layers.data("x", [T, B, IN], dtype="float64", append_batch_size=False)
        h0 = fluid.layers.data("h0", [4, B, H], dtype="float64", append_batch_size=False)
        c0 = fluid.layers.data("c0", [4, B, H], dtype="float64", append_batch_size=False)
        init = fluid.initializer.NumpyArrayInitializer(ins["W"])
        return list(fluid.layers.lstm(x, h0, c0, max_len=T, hidden_size=H, num_layers=2,
                                      is_bidirec=True, default_initializer=init))

    want = run_layers(build, {"x": ins["Input"], "h0": ins["InitH"], "c0": ins["InitC"]})
    got = run_op(c)
    for slot, w in zip(("Out", "last_h", "last_c"), want):
        np.testing.assert_allclose(got[slot], w, rtol=1e-12, atol=1e-12)


def test_gradient_refuses_dropout_between_layers():
    c = case(2, False, "dropout")
    c.attrs.update(dropout_prob=0.5, seed=3)
    with pytest.raises(RuntimeError, match="keeps no masks"):
        check_grad(c)
