"""Op table: sequence-family behaviours of Fluid 1.6 checked beyond the main tables: the CTC
loss of a sequence no alignment fits (warp-ctc skips it: loss 0, zero gradient), beam search
back-tracing (gather_tree) and the top-k average pooling of match matrices. References are
numpy loops written from Fluid's operator definitions."""

import itertools

import numpy as np
import pytest

from parafluid.testing import OpCase, check_op, rand

C = 4  # CTC classes, the blank (0) included


def _ctc_nll(logits, label, blank=0):
    """-log of the summed probability of every path collapsing to ``label``; 0 when no path
    fits (warp-ctc's convention for a label longer than the input)."""
    repeats = sum(1 for a, b in zip(label, label[1:]) if a == b)
    if len(label) + repeats > len(logits):
        return 0.0
    z = logits - logits.max(1, keepdims=True)
    prob = np.exp(z) / np.exp(z).sum(1, keepdims=True)
    total = 0.0
    for path in itertools.product(range(logits.shape[1]), repeat=logits.shape[0]):
        out, prev = [], None
        for p in path:
            if p != prev and p != blank:
                out.append(p)
            prev = p
        if out == list(label):
            total += np.prod([prob[t, p] for t, p in enumerate(path)])
    return -np.log(total)


# sequence 1 has 2 frames for the label [2, 2] (needs 3: a blank between the repeats);
# sequence 2 has 1 frame for 2 labels
CTC_OFFS, CTC_LABEL_OFFS = [0, 3, 5, 6], [0, 2, 4, 6]
CTC_X = rand(6, C, seed=81, low=-2.0, high=2.0)
CTC_Y = np.array([[1], [2], [2], [2], [1], [3]], "int32")


def ctc_lod_ref(Logits, Label):
    out = [_ctc_nll(Logits[a:b], Label[c:d, 0])
           for a, b, c, d in zip(CTC_OFFS, CTC_OFFS[1:], CTC_LABEL_OFFS, CTC_LABEL_OFFS[1:])]
    return {"Loss": np.array(out).reshape(-1, 1)}


def _ctc_grad_check(got, attrs):
    grad = got["WarpCTCGrad"]
    assert np.isfinite(grad).all(), "warpctc: WarpCTCGrad must stay finite"
    assert not grad[:, 1:].any(), "warpctc: a skipped sequence has a zero gradient"


CTC_PAD_X = rand(3, 2, C, seed=82, low=-2.0, high=2.0)
CTC_PAD_Y = np.array([[1], [2], [3], [3]], "int64")   # [1, 2] and [3, 3], packed


def ctc_pad_ref(Logits, Label, LogitsLength, LabelLength):
    offs = np.concatenate([[0], np.cumsum(LabelLength)])
    out = [_ctc_nll(Logits[:LogitsLength[i], i], Label[offs[i]:offs[i + 1], 0])
           for i in range(Logits.shape[1])]
    return {"Loss": np.array(out).reshape(-1, 1)}


CTC_CASES = [
    OpCase("warpctc", {"Logits": CTC_X, "Label": CTC_Y}, ref=ctc_lod_ref,
           lod={"Logits": [CTC_OFFS], "Label": [CTC_LABEL_OFFS]}, grad=["Logits"],
           grad_outputs=["Loss"], check=_ctc_grad_check, id="warpctc_label_longer_than_input"),
    OpCase("warpctc", {"Logits": CTC_X, "Label": CTC_Y}, ref=ctc_lod_ref,
           attrs={"norm_by_times": True},  # scales the gradient only, never the loss
           lod={"Logits": [CTC_OFFS], "Label": [CTC_LABEL_OFFS]}, check=_ctc_grad_check,
           id="warpctc_label_longer_than_input_norm_by_times"),
    OpCase("warpctc", {"Logits": CTC_PAD_X, "Label": CTC_PAD_Y,
                       "LogitsLength": np.array([3, 2], "int64"),
                       "LabelLength": np.array([2, 2], "int64")}, ref=ctc_pad_ref,
           grad=["Logits"], grad_outputs=["Loss"], id="warpctc_padded_label_longer_than_input"),
]


