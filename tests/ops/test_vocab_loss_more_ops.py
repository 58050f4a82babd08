"""Op table: hierarchical_sigmoid beyond the default tree: custom trees (PathTable and
PathCode per sample, -1 padded), the SelectedRows weight gradient of ``is_sparse``, and
PreOut as Fluid keeps it (the softplus of the clipped node scores). References are numpy
loops written from Fluid's kernel."""

import numpy as np
import pytest

import parafluid as fluid
from parafluid.testing import OpCase, check_op, rand


def hsig_custom_ref(X, W, Label, PathTable, PathCode, attrs, Bias=None):
    n, length = PathTable.shape
    pre = np.zeros((n, length))
    out = np.zeros((n, 1))
    for i in range(n):
        for j in range(length):
            node = PathTable[i, j]
            if node < 0:
                break  # the path ends at its first negative entry
            score = W[node] @ X[i] + (Bias[node, 0] if Bias is not None else 0.0)
            pre[i, j] = np.clip(score, -40, 40)
            out[i] -= PathCode[i, j] * pre[i, j]
    soft = np.log1p(np.exp(pre))  # padding positions add softplus(0) = log 2, as Fluid
    return {"Out": out + soft.sum(1, keepdims=True), "PreOut": soft}


# 4 samples over a 5-node tree, paths of 3, 2, 1 and 3 nodes
PATH_TABLE = np.array([[0, 1, 3], [0, 2, -1], [4, -1, -1], [0, 1, 4]], "int64")
PATH_CODE = np.array([[1, 0, 1], [0, 1, 0], [1, 0, 0], [0, 0, 1]], "int64")
LABEL = np.array([[3], [1], [0], [2]], "int64")  # unused by a custom tree
CUSTOM = {"X": rand(4, 3, seed=91), "W": rand(5, 3, seed=92), "Label": LABEL,
          "PathTable": PATH_TABLE, "PathCode": PATH_CODE, "Bias": rand(5, 1, seed=93)}

HSIG_CASES = [
    OpCase("hierarchical_sigmoid", CUSTOM, attrs={"num_classes": 5}, ref=hsig_custom_ref,
           outputs=["Out", "PreOut"], grad=["X", "W", "Bias"], grad_outputs=["Out"],
           id="hsigmoid_custom_tree"),
    OpCase("hierarchical_sigmoid", {k: v for k, v in CUSTOM.items() if k != "Bias"},
           attrs={"num_classes": 5}, ref=hsig_custom_ref, outputs=["Out", "PreOut"],
           grad=["X", "W"], grad_outputs=["Out"], id="hsigmoid_custom_tree_no_bias"),
]


# ----------------------------------------------------------------------------- nce

NCE_C = 7
NCE_INPUTS = {"Input": rand(3, 4, seed=95), "Label": np.array([[2], [0], [6]], "int64"),
              "Weight": rand(NCE_C, 4, seed=96), "Bias": rand(NCE_C, 1, seed=97)}
NEG = [1, 3, 5]
DIST = np.array([0.05, 0.1, 0.2, 0.05, 0.3, 0.1, 0.2])


def _sig(v):
    return 1 / (1 + np.exp(-v))


def nce_ref(Input, Label, Weight, Bias, attrs, **custom):
    """Fluid's cost with fixed negatives: q = num_neg * P(class) under the sampler."""
    sid, k = attrs["sampler"], attrs["num_neg_samples"]

    def prob(c):
        if sid == 0:
            return 1 / NCE_C
        if sid == 1:
            return np.log((c + 2) / (c + 1)) / np.log(NCE_C)  # log of C, not C + 1
        return custom["CustomDistProbs"][c]
    labels = np.concatenate([Label, np.tile(attrs["custom_neg_classes"], (len(Label), 1))], 1)
    o = _sig(np.einsum("nkd,nd->nk", Weight[labels], Input) + Bias[labels, 0])
    q = np.vectorize(prob)(labels) * k
    cost = -np.log(o[:, :1] / (o[:, :1] + q[:, :1])).sum(1) - \
        np.log(q[:, 1:] / (o[:, 1:] + q[:, 1:])).sum(1)
    return {"Cost": cost.reshape(-1, 1), "SampleLogits": o, "SampleLabels": labels}


def _nce_case(sampler, **extra):
    inputs = dict(NCE_INPUTS)
    if sampler == 2:
        inputs.update({"CustomDistProbs": DIST.astype("float32"),
                       "CustomDistAlias": np.full(NCE_C, -1, "int32"),
                       "CustomDistAliasProbs": np.ones(NCE_C, "float32")})
    return OpCase("nce", inputs, attrs={"num_total_classes": NCE_C, "num_neg_samples": 3,
                                        "sampler": sampler, "custom_neg_classes": NEG, **extra},
                  ref=nce_ref, grad=["Input", "Weight", "Bias"], grad_outputs=["Cost"],
                  id=f"nce_sampler_{sampler}_fixed_negatives")


