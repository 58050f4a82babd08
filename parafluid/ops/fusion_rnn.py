"""Fluid's fused recurrent ops (inference ops: Fluid registers no gradient for them):

- ``fusion_lstm``: ``lstm(mul(X, WeightX), WeightH, Bias, H0, C0)``;
- ``fusion_gru``: ``gru(mul(X, WeightX), WeightH, Bias, H0)`` (Fluid's GRU weight layout,
  ``h = (1-u)·h_prev + u·c``);
- ``fused_embedding_fc_lstm``: ``lstm(lookup_table(Embeddings, Ids), WeightH, Bias, ...)``
  (the table holds embeddings already projected to the 4·D gates);
- ``attention_lstm``: an LSTM whose step input is an attention-weighted sum of its
  sequence's rows (scored from the rows and the previous cell), Fluid's own gate order
  (forget, input, output, candidate) and weight ``[D + M, 4D]`` (hidden rows first).

The first three run the registered ``lstm``/``gru`` kernels, so they compute what their
unfused programs compute. ``XX`` is the projected input ``X·WeightX + Bias`` (with
``use_seq=False`` and ``M <= 4D`` Fluid keeps ``X`` in batch order there instead, as here).
``use_seq=False`` also fills Fluid's batch-order intermediates: the rows of the sequences
sorted by length (longest first), time step by time step (``BatchedInput``, ``BatchedHidden``,
``BatchedCell``/``BatchedOut``) and the initial states in that order (``ReorderedH0``,
``ReorderedC0``, only when given). ``CheckedCell`` is scratch space in Fluid (no defined
content): zeros here. attention_lstm's ``AttentionFCOut``, ``LSTMX`` and ``LSTMOUT`` hold the
last step's attention weights (zero past that sequence's length), step input and activated
gates.

Example::

    {Hidden=[h], Cell=[c], XX=[xx], ...} = fusion_lstm(X=[x], WeightX=[wx], WeightH=[wh],
        Bias=[b]) {use_peepholes=False, use_seq=True}
"""

from __future__ import annotations

from typing import Any

import torch

from ..lod import attach_lod, get_lod, require_lod
from .fusion_math import call_kernel
from .registry import Meta, register_op
from .rnn import _act

__all__: list[str] = []

_LSTM_ATTRS = {"use_peepholes": True, "is_reverse": False, "use_seq": True,
               "gate_activation": "sigmoid", "cell_activation": "tanh",
               "candidate_activation": "tanh"}


def _batch_rows(offsets: list[int], reverse: bool, device: torch.device) -> torch.Tensor:
    """Fluid's batch order (LoDTensor2Batch): step by step, the rows of the sequences sorted
    by length (longest first; ties keep their order)."""
    lengths = [e - s for s, e in zip(offsets, offsets[1:])]
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    rows = []
    for t in range(max(lengths, default=0)):
        for i in order:
            if lengths[i] > t:
                rows.append(offsets[i] + (lengths[i] - 1 - t if reverse else t))
    return torch.tensor(rows, dtype=torch.long, device=device)


def _seq_order(offsets: list[int], device: torch.device) -> torch.Tensor:
    lengths = [e - s for s, e in zip(offsets, offsets[1:])]
    return torch.tensor(sorted(range(len(lengths)), key=lambda i: -lengths[i]),
                        dtype=torch.long, device=device)


def _check_2d(op: str, slot: str, meta: Meta, cols: int | None = None) -> None:
    if len(meta.shape) != 2 or (cols is not None and meta.shape[1] not in (cols, -1)):
        want = f"[N, {cols}]" if cols is not None else "2-D"
        raise ValueError(f"{op}: {slot} must be {want}, got shape {list(meta.shape)}")


def _check_acts(op: str, attrs: dict, keys: tuple[str, ...]) -> None:
    for key in keys:
        _act(attrs[key], op)


# ---------------------------------------------------------------- fused lstm


