"""Op table: the channel-wise fake quantize / dequantize ops, moving_average_abs_max_scale,
fake_quantize_dequantize_moving_average_abs_max, and fake_quantize_range_abs_max as Fluid
1.6's tests run it (no previous window given, bit_length 5)."""

import numpy as np
import pytest

from parafluid.testing import OpCase, check_op, rand

X4 = rand(3, 2, 2, 2, low=-2.0, high=2.0, seed=4)
X2 = np.array([[-0.9, -0.35, 0.1], [0.45, 0.2, 0.8]])


def _bin(bits):
    return (1 << (bits - 1)) - 1


def _q(x, s, bits=8):
    return np.round(np.clip(x, -s, s) / s * _bin(bits))


def _channel_quant(X, attrs):
    scales = np.abs(X).reshape(X.shape[0], -1).max(1)
    out = np.stack([_q(X[c], scales[c], attrs["bit_length"]) for c in range(X.shape[0])])
    return {"Out": out, "OutScale": scales}


def _channel_dequant(X, Scales, attrs):
    bits = attrs["quant_bits"]
    if len(Scales) == 1:
        return {"Out": X * Scales[0].reshape(-1, *[1] * (X.ndim - 1)) / _bin(bits[0])}
    per = Scales[0].reshape(1, -1, *[1] * (X.ndim - 2))
    return {"Out": X * per * Scales[1][0] / (_bin(bits[0]) * _bin(bits[1]))}


def _moving(X, InState, InAccum, rate=0.9):
    state = rate * InState + 1
    accum = rate * InAccum + np.abs(X).max()
    return accum / state, state, accum


def _scale_ref(X, InAccum, InState, attrs):
    scale, state, accum = _moving(X, InState, InAccum, attrs["moving_rate"])
    return {"Out": X, "OutScale": scale, "OutState": state, "OutAccum": accum}


def _qdq(x, s, bits):
    return _q(x, s, bits) * s / _bin(bits)


def _qdq_ref(X, InScale, InAccum, InState, attrs):
    scale, state, accum = _moving(X, InState, InAccum, attrs["moving_rate"])
    return {"Out": _qdq(X, scale[0], attrs["bit_length"]), "OutScale": scale,
            "OutState": state, "OutAccum": accum}


def _range_fresh(X, InScale, Iter, attrs):
    # the window starts as zeros; the step's abs max goes to slot Iter % window
    cur = np.abs(X).max()
    scales = np.zeros(attrs["window_size"])
    scales[Iter[0] % attrs["window_size"]] = cur
    scale = max(InScale[0], cur)
    return {"Out": _q(X, scale, attrs["bit_length"]), "OutScale": np.array([scale]),
            "OutScales": scales}


STATE, ACCUM = np.array([1.0]), np.array([1.0])

CASES = [
    OpCase("fake_channel_wise_quantize_abs_max", {"X": X4}, ref=_channel_quant,
           id="channel_quant_8bit"),
    OpCase("fake_channel_wise_quantize_abs_max", {"X": X4[:, 0, 0]}, attrs={"bit_length": 4},
           ref=_channel_quant, id="channel_quant_2d_4bit"),
    OpCase("fake_channel_wise_dequantize_max_abs",
           {"X": _channel_quant(X4, {"bit_length": 8})["Out"],
            "Scales": [np.array([0.5, 1.5, 2.0])]},
           attrs={"quant_bits": [8]}, ref=_channel_dequant, grad=["X"],
           id="channel_dequant_one_scale"),
    OpCase("fake_channel_wise_dequantize_max_abs",
           {"X": np.round(X4 * 50), "Scales": [np.array([0.5, 1.5]), np.array([3.0])]},
           attrs={"quant_bits": [8, 8]}, ref=_channel_dequant, grad=["X"],
           id="channel_dequant_two_scales"),
    OpCase("fake_channel_wise_dequantize_max_abs",
           {"X": np.round(X4 * 5), "Scales": [np.array([0.5, 1.5]), np.array([3.0])]},
           attrs={"quant_bits": [4, 6]}, ref=_channel_dequant,
           id="channel_dequant_two_scales_4_6_bits"),
    OpCase("moving_average_abs_max_scale", {"X": X4, "InAccum": ACCUM, "InState": STATE},
           ref=_scale_ref, grad=["X"], grad_outputs=["Out"], id="moving_scale_train"),
    OpCase("moving_average_abs_max_scale", {"X": X4}, attrs={"is_test": True},
           outputs=["Out"], ref=lambda X: {"Out": X}, id="moving_scale_test"),
    OpCase("fake_quantize_dequantize_moving_average_abs_max",
           {"X": X4, "InScale": np.array([0.001]), "InAccum": ACCUM, "InState": STATE},
           attrs={"bit_length": 5}, ref=_qdq_ref, id="quant_dequant_moving_5bit"),
    OpCase("fake_quantize_dequantize_moving_average_abs_max",
           {"X": X4, "InScale": np.array([1.0])}, attrs={"is_test": True},
           outputs=["Out", "OutScale"],
           ref=lambda X, InScale: {"Out": _qdq(X, 1.0, 8), "OutScale": InScale},
           id="quant_dequant_moving_test"),
    OpCase("fake_quantize_moving_average_abs_max",
           {"X": X4, "InScale": np.array([0.001]), "InAccum": ACCUM, "InState": STATE},
           attrs={"bit_length": 5},
           ref=lambda X, InScale, InAccum, InState, attrs: {
               "Out": _q(X, _moving(X, InState, InAccum)[0][0], 5)},
           id="quant_moving_5bit"),
    OpCase("fake_quantize_range_abs_max",
           {"X": X4, "InScale": np.array([0.0]), "Iter": np.array([0], "int64")},
           attrs={"bit_length": 5, "window_size": 1}, outputs=["Out", "OutScale", "OutScales"],
           ref=_range_fresh, id="range_abs_max_no_previous_window"),
    OpCase("fake_quantize_range_abs_max",
           {"X": X2, "InScale": np.array([0.5]), "Iter": np.array([6], "int64")},
           attrs={"window_size": 4}, outputs=["Out", "OutScale", "OutScales"],
           ref=_range_fresh, id="range_abs_max_no_previous_window_step6"),
    OpCase("fake_quantize_range_abs_max",
           {"X": X2, "InScale": np.array([0.7])}, attrs={"is_test": True, "bit_length": 8},
           outputs=["Out"], ref=lambda X, InScale: {"Out": _q(X, 0.7)},
           id="range_abs_max_test_clips"),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_op(case):
    check_op(case)


def test_channel_dequantize_checks_its_scales():
    with pytest.raises(Exception, match="one value per slice of dim 0"):
        check_op(OpCase("fake_channel_wise_dequantize_max_abs",
                        {"X": X4, "Scales": [np.array([1.0, 2.0])]}))
