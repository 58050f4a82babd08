"""Activation ops: elementwise unary functions (one rule table), softmax, clip, and the
activations with parameters or groups: prelu (a learned slope) and maxout.

Every op of the table reads ``X`` and writes ``Out`` of the same shape and dtype, so that
``fc(..., act="relu")`` can append any of them by name. Gradients read only what they need:
``relu``/``sigmoid``/``tanh``/``exp``/``sqrt`` read ``Out``, others read ``X``, and the
piecewise-constant ones (``sign``, ``floor``, ``ceil``, ``round``) read nothing and give
zero, as Fluid's do.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from ..scope import SelectedRows
from .registry import Meta, register_op, same_as

Tensor = torch.Tensor
Forward = Callable[[Tensor, dict], Tensor]
# grad(v, dout, attrs) -> dX, where v is the tensor named by the rule's "reads" column
Backward = Callable[[Any, Tensor, dict], Tensor]


def _zero_grad(v: Any, d: Tensor, a: dict) -> Tensor:
    return torch.zeros_like(d)


def _round_half_away(x: Tensor, a: dict) -> Tensor:
    # NOTE: Fluid rounds halves away from zero (std::round); torch.round rounds to even.
    return torch.sign(x) * torch.floor(torch.abs(x) + 0.5)


def _swish_grad(x: Tensor, d: Tensor, a: dict) -> Tensor:
    s = torch.sigmoid(a["beta"] * x)
    return d * (s + a["beta"] * x * s * (1 - s))


_SQRT1_2 = 0.7071067811865476


def _gelu_grad(x: Tensor, d: Tensor, a: dict) -> Tensor:
    # d/dx of x * Phi(x) = Phi(x) + x * phi(x), Phi/phi the standard normal cdf/pdf
    cdf = 0.5 * (1 + torch.erf(x * _SQRT1_2))
    return d * (cdf + x * torch.exp(-0.5 * x * x) * 0.3989422804014327)


def _in_open_range(v: Tensor, low: float, high: float) -> Tensor:
    return (v > low) & (v < high)


# name, forward, gradient, what the gradient reads ("X", "Out" or ""), attr defaults[, the
# in-place form of the forward]
_UNARY: list[tuple[Any, ...]] = [
    # NOTE: threshold_backward is one fused kernel, ~7x faster than d * (o > 0) on CPU.
    ("relu", lambda x, a: torch.relu(x),
     lambda o, d, a: torch.ops.aten.threshold_backward(d, o, 0), "Out", {}, torch.relu_),
    ("sigmoid", lambda x, a: torch.sigmoid(x), lambda o, d, a: d * o * (1 - o), "Out", {},
     torch.sigmoid_),
    ("tanh", lambda x, a: torch.tanh(x), lambda o, d, a: d * (1 - o * o), "Out", {},
     torch.tanh_),
    ("exp", lambda x, a: torch.exp(x), lambda o, d, a: d * o, "Out", {}),
    ("sqrt", lambda x, a: torch.sqrt(x), lambda o, d, a: d * 0.5 / o, "Out", {}),
    ("reciprocal", lambda x, a: torch.reciprocal(x), lambda o, d, a: -d * o * o, "Out", {}),
    ("log", lambda x, a: torch.log(x), lambda x, d, a: d / x, "X", {}),
    ("square", lambda x, a: x * x, lambda x, d, a: d * 2 * x, "X", {}),
    ("abs", lambda x, a: torch.abs(x), lambda x, d, a: d * torch.sign(x), "X", {}),
    ("sin", lambda x, a: torch.sin(x), lambda x, d, a: d * torch.cos(x), "X", {}),
    ("cos", lambda x, a: torch.cos(x), lambda x, d, a: -d * torch.sin(x), "X", {}),
    ("softplus", lambda x, a: F.softplus(x), lambda x, d, a: d * torch.sigmoid(x), "X", {}),
    ("softsign", lambda x, a: F.softsign(x),
     lambda x, d, a: d / (1 + torch.abs(x)) ** 2, "X", {}),
    ("logsigmoid", lambda x, a: F.logsigmoid(x),
     lambda x, d, a: d * torch.sigmoid(-x), "X", {}),
    ("leaky_relu", lambda x, a: torch.where(x > 0, x, x * a["alpha"]),
     lambda x, d, a: torch.where(x > 0, d, d * a["alpha"]), "X", {"alpha": 0.02}),
    ("relu6", lambda x, a: torch.clamp(x, 0.0, a["threshold"]),
     lambda o, d, a: d * _in_open_range(o, 0.0, a["threshold"]), "Out", {"threshold": 6.0}),
    ("elu", lambda x, a: torch.where(x > 0, x, a["alpha"] * torch.expm1(x)),
     lambda x, d, a: torch.where(x > 0, d, d * a["alpha"] * torch.exp(x)), "X", {"alpha": 1.0}),
    ("hard_sigmoid", lambda x, a: torch.clamp(x * a["slope"] + a["offset"], 0.0, 1.0),
     lambda o, d, a: d * a["slope"] * _in_open_range(o, 0.0, 1.0), "Out",
     {"slope": 0.2, "offset": 0.5}),
    ("swish", lambda x, a: x * torch.sigmoid(a["beta"] * x), _swish_grad, "X", {"beta": 1.0}),
    ("sign", lambda x, a: torch.sign(x), _zero_grad, "", {}),
    ("floor", lambda x, a: torch.floor(x), _zero_grad, "", {}),
    ("ceil", lambda x, a: torch.ceil(x), _zero_grad, "", {}),
    ("round", _round_half_away, _zero_grad, "", {}),
    ("gelu", lambda x, a: 0.5 * x * (1 + torch.erf(x * _SQRT1_2)), _gelu_grad, "X", {}),
    ("selu", lambda x, a: a["scale"] * torch.where(x > 0, x, a["alpha"] * torch.expm1(x)),
     lambda x, d, a: d * a["scale"] * torch.where(x > 0, torch.ones_like(x),
                                                  a["alpha"] * torch.exp(x)),
     "X", {"scale": 1.0507009873554805, "alpha": 1.6732632423543772}),
    ("brelu", lambda x, a: torch.clamp(x, a["t_min"], a["t_max"]),
     lambda x, d, a: d * _in_open_range(x, a["t_min"], a["t_max"]), "X",
     {"t_min": 0.0, "t_max": 24.0}),
    ("soft_relu", lambda x, a: F.softplus(torch.clamp(x, -a["threshold"], a["threshold"])),
     lambda x, d, a: d * torch.sigmoid(x) * _in_open_range(x, -a["threshold"],
                                                            a["threshold"]),
     "X", {"threshold": 40.0}),
    ("hard_shrink", lambda x, a: torch.where(torch.abs(x) > a["threshold"], x,
                                             torch.zeros_like(x)),
     lambda x, d, a: d * (torch.abs(x) > a["threshold"]), "X", {"threshold": 0.5}),
    ("thresholded_relu", lambda x, a: torch.where(x > a["threshold"], x, torch.zeros_like(x)),
     lambda x, d, a: d * (x > a["threshold"]), "X", {"threshold": 1.0}),
    ("atan", lambda x, a: torch.atan(x), lambda x, d, a: d / (1 + x * x), "X", {}),
    ("asin", lambda x, a: torch.asin(x), lambda x, d, a: d / torch.sqrt(1 - x * x), "X", {}),
    ("acos", lambda x, a: torch.acos(x), lambda x, d, a: -d / torch.sqrt(1 - x * x), "X", {}),
    ("rsqrt", lambda x, a: torch.rsqrt(x), lambda o, d, a: -0.5 * d * o * o * o, "Out", {}),
    ("tanh_shrink", lambda x, a: x - torch.tanh(x),
     lambda x, d, a: d * torch.tanh(x) ** 2, "X", {}),
    ("softshrink", lambda x, a: torch.where(x > a["lambda"], x - a["lambda"], torch.where(
        x < -a["lambda"], x + a["lambda"], torch.zeros_like(x))),
     lambda x, d, a: d * (torch.abs(x) > a["lambda"]), "X", {"lambda": 0.5}),
    ("stanh", lambda x, a: a["scale_b"] * torch.tanh(a["scale_a"] * x),
     lambda x, d, a: d * a["scale_a"] * a["scale_b"] * (1 - torch.tanh(a["scale_a"] * x) ** 2),
     "X", {"scale_a": 0.67, "scale_b": 1.7159}),
]


def _register_unary(name: str, fwd: Forward, bwd: Backward, reads: str,
                    attrs: dict[str, Any], inplace: Any = None) -> None:
    """One activation row; ``inplace``: the torch function computing ``fwd`` into its
    argument (``torch.relu_``), for the in-place planner."""
    def kernel(ins: dict, attrs: dict, ctx: Any) -> dict:
        return {"Out": fwd(ins["X"], attrs)}

    def grad(ins: dict, attrs: dict, ctx: Any) -> dict:
        return {"X@GRAD": bwd(ins.get(reads), ins["Out@GRAD"], attrs)}

    def update(x: Tensor, y: Any, attrs: dict) -> None:
        inplace(x)

    # NOTE: every activation hands its input's LoD on (Fluid's ActivationOp shares it); the
    # ones with an in-place form return a fresh tensor (torch.relu and friends)
    register_op(name, inputs=("X",), outputs=("Out",), attrs=attrs, infer_shape=same_as("X"),
                kernel=kernel, grad_kernel=grad, grad_uses=(reads,) if reads else (),
                grad_infer_shape=same_as("Out@GRAD", "X@GRAD"), share_lod=("X", "Out"),
                inplace=update if inplace is not None else None,
                fresh_output=inplace is not None)


for _row in _UNARY:
    _register_unary(*_row)

# ----------------------------------------------------------------------------- softmax


def _softmax_axis(ndim: int, axis: int) -> int:
    if not -ndim <= axis < max(ndim, 1):
        raise ValueError(f"softmax: axis {axis} is out of range for an input of rank {ndim}")
    return axis % max(ndim, 1)


def _softmax_shape(ins: dict, attrs: dict) -> dict:
    _softmax_axis(len(ins["X"].shape), attrs["axis"])
    return {"Out": ins["X"]}


# Fluid clips the max-shifted logits from below before exp, so that no probability
# underflows to exactly 0 (a confidently wrong prediction then has a finite log-loss).
SOFTMAX_CLIP = -64.0


def clipped_log_softmax(x: torch.Tensor, axis: int) -> torch.Tensor:
    """``log softmax`` with Fluid's clip: ``z = max(x - max(x), -64)``, ``z - log sum exp z``."""
    z = (x - x.amax(dim=axis, keepdim=True)).clamp_(min=SOFTMAX_CLIP)
    return z - z.exp().sum(dim=axis, keepdim=True).log()


