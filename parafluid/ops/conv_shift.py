"""conv_shift: the circular convolution of each row of X (B, M) with the row of Y (B, N),
N odd and at most M, centred on Y's middle element:

    Out[b, i] = sum_j X[b, (i + j - (N - 1) / 2) mod M] * Y[b, j]
"""

from __future__ import annotations

from typing import Any

import torch

from .registry import GRAD, Meta, register_op

__all__: list[str] = []


def _shift_shape(ins: dict, attrs: dict) -> dict:
    x, y = ins["X"], ins["Y"]
    if len(x.shape) != 2 or len(y.shape) != 2:
        raise ValueError(f"conv_shift: X and Y must be 2-D, got {list(x.shape)} and "
                         f"{list(y.shape)}")
    if -1 not in (x.shape[0], y.shape[0]) and x.shape[0] != y.shape[0]:
        raise ValueError(f"conv_shift: X {list(x.shape)} and Y {list(y.shape)} must have the "
                         "same batch size")
    if y.shape[1] != -1 and y.shape[1] % 2 != 1:
        raise ValueError(f"conv_shift: Y's width must be odd, got {list(y.shape)}")
    if -1 not in (x.shape[1], y.shape[1]) and y.shape[1] > x.shape[1]:
        raise ValueError(f"conv_shift: Y's width {y.shape[1]} must be at most X's "
                         f"{x.shape[1]}")
    return {"Out": Meta(x.shape, x.dtype)}


def _index(m: int, n: int, device: Any) -> torch.Tensor:
    """[i, j] -> the X column Out column i reads for Y column j."""
    i = torch.arange(m, device=device)[:, None]
    j = torch.arange(n, device=device)[None, :]
    return (i + j - (n - 1) // 2) % m


def _shift(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, y = ins["X"], ins["Y"]
    idx = _index(x.shape[1], y.shape[1], x.device)
    return {"Out": (x[:, idx] * y[:, None, :]).sum(-1)}


def _shift_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, y, dy = ins["X"], ins["Y"], ins["Out" + GRAD]
    b, m = x.shape
    idx = _index(m, y.shape[1], x.device)
    out = {}
    if "X" in ctx.need:
        contrib = (dy[:, :, None] * y[:, None, :]).reshape(b, -1)
        dx = torch.zeros_like(x)
        dx.scatter_add_(1, idx.reshape(1, -1).expand(b, -1), contrib)
        out["X" + GRAD] = dx
    if "Y" in ctx.need:
        out["Y" + GRAD] = (dy[:, :, None] * x[:, idx]).sum(1)
    return out


register_op("conv_shift", inputs=("X", "Y"), outputs=("Out",), infer_shape=_shift_shape,
            kernel=_shift, grad_kernel=_shift_grad, grad_uses=("X", "Y"), fresh_output=True)
