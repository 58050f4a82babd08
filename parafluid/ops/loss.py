"""Loss and metric ops: cross_entropy, softmax_with_cross_entropy, accuracy, auc,
square_error_cost, sigmoid_cross_entropy_with_logits, log_loss, huber_loss, label_smooth.
(hsigmoid and nce are in ``vocab_loss.py``.)

Fluid's numerics: the softmax inside softmax_with_cross_entropy clips the shifted logits at
-64, and cross_entropy's log maps ±inf to ±1e20, so a confidently wrong prediction has a
large finite loss (see docs/fluid_compat.md).

Label slots never get gradients. Hard labels are int64 class ids with a trailing dim of 1;
rows whose label equals ``ignore_index`` contribute zero loss and zero gradient.

``accuracy`` takes the top-k ``Indices`` of a ``top_k`` op as in Fluid, or, when that input
is absent, ranks the scores in ``Out`` itself (attr ``k``); the ``accuracy`` layer uses the
second form, so it needs no other op.
"""

from __future__ import annotations

from typing import Any

import torch

from .activation import clipped_log_softmax
from .common import unbroadcast
from .registry import Meta, register_op

__all__: list[str] = []


def _check_label_range(op: str, label: torch.Tensor, classes: int, ignore_index: int) -> None:
    if torch.compiler.is_compiling():
        # NOTE: a check on values would split a compiled segment in two; compiled code checks
        # its gather indices itself, and a segment that fails is re-run op by op, which
        # raises this error
        return
    bad = (label != ignore_index) & ((label < 0) | (label >= classes))
    if bool(bad.any()):
        value = label[bad].reshape(-1)[0].item()
        raise ValueError(f"{op}: label {value} is out of range for {classes} classes "
                         f"(ignore_index={ignore_index})")


def _hard_label_meta(op: str, x: Meta, label: Meta, axis: int) -> None:
    if label.dtype not in ("int64", "int32"):
        raise TypeError(f"{op}: Label must be int64 class ids when soft_label=False, "
                        f"got {label.dtype}")
    want = list(x.shape)
    want[axis] = 1
    if len(label.shape) != len(want) or any(
            a != b and -1 not in (a, b) for a, b in zip(label.shape, want)):
        raise ValueError(f"{op}: Label must have shape {want} for input {list(x.shape)} "
                         f"(soft_label=False), got {list(label.shape)}")


def _soft_label_meta(op: str, x: Meta, label: Meta) -> None:
    if len(label.shape) != len(x.shape) or any(
            a != b and -1 not in (a, b) for a, b in zip(label.shape, x.shape)):
        raise ValueError(f"{op}: Label must have the shape of the input {list(x.shape)} "
                         f"when soft_label=True, got {list(label.shape)}")


# ----------------------------------------------------------------------------- cross_entropy


def _cross_entropy_shape(ins: dict, attrs: dict) -> dict:
    x, label = ins["X"], ins["Label"]
    if attrs["soft_label"]:
        _soft_label_meta("cross_entropy", x, label)
    else:
        _hard_label_meta("cross_entropy", x, label, len(x.shape) - 1)
    return {"Y": Meta((*x.shape[:-1], 1), x.dtype)}