# ----------------------------------------------------------------------------- gather_tree


def gather_tree_ref(Ids, Parents):
    steps, batch, beam = Ids.shape
    out = np.zeros_like(Ids)
    for b in range(batch):
        for k in range(beam):
            parent = k
            for t in range(steps - 1, -1, -1):
                out[t, b, k] = Ids[t, b, parent]
                parent = Parents[t, b, parent]
    return {"Out": out}


# Fluid's documented example
TREE_IDS = np.array([[[2, 2], [6, 1]], [[3, 9], [6, 1]], [[0, 1], [9, 0]]], "int64")
TREE_PARENTS = np.array([[[0, 0], [1, 1]], [[1, 0], [1, 0]], [[0, 0], [0, 1]]], "int64")
TREE_OUT = np.array([[[2, 2], [1, 6]], [[3, 3], [6, 1]], [[0, 1], [9, 0]]], "int64")
RNG = np.random.RandomState(83)

GATHER_TREE_CASES = [
    OpCase("gather_tree", {"Ids": TREE_IDS, "Parents": TREE_PARENTS},
           ref=lambda Ids, Parents: {"Out": TREE_OUT}, id="gather_tree_fluid_example"),
    OpCase("gather_tree", {"Ids": RNG.randint(0, 20, (5, 3, 4)).astype("int32"),
                           "Parents": RNG.randint(0, 4, (5, 3, 4)).astype("int32")},
           ref=gather_tree_ref, id="gather_tree_int32"),
]


# ------------------------------------------------------------------ linear_chain_crf and co.

TAGS = 3


def _crf_seq(x, w, y):
    """Fluid's forward pass of one sequence in the exp domain: (the per-step L1-normalized
    forward vectors, -log-likelihood by brute force over every tag path)."""
    wx = np.exp(w)
    ex = np.exp(x - x.max(1, keepdims=True))
    alpha = np.zeros_like(x)
    a = wx[0] * ex[0]
    alpha[0] = a / a.sum()
    for k in range(1, len(x)):
        a = ex[k] * (alpha[k - 1] @ wx[2:])
        alpha[k] = a / a.sum()

    def score(p):
        return w[0, p[0]] + w[1, p[-1]] + sum(x[t, p[t]] for t in range(len(p))) + \
            sum(w[2 + p[t - 1], p[t]] for t in range(1, len(p)))
    log_z = np.log(sum(np.exp(score(p)) for p in itertools.product(range(TAGS),
                                                                   repeat=len(x))))
    return alpha, log_z - score(list(y))


CRF_OFFS = [0, 3, 4, 6]
CRF_X, CRF_W = rand(6, TAGS, seed=84), rand(TAGS + 2, TAGS, seed=85)
CRF_Y = np.array([[0], [2], [1], [1], [2], [0]], "int64")


def crf_lod_ref(Emission, Transition, Label):
    alpha, ll = np.zeros_like(Emission), []
    for a, b in zip(CRF_OFFS, CRF_OFFS[1:]):
        alpha[a:b], nll = _crf_seq(Emission[a:b], Transition, Label[a:b, 0])
        ll.append(nll)
    return {"LogLikelihood": np.array(ll).reshape(-1, 1), "Alpha": alpha,
            "EmissionExps": np.exp(Emission - Emission.max(1, keepdims=True)),
            "TransitionExps": np.exp(Transition)}


# padded: [N, S, D] with Length; the padding rows' exps are exp(0 - 0) = 1, alpha 0
CRF_LEN = np.array([3, 1, 2], "int64")
CRF_PX = np.zeros((3, 3, TAGS))
CRF_PY = np.zeros((3, 3, 1), "int64")
for _i, (_a, _b) in enumerate(zip(CRF_OFFS, CRF_OFFS[1:])):
    CRF_PX[_i, :_b - _a], CRF_PY[_i, :_b - _a] = CRF_X[_a:_b], CRF_Y[_a:_b]


