"""More loss ops of Fluid 1.6: smooth_l1_loss, kldiv_loss, margin_rank_loss, rank_loss,
bpr_loss. Each gradient is the derivative written out; labels get none.
"""

from __future__ import annotations

from typing import Any

import torch

from .registry import Meta, register_op

__all__: list[str] = []


def _same_shape(op: str, a: str, b: str, ins: dict) -> None:
    sa, sb = ins[a].shape, ins[b].shape
    if len(sa) != len(sb) or any(x != y and -1 not in (x, y) for x, y in zip(sa, sb)):
        raise ValueError(f"{op}: {a} {list(sa)} and {b} {list(sb)} must have the same shape")


def _rows_meta(x: Meta) -> Meta:
    return Meta((x.shape[0], 1), x.dtype)


# ----------------------------------------------------------------------------- smooth_l1_loss


def _smooth_l1_shape(ins: dict, attrs: dict) -> dict:
    _same_shape("smooth_l1_loss", "X", "Y", ins)
    for slot in ("InsideWeight", "OutsideWeight"):
        if ins.get(slot) is not None:
            _same_shape("smooth_l1_loss", "X", slot, ins)
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
    g = g * dout.reshape((-1,) + (1,) * (diff.dim() - 1))
    out = {}
    if "X" in ctx.need:
        out["X@GRAD"] = g
    if "Y" in ctx.need:
        out["Y@GRAD"] = -g
    return out


register_op("smooth_l1_loss", inputs=("X", "Y", "InsideWeight?", "OutsideWeight?"),
            outputs=("Diff", "Out"), attrs={"sigma": 1.0},
            infer_shape=_smooth_l1_shape, kernel=_smooth_l1, grad_kernel=_smooth_l1_grad,
            grad_uses=("X", "Y", "InsideWeight", "OutsideWeight", "Diff"),
            no_grad_inputs=("InsideWeight", "OutsideWeight"))

# ----------------------------------------------------------------------------- kldiv_loss

_REDUCTIONS = ("none", "batchmean", "mean", "sum")


def _kldiv_shape(ins: dict, attrs: dict) -> dict:
    _same_shape("kldiv_loss", "X", "Target", ins)
    if attrs["reduction"] not in _REDUCTIONS:
        raise ValueError(f"kldiv_loss: reduction must be one of {_REDUCTIONS}, "
                         f"got {attrs['reduction']!r}")
    x = ins["X"]
    return {"Loss": x if attrs["reduction"] == "none" else Meta((1,), x.dtype)}


def _kldiv_divisor(x: torch.Tensor, reduction: str) -> float:
    return {"batchmean": float(x.shape[0]), "mean": float(x.numel())}.get(reduction, 1.0)


def _kldiv(ins: dict, attrs: dict, ctx: Any) -> dict:
    """``target * (log(target) - x)`` where ``target > 0``, 0 elsewhere; then reduced."""
    x, t = ins["X"], ins["Target"].to(ins["X"].dtype)
    pos = t > 0
    safe = torch.where(pos, t, torch.ones_like(t))
    loss = torch.where(pos, t * (torch.log(safe) - x), torch.zeros_like(x))
    reduction = attrs["reduction"]
    if reduction == "none":
        return {"Loss": loss}
    return {"Loss": (loss.sum() / _kldiv_divisor(x, reduction)).reshape(1)}


def _kldiv_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, t, dloss = ins["X"], ins["Target"].to(ins["X"].dtype), ins["Loss@GRAD"]
    g = torch.where(t > 0, -t, torch.zeros_like(t))
    reduction = attrs["reduction"]
    if reduction == "none":
        return {"X@GRAD": g * dloss}
    return {"X@GRAD": g * (dloss.reshape(()) / _kldiv_divisor(x, reduction))}


register_op("kldiv_loss", inputs=("X", "Target"), outputs=("Loss",),
            attrs={"reduction": "mean"}, infer_shape=_kldiv_shape, kernel=_kldiv,
            grad_kernel=_kldiv_grad, grad_uses=("X", "Target"), no_grad_inputs=("Target",))

# ----------------------------------------------------------------------------- rank losses


