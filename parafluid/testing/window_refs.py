"""numpy references for the convolutions and poolings, written as loops from Fluid 1.6's
definitions (conv_op.h, conv_transpose_op.h, math/pooling.cc): any layout, (before, after)
paddings, ``padding_algorithm`` 'SAME' / 'VALID'. Small shapes only.

Example::

    ref = conv_ref(nd=2)            # reads strides, paddings, ... from the op's attrs
    OpCase("conv2d", {"Input": x, "Filter": w}, attrs={"data_format": "NHWC"}, ref=ref)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

__all__ = ["fluid_pads", "conv_ref", "conv_transpose_ref", "pool_ref", "channel_last"]

FLT_MAX = 3.4028234663852886e38


def channel_last(attrs: dict[str, Any]) -> bool:
    return str(attrs.get("data_format", "NCHW")).upper() in ("NHWC", "NDHWC")


def _listify(v: Any, n: int) -> list[int]:
    return [int(v)] * n if isinstance(v, int) else ([int(v[0])] * n if len(v) == 1
                                                    else [int(a) for a in v])


def fluid_pads(attrs: dict[str, Any], spatial: Sequence[int], ksize: Sequence[int],
               strides: Sequence[int]) -> list[tuple[int, int]]:
    """(before, after) per dim: nd or 2*nd paddings, then SAME (out = ceil(in / stride),
    the smaller half before) or VALID (none)."""
    nd = len(spatial)
    algo = attrs.get("padding_algorithm", "EXPLICIT")
    if algo == "VALID":
        return [(0, 0)] * nd
    if algo == "SAME":
        pads = []
        for size, k, s in zip(spatial, ksize, strides):
            out = -(-size // s)
            total = max((out - 1) * s + k - size, 0)
            pads.append((total // 2, total - total // 2))
        return pads
    p = attrs["paddings"]
    p = [p] * nd if isinstance(p, int) else list(p)
    if len(p) == nd:
        return [(a, a) for a in p]
    return [(p[2 * i], p[2 * i + 1]) for i in range(nd)]


def _first(x: np.ndarray, last: bool) -> np.ndarray:
    return np.moveaxis(x, -1, 1) if last else x


def _back(x: np.ndarray, last: bool) -> np.ndarray:
    return np.ascontiguousarray(np.moveaxis(x, 1, -1)) if last else x


def conv_ref(nd: int = 2, relu_input: bool = False) -> Callable[..., dict[str, np.ndarray]]:
    """Output[n, o, i...] = sum over c, k of padded Input[n, c, i * s + k * d] * Filter[o, c, k]
    within each group."""
    def ref(Input: np.ndarray, Filter: np.ndarray, attrs: dict[str, Any]) -> dict:
        last = channel_last(attrs)
        x = _first(Input, last)
        if relu_input:
            x = np.maximum(x, 0)
        k = Filter.shape[2:]
        strides, dil = _listify(attrs["strides"], nd), _listify(attrs["dilations"], nd)
        pads = fluid_pads(attrs, x.shape[2:], k, strides)
        if attrs.get("padding_algorithm") == "SAME":
            dil = [1] * nd
        xp = np.pad(x, [(0, 0), (0, 0)] + pads)
        groups = attrs.get("groups") or 1
        n, c = x.shape[:2]
        oc, cg = Filter.shape[0], c // groups
        og = oc // groups
        ext = [d * (kk - 1) + 1 for d, kk in zip(dil, k)]
        sizes = [(xp.shape[2 + i] - ext[i]) // strides[i] + 1 for i in range(nd)]
        out = np.zeros((n, oc, *sizes))
        for pos in np.ndindex(*sizes):
            win = tuple(slice(p * s, p * s + e, d) for p, s, e, d in zip(pos, strides, ext, dil))
            for g in range(groups):
                patch = xp[(slice(None), slice(g * cg, (g + 1) * cg)) + win]
                w = Filter[g * og:(g + 1) * og]
                axes = list(range(1, nd + 2))
                out[(slice(None), slice(g * og, (g + 1) * og)) + pos] = np.tensordot(
                    patch, w, axes=(axes, axes))
        return {"Output": _back(out, last)}
    return ref


def conv_transpose_ref(nd: int = 2) -> Callable[..., dict[str, np.ndarray]]:
    """Every input element scatters ``Input[n, c, i] * Filter[c, o, k]`` to output position
    ``i * s + k * d - pad_before``; positions outside [0, out) are dropped."""
    def ref(Input: np.ndarray, Filter: np.ndarray, attrs: dict[str, Any]) -> dict:
        last = channel_last(attrs)
        x = _first(Input, last)
        k = Filter.shape[2:]
        strides, dil = _listify(attrs["strides"], nd), _listify(attrs["dilations"], nd)
        pads = fluid_pads(attrs, x.shape[2:], k, strides)
        if attrs.get("padding_algorithm") == "SAME":
            dil = [1] * nd
        groups = attrs.get("groups") or 1
        n, c = x.shape[:2]
        cg, og = c // groups, Filter.shape[1]
        sizes = [(x.shape[2 + i] - 1) * strides[i] - pads[i][0] - pads[i][1] +
                 dil[i] * (k[i] - 1) + 1 for i in range(nd)]
        if attrs.get("output_size"):
            sizes = list(attrs["output_size"])
        out = np.zeros((n, og * groups, *sizes))
        for pos in np.ndindex(*x.shape[2:]):
            for g in range(groups):
                v = x[(slice(None), slice(g * cg, (g + 1) * cg)) + pos]  # (n, cg)
                contrib = np.tensordot(v, Filter[g * cg:(g + 1) * cg], axes=([1], [0]))
                for kpos in np.ndindex(*k):
                    o = [p * s + kk * d - pb for p, s, kk, d, (pb, _) in
                         zip(pos, strides, kpos, dil, pads)]
                    if all(0 <= oi < si for oi, si in zip(o, sizes)):
                        out[(slice(None), slice(g * og, (g + 1) * og)) + tuple(o)] += \
                            contrib[(slice(None), slice(None)) + kpos]
        return {"Output": _back(out, last)}
    return ref


def _adaptive_bounds(i: int, size: int, out: int) -> tuple[int, int]:
    return (i * size) // out, -(-((i + 1) * size) // out)


def pool_ref(nd: int = 2) -> Callable[..., dict[str, np.ndarray]]:
    """Fluid's pooling: window i starts at i * stride - pad_before, clipped to the input;
    exclusive averages divide by the clipped size, others by prod(ksize); an empty max
    window gives -FLT_MAX."""
    def ref(X: np.ndarray, attrs: dict[str, Any]) -> dict:
        last = channel_last(attrs)
        x = _first(X, last)
        spatial = x.shape[2:]
        ksize = _listify(attrs["ksize"], nd)
        strides = _listify(attrs["strides"], nd)
        pads = fluid_pads(attrs, spatial, ksize, strides)
        adaptive = attrs.get("adaptive", False)
        if attrs["global_pooling"] or adaptive:
            pads = [(0, 0)] * nd
        if attrs["global_pooling"]:
            ksize = list(spatial)
        if adaptive:
            sizes = list(ksize)
        else:
            extra = [s - 1 if attrs["ceil_mode"] else 0 for s in strides]
            sizes = [(spatial[i] + pads[i][0] + pads[i][1] - ksize[i] + extra[i]) //
                     strides[i] + 1 for i in range(nd)]
        out = np.zeros(x.shape[:2] + tuple(sizes))
        for pos in np.ndindex(*sizes):
            bounds = []
            for i, p in enumerate(pos):
                if adaptive:
                    bounds.append(_adaptive_bounds(p, spatial[i], ksize[i]))
                else:
                    start = p * strides[i] - pads[i][0]
                    bounds.append((max(start, 0), min(start + ksize[i], spatial[i])))
            win = x[(slice(None), slice(None)) + tuple(slice(a, b) for a, b in bounds)]
            axes = tuple(range(2, nd + 2))
            if attrs["pooling_type"] == "max":
                val = win.max(axis=axes) if win.size else np.full(x.shape[:2], -FLT_MAX)
            else:
                count = int(np.prod([b - a for a, b in bounds]))
                div = count if (attrs["exclusive"] or adaptive) else int(np.prod(ksize))
                val = win.sum(axis=axes) / div
            out[(slice(None), slice(None)) + pos] = val
        return {"Out": _back(out, last)}
    return ref
