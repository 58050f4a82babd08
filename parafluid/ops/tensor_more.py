"""The last tensor ops of Fluid 1.6's ``layers/tensor.py`` and ``layers/nn.py`` that programs
commonly use: cumsum, reverse, argsort, range, linspace, eye, diag, and the checks isfinite /
isinf / isnan (``layers.isfinite``, ``has_inf``, ``has_nan``)."""

from __future__ import annotations

from typing import Any

import torch

from ..dtypes import convert_dtype, to_torch
from .registry import Meta, register_op, same_as

__all__: list[str] = []


def _axis(op: str, axis: int, ndim: int) -> int:
    if not -ndim <= axis < max(ndim, 1):
        raise ValueError(f"{op}: axis {axis} is out of range for an input of rank {ndim}")
    return axis % max(ndim, 1)


# ----------------------------------------------------------------------------- cumsum


def _cumsum(x: torch.Tensor, attrs: dict) -> torch.Tensor:
    """Fluid's cumsum: ``exclusive`` shifts by one (the first sum is 0), ``reverse`` sums
    from the end."""
    axis = _axis("cumsum", int(attrs["axis"]), x.dim())
    if attrs["reverse"]:
        x = x.flip(axis)
    out = torch.cumsum(x, axis)
    if attrs["exclusive"]:
        out = out - x
    return out.flip(axis) if attrs["reverse"] else out


def _cumsum_shape(ins: dict, attrs: dict) -> dict:
    _axis("cumsum", int(attrs["axis"]), len(ins["X"].shape))
    return {"Out": ins["X"]}


register_op("cumsum", inputs=("X",), outputs=("Out",),
            attrs={"axis": -1, "exclusive": False, "reverse": False},
            infer_shape=_cumsum_shape,
            kernel=lambda ins, attrs, ctx: {"Out": _cumsum(ins["X"], attrs)},
            # the gradient of a running sum is the running sum the other way
            grad_kernel=lambda ins, attrs, ctx: {"X@GRAD": _cumsum(
                ins["Out@GRAD"], {**attrs, "reverse": not attrs["reverse"]})},
            grad_uses=(), grad_infer_shape=same_as("Out@GRAD", "X@GRAD"))

# ----------------------------------------------------------------------------- reverse


def _reverse_axes(attrs: dict, ndim: int) -> list[int]:
    axes = attrs["axis"] if isinstance(attrs["axis"], (list, tuple)) else [attrs["axis"]]
    if not axes:
        raise ValueError("reverse: axis must name at least one dimension")
    return [_axis("reverse", int(a), ndim) for a in axes]


def _reverse_shape(ins: dict, attrs: dict) -> dict:
    _reverse_axes(attrs, len(ins["X"].shape))
    return {"Out": ins["X"]}


register_op("reverse", inputs=("X",), outputs=("Out",), attrs={"axis": [0]},
            infer_shape=_reverse_shape,
            kernel=lambda ins, attrs, ctx: {
                "Out": ins["X"].flip(_reverse_axes(attrs, ins["X"].dim()))},
            grad_kernel=lambda ins, attrs, ctx: {
                "X@GRAD": ins["Out@GRAD"].flip(_reverse_axes(attrs, ins["Out@GRAD"].dim()))},
            grad_uses=(), grad_infer_shape=same_as("Out@GRAD", "X@GRAD"))

# ----------------------------------------------------------------------------- argsort


def _argsort_shape(ins: dict, attrs: dict) -> dict:
    x = ins["X"]
    _axis("argsort", int(attrs["axis"]), len(x.shape))
    return {"Out": x, "Indices": Meta(x.shape, "int64")}


def _argsort(ins: dict, attrs: dict, ctx: Any) -> dict:
    x = ins["X"]
    axis = _axis("argsort", int(attrs["axis"]), x.dim())
    out, idx = torch.sort(x, dim=axis, descending=bool(attrs["descending"]), stable=True)
    return {"Out": out, "Indices": idx}


