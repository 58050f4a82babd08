"""Deformable convolution of Fluid 1.6: ``deformable_conv`` (v2: learned offsets and a
modulation mask) and ``deformable_conv_v1`` (offsets only), with gradients to the input, the
offsets, the mask and the filter.

Kernel tap ``k = (i, j)`` of output pixel ``(y, x)`` reads the input at
``(y * stride - pad + i * dilation + dy, x * stride - pad + j * dilation + dx)`` where
``(dy, dx) = Offset[n, 2 * (g * K + k) : +2, y, x]`` for the channel's deformable group
``g``; the value is bilinear, zero outside the map (a point is off the map when
``py <= -1``, ``py >= H``, and alike for x). v2 multiplies it by ``Mask[n, g * K + k, y, x]``.
The sampled columns ``[N, C * K, Ho * Wo]`` are then multiplied by the filter per group.
"""

from __future__ import annotations

from typing import Any

import torch

from .registry import Meta, register_op

__all__: list[str] = []


def _geometry(ins: dict, attrs: dict) -> tuple:
    x, off, w = ins["Input"], ins["Offset"], ins["Filter"]
    n, c, h, wd = x.shape
    kh, kw = w.shape[2], w.shape[3]
    sh, sw = attrs["strides"]
    ph, pw = attrs["paddings"]
    dh, dw = attrs["dilations"]
    ho, wo = off.shape[2], off.shape[3]
    dg = attrs["deformable_groups"]
    k = kh * kw
    o = off.reshape(n, dg, k, 2, ho, wo)
    ki = torch.arange(kh).repeat_interleave(kw).reshape(1, 1, k, 1, 1).to(x.dtype)
    kj = torch.arange(kw).repeat(kh).reshape(1, 1, k, 1, 1).to(x.dtype)
    ys = torch.arange(ho, dtype=x.dtype).reshape(1, 1, 1, ho, 1) * sh - ph
    xs = torch.arange(wo, dtype=x.dtype).reshape(1, 1, 1, 1, wo) * sw - pw
    py = ys + ki * dh + o[:, :, :, 0]  # [N, dg, K, Ho, Wo]
    px = xs + kj * dw + o[:, :, :, 1]
    return n, c, h, wd, k, dg, ho, wo, py, px


def _corners(py: torch.Tensor, px: torch.Tensor, h: int, w: int) -> list[tuple]:
    """The 4 bilinear corners: (flat index, weight, d weight / dy, d weight / dx) each, the
    weight 0 for a corner off the map or a point outside (-1, H) x (-1, W)."""
    inside = (py > -1) & (py < h) & (px > -1) & (px < w)
    y0, x0 = torch.floor(py), torch.floor(px)
    ly, lx = py - y0, px - x0
    out = []
    for yy, xx, wy, wx, sy, sx in ((y0, x0, 1 - ly, 1 - lx, -1, -1),
                                   (y0, x0 + 1, 1 - ly, lx, -1, 1),
                                   (y0 + 1, x0, ly, 1 - lx, 1, -1),
                                   (y0 + 1, x0 + 1, ly, lx, 1, 1)):
        ok = inside & (yy >= 0) & (yy < h) & (xx >= 0) & (xx < w)
        okf = ok.to(py.dtype)
        idx = (yy.clamp(0, h - 1) * w + xx.clamp(0, w - 1)).long()
        out.append((idx, wy * wx * okf, sy * wx * okf, sx * wy * okf))
    return out