def _lstm_bias_check(op: str, b: Meta, d: int, attrs: dict) -> None:
    want = 7 * d if attrs["use_peepholes"] else 4 * d
    if tuple(b.shape) != (1, want):
        raise ValueError(f"{op}: Bias must be [1, {want}] (use_peepholes="
                         f"{attrs['use_peepholes']}), got {list(b.shape)}")


def _lstm_metas(op: str, ins: dict, rows: int, d: int, dtype: str, attrs: dict,
                xx_width: int) -> dict:
    out = Meta((rows, d), dtype)
    metas = {"Hidden": out, "Cell": out, "XX": Meta((rows, xx_width), dtype)}
    if not attrs["use_seq"]:
        metas.update(BatchedInput=Meta((rows, 4 * d), dtype), BatchedHidden=out,
                     BatchedCell=out)
        for slot in ("H0", "C0"):
            if ins.get(slot) is not None:
                metas["Reordered" + slot] = ins[slot]
    if attrs["use_peepholes"] and op == "fusion_lstm":
        metas["CheckedCell"] = Meta((2, d), dtype)
    _check_acts(op, attrs, ("gate_activation", "cell_activation", "candidate_activation"))
    return metas


def _fusion_lstm_shape(ins: dict, attrs: dict) -> dict:
    op = "fusion_lstm"
    x, wx, wh = ins["X"], ins["WeightX"], ins["WeightH"]
    _check_2d(op, "X", x)
    _check_2d(op, "WeightX", wx)
    d = wx.shape[1] // 4
    if x.shape[1] not in (-1, wx.shape[0]):
        raise ValueError(f"{op}: WeightX has {wx.shape[0]} rows; X has {x.shape[1]} columns")
    if tuple(wh.shape) != (d, 4 * d):
        raise ValueError(f"{op}: WeightH must be [{d}, {4 * d}], got {list(wh.shape)}")
    _lstm_bias_check(op, ins["Bias"], d, attrs)
    m = x.shape[1]
    xx_width = 4 * d if attrs["use_seq"] or m > 4 * d else m
    return _lstm_metas(op, ins, x.shape[0], d, x.dtype, attrs, xx_width)


def _lstm_outputs(op: str, gates: torch.Tensor, x: torch.Tensor, ins: dict, attrs: dict,
                  ctx: Any, offsets: list[int]) -> dict:
    """Run the lstm kernel on the projected ``gates`` (bias not added) and fill the
    intermediates; ``x`` is what batch mode keeps in ``XX`` when it is narrower."""
    bias, d = ins["Bias"], ins["WeightH"].shape[0]
    lod = [list(offsets)]
    lstm_attrs = {k: attrs[k] for k in _LSTM_ATTRS if k != "use_seq"}
    res = call_kernel("lstm", {"Input": attach_lod(gates, lod), "H0": ins.get("H0"),
                               "C0": ins.get("C0"), "Weight": ins["WeightH"], "Bias": bias},
                      lstm_attrs, ctx)
    xx = gates + bias.reshape(-1)[:4 * d]
    out = {"Hidden": res["Hidden"], "Cell": res["Cell"]}
    if attrs["use_seq"]:
        out["XX"] = attach_lod(xx, lod)
    else:
        rows = _batch_rows(offsets, attrs["is_reverse"], gates.device)
        keep_x = x is not None and x.shape[1] <= 4 * d
        out["XX"] = attach_lod(x.index_select(0, rows) if keep_x else xx, lod)
        out["BatchedInput"] = xx.index_select(0, rows)
        out["BatchedHidden"] = res["Hidden"].index_select(0, rows)
        out["BatchedCell"] = res["Cell"].index_select(0, rows)
        order = _seq_order(offsets, gates.device)
        for slot in ("H0", "C0"):
            if ins.get(slot) is not None:
                out["Reordered" + slot] = ins[slot].index_select(0, order)
    if attrs["use_peepholes"] and op == "fusion_lstm":
        out["CheckedCell"] = gates.new_zeros((2, d))
    return out


