"""Tensor creation and manipulation ops: fill, assign, random initializers, shape ops."""

from __future__ import annotations

from typing import Any

import torch

from ..dtypes import convert_dtype, to_torch
from .registry import Meta, register_op, same_as


def _shape_attr_meta(attrs: dict) -> dict:
    return {"Out": Meta(tuple(attrs["shape"]), convert_dtype(attrs["dtype"]))}


def _fill_constant(ins: dict, attrs: dict, ctx: Any) -> dict:
    return {"Out": torch.full(tuple(attrs["shape"]), attrs["value"],
                              dtype=to_torch(convert_dtype(attrs["dtype"])), device=ctx.device)}


register_op("fill_constant", outputs=("Out",),
            attrs={"shape": [1], "value": 0.0, "dtype": "float32", "force_cpu": False},
            infer_shape=lambda ins, attrs: _shape_attr_meta(attrs), kernel=_fill_constant)

register_op("fill_zeros_like", inputs=("X",), outputs=("Out",), infer_shape=same_as("X"),
            kernel=lambda ins, attrs, ctx: {"Out": torch.zeros_like(ins["X"])})

register_op("fill_any_like", inputs=("X",), outputs=("Out",), attrs={"value": 0.0},
            infer_shape=same_as("X"),
            kernel=lambda ins, attrs, ctx: {"Out": torch.full_like(ins["X"], attrs["value"])})


def _assign(ins: dict, attrs: dict, ctx: Any) -> dict:
    x = ins["X"]
    # NOTE: a copy, so that an in-place update of one never changes the other.
    return {"Out": x.clone() if isinstance(x, torch.Tensor) else x}


register_op("assign", inputs=("X",), outputs=("Out",), infer_shape=same_as("X"), kernel=_assign,
            grad=lambda op, no_grad: [] if op.input("X")[0] in no_grad else [
                {"type": "assign", "inputs": {"X": [op.output("Out")[0] + "@GRAD"]},
                 "outputs": {"Out": [op.input("X")[0] + "@GRAD"]}, "attrs": {}}])


def _uniform_random(ins: dict, attrs: dict, ctx: Any) -> dict:
    out = torch.empty(tuple(attrs["shape"]), dtype=to_torch(convert_dtype(attrs["dtype"])),
                      device=ctx.device)
    return {"Out": out.uniform_(attrs["min"], attrs["max"], generator=ctx.generator(attrs["seed"]))}


register_op("uniform_random", outputs=("Out",),
            attrs={"shape": [1], "min": -1.0, "max": 1.0, "seed": 0, "dtype": "float32"},
            infer_shape=lambda ins, attrs: _shape_attr_meta(attrs), kernel=_uniform_random)


def _gaussian_random(ins: dict, attrs: dict, ctx: Any) -> dict:
    out = torch.empty(tuple(attrs["shape"]), dtype=to_torch(convert_dtype(attrs["dtype"])),
                      device=ctx.device)
    return {"Out": out.normal_(attrs["mean"], attrs["std"],
                               generator=ctx.generator(attrs["seed"]))}


register_op("gaussian_random", outputs=("Out",),
            attrs={"shape": [1], "mean": 0.0, "std": 1.0, "seed": 0, "dtype": "float32"},
            infer_shape=lambda ins, attrs: _shape_attr_meta(attrs), kernel=_gaussian_random)


def _truncated_gaussian_random(ins: dict, attrs: dict, ctx: Any) -> dict:
    """Normal(mean, std) resampled outside two standard deviations, as Fluid's op."""
    dtype = to_torch(convert_dtype(attrs["dtype"]))
    out = torch.empty(tuple(attrs["shape"]), dtype=dtype, device=ctx.device)
    mean, std = attrs["mean"], attrs["std"]
    return {"Out": torch.nn.init.trunc_normal_(out, mean, std, mean - 2 * std, mean + 2 * std,
                                               generator=ctx.generator(attrs["seed"]))}


register_op("truncated_gaussian_random", outputs=("Out",),
            attrs={"shape": [1], "mean": 0.0, "std": 1.0, "seed": 0, "dtype": "float32"},
            infer_shape=lambda ins, attrs: _shape_attr_meta(attrs),
            kernel=_truncated_gaussian_random)


def _assign_value(ins: dict, attrs: dict, ctx: Any) -> dict:
    dtype = to_torch(convert_dtype(attrs["dtype"]))
    return {"Out": torch.tensor(attrs["values"], dtype=dtype,
                                device=ctx.device).reshape(tuple(attrs["shape"]))}


register_op("assign_value", outputs=("Out",), attrs={"shape": [1], "dtype": "float32", "values": []},
            infer_shape=lambda ins, attrs: _shape_attr_meta(attrs), kernel=_assign_value)
