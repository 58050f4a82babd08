"""One-hot ops: ``one_hot`` (ids ``[..., 1]``, the trailing 1 replaced by ``depth``) and
``one_hot_v2`` (ids of any shape, ``depth`` appended). Both take the depth from an int
``depth_tensor`` input when given (it overrides the ``depth`` attribute, as in Fluid 1.6),
hand X's LoD on to Out and have no gradient."""

from __future__ import annotations

from typing import Any

import torch

from ..dtypes import convert_dtype, to_torch
from .registry import Meta, register_op


def _depth(op: str, ins: dict, attrs: dict) -> int:
    t = ins.get("depth_tensor")
    depth = attrs["depth"] if t is None else int(t.reshape(-1)[0].item())
    if depth < 1:
        raise ValueError(f"{op}: depth must be positive, got {depth}")
    return depth


def _one_hot_shape(op: str, ins: dict, attrs: dict) -> dict:
    x = ins["X"]
    if ins.get("depth_tensor") is not None:
        depth = -1  # known at run time only
    else:
        depth = attrs["depth"]
        if depth < 1:
            raise ValueError(f"{op}: depth must be positive (or given by depth_tensor), "
                             f"got {depth}")
    # as Fluid's shape rule: the rank when the program is built; the last dim of one_hot's
    # X being 1, and X holding ints, when it runs (a program may declare X otherwise)
    if op == "one_hot":
        if len(x.shape) < 2:
            raise ValueError(f"one_hot: X must have rank >= 2 (ids [..., 1]), got shape "
                             f"{list(x.shape)}")
        shape = tuple(x.shape[:-1]) + (depth,)
    else:
        if not x.shape:
            raise ValueError("one_hot_v2: X must have rank >= 1, got a scalar")
        shape = tuple(x.shape) + (depth,)
    return {"Out": Meta(shape, convert_dtype(attrs["dtype"]))}


def _one_hot_rows(op: str, idx: torch.Tensor, depth: int, attrs: dict) -> torch.Tensor:
    idx = idx.long()
    valid = (idx >= 0) & (idx < depth)
    if not attrs["allow_out_of_range"] and not bool(valid.all()):
        bad = idx[~valid][:5].tolist()
        raise ValueError(f"{op}: values {bad} are outside [0, {depth}); pass "
                         "allow_out_of_range=True to map them to all-zero rows")
    dtype = to_torch(convert_dtype(attrs["dtype"]))
    out = torch.zeros(*idx.shape, depth, dtype=dtype, device=idx.device)
    return out.scatter_(-1, idx.clamp(0, depth - 1).unsqueeze(-1),
                        valid.unsqueeze(-1).to(dtype))


def _register(op: str) -> None:
    def kernel(ins: dict, attrs: dict, ctx: Any) -> dict:
        x = ins["X"]
        if x.is_floating_point() or x.dtype == torch.bool:
            raise TypeError(f"{op}: X must hold int32 or int64 ids, got "
                            f"{str(x.dtype).replace('torch.', '')}")
        if op == "one_hot" and x.shape[-1] != 1:
            raise ValueError(f"one_hot: the last dimension of X must be 1 (one id per row), "
                             f"got shape {list(x.shape)}")
        idx = x.reshape(x.shape[:-1]) if op == "one_hot" else x
        return {"Out": _one_hot_rows(op, idx, _depth(op, ins, attrs), attrs)}

    register_op(op, inputs=("X", "depth_tensor?"), outputs=("Out",),
                attrs={"depth": -1, "dtype": "float32", "allow_out_of_range": False},
                infer_shape=lambda ins, attrs: _one_hot_shape(op, ins, attrs), kernel=kernel,
                share_lod=("X", "Out"))


_register("one_hot")
_register("one_hot_v2")
