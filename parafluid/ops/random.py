"""Ops that draw random numbers: uniform_random, gaussian_random, truncated_gaussian_random,
their ``*_batch_size_like`` forms, sampling_id, random_crop and dropout.

Each takes attr ``seed`` (0: torch's default generator). A non-zero seed: uniform_random,
gaussian_random, truncated_gaussian_random and their ``*_batch_size_like`` forms draw, in
float32 and float64, exactly the values of Fluid's CPU kernels (``std_random``: a fresh
``std::minstd_rand`` on every run, so the same values every run); the other ops and dtypes
use a torch generator seeded once per op (``ctx.generator``). Only dropout has a gradient
(through its saved ``Mask``).
"""

from __future__ import annotations

from typing import Any

import torch

from ..dtypes import convert_dtype, to_torch
from . import std_random
from .registry import Meta, register_op
from .tensor import _batch_like_shape, _shape_attr_meta, run_shape

__all__: list[str] = []


def _fluid_values(draw: Any, out: torch.Tensor, seed: int, *params: float) -> bool:
    """Fill ``out`` with the values Fluid's CPU kernel draws for ``seed``; False where
    that does not apply (seed 0, or a dtype Fluid's kernel does not draw in)."""
    dtype = convert_dtype(out.dtype)
    if not seed or dtype not in ("float32", "float64"):
        return False
    values = draw(int(seed), out.numel(), *params, dtype)
    out.copy_(torch.from_numpy(values).reshape(out.shape))
    return True


def _uniform(out: torch.Tensor, attrs: dict, ctx: Any) -> torch.Tensor:
    if not _fluid_values(std_random.uniform, out, attrs["seed"], attrs["min"], attrs["max"]):
        out.uniform_(attrs["min"], attrs["max"], generator=ctx.generator(attrs["seed"]))
    return out


def _normal(out: torch.Tensor, attrs: dict, ctx: Any) -> torch.Tensor:
    if not _fluid_values(std_random.normal, out, attrs["seed"], attrs["mean"], attrs["std"]):
        out.normal_(attrs["mean"], attrs["std"], generator=ctx.generator(attrs["seed"]))
    return out


def _uniform_random(ins: dict, attrs: dict, ctx: Any) -> dict:
    out = torch.empty(run_shape("uniform_random", ins, attrs),
                      dtype=to_torch(convert_dtype(attrs["dtype"])), device=ctx.device)
    _uniform(out, attrs, ctx)
    if attrs["diag_num"] > 0:  # Fluid's UniformInitializer(diag_num, diag_step, diag_val)
        step = attrs["diag_step"] + 1
        out.view(-1)[:attrs["diag_num"] * step:step] = attrs["diag_val"]
    return {"Out": out}


register_op("uniform_random", inputs=("ShapeTensor?", "ShapeTensorList[]?"), outputs=("Out",),
            attrs={"shape": [1], "min": -1.0, "max": 1.0, "seed": 0, "dtype": "float32",
                   "diag_num": 0, "diag_step": 0, "diag_val": 1.0},
            infer_shape=lambda ins, attrs: _shape_attr_meta(attrs, ins, "uniform_random"),
            kernel=_uniform_random)


def _gaussian_random(ins: dict, attrs: dict, ctx: Any) -> dict:
    out = torch.empty(tuple(attrs["shape"]), dtype=to_torch(convert_dtype(attrs["dtype"])),
                      device=ctx.device)
    return {"Out": _normal(out, attrs, ctx)}


register_op("gaussian_random", outputs=("Out",),
            attrs={"shape": [1], "mean": 0.0, "std": 1.0, "seed": 0, "dtype": "float32"},
            infer_shape=lambda ins, attrs: _shape_attr_meta(attrs), kernel=_gaussian_random)


def _truncated_gaussian_random(ins: dict, attrs: dict, ctx: Any) -> dict:
    """Normal(mean, std) resampled outside two standard deviations, as Fluid's op."""
    dtype = to_torch(convert_dtype(attrs["dtype"]))
    out = torch.empty(tuple(attrs["shape"]), dtype=dtype, device=ctx.device)
    mean, std = attrs["mean"], attrs["std"]
    if _fluid_values(std_random.truncated_normal, out, attrs["seed"], mean, std):
        return {"Out": out}
    return {"Out": torch.nn.init.trunc_normal_(out, mean, std, mean - 2 * std, mean + 2 * std,
                                               generator=ctx.generator(attrs["seed"]))}


register_op("truncated_gaussian_random", outputs=("Out",),
            attrs={"shape": [1], "mean": 0.0, "std": 1.0, "seed": 0, "dtype": "float32"},
            infer_shape=lambda ins, attrs: _shape_attr_meta(attrs),
            kernel=_truncated_gaussian_random)


# ----------------------------------------------------------------------------- random fills


