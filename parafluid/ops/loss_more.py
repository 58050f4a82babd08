"""Fluid 1.6's smaller losses: ``squared_l2_distance`` (row-wise ``|x - y|²`` with a
one-row Y broadcast), ``hinge_loss``, ``modified_huber_loss`` and ``minus`` (``x - y`` of
equal shapes, whose gradient is two ``scale`` ops, as Fluid's)."""

from __future__ import annotations

from typing import Any

import torch

from .common import numel
from .registry import EMPTY, GRAD, Meta, register_op

# ----------------------------------------------------------------------------- squared_l2_distance


def _known(shape: Any) -> bool:
    return -1 not in tuple(shape)


def _sq_l2_shape(ins: dict, attrs: dict) -> dict:
    x, y = ins["X"], ins["Y"]
    if len(x.shape) != len(y.shape) or len(x.shape) < 2:
        raise ValueError(f"squared_l2_distance: X and Y must have the same rank >= 2, got "
                         f"{list(x.shape)} and {list(y.shape)}")
    if _known(x.shape) and _known(y.shape):
        if numel(x.shape[1:]) != numel(y.shape[1:]):
            raise ValueError(f"squared_l2_distance: X {list(x.shape)} and Y {list(y.shape)} "
                             "must have the same number of columns after dim 0")
        if y.shape[0] not in (1, x.shape[0]):
            raise ValueError(f"squared_l2_distance: Y must have X's {x.shape[0]} rows or 1, "
                             f"got {y.shape[0]}")
    cols = numel(x.shape[1:]) if _known(x.shape[1:]) else -1
    return {"sub_result": Meta((x.shape[0], cols), x.dtype), "Out": Meta((x.shape[0], 1), x.dtype)}


def _sq_l2(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, y = ins["X"], ins["Y"]
    sub = x.reshape(x.shape[0], -1) - y.reshape(y.shape[0], -1)
    return {"sub_result": sub, "Out": (sub * sub).sum(1, keepdim=True)}


def _sq_l2_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, y, sub, d = ins["X"], ins["Y"], ins["sub_result"], ins["Out@GRAD"]
    g = 2 * d.reshape(-1, 1) * sub
    out = {}
    if "X" in ctx.need:
        out["X@GRAD"] = g.reshape(x.shape)
    if "Y" in ctx.need:
        gy = -g if y.shape[0] == g.shape[0] else -g.sum(0, keepdim=True)
        out["Y@GRAD"] = gy.reshape(y.shape)
    return out


register_op("squared_l2_distance", inputs=("X", "Y"), outputs=("sub_result", "Out"),
            infer_shape=_sq_l2_shape, kernel=_sq_l2, grad_kernel=_sq_l2_grad,
            grad_uses=("X", "Y", "sub_result"),
            grad_infer_shape=lambda ins, attrs: {"X@GRAD": ins["X"], "Y@GRAD": ins["Y"]},
            share_lod=("X", "Out"))

# ----------------------------------------------------------------------------- hinge_loss


def _hinge_shape(ins: dict, attrs: dict) -> dict:
    x, y = ins["Logits"], ins["Labels"]
    if len(x.shape) != 2 or x.shape[1] not in (1, -1) or \
            (_known(x.shape) and _known(y.shape) and tuple(x.shape) != tuple(y.shape)):
        raise ValueError(f"hinge_loss: Logits and Labels must both be [N, 1], got "
                         f"{list(x.shape)} and {list(y.shape)}")
    return {"Loss": Meta((x.shape[0], 1), x.dtype)}


def _hinge_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, y, d = ins["Logits"], ins["Labels"], ins["Loss@GRAD"]
    sign = 2 * y - 1  # labels {0, 1} as {-1, +1}
    return {"Logits@GRAD": d * (x * sign < 1).to(x.dtype) * -sign}


register_op("hinge_loss", inputs=("Logits", "Labels"), outputs=("Loss",),
            infer_shape=_hinge_shape,
            kernel=lambda ins, attrs, ctx: {"Loss": torch.clamp(
                1 - ins["Logits"] * (2 * ins["Labels"] - 1), min=0)},
            grad_kernel=_hinge_grad, grad_uses=("Logits", "Labels"),
            no_grad_inputs=("Labels",),
            grad_infer_shape=lambda ins, attrs: {"Logits@GRAD": ins["Logits"]},
            share_lod=("Logits", "Loss"))

# ----------------------------------------------------------------------------- modified_huber_loss


def _huber_shape(ins: dict, attrs: dict) -> dict:
    x, y = ins["X"], ins["Y"]
    if len(x.shape) != 2 or x.shape[1] not in (1, -1) or \
            (_known(x.shape) and _known(y.shape) and tuple(x.shape) != tuple(y.shape)):
        raise ValueError(f"modified_huber_loss: X and Y must both be [N, 1], got "
                         f"{list(x.shape)} and {list(y.shape)}")
    return {"IntermediateVal": x, "Out": Meta((x.shape[0], 1), x.dtype)}


def _huber(ins: dict, attrs: dict, ctx: Any) -> dict:
    """``v = x * (2y - 1)``; loss ``-4v`` below -1, ``(1 - v)²`` below 1, else 0."""
    x, y = ins["X"], ins["Y"]
    v = x * (2 * y - 1)
    loss = torch.where(v < -1, -4 * v, torch.where(v < 1, (1 - v) ** 2, torch.zeros_like(v)))
    return {"IntermediateVal": v, "Out": loss}


def _huber_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    y, v, d = ins["Y"], ins["IntermediateVal"], ins["Out@GRAD"]
    sign = 2 * y - 1
    dv = torch.where(v < -1, -4 * sign, torch.where(v < 1, -2 * (1 - v) * sign,
                                                     torch.zeros_like(v)))
    return {"X@GRAD": dv * d}


register_op("modified_huber_loss", inputs=("X", "Y"), outputs=("IntermediateVal", "Out"),
            infer_shape=_huber_shape, kernel=_huber, grad_kernel=_huber_grad,
            grad_uses=("Y", "IntermediateVal"), no_grad_inputs=("Y",),
            grad_infer_shape=lambda ins, attrs: {"X@GRAD": ins["Y"]})

# ----------------------------------------------------------------------------- minus


def _minus_shape(ins: dict, attrs: dict) -> dict:
    x, y = ins["X"], ins["Y"]
    if _known(x.shape) and _known(y.shape) and tuple(x.shape) != tuple(y.shape):
        raise ValueError(f"minus: X and Y must have the same shape, got {list(x.shape)} and "
                         f"{list(y.shape)}")
    return {"Out": x}


def _minus_grad_maker(op: Any, no_grad: set, ctx: Any) -> list[dict]:
    """``X@GRAD = Out@GRAD``, ``Y@GRAD = -Out@GRAD``: two ``scale`` ops (Fluid's maker)."""
    dout = op.output("Out")[0] + GRAD
    ops = []
    for slot, factor in (("X", 1.0), ("Y", -1.0)):
        name = op.input(slot)[0]
        if name not in no_grad and name != EMPTY:
            ops.append({"type": "scale", "inputs": {"X": [dout]},
                        "outputs": {"Out": [name + GRAD]}, "attrs": {"scale": factor}})
    return ops


register_op("minus", inputs=("X", "Y"), outputs=("Out",), infer_shape=_minus_shape,
            kernel=lambda ins, attrs, ctx: {"Out": ins["X"] - ins["Y"]},
            grad=_minus_grad_maker, share_lod=("X", "Out"))
