"""Pooling: pool2d, pool3d (max or average, global and adaptive forms).

Forward kernels are ``torch.nn.functional`` calls; gradients call aten's backward kernels
(``max_pool2d_with_indices_backward``, ``avg_pool3d_backward``, ...), never autograd.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F

from .conv import _check_rank, _paddings, pair
from .registry import Meta, register_op

__all__ = ["pool_out_size", "pooled_meta"]


def pool_out_size(size: int, k: int, pad: int, stride: int, ceil_mode: bool) -> int:
    """Output length of a pooling along one dim, with torch's ceil-mode rule.

    In ceil mode a last window that would start inside the right padding is dropped (torch
    and cuDNN do so; Fluid's CPU kernel kept it as an all-padding window).
    """
    if size == -1:
        return -1
    if not ceil_mode:
        return (size + 2 * pad - k) // stride + 1
    out = -(-(size + 2 * pad - k) // stride) + 1
    if (out - 1) * stride >= size + pad:
        out -= 1
    return out


# ----------------------------------------------------------------------------- pool2d


def _pool_params(attrs: dict, hw: Sequence[int]) -> tuple[list[int], list[int], list[int]]:
    """(ksize, strides, paddings); global pooling takes the whole (known) spatial extent."""
    if attrs["global_pooling"]:
        return [int(hw[0]), int(hw[1])], [1, 1], [0, 0]
    return (pair(attrs["ksize"], "ksize", "pool2d"), pair(attrs["strides"], "strides", "pool2d"),
            pair(attrs["paddings"], "paddings", "pool2d"))


def _pool2d_shape(ins: dict, attrs: dict) -> dict:
    return pooled_meta("pool2d", ins["X"], attrs, 2, _pool_params)


def pooled_meta(op: str, x: Meta, attrs: dict, ndims: int, params: Any) -> dict:
    """The shape rule of ``pool2d`` / ``pool3d`` (``ndims`` spatial dims; ``params(attrs,
    spatial) -> (ksize, strides, paddings)``)."""
    _check_rank(op, "X", x, ndims + 2)
    if attrs["pooling_type"] not in ("max", "avg"):
        raise ValueError(f"{op}: pooling_type must be 'max' or 'avg', "
                         f"got {attrs['pooling_type']!r}")
    if attrs["global_pooling"]:
        return {"Out": Meta((x.shape[0], x.shape[1]) + (1,) * ndims, x.dtype)}
    ksize, strides, pads = params(attrs, x.shape[2:])
    if attrs["adaptive"]:  # ksize is the output size (adaptive pooling)
        return {"Out": Meta((x.shape[0], x.shape[1], *ksize), x.dtype)}
    for k, p in zip(ksize, pads):
        if p > k // 2:
            raise ValueError(f"{op}: paddings {pads} must be at most half of ksize {ksize}")
    sizes = [pool_out_size(x.shape[2 + i], ksize[i], pads[i], strides[i], attrs["ceil_mode"])
             for i in range(ndims)]
    if any(d == 0 or d < -1 for d in sizes):
        raise ValueError(f"{op}: X {list(x.shape)} is smaller than ksize {ksize} "
                         f"with paddings {pads}")
    return {"Out": Meta((x.shape[0], x.shape[1], *sizes), x.dtype)}


def _avg_divisor(attrs: dict, ksize: list[int]) -> int | None:
    # Fluid's non-exclusive average always divides by the full window, even where a
    # ceil-mode window is clipped; exclusive divides by the in-bounds count (torch's default).
    return None if attrs["exclusive"] else ksize[0] * ksize[1]


def _pool_layout(x: torch.Tensor) -> torch.Tensor:
    """Max pooling on CPU is ~6x faster on a channels-last tensor (conversion included)."""
    if x.device.type == "cpu" and x.dim() == 4:
        return x.contiguous(memory_format=torch.channels_last)
    return x


def _pool2d(ins: dict, attrs: dict, ctx: Any) -> dict:
    x = ins["X"]
    ksize, strides, pads = _pool_params(attrs, x.shape[2:])
    if attrs["adaptive"] and not attrs["global_pooling"]:
        fn = F.adaptive_max_pool2d if attrs["pooling_type"] == "max" else F.adaptive_avg_pool2d
        return {"Out": fn(x, ksize)}
    if attrs["pooling_type"] == "max":
        x = _pool_layout(x)
        out = F.max_pool2d(x, ksize, strides, pads, ceil_mode=attrs["ceil_mode"])
    else:
        out = F.avg_pool2d(x, ksize, strides, pads, ceil_mode=attrs["ceil_mode"],
                           count_include_pad=not attrs["exclusive"],
                           divisor_override=_avg_divisor(attrs, ksize))
    return {"Out": out}


def _pool2d_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, dy = ins["X"], ins["Out@GRAD"]
    ksize, strides, pads = _pool_params(attrs, x.shape[2:])
    ceil = attrs["ceil_mode"]
    if attrs["adaptive"] and not attrs["global_pooling"]:
        return {"X@GRAD": _adaptive_pool2d_grad(x, dy, ksize, attrs["pooling_type"])}
    if attrs["pooling_type"] == "max":
        # NOTE: recomputing the argmax is cheaper than keeping an index tensor alive between
        # the forward and backward passes.
        x = _pool_layout(x)
        _, idx = F.max_pool2d(x, ksize, strides, pads, ceil_mode=ceil, return_indices=True)
        dx = torch.ops.aten.max_pool2d_with_indices_backward(dy, x, ksize, strides, pads,
                                                             [1, 1], ceil, idx)
    else:
        dx = torch.ops.aten.avg_pool2d_backward(dy, x, ksize, strides, pads, ceil,
                                                not attrs["exclusive"],
                                                _avg_divisor(attrs, ksize))
    return {"X@GRAD": dx}


def _adaptive_pool2d_grad(x: torch.Tensor, dy: torch.Tensor, size: list[int],
                          pooling_type: str) -> torch.Tensor:
    """Adaptive bins are Fluid's: ``[floor(i * H / out), ceil((i + 1) * H / out))``."""
    if pooling_type == "max":
        _, idx = F.adaptive_max_pool2d(x, size, return_indices=True)
        return torch.ops.aten.adaptive_max_pool2d_backward(dy, x, idx)
    return torch.ops.aten._adaptive_avg_pool2d_backward(dy, x)


register_op("pool2d", inputs=("X",), outputs=("Out",),
            attrs={"pooling_type": "max", "ksize": [1, 1], "strides": [1, 1],
                   "paddings": [0, 0], "global_pooling": False, "exclusive": True,
                   "adaptive": False,
                   "ceil_mode": False, "use_cudnn": True, "data_format": "NCHW"},
            infer_shape=_pool2d_shape, kernel=_pool2d, grad_kernel=_pool2d_grad,
            grad_uses=("X",), fresh_output=True)


# ----------------------------------------------------------------------------- pool3d


def _pool3d_params(attrs: dict, dhw: Any) -> tuple[list[int], list[int], list[int]]:
    if attrs["global_pooling"]:
        return [int(d) for d in dhw], [1, 1, 1], [0, 0, 0]
    return (pair(attrs["ksize"], "ksize", "pool3d", 3),
            pair(attrs["strides"], "strides", "pool3d", 3),
            _paddings("pool3d", attrs["paddings"], 3))


def _pool3d_shape(ins: dict, attrs: dict) -> dict:
    return pooled_meta("pool3d", ins["X"], attrs, 3, _pool3d_params)


def _divisor(attrs: dict, ksize: list[int]) -> int | None:
    return None if attrs["exclusive"] else ksize[0] * ksize[1] * ksize[2]


def _pool3d(ins: dict, attrs: dict, ctx: Any) -> dict:
    x = ins["X"]
    ksize, strides, pads = _pool3d_params(attrs, x.shape[2:])
    is_max = attrs["pooling_type"] == "max"
    if attrs["adaptive"] and not attrs["global_pooling"]:
        fn = F.adaptive_max_pool3d if is_max else F.adaptive_avg_pool3d
        return {"Out": fn(x, ksize)}
    if is_max:
        return {"Out": F.max_pool3d(x, ksize, strides, pads, ceil_mode=attrs["ceil_mode"])}
    return {"Out": F.avg_pool3d(x, ksize, strides, pads, ceil_mode=attrs["ceil_mode"],
                                count_include_pad=not attrs["exclusive"],
                                divisor_override=_divisor(attrs, ksize))}


def _pool3d_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, dy = ins["X"], ins["Out@GRAD"]
    ksize, strides, pads = _pool3d_params(attrs, x.shape[2:])
    ceil, is_max = attrs["ceil_mode"], attrs["pooling_type"] == "max"
    aten = torch.ops.aten
    if attrs["adaptive"] and not attrs["global_pooling"]:
        if is_max:
            _, idx = F.adaptive_max_pool3d(x, ksize, return_indices=True)
            return {"X@GRAD": aten.adaptive_max_pool3d_backward(dy, x, idx)}
        return {"X@GRAD": aten._adaptive_avg_pool3d_backward(dy, x)}
    if is_max:
        _, idx = F.max_pool3d(x, ksize, strides, pads, ceil_mode=ceil, return_indices=True)
        return {"X@GRAD": aten.max_pool3d_with_indices_backward(dy, x, ksize, strides, pads,
                                                                [1, 1, 1], ceil, idx)}
    return {"X@GRAD": aten.avg_pool3d_backward(dy, x, ksize, strides, pads, ceil,
                                               not attrs["exclusive"], _divisor(attrs, ksize))}


register_op("pool3d", inputs=("X",), outputs=("Out",),
            attrs={"pooling_type": "max", "ksize": [1, 1, 1], "strides": [1, 1, 1],
                   "paddings": [0, 0, 0], "global_pooling": False, "exclusive": True,
                   "adaptive": False, "ceil_mode": False, "use_cudnn": True,
                   "data_format": "NCDHW"},
            infer_shape=_pool3d_shape, kernel=_pool3d, grad_kernel=_pool3d_grad,
            grad_uses=("X",))
