"""Losses over class scores and probabilities: cross_entropy, softmax_with_cross_entropy,
sigmoid_cross_entropy_with_logits, log_loss, label_smooth, kldiv_loss, bpr_loss and
teacher_student_sigmoid_loss. Losses of distances between values are in ``loss_distance.py``,
hsigmoid and nce in ``vocab_loss.py``, accuracy and auc in ``metric.py``.

Fluid's numerics: the softmax inside softmax_with_cross_entropy clips the shifted logits at
-64, and cross_entropy's log maps ±inf to ±1e20, so a confidently wrong prediction has a
large finite loss (see docs/fluid_compat.md).

Label slots never get gradients. Hard labels are int64 class ids with a trailing dim of 1;
rows whose label equals ``ignore_index`` contribute zero loss and zero gradient.

"""

from __future__ import annotations

from typing import Any

import torch

from .activation import clipped_log_softmax
from .registry import GRAD, GradContext, Meta, register_op

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


def _check_label_dtype(op: str, label: torch.Tensor) -> None:
    # NOTE: checked when the kernel runs, as Fluid does: a program with a float label
    # still builds (and can be saved); running it is the error.
    if label.dtype not in (torch.int64, torch.int32):
        raise TypeError(f"{op}: Label must be int64 class ids when soft_label=False, "
                        f"got {str(label.dtype).replace('torch.', '')}")


def _hard_label_meta(op: str, x: Meta, label: Meta, axis: int,
                     squeezed_ok: bool = False) -> bool:
    """Check a hard Label's shape; True when it is the input's shape without its last dim
    (cross_entropy's ``[N]`` label for an ``[N, D]`` input, which Fluid takes too)."""
    want = list(x.shape)
    want[axis] = 1
    if squeezed_ok and axis == len(want) - 1 and len(label.shape) == len(want) - 1 and all(
            a == b or -1 in (a, b) for a, b in zip(label.shape, want)):
        return True
    if len(label.shape) != len(want) or any(
            a != b and -1 not in (a, b) for a, b in zip(label.shape, want)):
        raise ValueError(f"{op}: Label must have shape {want} for input {list(x.shape)} "
                         f"(soft_label=False), got {list(label.shape)}")
    return False


def _with_class_dim(label: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, bool]:
    """The label with a trailing class dim of 1 (added when it came without one)."""
    if label.dim() == x.dim() - 1:
        return label.unsqueeze(-1), True
    return label, False


def _soft_label_meta(op: str, x: Meta, label: Meta) -> None:
    if len(label.shape) != len(x.shape) or any(
            a != b and -1 not in (a, b) for a, b in zip(label.shape, x.shape)):
        raise ValueError(f"{op}: Label must have the shape of the input {list(x.shape)} "
                         f"when soft_label=True, got {list(label.shape)}")


def _slots_same_shape(op: str, a: str, b: str, ins: dict) -> None:
    sa, sb = ins[a].shape, ins[b].shape
    if len(sa) != len(sb) or any(x != y and -1 not in (x, y) for x, y in zip(sa, sb)):
        raise ValueError(f"{op}: {a} {list(sa)} and {b} {list(sb)} must have the same shape")


def _rows_meta(x: Meta) -> Meta:
    return Meta((x.shape[0], 1), x.dtype)


# ----------------------------------------------------------------------------- cross_entropy


def _cross_entropy_shape(ins: dict, attrs: dict) -> dict:
    x, label = ins["X"], ins["Label"]
    if attrs["soft_label"]:
        _soft_label_meta("cross_entropy", x, label)
    elif _hard_label_meta("cross_entropy", x, label, len(x.shape) - 1, squeezed_ok=True):
        return {"Y": Meta(tuple(x.shape[:-1]), x.dtype)}
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
    _check_label_dtype("cross_entropy", label)
    _check_label_range("cross_entropy", label, x.shape[-1], ignore)
    label, squeezed = _with_class_dim(label, x)
    picked, valid = _hard_pick(x, label, ignore, x.dim() - 1)
    y = torch.where(valid, -_tolerable_log(picked), torch.zeros_like(picked))
    return {"Y": y.squeeze(-1) if squeezed else y}


def _cross_entropy_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, label, dy = ins["X"], ins["Label"], ins["Y@GRAD"]
    if attrs["soft_label"]:
        return {"X@GRAD": -dy * label / x}
    label, squeezed = _with_class_dim(label, x)
    if squeezed:
        dy = dy.unsqueeze(-1)
    picked, valid = _hard_pick(x, label, attrs["ignore_index"], x.dim() - 1)
    g = torch.where(valid, -dy / picked, torch.zeros_like(picked))
    safe = torch.where(valid, label.long(), torch.zeros_like(label, dtype=torch.long))
    return {"X@GRAD": torch.zeros_like(x).scatter_(x.dim() - 1, safe, g)}


