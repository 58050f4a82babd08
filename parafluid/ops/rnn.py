"""Recurrent ops: ``lstm`` (dynamic_lstm) and ``gru`` (dynamic_gru) over LoD inputs, and the
single-step cells ``lstm_unit`` and ``gru_unit`` (one step for a batch of rows, no LoD; a user
loop or StaticRNN strings them together).

The input is already projected (``fc`` of size 4·D for the LSTM, 3·D for the GRU), one row
per step; the LoD says where each sequence starts. Sequences run side by side, padded at the
end: a step past a sequence's end leaves its state unchanged. The gradient kernels recompute
the forward pass and run back-propagation through time; they are checked against finite
differences in ``tests/ops/test_rnn_ops.py``.

Fluid's layouts: LSTM gates are ordered (candidate, input, forget, output) in the weight
``[D, 4D]`` and the bias ``[1, 4D]`` (``[1, 7D]`` with peepholes: ``W_ic, W_fc, W_oc``
follow). GRU: the weight ``[D, 3D]`` is read in Fluid's memory layout: its first ``2D·D``
values are the update and reset gates' ``[D, 2D]`` weights, the last ``D·D`` the candidate's
``[D, D]`` (a split of the flat buffer, not of the columns); ``origin_mode`` picks
``h = u·h_prev + (1-u)·c`` over Fluid's default ``h = (1-u)·h_prev + u·c``.
"""

from __future__ import annotations

from typing import Any

import torch

from ..lod import attach_lod, get_lod, require_lod
from .registry import Meta, register_op

__all__: list[str] = []

# activation: (forward, derivative from the output)
_ACTS = {
    "sigmoid": (torch.sigmoid, lambda y: y * (1 - y)),
    "tanh": (torch.tanh, lambda y: 1 - y * y),
    "relu": (torch.relu, lambda y: (y > 0).to(y.dtype)),
    "identity": (lambda x: x, lambda y: torch.ones_like(y)),
}


def _act(name: str, op: str) -> tuple[Any, Any]:
    if name not in _ACTS:
        raise ValueError(f"{op}: activation must be one of {sorted(_ACTS)}, got {name!r}")
    return _ACTS[name]


class _Steps:
    """Where each (time step, sequence) of the padded batch lives among the input's rows."""

    def __init__(self, x: torch.Tensor, op: str, reverse: bool) -> None:
        offsets = require_lod(op, "Input", x)
        self.lod = get_lod(x)
        lengths = [b - a for a, b in zip(offsets, offsets[1:])]
        self.batch, self.steps = len(lengths), max(lengths, default=0)
        rows = torch.full((self.steps, self.batch), -1, dtype=torch.long)
        for s, (a, n) in enumerate(zip(offsets, lengths)):
            seq = torch.arange(a, a + n)
            rows[:n, s] = seq.flip(0) if reverse else seq
        self.rows = rows.to(x.device)
        self.mask = (self.rows >= 0).to(x.dtype).unsqueeze(-1)  # [L, B, 1]

    def gather(self, x: torch.Tensor) -> torch.Tensor:
        """Rows -> padded ``[L, B, ...]`` (zeros past each sequence's end)."""
        padded = torch.cat([x.new_zeros((1, *x.shape[1:])), x], 0)
        return padded.index_select(0, (self.rows + 1).reshape(-1)).reshape(
            self.steps, self.batch, *x.shape[1:])

    def batch_rows(self, padded: torch.Tensor) -> torch.Tensor:
        """Padded ``[L, B, ...]`` -> Fluid's batch layout (sequence2batch): step by step, the
        rows of the sequences still running, longest sequence first (ties in input order);
        the layout of the ops' intermediate outputs (``BatchGate``, ...)."""
        lengths = (self.rows >= 0).sum(0).tolist()
        order = sorted(range(self.batch), key=lambda s: -lengths[s])
        pairs = [(t, s) for t in range(self.steps) for s in order if t < lengths[s]]
        if not pairs:
            return padded.new_zeros((0, *padded.shape[2:]))
        ts, ss = zip(*pairs)
        return padded[torch.tensor(ts), torch.tensor(ss)]

    def scatter(self, padded: torch.Tensor, rows: int) -> torch.Tensor:
        """Padded ``[L, B, ...]`` -> rows (the inverse of ``gather``)."""
        flat = padded.reshape(-1, *padded.shape[2:])
        keep = self.rows.reshape(-1) >= 0
        out = padded.new_zeros((rows, *padded.shape[2:]))
        out[self.rows.reshape(-1)[keep]] = flat[keep]
        return out