def _fusion_lstm(ins: dict, attrs: dict, ctx: Any) -> dict:
    x = ins["X"]
    offsets = require_lod("fusion_lstm", "X", x)
    gates = call_kernel("mul", {"X": x, "Y": ins["WeightX"]}, ctx=ctx)["Out"]
    return _lstm_outputs("fusion_lstm", gates, x, ins, attrs, ctx, offsets)


_LSTM_OUTS = ("Hidden", "Cell", "XX", "BatchedInput?", "BatchedHidden?", "BatchedCell?",
              "ReorderedH0?", "ReorderedC0?")

register_op("fusion_lstm", inputs=("X", "WeightX", "WeightH", "Bias", "H0?", "C0?"),
            outputs=(*_LSTM_OUTS, "CheckedCell?"), attrs=dict(_LSTM_ATTRS),
            infer_shape=_fusion_lstm_shape, kernel=_fusion_lstm)


def _emb_lstm_shape(ins: dict, attrs: dict) -> dict:
    op = "fused_embedding_fc_lstm"
    ids, emb, wh = ins["Ids"], ins["Embeddings"], ins["WeightH"]
    if ids.dtype not in ("int64", "int32"):
        raise TypeError(f"{op}: Ids must be int64 (or int32), got {ids.dtype}")
    if len(ids.shape) != 2 or ids.shape[1] not in (1, -1):
        raise ValueError(f"{op}: Ids must be [T, 1], got {list(ids.shape)}")
    _check_2d(op, "Embeddings", emb)
    d = wh.shape[0]
    if tuple(wh.shape) != (d, 4 * d) or emb.shape[1] != 4 * d:
        raise ValueError(f"{op}: WeightH must be [D, 4D] and Embeddings [V, 4D], got "
                         f"{list(wh.shape)} and {list(emb.shape)}")
    _lstm_bias_check(op, ins["Bias"], d, attrs)
    return _lstm_metas(op, ins, ids.shape[0], d, emb.dtype, attrs, 4 * d)


def _emb_lstm(ins: dict, attrs: dict, ctx: Any) -> dict:
    ids = ins["Ids"]
    offsets = require_lod("fused_embedding_fc_lstm", "Ids", ids)
    gates = call_kernel("lookup_table", {"W": ins["Embeddings"], "Ids": ids.reshape(-1, 1)},
                        ctx=ctx)["Out"]
    # the Embeddings rows are the gates with their bias already in (Fluid's kernel copies
    # them and reads only the peephole weights from Bias)
    bias = ins["Bias"].clone()
    bias.reshape(-1)[:gates.shape[1]] = 0
    return _lstm_outputs("fused_embedding_fc_lstm", gates, None, {**ins, "Bias": bias},
                         attrs, ctx, offsets)


register_op("fused_embedding_fc_lstm",
            inputs=("Ids", "Embeddings", "WeightH", "Bias", "H0?", "C0?"),
            outputs=_LSTM_OUTS, attrs=dict(_LSTM_ATTRS),
            infer_shape=_emb_lstm_shape, kernel=_emb_lstm)

# ---------------------------------------------------------------- fusion_gru


def _fusion_gru_shape(ins: dict, attrs: dict) -> dict:
    op = "fusion_gru"
    x, wx, wh, b = ins["X"], ins["WeightX"], ins["WeightH"], ins.get("Bias")
    _check_2d(op, "X", x)
    _check_2d(op, "WeightX", wx)
    d = wx.shape[1] // 3
    if x.shape[1] not in (-1, wx.shape[0]):
        raise ValueError(f"{op}: WeightX has {wx.shape[0]} rows; X has {x.shape[1]} columns")
    if tuple(wh.shape) != (d, 3 * d):
        raise ValueError(f"{op}: WeightH must be [{d}, {3 * d}], got {list(wh.shape)}")
    if b is not None and tuple(b.shape) != (1, 3 * d):
        raise ValueError(f"{op}: Bias must be [1, {3 * d}], got {list(b.shape)}")
    if ins.get("H0") is not None:
        _check_2d(op, "H0", ins["H0"], d)
    _check_acts(op, attrs, ("gate_activation", "activation"))
    out = Meta((x.shape[0], d), x.dtype)
    m = x.shape[1]
    xx_width = 3 * d if attrs["use_seq"] or m > 3 * d else m
    metas = {"Hidden": out, "XX": Meta((x.shape[0], xx_width), x.dtype)}
    if not attrs["use_seq"]:
        metas.update(BatchedInput=Meta((x.shape[0], 3 * d), x.dtype), BatchedOut=out)
        if ins.get("H0") is not None:
            metas["ReorderedH0"] = ins["H0"]
    return metas


