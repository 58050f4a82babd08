"""Op table: Fluid's fused sequence ops over LoD inputs (fusion_seqpool_concat,
fusion_seqpool_cvm_concat, fusion_seqexpand_concat_fc, fusion_seqconv_eltadd_relu,
fused_embedding_seq_pool) against numpy references, and each against its chain of unfused
ops run as a parafluid program. fused_embedding_seq_pool's W gradient (dense and
SelectedRows) is checked by finite differences; the others have none, as in Fluid."""

import numpy as np
import pytest

from parafluid.ops import get_op_def
from parafluid.testing import OpCase, check_op, rand, run_op, run_op_chain

OFFS = [0, 2, 5, 6]  # three sequences of 2, 3 and 1 steps
OFFS2 = [0, 1, 3, 6]


def pool(x, offs, kind):
    out = []
    for s, e in zip(offs, offs[1:]):
        seg = x[s:e]
        total = seg.sum(0)
        n = max(e - s, 1)
        out.append(total / n if kind == "AVERAGE" else total / np.sqrt(n)
                   if kind == "SQRT" else total)
    return np.stack(out)


def cvm(p):
    p = p.copy()
    c0 = np.log(p[:, 0] + 1)
    p[:, 1] = np.log(p[:, 1] + 1) - c0
    p[:, 0] = c0
    return p


def pool_concat_ref(offs_list, use_cvm):
    def ref(X, attrs, CVM=None):
        pooled = [pool(x, offs, attrs["pooltype"]) for x, offs in zip(X, offs_list)]
        return {"Out": np.concatenate([cvm(p) if use_cvm else p for p in pooled], 1)}
    return ref


def seqexpand_ref(X, FCWeight, attrs, FCBias=None):
    lengths = np.diff(OFFS)
    parts = [X[0]] + [np.repeat(x, lengths, 0) for x in X[1:]]
    out = np.concatenate(parts, 1) @ FCWeight
    if FCBias is not None:
        out = out + FCBias.reshape(-1)
    act = attrs["fc_activation"]
    out = {"relu": lambda v: np.maximum(v, 0), "tanh": np.tanh,
           "sigmoid": lambda v: 1 / (1 + np.exp(-v)), "identity": lambda v: v}[act](out)
    m0 = X[0].shape[1]
    fc_out = sum(x @ FCWeight[m0 + sum(y.shape[1] for y in X[1:i]):][:x.shape[1]]
                 for i, x in enumerate(X[1:], 1))
    return {"Out": out, "FCOut": fc_out}


def seqconv_ref(X, Filter, Bias, attrs):
    length, start = attrs["contextLength"], attrs["contextStart"]
    m = X.shape[1]
    col = np.zeros((X.shape[0], length * m))
    for s, e in zip(OFFS, OFFS[1:]):
        for t in range(s, e):
            for j in range(length):
                src = t + start + j
                if s <= src < e:
                    col[t, j * m:(j + 1) * m] = X[src]
    return {"Out": np.maximum(col @ Filter + Bias.reshape(-1), 0), "ColMat": col}


def emb_pool_ref(W, Ids, attrs):
    rows = []
    for r in Ids:
        rows.append(np.concatenate([np.zeros(W.shape[1]) if i == attrs["padding_idx"]
                                    else W[i] for i in r]))
    return {"Out": pool(np.stack(rows), OFFS, "SUM")}


POOL_X = [rand(6, 3, seed=1, low=0.1), rand(6, 3, seed=2, low=0.1)]
CVM_X = [rand(6, 3, seed=3, low=0.1), rand(6, 3, seed=4, low=0.1)]
SE_X = [rand(6, 2, seed=5), rand(3, 3, seed=6), rand(3, 1, seed=7)]
SE_W = rand(6, 4, seed=8)
SC_X = rand(6, 2, seed=9)
IDS = np.array([[1], [3], [0], [3], [4], [2]], "int64")
IDS2 = np.array([[1, 2], [3, 0], [0, 0], [3, 4], [4, 1], [2, 2]], "int64")

