"""Fluid 1.x numerics that real programs rely on: softmax's clip at -64, the tolerable log of
cross_entropy, lenient accuracy / square_error_cost checks, and float() of fetched losses."""

import numpy as np
import pytest

import parafluid as fluid


def _run(build, feed, steps=1):
    main, startup = fluid.Program(), fluid.Program()
    startup.random_seed = 1
    with fluid.program_guard(main, startup):
        fetch = build()
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.Scope()
    exe.run(startup, scope=scope)
    return [exe.run(main, feed=feed, fetch_list=fetch, scope=scope) for _ in range(steps)]


def test_softmax_clips_shifted_logits_at_minus_64():
    x = np.array([[0.0, 100.0, 30.0]], "float32")

    def build():
        v = fluid.layers.data(name="x", shape=[3], dtype="float32")
        return [fluid.layers.softmax(v)]

    (prob,), = _run(build, {"x": x})
    assert prob[0, 0] > 0  # exp(-64) relative, not an underflow to exactly 0
    np.testing.assert_allclose(prob[0, 0], np.exp(-64.0), rtol=1e-4)
    np.testing.assert_allclose(prob[0, 2], np.exp(-64.0), rtol=1e-4)  # -70 clipped to -64


def test_confidently_wrong_prediction_has_a_finite_loss_and_gradient():
    logits = np.array([[200.0, 0.0], [0.0, 1.0]], "float32")
    label = np.array([[1], [1]], "int64")

    def build():
        z = fluid.layers.data(name="z", shape=[2], dtype="float32", stop_gradient=False)
        y = fluid.layers.data(name="y", shape=[1], dtype="int64")
        fused = fluid.layers.softmax_with_cross_entropy(z, y)
        two_step = fluid.layers.cross_entropy(fluid.layers.softmax(z), y)
        loss = fluid.layers.mean(fused) + fluid.layers.mean(two_step)
        grad, = fluid.gradients([loss], [z])
        return [fused, two_step, grad]

    (fused, two_step, grad), = _run(build, {"z": logits, "y": label})
    np.testing.assert_allclose(fused[0, 0], 64.0, rtol=1e-5)  # log(exp(-64)) clipped, not 200
    np.testing.assert_allclose(two_step[0, 0], 64.0, rtol=1e-3)
    assert np.isfinite(grad).all()


def test_cross_entropy_of_a_zero_probability_is_large_not_inf():
    prob = np.array([[1.0, 0.0], [0.5, 0.5]], "float32")

    def build():
        p = fluid.layers.data(name="p", shape=[2], dtype="float32")
        y = fluid.layers.data(name="y", shape=[1], dtype="int64")
        soft = fluid.layers.data(name="s", shape=[2], dtype="float32")
        return [fluid.layers.cross_entropy(p, y),
                fluid.layers.cross_entropy(p, soft, soft_label=True)]

    (hard, soft), = _run(build, {"p": prob, "y": np.array([[1], [0]], "int64"),
                                 "s": np.array([[0.0, 1.0], [1.0, 0.0]], "float32")})
    assert hard[0, 0] == np.float32(1e20) and np.isclose(hard[1, 0], np.log(2))
    assert soft[0, 0] == np.float32(1e20)


def test_a_diverging_classifier_stays_finite():
    """A learning rate far too large drives predictions to certainty; with Fluid's numerics
    the loss stays a finite number instead of going inf then NaN."""
    rng = np.random.RandomState(0)
    x = rng.normal(0, 3, (32, 8)).astype("float32")
    y = rng.randint(0, 4, (32, 1)).astype("int64")

    def build():
        xv = fluid.layers.data(name="x", shape=[8], dtype="float32")
        yv = fluid.layers.data(name="y", shape=[1], dtype="int64")
        prob = fluid.layers.fc(fluid.layers.fc(xv, 64, act="relu"), 4, act="softmax")
        loss = fluid.layers.mean(fluid.layers.cross_entropy(prob, yv))
        fluid.optimizer.SGD(learning_rate=10.0).minimize(loss)
        return [loss]

    losses = [float(out[0]) for out in _run(build, {"x": x, "y": y}, steps=15)]
    assert max(losses) > 10, losses  # it did diverge to confident mistakes ...
    assert np.isfinite(losses).all(), losses  # ... and still reports numbers


def test_accuracy_with_int64_total_and_float_label():
    scores = np.array([[0.9, 0.1], [0.2, 0.8], [0.7, 0.3]], "float32")

    def build():
        s = fluid.layers.data(name="s", shape=[2], dtype="float32")
        y = fluid.layers.data(name="y", shape=[1], dtype="float32")
        correct = fluid.layers.create_tensor(dtype="int64")
        total = fluid.layers.create_tensor(dtype="int64")
        acc = fluid.layers.accuracy(input=s, label=y, correct=correct, total=total)
        return [acc, correct, total]

    (acc, correct, total), = _run(build, {"s": scores,
                                          "y": np.array([[0], [1], [1]], "float32")})
    assert correct.dtype == np.int64 and total.dtype == np.int64
    assert int(correct) == 2 and int(total) == 3
    np.testing.assert_allclose(acc, [2 / 3], rtol=1e-6)


