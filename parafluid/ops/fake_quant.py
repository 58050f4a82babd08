"""Fake quantization ops (quantization-aware training, ``contrib.QuantizeTranspiler``).

A fake quantize op maps ``X`` to integers on a float tensor: with ``bin = 2**(bits-1) - 1``
and a scale ``s``, ``Out = round(clip(X, -s, s) / s * bin)``; ``fake_dequantize_max_abs``
maps them back, ``Out = X * Scale / max_range``. The ops differ in where ``s`` comes from:

    fake_quantize_abs_max                 s = max|X| of this batch
    fake_quantize_range_abs_max           s = max of the last ``window_size`` batches' max|X|
                                          (``OutScales`` holds them, ``Iter`` is the step);
                                          ``is_test``: s = ``InScale``
    fake_quantize_moving_average_abs_max  state = rate*state + 1, accum = rate*accum + max|X|,
                                          s = accum / state; ``is_test``: s = ``InScale``

Gradients are straight-through: rounding and clipping count as the identity, so a quantize
op passes ``Out@GRAD * bin / s`` and a dequantize op ``Out@GRAD * Scale / max_range``; the
pair passes the gradient unchanged. Scales and statistics get no gradient.
"""

from __future__ import annotations

from typing import Any

import torch

from .registry import Meta, register_op

_SCALE_SLOTS = ("InScale", "Iter", "InState", "InAccum")
# the running statistic each state output updates
_STATE_INPUT = {"OutState": "InState", "OutAccum": "InAccum"}


def _bin(attrs: dict) -> float:
    return float((1 << (int(attrs["bit_length"]) - 1)) - 1)


def _quantize(x: torch.Tensor, scale: torch.Tensor, attrs: dict) -> torch.Tensor:
    s = scale.reshape(()).to(x.dtype)
    return torch.round(torch.clamp(x, -s, s) / _nonzero(s) * _bin(attrs))


def _nonzero(s: torch.Tensor) -> torch.Tensor:
    """The scale to divide by: an all-zero input has scale 0; it quantizes to zeros, and
    its gradient stays finite, instead of NaNs."""
    return torch.where(s > 0, s, torch.ones_like(s))


def _abs_max(x: torch.Tensor) -> torch.Tensor:
    return x.detach().abs().max().reshape(1)


def _check_bits(op: str, attrs: dict) -> None:
    bits = attrs["bit_length"]
    if not isinstance(bits, int) or not 1 < bits <= 16:
        raise ValueError(f"{op}: bit_length must be an int in [2, 16], got {bits!r}")


def _quant_shape(op: str, extra: tuple[str, ...] = ()) -> Any:
    def infer(ins: dict, attrs: dict) -> dict:
        _check_bits(op, attrs)
        x = ins["X"]
        out = {"Out": x, "OutScale": Meta((1,), x.dtype)}
        for slot in extra:
            if slot == "OutScales":
                out[slot] = Meta((int(attrs["window_size"]),), x.dtype)
            elif ins.get(_STATE_INPUT[slot]) is not None:
                out[slot] = ins[_STATE_INPUT[slot]]
        return out
    return infer


def _quant_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    dout = ins["Out@GRAD"]
    return {"X@GRAD": dout * (_bin(attrs) / _nonzero(ins["OutScale"].reshape(())).to(dout.dtype))}


def _grad_like_out(ins: dict, attrs: dict) -> dict:
    return {"X@GRAD": ins["Out@GRAD"]}


def _register_quant(type: str, inputs: tuple[str, ...], outputs: tuple[str, ...],
                    attrs: dict, kernel: Any, extra: tuple[str, ...] = ()) -> None:
    register_op(type, inputs=inputs, outputs=outputs, attrs={"bit_length": 8, **attrs},
                infer_shape=_quant_shape(type, extra), kernel=kernel,
                grad_kernel=_quant_grad, grad_uses=("OutScale",), grad_infer_shape=_grad_like_out,
                no_grad_inputs=[s for s in _SCALE_SLOTS if s in [i.rstrip("?") for i in inputs]],
                no_compile="keeps running statistics across steps in place")


def _abs_max_kernel(ins: dict, attrs: dict, ctx: Any) -> dict:
    x = ins["X"]
    scale = _abs_max(x)
    return {"Out": _quantize(x, scale, attrs), "OutScale": scale}


_register_quant("fake_quantize_abs_max", ("X",), ("Out", "OutScale"), {}, _abs_max_kernel)