register_op("argsort", inputs=("X",), outputs=("Out", "Indices"),
            attrs={"axis": -1, "descending": False}, infer_shape=_argsort_shape,
            kernel=_argsort)

# ----------------------------------------------------------------------------- range, linspace


def _scalar(op: str, slot: str, t: torch.Tensor) -> float:
    if t.numel() != 1:
        raise ValueError(f"{op}: {slot} must hold one value, got shape {list(t.shape)}")
    return t.reshape(-1)[0].item()


def _range(ins: dict, attrs: dict, ctx: Any) -> dict:
    start, end, step = (_scalar("range", s, ins[s]) for s in ("Start", "End", "Step"))
    if step == 0:
        raise ValueError("range: Step must not be 0")
    return {"Out": torch.arange(start, end, step, dtype=ins["Start"].dtype,
                                device=ins["Start"].device)}


register_op("range", inputs=("Start", "End", "Step"), outputs=("Out",),
            infer_shape=lambda ins, attrs: {"Out": Meta((-1,), ins["Start"].dtype)},
            kernel=_range)


def _linspace(ins: dict, attrs: dict, ctx: Any) -> dict:
    start, stop = _scalar("linspace", "Start", ins["Start"]), _scalar("linspace", "Stop",
                                                                     ins["Stop"])
    num = int(_scalar("linspace", "Num", ins["Num"]))
    if num < 1:
        raise ValueError(f"linspace: Num must be at least 1, got {num}")
    dtype = to_torch(convert_dtype(attrs["dtype"]))
    return {"Out": torch.linspace(start, stop, num, dtype=torch.float64,
                                  device=ins["Start"].device).to(dtype)}


register_op("linspace", inputs=("Start", "Stop", "Num"), outputs=("Out",),
            attrs={"dtype": "float32"},
            infer_shape=lambda ins, attrs: {"Out": Meta((-1,), convert_dtype(attrs["dtype"]))},
            kernel=_linspace)

# ----------------------------------------------------------------------------- eye, diag


def _eye_shape(ins: dict, attrs: dict) -> dict:
    rows, cols = int(attrs["num_rows"]), int(attrs["num_columns"])
    cols = rows if cols < 0 else cols
    if rows < 0:
        raise ValueError(f"eye: num_rows must be >= 0, got {rows}")
    return {"Out": Meta((rows, cols), convert_dtype(attrs["dtype"]))}


def _eye(ins: dict, attrs: dict, ctx: Any) -> dict:
    rows, cols = int(attrs["num_rows"]), int(attrs["num_columns"])
    return {"Out": torch.eye(rows, rows if cols < 0 else cols,
                             dtype=to_torch(convert_dtype(attrs["dtype"])), device=ctx.device)}


register_op("eye", outputs=("Out",), attrs={"num_rows": 1, "num_columns": -1,
                                            "dtype": "float32"},
            infer_shape=_eye_shape, kernel=_eye)


def _diag_shape(ins: dict, attrs: dict) -> dict:
    d = ins["Diagonal"]
    if len(d.shape) != 1:
        raise ValueError(f"diag: Diagonal must be 1-D, got shape {list(d.shape)}")
    return {"Out": Meta((d.shape[0], d.shape[0]), d.dtype)}


register_op("diag", inputs=("Diagonal",), outputs=("Out",), infer_shape=_diag_shape,
            kernel=lambda ins, attrs, ctx: {"Out": torch.diag(ins["Diagonal"])})

# ----------------------------------------------------------------------------- checks


def _check(name: str, fn: Any) -> None:
    register_op(name, inputs=("X",), outputs=("Out",),
                infer_shape=lambda ins, attrs: {"Out": Meta((1,), "bool")},
                kernel=lambda ins, attrs, ctx: {"Out": fn(ins["X"]).reshape(1)})


_check("isfinite", lambda x: torch.isfinite(x).all())   # every element finite
_check("isinf", lambda x: torch.isinf(x).any())          # some element is +-inf
_check("isnan", lambda x: torch.isnan(x).any())          # some element is NaN
