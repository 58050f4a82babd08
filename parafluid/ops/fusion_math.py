"""Fluid's fused math ops (inference ops: Fluid registers no gradient for any of them).

Each kernel computes what the chain of unfused ops computes, by running those ops' own
kernels (``call_kernel``), so a fused op and its unfused program agree bitwise:

- ``fusion_repeated_fc_relu``: ``relu(... relu(relu(X W0 + b0) W1 + b1) ...)``, the hidden
  results in ``ReluOut``;
- ``fusion_squared_mat_sub``: ``((X Y)^2 - X^2 Y^2) * scalar``;
- ``fused_fc_elementwise_layernorm``: ``layer_norm(act(fc(X, W, Bias0)) + Y, Scale, Bias1)``
  (``activation_type`` "" or "relu");
- ``fusion_transpose_flatten_concat``: ``concat([flatten(transpose(x)) for x in X])``;
- ``multihead_matmul``: ERNIE's self-attention core, ``softmax(alpha·Q' K'^T + BiasQK) V'``
  over ``head_number`` heads, with ``Q' = Q + BiasQ`` (and so on) split into heads.

Example::

    {Out=[o], ReluOut=[r0]} = fusion_repeated_fc_relu(X=[x], W=[w0, w1], Bias=[b0, b1])
"""

from __future__ import annotations

import copy
from typing import Any

import torch

from .common import numel
from .registry import Meta, get_op_def, register_op

__all__ = ["call_kernel"]


def call_kernel(op_type: str, ins: dict[str, Any], attrs: dict[str, Any] | None = None,
                ctx: Any = None) -> dict[str, Any]:
    """Run the registered kernel of ``op_type`` on ``ins`` with its attr defaults updated by
    ``attrs``: how a fused kernel computes exactly what its unfused ops compute."""
    opdef = get_op_def(op_type)
    full = copy.deepcopy(opdef.attrs)
    full.update(attrs or {})
    given = {s.name: ins.get(s.name, [] if s.duplicable else None) for s in opdef.inputs}
    return opdef.kernel(given, full, ctx)


def _rank(op: str, slot: str, meta: Meta, rank: int) -> None:
    if len(meta.shape) != rank:
        raise ValueError(f"{op}: {slot} must be {rank}-D, got shape {list(meta.shape)}")


def _fc(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, ctx: Any) -> torch.Tensor:
    out = call_kernel("mul", {"X": x, "Y": w}, ctx=ctx)["Out"]
    if b is not None:
        out = call_kernel("elementwise_add", {"X": out, "Y": b.reshape(-1)}, {"axis": -1},
                          ctx)["Out"]
    return out


# ---------------------------------------------------------------- repeated fc relu


def _repeated_shape(ins: dict, attrs: dict) -> dict:
    x, ws, bs = ins["X"], ins["W"], ins["Bias"]
    op = "fusion_repeated_fc_relu"
    _rank(op, "X", x, 2)
    if len(ws) < 2 or len(bs) != len(ws):
        raise ValueError(f"{op}: W must hold at least 2 weights and Bias one per weight, got "
                         f"{len(ws)} weights and {len(bs)} biases")
    width = x.shape[1]
    for i, (w, b) in enumerate(zip(ws, bs)):
        _rank(op, f"W[{i}]", w, 2)
        if width not in (-1, w.shape[0]):
            raise ValueError(f"{op}: W[{i}] has {w.shape[0]} rows; its input has {width} "
                             "columns")
        if numel(b.shape) != w.shape[1]:
            raise ValueError(f"{op}: Bias[{i}] must have {w.shape[1]} elements, got shape "
                             f"{list(b.shape)}")
        width = w.shape[1]
    return {"Out": Meta((x.shape[0], ws[-1].shape[1]), x.dtype),
            "ReluOut": [Meta((x.shape[0], w.shape[1]), x.dtype) for w in ws[:-1]]}


def _repeated(ins: dict, attrs: dict, ctx: Any) -> dict:
    h, relus = ins["X"], []
    for w, b in zip(ins["W"], ins["Bias"]):
        h = call_kernel("relu", {"X": _fc(h, w, b, ctx)}, ctx=ctx)["Out"]
        relus.append(h)
    return {"Out": relus.pop(), "ReluOut": relus}


register_op("fusion_repeated_fc_relu", inputs=("X", "W[]", "Bias[]"),
            outputs=("ReluOut[]", "Out"), infer_shape=_repeated_shape, kernel=_repeated,
            share_lod=("X", "Out"))

# ---------------------------------------------------------------- squared mat sub


def _sq_shape(ins: dict, attrs: dict) -> dict:
    x, y = ins["X"], ins["Y"]
    op = "fusion_squared_mat_sub"
    _rank(op, "X", x, 2)
    _rank(op, "Y", y, 2)
    if -1 not in (x.shape[1], y.shape[0]) and x.shape[1] != y.shape[0]:
        raise ValueError(f"{op}: X {list(x.shape)} and Y {list(y.shape)} cannot be multiplied")
    out = Meta((x.shape[0], y.shape[1]), x.dtype)
    return {"SquaredX": x, "SquaredY": y, "SquaredXY": out, "Out": out}