def _pair_shape(op: str, left: str, right: str) -> Any:
    def infer(ins: dict, attrs: dict) -> dict:
        _same_shape(op, left, right, ins)
        _same_shape(op, left, "Label", ins)
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
    g = -label.to(dout.dtype) * act * dout
    out = {}
    if "X1" in ctx.need:
        out["X1@GRAD"] = g
    if "X2" in ctx.need:
        out["X2@GRAD"] = -g
    return out


register_op("margin_rank_loss", inputs=("Label", "X1", "X2"), outputs=("Out", "Activated"),
            attrs={"margin": 0.0}, infer_shape=_pair_shape("margin_rank_loss", "X1", "X2"),
            kernel=_margin_rank, grad_kernel=_margin_rank_grad,
            grad_uses=("Label", "X1", "X2", "Activated"), no_grad_inputs=("Label",))


def _rank_loss(ins: dict, attrs: dict, ctx: Any) -> dict:
    """RankNet: ``log(1 + exp(left - right)) - label * (left - right)``."""
    o = ins["Left"] - ins["Right"]
    return {"Out": torch.nn.functional.softplus(o) - ins["Label"].to(o.dtype) * o}


def _rank_loss_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    o = ins["Left"] - ins["Right"]
    g = (torch.sigmoid(o) - ins["Label"].to(o.dtype)) * ins["Out@GRAD"]
    out = {}
    if "Left" in ctx.need:
        out["Left@GRAD"] = g
    if "Right" in ctx.need:
        out["Right@GRAD"] = -g
    return out


register_op("rank_loss", inputs=("Label", "Left", "Right"), outputs=("Out",),
            infer_shape=_pair_shape("rank_loss", "Left", "Right"), kernel=_rank_loss,
            grad_kernel=_rank_loss_grad, grad_uses=("Label", "Left", "Right"),
            no_grad_inputs=("Label",))

# ----------------------------------------------------------------------------- bpr_loss


def _bpr_shape(ins: dict, attrs: dict) -> dict:
    x, label = ins["X"], ins["Label"]
    if len(x.shape) != 2 or label.dtype != "int64" or len(label.shape) != 2 or \
            label.shape[1] != 1:
        raise ValueError(f"bpr_loss: X must be [N, C] and Label int64 [N, 1], got X "
                         f"{list(x.shape)} and Label {label.dtype} {list(label.shape)}")
    if x.shape[1] != -1 and x.shape[1] < 2:
        raise ValueError(f"bpr_loss: X needs at least 2 classes, got {list(x.shape)}")
    return {"Y": _rows_meta(x)}