def crf_padded_ref(Emission, Transition, Label, Length):
    alpha, ll = np.zeros_like(Emission), []
    for i, n in enumerate(Length.reshape(-1)):
        alpha[i, :n], nll = _crf_seq(Emission[i, :n], Transition, Label[i, :n, 0])
        ll.append(nll)
    return {"LogLikelihood": np.array(ll).reshape(-1, 1), "Alpha": alpha,
            "EmissionExps": np.exp(Emission - Emission.max(2, keepdims=True)),
            "TransitionExps": np.exp(Transition)}


def _viterbi(x, w):
    def score(p):
        return w[0, p[0]] + w[1, p[-1]] + sum(x[t, p[t]] for t in range(len(p))) + \
            sum(w[2 + p[t - 1], p[t]] for t in range(1, len(p)))
    return max(itertools.product(range(TAGS), repeat=len(x)), key=score)


def decode_padded_ref(Emission, Transition, Length, Label=None):
    path = np.zeros(Emission.shape[:2], "int64")
    for i, n in enumerate(Length.reshape(-1)):
        path[i, :n] = _viterbi(Emission[i, :n], Transition)
        if Label is not None:
            path[i, :n] = path[i, :n] == Label.reshape(path.shape)[i, :n]
    return {"ViterbiPath": path}


# IOB tags over 2 chunk types: 0 B-0, 1 I-0, 2 B-1, 3 I-1, 4 O
CHUNK_PRED = np.array([[0, 1, 4, 2, 9], [2, 3, 3, 9, 9], [4, 0, 9, 9, 9]], "int64")
CHUNK_LABEL = np.array([[0, 1, 4, 2, 9], [2, 3, 4, 9, 9], [4, 0, 9, 9, 9]], "int64")


def chunk_ref(Inference, Label, SeqLength):
    # sequence 0: chunks (0-1 type 0), (3 type 1) both right; sequence 1: (0-2 type 1) vs
    # (0-1 type 1), wrong; sequence 2: (1 type 0) right; the 9s are padding, never read
    infer, label, correct = 4, 4, 3
    p, r = correct / infer, correct / label
    return {"Precision": np.array([p], "float32"), "Recall": np.array([r], "float32"),
            "F1-Score": np.array([2 * p * r / (p + r)], "float32"),
            "NumInferChunks": np.array([infer]), "NumLabelChunks": np.array([label]),
            "NumCorrectChunks": np.array([correct])}


CRF_CASES = [
    OpCase("linear_chain_crf", {"Emission": CRF_X, "Transition": CRF_W, "Label": CRF_Y},
           ref=crf_lod_ref, lod={"Emission": [CRF_OFFS], "Label": [CRF_OFFS]},
           grad=["Emission", "Transition"], grad_outputs=["LogLikelihood"],
           id="linear_chain_crf_alpha_and_exps"),
    OpCase("linear_chain_crf", {"Emission": CRF_PX, "Transition": CRF_W, "Label": CRF_PY,
                                "Length": CRF_LEN},
           ref=crf_padded_ref, grad=["Emission", "Transition"], grad_outputs=["LogLikelihood"],
           id="linear_chain_crf_padded_length"),
    OpCase("crf_decoding", {"Emission": CRF_PX * 3, "Transition": CRF_W, "Length": CRF_LEN},
           ref=decode_padded_ref, id="crf_decoding_padded_length"),
    OpCase("crf_decoding", {"Emission": CRF_PX * 3, "Transition": CRF_W, "Length": CRF_LEN,
                            "Label": CRF_PY[..., 0]},
           ref=decode_padded_ref, id="crf_decoding_padded_length_label"),
    OpCase("chunk_eval", {"Inference": CHUNK_PRED, "Label": CHUNK_LABEL,
                          "SeqLength": np.array([5 - 1, 3, 2], "int64")},
           attrs={"num_chunk_types": 2, "chunk_scheme": "IOB"}, ref=chunk_ref,
           id="chunk_eval_padded_seq_length"),
]


# ------------------------------------------------------------------ sequence_topk_avg_pooling

TOPK_ROWS, TOPK_COLS, TOPK_CH = [2, 3], [3, 2], 2
TOPK_X = np.random.RandomState(86).permutation(
    sum(r * c for r, c in zip(TOPK_ROWS, TOPK_COLS)) * TOPK_CH).astype("float64") / 7.0
