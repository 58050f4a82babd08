"""Op table: the fake quantization ops of quantization-aware training."""

import numpy as np
import pytest

import parafluid as fluid
from parafluid.testing import OpCase, check_op

X = np.array([[-0.9, -0.35, 0.1], [0.45, 0.2, 0.8]])


def _q(x, s, bits=8):
    b = (1 << (bits - 1)) - 1
    return np.round(np.clip(x, -s, s) / s * b)


def _range_ref(X, InScale, Iter, OutScales, attrs):
    # step 3 of a window of 4: the previous maximum 2.0 sits at index 3 and is replaced;
    # Fluid then takes the abs max of the first min(step, window) = 3 entries (its count
    # leaves out the entry just written while the window is filling)
    cur = np.abs(X).max()
    scales = OutScales.copy()
    scales[3] = cur
    scale = np.abs(scales[:3]).max()
    return {"Out": _q(X, scale), "OutScale": np.array([scale]), "OutScales": scales}


def _moving_ref(X, InScale, InState, InAccum, attrs):
    state = InState * 0.9 + 1
    accum = InAccum * 0.9 + np.abs(X).max()
    scale = accum / state
    return {"Out": _q(X, scale[0]), "OutScale": scale, "OutState": state, "OutAccum": accum}


CASES = [
    OpCase("fake_quantize_abs_max", {"X": X},
           ref=lambda X: {"Out": _q(X, 0.9), "OutScale": np.array([0.9])}),
    OpCase("fake_quantize_abs_max", {"X": X}, attrs={"bit_length": 4},
           ref=lambda X: {"Out": _q(X, 0.9, 4), "OutScale": np.array([0.9])},
           id="fake_quantize_abs_max_4bit"),
    OpCase("fake_quantize_range_abs_max",
           {"X": X, "InScale": np.array([2.0]), "Iter": np.array([3], dtype="int64"),
            "OutScales": np.array([0.5, 0.7, 0.6, 2.0])},
           attrs={"window_size": 4}, ref=_range_ref),
    OpCase("fake_quantize_range_abs_max", {"X": X, "InScale": np.array([0.5])},
           attrs={"is_test": True}, outputs=["Out", "OutScale"],
           ref=lambda X, InScale: {"Out": _q(X, 0.5), "OutScale": InScale},
           id="fake_quantize_range_abs_max_test"),
    OpCase("fake_quantize_moving_average_abs_max",
           {"X": X, "InScale": np.array([0.1]), "InState": np.array([2.0]),
            "InAccum": np.array([1.5])}, ref=_moving_ref),
    OpCase("fake_dequantize_max_abs", {"X": _q(X, 0.9), "Scale": np.array([0.9])},
           ref=lambda X, Scale: {"Out": X * 0.9 / 127}, grad=["X"]),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_op(case):
    check_op(case)


def test_quantize_then_dequantize_passes_the_gradient_straight_through():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [2, 3], "float32")
        x.stop_gradient = False
        block = main.global_block()
        q = block.create_var(name="xq", dtype="float32", shape=[2, 3])
        s = block.create_var(name="xs", dtype="float32", shape=[1])
        d = block.create_var(name="xd", dtype="float32", shape=[2, 3])
        block.append_op("fake_quantize_abs_max", inputs={"X": x},
                        outputs={"Out": q, "OutScale": s})
        block.append_op("fake_dequantize_max_abs", inputs={"X": q, "Scale": s},
                        outputs={"Out": d}, attrs={"max_range": 127.0})
        w = fluid.layers.assign(np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], "float32"))
        loss = fluid.layers.reduce_sum(fluid.layers.elementwise_mul(d, w))
        gx, = fluid.gradients(loss, [x])
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    xv = X.astype("float32")
    dv, gv = exe.run(main, feed={"x": xv}, fetch_list=[d, gx])
    assert np.allclose(dv, _q(xv, 0.9) * 0.9 / 127, atol=1e-6)
    assert np.abs(dv - xv).max() <= 0.9 / 127 / 2 + 1e-6
    np.testing.assert_allclose(gv, [[1, 2, 3], [4, 5, 6]], rtol=1e-5)


def test_fake_quantize_refuses_a_bit_length_out_of_range():
    with pytest.raises(ValueError, match="bit_length must be an int in"):
        check_op(OpCase("fake_quantize_abs_max", {"X": X}, attrs={"bit_length": 1},
                        ref=lambda X: {}))
