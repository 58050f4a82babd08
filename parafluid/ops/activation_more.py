"""Activations with something beyond one input and fixed attributes: ``pow`` (whose factor
may come from a ``FactorTensor`` input, as in Fluid 1.6) and ``hard_swish`` (MobileNetV3's
``x * min(max(x + offset, 0), threshold) / scale``)."""

from __future__ import annotations

from typing import Any

import torch

from .registry import register_op, same_as


def _factor(ins: dict, attrs: dict) -> float:
    """The ``FactorTensor`` value when given (it overrides the ``factor`` attribute)."""
    t = ins.get("FactorTensor")
    if t is None:
        return attrs["factor"]
    if t.numel() != 1:
        raise ValueError(f"pow: FactorTensor must hold one value, got shape {list(t.shape)}")
    return float(t.reshape(()).item())


def _pow(x: torch.Tensor, factor: float) -> torch.Tensor:
    """``x ** factor`` rounded once from double, as C's ``powf`` (Fluid's kernel) rounds:
    torch's float kernels multiply out small integer powers (``x * x * x`` rounds twice)."""
    if x.dtype in (torch.float32, torch.float16, torch.bfloat16):
        return torch.pow(x.double(), factor).to(x.dtype)
    return torch.pow(x, factor)


def _pow_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, d, f = ins["X"], ins["Out@GRAD"], _factor(ins, attrs)
    return {"X@GRAD": d * f * torch.pow(x, f - 1)}


register_op("pow", inputs=("X", "FactorTensor?"), outputs=("Out",), attrs={"factor": 1.0},
            infer_shape=same_as("X"),
            kernel=lambda ins, attrs, ctx: {"Out": _pow(ins["X"], _factor(ins, attrs))},
            grad_kernel=_pow_grad, grad_uses=("X", "FactorTensor"),
            no_grad_inputs=("FactorTensor",), grad_infer_shape=same_as("X", "X@GRAD"),
            share_lod=("X", "Out"))


def _hard_swish(ins: dict, attrs: dict, ctx: Any) -> dict:
    x = ins["X"]
    gate = (x + attrs["offset"]).clamp(0.0, attrs["threshold"])
    return {"Out": gate * x / attrs["scale"]}


def _hard_swish_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    # Fluid's rule: (2x + offset) / scale where 0 < x + offset < threshold, 1 at or above
    # the threshold (not threshold / scale: Fluid's kernel writes 1 there), 0 below.
    x, d = ins["X"], ins["Out@GRAD"]
    shifted = x + attrs["offset"]
    below = (shifted < attrs["threshold"]).to(x.dtype)
    inside = (shifted > 0).to(x.dtype) * (2 * x + attrs["offset"]) / attrs["scale"]
    return {"X@GRAD": d * (inside * below + (1 - below))}


register_op("hard_swish", inputs=("X",), outputs=("Out",),
            attrs={"threshold": 6.0, "scale": 6.0, "offset": 3.0},
            infer_shape=same_as("X"), kernel=_hard_swish, grad_kernel=_hard_swish_grad,
            grad_uses=("X",), grad_infer_shape=same_as("Out@GRAD", "X@GRAD"),
            share_lod=("X", "Out"))
