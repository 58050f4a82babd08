"""Reduction and ordering ops: reduce_sum/mean/max/min/prod, the bool reduce_all/any (no
gradient), arg_max/arg_min, top_k and argsort.

Fluid's reduce attrs: ``dim`` (list of axes, negative counts from the end), ``keep_dim``,
``reduce_all``. Reducing every axis without ``keep_dim`` gives shape ``[1]``, never a
0-d tensor (Fluid 1.x has none); ``arg_max`` of a 1-D input likewise gives ``[1]``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from .common import axis_in_range
from .registry import Meta, register_op

Tensor = torch.Tensor


def _reduce_axes(op: str, attrs: dict, ndim: int) -> list[int]:
    dim = attrs["dim"]
    dims = [dim] if isinstance(dim, int) else list(dim)
    if attrs["reduce_all"] or not dims:
        return list(range(ndim))
    out = []
    for d in dims:
        if not -ndim <= d < ndim:
            raise ValueError(f"{op}: dim {d} is out of range for an input of rank {ndim} "
                             f"(valid: {-ndim}..{ndim - 1})")
        out.append(d % ndim)
    return sorted(set(out))


def _reduced_shape(shape: Any, axes: list[int], keep_dim: bool) -> tuple[int, ...]:
    if keep_dim:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes) or (1,)


def _register_reduce(name: str, fwd: Callable[[Tensor, list[int]], Tensor],
                     bwd: Callable[[Tensor, Tensor, Tensor, int], Tensor],
                     uses: tuple[str, ...]) -> None:
    """``fwd(x, axes)`` keeps the reduced dims; ``bwd(x, out_k, d_k, count)`` gets ``out``
    and ``d`` with the reduced dims kept (size 1) and returns ``X@GRAD``."""

    def infer(ins: dict, attrs: dict) -> dict:
        x = ins["X"]
        axes = _reduce_axes(name, attrs, len(x.shape))
        return {"Out": Meta(_reduced_shape(x.shape, axes, attrs["keep_dim"]), x.dtype)}

    def kernel(ins: dict, attrs: dict, ctx: Any) -> dict:
        x = ins["X"]
        axes = _reduce_axes(name, attrs, x.dim())
        out = fwd(x, axes).to(x.dtype)
        return {"Out": out.reshape(_reduced_shape(x.shape, axes, attrs["keep_dim"]))}

    def grad(ins: dict, attrs: dict, ctx: Any) -> dict:
        x, d = ins["X"], ins["Out@GRAD"]
        axes = _reduce_axes(name, attrs, x.dim())
        kept = _reduced_shape(x.shape, axes, True)
        out = ins.get("Out")
        out_k = None if out is None else out.reshape(kept)
        count = 1
        for a in axes:
            count *= x.shape[a]
        return {"X@GRAD": bwd(x, out_k, d.reshape(kept), count).expand(x.shape).contiguous()}

    register_op(name, inputs=("X",), outputs=("Out",),
                attrs={"dim": [0], "keep_dim": False, "reduce_all": False},
                infer_shape=infer, kernel=kernel, grad_kernel=grad, grad_uses=uses)


def _prod(x: Tensor, axes: list[int]) -> Tensor:
    for a in axes:
        x = torch.prod(x, dim=a, keepdim=True)
    return x


def _select_grad(x: Tensor, out_k: Tensor, d_k: Tensor, count: int) -> Tensor:
    # NOTE: like Fluid, every element equal to the max (or min) receives the full gradient.
    return d_k * (x == out_k)


_register_reduce("reduce_sum", lambda x, axes: x.sum(dim=axes, keepdim=True),
                 lambda x, o, d, n: d, ("X",))
_register_reduce("reduce_mean", lambda x, axes: x.mean(dim=axes, keepdim=True),
                 lambda x, o, d, n: d / n, ("X",))
_register_reduce("reduce_max", lambda x, axes: torch.amax(x, dim=axes, keepdim=True),
                 _select_grad, ("X", "Out"))
_register_reduce("reduce_min", lambda x, axes: torch.amin(x, dim=axes, keepdim=True),
                 _select_grad, ("X", "Out"))
_register_reduce("reduce_prod", _prod, lambda x, o, d, n: d * o / x, ("X", "Out"))

# ----------------------------------------------------------------------------- arg_max / arg_min


def _arg_axis(op: str, axis: int, ndim: int) -> int:
    if not -ndim <= axis < ndim:
        raise ValueError(f"{op}: axis {axis} is out of range for an input of rank {ndim}")
    return axis % ndim


def _register_arg(name: str, fn: Callable[..., Tensor]) -> None:
    def infer(ins: dict, attrs: dict) -> dict:
        x = ins["X"]
        axis = _arg_axis(name, attrs["axis"], len(x.shape))
        return {"Out": Meta(_reduced_shape(x.shape, [axis], attrs["keepdims"]), "int64")}

    def kernel(ins: dict, attrs: dict, ctx: Any) -> dict:
        x = ins["X"]
        axis = _arg_axis(name, attrs["axis"], x.dim())
        out = fn(x, dim=axis, keepdim=True)
        return {"Out": out.reshape(_reduced_shape(x.shape, [axis], attrs["keepdims"]))}

    register_op(name, inputs=("X",), outputs=("Out",), attrs={"axis": 0, "keepdims": False},
                infer_shape=infer, kernel=kernel)


_register_arg("arg_max", torch.argmax)
_register_arg("arg_min", torch.argmin)

# ----------------------------------------------------------------------------- top_k


def _top_k_k(ins: dict, attrs: dict) -> int:
    """``k``, or the value of the int tensor ``K`` that overrides it (Fluid 1.6)."""
    t = ins.get("K")
    if t is None:
        return attrs["k"]
    if t.is_floating_point() or t.numel() != 1:
        raise ValueError(f"top_k: K must be one int value, got {t.dtype} of shape "
                         f"{list(t.shape)}")
    return int(t.reshape(-1)[0])


def _top_k_shape(ins: dict, attrs: dict) -> dict:
    x, k = ins["X"], attrs["k"]
    if not x.shape:
        raise ValueError("top_k: X must have at least one dimension")
    if ins.get("K") is not None:  # known at run time only
        shape = tuple(x.shape[:-1]) + (-1,)
        return {"Out": Meta(shape, x.dtype), "Indices": Meta(shape, "int64")}
    last = x.shape[-1]
    if k < 1 or (last != -1 and k > last):
        raise ValueError(f"top_k: k={k} must be in 1..{last} (the last dim of X "
                         f"{list(x.shape)})")
    shape = tuple(x.shape[:-1]) + (k,)
    return {"Out": Meta(shape, x.dtype), "Indices": Meta(shape, "int64")}


def _top_k(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, k = ins["X"], _top_k_k(ins, attrs)
    if not 1 <= k <= x.shape[-1]:
        raise ValueError(f"top_k: k={k} must be in 1..{x.shape[-1]} (the last dim of X "
                         f"{list(x.shape)})")
    values, indices = torch.topk(x, k, dim=-1, largest=True, sorted=True)
    return {"Out": values, "Indices": indices}


def _top_k_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, idx, d = ins["X"], ins["Indices"], ins["Out@GRAD"]
    return {"X@GRAD": torch.zeros_like(x).scatter_(-1, idx, d)}


register_op("top_k", inputs=("X", "K?"), outputs=("Out", "Indices"), attrs={"k": 1},
            infer_shape=_top_k_shape, kernel=_top_k, grad_kernel=_top_k_grad,
            grad_uses=("X", "Indices"), no_grad_inputs=("K",),
            grad_infer_shape=lambda ins, attrs: {"X@GRAD": ins["X"]},
            share_lod=("X", ("Out", "Indices")))


# ctc_greedy_decoder runs ctc_align on top_k's indices: top_k keeps its input's sequences.


# ----------------------------------------------------------------------------- reduce_all / any


def _register_bool_reduce(name: str, fn: Any) -> None:
    def infer(ins: dict, attrs: dict) -> dict:
        x = ins["X"]
        if x.dtype != "bool":
            raise TypeError(f"{name}: X must be bool, got {x.dtype}")
        axes = _reduce_axes(name, attrs, len(x.shape))
        return {"Out": Meta(_reduced_shape(x.shape, axes, attrs["keep_dim"]), "bool")}

    def kernel(ins: dict, attrs: dict, ctx: Any) -> dict:
        x = ins["X"]
        axes = _reduce_axes(name, attrs, x.dim())
        out = fn(x, dim=tuple(axes), keepdim=True)
        return {"Out": out.reshape(_reduced_shape(x.shape, axes, attrs["keep_dim"]))}

    register_op(name, inputs=("X",), outputs=("Out",),
                attrs={"dim": [0], "keep_dim": False, "reduce_all": False},
                infer_shape=infer, kernel=kernel)


_register_bool_reduce("reduce_all", torch.all)
_register_bool_reduce("reduce_any", torch.any)


# ----------------------------------------------------------------------------- argsort


def _argsort_shape(ins: dict, attrs: dict) -> dict:
    x = ins["X"]
    axis_in_range("argsort", int(attrs["axis"]), len(x.shape))
    return {"Out": x, "Indices": Meta(x.shape, "int64")}


def _argsort(ins: dict, attrs: dict, ctx: Any) -> dict:
    x = ins["X"]
    axis = axis_in_range("argsort", int(attrs["axis"]), x.dim())
    out, idx = torch.sort(x, dim=axis, descending=bool(attrs["descending"]), stable=True)
    return {"Out": out, "Indices": idx}


register_op("argsort", inputs=("X",), outputs=("Out", "Indices"),
            attrs={"axis": -1, "descending": False}, infer_shape=_argsort_shape,
            kernel=_argsort)