TOPK_X_OFFS = [0, 12, 24]


def topk_pool_ref(X, ROW, COLUMN, attrs):
    topks, ch = attrs["topks"], attrs["channel_num"]
    out, start = [], 0
    for rows, cols in zip(TOPK_ROWS, TOPK_COLS):
        seg = X[start:start + ch * rows * cols].reshape(ch, rows, cols)
        start += ch * rows * cols
        for r in range(rows):
            line = []
            for c in range(ch):
                best = sorted(seg[c, r], reverse=True)
                line += [sum(best[:k]) / k for k in topks]  # a short row still divides by k
            out.append(line)
    return {"Out": np.array(out)}


TOPK_CASES = [
    OpCase("sequence_topk_avg_pooling",
           {"X": TOPK_X, "ROW": rand(5, 4, seed=87), "COLUMN": rand(5, 4, seed=88)},
           attrs={"topks": [1, 2, 3], "channel_num": TOPK_CH}, ref=topk_pool_ref,
           lod={"X": [TOPK_X_OFFS], "ROW": [[0, 2, 5]], "COLUMN": [[0, 3, 5]]}, grad=["X"],
           grad_outputs=["Out"], id="sequence_topk_avg_pooling"),
]

# --------------------------------------- sequence_mask, ctc_align, im2sequence, sequence_conv