def _fusion_gru(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, b, d = ins["X"], ins.get("Bias"), ins["WeightH"].shape[0]
    offsets = require_lod("fusion_gru", "X", x)
    gates = call_kernel("mul", {"X": x, "Y": ins["WeightX"]}, ctx=ctx)["Out"]
    lod = [list(offsets)]
    res = call_kernel("gru", {"Input": attach_lod(gates, lod), "H0": ins.get("H0"),
                              "Weight": ins["WeightH"], "Bias": b},
                      {"is_reverse": attrs["is_reverse"], "origin_mode": False,
                       "activation": attrs["activation"],
                       "gate_activation": attrs["gate_activation"]}, ctx)
    xx = gates if b is None else gates + b.reshape(-1)
    out = {"Hidden": res["Hidden"]}
    if attrs["use_seq"]:
        out["XX"] = attach_lod(xx, lod)
        return out
    rows = _batch_rows(offsets, attrs["is_reverse"], x.device)
    out["XX"] = attach_lod(x.index_select(0, rows) if x.shape[1] <= 3 * d else xx, lod)
    out["BatchedInput"] = xx.index_select(0, rows)
    out["BatchedOut"] = res["Hidden"].index_select(0, rows)
    if ins.get("H0") is not None:
        out["ReorderedH0"] = ins["H0"].index_select(0, _seq_order(offsets, x.device))
    return out


register_op("fusion_gru", inputs=("X", "H0?", "WeightX", "WeightH", "Bias?"),
            outputs=("ReorderedH0?", "XX", "BatchedInput?", "BatchedOut?", "Hidden"),
            attrs={"activation": "tanh", "gate_activation": "sigmoid", "is_reverse": False,
                   "use_seq": True},
            infer_shape=_fusion_gru_shape, kernel=_fusion_gru)

# ---------------------------------------------------------------- attention_lstm


def _att_shape(ins: dict, attrs: dict) -> dict:
    op = "attention_lstm"
    x, w, b, c0 = ins["X"], ins["LSTMWeight"], ins["LSTMBias"], ins["C0"]
    _check_2d(op, "X", x)
    _check_2d(op, "LSTMWeight", w)
    m, d = x.shape[1], w.shape[1] // 4
    if m != -1 and w.shape[0] != d + m:
        raise ValueError(f"{op}: LSTMWeight must be [D + M, 4D] = [{d + m}, {4 * d}], got "
                         f"{list(w.shape)}")
    if tuple(b.shape) != (1, 4 * d):
        raise ValueError(f"{op}: LSTMBias must be [1, {4 * d}], got {list(b.shape)}")
    _check_2d(op, "C0", c0, d)
    if ins.get("H0") is not None and tuple(ins["H0"].shape) != tuple(c0.shape):
        raise ValueError(f"{op}: H0 must have C0's shape {list(c0.shape)}, got "
                         f"{list(ins['H0'].shape)}")
    aw = ins["AttentionWeight"]
    if m != -1 and tuple(aw.shape) != (m + d, 1):
        raise ValueError(f"{op}: AttentionWeight must be [M + D, 1] = [{m + d}, 1], got "
                         f"{list(aw.shape)}")
    for slot in ("AttentionBias", "AttentionScalar", "AttentionScalarBias"):
        if ins.get(slot) is not None and tuple(ins[slot].shape) != (1, 1):
            raise ValueError(f"{op}: {slot} must be [1, 1], got {list(ins[slot].shape)}")
    if ins.get("AttentionScalarBias") is not None and ins.get("AttentionScalar") is None:
        raise ValueError(f"{op}: AttentionScalarBias needs AttentionScalar")
    _check_acts(op, attrs, ("gate_activation", "cell_activation", "candidate_activation"))
    out = Meta((x.shape[0], d), x.dtype)
    return {"Hidden": out, "Cell": out, "AttentionedX": Meta((x.shape[0], 1), x.dtype),
            "AttentionFCOut": Meta((-1, 1), x.dtype), "LSTMX": Meta((1, m), x.dtype),
            "LSTMOUT": Meta((1, 4 * d), x.dtype)}


def _att(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, w, b = ins["X"], ins["LSTMWeight"], ins["LSTMBias"].reshape(-1)
    offsets = require_lod("attention_lstm", "X", x)
    m, d = x.shape[1], w.shape[1] // 4
    gate = _act(attrs["gate_activation"], "attention_lstm")[0]
    cell_act = _act(attrs["cell_activation"], "attention_lstm")[0]
    cand_act = _act(attrs["candidate_activation"], "attention_lstm")[0]
    aw = ins["AttentionWeight"].reshape(-1)
    atted = x @ aw[:m].reshape(m, 1)
    if ins.get("AttentionBias") is not None:
        atted = atted + ins["AttentionBias"].reshape(())
    scalar, scalar_bias = ins.get("AttentionScalar"), ins.get("AttentionScalarBias")
    w_h, w_x = w[:d], w[d:]
    hidden, cell = x.new_zeros((x.shape[0], d)), x.new_zeros((x.shape[0], d))
    max_len = max((e - s for s, e in zip(offsets, offsets[1:])), default=0)
    fc_out, lstm_x, gates = x.new_zeros((max_len, 1)), x.new_zeros((1, m)), \
        x.new_zeros((1, 4 * d))
    for i, (s, e) in enumerate(zip(offsets, offsets[1:])):
        c = ins["C0"][i]
        h = ins["H0"][i] if ins.get("H0") is not None else None
        xs = x[s:e]
        for t in range(s, e):
            score = torch.relu(atted[s:e, 0] + torch.dot(c, aw[m:]))
            if scalar is not None:
                score = score * scalar.reshape(())
                if scalar_bias is not None:
                    score = score + scalar_bias.reshape(())
                score = torch.relu(score)
            score = torch.softmax(score, 0)
            step_x = score @ xs
            pre = step_x @ w_x + b
            if h is not None:
                pre = pre + h @ w_h
            f, i_g, o = gate(pre[:d]), gate(pre[d:2 * d]), gate(pre[2 * d:3 * d])
            cand = cand_act(pre[3 * d:])
            c = f * c + i_g * cand
            h = cell_act(c) * o
            hidden[t], cell[t] = h, c
            fc_out = torch.cat([score, score.new_zeros(max_len - (e - s))]).reshape(-1, 1)
            lstm_x, gates = step_x.reshape(1, m), torch.cat([f, i_g, o, cand]).reshape(1, -1)
    lod = get_lod(x)
    return {"Hidden": attach_lod(hidden, lod), "Cell": attach_lod(cell, lod),
            "AttentionedX": atted, "AttentionFCOut": fc_out, "LSTMX": lstm_x,
            "LSTMOUT": gates}


register_op("attention_lstm",
            inputs=("X", "C0", "H0?", "AttentionWeight", "AttentionBias?", "AttentionScalar?",
                    "AttentionScalarBias?", "LSTMWeight", "LSTMBias"),
            outputs=("Hidden", "Cell", "AttentionedX", "AttentionFCOut", "LSTMX", "LSTMOUT"),
            attrs={"gate_activation": "sigmoid", "cell_activation": "tanh",
                   "candidate_activation": "tanh"},
            infer_shape=_att_shape, kernel=_att)
