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


@pytest.mark.parametrize("case", HSIG_CASES, ids=str)
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