def _hard_pick(x: torch.Tensor, label: torch.Tensor, ignore_index: int,
               axis: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(``x`` at each label along ``axis``, mask of rows that are not ignored)."""
    label = label.long()
    valid = label != ignore_index
    safe = torch.where(valid, label, torch.zeros((), dtype=label.dtype, device=label.device))
    return x.gather(axis, safe), valid


# Fluid's "tolerable value": a log that is ±inf becomes ±1e20, so the loss of a probability
# of exactly 0 is large and finite, not inf (and then NaN).
TOLERABLE = 1e20


def _tolerable_log(x: torch.Tensor) -> torch.Tensor:
    return torch.log(x).nan_to_num_(nan=float("nan"), posinf=TOLERABLE, neginf=-TOLERABLE)


def _cross_entropy(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, label = ins["X"], ins["Label"]
    if attrs["soft_label"]:
        return {"Y": -(label * _tolerable_log(x)).sum(-1, keepdim=True)}
    ignore = attrs["ignore_index"]
    _check_label_range("cross_entropy", label, x.shape[-1], ignore)
    picked, valid = _hard_pick(x, label, ignore, x.dim() - 1)
    return {"Y": torch.where(valid, -_tolerable_log(picked), torch.zeros_like(picked))}


def _cross_entropy_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, label, dy = ins["X"], ins["Label"], ins["Y@GRAD"]
    if attrs["soft_label"]:
        return {"X@GRAD": -dy * label / x}
    picked, valid = _hard_pick(x, label, attrs["ignore_index"], x.dim() - 1)
    g = torch.where(valid, -dy / picked, torch.zeros_like(picked))
    safe = torch.where(valid, label.long(), torch.zeros_like(label, dtype=torch.long))
    return {"X@GRAD": torch.zeros_like(x).scatter_(x.dim() - 1, safe, g)}


register_op("cross_entropy", inputs=("X", "Label"), outputs=("Y",),
            attrs={"soft_label": False, "ignore_index": -100},
            infer_shape=_cross_entropy_shape, kernel=_cross_entropy,
            grad_kernel=_cross_entropy_grad, grad_uses=("X", "Label"),
            no_grad_inputs=("Label",))

# ----------------------------------------------------------------------------- softmax + CE


def _norm_axis(axis: int, ndim: int, op: str) -> int:
    if not -ndim <= axis < ndim:
        raise ValueError(f"{op}: axis {axis} is out of range for a {ndim}-D input")
    return axis % ndim


def _softmax_ce_shape(ins: dict, attrs: dict) -> dict:
    logits, label = ins["Logits"], ins["Label"]
    op = "softmax_with_cross_entropy"
    axis = _norm_axis(attrs["axis"], len(logits.shape), op)
    if attrs["soft_label"]:
        _soft_label_meta(op, logits, label)
    else:
        _hard_label_meta(op, logits, label, axis)
    loss_shape = list(logits.shape)
    loss_shape[axis] = 1
    return {"Softmax": logits, "Loss": Meta(tuple(loss_shape), logits.dtype)}


def _softmax_ce(ins: dict, attrs: dict, ctx: Any) -> dict:
    logits, label = ins["Logits"], ins["Label"]
    axis = _norm_axis(attrs["axis"], logits.dim(), "softmax_with_cross_entropy")
    # NOTE: always the numerically stable form (log-sum-exp, with Fluid's clip of the shifted
    # logits at -64); numeric_stable_mode=False in Fluid only trades accuracy for speed on GPU.
    logp = clipped_log_softmax(logits, axis)
    if attrs["soft_label"]:
        loss = -(label * logp).sum(axis, keepdim=True)
    elif _all_labels_in_range(label, logits.shape[axis], attrs["ignore_index"]):
        loss = -logp.gather(axis, label.long())  # the common case: no row is ignored
    else:
        ignore = attrs["ignore_index"]
        _check_label_range("softmax_with_cross_entropy", label, logits.shape[axis], ignore)
        picked, valid = _hard_pick(logp, label, ignore, axis)
        loss = torch.where(valid, -picked, torch.zeros_like(picked))
    return {"Softmax": logp.exp(), "Loss": loss}


def _all_labels_in_range(label: torch.Tensor, classes: int, ignore_index: int) -> bool:
    """True when every label is a valid class and none equals ``ignore_index``.

    One reduction instead of the masked path's half dozen small ops: this loss runs every
    training step, and at small batch sizes its op count, not its arithmetic, is the cost.
    """
    if label.numel() == 0:
        return False
    lo, hi = torch.aminmax(label)
    lo, hi = int(lo), int(hi)
    return 0 <= lo and hi < classes and not lo <= ignore_index <= hi


def _softmax_ce_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    softmax, label = ins["Softmax"], ins["Label"]
    dloss, dsoftmax = ins.get("Loss@GRAD"), ins.get("Softmax@GRAD")
    axis = _norm_axis(attrs["axis"], softmax.dim(), "softmax_with_cross_entropy")
    grad = torch.zeros_like(softmax)
    if dloss is not None:
        if attrs["soft_label"]:
            # d/dz of -sum(label * log_softmax(z)); equals softmax - label when rows sum to 1.
            grad = (softmax * label.sum(axis, keepdim=True) - label) * dloss
        elif _all_labels_in_range(label, softmax.shape[axis], attrs["ignore_index"]):
            grad = softmax * dloss
            grad.scatter_add_(axis, label.long(), -dloss.expand_as(label).to(grad.dtype))
        else:
            _, valid = _hard_pick(softmax, label, attrs["ignore_index"], axis)
            safe = torch.where(valid, label.long(), torch.zeros_like(label, dtype=torch.long))
            onehot = torch.zeros_like(softmax).scatter_(axis, safe, 1.0)
            grad = torch.where(valid, (softmax - onehot) * dloss, grad)
    if dsoftmax is not None:
        # Fluid drops this term; it matters when the returned softmax is used downstream.
        grad = grad + softmax * (dsoftmax - (dsoftmax * softmax).sum(axis, keepdim=True))
    return {"Logits@GRAD": grad}


register_op("softmax_with_cross_entropy", inputs=("Logits", "Label"),
            outputs=("Softmax", "Loss"),
            attrs={"soft_label": False, "ignore_index": -100, "numeric_stable_mode": True,
                   "axis": -1},
            infer_shape=_softmax_ce_shape, kernel=_softmax_ce, grad_kernel=_softmax_ce_grad,
            grad_uses=("Label", "Softmax"), no_grad_inputs=("Label",),
            grad_infer_shape=lambda ins, attrs: {"Logits@GRAD": ins["Softmax"]})

# ----------------------------------------------------------------------------- accuracy


def _accuracy_shape(ins: dict, attrs: dict) -> dict:
    out, indices, label = ins["Out"], ins["Indices"], ins["Label"]
    # NOTE: a float label holding class ids is accepted, as Fluid programs rely on it.
    pred = indices if indices is not None else out
    rows = pred.shape[0]
    if label.shape[0] not in (rows, -1) and rows != -1:
        raise ValueError(f"accuracy: Label has {label.shape[0]} rows but the predictions "
                         f"{list(pred.shape)} have {rows}")
    if indices is None and attrs["k"] < 1:
        raise ValueError(f"accuracy: k must be >= 1, got {attrs['k']}")
    return {"Accuracy": Meta((1,), "float32"), "Correct": Meta((1,), "int32"),
            "Total": Meta((1,), "int32")}


def _accuracy(ins: dict, attrs: dict, ctx: Any) -> dict:
    out, indices, label = ins["Out"], ins["Indices"], ins["Label"]
    if indices is None:
        # Without a top_k op in front, rank the scores here.
        k = min(int(attrs["k"]), out.shape[-1])
        indices = out.reshape(out.shape[0], -1).topk(k, dim=1).indices
    rows = indices.shape[0]
    hit = (indices.reshape(rows, -1) == label.reshape(rows, 1).long().to(indices.dtype)).any(1)
    correct = hit.sum().to(torch.int32).reshape(1)
    total = torch.full((1,), rows, dtype=torch.int32, device=hit.device)
    acc = (correct.float() / max(rows, 1)).reshape(1)
    return {"Accuracy": acc, "Correct": correct, "Total": total}


register_op("accuracy", inputs=("Out", "Indices?", "Label"),
            outputs=("Accuracy", "Correct", "Total"), attrs={"k": 1},
            infer_shape=_accuracy_shape, kernel=_accuracy)

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
            grad_kernel=_square_error_grad, grad_uses=("X", "Y"))

# ----------------------------------------------------------------------------- auc


def _auc_shape(ins: dict, attrs: dict) -> dict:
    pred, stat = ins["Predict"], ins["StatPos"]
    if len(pred.shape) != 2 or pred.shape[1] not in (2, -1):
        raise ValueError(f"auc: Predict must be [N, 2] class probabilities, got "
                         f"{list(pred.shape)}")
    if attrs["curve"] != "ROC":
        raise ValueError(f"auc: only curve='ROC' is supported, got {attrs['curve']!r}")
    width = int(attrs["num_thresholds"]) + 1
    if stat.shape[-1] != width:
        raise ValueError(f"auc: StatPos has {stat.shape[-1]} buckets but num_thresholds + 1 = "
                         f"{width}")
    return {"AUC": Meta((1,), "float64"), "StatPosOut": ins["StatPos"],
            "StatNegOut": ins["StatNeg"]}


def _auc(ins: dict, attrs: dict, ctx: Any) -> dict:
    # Buckets of the positive-class probability; rows of StatPos/StatNeg are a window of the
    # last ``slide_steps`` batches (one accumulating row when slide_steps is 0).
    pred, label = ins["Predict"], ins["Label"].reshape(-1)
    pos, neg = ins["StatPos"], ins["StatNeg"]
    nt = int(attrs["num_thresholds"])
    bins = (pred[:, 1].double() * nt).long().clamp_(0, nt)
    batch_pos = torch.bincount(bins[label != 0], minlength=nt + 1).to(pos.dtype)
    batch_neg = torch.bincount(bins[label == 0], minlength=nt + 1).to(neg.dtype)
    if int(attrs["slide_steps"]) == 0:
        pos.view(-1, nt + 1)[0].add_(batch_pos)
        neg.view(-1, nt + 1)[0].add_(batch_neg)
    else:
        for stat, batch in ((pos, batch_pos), (neg, batch_neg)):
            rows = stat.view(-1, nt + 1)
            rows.copy_(torch.roll(rows, -1, 0))
            rows[-1] = batch
    tot_pos = pos.view(-1, nt + 1).sum(0).double().flip(0).cumsum(0)
    tot_neg = neg.view(-1, nt + 1).sum(0).double().flip(0).cumsum(0)
    zero = torch.zeros(1, dtype=torch.float64, device=pred.device)
    tp, fp = torch.cat([zero, tot_pos]), torch.cat([zero, tot_neg])
    area = ((fp[1:] - fp[:-1]) * (tp[1:] + tp[:-1]) / 2.0).sum()
    denom = tp[-1] * fp[-1]
    auc = torch.where(denom > 0, area / denom.clamp(min=1.0), torch.zeros_like(area))
    return {"AUC": auc.reshape(1), "StatPosOut": pos, "StatNegOut": neg}


register_op("auc", inputs=("Predict", "Label", "StatPos", "StatNeg"),
            outputs=("AUC", "StatPosOut", "StatNegOut"),
            attrs={"curve": "ROC", "num_thresholds": 4095, "slide_steps": 1},
            infer_shape=_auc_shape, kernel=_auc)

# ----------------------------------------------------------------------------- sigmoid CE


def _same_shape(op: str, x: Meta, label: Meta) -> None:
    if len(x.shape) != len(label.shape) or any(
            a != b and -1 not in (a, b) for a, b in zip(x.shape, label.shape)):
        raise ValueError(f"{op}: Label {list(label.shape)} must have the shape of X "
                         f"{list(x.shape)}")


def _sigmoid_ce_shape(ins: dict, attrs: dict) -> dict:
    _same_shape("sigmoid_cross_entropy_with_logits", ins["X"], ins["Label"])
    return {"Out": ins["X"]}


def _sigmoid_ce_valid(label: torch.Tensor, attrs: dict, x: torch.Tensor) -> tuple:
    valid = (label != attrs["ignore_index"]).to(x.dtype)
    norm = valid.sum().clamp(min=1.0) if attrs["normalize"] else None
    return valid, norm


def _sigmoid_ce(ins: dict, attrs: dict, ctx: Any) -> dict:
    # max(x, 0) - x*z + log(1 + exp(-|x|)): exact and overflow-free for any logit
    x, z = ins["X"], ins["Label"]
    loss = x.clamp(min=0) - x * z + torch.log1p(torch.exp(-x.abs()))
    valid, norm = _sigmoid_ce_valid(z, attrs, x)
    loss = loss * valid
    return {"Out": loss / norm if norm is not None else loss}


def _sigmoid_ce_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, z, d = ins["X"], ins["Label"], ins["Out@GRAD"]
    valid, norm = _sigmoid_ce_valid(z, attrs, x)
    g = (torch.sigmoid(x) - z) * valid * d
    return {"X@GRAD": g / norm if norm is not None else g}


register_op("sigmoid_cross_entropy_with_logits", inputs=("X", "Label"), outputs=("Out",),
            attrs={"ignore_index": -100, "normalize": False},
            infer_shape=_sigmoid_ce_shape, kernel=_sigmoid_ce, grad_kernel=_sigmoid_ce_grad,
            grad_uses=("X", "Label"), no_grad_inputs=("Label",))

# ----------------------------------------------------------------------------- log_loss


def _log_loss_shape(ins: dict, attrs: dict) -> dict:
    _same_shape("log_loss", ins["Predicted"], ins["Labels"])
    return {"Loss": ins["Predicted"]}


def _log_loss(ins: dict, attrs: dict, ctx: Any) -> dict:
    p, y, eps = ins["Predicted"], ins["Labels"], attrs["epsilon"]
    return {"Loss": -y * torch.log(p + eps) - (1 - y) * torch.log(1 - p + eps)}


def _log_loss_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    p, y, d, eps = ins["Predicted"], ins["Labels"], ins["Loss@GRAD"], attrs["epsilon"]
    return {"Predicted@GRAD": d * (-y / (p + eps) + (1 - y) / (1 - p + eps))}


register_op("log_loss", inputs=("Predicted", "Labels"), outputs=("Loss",),
            attrs={"epsilon": 1e-4}, infer_shape=_log_loss_shape, kernel=_log_loss,
            grad_kernel=_log_loss_grad, grad_uses=("Predicted", "Labels"),
            no_grad_inputs=("Labels",))

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
    dr = d * r.clamp(-delta, delta)
    out = {}
    if "X" in ctx.need:
        out["X@GRAD"] = -dr
    if "Y" in ctx.need:
        out["Y@GRAD"] = dr
    return out


register_op("huber_loss", inputs=("X", "Y"), outputs=("Out", "Residual"),
            attrs={"delta": 1.0}, infer_shape=_huber_shape, kernel=_huber,
            grad_kernel=_huber_grad, grad_uses=("Residual",),
            grad_infer_shape=lambda ins, attrs: {"X@GRAD": ins["Residual"],
                                                 "Y@GRAD": ins["Residual"]})

# ----------------------------------------------------------------------------- label_smooth


def _label_smooth_shape(ins: dict, attrs: dict) -> dict:
    x, prior = ins["X"], ins.get("PriorDist")
    if prior is not None and prior.shape[-1] not in (x.shape[-1], -1):
        raise ValueError(f"label_smooth: PriorDist {list(prior.shape)} must have the "
                         f"{x.shape[-1]} classes of X")
    return {"Out": x}


def _label_smooth(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, prior, eps = ins["X"], ins.get("PriorDist"), attrs["epsilon"]
    smooth = prior.reshape(-1) if prior is not None else 1.0 / x.shape[-1]
    return {"Out": (1.0 - eps) * x + eps * smooth}


register_op("label_smooth", inputs=("X", "PriorDist?"), outputs=("Out",),
            attrs={"epsilon": 0.0}, infer_shape=_label_smooth_shape, kernel=_label_smooth,
            grad_kernel=lambda ins, attrs, ctx: {
                "X@GRAD": ins["Out@GRAD"] * (1.0 - attrs["epsilon"])},
            grad_uses=(), no_grad_inputs=("PriorDist",),
            grad_infer_shape=lambda ins, attrs: {"X@GRAD": ins["Out@GRAD"]})
