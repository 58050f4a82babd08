"""fluid.nets composites against numpy, fluid.metrics accumulators, and fluid.layers.auc."""

import numpy as np
import pytest

import parafluid as fluid


def _run(build, feed, steps=1, seed=1):
    main, startup = fluid.Program(), fluid.Program()
    startup.random_seed = seed
    with fluid.program_guard(main, startup):
        fetch = build()
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.Scope()
    exe.run(startup, scope=scope)
    outs = [exe.run(main, feed=feed, fetch_list=fetch, scope=scope) for _ in range(steps)]
    return main, scope, outs


def test_simple_img_conv_pool_is_conv_then_pool():
    def build():
        img = fluid.layers.data(name="img", shape=[1, 8, 8], dtype="float32")
        return [fluid.nets.simple_img_conv_pool(img, num_filters=3, filter_size=3,
                                                pool_size=2, pool_stride=2, act="relu")]

    main, _, ((out,),) = _run(build, {"img": np.ones((2, 1, 8, 8), "float32")})
    assert [op.type for op in main.global_block().ops] == \
        ["conv2d", "elementwise_add", "relu", "pool2d"]
    assert out.shape == (2, 3, 3, 3)


def test_img_conv_group_vgg_block():
    def build():
        img = fluid.layers.data(name="img", shape=[3, 8, 8], dtype="float32")
        return [fluid.nets.img_conv_group(img, conv_num_filter=[4, 4], pool_size=2,
                                          conv_act="relu", conv_with_batchnorm=[True, False],
                                          conv_batchnorm_drop_rate=[0.5, 0.0], pool_stride=2)]

    main, _, ((out,),) = _run(build, {"img": np.ones((2, 3, 8, 8), "float32")})
    types = [op.type for op in main.global_block().ops]
    assert types == ["conv2d", "elementwise_add", "batch_norm", "relu", "dropout",
                     "conv2d", "elementwise_add", "relu", "pool2d"]
    assert out.shape == (2, 4, 4, 4)
    with pytest.raises(ValueError, match="conv_padding has 3 entries for 2 convolutions"):
        _run(lambda: [fluid.nets.img_conv_group(
            fluid.layers.data(name="i", shape=[3, 8, 8]), [4, 4], 2, conv_padding=[1, 1, 1])],
            {})


def test_glu():
    x = np.random.RandomState(0).uniform(-2, 2, (3, 6)).astype("float32")

    def build():
        v = fluid.layers.data(name="x", shape=[6], dtype="float32")
        return [fluid.nets.glu(v, dim=1)]

    _, _, ((out,),) = _run(build, {"x": x})
    np.testing.assert_allclose(out, x[:, :3] / (1 + np.exp(-x[:, 3:])), rtol=1e-5)


def _attention_ref(q, k, v):
    s = q @ k.transpose(0, 2, 1) / np.sqrt(q.shape[-1])
    e = np.exp(s - s.max(-1, keepdims=True))
    return (e / e.sum(-1, keepdims=True)) @ v


@pytest.mark.parametrize("heads", [1, 2])
def test_scaled_dot_product_attention(heads):
    rng = np.random.RandomState(1)
    q, k, v = (rng.uniform(-1, 1, (2, n, 4)).astype("float32") for n in (3, 5, 5))

    def build():
        qv = fluid.layers.data(name="q", shape=[3, 4], dtype="float32")
        kv = fluid.layers.data(name="k", shape=[5, 4], dtype="float32")
        vv = fluid.layers.data(name="v", shape=[5, 4], dtype="float32")
        return [fluid.nets.scaled_dot_product_attention(qv, kv, vv, num_heads=heads)]

    main, scope, ((out,),) = _run(build, {"q": q, "k": k, "v": v})
    assert out.shape == (2, 3, 4)
    if heads == 1:
        np.testing.assert_allclose(out, _attention_ref(q, k, v), rtol=1e-5, atol=1e-6)
        return
    wq, wk, wv = (np.array(scope.find_var(p.name).get_tensor())
                  for p in main.all_parameters())
    pq, pk, pv = q @ wq, k @ wk, v @ wv
    want = np.concatenate([_attention_ref(pq[..., h * 2:h * 2 + 2], pk[..., h * 2:h * 2 + 2],
                                          pv[..., h * 2:h * 2 + 2]) for h in range(2)], -1)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)


def test_metrics_accumulate_and_reset():
    acc = fluid.metrics.Accuracy()
    acc.update(value=np.array([0.5], "float32"), weight=4)
    acc.update(value=1.0, weight=np.array([2]))
    assert acc.eval() == pytest.approx(4 / 6)
    acc.reset()
    with pytest.raises(ValueError, match="no data yet"):
        acc.eval()

    precision, recall = fluid.metrics.Precision(), fluid.metrics.Recall()
    comp = fluid.metrics.CompositeMetric()
    comp.add_metric(precision)
    comp.add_metric(recall)
    comp.update(np.array([[0.9], [0.8], [0.2], [0.6]]), np.array([[1], [0], [1], [1]]))
    assert comp.eval() == [pytest.approx(2 / 3), pytest.approx(2 / 3)]

    chunks = fluid.metrics.ChunkEvaluator()
    chunks.update(np.array([10]), np.array([8]), np.array([6]))
    p, r, f1 = chunks.eval()
    assert (p, r) == (0.6, 0.75) and f1 == pytest.approx(2 * 0.6 * 0.75 / 1.35)

    dist = fluid.metrics.EditDistance("ed")
    dist.update(np.array([[0.0], [2.0], [1.0]]), 3)
    assert dist.eval() == (1.0, pytest.approx(2 / 3)) and str(dist) == "ed"


def test_auc_layer_matches_the_auc_metric_and_slides():
    rng = np.random.RandomState(2)
    batches = []
    for _ in range(3):
        p = rng.uniform(0, 1, (16, 1)).astype("float32")
        y = (rng.uniform(0, 1, (16, 1)) < p).astype("int64")
        batches.append((np.concatenate([1 - p, p], 1), y))

    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        prob = fluid.layers.data(name="prob", shape=[2], dtype="float32")
        label = fluid.layers.data(name="label", shape=[1], dtype="int64")
        auc_var, batch_auc_var, stats = fluid.layers.auc(prob, label, num_thresholds=200)
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    metric = fluid.metrics.Auc("auc", num_thresholds=200)
    for prob_np, y in batches:
        got, batch_got = exe.run(main, feed={"prob": prob_np, "label": y},
                                 fetch_list=[auc_var, batch_auc_var], scope=scope)
        single = fluid.metrics.Auc(num_thresholds=200)
        single.update(prob_np, y)
        metric.update(prob_np, y)
        assert float(got) == pytest.approx(metric.eval())
        assert float(batch_got) == pytest.approx(single.eval())
    assert 0.5 < metric.eval() < 1.0
    assert np.array(scope.find_var(stats[2].name).get_tensor()).sum() + \
        np.array(scope.find_var(stats[3].name).get_tensor()).sum() == 48