def im2seq_real_size_ref(X, Y):
    """Kernel 2 x 2, stride 1, out_stride 2: image i keeps the top-left
    (ceil(h_i / 2) - 1) x (ceil(w_i / 2) - 1) positions of the 3 x 4 grid."""
    rows, lod = [], [0]
    for i in range(X.shape[0]):
        oh = -(-int(Y[i, 0]) // 2) - 1
        ow = -(-int(Y[i, 1]) // 2) - 1
        for r in range(oh):
            for c in range(ow):
                rows.append(X[i, :, r:r + 2, c:c + 2].reshape(-1))
        lod.append(len(rows))
    return {"Out": np.array(rows)}


def seq_conv_ref(X, Filter):
    """contextLength 3 from Fluid's default contextStart 0: step t sees t, t+1, t+2."""
    out = np.zeros((X.shape[0], Filter.shape[1]))
    for a, b in ((0, 3), (3, 5)):
        for t in range(a, b):
            ctx = [X[t + j] if t + j < b else np.zeros(X.shape[1]) for j in range(3)]
            out[t] = np.concatenate(ctx) @ Filter
    return {"Out": out}


def row_conv_padded_ref(X, Filter):
    """Each of the B rows of [B, T, D] is one sequence: out[b, t] = sum_i X[b, t + i] W[i]."""
    out = np.zeros_like(X)
    for b in range(X.shape[0]):
        for t in range(X.shape[1]):
            for i in range(Filter.shape[0]):
                if t + i < X.shape[1]:
                    out[b, t] += X[b, t + i] * Filter[i]
    return {"Out": out}


def seq_conv_padding_ref(X, Filter, PaddingData):
    """contextStart -1, contextLength 4: positions before a sequence read PaddingData row
    up + p (up = 1), positions past its end row up + p - len."""
    out = np.zeros((X.shape[0], Filter.shape[1]))
    for a, b in ((0, 3), (3, 5)):
        n = b - a
        for t in range(n):
            ctx = []
            for j in range(4):
                p = t - 1 + j
                ctx.append(X[a + p] if 0 <= p < n else
                           PaddingData[1 + p] if p < 0 else PaddingData[1 + p - n])
            out[a + t] = np.concatenate(ctx) @ Filter
    return {"Out": out}


MISC_CASES = [
    OpCase("sequence_conv", {"X": rand(5, 2, seed=94), "Filter": rand(8, 3, seed=95),
                             "PaddingData": rand(3, 2, seed=96)},
           attrs={"contextLength": 4, "contextStart": -1, "paddingTrainable": True},
           lod={"X": [[0, 3, 5]]}, ref=seq_conv_padding_ref,
           grad=["X", "Filter", "PaddingData"], id="sequence_conv_trainable_padding"),
    OpCase("row_conv", {"X": rand(2, 4, 3, seed=92), "Filter": rand(2, 3, seed=93)},
           ref=row_conv_padded_ref, grad=["X", "Filter"], id="row_conv_padded_tensor"),
    OpCase("sequence_mask", {"X": np.array([1, 3, 0], "int64"),
                             "MaxLenTensor": np.array([4], "int32")},
           attrs={"maxlen": 2, "out_dtype": "int64"},
           ref=lambda X, MaxLenTensor: {"Y": (np.arange(4) < X[:, None]).astype("int64")},
           id="sequence_mask_maxlen_tensor"),
    OpCase("ctc_align", {"Input": np.array([[0, 2, 2, 0, 1, 1], [3, 3, 0, 0, 0, 0]], "int32"),
                         "InputLength": np.array([[6], [3]], "int32")},
           attrs={"blank": 0, "merge_repeated": True, "padding_value": -7},
           ref=lambda Input, InputLength: {
               "Output": np.array([[2, 1, -7, -7, -7, -7], [3, -7, -7, -7, -7, -7]], "int32"),
               "OutputLength": np.array([[2], [1]], "int32")}, id="ctc_align_padded"),
    OpCase("im2sequence", {"X": rand(2, 2, 4, 5, seed=89),
                           "Y": np.array([[8, 10], [5, 6]], "float64")},
           attrs={"kernels": [2, 2], "strides": [1, 1], "paddings": [0, 0, 0, 0],
                  "out_stride": [2, 2]}, ref=im2seq_real_size_ref, grad=["X"],
           id="im2sequence_real_image_size"),
    OpCase("sequence_conv", {"X": rand(5, 2, seed=90), "Filter": rand(6, 3, seed=91)},
           attrs={"contextLength": 3}, lod={"X": [[0, 3, 5]]}, ref=seq_conv_ref,
           grad=["X", "Filter"], id="sequence_conv_default_context_start"),
]


@pytest.mark.parametrize("case", CTC_CASES + GATHER_TREE_CASES + CRF_CASES + TOPK_CASES +
                         MISC_CASES, ids=str)
def test_op(case):
    check_op(case)


def test_gather_tree_layer():
    """layers.gather_tree(ids, parents) as Fluid 1.6 (also as fluid.layers.nn.gather_tree)."""
    import parafluid as fluid
    from parafluid.testing import run_layers

    assert fluid.layers.nn.gather_tree is fluid.layers.gather_tree

    def build():
        ids = fluid.layers.data(name="ids", shape=[3, 2, 2], dtype="int64",
                                append_batch_size=False)
        parents = fluid.layers.data(name="parents", shape=[3, 2, 2], dtype="int64",
                                    append_batch_size=False)
        return [fluid.layers.gather_tree(ids, parents)]

    got, = run_layers(build, {"ids": TREE_IDS, "parents": TREE_PARENTS})
    np.testing.assert_array_equal(got, TREE_OUT)


def test_crf_layers_padded_length():
    """linear_chain_crf / crf_decoding / chunk_eval with Fluid 1.6's padded form (length=,
    seq_length=) give what the LoD form gives, and the padded CRF trains."""
    import parafluid as fluid

    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data(name="x", shape=[3, 3, TAGS], dtype="float64",
                              append_batch_size=False)
        x.stop_gradient = False
        y = fluid.layers.data(name="y", shape=[3, 3, 1], dtype="int64",
                              append_batch_size=False)
        n = fluid.layers.data(name="n", shape=[3], dtype="int64", append_batch_size=False)
        attr = fluid.ParamAttr(name="crfw_padded",
                               initializer=fluid.initializer.NumpyArrayInitializer(CRF_W))
        cost = fluid.layers.linear_chain_crf(x, y, param_attr=attr, length=n)
        path = fluid.layers.crf_decoding(x, param_attr=attr, length=n)
        scores = fluid.layers.chunk_eval(path, fluid.layers.squeeze(y, [2]), "IOB", 1,
                                         seq_length=n)
        grad, = fluid.gradients([fluid.layers.reduce_sum(cost)], [x])
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    got_cost, got_path, n_infer, got_grad = exe.run(
        main, feed={"x": CRF_PX, "y": CRF_PY, "n": CRF_LEN},
        fetch_list=[cost, path, scores[3], grad], scope=scope)
    want = crf_padded_ref(CRF_PX, CRF_W, CRF_PY, CRF_LEN)["LogLikelihood"]
    np.testing.assert_allclose(got_cost, want, rtol=1e-6)
    np.testing.assert_array_equal(got_path, decode_padded_ref(CRF_PX, CRF_W, CRF_LEN)
                                  ["ViterbiPath"])
    assert int(np.asarray(n_infer)[0]) >= 1
    assert not np.asarray(got_grad)[1, 1:].any()  # padding rows get no gradient


def test_padded_and_runtime_length_layers():
    """ctc_greedy_decoder(input_length=), sequence_mask(maxlen=Variable),
    im2sequence(input_image_size=) and contrib.sequence_topk_avg_pooling as Fluid 1.6."""
    import parafluid as fluid
    from parafluid.testing import run_layers

    probs = np.zeros((2, 4, 3), "float32")
    probs[0, [0, 1, 2, 3], [1, 1, 0, 2]] = 1  # argmax 1 1 0 2 -> 1 2
    probs[1, [0, 1, 2, 3], [2, 0, 2, 1]] = 1  # length 2: argmax 2 0 -> 2

    def build():
        x = fluid.layers.data(name="p", shape=[2, 4, 3], append_batch_size=False)
        n = fluid.layers.data(name="n", shape=[2, 1], dtype="int64", append_batch_size=False)
        out, out_len = fluid.layers.ctc_greedy_decoder(x, blank=0, input_length=n,
                                                       padding_value=-1)
        lens = fluid.layers.data(name="lens", shape=[3], dtype="int64",
                                 append_batch_size=False)
        maxlen = fluid.layers.fill_constant([1], "int32", 5)
        mask = fluid.layers.sequence_mask(lens, maxlen=maxlen, dtype="float32")
        img = fluid.layers.data(name="img", shape=[2, 2, 4, 5], append_batch_size=False)
        size = fluid.layers.data(name="size", shape=[2, 2], append_batch_size=False)
        seq = fluid.layers.im2sequence(img, filter_size=2, input_image_size=size, out_stride=2)
        return [out, out_len, mask, seq]

    img = rand(2, 2, 4, 5, seed=89, dtype="float32")
    size = np.array([[8, 10], [5, 6]], "float32")
    out, out_len, mask, seq = run_layers(build, {
        "p": probs, "n": np.array([[4], [2]], "int64"), "lens": np.array([2, 0, 5], "int64"),
        "img": img, "size": size})
    np.testing.assert_array_equal(out, [[1, 2, -1, -1], [2, -1, -1, -1]])
    np.testing.assert_array_equal(out_len, [[2], [1]])
    np.testing.assert_array_equal(mask, np.arange(5) < np.array([[2], [0], [5]]))
    np.testing.assert_allclose(seq, im2seq_real_size_ref(img, size)["Out"], rtol=1e-6)

    def build_topk():
        x = fluid.layers.data(name="x", shape=[1], dtype="float64", lod_level=1)
        row = fluid.layers.data(name="row", shape=[4], dtype="float64", lod_level=1)
        col = fluid.layers.data(name="col", shape=[4], dtype="float64", lod_level=1)
        return [fluid.contrib.sequence_topk_avg_pooling(x, row, col, topks=[1, 2, 3],
                                                        channel_num=TOPK_CH)]

    def lod(a, lengths):
        return fluid.create_lod_tensor(a, [lengths], fluid.CPUPlace())

    pooled, = run_layers(build_topk, {
        "x": lod(TOPK_X.reshape(-1, 1), [12, 12]), "row": lod(rand(5, 4, seed=87), [2, 3]),
        "col": lod(rand(5, 4, seed=88), [3, 2])})
    np.testing.assert_allclose(pooled, topk_pool_ref(TOPK_X, None, None, {
        "topks": [1, 2, 3], "channel_num": TOPK_CH})["Out"], rtol=1e-12)
