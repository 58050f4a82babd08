"""fluid.contrib.QuantizeTranspiler: quantization-aware training of a small CNN, freezing
for inference and int8 weights, written the way Fluid's own quantization tests use it."""

import numpy as np
import pytest

import parafluid as fluid
from parafluid.contrib import QuantizeTranspiler


def _net():
    img = fluid.layers.data(name="image", shape=[1, 8, 8], dtype="float32")
    label = fluid.layers.data(name="label", shape=[1], dtype="int64")
    conv = fluid.layers.conv2d(img, num_filters=4, filter_size=3, act="relu")
    pool = fluid.layers.pool2d(conv, pool_size=2, pool_stride=2)
    hidden = fluid.layers.fc(pool, size=16, act="relu")
    prediction = fluid.layers.fc(hidden, size=3, act="softmax")
    loss = fluid.layers.mean(fluid.layers.cross_entropy(prediction, label))
    return loss, prediction


def _data(n=48, seed=0):
    rng = np.random.RandomState(seed)
    y = rng.randint(0, 3, size=(n, 1)).astype("int64")
    x = rng.normal(0, 0.3, size=(n, 1, 8, 8)).astype("float32")
    for k in range(3):  # each class lights its own band of rows
        x[y[:, 0] == k, 0, 2 * k:2 * k + 3, :] += 1.0
    return x, y


def _build(act_type, weight_type="abs_max"):
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 7
    with fluid.program_guard(main, startup):
        loss, pred = _net()
        fluid.optimizer.Momentum(learning_rate=0.1, momentum=0.9).minimize(loss)
    t = QuantizeTranspiler(weight_bits=8, activation_bits=8,
                           activation_quantize_type=act_type,
                           weight_quantize_type=weight_type, window_size=16, moving_rate=0.9)
    t.training_transpile(main, startup)
    return t, main, startup, loss, pred


def test_training_transpile_inserts_fake_quant_and_points_gradients_at_dequantized_values():
    t, main, _, _, _ = _build("range_abs_max")
    types = [op.type for op in main.global_block().ops]
    # conv2d and two fc (mul) layers: two inputs each, a quantize and a dequantize per input
    assert types.count("fake_quantize_abs_max") == 3  # the weights
    assert types.count("fake_quantize_range_abs_max") == 3  # the activations
    assert types.count("fake_dequantize_max_abs") == 6
    assert types[0] == "increment"  # the step counter of the range window
    for op in main.global_block().ops:
        if op.type in ("conv2d", "mul", "conv2d_grad", "mul_grad"):
            reads = [n for s in ("X", "Y", "Input", "Filter") for n in op.input(s)]
            assert reads and all(n.endswith(".quantized.dequantized") for n in reads), op
    main.verify()
    with pytest.raises(ValueError, match="activation_quantize_type must be one of"):
        QuantizeTranspiler(activation_quantize_type="max")


@pytest.mark.parametrize("act_type,weight_type", [
    ("abs_max", "abs_max"), ("range_abs_max", "abs_max"),
    ("moving_average_abs_max", "abs_max"), ("abs_max", "moving_average_abs_max")])
def test_quantization_aware_training_trains_and_the_frozen_program_matches(act_type,
                                                                           weight_type):
    t, main, startup, loss, pred = _build(act_type, weight_type)
    test = main.clone(for_test=True)
    place = fluid.CPUPlace()
    exe = fluid.Executor(place)
    scope = fluid.global_scope()
    exe.run(startup)
    x, y = _data()
    losses = []
    for _ in range(12):
        for i in range(0, len(x), 16):
            lv, = exe.run(main, feed={"image": x[i:i + 16], "label": y[i:i + 16]},
                          fetch_list=[loss])
            losses.append(float(lv))
    assert np.mean(losses[-3:]) < 0.5 * np.mean(losses[:3]), losses
    if act_type != "abs_max":
        scale = np.array(scope.find_var("image.scale").get_tensor())
        assert 0.5 < scale[0] < 5.0  # learnt from the data, not the 0.001 it started at

    xt, yt = _data(16, seed=1)
    before_loss, before = exe.run(test, feed={"image": xt, "label": yt},
                                  fetch_list=[loss, pred])
    t.freeze_program(test, place, scope)
    types = [op.type for op in test.global_block().ops]
    assert types.count(f"fake_quantize_{act_type}") == 3  # the activations' stay
    assert len([t for t in types if t.startswith("fake_quantize")]) == 3  # the weights' went
    assert types.count("fake_dequantize_max_abs") == 3  # one after each conv2d / mul
    after_loss, after = exe.run(test, feed={"image": xt, "label": yt}, fetch_list=[loss, pred])
    np.testing.assert_allclose(after, before, atol=1e-4)
    assert abs(float(after_loss) - float(before_loss)) < 5e-3

    w_name = [op.input("Filter")[0] for op in test.global_block().ops if op.type == "conv2d"][0]
    w_freeze = np.array(scope.find_var(w_name).get_tensor())
    assert np.array_equal(w_freeze, np.round(w_freeze)) and np.abs(w_freeze).max() == 127
    if weight_type != "abs_max":  # the kept scale, from the moving average of max|w|
        scale = float(np.array(scope.find_var(w_name + ".scale").get_tensor())[0])
        assert 0 < scale
    t.convert_to_int8(test, place, scope)
    w_8bit = np.array(scope.find_var(w_name + ".int8").get_tensor())
    assert w_8bit.dtype == np.int8
    assert np.array_equal(w_8bit.astype("float32"), w_freeze)
    conv = [op for op in test.global_block().ops if op.type == "conv2d"][0]
    assert conv.input("Filter") == [w_name + ".int8"]
    assert test.global_block().var(w_name + ".int8").dtype == "int8"


def test_freeze_refuses_a_program_that_was_not_transpiled():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        _net()
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    with pytest.raises(ValueError, match="needs one quantized weight"):
        QuantizeTranspiler().freeze_program(main, fluid.CPUPlace())
