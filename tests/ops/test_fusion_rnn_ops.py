"""Op table: Fluid's fused recurrent ops (fusion_lstm, fusion_gru, fused_embedding_fc_lstm,
attention_lstm) over LoD inputs against numpy step-by-step references, and the first three
against their unfused programs (mul or lookup_table, then lstm or gru) run by parafluid.
Fluid registers no gradient for them."""

import numpy as np
import pytest

from parafluid.ops import get_op_def
from parafluid.testing import OpCase, check_op, rand, run_op, run_op_chain

D, M = 2, 3
OFFS = [0, 3, 4, 6]  # sequences of 3, 1 and 2 steps


def sig(v):
    return 1 / (1 + np.exp(-v))


def lstm_np(gates, wh, bias, attrs, h0=None, c0=None, offs=OFFS):
    """Fluid's lstm on projected gates (candidate, input, forget, output)."""
    peep, rev = attrs["use_peepholes"], attrs["is_reverse"]
    b = bias.reshape(-1)
    hidden, cell = np.zeros((gates.shape[0], D)), np.zeros((gates.shape[0], D))
    for s, (a, e) in enumerate(zip(offs, offs[1:])):
        h = h0[s] if h0 is not None else np.zeros(D)
        c = c0[s] if c0 is not None else np.zeros(D)
        for row in (range(e - 1, a - 1, -1) if rev else range(a, e)):
            cand, i, f, o = np.split(gates[row] + h @ wh + b[:4 * D], 4)
            if peep:
                i, f = i + c * b[4 * D:5 * D], f + c * b[5 * D:6 * D]
            c = sig(f) * c + sig(i) * np.tanh(cand)
            o = sig(o + c * b[6 * D:]) if peep else sig(o)
            h = o * np.tanh(c)
            hidden[row], cell[row] = h, c
    return hidden, cell


def gru_np(gates, wh, attrs, h0=None):
    w_ur = wh.reshape(-1)[:2 * D * D].reshape(D, 2 * D)
    w_c = wh.reshape(-1)[2 * D * D:].reshape(D, D)
    hidden = np.zeros((gates.shape[0], D))
    for s, (a, e) in enumerate(zip(OFFS, OFFS[1:])):
        h = h0[s] if h0 is not None else np.zeros(D)
        for row in (range(e - 1, a - 1, -1) if attrs["is_reverse"] else range(a, e)):
            ur = sig(gates[row, :2 * D] + h @ w_ur)
            u, r = ur[:D], ur[D:]
            c = np.tanh(gates[row, 2 * D:] + (r * h) @ w_c)
            h = (1 - u) * h + u * c
            hidden[row] = h
    return hidden


def batch_rows(rev):
    lengths = np.diff(OFFS)
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    return [OFFS[i] + (lengths[i] - 1 - t if rev else t)
            for t in range(max(lengths)) for i in order if lengths[i] > t]


def fusion_lstm_ref(X, WeightX, WeightH, Bias, attrs, H0=None, C0=None):
    hidden, cell = lstm_np(X @ WeightX, WeightH, Bias, attrs, H0, C0)
    xx = X @ WeightX + Bias.reshape(-1)[:4 * D]
    out = {"Hidden": hidden, "Cell": cell, "XX": xx}
    if not attrs["use_seq"]:
        rows = batch_rows(attrs["is_reverse"])
        out.update(XX=X[rows], BatchedInput=xx[rows], BatchedHidden=hidden[rows],
                   BatchedCell=cell[rows])
        if H0 is not None:  # sequences by length: 3, 2, 1 steps
            out.update(ReorderedH0=H0[[0, 2, 1]], ReorderedC0=C0[[0, 2, 1]])
    return out


def fusion_gru_ref(X, WeightX, WeightH, attrs, Bias=None, H0=None):
    xx = X @ WeightX + (Bias.reshape(-1) if Bias is not None else 0)
    hidden = gru_np(xx, WeightH, attrs, H0)
    out = {"Hidden": hidden, "XX": xx}
    if not attrs["use_seq"]:
        rows = batch_rows(attrs["is_reverse"])
        out.update(XX=X[rows], BatchedInput=xx[rows], BatchedOut=hidden[rows])
        if H0 is not None:
            out["ReorderedH0"] = H0[[0, 2, 1]]
    return out


def _peepholes_only(bias):
    """Fluid's fused_embedding_fc_lstm reads only the peephole weights from Bias: the gate
    bias is already in the Embeddings rows (Fluid's test adds it there)."""
    b = np.array(bias, copy=True)
    b.reshape(-1)[:4 * D] = 0
    return b


