"""Op table: the intermediate outputs of Fluid 1.6's recurrent ops (lstm, lstmp, gru:
``BatchGate``, ``BatchCellPreAct``, ``BatchHidden``, ``BatchResetHiddenPrev``) in Fluid's
batch layout: time step by time step, the rows of the sequences still running, longest
sequence first. References are numpy step loops written from Fluid's kernels."""

import numpy as np
import pytest

from parafluid.testing import OpCase, check_op, rand

D, P = 3, 2
OFFS = [0, 3, 4, 6]  # sequences of 3, 1 and 2 steps: batch order 0, 2, 1


def _sig(v):
    return 1 / (1 + np.exp(-v))


def _batch_layout(per_row, offs, rev):
    """Rows ``{input row: value}`` -> Fluid's batch layout."""
    lengths = [b - a for a, b in zip(offs, offs[1:])]
    order = sorted(range(len(lengths)), key=lambda s: -lengths[s])
    rows = []
    for t in range(max(lengths)):
        for s in order:
            if t < lengths[s]:
                rows.append(per_row[offs[s + 1] - 1 - t if rev else offs[s] + t])
    return np.array(rows)


def lstm_ref(Input, Weight, Bias, attrs, proj=None, H0=None, C0=None):
    """An LSTM (with ``proj``: the LSTMP recurrence through ``h @ proj``), peepholes in the
    bias; returns the op's outputs and intermediates."""
    peep, rev = attrs["use_peepholes"], attrs["is_reverse"]
    b = Bias.reshape(-1)
    out = {k: {} for k in ("Hidden", "Cell", "BatchGate", "BatchCellPreAct", "BatchHidden")}
    for s, (a, e) in enumerate(zip(OFFS, OFFS[1:])):
        width = D if proj is None else P
        h = np.zeros(width) if H0 is None else H0[s]  # lstmp: H0 is the projection [N, P]
        c = np.zeros(D) if C0 is None else C0[s]
        for row in (range(e - 1, a - 1, -1) if rev else range(a, e)):
            cand, i, f, o = np.split(Input[row] + h @ Weight + b[:4 * D], 4)
            if peep:
                i, f = i + c * b[4 * D:5 * D], f + c * b[5 * D:6 * D]
            cand, i, f = np.tanh(cand), _sig(i), _sig(f)
            c = f * c + i * cand
            o = _sig(o + c * b[6 * D:]) if peep else _sig(o)
            hid = o * np.tanh(c)
            h = hid if proj is None else np.tanh(hid @ proj)
            out["Hidden"][row], out["Cell"][row] = h, c
            out["BatchGate"][row] = np.concatenate([cand, i, f, o])
            out["BatchCellPreAct"][row] = np.tanh(c)
            out["BatchHidden"][row] = hid
    res = {k: _batch_layout(v, OFFS, rev) if k.startswith("Batch") else
           np.array([v[r] for r in range(Input.shape[0])]) for k, v in out.items()}
    if proj is not None:
        res["Projection"] = res.pop("Hidden")
    else:
        del res["BatchHidden"]
    return res


def lstmp_ref(Input, Weight, ProjWeight, Bias, attrs, H0=None, C0=None):
    return lstm_ref(Input, Weight, Bias, attrs, proj=ProjWeight, H0=H0, C0=C0)


def gru_ref(Input, Weight, Bias, attrs, H0=None):
    rev, origin = attrs["is_reverse"], attrs["origin_mode"]
    x = Input + Bias.reshape(-1)
    # Fluid's layout: the flat weight's first 2D*D values are [D, 2D], the rest [D, D]
    flat = Weight.reshape(-1)
    w_ur, w_c = flat[:2 * D * D].reshape(D, 2 * D), flat[2 * D * D:].reshape(D, D)
    out = {k: {} for k in ("Hidden", "BatchGate", "BatchResetHiddenPrev", "BatchHidden")}
    for s, (a, e) in enumerate(zip(OFFS, OFFS[1:])):
        h = np.zeros(D) if H0 is None else H0[s]
        for row in (range(e - 1, a - 1, -1) if rev else range(a, e)):
            ur = _sig(x[row, :2 * D] + h @ w_ur)
            u, r = ur[:D], ur[D:]
            cand = np.tanh(x[row, 2 * D:] + (r * h) @ w_c)
            out["BatchGate"][row] = np.concatenate([u, r, cand])
            out["BatchResetHiddenPrev"][row] = r * h
            h = u * h + (1 - u) * cand if origin else (1 - u) * h + u * cand
            out["Hidden"][row] = out["BatchHidden"][row] = h
    return {k: _batch_layout(v, OFFS, rev) if k.startswith("Batch") else
            np.array([v[r] for r in range(Input.shape[0])]) for k, v in out.items()}


