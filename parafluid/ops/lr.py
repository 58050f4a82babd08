"""Learning-rate schedule ops: the step counter's ``increment`` and one op per decay kind.

Each ``*_decay_lr`` op reads the global step counter ``Step`` (any numeric dtype, one
element) and writes the learning rate of this step to ``Out`` (shape [1]). The base rate
is the ``learning_rate`` attr, or the optional ``LearningRate`` input when the user passed
a Variable. The math runs in float64 on the op's device (no host round trip) and is cast to
the output dtype (float32, or the dtype of ``LearningRate``).

Formulas, with ``t`` the step and ``d = t / decay_steps`` (floored when ``staircase``)::

    exponential_decay_lr   lr * decay_rate ** d
    natural_exp_decay_lr   lr * exp(-decay_rate * d)
    inverse_time_decay_lr  lr / (1 + decay_rate * d)
    polynomial_decay_lr    (lr - end_lr) * (1 - t / decay_steps) ** power + end_lr
    piecewise_decay_lr     values[i] for the first i with t < boundaries[i], else values[-1]
    noam_decay_lr          lr * d_model ** -0.5 * min(t ** -0.5, warmup_steps ** -1.5 * t)
    cosine_decay_lr        lr * 0.5 * (cos(floor(t / step_each_epoch) * pi / epochs) + 1)
    linear_warmup_lr       start_lr + (end_lr - start_lr) * t / warmup_steps while
                           t < warmup_steps, then lr
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from .common import numel
from .registry import Meta, register_op

# ----------------------------------------------------------------------------- increment


def _increment(ins: dict, attrs: dict, ctx: Any) -> dict:
    x = ins["X"]
    step = attrs["step"]
    # An integer counter stays integer (Fluid's @LR_DECAY_COUNTER@ is int64).
    return {"Out": x + (step if x.is_floating_point() else int(step))}


def _increment_shape(ins: dict, attrs: dict) -> dict:
    x = ins["X"]
    if -1 not in x.shape and numel(x.shape) != 1:
        raise ValueError(f"increment: X must hold one element, got shape {list(x.shape)}")
    return {"Out": Meta(x.shape, x.dtype)}


register_op("increment", inputs=("X",), outputs=("Out",), attrs={"step": 1.0},
            infer_shape=_increment_shape, kernel=_increment)

# ----------------------------------------------------------------------------- schedules

Schedule = Callable[[torch.Tensor, Any, dict], torch.Tensor]


def _register_schedule(name: str, attrs: dict[str, Any], fn: Schedule,
                       uses_lr: bool = True) -> None:
    """``fn(step, base_lr, attrs) -> lr``; ``step`` is a float64 tensor of one element."""

    def infer(ins: dict, attrs: dict) -> dict:
        step = ins["Step"]
        if -1 not in step.shape and numel(step.shape) != 1:
            raise ValueError(f"{name}: Step must hold one element, got shape "
                             f"{list(step.shape)}")
        lr = ins.get("LearningRate")
        if lr is not None and -1 not in lr.shape and numel(lr.shape) != 1:
            raise ValueError(f"{name}: LearningRate must hold one element, got shape "
                             f"{list(lr.shape)}")
        return {"Out": Meta((1,), lr.dtype if lr is not None else "float32")}

    def kernel(ins: dict, attrs: dict, ctx: Any) -> dict:
        step = ins["Step"].reshape(1).to(torch.float64)
        lr_in = ins.get("LearningRate")
        base = attrs.get("learning_rate") if lr_in is None else \
            lr_in.reshape(1).to(torch.float64)
        out = fn(step, base, attrs)
        return {"Out": out.to(torch.float32 if lr_in is None else lr_in.dtype)}

    register_op(name, inputs=("Step", "LearningRate?") if uses_lr else ("Step",),
                outputs=("Out",), attrs=attrs, infer_shape=infer, kernel=kernel)


def _ratio(step: torch.Tensor, attrs: dict) -> torch.Tensor:
    div = step / float(attrs["decay_steps"])
    return torch.floor(div) if attrs["staircase"] else div


_DECAY_ATTRS = {"learning_rate": 1.0, "decay_steps": 1, "decay_rate": 1.0, "staircase": False}

_register_schedule("exponential_decay_lr", dict(_DECAY_ATTRS),
                   lambda t, lr, a: torch.pow(float(a["decay_rate"]), _ratio(t, a)) * lr)
_register_schedule("natural_exp_decay_lr", dict(_DECAY_ATTRS),
                   lambda t, lr, a: torch.exp(-float(a["decay_rate"]) * _ratio(t, a)) * lr)
_register_schedule("inverse_time_decay_lr", dict(_DECAY_ATTRS),
                   lambda t, lr, a: lr / (1.0 + float(a["decay_rate"]) * _ratio(t, a)))


def _polynomial(t: torch.Tensor, lr: Any, a: dict) -> torch.Tensor:
    steps = float(a["decay_steps"])
    if a["cycle"]:
        # Restart every decay_steps; step 0 uses the first cycle (Fluid's rule).
        steps = steps * torch.clamp(torch.ceil(t / steps), min=1.0)
    else:
        t = torch.clamp(t, max=steps)
    end = float(a["end_learning_rate"])
    return (lr - end) * torch.pow(1.0 - t / steps, float(a["power"])) + end


_register_schedule("polynomial_decay_lr",
                   {"learning_rate": 1.0, "decay_steps": 1, "end_learning_rate": 1e-4,
                    "power": 1.0, "cycle": False}, _polynomial)


def _piecewise(t: torch.Tensor, lr: Any, a: dict) -> torch.Tensor:
    bounds = torch.tensor(a["boundaries"], dtype=torch.float64, device=t.device)
    values = torch.tensor(a["values"], dtype=torch.float64, device=t.device)
    return values[(t >= bounds).sum().reshape(1)]


_register_schedule("piecewise_decay_lr", {"boundaries": [], "values": [0.0]}, _piecewise,
                   uses_lr=False)


def _noam(t: torch.Tensor, lr: Any, a: dict) -> torch.Tensor:
    warm = float(a["warmup_steps"])
    return lr * float(a["d_model"]) ** -0.5 * torch.minimum(t.pow(-0.5), warm ** -1.5 * t)


_register_schedule("noam_decay_lr", {"learning_rate": 1.0, "d_model": 1.0, "warmup_steps": 1},
                   _noam)


def _cosine(t: torch.Tensor, lr: Any, a: dict) -> torch.Tensor:
    epoch = torch.floor(t / float(a["step_each_epoch"]))
    return lr * 0.5 * (torch.cos(epoch * (math.pi / float(a["epochs"]))) + 1.0)


_register_schedule("cosine_decay_lr", {"learning_rate": 1.0, "step_each_epoch": 1, "epochs": 1},
                   _cosine)


def _warmup(t: torch.Tensor, lr: Any, a: dict) -> torch.Tensor:
    start, end, warm = float(a["start_lr"]), float(a["end_lr"]), float(a["warmup_steps"])
    ramp = start + (end - start) * t / warm
    after = lr if isinstance(lr, torch.Tensor) else torch.full_like(t, float(lr))
    return torch.where(t < warm, ramp, after)


_register_schedule("linear_warmup_lr", {"learning_rate": 1.0, "warmup_steps": 1,
                                        "start_lr": 0.0, "end_lr": 1.0}, _warmup)
