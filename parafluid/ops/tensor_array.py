"""Ops that turn a tensor array (``LOD_TENSOR_ARRAY``, a ``TensorArray`` at run time) into one
tensor: ``tensor_array_to_tensor`` concatenates the items along ``axis`` (or, with
``use_stack``, stacks them along a new axis ``axis``) and records each item's size along
it (``OutIndex``; 1 per item when stacked), which its gradient uses to cut ``Out@GRAD``
back into an array."""

from __future__ import annotations

from typing import Any

import torch

from ..scope import TensorArray
from .registry import Meta, register_op

__all__: list[str] = []


def _axis(axis: int, rank: int) -> int:
    if not -rank <= axis < rank:
        raise ValueError(f"tensor_array_to_tensor: axis {axis} is out of range for items of "
                         f"rank {rank}")
    return axis % rank


def _to_tensor_shape(ins: dict, attrs: dict) -> dict:
    x = ins["X"]
    if attrs["use_stack"]:
        axis = _axis(attrs["axis"], len(x.shape) + 1)
        shape = list(x.shape)
        shape.insert(axis, -1)  # the number of items, known when it runs
    else:
        axis = _axis(attrs["axis"], len(x.shape))
        shape = list(x.shape)
        shape[axis] = -1  # the sum over the items, known when it runs
    return {"Out": Meta(tuple(shape), x.dtype), "OutIndex": Meta((-1,), "int32")}


def _to_tensor(ins: dict, attrs: dict, ctx: Any) -> dict:
    items = list(ins["X"])
    if not items or any(t is None for t in items):
        raise ValueError(f"tensor_array_to_tensor: the array has {len(items)} items and every "
                         "one must be written (an empty array or an unwritten slot cannot be "
                         "concatenated)")
    if attrs["use_stack"]:
        axis = _axis(attrs["axis"], items[0].dim() + 1)
        return {"Out": torch.stack(items, axis),
                "OutIndex": torch.ones(len(items), dtype=torch.int32)}
    axis = _axis(attrs["axis"], items[0].dim())
    sizes = torch.tensor([t.shape[axis] for t in items], dtype=torch.int32)
    return {"Out": torch.cat(items, axis), "OutIndex": sizes}


def _to_tensor_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    items, g = ins["X"], ins["Out@GRAD"]
    axis = _axis(attrs["axis"], g.dim())
    if attrs["use_stack"]:
        return {"X@GRAD": TensorArray(p.contiguous() for p in torch.unbind(g, axis))}
    sizes = [t.shape[axis] for t in items]
    return {"X@GRAD": TensorArray(p.contiguous() for p in torch.split(g, sizes, axis))}


register_op("tensor_array_to_tensor", inputs=("X",), outputs=("Out", "OutIndex"),
            attrs={"axis": 0, "use_stack": False}, infer_shape=_to_tensor_shape, kernel=_to_tensor,
            grad_kernel=_to_tensor_grad, grad_uses=("X",))