def _sq(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, y = ins["X"], ins["Y"]
    xy = call_kernel("matmul", {"X": x, "Y": y}, ctx=ctx)["Out"]
    sq_xy = call_kernel("square", {"X": xy}, ctx=ctx)["Out"]
    sq_x = call_kernel("square", {"X": x}, ctx=ctx)["Out"]
    sq_y = call_kernel("square", {"X": y}, ctx=ctx)["Out"]
    prod = call_kernel("matmul", {"X": sq_x, "Y": sq_y}, ctx=ctx)["Out"]
    diff = call_kernel("elementwise_sub", {"X": sq_xy, "Y": prod}, ctx=ctx)["Out"]
    out = call_kernel("scale", {"X": diff}, {"scale": float(attrs["scalar"])}, ctx)["Out"]
    return {"SquaredX": sq_x, "SquaredY": sq_y, "SquaredXY": sq_xy, "Out": out}


register_op("fusion_squared_mat_sub", inputs=("X", "Y"),
            outputs=("SquaredX", "SquaredY", "SquaredXY", "Out"), attrs={"scalar": 1.0},
            infer_shape=_sq_shape, kernel=_sq)

# ---------------------------------------------------------------- fc + add + layer_norm


def _fc_ln_shape(ins: dict, attrs: dict) -> dict:
    op = "fused_fc_elementwise_layernorm"
    x, w, y = ins["X"], ins["W"], ins["Y"]
    _rank(op, "W", w, 2)
    k = attrs["x_num_col_dims"]
    if not 1 <= k < len(x.shape):
        raise ValueError(f"{op}: x_num_col_dims must be in [1, {len(x.shape) - 1}], got {k}")
    cols = numel(x.shape[k:]) if -1 not in x.shape[k:] else -1
    if cols not in (-1, w.shape[0]):
        raise ValueError(f"{op}: X {list(x.shape)} flattened at x_num_col_dims={k} has {cols} "
                         f"columns but W has {w.shape[0]} rows")
    if attrs["activation_type"] not in ("", "relu"):
        raise ValueError(f"{op}: activation_type must be '' or 'relu', got "
                         f"{attrs['activation_type']!r}")
    fc_shape = (*x.shape[:k], w.shape[1])
    if len(fc_shape) != len(y.shape) or any(a != b and -1 not in (a, b)
                                            for a, b in zip(fc_shape, y.shape)):
        raise ValueError(f"{op}: Y must have the fc output's shape {list(fc_shape)}, got "
                         f"{list(y.shape)}")
    axis = attrs["begin_norm_axis"]
    if not 0 < axis < len(y.shape):
        raise ValueError(f"{op}: begin_norm_axis must be in [1, {len(y.shape) - 1}], got {axis}")
    rows = numel(y.shape[:axis]) if -1 not in y.shape[:axis] else -1
    stat = Meta((rows,), y.dtype)
    return {"Out": y, "Mean": stat, "Variance": stat}


def _fc_ln(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, w, y = ins["X"], ins["W"], ins["Y"]
    k = attrs["x_num_col_dims"]
    fc = call_kernel("mul", {"X": x, "Y": w}, {"x_num_col_dims": k}, ctx)["Out"]
    if ins.get("Bias0") is not None:
        fc = call_kernel("elementwise_add", {"X": fc, "Y": ins["Bias0"].reshape(-1)},
                         {"axis": -1}, ctx)["Out"]
    if attrs["activation_type"] == "relu":
        fc = call_kernel("relu", {"X": fc}, ctx=ctx)["Out"]
    added = call_kernel("elementwise_add", {"X": fc, "Y": y}, ctx=ctx)["Out"]
    ln = call_kernel("layer_norm", {"X": added, "Scale": ins.get("Scale"),
                                    "Bias": ins.get("Bias1")},
                     {"epsilon": float(attrs["epsilon"]),
                      "begin_norm_axis": attrs["begin_norm_axis"]}, ctx)
    return {"Out": ln["Y"], "Mean": ln["Mean"], "Variance": ln["Variance"]}


register_op("fused_fc_elementwise_layernorm",
            inputs=("X", "W", "Bias0?", "Y", "Scale?", "Bias1?"),
            outputs=("Out", "Mean?", "Variance?"),
            attrs={"x_num_col_dims": 1, "activation_type": "", "epsilon": 1e-5,
                   "begin_norm_axis": 1},
            infer_shape=_fc_ln_shape, kernel=_fc_ln, share_lod=("X", "Out"))

# ---------------------------------------------------------------- transpose flatten concat


def _tfc_dims(shape: tuple, attrs: dict) -> tuple[int, int]:
    perm, axis = list(attrs["trans_axis"]), attrs["flatten_axis"]
    op = "fusion_transpose_flatten_concat"
    if sorted(p % max(len(shape), 1) for p in perm) != list(range(len(shape))):
        raise ValueError(f"{op}: trans_axis must be a permutation of the {len(shape)} dims of "
                         f"X, got {perm}")
    if not 0 <= axis <= len(shape):
        raise ValueError(f"{op}: flatten_axis must be in [0, {len(shape)}], got {axis}")
    moved = [shape[p] for p in perm]
    lead, tail = moved[:axis], moved[axis:]
    return (-1 if -1 in lead else numel(lead)), (-1 if -1 in tail else numel(tail))


def _tfc_shape(ins: dict, attrs: dict) -> dict:
    xs, axis = ins["X"], attrs["concat_axis"]
    if axis not in (0, 1):
        raise ValueError(f"fusion_transpose_flatten_concat: concat_axis must be 0 or 1, got "
                         f"{axis}")
    dims = [list(_tfc_dims(tuple(x.shape), attrs)) for x in xs]
    out = list(dims[0])
    for d in dims[1:]:
        if d[1 - axis] != out[1 - axis] and -1 not in (d[1 - axis], out[1 - axis]):
            raise ValueError(f"fusion_transpose_flatten_concat: the flattened inputs "
                             f"{dims} differ on dim {1 - axis}")
        out[axis] = -1 if -1 in (out[axis], d[axis]) else out[axis] + d[axis]
    return {"Out": Meta(tuple(out), xs[0].dtype)}


def _tfc(ins: dict, attrs: dict, ctx: Any) -> dict:
    flat = []
    for x in ins["X"]:
        t = call_kernel("transpose", {"X": x}, {"axis": list(attrs["trans_axis"])}, ctx)["Out"]
        flat.append(call_kernel("flatten", {"X": t}, {"axis": attrs["flatten_axis"]},
                                ctx)["Out"])
    return {"Out": call_kernel("concat", {"X": flat}, {"axis": attrs["concat_axis"]},
                               ctx)["Out"]}


register_op("fusion_transpose_flatten_concat", inputs=("X[]",), outputs=("Out",),
            attrs={"trans_axis": [], "flatten_axis": 1, "concat_axis": 0},
            infer_shape=_tfc_shape, kernel=_tfc)

# ---------------------------------------------------------------- multihead_matmul


def _mhm_shape(ins: dict, attrs: dict) -> dict:
    op = "multihead_matmul"
    q = ins["Q"]
    for key, want in (("transpose_Q", False), ("transpose_K", True), ("transpose_V", False)):
        if bool(attrs[key]) != want:
            raise ValueError(f"{op}: only {key}={want} is supported (Fluid's kernel reads "
                             f"only that layout), got {attrs[key]}")
    _rank(op, "Q", q, 3)
    for slot in ("K", "V"):
        if len(ins[slot].shape) != 3:
            raise ValueError(f"{op}: {slot} must be 3-D like Q, got {list(ins[slot].shape)}")
    heads = attrs["head_number"]
    if heads < 1 or (q.shape[2] != -1 and q.shape[2] % heads):
        raise ValueError(f"{op}: head_number {heads} must divide Q's width {q.shape[2]}")
    return {"Out": q}


def _heads(x: torch.Tensor, bias: torch.Tensor, heads: int) -> torch.Tensor:
    """``[B, S, H·d] + bias`` -> ``[B, H, S, d]``."""
    b, s, w = x.shape
    return (x + bias.reshape(-1)).reshape(b, s, heads, w // heads).permute(0, 2, 1, 3)


def _mhm(ins: dict, attrs: dict, ctx: Any) -> dict:
    heads = attrs["head_number"]
    q = _heads(ins["Q"], ins["BiasQ"], heads) * float(attrs["alpha"])
    k = _heads(ins["K"], ins["BiasK"], heads)
    v = _heads(ins["V"], ins["BiasV"], heads)
    scores = call_kernel("matmul", {"X": q, "Y": k}, {"transpose_Y": True}, ctx)["Out"]
    probs = call_kernel("softmax", {"X": scores + ins["BiasQK"]}, ctx=ctx)["Out"]
    out = call_kernel("matmul", {"X": probs, "Y": v}, ctx=ctx)["Out"]
    b, _, s, _ = out.shape
    return {"Out": out.permute(0, 2, 1, 3).reshape(b, s, -1).contiguous()}


register_op("multihead_matmul", inputs=("Q", "K", "V", "BiasQ", "BiasK", "BiasV", "BiasQK"),
            outputs=("Out",),
            attrs={"transpose_Q": False, "transpose_K": True, "transpose_V": False,
                   "alpha": 1.0, "head_number": 1},
            infer_shape=_mhm_shape, kernel=_mhm, share_lod=("Q", "Out"))