def _bpr_margins(x: torch.Tensor, label: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``x[label] - x[j]`` for every class ``j`` and the mask of ``j != label``."""
    lab = label.reshape(-1, 1).long()
    if lab.numel() and (int(lab.min()) < 0 or int(lab.max()) >= x.shape[1]):
        raise ValueError(f"bpr_loss: a label is out of range for {x.shape[1]} classes")
    others = torch.ones_like(x, dtype=torch.bool).scatter_(1, lab, False)
    return x.gather(1, lab) - x, others


def _bpr(ins: dict, attrs: dict, ctx: Any) -> dict:
    """Per row: ``-mean_{j != label} log(sigmoid(x[label] - x[j]))`` (x are scores)."""
    x = ins["X"]
    margin, others = _bpr_margins(x, ins["Label"])
    terms = torch.where(others, torch.nn.functional.logsigmoid(margin), torch.zeros_like(x))
    return {"Y": -terms.sum(1, keepdim=True) / (x.shape[1] - 1)}


def _bpr_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, dy = ins["X"], ins["Y@GRAD"]
    margin, others = _bpr_margins(x, ins["Label"])
    # d/dx_j of -log sigmoid(x_l - x_j) is sigmoid(-(x_l - x_j)); x_l gets minus their sum
    g = torch.where(others, torch.sigmoid(-margin), torch.zeros_like(x)) / (x.shape[1] - 1)
    lab = ins["Label"].reshape(-1, 1).long()
    g = g.scatter(1, lab, -g.sum(1, keepdim=True))
    return {"X@GRAD": g * dy}


register_op("bpr_loss", inputs=("X", "Label"), outputs=("Y",), infer_shape=_bpr_shape,
            kernel=_bpr, grad_kernel=_bpr_grad, grad_uses=("X", "Label"),
            no_grad_inputs=("Label",))

# ----------------------------------------------------------------------------- teacher-student


def _ts_shape(ins: dict, attrs: dict) -> dict:
    x = ins["X"]
    _same_shape("teacher_student_sigmoid_loss", "X", "Label", ins)
    if len(x.shape) != 2 or x.shape[1] not in (1, -1):
        raise ValueError(f"teacher_student_sigmoid_loss: X must be [N, 1], got {list(x.shape)}")
    return {"Y": x}


def _ts_loss(ins: dict, attrs: dict, ctx: Any) -> dict:
    """The label packs a click and an optional teacher score q: -2 (no q, no click), -1 (no q,
    click), q (no click), 1 + q (click). The loss is the sigmoid cross entropy against the
    click, plus the one against q when there is a q."""
    x, label = ins["X"], ins["Label"].to(ins["X"].dtype)
    sp = torch.nn.functional.softplus(x)
    y = torch.where(label < -1.0, sp,
                    torch.where(label < 0.0, sp - x, 2 * sp - x * label))
    return {"Y": y}


def _ts_loss_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    """Fluid's gradient: zero where x is at or beyond ``soft_max_{lower,up}_bound``."""
    x, label, dy = ins["X"], ins["Label"].to(ins["X"].dtype), ins["Y@GRAD"]
    up, low = float(attrs["soft_max_up_bound"]), float(attrs["soft_max_lower_bound"])
    pred = torch.sigmoid(x)
    g = torch.where(label < -1.0, pred, torch.where(label < 0.0, pred - 1.0, 2 * pred - label))
    g = torch.where((x >= up) | (x <= low), torch.zeros_like(g), g)
    return {"X@GRAD": g * dy}


register_op("teacher_student_sigmoid_loss", inputs=("X", "Label"), outputs=("Y",),
            attrs={"soft_max_up_bound": 15.0, "soft_max_lower_bound": -15.0},
            infer_shape=_ts_shape, kernel=_ts_loss, grad_kernel=_ts_loss_grad,
            grad_uses=("X", "Label"), no_grad_inputs=("Label",))

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

# ----------------------------------------------------------------------------- cvm


def _cvm_shape(ins: dict, attrs: dict) -> dict:
    x, cvm = ins["X"], ins["CVM"]
    if len(x.shape) != 2 or (x.shape[1] != -1 and x.shape[1] < 2):
        raise ValueError(f"cvm: X must be [N, D] with D >= 2 (show, click, ...), got "
                         f"{list(x.shape)}")
    if len(cvm.shape) != 2 or cvm.shape[1] not in (2, -1):
        raise ValueError(f"cvm: CVM must be [N, 2] (show, click), got {list(cvm.shape)}")
    width = x.shape[1] if attrs["use_cvm"] or x.shape[1] == -1 else x.shape[1] - 2
    return {"Y": Meta((x.shape[0], width), x.dtype)}


def _cvm(ins: dict, attrs: dict, ctx: Any) -> dict:
    """``use_cvm``: the first two columns (show, click) become ``log(show + 1)`` and
    ``log(click + 1) - log(show + 1)``; otherwise they are dropped."""
    x = ins["X"]
    if not attrs["use_cvm"]:
        return {"Y": x[:, 2:].contiguous()}
    show = torch.log(x[:, :1] + 1)
    return {"Y": torch.cat([show, torch.log(x[:, 1:2] + 1) - show, x[:, 2:]], 1)}


def _cvm_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    """Fluid's rule, not a derivative: the rest of the columns get ``Y@GRAD``, the show and
    click columns get the ``CVM`` values (what the CTR embedding update expects)."""
    dy, cvm = ins["Y@GRAD"], ins["CVM"].to(ins["Y@GRAD"].dtype)
    rest = dy[:, 2:] if attrs["use_cvm"] else dy
    return {"X@GRAD": torch.cat([cvm, rest], 1)}


register_op("cvm", inputs=("X", "CVM"), outputs=("Y",), attrs={"use_cvm": True},
            infer_shape=_cvm_shape, kernel=_cvm, grad_kernel=_cvm_grad,
            grad_uses=("X", "CVM"), no_grad_inputs=("CVM",))
