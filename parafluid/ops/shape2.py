"""The ``*2`` shape ops Fluid 1.6's layers emit: reshape2, transpose2, squeeze2, unsqueeze2,
flatten2.

Each computes what its v1 op computes and also writes ``XShape``: a tensor of shape
``[0] + X.shape`` (no elements) that carries X's shape to the gradient op, so that X itself
need not stay alive for the backward pass. ``<op>2_grad`` reads ``XShape`` and ``Out@GRAD``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from .index import _flatten_shape
from .registry import GRAD, Meta, register_op
from .tensor import _check_perm, _reshape_target, _squeezed, _unsqueezed

__all__: list[str] = []


def _xshape_meta(x: Meta) -> Meta:
    return Meta((0, *x.shape), x.dtype)


def _xshape(x: torch.Tensor) -> torch.Tensor:
    return torch.empty((0, *x.shape), dtype=x.dtype, device=x.device)


def _grad_meta(ins: dict, attrs: dict) -> dict:
    """``X@GRAD`` has the shape XShape records and the dtype of ``Out@GRAD``."""
    xs, dy = ins["XShape"], ins.get("Out" + GRAD)
    return {"X" + GRAD: Meta(tuple(xs.shape[1:]), dy.dtype if dy is not None else xs.dtype)}


def _x_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    """The gradient of every reshaping op here: Out@GRAD laid out in X's shape."""
    return {"X" + GRAD: ins["Out" + GRAD].reshape(ins["XShape"].shape[1:])}


def _register2(op: str, inputs: Sequence[str], attrs: dict, out_shape: Any, kernel: Any,
               grad_kernel: Any = _x_grad, no_grad: Sequence[str] = ()) -> None:
    register_op(op, inputs=inputs, outputs=("Out", "XShape"), attrs=attrs,
                infer_shape=lambda ins, a: {"Out": out_shape(ins, a),
                                            "XShape": _xshape_meta(ins["X"])},
                kernel=lambda ins, a, ctx: {"Out": kernel(ins, a), "XShape": _xshape(ins["X"])},
                grad_kernel=grad_kernel, grad_uses=("XShape",), no_grad_inputs=no_grad,
                grad_infer_shape=_grad_meta)


# ----------------------------------------------------------------------------- reshape2


def _reshape2_shape(ins: dict, attrs: dict) -> Meta:
    """Fluid's order: the ShapeTensor list, then the Shape input, then the shape attr."""
    x = ins["X"]
    shape = [int(s) for s in attrs["shape"]]
    if ins.get("ShapeTensor"):
        # entries given by tensors are -1 in the attr; 0 still copies X's dim
        for i, s in enumerate(shape):
            if s == 0:
                if i >= len(x.shape):
                    raise ValueError(f"reshape2: shape {shape} copies dim {i} (0) but X has "
                                     f"rank {len(x.shape)}")
                shape[i] = x.shape[i]
        if len(shape) != len(ins["ShapeTensor"]):
            shape = [-1] * len(ins["ShapeTensor"])
        return Meta(tuple(shape), x.dtype)
    if ins.get("Shape") is not None:
        rank = ins["Shape"].shape[0] if ins["Shape"].shape else -1
        if shape and (rank == -1 or rank == len(shape)):
            rank = len(shape)
        if rank <= 0:
            raise ValueError("reshape2: the rank of the Shape input is unknown; also give the "
                             "shape attr")
        return Meta((-1,) * rank, x.dtype)
    return Meta(_reshape_target(x.shape, shape), x.dtype)


def _target_of(ins: dict, attrs: dict) -> list[int]:
    if ins.get("ShapeTensor"):
        return [int(t.reshape(-1)[0]) for t in ins["ShapeTensor"]]
    if ins.get("Shape") is not None:
        return [int(v) for v in ins["Shape"].reshape(-1).tolist()]
    return [int(s) for s in attrs["shape"]]


def _reshape2(ins: dict, attrs: dict) -> torch.Tensor:
    x = ins["X"]
    # NOTE: a copy, not a view: an in-place update of X must not show through Out.
    return x.reshape(_reshape_target(tuple(x.shape), _target_of(ins, attrs))).clone()


_register2("reshape2", ("X", "Shape?", "ShapeTensor[]?"), {"shape": []}, _reshape2_shape,
           _reshape2, no_grad=("Shape", "ShapeTensor"))


# ----------------------------------------------------------------------------- transpose2


def _transpose2_shape(ins: dict, attrs: dict) -> Meta:
    x = ins["X"]
    perm = _check_perm(attrs["axis"], len(x.shape))
    return Meta(tuple(x.shape[p] for p in perm), x.dtype)


def _transpose2(ins: dict, attrs: dict) -> torch.Tensor:
    x = ins["X"]
    return x.permute(_check_perm(attrs["axis"], x.dim())).clone(
        memory_format=torch.contiguous_format)


def _transpose2_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    dy = ins["Out" + GRAD]
    perm = _check_perm(attrs["axis"], dy.dim())
    inverse = [0] * len(perm)
    for i, p in enumerate(perm):
        inverse[p] = i
    return {"X" + GRAD: dy.permute(inverse).contiguous()}


_register2("transpose2", ("X",), {"axis": [], "use_mkldnn": False, "data_format": "AnyLayout"},
           _transpose2_shape, _transpose2, grad_kernel=_transpose2_grad)


# ----------------------------------------------------------------------------- squeeze2, unsqueeze2


def _axes_op(rule: Any) -> tuple[Any, Any]:
    def shape(ins: dict, attrs: dict) -> Meta:
        return Meta(rule(ins["X"].shape, attrs["axes"]), ins["X"].dtype)

    def kernel(ins: dict, attrs: dict) -> torch.Tensor:
        x = ins["X"]
        return x.reshape(rule(tuple(x.shape), attrs["axes"])).clone()
    return shape, kernel


_register2("squeeze2", ("X",), {"axes": []}, *_axes_op(_squeezed))
_register2("unsqueeze2", ("X",), {"axes": []}, *_axes_op(_unsqueezed))


# ----------------------------------------------------------------------------- flatten2


def _flatten2(ins: dict, attrs: dict) -> torch.Tensor:
    x, axis = ins["X"], int(attrs["axis"])
    rows = 1
    for d in x.shape[:axis]:
        rows *= d
    return x.reshape(rows, -1).clone()


_register2("flatten2", ("X",), {"axis": 1},
           lambda ins, attrs: _flatten_shape(ins, attrs)["Out"], _flatten2)
