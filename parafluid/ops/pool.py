"""Pooling: pool2d, pool3d (max or average; global, adaptive, ceil mode; channel-first or
channel-last ``data_format``; Fluid's padding forms, see ``window.py``).

Fluid's window ``i`` along a dim starts at ``i * stride - pad_before`` and is clipped to the
input; an exclusive average divides by the clipped window, a non-exclusive one by the full
``ksize``. The output length is ``(in + pad_before + pad_after - k) / stride + 1``, rounded
up in ceil mode (so a last window may lie wholly in the padding: max gives -FLT_MAX there,
as Fluid's CPU kernel).

Where torch's pooling gives the same windows (symmetric paddings of at most half a window,
the same output length) it runs as is; otherwise the input is padded explicitly to exactly
the windows Fluid visits. Gradients call aten's backward kernels, never autograd.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from .registry import Meta, register_op
from .window import (
    Pads,
    check_rank,
    is_channel_last,
    pad_input,
    pair,
    spatial_of,
    symmetric,
    to_channel_first,
    to_channel_last,
    window_pads,
    with_layout,
)

__all__ = ["pool_out_size", "fluid_pool_out_size", "PoolGeometry"]

_FLT_MAX = 3.4028234663852886e38  # Fluid's MaxPool starts from -FLT_MAX


def pool_out_size(size: int, k: int, pad: int, stride: int, ceil_mode: bool) -> int:
    """Output length of torch's pooling along one dim (a ceil-mode window starting in the
    right padding is dropped)."""
    if size == -1:
        return -1
    if not ceil_mode:
        return (size + 2 * pad - k) // stride + 1
    out = -(-(size + 2 * pad - k) // stride) + 1
    if (out - 1) * stride >= size + pad:
        out -= 1
    return out


def fluid_pool_out_size(size: int, k: int, before: int, after: int, stride: int,
                        ceil_mode: bool) -> int:
    """Output length of Fluid's pooling along one dim (-1 stays unknown)."""
    if size == -1:
        return -1
    span = size + before + after - k
    return (span + (stride - 1 if ceil_mode else 0)) // stride + 1


class PoolGeometry:
    """Layout, window sizes, strides, (before, after) paddings and output sizes of one
    pool op for a given input shape (Fluid's ``UpdatePadding`` / ``UpdateKsize``)."""

    def __init__(self, op: str, nd: int, attrs: dict, x_shape: Any) -> None:
        self.nd = nd
        self.last = is_channel_last(op, attrs)
        self.spatial = spatial_of(x_shape, self.last)
        self.strides = pair(attrs["strides"], "strides", op, nd)
        ksize = pair(attrs["ksize"], "ksize", op, nd)
        self.pads: Pads = window_pads(op, attrs, self.spatial, ksize, self.strides)
        self.is_global, self.adaptive = bool(attrs["global_pooling"]), bool(attrs["adaptive"])
        if self.is_global or self.adaptive:
            self.pads = [(0, 0)] * nd
        if self.is_global:
            ksize = list(self.spatial)
        self.ksize = ksize
        self.ceil = bool(attrs["ceil_mode"])
        if self.adaptive:
            self.sizes = list(ksize)
        elif self.is_global:  # one window, even where the input's size is not known yet
            self.sizes = [1] * nd
        else:
            self.sizes = [fluid_pool_out_size(self.spatial[i], ksize[i], *self.pads[i],
                                              self.strides[i], self.ceil) for i in range(nd)]

    def native(self) -> bool:
        """torch's own padding and ceil rule give Fluid's windows."""
        return symmetric(self.pads) and all(
            p <= k // 2 and pool_out_size(s, k, p, st, self.ceil) == o
            for (p, _), k, s, st, o in zip(self.pads, self.ksize, self.spatial, self.strides,
                                           self.sizes))

    def explicit(self) -> Pads:
        """Paddings (negative: crops) that make exactly ``sizes`` unpadded windows."""
        return [(pb, (o - 1) * s + k - pb - size) for (pb, _), o, s, k, size in
                zip(self.pads, self.sizes, self.strides, self.ksize, self.spatial)]

    def has_empty_window(self) -> bool:
        return any(k <= pb or (o - 1) * s - pb >= size for (pb, _), o, s, k, size in
                   zip(self.pads, self.sizes, self.strides, self.ksize, self.spatial))

    def kprod(self) -> int:
        n = 1
        for k in self.ksize:
            n *= k
        return n