def _frozen(x: torch.Tensor, in_scale: torch.Tensor, attrs: dict, state: dict) -> dict:
    """``is_test``: quantize with the kept scale; the statistics pass through unchanged."""
    out = {k: v for k, v in state.items() if v is not None}
    out.update(Out=_quantize(x, in_scale, attrs), OutScale=in_scale.clone())
    return out


def _range_abs_max_kernel(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, in_scale = ins["X"], ins["InScale"]
    if attrs["is_test"]:
        scales = ins.get("OutScales")
        if scales is None:
            # no window wired in: the window is the kept scale
            scales = in_scale.reshape(1).expand(int(attrs["window_size"])).clone()
        return _frozen(x, in_scale, attrs, {"OutScales": scales})
    window = int(attrs["window_size"])
    scales, it = ins.get("OutScales"), ins.get("Iter")
    if it is None:
        raise ValueError("fake_quantize_range_abs_max: training (is_test=False) needs the "
                         "input Iter (the step counter)")
    # NOTE: Fluid keeps the window in its OutScales output buffer, fresh (zeros) on the
    # first step; here the previous window comes in through OutScales when wired
    scales = torch.zeros(window, dtype=in_scale.dtype, device=x.device) if scales is None \
        else scales.clone()
    step = int(it.reshape(-1)[0])
    cur = _abs_max(x).to(in_scale.dtype)
    idx = step % window
    removed = scales[idx].clone()
    scales[idx] = cur[0]
    last = in_scale.reshape(-1)[0]
    if last < cur[0]:
        scale = cur.clone()
    elif torch.abs(removed - last) < 1e-6:
        # the window's maximum left it: the abs max of the first min(step, window) entries
        # (Fluid's count; with none, its max_element reads the first entry)
        size = max(min(step, window), 1)
        scale = scales[:size].abs().max().reshape(1)
    else:
        scale = last.reshape(1).clone()
    return {"Out": _quantize(x, scale, attrs), "OutScale": scale, "OutScales": scales}


_register_quant("fake_quantize_range_abs_max", ("X", "InScale", "Iter?", "OutScales?"),
                ("Out", "OutScale", "OutScales?"), {"window_size": 10000, "is_test": False},
                _range_abs_max_kernel, ("OutScales",))


def _moving_average_kernel(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, in_scale = ins["X"], ins["InScale"]
    if attrs["is_test"]:
        return _frozen(x, in_scale, attrs, {"OutState": ins["InState"],
                                            "OutAccum": ins["InAccum"]})
    state, accum = ins["InState"], ins["InAccum"]
    if state is None or accum is None:
        raise ValueError("fake_quantize_moving_average_abs_max: training (is_test=False) "
                         "needs the inputs InState and InAccum")
    rate = float(attrs["moving_rate"])
    state = state * rate + 1.0
    accum = accum * rate + _abs_max(x).to(accum.dtype)
    scale = accum / state
    return {"Out": _quantize(x, scale, attrs), "OutScale": scale, "OutState": state,
            "OutAccum": accum}


_register_quant("fake_quantize_moving_average_abs_max",
                ("X", "InScale", "InState?", "InAccum?"),
                ("Out", "OutScale", "OutState?", "OutAccum?"),
                {"moving_rate": 0.9, "is_test": False}, _moving_average_kernel,
                ("OutState", "OutAccum"))


def _dequant_kernel(ins: dict, attrs: dict, ctx: Any) -> dict:
    x = ins["X"]
    return {"Out": x * (ins["Scale"].reshape(()).to(x.dtype) / float(attrs["max_range"]))}


def _dequant_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    dout = ins["Out@GRAD"]
    return {"X@GRAD": dout * (ins["Scale"].reshape(()).to(dout.dtype) / float(attrs["max_range"]))}


def _dequant_shape(ins: dict, attrs: dict) -> dict:
    if not float(attrs["max_range"]) > 0:
        raise ValueError(f"fake_dequantize_max_abs: max_range must be > 0, "
                         f"got {attrs['max_range']}")
    scale = ins["Scale"]
    if scale.shape and any(d not in (1, -1) for d in scale.shape):
        raise ValueError(f"fake_dequantize_max_abs: Scale must hold one value, got shape "
                         f"{list(scale.shape)}")
    return {"Out": ins["X"]}


register_op("fake_dequantize_max_abs", inputs=("X", "Scale"), outputs=("Out",),
            attrs={"max_range": 127.0}, infer_shape=_dequant_shape, kernel=_dequant_kernel,
            grad_kernel=_dequant_grad, grad_uses=("Scale",), no_grad_inputs=("Scale",),
            grad_infer_shape=_grad_like_out)