NCE_CASES = [_nce_case(0), _nce_case(1), _nce_case(2)]


@pytest.mark.parametrize("case", HSIG_CASES + NCE_CASES, ids=str)
def test_op(case):
    check_op(case)


def _train(is_sparse):
    """Two SGD steps of hsigmoid over a custom tree; the weight after them."""
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data(name="x", shape=[3], dtype="float64")
        y = fluid.layers.data(name="y", shape=[1], dtype="int64")
        table = fluid.layers.data(name="table", shape=[3], dtype="int64")
        code = fluid.layers.data(name="code", shape=[3], dtype="int64")
        cost = fluid.layers.hsigmoid(
            x, y, num_classes=6, path_table=table, path_code=code, is_custom=True,
            is_sparse=is_sparse,
            param_attr=fluid.ParamAttr(name="hs_w", initializer=fluid.initializer.
                                       NumpyArrayInitializer(rand(6, 3, seed=94))),
            bias_attr=False)
        fluid.optimizer.SGD(learning_rate=0.5).minimize(fluid.layers.mean(cost))
    ops = [op.type for op in main.global_block().ops]
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    feed = {"x": CUSTOM["X"], "y": LABEL, "table": PATH_TABLE, "code": PATH_CODE}
    for _ in range(2):
        exe.run(main, feed=feed, scope=scope)
    return np.array(scope.find_var("hs_w").get_tensor()), ops


def test_hsigmoid_layer_custom_tree_sparse_matches_dense():
    dense, ops = _train(False)
    sparse, _ = _train(True)
    assert "hierarchical_sigmoid" in ops
    np.testing.assert_allclose(sparse, dense, rtol=1e-12, atol=1e-12)
    # node 5 is on no path: SGD leaves its row alone
    np.testing.assert_array_equal(dense[5], rand(6, 3, seed=94)[5])
    assert not np.allclose(dense[:5], rand(6, 3, seed=94)[:5])


def test_hsigmoid_layer_rejects_half_a_custom_tree():
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        x = fluid.layers.data(name="x", shape=[3], dtype="float32")
        y = fluid.layers.data(name="y", shape=[1], dtype="int64")
        with pytest.raises(ValueError, match="path_table"):
            fluid.layers.hsigmoid(x, y, num_classes=6, is_custom=True)


def _train_nce(is_sparse, sampler="uniform"):
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 3
    with fluid.program_guard(main, startup):
        x = fluid.layers.data(name="x", shape=[4], dtype="float64")
        y = fluid.layers.data(name="y", shape=[1], dtype="int64")
        cost = fluid.layers.nce(
            x, y, num_total_classes=NCE_C, num_neg_samples=3, sampler=sampler, seed=11,
            custom_dist=list(DIST) if sampler == "custom_dist" else None,
            is_sparse=is_sparse, bias_attr=False,
            param_attr=fluid.ParamAttr(name="nce_w", initializer=fluid.initializer.
                                       NumpyArrayInitializer(NCE_INPUTS["Weight"])))
        fluid.optimizer.SGD(learning_rate=0.5).minimize(fluid.layers.mean(cost))
    op = next(op for op in main.global_block().ops if op.type == "nce")
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    labels = None
    for _ in range(2):
        labels, = exe.run(main, feed={"x": NCE_INPUTS["Input"], "y": NCE_INPUTS["Label"]},
                          fetch_list=[op.output("SampleLabels")[0]], scope=scope)
    return np.array(scope.find_var("nce_w").get_tensor()), op, labels


def test_nce_layer_sampler_ids_sparse_and_custom_dist():
    dense, op, _ = _train_nce(False)
    sparse, _, _ = _train_nce(True)
    assert op.attr("sampler") == 0  # Fluid's int id for "uniform"
    np.testing.assert_allclose(sparse, dense, rtol=1e-12, atol=1e-12)
    _, op, labels = _train_nce(False, "custom_dist")
    assert op.attr("sampler") == 2 and "CustomDistAlias" in op.input_names
    # class 0 and 3 are rare, 4 common: the alias tables sample by the distribution
    assert labels.shape == (3, 4) and labels.min() >= 0 and labels.max() < NCE_C


def test_nce_custom_dist_alias_sampling_follows_the_distribution():
    from parafluid.layers.loss import _alias_tables
    from parafluid.testing import run_op

    alias, keep = _alias_tables(DIST)
    case = OpCase("nce", {**NCE_INPUTS, "CustomDistProbs": DIST.astype("float32"),
                          "CustomDistAlias": alias, "CustomDistAliasProbs": keep},
                  attrs={"num_total_classes": NCE_C, "num_neg_samples": 20000, "sampler": 2,
                         "seed": 5})
    labels = run_op(case)["SampleLabels"][:, 1:]
    freq = np.bincount(labels.reshape(-1), minlength=NCE_C) / labels.size
    np.testing.assert_allclose(freq, DIST, atol=0.01)
