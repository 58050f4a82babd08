"""Fluid 1.6's remaining tensor ops: ``fill``, ``fill_zeros_like2``, ``coalesce_tensor`` and
``lookup_sparse_table``.

- ``fill``: ``Out`` holds ``value`` (a flat list) in ``shape``, cast to ``dtype``;
- ``fill_zeros_like2``: zeros of ``X``'s shape in ``dtype`` (``fill_zeros_like`` keeps X's);
- ``coalesce_tensor``: one flat buffer ``FusedOutput`` holding every input, each starting at
  a 4096-byte boundary as Fluid's CPU allocator aligns them (the gap is zeros), and
  ``Output[i]``: views of it shaped like ``Input[i]`` (filled with the inputs with
  ``copy_data``, with ``constant`` with ``set_constant``, else zeros);
- ``lookup_sparse_table``: rows of a SelectedRows table by id; an id the table lacks gets
  zeros with ``is_test``, else (``auto_grown_table``) the table's next preallocated row,
  which it then keeps (Fluid's auto-grown table: ``W.value`` has room for more rows than
  ``W.rows`` lists, initialised by the startup program).

``dtype`` attrs take parafluid's names ("float32") or Fluid's ``VarType`` numbers (5 = FP32),
as a program saved by Fluid holds them.

Example::

    {Out=[t]} = fill() {value=[1.0, 2.0], shape=[2, 1], dtype=float32}
"""

from __future__ import annotations

from typing import Any

import torch

from ..dtypes import convert_dtype, to_torch
from ..lod import attach_lod, get_lod
from ..scope import SelectedRows
from .common import numel
from .registry import Meta, register_op

__all__ = ["fluid_dtype"]

# Fluid's framework.proto VarType numbers of the tensor dtypes
_PROTO_DTYPES = {0: "bool", 1: "int16", 2: "int32", 3: "int64", 4: "float16", 5: "float32",
                 6: "float64", 20: "uint8", 21: "int8"}
_ALIGN_BYTES = 4096  # Fluid's CpuMinChunkSize: coalesce_tensor's alignment on the CPU


def fluid_dtype(op: str, value: Any) -> str:
    """A ``dtype`` attr as parafluid's name: a name, or Fluid's VarType number."""
    if isinstance(value, int) and not isinstance(value, bool):
        if value not in _PROTO_DTYPES:
            raise ValueError(f"{op}: dtype {value} is not one of Fluid's tensor dtypes "
                             f"{_PROTO_DTYPES}")
        return _PROTO_DTYPES[value]
    try:
        return convert_dtype(value)
    except TypeError as e:
        raise TypeError(f"{op}: attr dtype: {e}") from None


# ----------------------------------------------------------------------------- fill


def _fill_shape(ins: dict, attrs: dict) -> dict:
    shape, value = list(attrs["shape"]), list(attrs["value"])
    if any(d < 0 for d in shape) or numel(shape) != len(value):
        raise ValueError(f"fill: value has {len(value)} elements but shape {shape} needs "
                         f"{numel(shape)}")
    return {"Out": Meta(tuple(shape), fluid_dtype("fill", attrs["dtype"]))}


def _fill(ins: dict, attrs: dict, ctx: Any) -> dict:
    dtype = to_torch(fluid_dtype("fill", attrs["dtype"]))
    # Fluid keeps the values as floats and casts them: 2.7 fills an int tensor with 2
    values = torch.tensor([float(v) for v in attrs["value"]], dtype=torch.float64)
    device = "cpu" if attrs["force_cpu"] else ctx.device
    return {"Out": values.to(dtype).reshape(list(attrs["shape"])).to(device)}


register_op("fill", outputs=("Out",),
            attrs={"value": [], "shape": [], "dtype": "float32", "force_cpu": False},
            infer_shape=_fill_shape, kernel=_fill)


# ----------------------------------------------------------------------------- fill_zeros_like2


def _fzl2_shape(ins: dict, attrs: dict) -> dict:
    return {"Out": Meta(ins["X"].shape, fluid_dtype("fill_zeros_like2", attrs["dtype"]))}


def _fzl2(ins: dict, attrs: dict, ctx: Any) -> dict:
    dtype = to_torch(fluid_dtype("fill_zeros_like2", attrs["dtype"]))
    return {"Out": torch.zeros(ins["X"].shape, dtype=dtype, device=ins["X"].device)}


register_op("fill_zeros_like2", inputs=("X",), outputs=("Out",), attrs={"dtype": "float32"},
            infer_shape=_fzl2_shape, kernel=_fzl2)