CASES = [
    OpCase("fusion_seqpool_concat", {"X": POOL_X}, attrs={"pooltype": kind},
           ref=pool_concat_ref([OFFS, OFFS2], False), lod={"X": [[OFFS], [OFFS2]]},
           id=f"seqpool_concat-{kind}") for kind in ("SUM", "AVERAGE", "SQRT")
] + [
    OpCase("fusion_seqpool_cvm_concat", {"X": CVM_X, "CVM": rand(3, 2, seed=10, low=0)},
           attrs={"pooltype": kind}, ref=pool_concat_ref([OFFS, OFFS], True),
           lod={"X": [[OFFS], [OFFS]]}, id=f"seqpool_cvm_concat-{kind}")
    for kind in ("SUM", "AVERAGE")
] + [
    OpCase("fusion_seqexpand_concat_fc", {"X": SE_X, "FCWeight": SE_W,
                                          "FCBias": rand(1, 4, seed=11)},
           attrs={"fc_activation": act}, ref=seqexpand_ref,
           lod={"X": [[OFFS], [[0, 1, 2, 3]], [[0, 1, 2, 3]]]}, id=f"seqexpand_concat_fc-{act}")
    for act in ("identity", "relu", "tanh")
] + [
    OpCase("fusion_seqexpand_concat_fc", {"X": SE_X[:2], "FCWeight": SE_W[:5]},
           attrs={"fc_activation": "sigmoid"}, ref=seqexpand_ref,
           lod={"X": [[OFFS], [[0, 1, 2, 3]]]}, id="seqexpand_concat_fc-no-bias-sigmoid"),
] + [
    OpCase("fusion_seqconv_eltadd_relu", {"X": SC_X, "Filter": rand(3 * 2, 4, seed=12),
                                          "Bias": rand(1, 4, seed=13)},
           attrs={"contextLength": 3, "contextStart": start}, ref=seqconv_ref,
           lod={"X": [OFFS]}, id=f"seqconv_eltadd_relu-start{start}")
    for start in (0, -1, -2)
] + [
    OpCase("fused_embedding_seq_pool", {"W": rand(5, 3, seed=14), "Ids": ids},
           attrs={"padding_idx": pad, "is_sparse": sparse}, ref=emb_pool_ref,
           lod={"Ids": [OFFS]}, grad=["W"], id=f"emb_seq_pool-{tag}")
    for ids, pad, sparse, tag in ((IDS, -1, False, "dense"), (IDS, 3, False, "padding3"),
                                  (IDS2, -1, True, "two-ids-a-row-sparse"),
                                  (IDS2, 0, True, "two-ids-padding0-sparse"))
]


def case_named(name):
    return next(c for c in CASES if c.id == name)


@pytest.mark.parametrize("case", CASES, ids=str)
def test_op(case):
    check_op(case)


@pytest.mark.parametrize("op", ["fusion_seqpool_concat", "fusion_seqpool_cvm_concat",
                                "fusion_seqexpand_concat_fc", "fusion_seqconv_eltadd_relu"])
def test_no_gradient_as_in_fluid(op):
    assert get_op_def(op).grad is None


def test_pooled_output_has_one_row_per_sequence_lod():
    ops = [("fusion_seqpool_concat", {"X": ["x0", "x1"]}, {"Out": ["out"]}, {})]
    feed = {"x0": (POOL_X[0], [OFFS]), "x1": (POOL_X[1], [OFFS2])}
    out, = run_op_chain(ops, feed, ["out"], return_numpy=False)
    assert out.lod() == [[0, 1, 2, 3]]


def test_seqpool_concat_equals_its_unfused_ops():
    ops = [("sequence_pool", {"X": [f"x{i}"]}, {"Out": [f"p{i}"], "MaxIndex": [f"i{i}"]},
            {"pooltype": "SQRT"}) for i in range(2)]
    ops.append(("concat", {"X": ["p0", "p1"]}, {"Out": ["out"]}, {"axis": 1}))
    want, = run_op_chain(ops, {"x0": (POOL_X[0], [OFFS]), "x1": (POOL_X[1], [OFFS2])}, ["out"])
    np.testing.assert_array_equal(run_op(case_named("seqpool_concat-SQRT"))["Out"], want)


