"""``cudnn_lstm``: the op of Fluid's ``layers.lstm`` (a cuDNN kernel in Fluid), computed with
torch on any device, and its gradient.

``Input [T, B, input_size]``, states ``InitH``/``InitC [num_layers * dirs, B, H]`` (row
``layer * dirs + direction``) and the flat weight ``W`` in the layout parafluid's
``layers.lstm`` documents: per layer, then per direction (forward first), ``W_x [in, 4H]``,
``W_h [H, 4H]`` (row-major), ``b_x [4H]``, ``b_h [4H]``, the gates in the order input,
forget, output, candidate. Per step ``c = f·c + i·tanh(g)``, ``h = o·tanh(c)`` (sigmoid
gates). ``Out [T, B, H·dirs]``; ``last_h``/``last_c`` like the states. Between layers, when
not ``is_test``, the output goes through dropout (``dropout_prob``, upscale in train,
``seed``); the gradient refuses that case (its masks are not kept): train through
``layers.lstm``, which unrolls into ops with their own gradients. ``Cache`` (cuDNN's
workspace in Fluid) is not read.

Example::

    {Out=[o], last_h=[h], last_c=[c]} = cudnn_lstm(Input=[x], InitH=[h0], InitC=[c0],
        W=[w]) {hidden_size=8, num_layers=2, is_bidirec=True, input_size=4, max_len=20}
"""

from __future__ import annotations

from typing import Any

import torch

from .common import numel
from .registry import Meta, register_op

__all__: list[str] = []

_ATTRS = {"max_len": 20, "dropout_prob": 0.0, "is_bidirec": False, "input_size": 10,
          "hidden_size": 100, "num_layers": 1, "is_test": False, "seed": -1}


def _weight_size(input_size: int, hidden: int, layers: int, dirs: int) -> int:
    size = 0
    for layer in range(layers):
        width = input_size if layer == 0 else hidden * dirs
        size += dirs * (width * 4 * hidden + hidden * 4 * hidden + 8 * hidden)
    return size


def _shape(ins: dict, attrs: dict) -> dict:
    op = "cudnn_lstm"
    x, h0, w = ins["Input"], ins["InitH"], ins["W"]
    hidden, layers = attrs["hidden_size"], attrs["num_layers"]
    dirs = 2 if attrs["is_bidirec"] else 1
    if len(x.shape) != 3:
        raise ValueError(f"{op}: Input must be [seq_len, batch, input_size], got "
                         f"{list(x.shape)}")
    if x.shape[2] not in (-1, attrs["input_size"]):
        raise ValueError(f"{op}: Input has {x.shape[2]} features but input_size is "
                         f"{attrs['input_size']}")
    for slot in ("InitH", "InitC"):
        s = ins[slot].shape
        if len(s) != 3 or s[0] not in (-1, layers * dirs) or s[2] not in (-1, hidden):
            raise ValueError(f"{op}: {slot} must be [{layers * dirs}, batch, {hidden}], got "
                             f"{list(s)}")
    want = _weight_size(attrs["input_size"], hidden, layers, dirs)
    if -1 not in w.shape and numel(w.shape) != want:
        raise ValueError(f"{op}: W must hold {want} values ([{want}]), got {list(w.shape)}")
    return {"Out": Meta((x.shape[0], x.shape[1], hidden * dirs), x.dtype),
            "last_h": h0, "last_c": h0}


def _unpack(w: torch.Tensor, attrs: dict) -> list[list[tuple[torch.Tensor, ...]]]:
    """[layer][direction] -> (W_x, W_h, b_x, b_h), views of ``w``."""
    flat, hidden = w.reshape(-1), attrs["hidden_size"]
    dirs = 2 if attrs["is_bidirec"] else 1
    offset, out, width = 0, [], attrs["input_size"]

    def take(*shape: int) -> torch.Tensor:
        nonlocal offset
        n = 1
        for d in shape:
            n *= d
        piece = flat[offset:offset + n].reshape(shape)
        offset += n
        return piece

    for _ in range(attrs["num_layers"]):
        out.append([(take(width, 4 * hidden), take(hidden, 4 * hidden), take(4 * hidden),
                     take(4 * hidden)) for _ in range(dirs)])
        width = hidden * dirs
    return out


def _dropout_active(attrs: dict) -> bool:
    return attrs["num_layers"] > 1 and attrs["dropout_prob"] > 0 and not attrs["is_test"]


