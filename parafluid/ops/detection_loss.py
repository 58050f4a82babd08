"""Detection losses of Fluid 1.6 beside the SSD and YOLO ones: ``sigmoid_focal_loss``
(RetinaNet), with its gradient.

``sigmoid_focal_loss``: ``X [N, C]`` logits of the ``C`` foreground classes, ``Label [N, 1]``
in ``0..C`` (0 = background, -1 = ignored), ``FgNum [1]`` the number of foreground anchors
(at least 1). Element ``(i, d)`` is positive when ``Label[i] == d + 1``:
``-alpha / fg * (1 - p)^gamma * log(p)`` for positives and
``-(1 - alpha) / fg * p^gamma * log(1 - p)`` for the other non-ignored ones, ``p = sigmoid(x)``.
"""

from __future__ import annotations

from typing import Any

import torch

from .registry import Meta, register_op

__all__: list[str] = []


def _focal_terms(ins: dict, attrs: dict) -> tuple[torch.Tensor, ...]:
    x, label, fg = ins["X"], ins["Label"], ins["FgNum"]
    classes = torch.arange(1, x.shape[1] + 1).reshape(1, -1)
    g = label.reshape(-1, 1).long()
    pos = (g == classes).to(x.dtype)
    neg = ((g != -1) & (g != classes)).to(x.dtype)
    fg_num = max(float(fg.reshape(-1)[0]), 1.0)
    z_pos, z_neg = attrs["alpha"] / fg_num, (1 - attrs["alpha"]) / fg_num
    p = torch.sigmoid(x)
    # log(1 - p) written stably: -x * (x >= 0) - log(1 + exp(x - 2 x (x >= 0)))
    nonneg = (x >= 0).to(x.dtype)
    log_1mp = -x * nonneg - torch.log1p(torch.exp(x - 2 * x * nonneg))
    log_p = torch.log(p.clamp(min=torch.finfo(torch.float32).tiny))
    return x, p, pos, neg, z_pos, z_neg, log_p, log_1mp


def _focal(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, p, pos, neg, z_pos, z_neg, log_p, log_1mp = _focal_terms(ins, attrs)
    gamma = attrs["gamma"]
    term_pos = (1 - p) ** gamma * log_p
    term_neg = p ** gamma * log_1mp
    return {"Out": -pos * term_pos * z_pos - neg * term_neg * z_neg}


def _focal_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, p, pos, neg, z_pos, z_neg, log_p, log_1mp = _focal_terms(ins, attrs)
    gamma = attrs["gamma"]
    d_pos = (1 - p) ** gamma * (1 - p - p * gamma * log_p)
    d_neg = p ** gamma * (log_1mp * (1 - p) * gamma - p)
    return {"X@GRAD": (-pos * d_pos * z_pos - neg * d_neg * z_neg) * ins["Out@GRAD"]}


def _focal_shape(ins: dict, attrs: dict) -> dict:
    x, label, fg = ins["X"], ins["Label"], ins["FgNum"]
    if len(x.shape) != 2:
        raise ValueError(f"sigmoid_focal_loss: X must be 2-D [N, C], got {list(x.shape)}")
    if len(label.shape) != 2 or label.shape[1] not in (-1, 1):
        raise ValueError(f"sigmoid_focal_loss: Label must be [N, 1], got {list(label.shape)}")
    if len(fg.shape) != 1 or fg.shape[0] not in (-1, 1):
        raise ValueError(f"sigmoid_focal_loss: FgNum must be [1], got {list(fg.shape)}")
    return {"Out": Meta(x.shape, x.dtype)}


register_op("sigmoid_focal_loss", inputs=("X", "Label", "FgNum"), outputs=("Out",),
            attrs={"gamma": 2.0, "alpha": 0.25}, infer_shape=_focal_shape, kernel=_focal,
            grad_kernel=_focal_grad, grad_uses=("X", "Label", "FgNum"),
            no_grad_inputs=("Label", "FgNum"),
            no_compile="reads FgNum on the host")
