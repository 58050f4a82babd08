"""Losses of distances between values: square_error_cost, huber_loss, smooth_l1_loss, the
rank losses margin_rank_loss and rank_loss, and center_loss (which also moves the class
centers). Each gradient is the derivative written out; labels get none.
"""

from __future__ import annotations

from typing import Any

import torch

from .common import unbroadcast
from .loss import _rows_meta, _same_shape, _slots_same_shape
from .registry import Meta, register_op

__all__: list[str] = []




# ----------------------------------------------------------------------------- square_error_cost


def _square_error_shape(ins: dict, attrs: dict) -> dict:
    x, y = ins["X"], ins["Y"]
    # Fluid computes this as elementwise_sub then square, so a label [N, 1] broadcasts
    # against an input [N, k]; the result has the input's shape.
    if len(x.shape) != len(y.shape) or any(
            a != b and b != 1 and -1 not in (a, b) for a, b in zip(x.shape, y.shape)):
        raise ValueError(f"square_error_cost: label {list(y.shape)} must have the shape of "
                         f"the input {list(x.shape)} (or 1 where it broadcasts)")
    return {"Out": x}


def _square_error(ins: dict, attrs: dict, ctx: Any) -> dict:
    diff = ins["X"] - ins["Y"]
    return {"Out": diff * diff}


def _difference_grads(ctx: Any, plus: str, minus: str, g: torch.Tensor) -> dict:
    """The gradients of a loss of ``plus - minus``: ``g`` for ``plus``, ``-g`` for
    ``minus``, each only when the gradient op needs it."""
    out = {}
    if plus in ctx.need:
        out[plus + "@GRAD"] = g
    if minus in ctx.need:
        out[minus + "@GRAD"] = -g
    return out


def _square_error_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, y = ins["X"], ins["Y"]
    g = 2.0 * (x - y) * ins["Out@GRAD"]
    out = {}
    if "X" in ctx.need:
        out["X@GRAD"] = g
    if "Y" in ctx.need:
        out["Y@GRAD"] = -unbroadcast(g, y.shape)
    return out


register_op("square_error_cost", inputs=("X", "Y"), outputs=("Out",),
            infer_shape=_square_error_shape, kernel=_square_error,
            grad_kernel=_square_error_grad, grad_uses=("X", "Y"), share_lod=("X", "Out"))


# ----------------------------------------------------------------------------- huber_loss


def _huber_shape(ins: dict, attrs: dict) -> dict:
    _same_shape("huber_loss", ins["X"], ins["Y"])
    return {"Out": ins["X"], "Residual": ins["X"]}


def _huber(ins: dict, attrs: dict, ctx: Any) -> dict:
    # r = y - x;  0.5 r² where |r| <= delta, else delta (|r| - delta/2)
    r = ins["Y"] - ins["X"]
    delta = attrs["delta"]
    out = torch.where(r.abs() <= delta, 0.5 * r * r, delta * (r.abs() - 0.5 * delta))
    return {"Out": out, "Residual": r}


def _huber_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    r, d, delta = ins["Residual"], ins["Out@GRAD"], attrs["delta"]
    return _difference_grads(ctx, "Y", "X", d * r.clamp(-delta, delta))


register_op("huber_loss", inputs=("X", "Y"), outputs=("Out", "Residual"),
            attrs={"delta": 1.0}, infer_shape=_huber_shape, kernel=_huber,
            grad_kernel=_huber_grad, grad_uses=("Residual",),
            grad_infer_shape=lambda ins, attrs: {"X@GRAD": ins["Residual"],
                                                 "Y@GRAD": ins["Residual"]})


# ----------------------------------------------------------------------------- smooth_l1_loss


def _smooth_l1_shape(ins: dict, attrs: dict) -> dict:
    _slots_same_shape("smooth_l1_loss", "X", "Y", ins)
    for slot in ("InsideWeight", "OutsideWeight"):
        if ins.get(slot) is not None:
            _slots_same_shape("smooth_l1_loss", "X", slot, ins)
    x = ins["X"]
    if len(x.shape) < 2:
        raise ValueError(f"smooth_l1_loss: X must be at least 2-D, got {list(x.shape)}")
    return {"Diff": x, "Out": _rows_meta(x)}