# ----------------------------------------------------------------------------- coalesce_tensor


def _aligned(n: int, itemsize: int) -> int:
    """Elements a tensor of ``n`` elements takes in the fused buffer."""
    size = n * itemsize
    return (size + (-size) % _ALIGN_BYTES) // itemsize


def _coalesce_shape(ins: dict, attrs: dict) -> dict:
    op = "coalesce_tensor"
    dtype = fluid_dtype(op, attrs["dtype"])
    xs = ins["Input"]
    if not xs:
        raise ValueError(f"{op}: Input must hold at least one tensor")
    for i, x in enumerate(xs):
        if x.dtype != dtype:
            raise TypeError(f"{op}: Input[{i}] is {x.dtype} but dtype is {dtype}")
    if any(-1 in x.shape for x in xs):
        total = -1
    else:
        item = to_torch(dtype).itemsize
        total = sum(_aligned(numel(x.shape), item) for x in xs)
    return {"Output": list(xs), "FusedOutput": Meta((total,), dtype)}


def _coalesce(ins: dict, attrs: dict, ctx: Any) -> dict:
    op = "coalesce_tensor"
    dtype = to_torch(fluid_dtype(op, attrs["dtype"]))
    xs = ins["Input"]
    sizes = [_aligned(x.numel(), dtype.itemsize) for x in xs]
    fused = torch.zeros(sum(sizes), dtype=dtype, device=xs[0].device)
    if attrs["set_constant"] and not attrs["copy_data"]:
        fused.fill_(float(attrs["constant"]))
    outs, start = [], 0
    for x, size in zip(xs, sizes):
        view = fused[start:start + x.numel()]
        if attrs["copy_data"]:
            view.copy_(x.reshape(-1))
        outs.append(attach_lod(view.view(x.shape), get_lod(x)))
        start += size
    return {"Output": outs, "FusedOutput": fused}


register_op("coalesce_tensor", inputs=("Input[]",), outputs=("Output[]", "FusedOutput"),
            attrs={"dtype": "float32", "copy_data": False, "set_constant": False,
                   "constant": 0.0, "check_name": False},
            infer_shape=_coalesce_shape, kernel=_coalesce)


# ----------------------------------------------------------------------------- lookup_sparse_table


def _lst_shape(ins: dict, attrs: dict) -> dict:
    w, ids = ins["W"], ins["Ids"]
    if ids.dtype not in ("int64", "int32"):
        raise TypeError(f"lookup_sparse_table: Ids must be int64, got {ids.dtype}")
    n = numel(ids.shape) if -1 not in ids.shape else -1
    return {"Out": Meta((n, *w.shape[1:]), w.dtype)}


def _lst(ins: dict, attrs: dict, ctx: Any) -> dict:
    op = "lookup_sparse_table"
    w, ids = ins["W"], ins["Ids"]
    if not isinstance(w, SelectedRows):
        raise TypeError(f"{op}: W must be a SelectedRows table, got {type(w).__name__}")
    flat = ids.reshape(-1).long().tolist()
    index = {int(r): i for i, r in enumerate(w.rows.tolist())}
    rows = []
    grow = attrs["auto_grown_table"] and not attrs["is_test"]
    for i in flat:
        if i not in index and grow:
            if len(index) >= w.value.shape[0]:
                raise ValueError(f"{op}: id {i} is new but the table's {w.value.shape[0]} "
                                 "preallocated rows are all taken; allocate a larger table")
            index[i] = len(index)
            w.rows = torch.cat([w.rows, torch.tensor([i], dtype=w.rows.dtype,
                                                     device=w.rows.device)])
        rows.append(index.get(i, -1))
    pos = torch.tensor(rows, dtype=torch.long, device=w.value.device)
    out = w.value.index_select(0, pos.clamp(min=0))
    missing = pos < 0
    pad = attrs["padding_idx"]
    if pad != -1:
        missing = missing | (torch.tensor(flat, device=pos.device) == pad)
    out = out.masked_fill(missing.reshape(-1, *([1] * (out.dim() - 1))), 0.0)
    return {"Out": attach_lod(out, get_lod(ids))}


register_op("lookup_sparse_table", inputs=("W", "Ids"), outputs=("Out",),
            attrs={"padding_idx": -1, "auto_grown_table": True, "is_test": False},
            infer_shape=_lst_shape, kernel=_lst, side_effect=True,
            no_compile="grows its table on the host")
