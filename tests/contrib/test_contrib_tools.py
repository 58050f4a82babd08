"""fluid.contrib's optimizer extension, layers and program statistics, against numpy and
the unfused ops."""

import numpy as np
import pytest

import parafluid as fluid

L = fluid.layers
RNG = np.random.RandomState(3)
XS = RNG.normal(0, 1, (8, 3)).astype("float32")
YS = (XS @ np.array([[1.0], [-2.0], [0.5]]) + 0.3).astype("float32")


def _regression(optimizer_factory, steps=3):
    """Train fc(x, 1) with a bias on squared error; return the fetched parameter values
    before the first step and after each step, and the parameter names."""
    main, start = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, start):
        x = L.data("x", shape=[3], dtype="float32")
        y = L.data("y", shape=[1], dtype="float32")
        pred = L.fc(x, 1, param_attr=fluid.ParamAttr(name="w"),
                    bias_attr=fluid.ParamAttr(name="b"))
        loss = L.mean(L.square_error_cost(pred, y))
        optimizer_factory().minimize(loss)
    scope = fluid.Scope()
    exe = fluid.Executor(fluid.CPUPlace())
    with fluid.scope_guard(scope):
        exe.run(start)
        w0, b0 = (np.array(scope.find_var(n).get_tensor()) for n in ("w", "b"))
        history = [(w0, b0)]
        for _ in range(steps):
            exe.run(main, feed={"x": XS, "y": YS})
            history.append(tuple(np.array(scope.find_var(n).get_tensor()) for n in ("w", "b")))
    return history, main


def _grads(w, b):
    pred = XS @ w + b
    d = 2 * (pred - YS) / len(XS)
    return XS.T @ d, d.sum(0)


def test_decoupled_weight_decay_on_sgd_and_adam_against_numpy():
    wd, lr = 0.1, 0.05
    SGDW = fluid.contrib.extend_with_decoupled_weight_decay(fluid.optimizer.SGD)
    for coeff in (wd, "variable"):  # a float, or a Variable holding it
        history, main = _regression(lambda coeff=coeff: SGDW(
            weight_decay=wd if coeff == wd else L.fill_constant([1], "float32", wd),
            learning_rate=lr))
        decays = [op.input("X") for op in main.global_block().ops
                  if op.type == "elementwise_sub" and op.input("X")[0] in ("w", "b")]
        assert sorted(decays) == [["b"], ["w"]]
        for (w, b), (w1, b1) in zip(history, history[1:]):
            gw, gb = _grads(w, b)
            np.testing.assert_allclose(w1, w - wd * w - lr * gw, rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(b1, b - wd * b - lr * gb, rtol=1e-5, atol=1e-6)

    AdamW = fluid.contrib.extend_with_decoupled_weight_decay(fluid.optimizer.Adam)
    history, _ = _regression(lambda: AdamW(
        weight_decay=wd, learning_rate=lr, apply_decay_param_fun=lambda name: name == "w"))
    m = {k: 0.0 for k in "wb"}
    v = {k: 0.0 for k in "wb"}
    for t, ((w, b), (w1, b1)) in enumerate(zip(history, history[1:]), start=1):
        gw, gb = _grads(w, b)
        for k, p, g, got, decay in (("w", w, gw, w1, wd), ("b", b, gb, b1, 0.0)):
            m[k] = 0.9 * m[k] + 0.1 * g
            v[k] = 0.999 * v[k] + 0.001 * g * g
            lr_t = lr * np.sqrt(1 - 0.999 ** t) / (1 - 0.9 ** t)
            want = p - decay * p - lr_t * m[k] / (np.sqrt(v[k]) + 1e-8)
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)


def test_decoupled_weight_decay_checks_its_arguments():
    with pytest.raises(TypeError, match="optimizer class"):
        fluid.contrib.extend_with_decoupled_weight_decay(fluid.optimizer.SGD(0.1))
    SGDW = fluid.contrib.extend_with_decoupled_weight_decay(fluid.optimizer.SGD)
    with pytest.raises(TypeError, match="weight_decay must be a float"):
        SGDW(weight_decay="0.1", learning_rate=0.1)


