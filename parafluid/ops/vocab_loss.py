"""Losses over large output vocabularies: ``hierarchical_sigmoid`` (hsigmoid) and ``nce``.

Both replace a softmax over every class: hsigmoid walks the label's path in Fluid's default
complete binary tree (``log2`` of the classes binary decisions); nce scores the true class
against a few sampled negatives. Label slots never get gradients.
"""

from __future__ import annotations

from typing import Any

import torch

from ..scope import SelectedRows
from .registry import Meta, register_op
from .rnn import wanted

__all__: list[str] = []

# ----------------------------------------------------------------------------- hsigmoid


def _hsig_shape(ins: dict, attrs: dict) -> dict:
    x, w, label = ins["X"], ins["W"], ins["Label"]
    table, code = ins.get("PathTable"), ins.get("PathCode")
    classes = int(attrs["num_classes"])
    if (table is None) != (code is None):
        raise ValueError("hierarchical_sigmoid: a custom tree needs both PathTable and "
                         "PathCode ([N, L] int64: each sample's nodes, -1 padded, and its "
                         "branch bits)")
    if table is not None:
        if len(table.shape) != 2 or tuple(code.shape) != tuple(table.shape):
            raise ValueError(f"hierarchical_sigmoid: PathTable and PathCode must both be "
                             f"[N, L], got {list(table.shape)} and {list(code.shape)}")
        if len(w.shape) != 2 or w.shape[1] != x.shape[-1]:
            raise ValueError(f"hierarchical_sigmoid: W must be [nodes, D] with D = "
                             f"{x.shape[-1]}, got {list(w.shape)}")
        length = table.shape[1]
    else:
        if classes < 2:
            raise ValueError(f"hierarchical_sigmoid: num_classes must be >= 2, got {classes}")
        if tuple(w.shape) != (classes - 1, x.shape[-1]):
            raise ValueError(f"hierarchical_sigmoid: W must be [num_classes - 1, D] = "
                             f"[{classes - 1}, {x.shape[-1]}], got {list(w.shape)}")
        length = (classes - 1).bit_length()
    if label.dtype not in ("int64", "int32"):
        raise TypeError(f"hierarchical_sigmoid: Label must be int64 class ids, got "
                        f"{label.dtype}")
    if attrs["remote_prefetch"] and attrs["epmap"]:
        raise ValueError("hierarchical_sigmoid: remote_prefetch from parameter servers "
                         f"(epmap {attrs['epmap']}) is not supported; keep W local")
    return {"Out": Meta((x.shape[0], 1), x.dtype), "PreOut": Meta((x.shape[0], length), x.dtype),
            "W_Out": Meta(w.shape, w.dtype)}


def _hsig_paths(label: torch.Tensor, classes: int) -> tuple:
    """Fluid's default tree: class c is the leaf c + classes of a heap; its path visits the
    inner nodes ``(code >> (j + 1)) - 1`` with branch bits ``code & (1 << j)``."""
    length = (classes - 1).bit_length()
    code = label.reshape(-1, 1).long() + classes
    j = torch.arange(length, device=label.device).reshape(1, -1)
    valid = j < (torch.floor(torch.log2(code.double())).long())
    index = torch.where(valid, (code >> (j + 1)) - 1, torch.zeros_like(code))
    bits = ((code >> j) & 1).bool() & valid
    return index, bits, valid


def _custom_paths(table: torch.Tensor, code: torch.Tensor, nodes: int) -> tuple:
    """A custom tree: sample i visits the nodes ``PathTable[i]`` up to the first negative
    entry, taking branch ``PathCode[i, j]`` at each."""
    table = table.long()
    valid = torch.cumprod((table >= 0).long(), 1).bool()
    if bool((table[valid] >= nodes).any()):
        raise ValueError(f"hierarchical_sigmoid: PathTable names a node past W's {nodes} rows")
    index = torch.where(valid, table, torch.zeros_like(table))
    bits = (code.long() != 0) & valid
    return index, bits, valid


