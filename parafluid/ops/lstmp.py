"""``lstmp`` (Fluid 1.6's dynamic_lstmp): an LSTM with a recurrent projection, over LoD input.

As ``lstm`` (ops/rnn.py: gates ordered candidate, input, forget, output; peepholes
``W_ic, W_fc, W_oc`` after the bias), except that the recurrence runs through the
projection ``r = proj_act(h @ ProjWeight)`` (``[D, P]``): the gates of step ``t`` are
``Input_t + r_{t-1} @ Weight + Bias`` with ``Weight`` ``[P, 4D]``. ``cell_clip`` /
``proj_clip`` (when positive) clamp the cell and the projection to ``[-clip, clip]``. An
initial ``H0`` is the initial projection itself, ``[N, P]`` (Fluid 1.6: ``r_0 = H0``). As
Fluid 1.6's kernel, a ``proj_activation`` other than identity applies ``cell_activation``
to the projection. Outputs:
``Projection`` ``[T, P]`` and ``Cell`` ``[T, D]``, with the input's LoD. The gradient kernel
recomputes the forward pass and runs back-propagation through time.
"""

from __future__ import annotations

from typing import Any

import torch

from ..lod import attach_lod
from .registry import Meta, register_op
from .rnn import _act, _clip, _gate_grads, _initial, _lstm_step, _lstm_weight_grads, _Steps, wanted

__all__: list[str] = []

_ACT_ATTRS = ("gate_activation", "cell_activation", "candidate_activation", "proj_activation")


def _proj_act(attrs: dict) -> tuple:
    """The projection's activation as Fluid 1.6 runs it: identity, or else the cell's."""
    _act(attrs["proj_activation"], "lstmp")
    if attrs["proj_activation"] == "identity":
        return _act("identity", "lstmp")
    return _act(attrs["cell_activation"], "lstmp")


def _shape(ins: dict, attrs: dict) -> dict:
    x, w, pw, b = ins["Input"], ins["Weight"], ins["ProjWeight"], ins["Bias"]
    if len(pw.shape) != 2 or len(w.shape) != 2:
        raise ValueError(f"lstmp: Weight [P, 4D] and ProjWeight [D, P] must be 2-D, got "
                         f"{list(w.shape)} and {list(pw.shape)}")
    d, p = pw.shape
    if tuple(w.shape) != (p, 4 * d):
        raise ValueError(f"lstmp: Weight must be [P, 4D] = [{p}, {4 * d}] for ProjWeight "
                         f"{list(pw.shape)}, got {list(w.shape)}")
    if x.shape[-1] not in (4 * d, -1):
        raise ValueError(f"lstmp: Input has {x.shape[-1]} columns; 4*D = {4 * d} expected "
                         f"(project the input with fc(size={4 * d}))")
    want = 7 * d if attrs["use_peepholes"] else 4 * d
    if tuple(b.shape) != (1, want):
        raise ValueError(f"lstmp: Bias must be [1, {want}] (use_peepholes="
                         f"{attrs['use_peepholes']}), got {list(b.shape)}")
    for act in _ACT_ATTRS:
        _act(attrs[act], "lstmp")
    cell = Meta((x.shape[0], d), x.dtype)
    return {"Projection": Meta((x.shape[0], p), x.dtype), "Cell": cell,
            "BatchGate": Meta((x.shape[0], 4 * d), x.dtype), "BatchCellPreAct": cell,
            "BatchHidden": cell}


def _run(ins: dict, attrs: dict) -> tuple:
    x, w, pw, b = ins["Input"], ins["Weight"], ins["ProjWeight"], ins["Bias"]
    d, p = pw.shape
    steps = _Steps(x, "lstmp", attrs["is_reverse"])
    *acts, _ = (_act(attrs[a], "lstmp")[0] for a in _ACT_ATTRS)
    proj_act = _proj_act(attrs)[0]
    peep = attrs["use_peepholes"]
    bias = b.reshape(-1)
    w_ic, w_fc, w_oc = (bias[4 * d:5 * d], bias[5 * d:6 * d], bias[6 * d:]) if peep else \
        (None, None, None)
    xs = steps.gather(x)
    h0 = ins.get("H0")
    r = _initial(h0, steps.batch, p, x) if h0 is not None else \
        x.new_zeros((steps.batch, p))
    r0 = r
    c = _initial(ins.get("C0"), steps.batch, d, x)
    rs, cs, saved = [], [], []
    for t in range(steps.steps):
        cand, i, f, o, c_pre, c_new, act_c, h = _lstm_step(
            xs[t] + r @ w + bias[:4 * d], c, acts, (w_ic, w_fc, w_oc), attrs["cell_clip"])
        r_act = proj_act(h @ pw)
        r_new = _clip(r_act, attrs["proj_clip"])
        saved.append((r, c, cand, i, f, o, c_pre, c_new, act_c, h, r_act))
        m = steps.mask[t]
        r = m * r_new + (1 - m) * r
        c = m * c_new + (1 - m) * c
        rs.append(r_new)
        cs.append(c_new)
    return steps, rs, cs, saved, (w_ic, w_fc, w_oc), r0