def _fn(name: str, nd: int) -> Any:
    return getattr(F, f"{name}{nd}d")


def _aten(name: str, nd: int) -> Any:
    return getattr(torch.ops.aten, name.format(nd=nd))


def _pool_infer(op: str, nd: int, ins: dict, attrs: dict) -> dict:
    x = ins["X"]
    check_rank(op, "X", x, nd + 2)
    if attrs["pooling_type"] not in ("max", "avg"):
        raise ValueError(f"{op}: pooling_type must be 'max' or 'avg', "
                         f"got {attrs['pooling_type']!r}")
    g = PoolGeometry(op, nd, attrs, x.shape)
    if any(d == 0 or d < -1 for d in g.sizes):
        raise ValueError(f"{op}: X {list(x.shape)} is smaller than ksize {g.ksize} "
                         f"with paddings {g.pads}")
    c = x.shape[-1] if g.last else x.shape[1]
    return {"Out": Meta(with_layout(x.shape[0], c, g.sizes, g.last), x.dtype)}


def _exclusive_counts(g: PoolGeometry, x: torch.Tensor) -> torch.Tensor:
    """In-bounds element count of every window (explicit-padding path)."""
    ones = torch.ones((1, 1, *x.shape[2:]), dtype=x.dtype, device=x.device)
    return _fn("avg_pool", g.nd)(pad_input(ones, g.explicit()), g.ksize, g.strides) * g.kprod()


def _pool_forward(op: str, nd: int, ins: dict, attrs: dict,
                  g: PoolGeometry | None = None) -> torch.Tensor:
    x = ins["X"]
    g = g or PoolGeometry(op, nd, attrs, x.shape)
    x = to_channel_first(x, g.last)
    is_max = attrs["pooling_type"] == "max"
    if g.adaptive:
        return to_channel_last(_fn("adaptive_max_pool" if is_max else "adaptive_avg_pool", nd)(
            x, g.ksize), g.last)
    if g.native():
        sym = [p for p, _ in g.pads]
        if is_max:
            if nd == 2 and not g.last and x.device.type == "cpu":
                # NOTE: max pooling on CPU is ~6x faster on channels_last memory
                x = x.contiguous(memory_format=torch.channels_last)
            out = _fn("max_pool", nd)(x, g.ksize, g.strides, sym, ceil_mode=g.ceil)
        else:
            out = _fn("avg_pool", nd)(x, g.ksize, g.strides, sym, ceil_mode=g.ceil,
                                      count_include_pad=not attrs["exclusive"],
                                      divisor_override=None if attrs["exclusive"]
                                      else g.kprod())
        return to_channel_last(out, g.last)
    if is_max:
        out = _fn("max_pool", nd)(pad_input(x, g.explicit(), float("-inf")), g.ksize, g.strides)
        if g.has_empty_window():
            out = out.clamp_min(-_FLT_MAX)
    else:
        out = _fn("avg_pool", nd)(pad_input(x, g.explicit()), g.ksize, g.strides)
        if attrs["exclusive"]:
            out = out * g.kprod() / _exclusive_counts(g, x)
    return to_channel_last(out, g.last)