register_op("cross_entropy", inputs=("X", "Label"), outputs=("Y",),
            attrs={"soft_label": False, "ignore_index": -100},
            infer_shape=_cross_entropy_shape, kernel=_cross_entropy,
            grad_kernel=_cross_entropy_grad, grad_uses=("X", "Label"),
            no_grad_inputs=("Label",), share_lod=("X", "Y"))


# ----------------------------------------------------------------------------- cross_entropy2

# Fluid 1.6's layers.cross_entropy with hard labels: the probability picked at each label is
# kept (MatchX) and the input's shape recorded (XShape, a [0, *x.shape] tensor), so that the
# gradient op, ``cross_entropy_grad2``, does not need X itself.


def _cross_entropy2_shape(ins: dict, attrs: dict) -> dict:
    x, label = ins["X"], ins["Label"]
    squeezed = _hard_label_meta("cross_entropy2", x, label, len(x.shape) - 1, squeezed_ok=True)
    picked = Meta((*x.shape[:-1], 1), x.dtype)
    y = Meta(tuple(x.shape[:-1]), x.dtype) if squeezed else picked
    return {"Y": y, "MatchX": picked, "XShape": Meta((0, *x.shape), x.dtype)}


def _cross_entropy2(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, label, ignore = ins["X"], ins["Label"], attrs["ignore_index"]
    _check_label_dtype("cross_entropy2", label)
    _check_label_range("cross_entropy2", label, x.shape[-1], ignore)
    label, squeezed = _with_class_dim(label, x)
    picked, valid = _hard_pick(x, label, ignore, x.dim() - 1)
    zeros = torch.zeros_like(picked)
    y = torch.where(valid, -_tolerable_log(picked), zeros)
    return {"Y": y.squeeze(-1) if squeezed else y,
            "MatchX": torch.where(valid, picked, zeros),
            "XShape": x.new_empty((0, *x.shape))}


def _cross_entropy2_grad_maker(op: Any, no_grad: set, ctx: GradContext) -> list[dict]:
    x = op.input("X")[0]
    if x in no_grad:
        return []
    return [{"type": "cross_entropy_grad2",
             "inputs": {"Label": op.input("Label"), "MatchX": op.output("MatchX"),
                        "XShape": op.output("XShape"), "Y@GRAD": [op.output("Y")[0] + GRAD]},
             "outputs": {"X@GRAD": [x + GRAD]},
             "attrs": {"ignore_index": op.attr("ignore_index")}}]


def _cross_entropy_grad2(ins: dict, attrs: dict, ctx: Any) -> dict:
    label, match, dy = ins["Label"], ins["MatchX"], ins["Y@GRAD"]
    shape = tuple(ins["XShape"].shape[1:])
    if label.dim() == len(shape) - 1:  # a label without the class dim (and dy as Y)
        label, dy = label.unsqueeze(-1), dy.unsqueeze(-1)
    valid = label != attrs["ignore_index"]
    g = torch.where(valid, -dy / match, torch.zeros_like(match))
    safe = torch.where(valid, label.long(), torch.zeros_like(label, dtype=torch.long))
    return {"X@GRAD": dy.new_zeros(shape).scatter_(len(shape) - 1, safe, g)}


register_op("cross_entropy2", inputs=("X", "Label"), outputs=("Y", "MatchX", "XShape"),
            attrs={"ignore_index": -100}, infer_shape=_cross_entropy2_shape,
            kernel=_cross_entropy2, grad=_cross_entropy2_grad_maker, share_lod=("X", "Y"))
register_op("cross_entropy_grad2", inputs=("Label", "MatchX", "XShape", "Y@GRAD"),
            outputs=("X@GRAD",), attrs={"ignore_index": -100},
            infer_shape=lambda ins, attrs: {
                "X@GRAD": Meta(tuple(ins["XShape"].shape[1:]), ins["XShape"].dtype)},
            kernel=_cross_entropy_grad2)


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
    else:
        _check_label_dtype("softmax_with_cross_entropy", label)
        if _all_labels_in_range(label, logits.shape[axis], attrs["ignore_index"]):
            loss = -logp.gather(axis, label.long())  # the common case: no row is ignored
        else:
            ignore = attrs["ignore_index"]
            _check_label_range("softmax_with_cross_entropy", label, logits.shape[axis],
                               ignore)
            picked, valid = _hard_pick(logp, label, ignore, axis)
            loss = torch.where(valid, -picked, torch.zeros_like(picked))
    return {"Softmax": logp.exp(), "Loss": loss}


def _all_labels_in_range(label: torch.Tensor, classes: int, ignore_index: int) -> bool:
    """True when every label is a valid class and none equals ``ignore_index``.

    One reduction instead of the masked path's half dozen small ops: this loss runs every
    training step, and at small batch sizes its op count, not its arithmetic, is the cost.
    """
    if label.numel() == 0 or torch.compiler.is_compiling():
        return False  # compiled: the masked path, one fused kernel and no branch on values
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
            grad_infer_shape=lambda ins, attrs: {"Logits@GRAD": ins["Softmax"]},
            share_lod=("Logits", ("Softmax", "Loss")))


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