def _smooth_l1(ins: dict, attrs: dict, ctx: Any) -> dict:
    """Per row: ``sum(ow * f(iw * (x - y)))`` with ``f(d) = 0.5 * (sigma * d)^2`` where
    ``|d| < 1 / sigma^2`` and ``|d| - 0.5 / sigma^2`` elsewhere."""
    x, y, iw, ow = ins["X"], ins["Y"], ins.get("InsideWeight"), ins.get("OutsideWeight")
    s2 = float(attrs["sigma"]) ** 2
    diff = x - y if iw is None else (x - y) * iw
    ad = diff.abs()
    val = torch.where(ad < 1.0 / s2, 0.5 * diff * diff * s2, ad - 0.5 / s2)
    if ow is not None:
        val = val * ow
    return {"Diff": diff, "Out": val.reshape(x.shape[0], -1).sum(1, keepdim=True)}


def _smooth_l1_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    diff, dout = ins["Diff"], ins["Out@GRAD"]
    iw, ow = ins.get("InsideWeight"), ins.get("OutsideWeight")
    s2 = float(attrs["sigma"]) ** 2
    g = torch.where(diff.abs() < 1.0 / s2, diff * s2, torch.sign(diff))
    if ow is not None:
        g = g * ow
    if iw is not None:
        g = g * iw
    return _difference_grads(ctx, "X", "Y", g * dout.reshape((-1,) + (1,) * (diff.dim() - 1)))


register_op("smooth_l1_loss", inputs=("X", "Y", "InsideWeight?", "OutsideWeight?"),
            outputs=("Diff", "Out"), attrs={"sigma": 1.0},
            infer_shape=_smooth_l1_shape, kernel=_smooth_l1, grad_kernel=_smooth_l1_grad,
            grad_uses=("X", "Y", "InsideWeight", "OutsideWeight", "Diff"),
            no_grad_inputs=("InsideWeight", "OutsideWeight"))


# ----------------------------------------------------------------------------- rank losses


def _pair_shape(op: str, left: str, right: str) -> Any:
    def infer(ins: dict, attrs: dict) -> dict:
        _slots_same_shape(op, left, right, ins)
        _slots_same_shape(op, left, "Label", ins)
        out = {"Out": ins[left]}
        if op == "margin_rank_loss":
            out["Activated"] = ins[left]
        return out
    return infer


def _margin_rank(ins: dict, attrs: dict, ctx: Any) -> dict:
    """``max(0, -label * (x1 - x2) + margin)``; ``Activated`` marks where it is positive."""
    label, x1, x2 = ins["Label"].to(ins["X1"].dtype), ins["X1"], ins["X2"]
    out = torch.clamp(-label * (x1 - x2) + float(attrs["margin"]), min=0.0)
    return {"Out": out, "Activated": (out > 0).to(x1.dtype)}


def _margin_rank_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    label, act, dout = ins["Label"], ins["Activated"], ins["Out@GRAD"]
    return _difference_grads(ctx, "X1", "X2", -label.to(dout.dtype) * act * dout)


register_op("margin_rank_loss", inputs=("Label", "X1", "X2"), outputs=("Out", "Activated"),
            attrs={"margin": 0.0}, infer_shape=_pair_shape("margin_rank_loss", "X1", "X2"),
            kernel=_margin_rank, grad_kernel=_margin_rank_grad,
            grad_uses=("Label", "X1", "X2", "Activated"), no_grad_inputs=("Label",))


def _rank_loss_shape(ins: dict, attrs: dict) -> dict:
    """Label, Left and Right are each ``[N]`` or ``[N, 1]`` (Fluid's rule); Out is Label's."""
    for slot in ("Label", "Left", "Right"):
        shape = ins[slot].shape
        if len(shape) not in (1, 2) or (len(shape) == 2 and shape[1] not in (1, -1)):
            raise ValueError(f"rank_loss: {slot} must have shape [N] or [N, 1], got "
                             f"{list(shape)}")
    n = ins["Label"].shape[0]
    for slot in ("Left", "Right"):
        if -1 not in (n, ins[slot].shape[0]) and ins[slot].shape[0] != n:
            raise ValueError(f"rank_loss: {slot} has {ins[slot].shape[0]} rows but Label "
                             f"has {n}")
    return {"Out": Meta(ins["Label"].shape, ins["Left"].dtype)}


