"""``slice`` and ``strided_slice``: cut ``[starts, ends)`` (with ``strides``) on ``axes``.

Bounds count from the end when negative and clamp to the dimension, as numpy's. As in Fluid
1.6, the bounds may come from tensors (``StartsTensor`` / ``EndsTensor`` / ``StridesTensor``:
one 1-D int tensor; ``*TensorList``: one-element int tensors, which win), known at run time
only, so the sliced dims are then -1 at build time (as are the dims whose ``infer_flags``
entry is -1); ``decrease_axis`` drops the listed dims, which must have size 1 (all dropped:
shape ``[1]``). The gradient pads ``Out@GRAD`` back with zeros.
"""

from __future__ import annotations

from typing import Any

import torch

from .attr_inputs import given, int_list
from .registry import Meta, register_op

__all__: list[str] = []

# (attribute, 1-D tensor slot, list-of-tensors slot)
_BOUNDS = (("starts", "StartsTensor", "StartsTensorList"), ("ends", "EndsTensor", "EndsTensorList"))
_STRIDES = ("strides", "StridesTensor", "StridesTensorList")


def _inputs(specs: tuple) -> tuple[str, ...]:
    return ("Input",) + tuple(f"{t}?" for _, t, _ in specs) + \
        tuple(f"{t}[]?" for _, _, t in specs)


def _resolved(op: str, ins: dict, attrs: dict, specs: tuple) -> dict:
    """``attrs`` with every bound the tensors give replaced by its run-time value."""
    out = dict(attrs)
    for attr, tensor, tensors in specs:
        out[attr] = int_list(op, ins, attrs, attr, tensor, tensors)
    return out


def _dynamic(ins: dict, specs: tuple) -> bool:
    return any(given(ins, tensor, tensors) for _, tensor, tensors in specs)


def _decreased(op: str, shape: list[int], decrease: list[int]) -> list[int]:
    for a in decrease:
        if not 0 <= a < len(shape) or shape[a] not in (1, -1):
            raise ValueError(f"{op}: decrease_axis {a} must name a dim of size 1, got shape "
                             f"{shape}")
    kept = [d for i, d in enumerate(shape) if i not in set(decrease)]
    return kept or [1]


def _shape_rule(op: str, specs: tuple, sliced_shape: Any) -> Any:
    def infer(ins: dict, attrs: dict) -> dict:
        x = ins["Input"]
        axes = list(attrs["axes"])
        flags = list(attrs["infer_flags"]) or [1] * len(axes)
        if _dynamic(ins, specs):
            shape = list(x.shape)
            for a in axes:
                if not 0 <= a < len(shape):
                    raise ValueError(f"{op}: axis {a} is out of range for rank {len(shape)}")
                shape[a] = -1
        else:
            shape = list(sliced_shape(tuple(x.shape), attrs))
            for a, f in zip(axes, flags):
                if f == -1:
                    shape[a] = -1
        return {"Out": Meta(tuple(_decreased(op, shape, list(attrs["decrease_axis"]))),
                            x.dtype)}
    return infer


# ----------------------------------------------------------------------------- slice


def _slice_bounds(shape: Any, attrs: dict) -> list[tuple[int, int, int]]:
    axes, starts, ends = attrs["axes"], attrs["starts"], attrs["ends"]
    if not len(axes) == len(starts) == len(ends):
        raise ValueError(f"slice: axes {list(axes)}, starts {list(starts)} and ends "
                         f"{list(ends)} must have the same length")
    out = []
    for a, s, e in zip(axes, starts, ends):
        if not 0 <= a < len(shape):
            raise ValueError(f"slice: axis {a} is out of range for rank {len(shape)}")
        n = shape[a]
        if n == -1:
            out.append((a, s, e))
            continue
        s = max(0, min(n, s + n if s < 0 else s))
        e = max(0, min(n, e + n if e < 0 else e))
        out.append((a, s, max(s, e)))
    return out


def _slice_sliced_shape(shape: tuple, attrs: dict) -> list[int]:
    out = list(shape)
    for a, s, e in _slice_bounds(shape, attrs):
        out[a] = -1 if shape[a] == -1 else e - s
    return out


def _slice_index(x: torch.Tensor, attrs: dict) -> tuple[slice, ...]:
    idx = [slice(None)] * x.dim()
    for a, s, e in _slice_bounds(tuple(x.shape), attrs):
        idx[a] = slice(s, e)
    return tuple(idx)


def _last_index_ends(attrs: dict) -> dict:
    """An index -1 given at run time reaches its slice as start -1, end 0 (``v + 1``):
    on a decreased axis that means the last element, as Fluid's kernel reads it."""
    decrease = set(attrs.get("decrease_axis") or ())
    if not decrease:
        return attrs
    ends = [_END_OF_AXIS if a in decrease and s == -1 and e == 0 else e
            for a, s, e in zip(attrs["axes"], attrs["starts"], attrs["ends"])]
    return {**attrs, "ends": ends}


_END_OF_AXIS = 2 ** 31 - 1