# ----------------------------------------------------------------------------- kldiv_loss

_REDUCTIONS = ("none", "batchmean", "mean", "sum")


def _kldiv_shape(ins: dict, attrs: dict) -> dict:
    _slots_same_shape("kldiv_loss", "X", "Target", ins)
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


# ----------------------------------------------------------------------------- bpr_loss


def _bpr_shape(ins: dict, attrs: dict) -> dict:
    # NOTE: Fluid's op takes any rank: the last dim of X is the classes, the leading dims
    # are rows (X [..., C], Label int64 [..., 1], Y [..., 1]), as its kernel's 2-D view
    x, label = ins["X"], ins["Label"]
    if len(x.shape) < 1 or len(label.shape) != len(x.shape) or label.dtype != "int64" or \
            label.shape[-1] not in (1, -1):
        raise ValueError(f"bpr_loss: X must be [..., C] and Label int64 [..., 1] of the same "
                         f"rank, got X {list(x.shape)} and Label {label.dtype} "
                         f"{list(label.shape)}")
    lead_x, lead_l = x.shape[:-1], label.shape[:-1]
    if all(d > 0 for d in lead_x + lead_l) and tuple(lead_x) != tuple(lead_l):
        raise ValueError(f"bpr_loss: X and Label must agree on all but the last dim, got X "
                         f"{list(x.shape)} and Label {list(label.shape)}")
    if x.shape[-1] != -1 and x.shape[-1] < 2:
        raise ValueError(f"bpr_loss: X needs at least 2 classes, got {list(x.shape)}")
    return {"Y": Meta(tuple(x.shape[:-1]) + (1,), x.dtype)}


def _bpr_margins(x: torch.Tensor, label: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``x[label] - x[j]`` for every class ``j`` and the mask of ``j != label`` (rows of
    the 2-D view)."""
    lab = label.reshape(-1, 1).long()
    if lab.numel() and (int(lab.min()) < 0 or int(lab.max()) >= x.shape[1]):
        raise ValueError(f"bpr_loss: a label is out of range for {x.shape[1]} classes")
    others = torch.ones_like(x, dtype=torch.bool).scatter_(1, lab, False)
    return x.gather(1, lab) - x, others


def _bpr(ins: dict, attrs: dict, ctx: Any) -> dict:
    """Per row: ``-mean_{j != label} log(sigmoid(x[label] - x[j]))`` (x are scores)."""
    x = ins["X"]
    rows = x.reshape(-1, x.shape[-1])
    margin, others = _bpr_margins(rows, ins["Label"])
    terms = torch.where(others, torch.nn.functional.logsigmoid(margin), torch.zeros_like(rows))
    y = -terms.sum(1, keepdim=True) / (rows.shape[1] - 1)
    return {"Y": y.reshape(tuple(x.shape[:-1]) + (1,))}


def _bpr_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, dy = ins["X"], ins["Y@GRAD"]
    rows = x.reshape(-1, x.shape[-1])
    margin, others = _bpr_margins(rows, ins["Label"])
    # d/dx_j of -log sigmoid(x_l - x_j) is sigmoid(-(x_l - x_j)); x_l gets minus their sum
    g = torch.where(others, torch.sigmoid(-margin), torch.zeros_like(rows)) / (rows.shape[1] - 1)
    lab = ins["Label"].reshape(-1, 1).long()
    g = g.scatter(1, lab, -g.sum(1, keepdim=True))
    return {"X@GRAD": (g * dy.reshape(-1, 1)).reshape(x.shape)}


register_op("bpr_loss", inputs=("X", "Label"), outputs=("Y",), infer_shape=_bpr_shape,
            kernel=_bpr, grad_kernel=_bpr_grad, grad_uses=("X", "Label"),
            no_grad_inputs=("Label",))


# ----------------------------------------------------------------------------- teacher-student


def _ts_shape(ins: dict, attrs: dict) -> dict:
    x = ins["X"]
    _slots_same_shape("teacher_student_sigmoid_loss", "X", "Label", ins)
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
