"""More tensor ops of Fluid 1.6: spectral_norm, crop_tensor, shard_index, and the
SelectedRows helpers merge_selected_rows / get_tensor_from_selected_rows."""

from __future__ import annotations

from typing import Any

import torch

from ..dtypes import VarType
from ..scope import SelectedRows
from .registry import Meta, register_op
from .vision import _crop_box

__all__: list[str] = []

# ----------------------------------------------------------------------------- spectral_norm


def _weight_matrix(w: torch.Tensor, dim: int) -> torch.Tensor:
    """``w`` with dim ``dim`` moved first, flattened to ``[h, w]``."""
    return torch.movedim(w, dim, 0).reshape(w.shape[dim], -1)


def _power_iteration(mat: torch.Tensor, u: torch.Tensor, v: torch.Tensor, iters: int,
                     eps: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Fluid's loop from the stored ``U``/``V`` (which the op never writes back)."""
    for _ in range(iters):
        v = mat.t() @ u
        v = v / (v.norm() + eps)
        u = mat @ v
        u = u / (u.norm() + eps)
    return u, v, u @ mat @ v


def _spectral_norm_shape(ins: dict, attrs: dict) -> dict:
    w, u, v = ins["Weight"], ins["U"], ins["V"]
    dim = int(attrs["dim"])
    if not 0 <= dim < len(w.shape) or len(w.shape) < 2:
        raise ValueError(f"spectral_norm: dim {dim} must index Weight {list(w.shape)} "
                         "(at least 2-D)")
    h = w.shape[dim]
    rest = 1
    for i, d in enumerate(w.shape):
        if i != dim:
            rest *= d
    if list(u.shape) != [h] or list(v.shape) != [rest]:
        raise ValueError(f"spectral_norm: U must be [{h}] and V [{rest}] for Weight "
                         f"{list(w.shape)} and dim {dim}, got {list(u.shape)}, {list(v.shape)}")
    return {"Out": w}


def _spectral_parts(ins: dict, attrs: dict) -> tuple[torch.Tensor, ...]:
    w, dim = ins["Weight"], int(attrs["dim"])
    mat = _weight_matrix(w, dim)
    u, v, sigma = _power_iteration(mat, ins["U"].to(w.dtype), ins["V"].to(w.dtype),
                                   int(attrs["power_iters"]), float(attrs["eps"]))
    return mat, u, v, sigma


def _spectral_norm_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    """Fluid's gradient, ``u``, ``v`` held constant: ``G / s - (sum(G * W) / s^2) u v^T``
    (exact once the power iteration has converged)."""
    w, dout, dim = ins["Weight"], ins["Out@GRAD"], int(attrs["dim"])
    mat, u, v, sigma = _spectral_parts(ins, attrs)
    g = _weight_matrix(dout, dim)
    grad = g / sigma - (g * mat).sum() / sigma ** 2 * torch.outer(u, v)
    moved = list(torch.movedim(w, dim, 0).shape)
    return {"Weight@GRAD": torch.movedim(grad.reshape(moved), 0, dim).contiguous()}


register_op("spectral_norm", inputs=("Weight", "U", "V"), outputs=("Out",),
            attrs={"dim": 0, "power_iters": 1, "eps": 1e-12},
            infer_shape=_spectral_norm_shape,
            kernel=lambda ins, attrs, ctx: {"Out": ins["Weight"] / _spectral_parts(ins, attrs)[3]},
            grad_kernel=_spectral_norm_grad, grad_uses=("Weight", "U", "V"),
            no_grad_inputs=("U", "V"))

# ----------------------------------------------------------------------------- crop_tensor


def _crop_tensor_args(ins: dict, attrs: dict, x_shape: list[int]) -> tuple[list[int], list[int]]:
    shape = ins.get("Shape")
    shape = [int(v) for v in shape.reshape(-1).tolist()] if shape is not None else \
        [int(v) for v in attrs["shape"]]
    offsets = ins.get("Offsets")
    offsets = [int(v) for v in offsets.reshape(-1).tolist()] if offsets is not None else \
        [int(v) for v in attrs["offsets"]]
    return _crop_box(shape, x_shape, offsets)


def _crop_tensor_shape(ins: dict, attrs: dict) -> dict:
    x = ins["X"]
    if ins.get("Shape") is not None:
        return {"Out": Meta((-1,) * len(x.shape), x.dtype)}
    if ins.get("Offsets") is not None:
        shape = [-1 if s == -1 else s for s in attrs["shape"]]
        return {"Out": Meta(tuple(shape), x.dtype)}
    shape, _ = _crop_box(list(attrs["shape"]), list(x.shape), list(attrs["offsets"]))
    return {"Out": Meta(tuple(shape), x.dtype)}


def _crop_tensor_box(ins: dict, attrs: dict) -> tuple[slice, ...]:
    x = ins["X"]
    shape, offsets = _crop_tensor_args(ins, attrs, list(x.shape))
    return tuple(slice(o, o + s) for o, s in zip(offsets, shape))


def _crop_tensor_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    dx = torch.zeros_like(ins["X"])
    dx[_crop_tensor_box(ins, attrs)] = ins["Out@GRAD"]
    return {"X@GRAD": dx}


register_op("crop_tensor", inputs=("X", "Shape?", "Offsets?"), outputs=("Out",),
            attrs={"shape": [], "offsets": []}, infer_shape=_crop_tensor_shape,
            kernel=lambda ins, attrs, ctx: {"Out": ins["X"][_crop_tensor_box(
                ins, attrs)].contiguous()},
            grad_kernel=_crop_tensor_grad, grad_uses=("X", "Shape", "Offsets"),
            no_grad_inputs=("Shape", "Offsets"))

# ----------------------------------------------------------------------------- shard_index


def _shard_index_shape(ins: dict, attrs: dict) -> dict:
    x = ins["X"]
    if x.dtype not in ("int32", "int64") or len(x.shape) != 2 or x.shape[1] not in (1, -1):
        raise ValueError(f"shard_index: X must hold int ids [N, 1], got {x.dtype} "
                         f"{list(x.shape)}")
    n, shards, shard = int(attrs["index_num"]), int(attrs["nshards"]), int(attrs["shard_id"])
    if n <= 0 or shards <= 0 or not 0 <= shard < shards:
        raise ValueError(f"shard_index: need index_num > 0, nshards > 0 and 0 <= shard_id < "
                         f"nshards, got {n}, {shards}, {shard}")
    return {"Out": x}


def _shard_index(ins: dict, attrs: dict, ctx: Any) -> dict:
    """An id of this shard becomes its offset inside the shard; others ``ignore_value``."""
    x = ins["X"]
    size = (int(attrs["index_num"]) + int(attrs["nshards"]) - 1) // int(attrs["nshards"])
    mine = torch.div(x, size, rounding_mode="floor") == int(attrs["shard_id"])
    return {"Out": torch.where(mine, x % size, torch.full_like(x, int(attrs["ignore_value"])))}


register_op("shard_index", inputs=("X",), outputs=("Out",),
            attrs={"index_num": 0, "nshards": 0, "shard_id": 0, "ignore_value": -1},
            infer_shape=_shard_index_shape, kernel=_shard_index)

# ----------------------------------------------------------------------------- SelectedRows


def _selected_rows_only(op: str, meta: Meta) -> None:
    if meta.type != VarType.SELECTED_ROWS:
        raise TypeError(f"{op}: X must be a SelectedRows variable (e.g. the gradient of a "
                        f"sparse embedding), got a {meta.type}")


def _merge_selected_rows_shape(ins: dict, attrs: dict) -> dict:
    x = ins["X"]
    _selected_rows_only("merge_selected_rows", x)
    return {"Out": x}


def _check_selected(op: str, x: Any) -> SelectedRows:
    if not isinstance(x, SelectedRows):
        raise TypeError(f"{op}: X must hold a SelectedRows at run time, got a dense tensor")
    return x


register_op("merge_selected_rows", inputs=("X",), outputs=("Out",),
            infer_shape=_merge_selected_rows_shape,
            kernel=lambda ins, attrs, ctx: {"Out": _check_selected(
                "merge_selected_rows", ins["X"]).merged()})


def _rows_tensor_shape(ins: dict, attrs: dict) -> dict:
    x = ins["X"]
    _selected_rows_only("get_tensor_from_selected_rows", x)
    return {"Out": Meta((-1, *x.shape[1:]), x.dtype)}


register_op("get_tensor_from_selected_rows", inputs=("X",), outputs=("Out",),
            infer_shape=_rows_tensor_shape,
            kernel=lambda ins, attrs, ctx: {"Out": _check_selected(
                "get_tensor_from_selected_rows", ins["X"]).value.clone()})

# ----------------------------------------------------------------------------- random_crop


def _random_crop_shape(ins: dict, attrs: dict) -> dict:
    x, shape = ins["X"], [int(s) for s in attrs["shape"]]
    if not shape or len(shape) > len(x.shape):
        raise ValueError(f"random_crop: shape {shape} must crop the trailing dims of X "
                         f"{list(x.shape)}")
    lead = len(x.shape) - len(shape)
    for s, d in zip(shape, x.shape[lead:]):
        if s <= 0 or (d != -1 and s > d):
            raise ValueError(f"random_crop: shape {shape} does not fit in X {list(x.shape)}")
    return {"Out": Meta((*x.shape[:lead], *shape), x.dtype), "SeedOut": Meta((1,), "int64")}


def _random_crop(ins: dict, attrs: dict, ctx: Any) -> dict:
    """Every instance (the leading dims) gets its own uniformly drawn crop of the trailing
    dims; the generator starts from ``Seed`` and ``SeedOut`` carries the next seed, so
    successive runs draw new crops and a run is reproducible from its seed."""
    x, shape = ins["X"], [int(s) for s in attrs["shape"]]
    gen = torch.Generator().manual_seed(int(ins["Seed"].reshape(-1)[0]))
    lead = x.dim() - len(shape)
    flat = x.reshape(-1, *x.shape[lead:])
    crops = []
    for inst in flat:
        box = tuple(slice(o, o + s) for o, s in zip(
            (int(torch.randint(0, d - s + 1, (1,), generator=gen)) for d, s in
             zip(inst.shape, shape)), shape))
        crops.append(inst[box])
    out = torch.stack(crops).reshape(*x.shape[:lead], *shape) if crops else \
        x.new_zeros((*x.shape[:lead], *shape))
    next_seed = torch.randint(0, 2 ** 62, (1,), generator=gen)
    return {"Out": out, "SeedOut": next_seed.to(ins["Seed"].device)}


register_op("random_crop", inputs=("X", "Seed"), outputs=("Out", "SeedOut"),
            attrs={"shape": [], "startup_seed": 0}, infer_shape=_random_crop_shape,
            kernel=_random_crop)
