"""Op table: linear_chain_crf and crf_decoding against sums and maxima over every tag path,
with gradients vs finite differences; chunk_eval's chunk rules and counts; a CRF tagger that
learns."""

import numpy as np
import pytest

import parafluid as fluid
from parafluid.testing import OpCase, check_op, rand

TAGS = 3
CRF_OFFS = [0, 3, 4, 6]


def _paths(n):
    if n == 0:
        yield ()
        return
    for rest in _paths(n - 1):
        for t in range(TAGS):
            yield (*rest, t)


def _score(x, w, y):
    s = w[0, y[0]] + w[1, y[-1]] + sum(x[t, y[t]] for t in range(len(y)))
    return s + sum(w[2 + y[t - 1], y[t]] for t in range(1, len(y)))


def crf_ref(Emission, Transition, Label):
    """Brute force: log Z over every tag sequence, minus the gold score."""
    out = []
    for a, b in zip(CRF_OFFS, CRF_OFFS[1:]):
        x, y = Emission[a:b], Label[a:b, 0]
        log_z = np.log(sum(np.exp(_score(x, Transition, p)) for p in _paths(b - a)))
        out.append(log_z - _score(x, Transition, y))
    return {"LogLikelihood": np.array(out).reshape(-1, 1)}


def decode_ref(Emission, Transition):
    path = []
    for a, b in zip(CRF_OFFS, CRF_OFFS[1:]):
        path += max(_paths(b - a), key=lambda p: _score(Emission[a:b], Transition, p))
    return {"ViterbiPath": np.array(path).reshape(-1, 1)}


CRF_X, CRF_W = rand(6, TAGS, seed=61), rand(TAGS + 2, TAGS, seed=62)
CRF_Y = np.array([[0], [2], [1], [1], [2], [0]], "int64")
CRF_CASES = [
    OpCase("linear_chain_crf", {"Emission": CRF_X, "Transition": CRF_W, "Label": CRF_Y},
           ref=crf_ref, lod={"Emission": [CRF_OFFS], "Label": [CRF_OFFS]},
           grad=["Emission", "Transition"], grad_outputs=["LogLikelihood"]),
    OpCase("crf_decoding", {"Emission": CRF_X * 3, "Transition": CRF_W},
           ref=decode_ref, lod={"Emission": [CRF_OFFS]}),
]


@pytest.mark.parametrize("case", CRF_CASES, ids=str)
def test_crf_op(case):
    check_op(case)


def test_crf_tagger_learns_and_decodes():
    """label_semantic_roles' tail: fc emissions, linear_chain_crf, crf_decoding (shared
    transition by ParamAttr name)."""
    rng = np.random.RandomState(3)
    lengths = [4, 2, 5, 3]
    words = rng.randint(0, 6, (sum(lengths), 1)).astype("int64")
    tags = (words % 3).astype("int64")  # the tag is a function of the word
    main, startup = fluid.Program(), fluid.Program()
    startup.random_seed = 8
    with fluid.program_guard(main, startup):
        word = fluid.data(name="word", shape=[None, 1], dtype="int64", lod_level=1)
        target = fluid.data(name="target", shape=[None, 1], dtype="int64", lod_level=1)
        emb = fluid.layers.embedding(word, size=[6, 8])
        feature_out = fluid.layers.fc(emb, size=3)
        crf_cost = fluid.layers.linear_chain_crf(
            input=feature_out, label=target, param_attr=fluid.ParamAttr(name="crfw"))
        avg_cost = fluid.layers.mean(crf_cost)
        fluid.optimizer.Adam(learning_rate=0.1).minimize(avg_cost)
        decoded = fluid.layers.crf_decoding(input=feature_out,
                                            param_attr=fluid.ParamAttr(name="crfw"))
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    feed = {"word": fluid.create_lod_tensor(words, [lengths], None),
            "target": fluid.create_lod_tensor(tags, [lengths], None)}
    for _ in range(30):
        cost, path = exe.run(main, feed=feed, fetch_list=[avg_cost, decoded], scope=scope)
    assert float(cost) < 0.5 and (path == tags).mean() == 1.0


@pytest.mark.parametrize("scheme,tags,want", [
    # IOB with 2 chunk types: B-0=0 I-0=1 B-1=2 I-1=3 O=4
    ("IOB", [0, 1, 4, 2, 3, 3, 0, 2], {(0, 1, 0), (3, 5, 1), (6, 6, 0), (7, 7, 1)}),
    ("IOB", [1, 1, 4, 3], {(0, 1, 0), (3, 3, 1)}),  # I without B starts a chunk
    # IOE: I-0=0 E-0=1 I-1=2 E-1=3 O=4
    ("IOE", [0, 1, 0, 0, 1, 4, 3], {(0, 1, 0), (2, 4, 0), (6, 6, 1)}),
    # IOBES: B=0 I=1 E=2 S=3 for type 0, O=8 with 2 types
    ("IOBES", [0, 1, 2, 3, 8, 7, 4, 6], {(0, 2, 0), (3, 3, 0), (5, 5, 1), (6, 7, 1)}),
    ("plain", [0, 0, 1, 2, 2, 0], {(0, 1, 0), (2, 2, 1), (5, 5, 0)}),  # 2 types, O=2
])
def test_chunk_rules(scheme, tags, want):
    from parafluid.ops.crf import chunks

    assert chunks(tags, 2, scheme) == want


def test_chunk_eval_counts_and_metric():
    pred = np.array([[0], [1], [4], [2], [3], [0], [1], [4]], "int64")
    gold = np.array([[0], [1], [4], [2], [4], [0], [1], [1]], "int64")
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        p = fluid.data(name="p", shape=[None, 1], dtype="int64", lod_level=1)
        g = fluid.data(name="g", shape=[None, 1], dtype="int64", lod_level=1)
        outs = fluid.layers.chunk_eval(input=p, label=g, chunk_scheme="IOB",
                                       num_chunk_types=2)
    exe = fluid.Executor(fluid.CPUPlace())
    feed = {"p": fluid.create_lod_tensor(pred, [[5, 3]], None),
            "g": fluid.create_lod_tensor(gold, [[5, 3]], None)}
    precision, recall, f1, n_infer, n_label, n_correct = exe.run(
        main, feed=feed, fetch_list=list(outs), scope=fluid.Scope())
    # seq 1: pred {(0,1,0), (3,4,1)}, gold {(0,1,0), (3,3,1)}; seq 2: pred {(0,1,0)},
    # gold {(0,2,0)}
    assert (int(n_infer), int(n_label), int(n_correct)) == (3, 3, 1)
    np.testing.assert_allclose([float(precision), float(recall), float(f1)], [1 / 3] * 3,
                               rtol=1e-6)
    metric = fluid.metrics.ChunkEvaluator()
    metric.update(n_infer, n_label, n_correct)
    assert metric.eval() == pytest.approx((1 / 3, 1 / 3, 1 / 3))