def _lstmp(ins: dict, attrs: dict, ctx: Any) -> dict:
    x = ins["Input"]
    d, p = ins["ProjWeight"].shape
    steps, rs, cs, saved, _, _ = _run(ins, attrs)
    if not rs:
        empty = x.new_zeros((0, d))
        return {"Projection": x.new_zeros((0, p)), "Cell": empty,
                "BatchGate": x.new_zeros((0, 4 * d)), "BatchCellPreAct": empty.clone(),
                "BatchHidden": empty.clone()}
    proj = steps.scatter(torch.stack(rs), x.shape[0])
    cell = steps.scatter(torch.stack(cs), x.shape[0])
    out = {"Projection": attach_lod(proj, steps.lod), "Cell": attach_lod(cell, steps.lod)}
    if any(wanted(ctx, s) for s in ("BatchGate", "BatchCellPreAct", "BatchHidden")):
        # Fluid's intermediates in its batch layout: the activated gates (candidate, input,
        # forget, output), the activated cell, the hidden state before the projection
        out["BatchGate"] = steps.batch_rows(torch.stack([torch.cat(v[2:6], 1) for v in saved]))
        out["BatchCellPreAct"] = steps.batch_rows(torch.stack([v[8] for v in saved]))
        out["BatchHidden"] = steps.batch_rows(torch.stack([v[9] for v in saved]))
    return out


def _inside(v: torch.Tensor, clip: float) -> Any:
    """The derivative of the clamp: 1 inside ``[-clip, clip]``, 0 outside (1 without clip)."""
    return (v.abs() <= clip).to(v.dtype) if clip > 0 else 1


def _lstmp_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, w, pw = ins["Input"], ins["Weight"], ins["ProjWeight"]
    d, p = pw.shape
    steps, _, _, saved, (w_ic, w_fc, w_oc), _ = _run(ins, attrs)
    d_gate, d_cell, d_cand, _ = (_act(attrs[a], "lstmp")[1] for a in _ACT_ATTRS)
    d_proj = _proj_act(attrs)[1]
    peep = attrs["use_peepholes"]

    def padded(slot: str, width: int) -> torch.Tensor:
        g = ins.get(slot)
        return steps.gather(g if g is not None else x.new_zeros((x.shape[0], width)))

    dproj, dcell = padded("Projection@GRAD", p), padded("Cell@GRAD", d)
    dr_next = x.new_zeros((steps.batch, p))
    dc_next = x.new_zeros((steps.batch, d))
    dgates = x.new_zeros((steps.steps, steps.batch, 4 * d))
    dw, dpw = torch.zeros_like(w), torch.zeros_like(pw)
    dbias = torch.zeros_like(ins["Bias"].reshape(-1))
    for t in reversed(range(steps.steps)):
        r_prev, c_prev, cand, i, f, o, c_pre, c_new, act_c, h, r_act = saved[t]
        m = steps.mask[t]
        dr = dproj[t] + dr_next
        dp_pre = m * dr * _inside(r_act, attrs["proj_clip"]) * d_proj(r_act)
        dpw += h.t() @ dp_pre
        dh = dp_pre @ pw.t()
        do = dh * act_c * d_gate(o)
        dc = dh * o * d_cell(act_c) + dc_next + dcell[t]
        if peep:
            dc = dc + do * w_oc
        dc = dc * _inside(c_pre, attrs["cell_clip"])
        g, dc_prev = _gate_grads(dc, do, (c_prev, cand, i, f, c_new), m, d_gate, d_cand,
                                 (w_ic, w_fc) if peep else None, dbias)
        dgates[t] = g
        dw += r_prev.t() @ g
        dbias[:4 * d] += g.sum(0)
        dr_next = g @ w.t() + (1 - m) * dr
        dc_next = m * dc_prev + (1 - m) * dc_next
    out = _lstm_weight_grads(ctx, steps, dgates, x, dw, dbias, ins["Bias"])
    if ins.get("H0") is not None and "H0" in ctx.need:
        out["H0@GRAD"] = dr_next
    if "ProjWeight" in ctx.need:
        out["ProjWeight@GRAD"] = dpw
    if "C0" in ctx.need:
        out["C0@GRAD"] = dc_next
    return out


register_op("lstmp", inputs=("Input", "H0?", "C0?", "Weight", "ProjWeight", "Bias"),
            outputs=("Projection", "Cell", "BatchGate?", "BatchCellPreAct?", "BatchHidden?"),
            attrs={"use_peepholes": True, "is_reverse": False, "gate_activation": "sigmoid",
                   "cell_activation": "tanh", "candidate_activation": "tanh",
                   "proj_activation": "tanh", "cell_clip": 0.0, "proj_clip": 0.0},
            infer_shape=_shape, kernel=_lstmp, grad_kernel=_lstmp_grad,
            grad_uses=("Input", "H0", "C0", "Weight", "ProjWeight", "Bias"))
