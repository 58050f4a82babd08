"""Pooling ops with indices: max_pool2d_with_index, max_pool3d_with_index (Out and Mask),
unpool (scatter back by the Mask), spp (spatial pyramid pooling).

``Mask`` holds, for each output, the position of the window's maximum flattened within
its (n, c) input plane (``h * W + w``; ``(d * H + h) * W + w`` in 3-D), the first maximum
in scan order, as Fluid's kernel and torch's ``return_indices`` both give.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from .pool import PoolGeometry, _pool_backward, _pool_forward
from .registry import GRAD, Meta, register_op
from .window import check_rank, pad_input, pair

__all__: list[str] = []


# ----------------------------------------------------------------------------- max_pool*_with_index


def _index_geometry(op: str, nd: int, attrs: dict, shape: Any) -> PoolGeometry:
    """Fluid's rule here: ``nd`` symmetric paddings, floor mode, NC + spatial layout."""
    paddings = pair(attrs["paddings"], "paddings", op, nd)
    return PoolGeometry(op, nd, {**attrs, "paddings": paddings, "ceil_mode": False,
                                 "padding_algorithm": "EXPLICIT", "data_format": "NCHW"},
                        shape)


def _with_index_shape(op: str, nd: int, ins: dict, attrs: dict) -> dict:
    x = ins["X"]
    check_rank(op, "X", x, nd + 2)
    g = _index_geometry(op, nd, attrs, x.shape)
    if any(d == 0 or d < -1 for d in g.sizes):
        raise ValueError(f"{op}: X {list(x.shape)} is smaller than ksize {g.ksize} "
                         f"with paddings {g.pads}")
    shape = (x.shape[0], x.shape[1], *g.sizes)
    return {"Out": Meta(shape, x.dtype), "Mask": Meta(shape, "int32")}


def _with_index(op: str, nd: int, ins: dict, attrs: dict) -> dict:
    x = ins["X"]
    g = _index_geometry(op, nd, attrs, x.shape)
    if g.adaptive:
        out, idx = getattr(F, f"adaptive_max_pool{nd}d")(x, g.ksize, return_indices=True)
        return {"Out": out, "Mask": idx.to(torch.int32)}
    fn = getattr(F, f"max_pool{nd}d")
    if g.native():
        out, idx = fn(x, g.ksize, g.strides, [p for p, _ in g.pads], return_indices=True)
        return {"Out": out, "Mask": idx.to(torch.int32)}
    # paddings past half a window: pad explicitly, then map the indices back to X's plane
    pads = g.explicit()
    xp = pad_input(x, pads, float("-inf"))
    out, idx = fn(xp, g.ksize, g.strides, return_indices=True)
    coords, rest = [], idx
    for size in reversed(xp.shape[2:]):
        coords.append(rest % size)
        rest = rest // size
    flat = torch.zeros_like(idx)
    for (before, _), c, size in zip(pads, reversed(coords), x.shape[2:]):
        flat = flat * size + (c - before)
    return {"Out": out, "Mask": flat.to(torch.int32)}


def _with_index_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    """Each output's gradient goes to the input position its Mask names."""
    x, mask, dy = ins["X"], ins["Mask"], ins["Out" + GRAD]
    n, c = x.shape[:2]
    dx = torch.zeros((n, c, x[0, 0].numel()), dtype=dy.dtype, device=dy.device)
    dx.scatter_add_(2, mask.reshape(n, c, -1).long(), dy.reshape(n, c, -1))
    return {"X" + GRAD: dx.reshape(x.shape)}


def _register_with_index(nd: int) -> None:
    op = f"max_pool{nd}d_with_index"
    register_op(op, inputs=("X",), outputs=("Out", "Mask"),
                attrs={"ksize": [1] * nd, "global_pooling": False, "adaptive": False,
                       "strides": [1] * nd, "paddings": [0] * nd},
                infer_shape=lambda ins, a: _with_index_shape(op, nd, ins, a),
                kernel=lambda ins, a, ctx: _with_index(op, nd, ins, a),
                grad_kernel=_with_index_grad, grad_uses=("X", "Mask"), fresh_output=True)


_register_with_index(2)
_register_with_index(3)


# ----------------------------------------------------------------------------- unpool


def _unpool_sizes(attrs: dict, spatial: Any) -> list[int]:
    ksize = pair(attrs["ksize"], "ksize", "unpool")
    strides = pair(attrs["strides"], "strides", "unpool")
    pads = pair(attrs["paddings"], "paddings", "unpool")
    return [-1 if d == -1 else (d - 1) * s - 2 * p + k
            for d, k, s, p in zip(spatial, ksize, strides, pads)]