def emb_lstm_ref(Ids, Embeddings, WeightH, Bias, attrs, H0=None, C0=None):
    gates = Embeddings[Ids.reshape(-1)]
    hidden, cell = lstm_np(gates, WeightH, _peepholes_only(Bias), attrs, H0, C0)
    return {"Hidden": hidden, "Cell": cell, "XX": gates}


def attention_lstm_ref(X, C0, AttentionWeight, LSTMWeight, LSTMBias, H0=None,
                       AttentionBias=None, AttentionScalar=None, AttentionScalarBias=None):
    aw = AttentionWeight.reshape(-1)
    atted = X @ aw[:M] + (AttentionBias.reshape(()) if AttentionBias is not None else 0)
    hidden, cell = np.zeros((X.shape[0], D)), np.zeros((X.shape[0], D))
    for s, (a, e) in enumerate(zip(OFFS, OFFS[1:])):
        c, h = C0[s], (H0[s] if H0 is not None else np.zeros(D))
        for t in range(a, e):
            score = np.maximum(atted[a:e] + c @ aw[M:], 0)
            if AttentionScalar is not None:
                score = score * AttentionScalar.reshape(())
                if AttentionScalarBias is not None:
                    score = score + AttentionScalarBias.reshape(())
                score = np.maximum(score, 0)
            score = np.exp(score - score.max())
            score /= score.sum()
            pre = (score @ X[a:e]) @ LSTMWeight[D:] + h @ LSTMWeight[:D] + LSTMBias.reshape(-1)
            f, i, o, cand = np.split(pre, 4)
            c = sig(f) * c + sig(i) * np.tanh(cand)
            h = np.tanh(c) * sig(o)
            hidden[t], cell[t] = h, c
    return {"Hidden": hidden, "Cell": cell, "AttentionedX": atted.reshape(-1, 1)}


X = rand(6, M, seed=1)
H0, C0 = rand(3, D, seed=6), rand(3, D, seed=7)


def lstm_inputs(peep, h0):
    ins = {"X": X, "WeightX": rand(M, 4 * D, seed=2), "WeightH": rand(D, 4 * D, seed=3) * 0.5,
           "Bias": rand(1, (7 if peep else 4) * D, seed=4)}
    if h0:
        ins.update(H0=H0, C0=C0)
    return ins


LSTM_SEQ_OUTS = ["Hidden", "Cell", "XX"]
LSTM_BATCH_OUTS = LSTM_SEQ_OUTS + ["BatchedInput", "BatchedHidden", "BatchedCell"]
GRU_W = {"X": X, "WeightX": rand(M, 3 * D, seed=8), "WeightH": rand(D, 3 * D, seed=9)}
EMB = {"Ids": np.array([[4], [1], [0], [2], [4], [3]], "int64"),
       "Embeddings": rand(5, 4 * D, seed=10), "WeightH": rand(D, 4 * D, seed=11) * 0.5}
ATT = {"X": X, "C0": C0, "AttentionWeight": rand(M + D, 1, seed=12),
       "LSTMWeight": rand(D + M, 4 * D, seed=13), "LSTMBias": rand(1, 4 * D, seed=14)}
ATT_OUTS = ["Hidden", "Cell", "AttentionedX", "AttentionFCOut", "LSTMX", "LSTMOUT"]