def _expand(t: torch.Tensor, c: int, dg: int) -> torch.Tensor:
    """[N, dg, K, Ho, Wo] -> [N, C, K, Ho, Wo]: each channel takes its deformable group's."""
    n = t.shape[0]
    return t.unsqueeze(2).expand(n, dg, c // dg, *t.shape[2:]).reshape(n, c, *t.shape[2:])


def _sample(x: torch.Tensor, geo: tuple) -> tuple:
    n, c, h, w, k, dg, ho, wo, py, px = geo
    flat = x.reshape(n, c, h * w)
    corners = _corners(py, px, h, w)
    vals, parts = 0, []
    for idx, wt, _, _ in corners:
        idx_c = _expand(idx, c, dg).reshape(n, c, -1)
        v = flat.gather(2, idx_c).reshape(n, c, k, ho, wo)
        parts.append((idx_c, v))
        vals = vals + v * _expand(wt, c, dg)
    return vals, corners, parts  # vals: [N, C, K, Ho, Wo]


def _mask(ins: dict, geo: tuple) -> torch.Tensor | None:
    m = ins.get("Mask")
    if m is None:
        return None
    n, c, h, w, k, dg, ho, wo, _, _ = geo
    return m.reshape(n, dg, k, ho, wo)


def _deformable_conv(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, wt = ins["Input"], ins["Filter"]
    geo = _geometry(ins, attrs)
    n, c, h, w, k, dg, ho, wo, _, _ = geo
    vals, _, _ = _sample(x, geo)
    m = _mask(ins, geo)
    if m is not None:
        vals = vals * _expand(m, c, dg)
    g = attrs["groups"]
    cols = vals.reshape(n, g, (c // g) * k, ho * wo)
    out = torch.einsum("gok,ngkp->ngop", wt.reshape(g, -1, (c // g) * k), cols)
    return {"Output": out.reshape(n, -1, ho, wo)}


def _deformable_conv_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, wt, dout = ins["Input"], ins["Filter"], ins["Output@GRAD"]
    geo = _geometry(ins, attrs)
    n, c, h, w, k, dg, ho, wo, _, _ = geo
    g = attrs["groups"]
    vals, corners, parts = _sample(x, geo)
    m = _mask(ins, geo)
    mexp = _expand(m, c, dg) if m is not None else None
    cols = (vals * mexp if mexp is not None else vals).reshape(n, g, (c // g) * k, ho * wo)
    dout_g = dout.reshape(n, g, -1, ho * wo)
    out: dict[str, Any] = {}
    out["Filter@GRAD"] = torch.einsum("ngop,ngkp->gok", dout_g, cols).reshape(wt.shape)
    dcols = torch.einsum("gok,ngop->ngkp", wt.reshape(g, -1, (c // g) * k), dout_g)
    dcols = dcols.reshape(n, c, k, ho, wo)
    if m is not None:
        out["Mask@GRAD"] = (dcols * vals).reshape(n, dg, c // dg, k, ho, wo).sum(2).reshape(
            ins["Mask"].shape)
        dcols = dcols * mexp
    dx = torch.zeros(n, c, h * w, dtype=x.dtype)
    dpy = torch.zeros(n, c, k, ho, wo, dtype=x.dtype)
    dpx = torch.zeros_like(dpy)
    for (_, wgt, dwy, dwx), (idx_c, v) in zip(corners, parts):
        dx.scatter_add_(2, idx_c, (dcols * _expand(wgt, c, dg)).reshape(n, c, -1))
        dpy += dcols * v * _expand(dwy, c, dg)
        dpx += dcols * v * _expand(dwx, c, dg)
    out["Input@GRAD"] = dx.reshape(x.shape)
    dpy = dpy.reshape(n, dg, c // dg, k, ho, wo).sum(2)
    dpx = dpx.reshape(n, dg, c // dg, k, ho, wo).sum(2)
    out["Offset@GRAD"] = torch.stack([dpy, dpx], 3).reshape(ins["Offset"].shape)
    return out


def _shape(op: str) -> Any:
    def infer(ins: dict, attrs: dict) -> dict:
        x, off, w = ins["Input"], ins["Offset"], ins["Filter"]
        if len(x.shape) != 4 or len(w.shape) != 4 or len(off.shape) != 4:
            raise ValueError(f"{op}: Input, Offset and Filter must be 4-D, got "
                             f"{list(x.shape)}, {list(off.shape)}, {list(w.shape)}")
        kh, kw = w.shape[2], w.shape[3]
        (sh, sw), (ph, pw), (dh, dw) = attrs["strides"], attrs["paddings"], attrs["dilations"]
        g, dg = attrs["groups"], attrs["deformable_groups"]
        c = x.shape[1]
        if c != -1 and (c % g or c % dg or w.shape[1] * g != c):
            raise ValueError(f"{op}: the {c} input channels must split into groups={g} (the "
                             f"Filter's {w.shape[1]} per group) and deformable_groups={dg}")

        def size(i: int, k: int, s: int, p: int, d: int) -> int:
            return -1 if i == -1 else (i + 2 * p - (d * (k - 1) + 1)) // s + 1
        ho, wo = size(x.shape[2], kh, sh, ph, dh), size(x.shape[3], kw, sw, pw, dw)
        if off.shape[1] not in (-1, 2 * dg * kh * kw) or \
                (-1 not in (ho, off.shape[2]) and off.shape[2] != ho):
            raise ValueError(f"{op}: Offset must be [N, 2 * deformable_groups * kh * kw = "
                             f"{2 * dg * kh * kw}, {ho}, {wo}], got {list(off.shape)}")
        mask = ins.get("Mask")
        if mask is not None and mask.shape[1] not in (-1, dg * kh * kw):
            raise ValueError(f"{op}: Mask must have deformable_groups * kh * kw = "
                             f"{dg * kh * kw} channels, got {list(mask.shape)}")
        return {"Output": Meta((x.shape[0], w.shape[0], ho, wo), x.dtype)}
    return infer


_ATTRS = {"strides": [1, 1], "paddings": [0, 0], "dilations": [1, 1], "groups": 1,
          "deformable_groups": 1, "im2col_step": 64}

register_op("deformable_conv", inputs=("Input", "Offset", "Mask", "Filter"),
            outputs=("Output",), attrs=dict(_ATTRS), infer_shape=_shape("deformable_conv"),
            kernel=_deformable_conv, grad_kernel=_deformable_conv_grad,
            grad_uses=("Input", "Offset", "Mask", "Filter"))
register_op("deformable_conv_v1", inputs=("Input", "Offset", "Filter"), outputs=("Output",),
            attrs=dict(_ATTRS), infer_shape=_shape("deformable_conv_v1"),
            kernel=_deformable_conv, grad_kernel=_deformable_conv_grad,
            grad_uses=("Input", "Offset", "Filter"))