def _softmax(ins: dict, attrs: dict, ctx: Any) -> dict:
    x = ins["X"]
    axis = _softmax_axis(x.dim(), attrs["axis"])
    z = (x - x.amax(dim=axis, keepdim=True)).clamp_(min=SOFTMAX_CLIP).exp_()
    return {"Out": z.div_(z.sum(dim=axis, keepdim=True))}


def _softmax_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    out, d = ins["Out"], ins["Out@GRAD"]
    axis = _softmax_axis(out.dim(), attrs["axis"])
    return {"X@GRAD": out * (d - (d * out).sum(dim=axis, keepdim=True))}


register_op("softmax", inputs=("X",), outputs=("Out",),
            attrs={"axis": -1, "use_cudnn": False, "is_test": False},
            infer_shape=_softmax_shape, kernel=_softmax, grad_kernel=_softmax_grad,
            grad_uses=("Out",), grad_infer_shape=same_as("Out", "X@GRAD"), share_lod=("X", "Out"),
            fresh_output=True)

# ----------------------------------------------------------------------------- clip


def _clip_shape(ins: dict, attrs: dict) -> dict:
    if attrs["min"] > attrs["max"]:
        raise ValueError(f"clip: min ({attrs['min']}) must not exceed max ({attrs['max']})")
    return {"Out": ins["X"]}