def _unpool_shape(ins: dict, attrs: dict) -> dict:
    x, idx = ins["X"], ins["Indices"]
    check_rank("unpool", "X", x, 4)
    if attrs["unpooling_type"] != "max":
        raise ValueError(f"unpool: unpooling_type must be 'max', got "
                         f"{attrs['unpooling_type']!r}")
    if len(idx.shape) != 4:
        raise ValueError(f"unpool: Indices must have the shape of X {list(x.shape)}, "
                         f"got {list(idx.shape)}")
    return {"Out": Meta((x.shape[0], x.shape[1], *_unpool_sizes(attrs, x.shape[2:])),
                        x.dtype)}


def _unpool(ins: dict, attrs: dict, ctx: Any) -> dict:
    """Out's plane is zero but at each Indices position, which takes the X value there."""
    x, idx = ins["X"], ins["Indices"]
    n, c = x.shape[:2]
    h, w = _unpool_sizes(attrs, x.shape[2:])
    out = torch.zeros((n, c, h * w), dtype=x.dtype, device=x.device)
    out.scatter_(2, idx.reshape(n, c, -1).long(), x.reshape(n, c, -1))
    return {"Out": out.reshape(n, c, h, w)}


def _unpool_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, idx, dy = ins["X"], ins["Indices"], ins["Out" + GRAD]
    n, c = x.shape[:2]
    dx = dy.reshape(n, c, -1).gather(2, idx.reshape(n, c, -1).long())
    return {"X" + GRAD: dx.reshape(x.shape)}


register_op("unpool", inputs=("X", "Indices"), outputs=("Out",),
            attrs={"unpooling_type": "max", "ksize": [1, 1], "strides": [1, 1],
                   "paddings": [0, 0]},
            infer_shape=_unpool_shape, kernel=_unpool, grad_kernel=_unpool_grad,
            grad_uses=("X", "Indices"), no_grad_inputs=("Indices",), fresh_output=True)


# ----------------------------------------------------------------------------- spp


def _spp_levels(attrs: dict, h: int, w: int) -> list[dict]:
    """pool2d attrs of each pyramid level p: 2^p bins a side, Fluid's window and padding."""
    levels = []
    for p in range(int(attrs["pyramid_height"])):
        bins = 2 ** p
        kh, kw = -(-h // bins), -(-w // bins)
        levels.append({"pooling_type": attrs["pooling_type"], "ksize": [kh, kw],
                       "strides": [kh, kw],
                       "paddings": [(kh * bins - h + 1) // 2, (kw * bins - w + 1) // 2],
                       "global_pooling": False, "adaptive": False, "exclusive": True,
                       "ceil_mode": False, "data_format": "NCHW",
                       "padding_algorithm": "EXPLICIT", "bins": bins})
    return levels


def _spp_shape(ins: dict, attrs: dict) -> dict:
    x = ins["X"]
    check_rank("spp", "X", x, 4)
    if attrs["pooling_type"] not in ("max", "avg"):
        raise ValueError(f"spp: pooling_type must be 'max' or 'avg', "
                         f"got {attrs['pooling_type']!r}")
    if int(attrs["pyramid_height"]) < 1:
        raise ValueError(f"spp: pyramid_height must be at least 1, "
                         f"got {attrs['pyramid_height']}")
    bins = sum(4 ** p for p in range(int(attrs["pyramid_height"])))
    c = -1 if x.shape[1] == -1 else x.shape[1] * bins
    return {"Out": Meta((x.shape[0], c), x.dtype)}


def _spp_geometry(level: dict, x: torch.Tensor) -> PoolGeometry:
    g = PoolGeometry("spp", 2, level, x.shape)
    g.sizes = [level["bins"]] * 2  # Fluid's kernel writes bins x bins windows, whatever fits
    return g


def _spp(ins: dict, attrs: dict, ctx: Any) -> dict:
    x = ins["X"]
    outs = [_pool_forward("spp", 2, {"X": x}, lv, _spp_geometry(lv, x)).reshape(x.shape[0], -1)
            for lv in _spp_levels(attrs, x.shape[2], x.shape[3])]
    return {"Out": torch.cat(outs, 1)}


def _spp_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, dy = ins["X"], ins["Out" + GRAD]
    n, c = x.shape[:2]
    dx, offset = torch.zeros_like(x), 0
    for lv in _spp_levels(attrs, x.shape[2], x.shape[3]):
        size = c * lv["bins"] ** 2
        dlevel = dy[:, offset:offset + size].reshape(n, c, lv["bins"], lv["bins"])
        dx = dx + _pool_backward("spp", 2, {"X": x, "Out" + GRAD: dlevel}, lv, ctx,
                                 _spp_geometry(lv, x))["X" + GRAD]
        offset += size
    return {"X" + GRAD: dx}


register_op("spp", inputs=("X",), outputs=("Out",),
            attrs={"pyramid_height": 1, "pooling_type": "max"},
            infer_shape=_spp_shape, kernel=_spp, grad_kernel=_spp_grad, grad_uses=("X",),
            fresh_output=True)