def test_seqpool_cvm_concat_equals_its_unfused_ops():
    case = case_named("seqpool_cvm_concat-SUM")
    ops = []
    for i in range(2):
        ops += [("sequence_pool", {"X": [f"x{i}"]}, {"Out": [f"p{i}"], "MaxIndex": [f"i{i}"]},
                 {"pooltype": "SUM"}),
                ("cvm", {"X": [f"p{i}"], "CVM": ["cvm"]}, {"Y": [f"c{i}"]}, {"use_cvm": True})]
    ops.append(("concat", {"X": ["c0", "c1"]}, {"Out": ["out"]}, {"axis": 1}))
    feed = {"x0": (CVM_X[0], [OFFS]), "x1": (CVM_X[1], [OFFS]), "cvm": case.inputs["CVM"]}
    want, = run_op_chain(ops, feed, ["out"])
    np.testing.assert_array_equal(run_op(case)["Out"], want)


def test_seqexpand_concat_fc_equals_its_unfused_ops():
    case = case_named("seqexpand_concat_fc-relu")
    ops = [("sequence_expand", {"X": ["x1"], "Y": ["x0"]}, {"Out": ["e1"]}, {"ref_level": 0}),
           ("sequence_expand", {"X": ["x2"], "Y": ["x0"]}, {"Out": ["e2"]}, {"ref_level": 0}),
           ("concat", {"X": ["x0", "e1", "e2"]}, {"Out": ["cat"]}, {"axis": 1}),
           ("mul", {"X": ["cat"], "Y": ["w"]}, {"Out": ["m"]}, {}),
           ("elementwise_add", {"X": ["m"], "Y": ["b"]}, {"Out": ["a"]}, {}),
           ("relu", {"X": ["a"]}, {"Out": ["out"]}, {})]
    one = [[0, 1, 2, 3]]
    feed = {"x0": (SE_X[0], [OFFS]), "x1": (SE_X[1], one), "x2": (SE_X[2], one), "w": SE_W,
            "b": case.inputs["FCBias"].reshape(-1)}
    want, = run_op_chain(ops, feed, ["out"])
    np.testing.assert_allclose(run_op(case)["Out"], want, rtol=1e-12, atol=1e-12)


def test_seqconv_eltadd_relu_equals_its_unfused_ops():
    case = case_named("seqconv_eltadd_relu-start-1")
    ops = [("sequence_conv", {"X": ["x"], "Filter": ["f"]}, {"Out": ["c"]},
            {"contextLength": 3, "contextStart": -1}),
           ("elementwise_add", {"X": ["c"], "Y": ["b"]}, {"Out": ["a"]}, {}),
           ("relu", {"X": ["a"]}, {"Out": ["out"]}, {})]
    feed = {"x": (SC_X, [OFFS]), "f": case.inputs["Filter"],
            "b": case.inputs["Bias"].reshape(-1)}
    want, = run_op_chain(ops, feed, ["out"])
    np.testing.assert_array_equal(run_op(case)["Out"], want)


def test_embedding_seq_pool_equals_its_unfused_ops():
    case = case_named("emb_seq_pool-padding3")
    ops = [("lookup_table", {"W": ["w"], "Ids": ["ids"]}, {"Out": ["e"]}, {"padding_idx": 3}),
           ("sequence_pool", {"X": ["e"]}, {"Out": ["out"], "MaxIndex": ["i"]},
            {"pooltype": "SUM"})]
    want, = run_op_chain(ops, {"w": case.inputs["W"], "ids": (IDS, [OFFS])}, ["out"])
    np.testing.assert_array_equal(run_op(case)["Out"], want)


def test_seqconv_eltadd_relu_refuses_a_positive_context_start():
    case = OpCase("fusion_seqconv_eltadd_relu", {"X": SC_X, "Filter": rand(6, 4),
                                                 "Bias": rand(1, 4)},
                  attrs={"contextLength": 3, "contextStart": 1}, lod={"X": [OFFS]})
    with pytest.raises(ValueError, match="contextStart must be in"):
        run_op(case)