def _clip_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    # NOTE: like Fluid, the gradient is zero at the bounds themselves, not only beyond them.
    x, d = ins["X"], ins["Out@GRAD"]
    return {"X@GRAD": d * _in_open_range(x, attrs["min"], attrs["max"])}


def _clip(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, lo, hi = ins["X"], attrs["min"], attrs["max"]
    if isinstance(x, SelectedRows):
        # a sparse gradient (GradientClipByValue): duplicate rows summed first, as Fluid
        x = x.merged()
        return {"Out": SelectedRows(x.rows, x.value.clamp(lo, hi), x.height)}
    return {"Out": torch.clamp(x, lo, hi)}


register_op("clip", inputs=("X",), outputs=("Out",), attrs={"min": -1.0, "max": 1.0},
            infer_shape=_clip_shape, kernel=_clip,
            grad_kernel=_clip_grad, grad_uses=("X",), share_lod=("X", "Out"))


# ----------------------------------------------------------------------------- prelu


def _alpha_view(alpha: torch.Tensor, x: torch.Tensor, mode: str) -> torch.Tensor:
    if mode == "all":
        return alpha.reshape(())
    if mode == "channel":
        return alpha.reshape(1, -1, *([1] * (x.dim() - 2)))
    return alpha.reshape(1, *x.shape[1:])


def _prelu_shape(ins: dict, attrs: dict) -> dict:
    x, alpha, mode = ins["X"], ins["Alpha"], attrs["mode"]
    size = 1
    for d in alpha.shape:
        size *= d
    if mode == "all":
        want = 1
    elif mode == "channel":
        want = x.shape[1]
    elif mode == "element":
        want = 1
        for d in x.shape[1:]:
            want = -1 if d == -1 or want == -1 else want * d
    else:
        raise ValueError(f"prelu: mode must be 'all', 'channel' or 'element', got {mode!r}")
    if want != -1 and size != want:
        raise ValueError(f"prelu: mode {mode!r} needs {want} alpha values for X "
                         f"{list(x.shape)}, got Alpha {list(alpha.shape)}")
    return {"Out": x}


def _prelu(ins: dict, attrs: dict, ctx: Any) -> dict:
    x = ins["X"]
    alpha = _alpha_view(ins["Alpha"], x, attrs["mode"]).to(x.dtype)
    return {"Out": torch.where(x > 0, x, alpha * x)}


def _prelu_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, alpha, dout = ins["X"], ins["Alpha"], ins["Out@GRAD"]
    mode = attrs["mode"]
    pos = x > 0
    out = {}
    if "X" in ctx.need:
        a = _alpha_view(alpha, x, mode).to(x.dtype)
        out["X@GRAD"] = torch.where(pos, dout, a * dout)
    if "Alpha" in ctx.need:
        g = torch.where(pos, torch.zeros_like(x), dout * x)
        if mode == "all":
            g = g.sum()
        elif mode == "channel":
            g = g.sum(dim=[d for d in range(x.dim()) if d != 1])
        else:
            g = g.sum(0)
        out["Alpha@GRAD"] = g.reshape(alpha.shape).to(alpha.dtype)
    return out


register_op("prelu", inputs=("X", "Alpha"), outputs=("Out",), attrs={"mode": "all"},
            infer_shape=_prelu_shape, kernel=_prelu, grad_kernel=_prelu_grad,
            grad_uses=("X", "Alpha"), share_lod=("X", "Out"))


# ----------------------------------------------------------------------------- maxout


def _maxout_shape(ins: dict, attrs: dict) -> dict:
    x, g = ins["X"], int(attrs["groups"])
    if len(x.shape) != 4:
        raise ValueError(f"maxout: X must be 4-D NCHW, got shape {list(x.shape)}")
    c = x.shape[1]
    if g <= 0 or (c != -1 and c % g):
        raise ValueError(f"maxout: the {c} channels of X must be divisible by groups={g}")
    return {"Out": Meta((x.shape[0], -1 if c == -1 else c // g, *x.shape[2:]), x.dtype)}


def _grouped(x: torch.Tensor, g: int) -> torch.Tensor:
    n, c, h, w = x.shape
    return x.reshape(n, c // g, g, h, w)


def _maxout_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    """The gradient goes to the first maximal element of each group (Fluid's kernel)."""
    x, dout, g = ins["X"], ins["Out@GRAD"], int(attrs["groups"])
    idx = _grouped(x, g).argmax(dim=2, keepdim=True)
    dx = torch.zeros_like(_grouped(x, g)).scatter_(2, idx, dout.unsqueeze(2))
    return {"X@GRAD": dx.reshape(x.shape)}


register_op("maxout", inputs=("X",), outputs=("Out",), attrs={"groups": 1},
            infer_shape=_maxout_shape,
            kernel=lambda ins, attrs, ctx: {"Out": _grouped(
                ins["X"], int(attrs["groups"])).amax(dim=2)},
            grad_kernel=_maxout_grad, grad_uses=("X",))