def _run(ins: dict, attrs: dict, keep: bool) -> tuple:
    x, h0, c0 = ins["Input"], ins["InitH"], ins["InitC"]
    dirs = 2 if attrs["is_bidirec"] else 1
    hidden, steps = attrs["hidden_size"], x.shape[0]
    params = _unpack(ins["W"], attrs)
    gen = None
    if _dropout_active(attrs) and attrs["seed"] != -1:
        gen = torch.Generator(device=x.device).manual_seed(int(attrs["seed"]))
    layer_in, last_h, last_c, saved = x, [], [], []
    for layer, per_dir in enumerate(params):
        outs, layer_saved = [], []
        for d, (w_x, w_h, b_x, b_h) in enumerate(per_dir):
            proj = layer_in @ w_x + b_x + b_h
            h, c = h0[layer * dirs + d], c0[layer * dirs + d]
            hs: list[Any] = [None] * steps
            trace = []
            for t in (range(steps) if d == 0 else range(steps - 1, -1, -1)):
                g = proj[t] + h @ w_h
                i, f, o = (torch.sigmoid(g[:, k * hidden:(k + 1) * hidden]) for k in range(3))
                cand = torch.tanh(g[:, 3 * hidden:])
                c_prev, h_prev = c, h
                c = f * c + i * cand
                tc = torch.tanh(c)
                h = o * tc
                hs[t] = h
                if keep:
                    trace.append((t, h_prev, c_prev, i, f, o, cand, tc))
            outs.append(torch.stack(hs))
            last_h.append(h)
            last_c.append(c)
            layer_saved.append(trace)
        saved.append((layer_in, layer_saved))
        layer_in = outs[0] if dirs == 1 else torch.cat(outs, 2)
        if layer < len(params) - 1 and _dropout_active(attrs):
            p = float(attrs["dropout_prob"])
            keep_mask = torch.empty_like(layer_in).bernoulli_(1 - p, generator=gen)
            layer_in = layer_in * keep_mask / (1 - p)
    return layer_in, torch.stack(last_h), torch.stack(last_c), saved, params


def _cudnn_lstm(ins: dict, attrs: dict, ctx: Any) -> dict:
    if ins["Input"].shape[0] > attrs["max_len"]:
        raise ValueError(f"cudnn_lstm: Input has {ins['Input'].shape[0]} steps > max_len "
                         f"{attrs['max_len']}")
    out, last_h, last_c, _, _ = _run(ins, attrs, keep=False)
    return {"Out": out, "last_h": last_h, "last_c": last_c}


def _cudnn_lstm_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    if _dropout_active(attrs):
        raise ValueError("cudnn_lstm_grad: dropout between layers (dropout_prob > 0, "
                         "is_test=False) keeps no masks for the gradient; train through "
                         "fluid.layers.lstm, or set dropout_prob=0")
    x, w = ins["Input"], ins["W"]
    dirs = 2 if attrs["is_bidirec"] else 1
    hidden = attrs["hidden_size"]
    out, _, _, saved, params = _run(ins, attrs, keep=True)
    d_out = ins.get("Out@GRAD")
    d_out = torch.zeros_like(out) if d_out is None else d_out
    dlast_h, dlast_c = ins.get("last_h@GRAD"), ins.get("last_c@GRAD")
    dh0 = torch.zeros_like(ins["InitH"])
    dc0 = torch.zeros_like(ins["InitC"])
    dw_parts: list[list[tuple[torch.Tensor, ...]]] = []
    for layer in reversed(range(len(params))):
        layer_in, traces = saved[layer]
        d_in = torch.zeros_like(layer_in)
        parts = []
        for d in range(dirs):
            w_x, w_h, _, _ = params[layer][d]
            row = layer * dirs + d
            dh_seq = d_out[:, :, d * hidden:(d + 1) * hidden]
            dh = dlast_h[row].clone() if dlast_h is not None else torch.zeros_like(dh0[row])
            dc = dlast_c[row].clone() if dlast_c is not None else torch.zeros_like(dc0[row])
            dwx, dwh = torch.zeros_like(w_x), torch.zeros_like(w_h)
            db = torch.zeros(4 * hidden, dtype=x.dtype, device=x.device)
            for t, h_prev, c_prev, i, f, o, cand, tc in reversed(traces[d]):
                dh = dh + dh_seq[t]
                do = dh * tc
                dc = dc + dh * o * (1 - tc * tc)
                di, df, dcand = dc * cand, dc * c_prev, dc * i
                dg = torch.cat([di * i * (1 - i), df * f * (1 - f), do * o * (1 - o),
                                dcand * (1 - cand * cand)], 1)
                dwx += layer_in[t].t() @ dg
                dwh += h_prev.t() @ dg
                db += dg.sum(0)
                d_in[t] += dg @ w_x.t()
                dh = dg @ w_h.t()
                dc = dc * f
            dh0[row], dc0[row] = dh, dc
            parts.append((dwx, dwh, db, db.clone()))
        dw_parts.insert(0, parts)
        d_out = d_in
    result = {}
    if "Input" in ctx.need:
        result["Input@GRAD"] = d_out
    if "InitH" in ctx.need:
        result["InitH@GRAD"] = dh0
    if "InitC" in ctx.need:
        result["InitC@GRAD"] = dc0
    if "W" in ctx.need:
        flat = [p.reshape(-1) for parts in dw_parts for group in parts for p in group]
        result["W@GRAD"] = torch.cat(flat).reshape(w.shape)
    return result


register_op("cudnn_lstm", inputs=("Input", "InitH", "InitC", "W", "Cache?"),
            outputs=("Out", "last_h", "last_c"), attrs=dict(_ATTRS), infer_shape=_shape,
            kernel=_cudnn_lstm, grad_kernel=_cudnn_lstm_grad,
            grad_uses=("Input", "InitH", "InitC", "W"), no_grad_inputs=("Cache",))