def _hsig_pre(ins: dict, attrs: dict) -> tuple:
    x, w, bias = ins["X"], ins["W"], ins.get("Bias")
    if ins.get("PathTable") is not None:
        index, bits, valid = _custom_paths(ins["PathTable"], ins["PathCode"], w.shape[0])
    else:
        # NOTE: Fluid's kernel reads the first N entries of Label's buffer (N = X's rows):
        # a Label of [N, k] uses row 0's k entries first, and so on
        label = ins["Label"].reshape(-1)
        if label.numel() < x.shape[0]:
            raise ValueError(f"hierarchical_sigmoid: Label holds {label.numel()} class ids "
                             f"for the {x.shape[0]} rows of X")
        label = label[:x.shape[0]]
        classes = int(attrs["num_classes"])
        if label.numel() and (int(label.min()) < 0 or int(label.max()) >= classes):
            raise ValueError(f"hierarchical_sigmoid: a label is out of range for {classes} "
                             "classes")
        index, bits, valid = _hsig_paths(label, classes)
    pre = torch.einsum("nld,nd->nl", w[index], x)
    if bias is not None:
        pre = pre + bias.reshape(-1)[index]
    pre = torch.where(valid, pre.clamp(-40.0, 40.0), torch.zeros_like(pre))
    return pre, index, bits.to(x.dtype), valid


def _hsig(ins: dict, attrs: dict, ctx: Any) -> dict:
    # NOTE: as Fluid, a path shorter than the longest adds softplus(0) = log 2 for each
    # missing node: a constant that carries no gradient. PreOut is Fluid's softplus of the
    # (clipped) node scores, not the scores.
    pre, _, bits, _ = _hsig_pre(ins, attrs)
    soft = torch.nn.functional.softplus(pre)
    out = soft.sum(1, keepdim=True) - (bits * pre).sum(1, keepdim=True)
    res = {"Out": out, "PreOut": soft}
    if wanted(ctx, "W_Out"):  # Fluid's layer binds W_Out to W itself (remote prefetch)
        res["W_Out"] = ins["W"]
    return res


def _hsig_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, w, dout = ins["X"], ins["W"], ins["Out@GRAD"]
    pre, index, bits, valid = _hsig_pre(ins, attrs)
    dpre = (torch.sigmoid(pre) - bits) * valid * dout
    out = {}
    if "X" in ctx.need:
        out["X@GRAD"] = torch.einsum("nl,nld->nd", dpre, w[index])
    if "W" in ctx.need:
        rows = (dpre.unsqueeze(-1) * x.unsqueeze(1))[valid]  # [valid nodes, D]
        nodes = index[valid]
        if attrs["is_sparse"]:  # rows of W on the batch's paths (Fluid: custom trees)
            out["W@GRAD"] = SelectedRows(nodes, rows, w.shape[0])
        else:
            out["W@GRAD"] = torch.zeros_like(w).index_add_(0, nodes, rows)
    if "Bias" in ctx.need:
        bias = ins["Bias"]
        out["Bias@GRAD"] = torch.zeros_like(bias.reshape(-1)).index_add_(
            0, index.reshape(-1), dpre.reshape(-1)).reshape(bias.shape)
    return out


def _hsig_grad_shape(ins: dict, attrs: dict) -> dict:
    out = {f"{s}@GRAD": ins[s] for s in ("X", "W", "Bias") if ins.get(s) is not None}
    if attrs["is_sparse"] and "W@GRAD" in out:
        w = ins["W"]
        out["W@GRAD"] = Meta(w.shape, w.dtype, "selected_rows")
    return out


register_op("hierarchical_sigmoid",
            inputs=("X", "W", "Label", "PathTable?", "PathCode?", "Bias?"),
            outputs=("Out", "PreOut", "W_Out?"),
            attrs={"num_classes": 2, "is_sparse": False, "remote_prefetch": False,
                   "trainer_id": 0, "height_sections": [], "epmap": [], "table_names": []},
            infer_shape=_hsig_shape, kernel=_hsig, grad_kernel=_hsig_grad,
            grad_uses=("X", "W", "Label", "PathTable", "PathCode", "Bias"),
            grad_infer_shape=_hsig_grad_shape,
            no_grad_inputs=("Label", "PathTable", "PathCode"))

# ----------------------------------------------------------------------------- nce

# Fluid's sampler ids (the op's int attribute; its layer maps the names)
_NCE_SAMPLERS = {"uniform": 0, "log_uniform": 1, "custom_dist": 2}


def _sampler(attrs: dict) -> int:
    v = attrs["sampler"]
    sid = _NCE_SAMPLERS.get(v, -1) if isinstance(v, str) else int(v)
    if sid not in (0, 1, 2):
        raise ValueError(f"nce: sampler must be 0 / 'uniform', 1 / 'log_uniform' or 2 / "
                         f"'custom_dist', got {v!r}")
    return sid