def _slice(ins: dict, attrs: dict, ctx: Any) -> dict:
    x = ins["Input"]
    attrs = _last_index_ends(_resolved("slice", ins, attrs, _BOUNDS))
    out = x[_slice_index(x, attrs)].clone()
    if attrs["decrease_axis"]:
        out = out.reshape(_decreased("slice", list(out.shape), list(attrs["decrease_axis"])))
    return {"Out": out}


def _slice_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    x = ins["Input"]
    attrs = _last_index_ends(_resolved("slice", ins, attrs, _BOUNDS))
    dx = torch.zeros_like(x)
    idx = _slice_index(x, attrs)
    dx[idx] = ins["Out@GRAD"].reshape(dx[idx].shape)
    return {"Input@GRAD": dx}


register_op("slice", inputs=_inputs(_BOUNDS), outputs=("Out",),
            attrs={"axes": [], "starts": [], "ends": [], "infer_flags": [],
                   "decrease_axis": []},
            infer_shape=_shape_rule("slice", _BOUNDS, _slice_sliced_shape), kernel=_slice,
            grad_kernel=_slice_grad,
            no_grad_inputs=[s.rstrip("?[]") for s in _inputs(_BOUNDS)[1:]],
            grad_infer_shape=lambda ins, attrs: {"Input@GRAD": ins["Input"]})

# ----------------------------------------------------------------------------- strided_slice


def _strided_index(shape: Any, attrs: dict) -> list[Any]:
    """Per dim: ``slice(None)`` or the positions Python's ``slice(start, end, stride)``
    selects (negative bounds count from the end, bounds clamp, negative strides reverse)."""
    axes, starts, ends, strides = (list(attrs[k]) for k in ("axes", "starts", "ends",
                                                              "strides"))
    if not len(axes) == len(starts) == len(ends) == len(strides):
        raise ValueError(f"strided_slice: axes {axes}, starts {starts}, ends {ends} and "
                         f"strides {strides} must have the same length")
    flags = list(attrs.get("infer_flags") or ())
    flags += [1] * (len(axes) - len(flags))  # Fluid's tests give fewer flags than axes
    decrease = set(attrs.get("decrease_axis") or ())
    index: list[Any] = [slice(None)] * len(shape)
    for a, s, e, st, flag in zip(axes, starts, ends, strides, flags):
        if not 0 <= a < len(shape):
            raise ValueError(f"strided_slice: axis {a} is out of range for rank {len(shape)}")
        if st == 0:
            raise ValueError("strided_slice: a stride cannot be 0")
        if shape[a] == -1:
            index[a] = None
        elif s == -1 and e == 0 and flag == -1 and a in decrease:
            # as Fluid: x[v] with a run-time index v = -1 (its end v + 1 is 0) is the last
            index[a] = [shape[a] - 1]
        else:
            index[a] = list(range(*slice(s, e, st).indices(shape[a])))
    return index


def _strided_sliced_shape(shape: tuple, attrs: dict) -> list[int]:
    index = _strided_index(shape, attrs)
    return [d if isinstance(i, slice) else (-1 if i is None else len(i))
            for d, i in zip(shape, index)]


def _strided_pick(x: torch.Tensor, attrs: dict) -> list[Any]:
    return [i if isinstance(i, slice) else torch.tensor(i, dtype=torch.long, device=x.device)
            for i in _strided_index(tuple(x.shape), attrs)]


_STRIDED_SPECS = _BOUNDS + (_STRIDES,)


def _strided_slice(ins: dict, attrs: dict, ctx: Any) -> dict:
    x = ins["Input"]
    attrs = _resolved("strided_slice", ins, attrs, _STRIDED_SPECS)
    for dim, idx in enumerate(_strided_pick(x, attrs)):
        if not isinstance(idx, slice):
            x = x.index_select(dim, idx)
    if attrs["decrease_axis"]:
        x = x.reshape(_decreased("strided_slice", list(x.shape), list(attrs["decrease_axis"])))
    return {"Out": x.contiguous()}


def _strided_slice_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, dout = ins["Input"], ins["Out@GRAD"]
    attrs = _resolved("strided_slice", ins, attrs, _STRIDED_SPECS)
    picks = _strided_pick(x, attrs)
    grad = dout.reshape([x.shape[d] if isinstance(i, slice) else i.numel()
                         for d, i in enumerate(picks)])
    for dim in range(x.dim() - 1, -1, -1):
        idx = picks[dim]
        if not isinstance(idx, slice):
            shape = list(grad.shape)
            shape[dim] = x.shape[dim]
            grad = torch.zeros(shape, dtype=dout.dtype, device=dout.device).index_add_(
                dim, idx, grad)
    return {"Input@GRAD": grad}


register_op("strided_slice", inputs=_inputs(_STRIDED_SPECS), outputs=("Out",),
            attrs={"axes": [], "starts": [], "ends": [], "strides": [], "infer_flags": [],
                   "decrease_axis": []},
            infer_shape=_shape_rule("strided_slice", _STRIDED_SPECS, _strided_sliced_shape),
            kernel=_strided_slice, grad_kernel=_strided_slice_grad,
            no_grad_inputs=[s.rstrip("?[]") for s in _inputs(_STRIDED_SPECS)[1:]],
            grad_infer_shape=lambda ins, attrs: {"Input@GRAD": ins["Input"]})