def wanted(ctx: Any, slot: str) -> bool:
    """Whether the op being run binds its output ``slot`` (an optional intermediate)."""
    op = getattr(ctx, "op", None)
    return bool(op is not None and op.outputs.get(slot))


def _initial(v: torch.Tensor | None, batch: int, width: int, like: torch.Tensor) -> torch.Tensor:
    if v is None:
        return like.new_zeros((batch, width))
    if tuple(v.shape) != (batch, width):
        raise ValueError(f"initial state has shape {list(v.shape)}; expected [{batch}, {width}] "
                         "(one row per sequence)")
    return v


# ----------------------------------------------------------------------------- lstm


def _lstm_shape(ins: dict, attrs: dict) -> dict:
    x, w, b = ins["Input"], ins["Weight"], ins["Bias"]
    d = w.shape[0]
    if len(w.shape) != 2 or w.shape[1] != 4 * d:
        raise ValueError(f"lstm: Weight must be [D, 4D], got {list(w.shape)}")
    if x.shape[-1] not in (4 * d, -1):
        raise ValueError(f"lstm: Input has {x.shape[-1]} columns; the Weight {list(w.shape)} "
                         f"needs 4*D = {4 * d} (project the input with fc(size={4 * d}))")
    want = 7 * d if attrs["use_peepholes"] else 4 * d
    if tuple(b.shape) != (1, want):
        raise ValueError(f"lstm: Bias must be [1, {want}] (use_peepholes="
                         f"{attrs['use_peepholes']}), got {list(b.shape)}")
    for act in ("gate_activation", "cell_activation", "candidate_activation"):
        _act(attrs[act], "lstm")
    meta = Meta((x.shape[0], d), x.dtype)
    return {"Hidden": meta, "Cell": meta, "BatchGate": Meta((x.shape[0], 4 * d), x.dtype),
            "BatchCellPreAct": meta}


def _clip(v: torch.Tensor, clip: float) -> torch.Tensor:
    return v.clamp(-clip, clip) if clip > 0 else v


def _lstm_step(g: torch.Tensor, c: torch.Tensor, acts: tuple, peeps: tuple,
               cell_clip: float = 0.0) -> tuple:
    """One LSTM step from the gates' pre-activations ``g`` ``[B, 4D]`` and the previous cell
    ``c``: (cand, i, f, o, c_pre, c_new, act_c, h). ``acts`` is (gate, cell, candidate)
    activation; ``peeps`` the (input, forget, output) peephole weights (Nones without);
    ``cell_clip`` (when positive) clamps the new cell ``c_pre`` into ``c_new``."""
    gate, cell_act, cand_act = acts
    w_ic, w_fc, w_oc = peeps
    d = c.shape[1]
    cand, i, f, o = g[:, :d], g[:, d:2 * d], g[:, 2 * d:3 * d], g[:, 3 * d:]
    if w_ic is not None:
        i = i + c * w_ic
        f = f + c * w_fc
    cand, i, f = cand_act(cand), gate(i), gate(f)
    c_pre = f * c + i * cand
    c_new = _clip(c_pre, cell_clip)
    if w_oc is not None:
        o = o + c_new * w_oc
    o = gate(o)
    act_c = cell_act(c_new)
    return cand, i, f, o, c_pre, c_new, act_c, o * act_c


def _lstm_run(ins: dict, attrs: dict, keep: bool) -> tuple:
    x, w, b = ins["Input"], ins["Weight"], ins["Bias"]
    d = w.shape[0]
    steps = _Steps(x, "lstm", attrs["is_reverse"])
    acts = tuple(_act(attrs[a], "lstm")[0]
                 for a in ("gate_activation", "cell_activation", "candidate_activation"))
    peep = attrs["use_peepholes"]
    bias = b.reshape(-1)
    w_ic, w_fc, w_oc = (bias[4 * d:5 * d], bias[5 * d:6 * d], bias[6 * d:]) if peep else \
        (None, None, None)
    xs = steps.gather(x)
    h = _initial(ins.get("H0"), steps.batch, d, x)
    c = _initial(ins.get("C0"), steps.batch, d, x)
    hs, cs, saved = [], [], []
    for t in range(steps.steps):
        cand, i, f, o, _, c_new, act_c, h_new = _lstm_step(
            xs[t] + h @ w + bias[:4 * d], c, acts, (w_ic, w_fc, w_oc))
        m = steps.mask[t]
        if keep:
            saved.append((h, c, cand, i, f, o, c_new, act_c))
        h = m * h_new + (1 - m) * h
        c = m * c_new + (1 - m) * c
        hs.append(h_new)
        cs.append(c_new)
    return steps, hs, cs, saved, (w_ic, w_fc, w_oc)


