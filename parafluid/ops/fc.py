"""The ``fc`` op of Fluid 1.6 (what the inference passes fuse ``mul`` + ``elementwise_add``
(+ ``relu``) into): ``Out = act(flatten(Input, in_num_col_dims) @ W + Bias)``, with
``activation_type`` "" or "relu". As in Fluid, it has no gradient (an inference op) and
hands Input's LoD on to Out.
"""

from __future__ import annotations

from typing import Any

import torch

from .common import mm, numel
from .registry import Meta, register_op

__all__: list[str] = []


def _fc_shape(ins: dict, attrs: dict) -> dict:
    x, w, bias = ins["Input"], ins["W"], ins.get("Bias")
    k = int(attrs["in_num_col_dims"])
    if attrs["activation_type"] not in ("", "relu"):
        raise ValueError(f"fc: activation_type must be '' or 'relu', got "
                         f"{attrs['activation_type']!r}")
    if len(w.shape) != 2:
        raise ValueError(f"fc: W must be 2-D [in, out], got {list(w.shape)}")
    if not 0 < k < len(x.shape):
        raise ValueError(f"fc: in_num_col_dims={k} must be in [1, rank of Input "
                         f"{list(x.shape)})")
    cols = numel(x.shape[k:])
    if -1 not in x.shape[k:] and w.shape[0] != -1 and cols != w.shape[0]:
        raise ValueError(f"fc: Input {list(x.shape)} flattened at in_num_col_dims={k} has "
                         f"{cols} columns but W {list(w.shape)} has {w.shape[0]} rows")
    if bias is not None and (numel(bias.shape) not in (w.shape[1], -1) or
                             (len(bias.shape) == 2 and bias.shape[0] != 1)):
        raise ValueError(f"fc: Bias must be [{w.shape[1]}] or [1, {w.shape[1]}], got "
                         f"{list(bias.shape)}")
    return {"Out": Meta((*x.shape[:k], w.shape[1]), x.dtype)}


def _fc(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, w, bias = ins["Input"], ins["W"], ins.get("Bias")
    k = int(attrs["in_num_col_dims"])
    out = mm(x.reshape(numel(x.shape[:k]), -1), w)
    if bias is not None:
        out = out + bias.reshape(-1)
    if attrs["activation_type"] == "relu":
        out = torch.relu(out)
    return {"Out": out.reshape(*x.shape[:k], w.shape[1])}


register_op("fc", inputs=("Input", "W", "Bias?"), outputs=("Out",),
            attrs={"in_num_col_dims": 1, "activation_type": "", "use_mkldnn": False},
            infer_shape=_fc_shape, kernel=_fc, share_lod=("Input", "Out"), fresh_output=True)
