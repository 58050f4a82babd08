"""``var_conv_2d`` (Fluid 1.6): 2-D convolution of variable-sized images held in LoD.

Sample ``b`` of ``X`` (``[sum C*H_b*W_b, 1]``, one LoD level) is a ``[C, H_b, W_b]`` image
whose height is the length of sequence ``b`` of ``ROW``'s LoD and whose width is that of
``COLUMN``'s (only their LoDs are read). The kernel ``KernelH x KernelW`` is centred with
``KernelH // 2`` rows above and ``KernelW // 2`` columns left of each output position
(zeros outside), output positions every ``StrideH`` / ``StrideW`` from 0, so the output is
``[OutputChannel, (H_b - 1) // StrideH + 1, (W_b - 1) // StrideW + 1]`` per sample (empty
for an empty image). ``Out`` holds the samples flattened one after the other in one column
with a LoD per sample; ``Col`` the unfolded patches ``[C*KernelH*KernelW, positions]`` per
sample, flattened the same way. ``W`` is ``[OutputChannel, C*KernelH*KernelW]``. Gradients
reach ``X`` (the patches folded back) and ``W``.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from ..lod import attach_lod, require_lod
from .registry import Meta, register_op

__all__: list[str] = []


def _shape(ins: dict, attrs: dict) -> dict:
    x, w = ins["X"], ins["W"]
    c, oc = attrs["InputChannel"], attrs["OutputChannel"]
    k = c * attrs["KernelH"] * attrs["KernelW"]
    if min(attrs["KernelH"], attrs["KernelW"], attrs["StrideH"], attrs["StrideW"], c, oc) < 1:
        raise ValueError(f"var_conv_2d: channels, kernel and stride must be positive, got "
                         f"InputChannel={c}, OutputChannel={oc}, kernel "
                         f"{attrs['KernelH']}x{attrs['KernelW']}, stride "
                         f"{attrs['StrideH']}x{attrs['StrideW']}")
    if tuple(w.shape) != (oc, k):
        raise ValueError(f"var_conv_2d: W must be [OutputChannel, InputChannel*KernelH*KernelW]"
                         f" = [{oc}, {k}], got {list(w.shape)}")
    return {"Out": Meta((-1, 1), x.dtype), "Col": Meta((-1, 1), x.dtype)}


def _samples(ins: dict, attrs: dict) -> list[tuple[int, int, int, int, int]]:
    """(x offset, height, width, output rows, output columns) per sample."""
    xo = require_lod("var_conv_2d", "X", ins["X"])
    ro = require_lod("var_conv_2d", "ROW", ins["ROW"])
    co = require_lod("var_conv_2d", "COLUMN", ins["COLUMN"])
    if not len(xo) == len(ro) == len(co):
        raise ValueError(f"var_conv_2d: X, ROW and COLUMN must hold as many sequences, got "
                         f"{len(xo) - 1}, {len(ro) - 1} and {len(co) - 1}")
    c, out = attrs["InputChannel"], []
    for b in range(len(xo) - 1):
        h, w = ro[b + 1] - ro[b], co[b + 1] - co[b]
        if xo[b + 1] - xo[b] != c * h * w:
            raise ValueError(f"var_conv_2d: sample {b} of X has {xo[b + 1] - xo[b]} values; "
                             f"InputChannel x ROW length x COLUMN length = {c}x{h}x{w} "
                             f"= {c * h * w} expected")
        oh = (h - 1) // attrs["StrideH"] + 1 if h else 0
        ow = (w - 1) // attrs["StrideW"] + 1 if w else 0
        out.append((xo[b], h, w, oh, ow))
    return out


def _pads(attrs: dict) -> tuple[int, int, int, int]:
    kh, kw = attrs["KernelH"], attrs["KernelW"]
    return kw // 2, kw - 1 - kw // 2, kh // 2, kh - 1 - kh // 2  # left, right, top, bottom


def _unfold(img: torch.Tensor, attrs: dict) -> torch.Tensor:
    padded = F.pad(img.unsqueeze(0), _pads(attrs))
    return F.unfold(padded, (attrs["KernelH"], attrs["KernelW"]),
                    stride=(attrs["StrideH"], attrs["StrideW"]))[0]  # [C*kh*kw, positions]


def _var_conv(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, w = ins["X"].reshape(-1), ins["W"]
    c = attrs["InputChannel"]
    outs, cols, out_off, col_off = [], [], [0], [0]
    for start, h, wd, oh, ow in _samples(ins, attrs):
        if oh * ow:
            col = _unfold(x[start:start + c * h * wd].reshape(c, h, wd), attrs)
            outs.append((w @ col).reshape(-1))
            cols.append(col.reshape(-1))
        out_off.append(out_off[-1] + w.shape[0] * oh * ow)
        col_off.append(col_off[-1] + w.shape[1] * oh * ow)
    empty = x.new_zeros((0,))
    out = torch.cat(outs) if outs else empty
    col = torch.cat(cols) if cols else empty
    return {"Out": attach_lod(out.reshape(-1, 1), [out_off]),
            "Col": attach_lod(col.reshape(-1, 1), [col_off])}


def _var_conv_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, w, dout = ins["X"], ins["W"], ins["Out@GRAD"].reshape(-1)
    flat = x.reshape(-1)
    c, kh, kw = attrs["InputChannel"], attrs["KernelH"], attrs["KernelW"]
    left, right, top, bottom = _pads(attrs)
    dx, dw = torch.zeros_like(flat), torch.zeros_like(w)
    at = 0
    for start, h, wd, oh, ow in _samples(ins, attrs):
        if not oh * ow:
            continue
        g = dout[at:at + w.shape[0] * oh * ow].reshape(w.shape[0], oh * ow)
        at += w.shape[0] * oh * ow
        col = _unfold(flat[start:start + c * h * wd].reshape(c, h, wd), attrs)
        dw += g @ col.t()
        folded = F.fold((w.t() @ g).unsqueeze(0), (h + top + bottom, wd + left + right),
                        (kh, kw), stride=(attrs["StrideH"], attrs["StrideW"]))[0]
        dx[start:start + c * h * wd] = folded[:, top:top + h, left:left + wd].reshape(-1)
    return {"X@GRAD": dx.reshape(x.shape), "W@GRAD": dw}


register_op("var_conv_2d", inputs=("X", "ROW", "COLUMN", "W"), outputs=("Out", "Col"),
            attrs={"InputChannel": 1, "OutputChannel": 1, "StrideH": 1, "StrideW": 1,
                   "KernelH": 1, "KernelW": 1},
            infer_shape=_shape, kernel=_var_conv, grad_kernel=_var_conv_grad,
            grad_uses=("X", "ROW", "COLUMN", "W"), no_grad_inputs=("ROW", "COLUMN"),
            no_compile="reads the LoDs of X, ROW and COLUMN on the host to cut the images")