def test_fused_elemwise_activation_layer_trains_like_the_unfused_layers():
    def build(fused):
        main, start = fluid.Program(), fluid.Program()
        main.random_seed = start.random_seed = 7
        with fluid.program_guard(main, start):
            x = L.data("x", shape=[3], dtype="float32")
            y = L.data("y", shape=[1], dtype="float32")
            h = L.fc(x, 4, bias_attr=False, param_attr=fluid.ParamAttr(name="w1"))
            b = L.create_parameter([4], "float32", name="b1",
                                   default_initializer=fluid.initializer.Constant(0.1))
            if fused:
                h = fluid.contrib.fused_elemwise_activation(
                    h, b, functor_list="tanh,elementwise_add", axis=1)
            else:
                h = L.tanh(L.elementwise_add(h, b, axis=1))
            pred = L.fc(h, 1, param_attr=fluid.ParamAttr(name="w2"))
            loss = L.mean(L.square_error_cost(pred, y))
            fluid.optimizer.SGD(0.1).minimize(loss)
        return main, start, loss

    results = []
    for fused in (False, True):
        main, start, loss = build(fused)
        assert ("fused_elemwise_activation_grad" in str(main)) == fused
        exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
        with fluid.scope_guard(scope):
            exe.run(start)
            losses = [float(exe.run(main, feed={"x": XS, "y": YS}, fetch_list=[loss])[0])
                      for _ in range(4)]
        results.append(losses)
    np.testing.assert_allclose(results[1], results[0], rtol=1e-6)
    assert results[1][-1] < results[1][0]


def test_fused_elemwise_activation_layer_rejects_a_bad_functor_list():
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        x = L.data("x", shape=[3], dtype="float32")
        with pytest.raises(ValueError, match="two functor names"):
            fluid.contrib.fused_elemwise_activation(x, x, functor_list=["relu"])


def test_ctr_metric_bundle_accumulates_over_batches():
    main, start = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, start):
        p = L.data("p", shape=[1], dtype="float32")
        label = L.data("label", shape=[1], dtype="float32")
        bundle = fluid.contrib.ctr_metric_bundle(input=p, label=label)
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    batches = [(RNG.uniform(0, 1, (n, 1)).astype("float32"),
                RNG.randint(0, 2, (n, 1)).astype("float32")) for n in (5, 3)]
    with fluid.scope_guard(scope):
        exe.run(start)
        for pv, lv in batches:
            got = exe.run(main, feed={"p": pv, "label": lv}, fetch_list=list(bundle))
    pv = np.concatenate([b[0] for b in batches])
    lv = np.concatenate([b[1] for b in batches])
    want = [np.sum((pv - lv) ** 2), np.sum(np.abs(pv - lv)), pv.sum(),
            np.sum(1 / (1 + np.exp(-pv))), lv.sum(), len(pv)]
    np.testing.assert_allclose([float(g[0]) for g in got], want, rtol=1e-5)
    with pytest.raises(ValueError, match="must match"):
        with fluid.program_guard(fluid.Program(), fluid.Program()):
            fluid.contrib.ctr_metric_bundle(L.data("a", shape=[2], dtype="float32"),
                                            L.data("b", shape=[1], dtype="float32"))


def _mlp_program():
    main, start = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, start):
        x = L.data("x", shape=[13], dtype="float32")
        y = L.data("y", shape=[1], dtype="float32")
        h = L.fc(x, 10, act="relu")
        pred = L.fc(h, 1)
        loss = L.mean(L.square_error_cost(pred, y))
        fluid.optimizer.SGD(0.01).minimize(loss)
    return main


def test_memory_usage_counts_each_written_tensor_once_with_the_batch_size():
    main = _mlp_program()
    block = main.global_block()
    total, seen = 0, set()
    for op in block.ops:
        for n in op.output_arg_names:
            if n in seen:
                continue
            seen.add(n)
            shape = [64 if d < 0 else d for d in block.var(n).shape]
            total += int(np.prod(shape)) * 4  # all float32 here
    lo, hi, unit = fluid.contrib.memory_usage(program=main, batch_size=64)
    assert unit == "KB" and total > 1024
    np.testing.assert_allclose([lo, hi], [total / 1024 * 1.05, total / 1024 * 1.1])
    lo2, _, _ = fluid.contrib.memory_usage(main, 128)
    assert lo2 > lo
    with pytest.raises(ValueError, match="batch_size must be a positive"):
        fluid.contrib.memory_usage(main, 0)
    with pytest.raises(TypeError, match="must be a fluid.Program"):
        fluid.contrib.memory_usage("main", 1)


def test_op_freq_statistic_counts_ops_and_producer_consumer_pairs():
    main = _mlp_program()
    uni, adj = fluid.contrib.op_freq_statistic(program=main)
    uni = dict(uni)
    assert uni["mul"] == 2 and uni["mul_grad"] == 2 and uni["elementwise_add"] == 2
    assert "sgd" not in uni  # an sgd op writes only its parameter
    adj = dict(adj)
    assert adj["mul->elementwise_add"] == 2
    assert adj["elementwise_add->relu"] == 1
    assert adj["relu->mul"] == 1  # the second fc reads relu's output (x, a feed, is skipped)
    counts = [c for _, c in fluid.contrib.op_freq_statistic(main)[0]]
    assert counts == sorted(counts, reverse=True)