def test_square_error_cost_broadcasts_a_column_label():
    x = np.arange(6, dtype="float32").reshape(3, 2)
    y = np.array([[1.0], [2.0], [3.0]], "float32")

    def build():
        xv = fluid.layers.data(name="x", shape=[2], dtype="float32")
        yv = fluid.layers.data(name="y", shape=[1], dtype="float32")
        return [fluid.layers.square_error_cost(input=xv, label=yv)]

    (cost,), = _run(build, {"x": x, "y": y})
    np.testing.assert_allclose(cost, (x - y) ** 2)
    with pytest.raises(ValueError, match=r"label \[-1, 3\] must have the shape of the input"):
        def bad():
            xv = fluid.layers.data(name="x", shape=[2], dtype="float32")
            yv = fluid.layers.data(name="y", shape=[3], dtype="float32")
            return [fluid.layers.square_error_cost(input=xv, label=yv)]
        _run(bad, {})


def test_fetched_losses_convert_with_float_and_int():
    def build():
        x = fluid.layers.data(name="x", shape=[3], dtype="float32")
        return [fluid.layers.mean(x), fluid.layers.reduce_sum(x, dim=1)]

    (loss, rows), = _run(build, {"x": np.ones((2, 3), "float32")})
    assert loss.shape == (1,) and float(loss) == 1.0 and int(loss) == 1
    assert loss[0] == 1.0 and repr(loss) == "array([1.], dtype=float32)"
    assert isinstance(loss, np.ndarray) and isinstance(rows, np.ndarray)
    with pytest.raises(TypeError, match="size-1 arrays"):  # [2]: refused, as numpy always did
        float(rows)


def test_save_inference_model_not_for_deployment_keeps_the_whole_program(tmp_path):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.data(name="x", shape=[None, 4], dtype="float32")
        y = fluid.data(name="y", shape=[None, 1], dtype="float32")
        pred = fluid.layers.fc(x, 1)
        loss = fluid.layers.mean(fluid.layers.square_error_cost(pred, y))
        fluid.optimizer.Adam(0.01).minimize(loss)
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    names = fluid.io.save_inference_model(str(tmp_path), ["x"], [pred], exe, main_program=main,
                                          export_for_deployment=False, scope=scope)
    assert names == ["save_infer_model/scale_0"]
    data = (tmp_path / "__model__.main_program").read_bytes()
    program, feeds, fetches = fluid.io.decode_model(data)
    types = [op.type for op in program.global_block().ops]
    assert "adam" in types and types[-1] == "scale" and fetches == names


@pytest.mark.parametrize("devices", [1, 2])
def test_data_parallel_losses_convert_as_in_fluid(devices):
    """One device: the merged [1] loss converts like the Executor's. Several: one row per
    device, which numpy refuses to float() as Fluid's numpy did; np.mean and loss[0] work."""
    from parafluid import compiler

    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data(name="x", shape=[3], dtype="float32")
        loss = fluid.layers.mean(x)
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    program = compiler.CompiledProgram(main).with_data_parallel(
        places=fluid.cpu_places(devices))
    merged, = exe.run(program, feed={"x": np.ones((4, 3), "float32")}, fetch_list=[loss])
    assert merged.shape == (devices,) and float(np.mean(merged)) == 1.0 and merged[0] == 1.0
    if devices == 1:
        assert float(merged) == 1.0 and int(merged) == 1
    else:
        with pytest.raises(TypeError, match="size-1 arrays"):
            float(merged)


def test_a_fetched_lodtensor_and_a_scope_tensor_convert_as_in_fluid():
    """``return_numpy=False`` gives LoDTensors; Fluid code formats them with float() and
    "%.2f" %, which numpy >= 2.4 refuses for a plain shape-[1] array."""
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data(name="x", shape=[3], dtype="float32")
        loss = fluid.layers.mean(x)
        rows = fluid.layers.reduce_sum(x, dim=1)
        fluid.layers.create_global_var(shape=[1], value=2.5, dtype="float32",
                                           persistable=True, name="w")
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    t, r = exe.run(main, feed={"x": np.full((2, 3), 1.5, "float32")}, fetch_list=[loss, rows],
                   return_numpy=False, scope=scope)
    assert isinstance(t, fluid.LoDTensor) and np.array(t).shape == (1,)
    assert float(t) == 1.5 and int(t) == 1 and f"{t:.1f}" == "1.5"
    assert "%.2f" % t == "1.50"  # noqa: UP031  (Fluid programs format this way)
    assert float(np.array(t)[0]) == 1.5
    wt = scope.find_var("w").get_tensor()
    assert float(wt) == 2.5 and np.array(wt).shape == (1,)
    assert "%.3f" % wt == "2.500"  # noqa: UP031
    with pytest.raises(TypeError, match="size-1 arrays"):  # two elements: refused, as numpy did
        float(r)