CASES = [
    OpCase("fusion_lstm", lstm_inputs(peep, h0),
           attrs={"use_peepholes": peep, "is_reverse": rev, "use_seq": seq},
           ref=fusion_lstm_ref, lod={"X": [OFFS]},
           outputs=(LSTM_SEQ_OUTS if seq else LSTM_BATCH_OUTS) + (["CheckedCell"] if peep
                                                                 else [])
           + (["ReorderedH0", "ReorderedC0"] if h0 and not seq else []),
           id=f"fusion_lstm-peep{int(peep)}-rev{int(rev)}-h0{int(h0)}-seq{int(seq)}")
    for peep, rev, h0, seq in ((False, False, False, True), (True, False, True, True),
                               (True, True, False, True), (False, False, True, False),
                               (True, True, True, False))
] + [
    OpCase("fusion_gru", {**GRU_W, **extra}, attrs={"is_reverse": rev, "use_seq": seq},
           ref=fusion_gru_ref, lod={"X": [OFFS]},
           outputs=["Hidden", "XX"] + ([] if seq else ["BatchedInput", "BatchedOut"])
           + (["ReorderedH0"] if "H0" in extra and not seq else []),
           id=f"fusion_gru-{tag}-rev{int(rev)}-seq{int(seq)}")
    for extra, tag, rev, seq in (({}, "plain", False, True),
                                 ({"Bias": rand(1, 3 * D, seed=15)}, "bias", True, True),
                                 ({"Bias": rand(1, 3 * D, seed=15), "H0": H0}, "bias-h0",
                                  False, True),
                                 ({"H0": H0}, "h0", False, False))
] + [
    OpCase("fused_embedding_fc_lstm", {**EMB, "Bias": rand(1, (7 if peep else 4) * D, seed=16),
                                       **({"H0": H0, "C0": C0} if h0 else {})},
           attrs={"use_peepholes": peep, "is_reverse": rev}, ref=emb_lstm_ref,
           lod={"Ids": [OFFS]}, outputs=LSTM_SEQ_OUTS,
           id=f"emb_fc_lstm-peep{int(peep)}-rev{int(rev)}-h0{int(h0)}")
    for peep, rev, h0 in ((False, False, False), (True, True, True))
] + [
    OpCase("attention_lstm", {**ATT, **extra}, ref=attention_lstm_ref, lod={"X": [OFFS]},
           outputs=ATT_OUTS, id=f"attention_lstm-{tag}")
    for extra, tag in (({}, "plain"),
                       ({"H0": H0, "AttentionBias": rand(1, 1, seed=17)}, "h0-bias"),
                       ({"AttentionScalar": np.array([[0.7]]),
                         "AttentionScalarBias": np.array([[0.2]])}, "scalar"))
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_op(case):
    check_op(case)


@pytest.mark.parametrize("op", ["fusion_lstm", "fusion_gru", "fused_embedding_fc_lstm",
                                "attention_lstm"])
def test_no_gradient_as_in_fluid(op):
    assert get_op_def(op).grad is None


def _case(name):
    return next(c for c in CASES if c.id == name)


def test_fusion_lstm_equals_mul_then_lstm():
    case = _case("fusion_lstm-peep1-rev0-h01-seq1")
    ins = case.inputs
    ops = [("mul", {"X": ["x"], "Y": ["wx"]}, {"Out": ["g"]}, {}),
           ("lstm", {"Input": ["g"], "Weight": ["wh"], "Bias": ["b"], "H0": ["h0"],
                     "C0": ["c0"]}, {"Hidden": ["h"], "Cell": ["c"]}, {"use_peepholes": True})]
    feed = {"x": (X, [OFFS]), "wx": ins["WeightX"], "wh": ins["WeightH"], "b": ins["Bias"],
            "h0": H0, "c0": C0}
    want = run_op_chain(ops, feed, ["h", "c"])
    got = run_op(case)
    np.testing.assert_array_equal(got["Hidden"], want[0])
    np.testing.assert_array_equal(got["Cell"], want[1])


def test_fusion_gru_equals_mul_then_gru():
    case = _case("fusion_gru-bias-h0-rev0-seq1")
    ins = case.inputs
    ops = [("mul", {"X": ["x"], "Y": ["wx"]}, {"Out": ["g"]}, {}),
           ("gru", {"Input": ["g"], "Weight": ["wh"], "Bias": ["b"], "H0": ["h0"]},
            {"Hidden": ["h"]}, {})]
    feed = {"x": (X, [OFFS]), "wx": ins["WeightX"], "wh": ins["WeightH"], "b": ins["Bias"],
            "h0": H0}
    want, = run_op_chain(ops, feed, ["h"])
    np.testing.assert_array_equal(run_op(case)["Hidden"], want)


def test_fused_embedding_fc_lstm_equals_lookup_then_lstm():
    case = _case("emb_fc_lstm-peep1-rev1-h01")
    ins = case.inputs
    ops = [("lookup_table", {"W": ["emb"], "Ids": ["ids"]}, {"Out": ["g"]}, {}),
           ("lstm", {"Input": ["g"], "Weight": ["wh"], "Bias": ["b"], "H0": ["h0"],
                     "C0": ["c0"]}, {"Hidden": ["h"], "Cell": ["c"]},
            {"use_peepholes": True, "is_reverse": True})]
    feed = {"ids": (EMB["Ids"], [OFFS]), "emb": EMB["Embeddings"], "wh": EMB["WeightH"],
            "b": _peepholes_only(ins["Bias"]), "h0": H0, "c0": C0}
    want = run_op_chain(ops, feed, ["h", "c"])
    got = run_op(case)
    np.testing.assert_array_equal(got["Hidden"], want[0])
    np.testing.assert_array_equal(got["Cell"], want[1])
