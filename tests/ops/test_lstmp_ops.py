"""Op table: lstmp (dynamic_lstmp, an LSTM with a recurrent projection) over LoD input,
against a numpy step-by-step reference, with gradients vs finite differences; its layer."""

import numpy as np
import pytest

import parafluid as fluid
from parafluid.testing import OpCase, check_op, rand

D, P = 3, 2
OFFS = [0, 3, 4, 6]  # sequences of 3, 1 and 2 steps

ACTS = {"tanh": np.tanh, "sigmoid": lambda v: 1 / (1 + np.exp(-v)),
        "relu": lambda v: np.maximum(v, 0), "identity": lambda v: v}


def lstmp_ref(Input, Weight, ProjWeight, Bias, attrs, H0=None, C0=None):
    peep, rev = attrs["use_peepholes"], attrs["is_reverse"]
    gate, proj_act = ACTS[attrs["gate_activation"]], ACTS[attrs["proj_activation"]]
    cclip, pclip = attrs["cell_clip"], attrs["proj_clip"]
    b = Bias.reshape(-1)
    proj, cell = np.zeros((Input.shape[0], P)), np.zeros((Input.shape[0], D))
    for s, (a, e) in enumerate(zip(OFFS, OFFS[1:])):
        r = H0[s] if H0 is not None else np.zeros(P)  # Fluid 1.6: H0 is the projection
        c = C0[s] if C0 is not None else np.zeros(D)
        for row in (range(e - 1, a - 1, -1) if rev else range(a, e)):
            cand, i, f, o = np.split(Input[row] + r @ Weight + b[:4 * D], 4)
            if peep:
                i, f = i + c * b[4 * D:5 * D], f + c * b[5 * D:6 * D]
            c = gate(f) * c + gate(i) * np.tanh(cand)
            if cclip > 0:
                c = np.clip(c, -cclip, cclip)
            o = gate(o + c * b[6 * D:]) if peep else gate(o)
            r = proj_act((o * np.tanh(c)) @ ProjWeight)
            if pclip > 0:
                r = np.clip(r, -pclip, pclip)
            proj[row], cell[row] = r, c
    return {"Projection": proj, "Cell": cell}


def lstmp_case(peep=True, rev=False, h0=False, id=None, **attrs):
    inputs = {"Input": rand(6, 4 * D, seed=1), "Weight": rand(P, 4 * D, seed=2) * 0.5,
              "ProjWeight": rand(D, P, seed=3), "Bias": rand(1, (7 if peep else 4) * D, seed=4)}
    if h0:
        inputs["H0"], inputs["C0"] = rand(3, P, seed=5), rand(3, D, seed=6)
    attrs = {"use_peepholes": peep, "is_reverse": rev, "cell_clip": 0.0, "proj_clip": 0.0,
             "gate_activation": "sigmoid", "proj_activation": "tanh", **attrs}
    return OpCase("lstmp", inputs, attrs=attrs, ref=lstmp_ref, lod={"Input": [OFFS]},
                  grad=list(inputs), outputs=["Projection", "Cell"], id=id)


CASES = [
    lstmp_case(id="lstmp_peepholes"),
    lstmp_case(peep=False, rev=True, id="lstmp_reverse_no_peepholes"),
    lstmp_case(h0=True, id="lstmp_initial_state"),
    lstmp_case(proj_activation="identity", cell_clip=0.3, proj_clip=0.065, id="lstmp_clipped"),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_op(case):
    check_op(case)


def test_dynamic_lstmp_layer_shapes_parameters_and_training():
    rng = np.random.RandomState(0)
    x = rng.randn(7, 5).astype("float32")
    y = (x.sum(1, keepdims=True) > 0).astype("int64")
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 1
    with fluid.program_guard(main, startup):
        seq = fluid.layers.data(name="seq", shape=[5], dtype="float32", lod_level=1)
        label = fluid.layers.data(name="label", shape=[1], dtype="int64")
        fc = fluid.layers.fc(input=seq, size=4 * 6)
        proj, cell = fluid.layers.dynamic_lstmp(input=fc, size=4 * 6, proj_size=3)
        assert list(proj.shape) == [-1, 3] and list(cell.shape) == [-1, 6]
        pred = fluid.layers.fc(input=proj, size=2, act="softmax")
        loss = fluid.layers.mean(fluid.layers.cross_entropy(pred, label))
        fluid.optimizer.Adam(learning_rate=0.05).minimize(loss)
    shapes = sorted(tuple(p.shape) for p in main.all_parameters() if "lstmp" in p.name)
    assert shapes == [(1, 42), (3, 24), (6, 3)]
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    feed = {"seq": fluid.create_lod_tensor(x, [[3, 4]], fluid.CPUPlace()), "label": y}
    losses = [float(exe.run(main, feed=feed, fetch_list=[loss])[0]) for _ in range(30)]
    assert losses[-1] < 0.5 * losses[0], losses