LSTM_ATTRS = {"use_peepholes": True, "is_reverse": False}


def _lstm_inputs(peep=True, proj=False, h0=False):
    ins = {"Input": rand(6, 4 * D, seed=1),
           "Weight": rand(P if proj else D, 4 * D, seed=2) * 0.5,
           "Bias": rand(1, (7 if peep else 4) * D, seed=4)}
    if proj:
        ins["ProjWeight"] = rand(D, P, seed=3)
    if h0:
        ins["H0"], ins["C0"] = rand(3, P if proj else D, seed=5), rand(3, D, seed=6)
    return ins


RNN_CASES = [
    OpCase("lstm", _lstm_inputs(), attrs=LSTM_ATTRS, ref=lstm_ref, lod={"Input": [OFFS]},
           grad=["Input", "Weight", "Bias"], grad_outputs=["Hidden", "Cell"],
           id="lstm_batch_intermediates"),
    OpCase("lstm", _lstm_inputs(peep=False, h0=True),
           attrs={"use_peepholes": False, "is_reverse": True}, ref=lstm_ref,
           lod={"Input": [OFFS]}, id="lstm_batch_intermediates_reverse_initial_state"),
    OpCase("lstmp", _lstm_inputs(proj=True), attrs=LSTM_ATTRS, ref=lstmp_ref,
           lod={"Input": [OFFS]}, grad=["Input", "Weight", "ProjWeight", "Bias"],
           grad_outputs=["Projection", "Cell"], id="lstmp_batch_intermediates"),
    OpCase("lstmp", _lstm_inputs(proj=True, h0=True),
           attrs={"use_peepholes": True, "is_reverse": True}, ref=lstmp_ref,
           lod={"Input": [OFFS]}, grad=["Input", "H0", "C0", "ProjWeight"],
           grad_outputs=["Projection", "Cell"],
           id="lstmp_batch_intermediates_reverse_initial_state"),
    OpCase("gru", {"Input": rand(6, 3 * D, seed=7), "Weight": rand(D, 3 * D, seed=8) * 0.5,
                   "Bias": rand(1, 3 * D, seed=9)},
           attrs={"is_reverse": False, "origin_mode": False}, ref=gru_ref,
           lod={"Input": [OFFS]}, grad=["Input", "Weight", "Bias"], grad_outputs=["Hidden"],
           id="gru_batch_intermediates"),
    OpCase("gru", {"Input": rand(6, 3 * D, seed=7), "Weight": rand(D, 3 * D, seed=8) * 0.5,
                   "Bias": rand(1, 3 * D, seed=9), "H0": rand(3, D, seed=10)},
           attrs={"is_reverse": True, "origin_mode": True}, ref=gru_ref,
           lod={"Input": [OFFS]}, id="gru_batch_intermediates_reverse_origin_mode"),
]


@pytest.mark.parametrize("case", RNN_CASES, ids=str)
def test_op(case):
    check_op(case)


def test_lstmp_projection_activation_is_the_cell_activation():
    """Fluid 1.6's lstmp applies cell_activation to the projection whenever
    proj_activation is not identity (its kernel reads the cell's activation there)."""
    from parafluid.testing import run_op

    ins = _lstm_inputs(proj=True)
    base = {"use_peepholes": True, "is_reverse": False, "cell_activation": "tanh"}
    relu = run_op(OpCase("lstmp", ins, attrs={**base, "proj_activation": "relu"},
                         lod={"Input": [OFFS]}))["Projection"]
    tanh = run_op(OpCase("lstmp", ins, attrs={**base, "proj_activation": "tanh"},
                         lod={"Input": [OFFS]}))["Projection"]
    np.testing.assert_array_equal(relu, tanh)
    assert (tanh < 0).any()  # a relu would have cut these
