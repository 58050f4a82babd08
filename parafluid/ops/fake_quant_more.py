"""More of Fluid 1.6's fake quantization ops (see ``fake_quant`` for the common rule
``q = round(clip(x, -s, s) / s * bin)``, ``bin = 2**(bits-1) - 1``):

    fake_channel_wise_quantize_abs_max     one scale per slice of dim 0: s_c = max|X[c]|
    fake_channel_wise_dequantize_max_abs   Out = X * s_c / bin(quant_bits[0]) along dim 0
                                           (one Scales tensor), or along dim 1 times a
                                           second one-value scale over
                                           bin(quant_bits[0]) * bin(quant_bits[1]) (two)
    moving_average_abs_max_scale           Out = X; records the moving-average abs max
                                           scale (state/accum as the quantize op's)
    fake_quantize_dequantize_moving_average_abs_max
                                           Out = round(clip(X) / s * bin) * s / bin with
                                           the moving-average scale s

Gradients are straight-through, as for the other fake ops here: a quantize op passes
``Out@GRAD * bin / s``, a dequantize op ``Out@GRAD * s / max_range`` and the ops whose
output is on X's scale pass ``Out@GRAD`` unchanged.
"""

from __future__ import annotations

from typing import Any

import torch

from .fake_quant import _abs_max, _bin, _check_bits, _frozen, _nonzero
from .registry import Meta, register_op


def _channel_view(x: torch.Tensor, axis: int) -> list[int]:
    """Shape that lines a per-channel vector up with dim ``axis`` of ``x``."""
    return [-1 if d == axis else 1 for d in range(x.dim())]


# ------------------------------------------------------------------------ channel-wise quantize


def _channel_quant_shape(ins: dict, attrs: dict) -> dict:
    _check_bits("fake_channel_wise_quantize_abs_max", attrs)
    x = ins["X"]
    if not x.shape:
        raise ValueError("fake_channel_wise_quantize_abs_max: X must have rank >= 1")
    return {"Out": x, "OutScale": Meta((x.shape[0],), x.dtype)}


def _channel_quant(ins: dict, attrs: dict, ctx: Any) -> dict:
    x = ins["X"]
    scale = x.detach().abs().reshape(x.shape[0], -1).amax(1)
    s = scale.reshape(_channel_view(x, 0))
    q = torch.round(torch.maximum(torch.minimum(x, s), -s) / _nonzero(s) * _bin(attrs))
    return {"Out": q, "OutScale": scale}


def _channel_quant_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    d = ins["Out@GRAD"]
    s = ins["OutScale"].to(d.dtype).reshape(_channel_view(d, 0))
    return {"X@GRAD": d * (_bin(attrs) / _nonzero(s))}


register_op("fake_channel_wise_quantize_abs_max", inputs=("X",), outputs=("Out", "OutScale"),
            attrs={"bit_length": 8}, infer_shape=_channel_quant_shape, kernel=_channel_quant,
            grad_kernel=_channel_quant_grad, grad_uses=("OutScale",),
            grad_infer_shape=lambda ins, attrs: {"X@GRAD": ins["Out@GRAD"]})


# ---------------------------------------------------------------------- channel-wise dequantize


def _channel_dequant_factor(x: torch.Tensor, scales: list, attrs: dict) -> torch.Tensor:
    op = "fake_channel_wise_dequantize_max_abs"
    bits = list(attrs["quant_bits"])
    if len(scales) not in (1, 2) or len(bits) < len(scales):
        raise ValueError(f"{op}: takes one or two Scales tensors and a quant_bits entry for "
                         f"each, got {len(scales)} Scales and quant_bits={bits}")
    first = scales[0].reshape(-1).to(x.dtype)
    axis = 0 if len(scales) == 1 else 1
    if x.dim() <= axis or first.numel() != x.shape[axis]:
        raise ValueError(f"{op}: the first Scales tensor must hold one value per slice of "
                         f"dim {axis} of X {list(x.shape)}, got {first.numel()} values")
    max_range = _bin({"bit_length": int(bits[0])})
    factor = first.reshape(_channel_view(x, axis))
    if len(scales) == 2:
        if scales[1].numel() != 1:
            raise ValueError(f"{op}: the second Scales tensor must hold one value, got "
                             f"shape {list(scales[1].shape)}")
        max_range *= _bin({"bit_length": int(bits[1])})
        factor = factor * scales[1].reshape(()).to(x.dtype)
    return factor / max_range


