"""Single-step recurrent cells and a bilinear layer: lstm_unit, gru_unit,
bilinear_tensor_product.

The cells compute one step for a batch of rows (no LoD); a user loop (or StaticRNN) strings
them together. Gradients are the chain rule written out, never autograd.
"""

from __future__ import annotations

from typing import Any

import torch

from .registry import Meta, register_op
from .rnn import _act

__all__: list[str] = []

# Fluid's gru_unit takes its activations as ints (layers/nn.py: activation_dict)
_ACT_IDS = {0: "identity", 1: "sigmoid", 2: "tanh", 3: "relu"}


def _cols(op: str, slot: str, meta: Meta, want: int) -> None:
    if len(meta.shape) != 2 or meta.shape[1] not in (want, -1):
        raise ValueError(f"{op}: {slot} must be [N, {want}], got {list(meta.shape)}")


# ----------------------------------------------------------------------------- lstm_unit


def _lstm_unit_shape(ins: dict, attrs: dict) -> dict:
    x, c_prev = ins["X"], ins["C_prev"]
    if len(c_prev.shape) != 2:
        raise ValueError(f"lstm_unit: C_prev must be [N, D], got {list(c_prev.shape)}")
    _cols("lstm_unit", "X", x, 4 * c_prev.shape[1])
    return {"C": c_prev, "H": c_prev}


def _lstm_gates(x: torch.Tensor, forget_bias: float) -> tuple[torch.Tensor, ...]:
    """Gate order (input, forget, output, candidate), as Fluid's lstm_unit kernel."""
    xi, xf, xo, xg = x.chunk(4, dim=1)
    return (torch.sigmoid(xi), torch.sigmoid(xf + forget_bias), torch.sigmoid(xo),
            torch.tanh(xg))


def _lstm_unit(ins: dict, attrs: dict, ctx: Any) -> dict:
    i, f, o, g = _lstm_gates(ins["X"], float(attrs["forget_bias"]))
    c = f * ins["C_prev"] + i * g
    return {"C": c, "H": o * torch.tanh(c)}


def _lstm_unit_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, c_prev, c = ins["X"], ins["C_prev"], ins["C"]
    dh, dc = ins.get("H@GRAD"), ins.get("C@GRAD")
    i, f, o, g = _lstm_gates(x, float(attrs["forget_bias"]))
    tc = torch.tanh(c)
    dh = torch.zeros_like(c) if dh is None else dh
    dc_total = dh * o * (1 - tc * tc) + (0 if dc is None else dc)
    out = {}
    if "X" in ctx.need:
        out["X@GRAD"] = torch.cat([dc_total * g * i * (1 - i), dc_total * c_prev * f * (1 - f),
                                   dh * tc * o * (1 - o), dc_total * i * (1 - g * g)], 1)
    if "C_prev" in ctx.need:
        out["C_prev@GRAD"] = dc_total * f
    return out


register_op("lstm_unit", inputs=("X", "C_prev"), outputs=("C", "H"),
            attrs={"forget_bias": 0.0}, infer_shape=_lstm_unit_shape, kernel=_lstm_unit,
            grad_kernel=_lstm_unit_grad, grad_uses=("X", "C_prev", "C"))

# ----------------------------------------------------------------------------- gru_unit


def _gru_unit_shape(ins: dict, attrs: dict) -> dict:
    h, w = ins["HiddenPrev"], ins["Weight"]
    if len(h.shape) != 2:
        raise ValueError(f"gru_unit: HiddenPrev must be [N, D], got {list(h.shape)}")
    d = h.shape[1]
    _cols("gru_unit", "Input", ins["Input"], 3 * d)
    if list(w.shape) != [d, 3 * d]:
        raise ValueError(f"gru_unit: Weight must be [{d}, {3 * d}], got {list(w.shape)}")
    if ins.get("Bias") is not None and list(ins["Bias"].shape) != [1, 3 * d]:
        raise ValueError(f"gru_unit: Bias must be [1, {3 * d}], got {list(ins['Bias'].shape)}")
    for key in ("activation", "gate_activation"):
        if attrs[key] not in _ACT_IDS:
            raise ValueError(f"gru_unit: {key} must be one of {_ACT_IDS} (Fluid's ids), "
                             f"got {attrs[key]!r}")
    n = ins["Input"].shape[0]
    return {"Gate": Meta((n, 3 * d), h.dtype), "ResetHiddenPrev": Meta((n, d), h.dtype),
            "Hidden": Meta((n, d), h.dtype)}


