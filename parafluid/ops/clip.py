"""Gradient-clipping ops (used by ``parafluid.clip``); all accept SelectedRows inputs.

A SelectedRows input may list a row several times; its rows are merged (summed) before
anything nonlinear (a clamp, a norm) is applied, so the result equals clipping the dense
tensor.

    clip_by_value          Out = clamp(X, min, max)
    clip_by_norm           Out = X * max_norm / max(||X||, max_norm)
    squared_l2_norm        Out = [sum(X * X)]
    l1_norm                Out = [sum(|X|)]
    clip_by_global_norm    Out = X * clip_norm / max(sqrt(SquaredNorm), clip_norm), where
                           SquaredNorm is the sum of squared_l2_norm over a group of tensors
"""

from __future__ import annotations

from typing import Any

import torch

from ..scope import SelectedRows
from .registry import Meta, register_op


def _clip_by_value(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, lo, hi = ins["X"], attrs["min"], attrs["max"]
    if isinstance(x, SelectedRows):
        x = x.merged()
        return {"Out": SelectedRows(x.rows, x.value.clamp(lo, hi), x.height)}
    return {"Out": x.clamp(lo, hi)}


def _clip_by_value_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, dout = ins["X"], ins["Out@GRAD"]
    inside = (x > attrs["min"]) & (x < attrs["max"])
    return {"X@GRAD": dout * inside}


def _clip_by_value_shape(ins: dict, attrs: dict) -> dict:
    if attrs["min"] > attrs["max"]:
        raise ValueError(f"clip_by_value: min ({attrs['min']}) must be <= max ({attrs['max']})")
    return {"Out": ins["X"]}


register_op("clip_by_value", inputs=("X",), outputs=("Out",), attrs={"min": -1.0, "max": 1.0},
            infer_shape=_clip_by_value_shape, kernel=_clip_by_value,
            grad_kernel=_clip_by_value_grad, grad_uses=("X",))


def _norm_scale(norm: torch.Tensor, max_norm: float) -> torch.Tensor:
    """``max_norm / max(norm, max_norm)``: 1 when the norm is within bounds."""
    return max_norm / torch.clamp(norm, min=max_norm)


def _clip_by_norm(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, max_norm = ins["X"], attrs["max_norm"]
    if isinstance(x, SelectedRows):
        x = x.merged()
        v = x.value
        return {"Out": SelectedRows(x.rows, v * _norm_scale(v.norm(), max_norm), x.height)}
    return {"Out": x * _norm_scale(x.norm(), max_norm)}


def _positive(op: str, attr: str) -> Any:
    def infer(ins: dict, attrs: dict) -> dict:
        if not attrs[attr] > 0:
            raise ValueError(f"{op}: {attr} must be > 0, got {attrs[attr]}")
        return {"Out": ins["X"]}
    return infer


register_op("clip_by_norm", inputs=("X",), outputs=("Out",), attrs={"max_norm": 1.0},
            infer_shape=_positive("clip_by_norm", "max_norm"), kernel=_clip_by_norm,
            share_lod=("X", "Out"))


def _squared_l2_norm(ins: dict, attrs: dict, ctx: Any) -> dict:
    x = ins["X"]
    v = x.merged().value if isinstance(x, SelectedRows) else x
    return {"Out": v.pow(2).sum().reshape(1)}


register_op("squared_l2_norm", inputs=("X",), outputs=("Out",),
            infer_shape=lambda ins, attrs: {"Out": Meta((1,), ins["X"].dtype)},
            kernel=_squared_l2_norm,
            grad_kernel=lambda ins, attrs, ctx: {
                "X@GRAD": ins["X"] * (2.0 * ins["Out@GRAD"].reshape(()))},
            grad_uses=("X",))


def _l1_norm(ins: dict, attrs: dict, ctx: Any) -> dict:
    x = ins["X"]
    v = x.merged().value if isinstance(x, SelectedRows) else x
    return {"Out": v.abs().sum().reshape(1)}


register_op("l1_norm", inputs=("X",), outputs=("Out",),
            infer_shape=lambda ins, attrs: {"Out": Meta((1,), ins["X"].dtype)},
            kernel=_l1_norm,
            grad_kernel=lambda ins, attrs, ctx: {
                "X@GRAD": torch.sign(ins["X"]) * ins["Out@GRAD"].reshape(())},
            grad_uses=("X",))


def _clip_by_global_norm(ins: dict, attrs: dict, ctx: Any) -> dict:
    x = ins["X"]
    scale = _norm_scale(ins["SquaredNorm"].sqrt(), attrs["clip_norm"]).to(x.dtype)
    if isinstance(x, SelectedRows):
        return {"Out": SelectedRows(x.rows, x.value * scale, x.height)}
    return {"Out": x * scale}


register_op("clip_by_global_norm", inputs=("X", "SquaredNorm"), outputs=("Out",),
            attrs={"clip_norm": 1.0},
            infer_shape=_positive("clip_by_global_norm", "clip_norm"),
            kernel=_clip_by_global_norm)