def _rank_loss(ins: dict, attrs: dict, ctx: Any) -> dict:
    """RankNet: ``log(1 + exp(left - right)) - label * (left - right)``, elementwise over
    the N pairs."""
    o = ins["Left"].reshape(-1) - ins["Right"].reshape(-1)
    out = torch.nn.functional.softplus(o) - ins["Label"].reshape(-1).to(o.dtype) * o
    return {"Out": out.reshape(ins["Label"].shape)}


def _rank_loss_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    o = ins["Left"].reshape(-1) - ins["Right"].reshape(-1)
    g = (torch.sigmoid(o) - ins["Label"].reshape(-1).to(o.dtype)) * \
        ins["Out@GRAD"].reshape(-1)
    out = {}
    if "Left" in ctx.need:
        out["Left@GRAD"] = g.reshape(ins["Left"].shape)
    if "Right" in ctx.need:
        out["Right@GRAD"] = (-g).reshape(ins["Right"].shape)
    return out


register_op("rank_loss", inputs=("Label", "Left", "Right"), outputs=("Out",),
            infer_shape=_rank_loss_shape, kernel=_rank_loss,
            grad_kernel=_rank_loss_grad, grad_uses=("Label", "Left", "Right"),
            no_grad_inputs=("Label",))


# ----------------------------------------------------------------------------- center_loss


def _center_loss_shape(ins: dict, attrs: dict) -> dict:
    x, label, centers = ins["X"], ins["Label"], ins["Centers"]
    if len(x.shape) != 2 or len(centers.shape) != 2 or x.shape[1] != centers.shape[1]:
        raise ValueError(f"center_loss: X [N, D] and Centers [K, D] must share D, got "
                         f"{list(x.shape)} and {list(centers.shape)}")
    if label.dtype not in ("int32", "int64"):
        raise TypeError(f"center_loss: Label must hold int class ids, got {label.dtype}")
    return {"SampleCenterDiff": x, "Loss": _rows_meta(x), "CentersOut": centers}


def _center_loss(ins: dict, attrs: dict, ctx: Any) -> dict:
    """``0.5 * |x - c_label|^2`` per row. With ``need_update`` the centers move toward their
    samples: ``c_k += rate * sum_{label = k}(x - c_k) / (1 + count_k)`` (Fluid's rule), in
    place when ``CentersOut`` is ``Centers``."""
    x, centers = ins["X"], ins["Centers"]
    label = ins["Label"].reshape(-1).long()
    k = centers.shape[0]
    if label.numel() and (int(label.min()) < 0 or int(label.max()) >= k):
        raise ValueError(f"center_loss: a label is outside the {k} centers")
    diff = x - centers.index_select(0, label).to(x.dtype)
    loss = 0.5 * (diff * diff).sum(1, keepdim=True)
    new_centers = centers
    if attrs["need_update"]:
        rate = float(ins["CenterUpdateRate"].reshape(-1)[0])
        acc = torch.zeros_like(centers).index_add_(0, label, diff.to(centers.dtype))
        count = 1 + torch.bincount(label, minlength=k).to(centers.dtype)
        step = rate * acc / count.unsqueeze(1)
        if ctx.op.input("Centers") == ctx.op.output("CentersOut"):
            new_centers = centers.add_(step)
        else:
            new_centers = centers + step
    return {"SampleCenterDiff": diff, "Loss": loss, "CentersOut": new_centers}


register_op("center_loss", inputs=("X", "Label", "Centers", "CenterUpdateRate"),
            outputs=("SampleCenterDiff", "Loss", "CentersOut"),
            attrs={"cluster_num": 0, "need_update": True}, infer_shape=_center_loss_shape,
            kernel=_center_loss,
            grad_kernel=lambda ins, attrs, ctx: {"X@GRAD": ins["SampleCenterDiff"]
                                                 * ins["Loss@GRAD"]},
            grad_uses=("X", "SampleCenterDiff"),
            no_grad_inputs=("Label", "Centers", "CenterUpdateRate"))