register_op("fake_channel_wise_dequantize_max_abs", inputs=("X", "Scales[]"),
            outputs=("Out",), attrs={"quant_bits": [8]},
            infer_shape=lambda ins, attrs: {"Out": ins["X"]},
            kernel=lambda ins, attrs, ctx: {"Out": ins["X"] * _channel_dequant_factor(
                ins["X"], ins["Scales"], attrs)},
            grad_kernel=lambda ins, attrs, ctx: {"X@GRAD": ins["Out@GRAD"] * (
                _channel_dequant_factor(ins["Out@GRAD"], ins["Scales"], attrs))},
            grad_uses=("Scales",), no_grad_inputs=("Scales",),
            grad_infer_shape=lambda ins, attrs: {"X@GRAD": ins["Out@GRAD"]},
            share_lod=("X", "Out"))


# -------------------------------------------------------------------------- moving-average scale


def _moving_scale(op: str, ins: dict, attrs: dict) -> dict:
    """Fluid's FindMovingAverageAbsMax: ``state = rate*state + 1``,
    ``accum = rate*accum + max|X|``, ``scale = accum / state``."""
    x, state, accum = ins["X"], ins.get("InState"), ins.get("InAccum")
    if state is None or accum is None:
        raise ValueError(f"{op}: training (is_test=False) needs the inputs InState and "
                         "InAccum (the moving-average statistics)")
    rate = float(attrs["moving_rate"])
    state = state * rate + 1.0
    accum = accum * rate + _abs_max(x).to(accum.dtype)
    return {"OutScale": accum / state, "OutState": state, "OutAccum": accum}


def _moving_shape(op: str, quant: bool) -> Any:
    def infer(ins: dict, attrs: dict) -> dict:
        if quant:
            _check_bits(op, attrs)
        x = ins["X"]
        out = {"Out": x, "OutScale": Meta((1,), x.dtype)}
        for o, i in (("OutState", "InState"), ("OutAccum", "InAccum")):
            if ins.get(i) is not None:
                out[o] = ins[i]
        return out
    return infer


def _scale_only(ins: dict, attrs: dict, ctx: Any) -> dict:
    x = ins["X"]
    if attrs["is_test"]:
        return {"Out": x.clone()}
    return {"Out": x.clone(), **_moving_scale("moving_average_abs_max_scale", ins, attrs)}


register_op("moving_average_abs_max_scale", inputs=("X", "InAccum?", "InState?"),
            outputs=("Out", "OutScale?", "OutState?", "OutAccum?"),
            attrs={"moving_rate": 0.9, "is_test": False},
            infer_shape=_moving_shape("moving_average_abs_max_scale", False),
            kernel=_scale_only,
            grad_kernel=lambda ins, attrs, ctx: {"X@GRAD": ins["Out@GRAD"]}, grad_uses=(),
            no_grad_inputs=("InAccum", "InState"),
            grad_infer_shape=lambda ins, attrs: {"X@GRAD": ins["Out@GRAD"]},
            no_compile="keeps running statistics across steps in place")


def _quant_dequant(x: torch.Tensor, scale: torch.Tensor, attrs: dict) -> torch.Tensor:
    s = scale.reshape(()).to(x.dtype)
    b = _bin(attrs)
    return torch.round(torch.clamp(x, -s, s) / _nonzero(s) * b) * s / b


def _quant_dequant_moving(ins: dict, attrs: dict, ctx: Any) -> dict:
    op = "fake_quantize_dequantize_moving_average_abs_max"
    x = ins["X"]
    if attrs["is_test"]:
        out = _frozen(x, ins["InScale"], attrs, {"OutState": ins.get("InState"),
                                                  "OutAccum": ins.get("InAccum")})
        out["Out"] = _quant_dequant(x, ins["InScale"], attrs)
        return out
    stats = _moving_scale(op, ins, attrs)
    return {"Out": _quant_dequant(x, stats["OutScale"], attrs), **stats}


register_op("fake_quantize_dequantize_moving_average_abs_max",
            inputs=("X", "InScale", "InAccum?", "InState?"),
            outputs=("Out", "OutScale", "OutState?", "OutAccum?"),
            attrs={"moving_rate": 0.9, "bit_length": 8, "is_test": False},
            infer_shape=_moving_shape("fake_quantize_dequantize_moving_average_abs_max", True),
            kernel=_quant_dequant_moving,
            grad_kernel=lambda ins, attrs, ctx: {"X@GRAD": ins["Out@GRAD"]}, grad_uses=(),
            no_grad_inputs=("InScale", "InAccum", "InState"),
            grad_infer_shape=lambda ins, attrs: {"X@GRAD": ins["Out@GRAD"]},
            no_compile="keeps running statistics across steps in place")
