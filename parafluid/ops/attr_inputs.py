"""Attributes given as tensors: many Fluid 1.6 ops take an int list attribute (a shape,
slice bounds, expand times, ...) either as the attribute, as one 1-D int tensor input
(``ShapeTensor``, ``StartsTensor``, ...) or as a list of one-element int tensors
(``ShapeTensorList``, ...). As in Fluid, a tensor input, when given, overrides the attribute
(where both forms are given, each op has its own order: ``tensor_first``); its values are
known at run time only, so the shape rules mark what they decide as unknown (-1).
"""

from __future__ import annotations

from typing import Any

from .common import numel

__all__ = ["ints_of", "int_list", "list_meta", "given"]


def given(ins: dict, *slots: str | None) -> bool:
    """True when any of ``slots`` holds a value (a tensor, or a non-empty list)."""
    return any(s is not None and ins.get(s) not in (None, []) for s in slots)


def ints_of(op: str, slot: str, t: Any) -> list[int]:
    """The values of an int tensor input as Python ints."""
    if t.is_floating_point():
        raise TypeError(f"{op}: input {slot} must hold int32 or int64 values, got {t.dtype}")
    return [int(v) for v in t.reshape(-1).tolist()]


def int_list(op: str, ins: dict, attrs: dict, attr: str, tensor: str | None = None,
             tensors: str | None = None, tensor_first: bool = False) -> list[int]:
    """``attr``'s value at run time: from the list of one-element tensors ``tensors``, else
    from the 1-D tensor ``tensor`` (the other way round with ``tensor_first``), else the
    attribute itself."""
    t = ins.get(tensor) if tensor else None
    if tensor_first and t is not None:
        return ints_of(op, tensor, t)
    items = ins.get(tensors) if tensors else None
    if items:
        out = []
        for i, t in enumerate(items):
            if t.numel() != 1:
                raise ValueError(f"{op}: every tensor of {tensors} must hold one value, item "
                                 f"{i} has shape {list(t.shape)}")
            out += ints_of(op, tensors, t)
        return out
    if t is not None:
        return ints_of(op, tensor, t)
    return [int(v) for v in attrs[attr]]


def list_meta(ins: dict, attrs: dict, attr: str, tensor: str | None = None,
              tensors: str | None = None, tensor_first: bool = False) -> list[int] | None:
    """``attr``'s value as known at build time: the attribute where no tensor overrides
    it; with ``tensors``, the attribute where it has one entry per tensor (Fluid's layers
    put -1 where a tensor gives the entry), else all -1; with ``tensor``, -1 for each of its
    elements (None when its size is unknown)."""
    meta = ins.get(tensor) if tensor else None
    items = ins.get(tensors) if tensors else None
    if items and (meta is None or not tensor_first):
        values = list(attrs[attr])
        return values if len(values) == len(items) else [-1] * len(items)
    if meta is not None:
        n = numel(meta.shape)
        return None if n < 0 or -1 in meta.shape else [-1] * n
    return [int(v) for v in attrs[attr]]
