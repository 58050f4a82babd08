"""Helpers shared by op families: Fluid's ``axis`` broadcasting, shape-rule utilities, the
truth of a one-element condition and the sum of two gradients (tensors or tensor arrays)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from ..scope import SelectedRows, TensorArray
from .registry import Meta

__all__ = ["axis_in_range", "axis_view_shape", "broadcast_y", "unbroadcast", "numel",
           "meta_like", "broadcast_meta", "reduce_dims", "scalar_truth", "add_grads",
           "rows_in_table", "mm"]


def numel(shape: Sequence[int]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def axis_view_shape(x_shape: Sequence[int], y_shape: Sequence[int], axis: int) -> list[int]:
    """Shape that lines ``y`` up with ``x`` starting at dim ``axis`` (Fluid's rule).

    With equal ranks, numpy broadcasting applies. Otherwise ``y``'s dims must match a
    contiguous run of ``x``'s dims starting at ``axis`` (-1: aligned to the end); trailing
    size-1 dims of ``y`` are ignored.
    """
    x_nd, y_shape = len(x_shape), list(y_shape)
    if len(y_shape) == x_nd:
        return y_shape
    if axis == -1:
        axis = x_nd - len(y_shape)
    while y_shape and y_shape[-1] == 1:  # Fluid trims trailing size-1 dims of Y
        y_shape.pop()
    if axis < 0 or axis + len(y_shape) > x_nd:
        raise ValueError(f"cannot broadcast Y of shape {list(y_shape)} against X of shape "
                         f"{list(x_shape)} at axis {axis}")
    for i, d in enumerate(y_shape):
        xd = x_shape[axis + i]
        if d != xd and d != 1 and xd != -1 and d != -1:
            raise ValueError(f"Y of shape {list(y_shape)} does not match X of shape "
                             f"{list(x_shape)} at axis {axis} (dim {axis + i}: {d} vs {xd})")
    return [1] * axis + y_shape + [1] * (x_nd - axis - len(y_shape))


def broadcast_y(x: torch.Tensor, y: torch.Tensor, axis: int) -> torch.Tensor:
    if x.dim() == y.dim():
        return y
    return y.reshape(axis_view_shape(x.shape, y.shape, axis))


def unbroadcast(g: torch.Tensor, shape: Sequence[int]) -> torch.Tensor:
    """Sum ``g`` down to ``shape`` (the inverse of broadcasting), keeping ``shape`` exactly."""
    shape = tuple(shape)
    if tuple(g.shape) == shape:
        return g
    lead = g.dim() - len(shape)
    dims = list(range(lead))
    for i, d in enumerate(shape):
        if d == 1 and g.shape[lead + i] != 1:
            dims.append(lead + i)
    if dims:
        g = g.sum(dim=dims, keepdim=True)
    return g.reshape(shape)


def meta_like(meta: Meta, shape: Sequence[int] | None = None, dtype: str | None = None) -> Meta:
    return Meta(tuple(meta.shape if shape is None else shape), dtype or meta.dtype, meta.type)


def broadcast_meta(x: Meta, y: Meta, axis: int) -> Meta:
    """Output meta of an elementwise op: X's shape, or the numpy broadcast of equal ranks."""
    if len(x.shape) == len(y.shape):
        out = []
        for a, b in zip(x.shape, y.shape):
            if a == b or b == 1:
                out.append(a)
            elif a == 1:
                out.append(b)
            elif a == -1 or b == -1:
                out.append(max(a, b) if min(a, b) == -1 and max(a, b) != 1 else -1)
            else:
                raise ValueError(f"shapes {list(x.shape)} and {list(y.shape)} do not broadcast")
        return Meta(tuple(out), x.dtype)
    axis_view_shape(x.shape, y.shape, axis)  # raises on mismatch
    return Meta(tuple(x.shape), x.dtype)


def reduce_dims(dim: Any, ndim: int, reduce_all: bool) -> list[int]:
    if reduce_all or dim is None or dim == []:
        return list(range(ndim))
    dims = [dim] if isinstance(dim, int) else list(dim)
    return sorted(d + ndim if d < 0 else d for d in dims)


def axis_in_range(op: str, axis: int, ndim: int) -> int:
    """``axis`` as a non-negative dim of an input of rank ``ndim`` (a scalar has dim 0)."""
    if not -ndim <= axis < max(ndim, 1):
        raise ValueError(f"{op}: axis {axis} is out of range for an input of rank {ndim}")
    return axis % max(ndim, 1)


def scalar_truth(op_type: str, cond: Any) -> bool:
    """The value of a one-element bool condition; an error naming the op otherwise."""
    if not isinstance(cond, torch.Tensor) or cond.numel() != 1:
        shape = list(cond.shape) if isinstance(cond, torch.Tensor) else type(cond).__name__
        raise ValueError(f"{op_type}: the condition must be a tensor of one element, "
                         f"got {shape}")
    return bool(cond.reshape(()).item())


def add_grads(a: Any, b: Any) -> Any:
    """``a + b`` for gradients: tensors, or tensor arrays slot by slot (None is zero)."""
    if not isinstance(a, list):
        return a + b
    out = TensorArray(a)
    for k, g in enumerate(b):
        if k >= len(out):
            out.append(g)
        elif g is not None:
            out[k] = g if out[k] is None else out[k] + g
    return out


def rows_in_table(op: str, table: SelectedRows, ids: torch.Tensor) -> torch.Tensor:
    """The positions in ``table.value`` of the row ids ``ids`` (Fluid's
    ``AutoGrownIndex(id, false)``); an id the table does not hold is an error."""
    order = torch.argsort(table.rows)
    held = table.rows[order]
    pos = torch.searchsorted(held, ids).clamp_(max=max(len(held) - 1, 0))
    found = held[pos] == ids if len(held) else torch.zeros_like(ids, dtype=torch.bool)
    if not bool(found.all()):
        missing = sorted({int(i) for i in ids[~found].tolist()})
        raise ValueError(f"{op}: the row-sparse parameter holds no row {missing[:10]} "
                         f"(id should be in the table; it holds {len(held)} rows)")
    return order[pos]


def mm(a: Any, b: Any) -> Any:
    """``a @ b`` of two matrices; on a CPU, an output 2 to 15 columns wide is computed as
    ``(b.T @ a.T).T`` (then made contiguous) once the product is not tiny.

    This CPU's BLAS takes a path several times slower for such narrow outputs: 128 rows of a
    512-to-10 layer took 112 us forward and 148 us for its weight gradient against 38 and
    45 us transposed (2 columns of 2048: 910 against 69 us); 1 column (a matrix-vector
    product) and 16 or more do not show it, and under ``a.rows * a.cols`` = 8192 the two
    transposes cost more than they save. Fluid's ``[in, out]`` weights put a classifier's
    few classes in the columns of both the forward product and the weight gradient.
    """
    n = b.shape[1]
    if 1 < n < 16 and a.shape[0] * a.shape[1] >= 8192 and a.device.type == "cpu":
        return (b.t() @ a.t()).t().contiguous()
    return a @ b
