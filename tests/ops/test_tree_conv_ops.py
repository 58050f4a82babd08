"""Op table: tree_conv (TBCNN windows over each sample's tree) against a recursive numpy
reference, with gradients vs finite differences; its layer."""

import numpy as np
import pytest

import parafluid as fluid
from parafluid.testing import OpCase, check_op, rand

# sample 0: 1 -> (2, 3), 2 -> (4, 5, 6), 3 -> 7; then padding pairs.
# sample 1: a chain 1 -> 2 -> 3 -> 4 with node 5 under 1; rows past node 5 are padding
EDGES = np.array([[[1, 2], [1, 3], [2, 4], [2, 5], [2, 6], [3, 7], [0, 0], [0, 0]],
                  [[1, 2], [2, 3], [3, 4], [1, 5], [0, 0], [0, 0], [0, 0], [0, 0]]], "int32")


def _window(feats, kids, depth_max, node, j, sibs, depth, acc):
    """Add node's weighted features to ``acc`` ``[F, 3]``, then its children's."""
    eta_t = (depth_max - depth) / depth_max
    eta_l = (1 - eta_t) * (0.5 if sibs == 1 else (j - 1) / (sibs - 1))
    eta_r = (1 - eta_t) * (1 - eta_l)
    acc += np.outer(feats[node - 1], [eta_l, eta_r, eta_t])
    if depth + 1 < depth_max:
        for i, c in enumerate(kids.get(node, [])):
            _window(feats, kids, depth_max, c, i + 1, len(kids[node]), depth + 1, acc)


def tree_conv_ref(NodesVector, EdgeSet, Filter, attrs):
    b, n, f = NodesVector.shape
    out = np.zeros((b, n, Filter.shape[2], Filter.shape[3]))
    for s in range(b):
        kids = {}
        pairs = [tuple(e) for e in EdgeSet[s].tolist()]
        pairs = pairs[:next((i for i, e in enumerate(pairs) if 0 in e), len(pairs))]
        for u, v in pairs:
            kids.setdefault(u, []).append(v)
        for root in range(1, len(pairs) + 2):
            patch = np.zeros((f, 3))
            _window(NodesVector[s], kids, attrs["max_depth"], root, 1, 1, 0, patch)
            out[s, root - 1] = np.einsum("ik,ikof->of", patch, Filter)
    return {"Out": out}


def case(max_depth, id):
    return OpCase("tree_conv", {"NodesVector": rand(2, 8, 4, seed=1), "EdgeSet": EDGES,
                                "Filter": rand(4, 3, 5, 2, seed=2)},
                  attrs={"max_depth": max_depth}, ref=tree_conv_ref,
                  grad=["NodesVector", "Filter"], id=id)


CASES = [case(2, "tree_conv"), case(3, "tree_conv_depth3"), case(1, "tree_conv_depth1")]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_op(case):
    check_op(case)


def test_tree_conv_rows_past_the_tree_are_zero_before_the_bias():
    out = tree_conv_ref(rand(2, 8, 4, seed=1), EDGES, rand(4, 3, 5, 2, seed=2),
                        {"max_depth": 2})["Out"]
    assert np.all(out[1, 5:] == 0) and np.all(out[0, 7:] == 0) and np.any(out[1, 4] != 0)


def test_tree_conv_layer_bias_activation_and_training():
    rng = np.random.RandomState(0)
    nodes = rng.randn(2, 8, 4).astype("float32")
    target = rng.randn(2, 8, 6, 1).astype("float32") * 0.5
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 1
    with fluid.program_guard(main, startup):
        x = fluid.layers.data(name="nodes", shape=[8, 4], dtype="float32")
        e = fluid.layers.data(name="edges", shape=[8, 2], dtype="int32")
        y = fluid.layers.data(name="y", shape=[8, 6, 1], dtype="float32")
        out = fluid.layers.tree_conv(x, e, output_size=6, num_filters=1, max_depth=2)
        assert list(out.shape) == [-1, 8, 6, 1]
        loss = fluid.layers.mean(fluid.layers.square_error_cost(out, y))
        fluid.optimizer.Adam(learning_rate=0.05).minimize(loss)
    shapes = sorted(tuple(p.shape) for p in main.all_parameters())
    assert shapes == [(4, 3, 6, 1), (8, 6, 1)]
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    feed = {"nodes": nodes, "edges": EDGES, "y": target}
    losses = [float(exe.run(main, feed=feed, fetch_list=[loss])[0]) for _ in range(40)]
    assert losses[-1] < 0.6 * losses[0], losses


def test_tree_conv_rejects_a_node_outside_the_rows():
    bad = EDGES.copy()
    bad[0, 0] = [1, 9]
    with pytest.raises(Exception, match=r"edge \(1, 9\) names a node outside 1\.\.8"):
        check_op(OpCase("tree_conv", {"NodesVector": rand(2, 8, 4), "EdgeSet": bad,
                                      "Filter": rand(4, 3, 5, 2)}, ref=tree_conv_ref))