def _nce_shape(ins: dict, attrs: dict) -> dict:
    x, label, w = ins["Input"], ins["Label"], ins["Weight"]
    classes = int(attrs["num_total_classes"])
    if tuple(w.shape) != (classes, x.shape[-1]):
        raise ValueError(f"nce: Weight must be [num_total_classes, D] = [{classes}, "
                         f"{x.shape[-1]}], got {list(w.shape)}")
    if label.dtype not in ("int64", "int32"):
        raise TypeError(f"nce: Label must be int64 class ids, got {label.dtype}")
    if _sampler(attrs) == 2 and any(ins.get(s) is None for s in _CUSTOM_SLOTS):
        raise ValueError(f"nce: sampler custom_dist needs the inputs {list(_CUSTOM_SLOTS)} "
                         "(layers.nce(custom_dist=...) builds them)")
    if attrs["remote_prefetch"] and attrs["epmap"]:
        raise ValueError("nce: remote_prefetch from parameter servers (epmap "
                         f"{attrs['epmap']}) is not supported; keep Weight local")
    true = label.shape[-1] if len(label.shape) == 2 else 1
    width = true + int(attrs["num_neg_samples"])
    return {"Cost": Meta((x.shape[0], 1), x.dtype),
            "SampleLogits": Meta((x.shape[0], width), x.dtype),
            "SampleLabels": Meta((x.shape[0], width), "int64")}


_CUSTOM_SLOTS = ("CustomDistProbs", "CustomDistAlias", "CustomDistAliasProbs")


def _nce_prob(ins: dict, labels: torch.Tensor, attrs: dict, dtype: torch.dtype) -> torch.Tensor:
    """Fluid's sampler probability of each class: uniform ``1 / C``, log-uniform
    ``log((k + 2) / (k + 1)) / log(C)``, or the custom distribution's own value."""
    classes, sid = int(attrs["num_total_classes"]), _sampler(attrs)
    if sid == 0:
        return torch.full(labels.shape, 1.0 / classes, dtype=dtype, device=labels.device)
    if sid == 2:
        return ins["CustomDistProbs"].reshape(-1).to(dtype)[labels]
    k = labels.to(dtype)
    return torch.log((k + 2) / (k + 1)) / torch.log(torch.tensor(float(classes), dtype=dtype))


def _negatives(ins: dict, attrs: dict, rows: int, gen: Any, device: Any) -> torch.Tensor:
    classes, k, sid = int(attrs["num_total_classes"]), int(attrs["num_neg_samples"]), \
        _sampler(attrs)
    if attrs["custom_neg_classes"]:  # Fluid's fixed negatives (its op tests use them)
        fixed = torch.tensor([int(c) for c in attrs["custom_neg_classes"]], dtype=torch.int64)
        return fixed.reshape(1, -1).expand(rows, -1).to(device)
    shape = (rows, k)
    if sid == 0:
        return torch.randint(0, classes, shape, generator=gen, device=device)
    u = torch.rand(shape, generator=gen, device=device, dtype=torch.float64)
    if sid == 1:  # log-uniform (Zipfian): floor(exp(u * log(C))) - 1, modulo C - 1
        value = torch.exp(u * torch.log(torch.tensor(float(classes)))).floor().long() - 1
        return value % max(classes - 1, 1)
    # custom: the alias method over the given tables
    alias = ins["CustomDistAlias"].reshape(-1).long()
    alias_probs = ins["CustomDistAliasProbs"].reshape(-1).double()
    index = torch.randint(0, classes, shape, generator=gen, device=device)
    take_alias = (u > alias_probs[index]) & (alias[index] != -1)
    return torch.where(take_alias, alias[index], index)


def _nce_logits(ins: dict, labels: torch.Tensor) -> torch.Tensor:
    x, w, b = ins["Input"], ins["Weight"], ins.get("Bias")
    z = torch.einsum("nkd,nd->nk", w[labels], x)
    return z + b.reshape(-1)[labels] if b is not None else z