def _gru_weights(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Fluid's memory layout: the first ``2D * D`` values are the ``[D, 2D]`` update/reset
    weights, the last ``D * D`` the ``[D, D]`` candidate weights."""
    d = w.shape[0]
    flat = w.reshape(-1)
    return flat[:2 * d * d].reshape(d, 2 * d), flat[2 * d * d:].reshape(d, d)


def _gru_step(ins: dict, attrs: dict) -> tuple[torch.Tensor, ...]:
    x, hp, bias = ins["Input"], ins["HiddenPrev"], ins.get("Bias")
    act = _act(_ACT_IDS[attrs["activation"]], "gru_unit")[0]
    gate_act = _act(_ACT_IDS[attrs["gate_activation"]], "gru_unit")[0]
    d = hp.shape[1]
    w_ur, w_c = _gru_weights(ins["Weight"])
    g = x if bias is None else x + bias
    ur = gate_act(g[:, :2 * d] + hp @ w_ur)
    u, r = ur[:, :d], ur[:, d:]
    rh = r * hp
    c = act(g[:, 2 * d:] + rh @ w_c)
    h = u * hp + (1 - u) * c if attrs["origin_mode"] else (1 - u) * hp + u * c
    return u, r, c, rh, h


def _gru_unit(ins: dict, attrs: dict, ctx: Any) -> dict:
    u, r, c, rh, h = _gru_step(ins, attrs)
    return {"Gate": torch.cat([u, r, c], 1), "ResetHiddenPrev": rh, "Hidden": h}


def _gru_unit_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    """Back-propagates ``Hidden@GRAD`` (Fluid's gru_unit_grad reads only that one)."""
    hp, dh = ins["HiddenPrev"], ins["Hidden@GRAD"]
    u, r, c, rh, _ = _gru_step(ins, attrs)
    dact = _act(_ACT_IDS[attrs["activation"]], "gru_unit")[1]
    dgate = _act(_ACT_IDS[attrs["gate_activation"]], "gru_unit")[1]
    w_ur, w_c = _gru_weights(ins["Weight"])
    if attrs["origin_mode"]:
        du, dc, dhp = dh * (hp - c), dh * (1 - u), dh * u
    else:
        du, dc, dhp = dh * (c - hp), dh * u, dh * (1 - u)
    dc_pre = dc * dact(c)
    drh = dc_pre @ w_c.t()
    dhp = dhp + drh * r
    dur_pre = torch.cat([du * dgate(u), drh * hp * dgate(r)], 1)
    dhp = dhp + dur_pre @ w_ur.t()
    dx = torch.cat([dur_pre, dc_pre], 1)
    out = {}
    if "Input" in ctx.need:
        out["Input@GRAD"] = dx
    if "HiddenPrev" in ctx.need:
        out["HiddenPrev@GRAD"] = dhp
    if "Weight" in ctx.need:
        dw = torch.cat([(hp.t() @ dur_pre).reshape(-1), (rh.t() @ dc_pre).reshape(-1)])
        out["Weight@GRAD"] = dw.reshape(ins["Weight"].shape)
    if "Bias" in ctx.need:
        out["Bias@GRAD"] = dx.sum(0, keepdim=True)
    return out


register_op("gru_unit", inputs=("Input", "HiddenPrev", "Weight", "Bias?"),
            outputs=("Gate", "ResetHiddenPrev", "Hidden"),
            attrs={"activation": 2, "gate_activation": 1, "origin_mode": False},
            infer_shape=_gru_unit_shape, kernel=_gru_unit, grad_kernel=_gru_unit_grad,
            grad_uses=("Input", "HiddenPrev", "Weight", "Bias"))

# ----------------------------------------------------------------------------- bilinear


def _bilinear_shape(ins: dict, attrs: dict) -> dict:
    x, y, w = ins["X"], ins["Y"], ins["Weight"]
    if len(x.shape) != 2 or len(y.shape) != 2 or len(w.shape) != 3:
        raise ValueError(f"bilinear_tensor_product: X and Y must be 2-D and Weight 3-D, got "
                         f"{list(x.shape)}, {list(y.shape)}, {list(w.shape)}")
    if (x.shape[1], y.shape[1]) != tuple(w.shape[1:]):
        raise ValueError(f"bilinear_tensor_product: Weight {list(w.shape)} must be "
                         f"[size, {x.shape[1]}, {y.shape[1]}] for X {list(x.shape)} and "
                         f"Y {list(y.shape)}")
    return {"Out": Meta((x.shape[0], w.shape[0]), x.dtype)}


def _bilinear(ins: dict, attrs: dict, ctx: Any) -> dict:
    """``out[n, k] = x[n] @ W[k] @ y[n] + b[k]``."""
    out = torch.einsum("ni,kij,nj->nk", ins["X"], ins["Weight"], ins["Y"])
    bias = ins.get("Bias")
    return {"Out": out if bias is None else out + bias}


def _bilinear_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, y, w, dout = ins["X"], ins["Y"], ins["Weight"], ins["Out@GRAD"]
    out = {}
    if "X" in ctx.need:
        out["X@GRAD"] = torch.einsum("nk,kij,nj->ni", dout, w, y)
    if "Y" in ctx.need:
        out["Y@GRAD"] = torch.einsum("nk,ni,kij->nj", dout, x, w)
    if "Weight" in ctx.need:
        out["Weight@GRAD"] = torch.einsum("nk,ni,nj->kij", dout, x, y)
    if "Bias" in ctx.need:
        out["Bias@GRAD"] = dout.sum(0, keepdim=True)
    return out


register_op("bilinear_tensor_product", inputs=("X", "Y", "Weight", "Bias?"),
            outputs=("Out",), infer_shape=_bilinear_shape, kernel=_bilinear,
            grad_kernel=_bilinear_grad, grad_uses=("X", "Y", "Weight", "Bias"))