def _pool_backward(op: str, nd: int, ins: dict, attrs: dict, ctx: Any,
                   g: PoolGeometry | None = None) -> dict:
    x0, dy = ins["X"], ins["Out@GRAD"]
    g = g or PoolGeometry(op, nd, attrs, x0.shape)
    x, dy = to_channel_first(x0, g.last), to_channel_first(dy, g.last)
    is_max = attrs["pooling_type"] == "max"
    if g.adaptive:
        if is_max:
            _, idx = _fn("adaptive_max_pool", nd)(x, g.ksize, return_indices=True)
            dx = _aten("adaptive_max_pool{nd}d_backward", nd)(dy, x, idx)
        else:
            dx = _aten("_adaptive_avg_pool{nd}d_backward", nd)(dy, x)
        return {"X@GRAD": to_channel_last(dx, g.last)}
    ones, zeros = [1] * nd, [0] * nd
    if g.native():
        sym = [p for p, _ in g.pads]
        if is_max:
            # NOTE: recomputing the argmax is cheaper than keeping an index tensor alive
            # between the forward and backward passes.
            back_to = None
            if nd == 2 and not g.last and x.device.type == "cpu":
                # NOTE: the backward kernel is ~5x slower when dy's layout differs from x's,
                # and the elementwise gradients before it (relu's) are slower on a
                # channels_last dx against their channel-first operands: dy joins x's
                # layout, dx goes back to the input's (the same values either way)
                if x.is_contiguous():
                    back_to = torch.contiguous_format
                x = x.contiguous(memory_format=torch.channels_last)
                dy = dy.contiguous(memory_format=torch.channels_last)
            _, idx = _fn("max_pool", nd)(x, g.ksize, g.strides, sym, ceil_mode=g.ceil,
                                         return_indices=True)
            dx = _aten("max_pool{nd}d_with_indices_backward", nd)(
                dy, x, g.ksize, g.strides, sym, ones, g.ceil, idx)
            if back_to is not None:
                dx = dx.contiguous(memory_format=back_to)
        else:
            dx = _aten("avg_pool{nd}d_backward", nd)(
                dy, x, g.ksize, g.strides, sym, g.ceil, not attrs["exclusive"],
                None if attrs["exclusive"] else g.kprod())
        return {"X@GRAD": to_channel_last(dx, g.last)}
    pads = g.explicit()
    back = [(-a, -b) for a, b in pads]
    if is_max:
        xp = pad_input(x, pads, float("-inf"))
        _, idx = _fn("max_pool", nd)(xp, g.ksize, g.strides, return_indices=True)
        dxp = _aten("max_pool{nd}d_with_indices_backward", nd)(
            dy, xp, g.ksize, g.strides, zeros, ones, False, idx)
    else:
        xp = pad_input(x, pads)
        if attrs["exclusive"]:
            dy = dy / _exclusive_counts(g, x)
            divisor = 1
        else:
            divisor = g.kprod()
        dxp = _aten("avg_pool{nd}d_backward", nd)(dy, xp, g.ksize, g.strides, zeros, False,
                                                  True, divisor)
    return {"X@GRAD": to_channel_last(pad_input(dxp, back), g.last)}


def _register_pool(op: str, nd: int, fmt: str) -> None:
    register_op(op, inputs=("X",), outputs=("Out",),
                attrs={"pooling_type": "max", "ksize": [1] * nd, "strides": [1] * nd,
                       "paddings": [0] * nd, "padding_algorithm": "EXPLICIT",
                       "global_pooling": False, "exclusive": True, "adaptive": False,
                       "ceil_mode": False, "use_cudnn": False, "use_mkldnn": False,
                       "use_quantizer": False, "is_test": False, "data_format": fmt},
                infer_shape=lambda ins, a: _pool_infer(op, nd, ins, a),
                kernel=lambda ins, a, ctx: {"Out": _pool_forward(op, nd, ins, a)},
                grad_kernel=lambda ins, a, ctx: _pool_backward(op, nd, ins, a, ctx),
                grad_uses=("X",), fresh_output=True)


_register_pool("pool2d", 2, "NCHW")
_register_pool("pool3d", 3, "NCDHW")
