"""More of Fluid 1.6's update ops: ``proximal_gd``, ``proximal_adagrad`` and ``dpsgd``.

Formulas (Fluid 1.6)::

    proximal_gd:      prox = p - lr*g
    proximal_adagrad: m += g*g;  prox = p - lr*g/sqrt(m)
    both:             p = sign(prox) * max(|prox| - lr*l1, 0) / (1 + lr*l2)   if l1 > 0
                      p = prox / (1 + lr*l2)                                  otherwise
    dpsgd:            scale = |g|_2 / clip if |g|_2 > clip else 1
                      p -= lr * (g / scale + noise / batch_size),  noise ~ N(0, sigma)

Fluid's dpsgd draws ONE noise value per run of the op, shared by every element of the
parameter, from a generator seeded with the time; here it comes from torch's default
generator (``torch.manual_seed`` makes it reproducible). The op has no ``seed`` attribute
in 1.6.
"""

from __future__ import annotations

from typing import Any

import torch

from ..scope import SelectedRows
from .optimizer import _state_shape
from .registry import register_op


def _dense(grad: Any) -> torch.Tensor:
    return grad.to_dense() if isinstance(grad, SelectedRows) else grad


def _proximal(prox: torch.Tensor, lr: torch.Tensor, attrs: dict) -> torch.Tensor:
    l1, l2 = attrs["l1"], attrs["l2"]
    if l1 > 0:
        return prox.sign() * (prox.abs() - lr * l1).clamp_(min=0) / (1 + lr * l2)
    return prox / (1 + lr * l2)


def _proximal_gd(ins: dict, attrs: dict, ctx: Any) -> dict:
    param, grad, lr = ins["Param"], _dense(ins["Grad"]), ins["LearningRate"]
    param.copy_(_proximal(param - lr * grad, lr, attrs))
    return {"ParamOut": param}


register_op("proximal_gd", inputs=("Param", "Grad", "LearningRate"), outputs=("ParamOut",),
            attrs={"l1": 0.0, "l2": 0.0},
            infer_shape=_state_shape("proximal_gd", (("Param", "ParamOut"),)),
            kernel=_proximal_gd)


def _proximal_adagrad(ins: dict, attrs: dict, ctx: Any) -> dict:
    param, grad, lr = ins["Param"], _dense(ins["Grad"]), ins["LearningRate"]
    moment = ins["Moment"]
    moment.addcmul_(grad, grad)
    param.copy_(_proximal(param - lr * grad / moment.sqrt(), lr, attrs))
    return {"ParamOut": param, "MomentOut": moment}


register_op("proximal_adagrad", inputs=("Param", "Moment", "Grad", "LearningRate"),
            outputs=("ParamOut", "MomentOut"), attrs={"l1": 0.0, "l2": 0.0},
            infer_shape=_state_shape("proximal_adagrad", (("Param", "ParamOut"),
                                                          ("Moment", "MomentOut"))),
            kernel=_proximal_adagrad)


def _dpsgd(ins: dict, attrs: dict, ctx: Any) -> dict:
    param, grad, lr = ins["Param"], ins["Grad"], ins["LearningRate"]
    if isinstance(grad, SelectedRows):
        raise TypeError("dpsgd: Grad must be a dense LoDTensor (Fluid's dpsgd has no sparse "
                        "update), got SelectedRows")
    norm = float(grad.double().norm())
    scale = norm / attrs["clip"] if norm > attrs["clip"] else 1.0
    noise = float(torch.randn((), dtype=torch.float64)) * attrs["sigma"]
    param.sub_(lr.reshape(()) * (grad / scale + noise / attrs["batch_size"]))
    return {"ParamOut": param}


register_op("dpsgd", inputs=("Param", "Grad", "LearningRate"), outputs=("ParamOut",),
            attrs={"clip": 10.0, "batch_size": 16.0, "sigma": 1.0},
            infer_shape=_state_shape("dpsgd", (("Param", "ParamOut"),)), kernel=_dpsgd,
            side_effect=False, no_compile="draws its noise on the host (one value per run)")