def _lstm(ins: dict, attrs: dict, ctx: Any) -> dict:
    x = ins["Input"]
    batch_out = wanted(ctx, "BatchGate") or wanted(ctx, "BatchCellPreAct")
    steps, hs, cs, saved, _ = _lstm_run(ins, attrs, keep=batch_out)
    d = ins["Weight"].shape[0]
    if not hs:
        empty = x.new_zeros((0, d))
        return {"Hidden": empty, "Cell": empty.clone(), "BatchGate": x.new_zeros((0, 4 * d)),
                "BatchCellPreAct": empty.clone()}
    hidden = steps.scatter(torch.stack(hs), x.shape[0])
    cell = steps.scatter(torch.stack(cs), x.shape[0])
    out = {"Hidden": attach_lod(hidden, steps.lod), "Cell": attach_lod(cell, steps.lod)}
    if batch_out:
        out.update(lstm_batch_outputs(steps, saved))
    return out


def lstm_batch_outputs(steps: _Steps, saved: list[tuple]) -> dict:
    """Fluid's intermediate outputs of an LSTM in its batch layout: ``BatchGate`` the
    activated gates (candidate, input, forget, output), ``BatchCellPreAct`` the activated
    cell (what Fluid's kernel keeps under that name)."""
    gates = torch.stack([torch.cat([s[2], s[3], s[4], s[5]], 1) for s in saved])
    act_c = torch.stack([s[7] for s in saved])
    return {"BatchGate": steps.batch_rows(gates), "BatchCellPreAct": steps.batch_rows(act_c)}