def _register_random_like(name: str, fill: Any, extra: dict) -> None:
    def kernel(ins: dict, attrs: dict, ctx: Any) -> dict:
        shape = _batch_like_shape(name, tuple(ins["Input"].shape), attrs)
        out = torch.empty(shape, dtype=to_torch(convert_dtype(attrs["dtype"])),
                          device=ctx.device)
        return {"Out": fill(out, attrs, ctx)}

    register_op(name, inputs=("Input",), outputs=("Out",),
                attrs={"shape": [1], "dtype": "float32", "input_dim_idx": 0,
                       "output_dim_idx": 0, "seed": 0, **extra},
                infer_shape=lambda ins, attrs: {"Out": Meta(
                    _batch_like_shape(name, ins["Input"].shape, attrs),
                    convert_dtype(attrs["dtype"]))},
                kernel=kernel)


_register_random_like("uniform_random_batch_size_like", _uniform, {"min": -1.0, "max": 1.0})
_register_random_like("gaussian_random_batch_size_like", _normal, {"mean": 0.0, "std": 1.0})


# ----------------------------------------------------------------------------- sampling_id


def _sampling_id_shape(ins: dict, attrs: dict) -> dict:
    x = ins["X"]
    if len(x.shape) != 2:
        raise ValueError(f"sampling_id: X must be 2-D [batch, classes], got {list(x.shape)}")
    return {"Out": Meta((x.shape[0],), "int64")}


def _sampling_id(ins: dict, attrs: dict, ctx: Any) -> dict:
    """Per row, draw ``r ~ U(min, max)`` and return the first class whose running sum of
    probabilities exceeds ``r`` (the last class if none does), as Fluid's kernel."""
    x = ins["X"]
    gen = ctx.generator(attrs["seed"])
    r = torch.empty(x.shape[0], dtype=torch.float64, device=x.device)
    r.uniform_(float(attrs["min"]), float(attrs["max"]), generator=gen)
    cum = torch.cumsum(x.to(torch.float64), dim=1)
    picked = (cum <= r.unsqueeze(1)).sum(dim=1).clamp(max=x.shape[1] - 1)
    return {"Out": picked.to(torch.int64)}


register_op("sampling_id", inputs=("X",), outputs=("Out",),
            attrs={"min": 0.0, "max": 1.0, "seed": 0}, infer_shape=_sampling_id_shape,
            kernel=_sampling_id)


# ----------------------------------------------------------------------------- dropout

_DROPOUT_IMPLS = ("downgrade_in_infer", "upscale_in_train")


def _dropout_shape(ins: dict, attrs: dict) -> dict:
    x = ins["X"]
    p = attrs["dropout_prob"]
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout: dropout_prob must be in [0, 1], got {p}")
    if attrs["dropout_implementation"] not in _DROPOUT_IMPLS:
        raise ValueError(f"dropout: dropout_implementation must be one of {_DROPOUT_IMPLS}, "
                         f"got {attrs['dropout_implementation']!r}")
    return {"Out": x, "Mask": Meta(x.shape, "uint8")}


def _dropout(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, p = ins["X"], float(attrs["dropout_prob"])
    upscale = attrs["dropout_implementation"] == "upscale_in_train"
    if attrs["is_test"]:
        # Nothing is dropped; an expanded scalar stands for the all-ones mask without memory.
        mask = torch.ones((), dtype=torch.uint8, device=x.device).expand(x.shape)
        return {"Out": x if upscale else x * (1.0 - p), "Mask": mask}
    gen = None
    if attrs["fix_seed"]:
        # Fluid reseeds its engine on every run: a fixed seed gives the same mask each time.
        gen = ctx.generator(attrs["seed"]) or torch.Generator(device=x.device)
        gen.manual_seed(int(attrs["seed"]))
    mask = (torch.rand(x.shape, generator=gen, device=x.device) >= p).to(torch.uint8)
    if upscale:
        out = x * mask / (1.0 - p) if p < 1.0 else torch.zeros_like(x)
    else:
        out = x * mask
    return {"Out": out, "Mask": mask}


def _dropout_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    dout, mask = ins["Out@GRAD"], ins["Mask"]
    p = float(attrs["dropout_prob"])
    upscale = attrs["dropout_implementation"] == "upscale_in_train"
    if attrs["is_test"]:
        return {"X@GRAD": dout if upscale else dout * (1.0 - p)}
    if upscale:
        return {"X@GRAD": dout * mask / (1.0 - p) if p < 1.0 else torch.zeros_like(dout)}
    return {"X@GRAD": dout * mask}


register_op("dropout", inputs=("X",), outputs=("Out", "Mask"),
            attrs={"dropout_prob": 0.5, "is_test": False, "fix_seed": False, "seed": 0,
                   "dropout_implementation": "downgrade_in_infer"},
            infer_shape=_dropout_shape, kernel=_dropout, grad_kernel=_dropout_grad,
            grad_uses=("Mask",),
            grad_infer_shape=lambda ins, attrs: {"X@GRAD": ins["Out@GRAD"]},
            share_lod=("X", "Out"))


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