def _nce(ins: dict, attrs: dict, ctx: Any) -> dict:
    # Each row's true classes, then num_neg_samples negatives drawn from the sampler;
    # o = sigmoid(w·x + b), q = k·P(class): cost = -Σ_true log(o/(o+q)) - Σ_neg log(q/(o+q)).
    x, label = ins["Input"], ins["Label"].long()
    classes, k = int(attrs["num_total_classes"]), int(attrs["num_neg_samples"])
    if label.numel() and (int(label.min()) < 0 or int(label.max()) >= classes):
        raise ValueError(f"nce: a label is out of range for {classes} classes")
    neg = _negatives(ins, attrs, x.shape[0], ctx.generator(int(attrs["seed"])), x.device)
    labels = torch.cat([label.reshape(x.shape[0], -1), neg], 1)
    o = torch.sigmoid(_nce_logits(ins, labels))
    q = _nce_prob(ins, labels, attrs, x.dtype) * k
    true = label.reshape(x.shape[0], -1).shape[1]
    cost = -torch.log(o[:, :true] / (o[:, :true] + q[:, :true])).sum(1, keepdim=True) - \
        torch.log(q[:, true:] / (o[:, true:] + q[:, true:])).sum(1, keepdim=True)
    if ins.get("SampleWeight") is not None:
        cost = cost * ins["SampleWeight"].reshape(-1, 1)
    return {"Cost": cost, "SampleLogits": o, "SampleLabels": labels}


def _nce_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, w, labels = ins["Input"], ins["Weight"], ins["SampleLabels"]
    true = ins["Label"].reshape(x.shape[0], -1).shape[1]
    o = torch.sigmoid(_nce_logits(ins, labels))
    q = _nce_prob(ins, labels, attrs, x.dtype) * int(attrs["num_neg_samples"])
    dz = torch.cat([(q[:, :true] / (o[:, :true] + q[:, :true])) * (o[:, :true] - 1),
                    o[:, true:] * (1 - o[:, true:]) / (o[:, true:] + q[:, true:])], 1)
    dz = dz * ins["Cost@GRAD"].reshape(-1, 1)
    if ins.get("SampleWeight") is not None:
        dz = dz * ins["SampleWeight"].reshape(-1, 1)
    out = {}
    if "Input" in ctx.need:
        out["Input@GRAD"] = torch.einsum("nk,nkd->nd", dz, w[labels])
    if "Weight" in ctx.need:
        rows = (dz.unsqueeze(-1) * x.unsqueeze(1)).reshape(-1, w.shape[1])
        if attrs["is_sparse"]:  # the sampled classes' rows
            out["Weight@GRAD"] = SelectedRows(labels.reshape(-1), rows, w.shape[0])
        else:
            out["Weight@GRAD"] = torch.zeros_like(w).index_add_(0, labels.reshape(-1), rows)
    if "Bias" in ctx.need:
        b = ins["Bias"]
        out["Bias@GRAD"] = torch.zeros_like(b.reshape(-1)).index_add_(
            0, labels.reshape(-1), dz.reshape(-1)).reshape(b.shape)
    return out


def _nce_grad_shape(ins: dict, attrs: dict) -> dict:
    out = {f"{s}@GRAD": ins[s] for s in ("Input", "Weight", "Bias") if ins.get(s) is not None}
    if attrs["is_sparse"] and "Weight@GRAD" in out:
        w = ins["Weight"]
        out["Weight@GRAD"] = Meta(w.shape, w.dtype, "selected_rows")
    return out


register_op("nce", inputs=("Input", "Label", "Weight", "Bias?", "SampleWeight?",
                           "CustomDistProbs?", "CustomDistAlias?", "CustomDistAliasProbs?"),
            outputs=("Cost", "SampleLogits", "SampleLabels"),
            attrs={"num_total_classes": 2, "num_neg_samples": 10, "sampler": 0,
                   "seed": 0, "is_sparse": False, "remote_prefetch": False, "trainer_id": 0,
                   "height_sections": [], "epmap": [], "table_names": [],
                   "custom_neg_classes": []},
            infer_shape=_nce_shape, kernel=_nce, grad_kernel=_nce_grad,
            grad_infer_shape=_nce_grad_shape,
            grad_uses=("Input", "Label", "Weight", "Bias", "SampleWeight", "SampleLabels",
                       "CustomDistProbs"),
            no_grad_inputs=("Label", "SampleWeight", "CustomDistProbs", "CustomDistAlias",
                            "CustomDistAliasProbs"))