def _gate_grads(dc: torch.Tensor, do: torch.Tensor, saved: tuple, m: torch.Tensor,
                d_gate: Any, d_cand: Any, peeps: tuple | None, dbias: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """One LSTM step backward from the cell's and the output gate's gradients: (the four
    gates' gradient, masked by ``m``; the previous cell's gradient). ``saved`` is
    (c_prev, cand, i, f, c_new); ``peeps`` the (input, forget) peephole weights, whose
    gradients (and the output peephole's) are added into ``dbias``."""
    c_prev, cand, i, f, c_new = saved
    d = dc.shape[1]
    di = dc * cand * d_gate(i)
    df = dc * c_prev * d_gate(f)
    dcand = dc * i * d_cand(cand)
    dc_prev = dc * f
    if peeps is not None:
        w_ic, w_fc = peeps
        dc_prev = dc_prev + di * w_ic + df * w_fc
        dbias[4 * d:5 * d] += (m * di * c_prev).sum(0)
        dbias[5 * d:6 * d] += (m * df * c_prev).sum(0)
        dbias[6 * d:] += (m * do * c_new).sum(0)
    return torch.cat([dcand, di, df, do], 1) * m, dc_prev


def _lstm_weight_grads(ctx: Any, steps: _Steps, dgates: torch.Tensor, x: torch.Tensor,
                       dw: torch.Tensor, dbias: torch.Tensor, bias: torch.Tensor) -> dict:
    """The gradients of an LSTM's Input, Weight and Bias that the backward pass needs."""
    out = {}
    if "Input" in ctx.need:
        out["Input@GRAD"] = steps.scatter(dgates, x.shape[0])
    if "Weight" in ctx.need:
        out["Weight@GRAD"] = dw
    if "Bias" in ctx.need:
        out["Bias@GRAD"] = dbias.reshape(bias.shape)
    return out


def _lstm_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, w = ins["Input"], ins["Weight"]
    d = w.shape[0]
    steps, _, _, saved, (w_ic, w_fc, w_oc) = _lstm_run(ins, attrs, keep=True)
    _, d_gate = _act(attrs["gate_activation"], "lstm")
    _, d_cell = _act(attrs["cell_activation"], "lstm")
    _, d_cand = _act(attrs["candidate_activation"], "lstm")
    peep = attrs["use_peepholes"]
    zeros = x.new_zeros((x.shape[0], d))
    dhidden = steps.gather(ins.get("Hidden@GRAD") if ins.get("Hidden@GRAD") is not None
                           else zeros)
    dcell = steps.gather(ins.get("Cell@GRAD") if ins.get("Cell@GRAD") is not None else zeros)
    dh_next = x.new_zeros((steps.batch, d))
    dc_next = x.new_zeros((steps.batch, d))
    dgates = x.new_zeros((steps.steps, steps.batch, 4 * d))
    dw = torch.zeros_like(w)
    dbias = torch.zeros_like(ins["Bias"].reshape(-1))
    for t in reversed(range(steps.steps)):
        h_prev, c_prev, cand, i, f, o, c_new, act_c = saved[t]
        m = steps.mask[t]
        dh = dhidden[t] + dh_next
        do = dh * act_c * d_gate(o)
        dc = dh * o * d_cell(act_c) + dc_next + dcell[t]
        if peep:
            dc = dc + do * w_oc
        g, dc_prev = _gate_grads(dc, do, (c_prev, cand, i, f, c_new), m, d_gate, d_cand,
                                 (w_ic, w_fc) if peep else None, dbias)
        dgates[t] = g
        dw += h_prev.t() @ g
        dbias[:4 * d] += g.sum(0)
        dh_next = g @ w.t() + (1 - m) * dh
        dc_next = m * dc_prev + (1 - m) * dc_next
    out = _lstm_weight_grads(ctx, steps, dgates, x, dw, dbias, ins["Bias"])
    if "H0" in ctx.need:
        out["H0@GRAD"] = dh_next
    if "C0" in ctx.need:
        out["C0@GRAD"] = dc_next
    return out


register_op("lstm", inputs=("Input", "H0?", "C0?", "Weight", "Bias"),
            outputs=("Hidden", "Cell", "BatchGate?", "BatchCellPreAct?"),
            attrs={"use_peepholes": True, "is_reverse": False,
                   "gate_activation": "sigmoid", "cell_activation": "tanh",
                   "candidate_activation": "tanh"},
            infer_shape=_lstm_shape, kernel=_lstm, grad_kernel=_lstm_grad,
            grad_uses=("Input", "H0", "C0", "Weight", "Bias"))

# ----------------------------------------------------------------------------- gru


def _gru_shape(ins: dict, attrs: dict) -> dict:
    x, w, b = ins["Input"], ins["Weight"], ins.get("Bias")
    d = w.shape[0]
    if len(w.shape) != 2 or w.shape[1] != 3 * d:
        raise ValueError(f"gru: Weight must be [D, 3D], got {list(w.shape)}")
    if x.shape[-1] not in (3 * d, -1):
        raise ValueError(f"gru: Input has {x.shape[-1]} columns; the Weight {list(w.shape)} "
                         f"needs 3*D = {3 * d} (project the input with fc(size={3 * d}))")
    if b is not None and tuple(b.shape) != (1, 3 * d):
        raise ValueError(f"gru: Bias must be [1, {3 * d}], got {list(b.shape)}")
    for act in ("gate_activation", "activation"):
        _act(attrs[act], "gru")
    meta = Meta((x.shape[0], d), x.dtype)
    return {"Hidden": meta, "BatchGate": Meta((x.shape[0], 3 * d), x.dtype),
            "BatchResetHiddenPrev": meta, "BatchHidden": meta}


def _gru_run(ins: dict, attrs: dict, keep: bool) -> tuple:
    x, w, b = ins["Input"], ins["Weight"], ins.get("Bias")
    d = w.shape[0]
    steps = _Steps(x, "gru", attrs["is_reverse"])
    gate, _ = _act(attrs["gate_activation"], "gru")
    act, _ = _act(attrs["activation"], "gru")
    w_ur, w_c = _gru_weights(w)
    xs = steps.gather(x)
    if b is not None:
        xs = xs + b.reshape(-1)
    h = _initial(ins.get("H0"), steps.batch, d, x)
    hs, saved = [], []
    for t in range(steps.steps):
        ur = gate(xs[t][:, :2 * d] + h @ w_ur)
        u, r = ur[:, :d], ur[:, d:]
        rh = r * h
        cand = act(xs[t][:, 2 * d:] + rh @ w_c)
        h_new = u * h + (1 - u) * cand if attrs["origin_mode"] else (1 - u) * h + u * cand
        if keep:
            saved.append((h, u, r, rh, cand))
        m = steps.mask[t]
        h = m * h_new + (1 - m) * h
        hs.append(h_new)
    return steps, hs, saved


def _gru_cell_grad(dh: torch.Tensor, h_prev: torch.Tensor, u: torch.Tensor, r: torch.Tensor,
                   cand: torch.Tensor, w_c: torch.Tensor, d_act: Any, d_gate: Any,
                   origin_mode: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """One GRU step backwards from ``dh``: the gradient of the step's pre-activations
    ``[update, reset, candidate]`` and the part of the previous hidden state's gradient that
    does not go through the update/reset weights (the caller adds ``d[:, :2D] @ W_ur^T``)."""
    if origin_mode:
        du, dcand, dh_prev = dh * (h_prev - cand), dh * (1 - u), dh * u
    else:
        du, dcand, dh_prev = dh * (cand - h_prev), dh * u, dh * (1 - u)
    dc_pre = dcand * d_act(cand)
    drh = dc_pre @ w_c.t()
    dh_prev = dh_prev + drh * r
    dur = torch.cat([du * d_gate(u), drh * h_prev * d_gate(r)], 1)
    return torch.cat([dur, dc_pre], 1), dh_prev


def _gru(ins: dict, attrs: dict, ctx: Any) -> dict:
    x = ins["Input"]
    d = ins["Weight"].shape[0]
    batch_out = any(wanted(ctx, s) for s in ("BatchGate", "BatchResetHiddenPrev",
                                             "BatchHidden"))
    steps, hs, saved = _gru_run(ins, attrs, keep=batch_out)
    if not hs:
        empty = x.new_zeros((0, d))
        return {"Hidden": empty, "BatchGate": x.new_zeros((0, 3 * d)),
                "BatchResetHiddenPrev": empty.clone(), "BatchHidden": empty.clone()}
    out = {"Hidden": attach_lod(steps.scatter(torch.stack(hs), x.shape[0]), steps.lod)}
    if batch_out:
        # Fluid's batch layout: the activated gates (update, reset, candidate), the reset
        # previous hidden state r * h_prev, and the new hidden state
        gates = torch.stack([torch.cat([u, r, cand], 1) for _, u, r, _, cand in saved])
        out["BatchGate"] = steps.batch_rows(gates)
        out["BatchResetHiddenPrev"] = steps.batch_rows(torch.stack([s[3] for s in saved]))
        out["BatchHidden"] = steps.batch_rows(torch.stack(hs))
    return out


def _gru_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, w = ins["Input"], ins["Weight"]
    d = w.shape[0]
    steps, _, saved = _gru_run(ins, attrs, keep=True)
    _, d_gate = _act(attrs["gate_activation"], "gru")
    _, d_act = _act(attrs["activation"], "gru")
    w_ur, w_c = _gru_weights(w)
    dhidden = steps.gather(ins["Hidden@GRAD"])
    dh_next = x.new_zeros((steps.batch, d))
    dxs = x.new_zeros((steps.steps, steps.batch, 3 * d))
    dw_ur, dw_c = torch.zeros_like(w_ur), torch.zeros_like(w_c)
    for t in reversed(range(steps.steps)):
        h_prev, u, r, rh, cand = saved[t]
        m = steps.mask[t]
        dh = dhidden[t] + dh_next
        g, dh_prev = _gru_cell_grad(dh, h_prev, u, r, cand, w_c, d_act, d_gate,
                                    attrs["origin_mode"])
        g = g * m
        dxs[t] = g
        dw_ur += h_prev.t() @ g[:, :2 * d]
        dw_c += rh.t() @ g[:, 2 * d:]
        dh_prev = dh_prev + g[:, :2 * d] @ w_ur.t()
        dh_next = m * dh_prev + (1 - m) * dh
    out = {}
    if "Input" in ctx.need:
        out["Input@GRAD"] = steps.scatter(dxs, x.shape[0])
    if "Weight" in ctx.need:
        out["Weight@GRAD"] = torch.cat([dw_ur.reshape(-1), dw_c.reshape(-1)]).reshape(w.shape)
    if "Bias" in ctx.need:
        out["Bias@GRAD"] = dxs.sum((0, 1)).reshape(1, -1)
    if "H0" in ctx.need:
        out["H0@GRAD"] = dh_next
    return out


register_op("gru", inputs=("Input", "H0?", "Weight", "Bias?"),
            outputs=("BatchGate?", "BatchResetHiddenPrev?", "BatchHidden?", "Hidden"),
            attrs={"is_reverse": False, "gate_activation": "sigmoid", "activation": "tanh",
                   "origin_mode": False},
            infer_shape=_gru_shape, kernel=_gru, grad_kernel=_gru_grad,
            grad_uses=("Input", "H0", "Weight", "Bias"))


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
    dx, dhp = _gru_cell_grad(dh, hp, u, r, c, w_c, dact, dgate, attrs["origin_mode"])
    dur_pre, dc_pre = dx[:, :2 * hp.shape[1]], dx[:, 2 * hp.shape[1]:]
    dhp = dhp + dur_pre @ w_ur.t()
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
