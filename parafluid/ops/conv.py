"""Convolutions: conv2d, conv3d, conv2d_transpose, conv3d_transpose, depthwise_conv2d,
depthwise_conv2d_transpose; channel-first or channel-last (``data_format``), Fluid's padding
forms (``nd`` or ``2 * nd`` paddings, ``padding_algorithm``; see ``window.py``).

Forward kernels are ``torch.nn.functional`` calls; gradients call aten's backward kernel
(``convolution_backward``), never autograd. Filters are ``[out, in / groups, k...]``
(``[in, out / groups, k...]`` for the transposed ones) whatever the data layout, as in Fluid.
Asymmetric paddings pad the input explicitly (a transposed conv crops its output instead).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from .registry import Meta, register_op
from .window import (
    Pads,
    channels_of,
    check_rank,
    crop_padded,
    explicit_pads,
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

__all__ = ["pair", "conv_out_size", "conv_transpose_out_size"]

_check_rank = check_rank  # the name other op families import


def conv_out_size(size: int, k: int, pad: int, stride: int, dilation: int,
                  pad_after: int | None = None) -> int:
    """Output length of a convolution along one dim (-1 stays unknown)."""
    if size == -1:
        return -1
    pad_after = pad if pad_after is None else pad_after
    return (size + pad + pad_after - (dilation * (k - 1) + 1)) // stride + 1


def conv_transpose_out_size(size: int, k: int, pad: int, stride: int, dilation: int,
                            pad_after: int | None = None) -> int:
    """Output length of a transposed convolution along one dim (-1 stays unknown)."""
    if size == -1:
        return -1
    pad_after = pad if pad_after is None else pad_after
    return (size - 1) * stride - pad - pad_after + dilation * (k - 1) + 1


def _paddings(op: str, value: Any, nd: int) -> list[int]:
    """``nd`` symmetric paddings (for ops whose kernels take no (before, after) pairs)."""
    pads = explicit_pads(op, value, nd)
    if not symmetric(pads):
        raise ValueError(f"{op}: asymmetric paddings {value} are not supported here; pad the "
                         "input explicitly (fluid.layers.pad)")
    return [p for p, _ in pads]


class _Geometry:
    """One conv op's strides, (before, after) paddings, dilations, groups and the extra
    trailing output rows of a transposed conv, for a given input and filter shape."""

    def __init__(self, op: str, nd: int, transposed: bool, attrs: dict,
                 x_shape: Any, w_shape: Any) -> None:
        self.last = is_channel_last(op, attrs)
        self.strides = pair(attrs["strides"], "strides", op, nd)
        dilations = pair(attrs["dilations"], "dilations", op, nd)
        k = [int(d) for d in w_shape[2:]]
        spatial = spatial_of(x_shape, self.last)
        self.pads: Pads = window_pads(op, attrs, spatial, k, self.strides)
        if str(attrs.get("padding_algorithm") or "EXPLICIT").upper() == "SAME":
            dilations = [1] * nd  # Fluid's SAME resets the dilations
        self.dilations = dilations
        self.groups = int(attrs["groups"] or 1)
        self.sizes: list[int] = []
        self.extra = [0] * nd
        for i in range(nd):
            (pb, pa), s, d = self.pads[i], self.strides[i], dilations[i]
            if not transposed:
                self.sizes.append(conv_out_size(spatial[i], k[i], pb, s, d, pa))
                continue
            base = conv_transpose_out_size(spatial[i], k[i], pb, s, d, pa)
            self.sizes.append(base)
        if transposed and attrs.get("output_size"):
            want = pair(attrs["output_size"], "output_size", op, nd)
            for i, base in enumerate(self.sizes):
                if base == -1:
                    continue
                if not base <= want[i] < base + self.strides[i]:
                    raise ValueError(
                        f"{op}: output_size {want} is not reachable: dim {i} must be in "
                        f"[{base}, {base + self.strides[i]}) for this input, filter and stride")
                self.extra[i] = want[i] - base
                self.sizes[i] = want[i]

    @property
    def sym(self) -> list[int]:
        return [p for p, _ in self.pads]


def _conv_infer(op: str, nd: int, transposed: bool, ins: dict, attrs: dict) -> dict:
    x, w = ins["Input"], ins["Filter"]
    check_rank(op, "Input", x, nd + 2)
    check_rank(op, "Filter", w, nd + 2)
    g = _Geometry(op, nd, transposed, attrs, x.shape, w.shape)
    in_c = channels_of(x.shape, g.last)
    want_c = w.shape[0] if transposed else w.shape[1] * g.groups
    if in_c != -1 and in_c != want_c:
        raise ValueError(f"{op}: Input has {in_c} channels but Filter {list(w.shape)} with "
                         f"groups={g.groups} expects {want_c}")
    if not transposed and w.shape[0] % g.groups:
        raise ValueError(f"{op}: Filter's {w.shape[0]} output channels are not divisible by "
                         f"groups={g.groups}")
    out_c = w.shape[1] * g.groups if transposed else w.shape[0]
    if any(d == 0 or d < -1 for d in g.sizes):
        raise ValueError(f"{op}: Input {list(x.shape)} is too small for Filter "
                         f"{list(w.shape)} with paddings {g.pads}, dilations {g.dilations}: "
                         f"output sizes {g.sizes}")
    return {"Output": Meta(with_layout(x.shape[0], out_c, g.sizes, g.last), x.dtype)}


def _fuse_relu(op: str, attrs: dict) -> bool:
    return op == "depthwise_conv2d" and bool(attrs.get("fuse_relu_before_depthwise_conv"))


def _conv_forward(op: str, nd: int, transposed: bool, ins: dict, attrs: dict) -> torch.Tensor:
    x, w = ins["Input"], ins["Filter"]
    g = _Geometry(op, nd, transposed, attrs, x.shape, w.shape)
    x = to_channel_first(x, g.last)
    if _fuse_relu(op, attrs):
        x = torch.relu(x)
    if not transposed:
        fn = F.conv2d if nd == 2 else F.conv3d
        if symmetric(g.pads):
            out = fn(x, w, None, g.strides, g.sym, g.dilations, g.groups)
        else:
            out = fn(pad_input(x, g.pads), w, None, g.strides, 0, g.dilations, g.groups)
        return to_channel_last(out, g.last)
    fn = F.conv_transpose2d if nd == 2 else F.conv_transpose3d
    if symmetric(g.pads) and all(e < max(s, d) for e, s, d in
                                 zip(g.extra, g.strides, g.dilations)):
        out = fn(x, w, None, g.strides, g.sym, g.extra, g.groups, g.dilations)
    else:
        # the full (unpadded) transposed output, cropped by the paddings; output_size rows
        # past its end are zeros
        full = fn(x, w, None, g.strides, 0, 0, g.groups, g.dilations)
        out = pad_input(full, [(-pb, e - pa) for (pb, pa), e in zip(g.pads, g.extra)])
    return to_channel_last(out, g.last)


def _conv_backward(op: str, nd: int, transposed: bool, ins: dict, attrs: dict,
                   ctx: Any) -> dict:
    """Input@GRAD and Filter@GRAD (those the gradient op needs) from aten's
    ``convolution_backward``."""
    x0, w, dy = ins["Input"], ins["Filter"], ins["Output@GRAD"]
    g = _Geometry(op, nd, transposed, attrs, x0.shape, w.shape)
    x, dy = to_channel_first(x0, g.last), to_channel_first(dy, g.last)
    relu = _fuse_relu(op, attrs)
    if relu:
        x = torch.relu(x)
    mask = ["Input" in ctx.need, "Filter" in ctx.need, False]
    aten = torch.ops.aten
    if not transposed:
        if symmetric(g.pads):
            dx, dw, _ = aten.convolution_backward(dy, x, w, None, g.strides, g.sym,
                                                  g.dilations, False, [0] * nd, g.groups, mask)
        else:
            dx, dw, _ = aten.convolution_backward(dy, pad_input(x, g.pads), w, None, g.strides,
                                                  [0] * nd, g.dilations, False, [0] * nd,
                                                  g.groups, mask)
            dx = crop_padded(dx, g.pads) if dx is not None else None
    elif symmetric(g.pads) and all(e < max(s, d) for e, s, d in
                                   zip(g.extra, g.strides, g.dilations)):
        dx, dw, _ = aten.convolution_backward(dy, x, w, None, g.strides, g.sym, g.dilations,
                                              True, g.extra, g.groups, mask)
    else:
        dy_full = pad_input(dy, [(pb, pa - e) for (pb, pa), e in zip(g.pads, g.extra)])
        dx, dw, _ = aten.convolution_backward(dy_full, x, w, None, g.strides, [0] * nd,
                                              g.dilations, True, [0] * nd, g.groups, mask)
    out = {}
    if mask[0]:
        if relu:
            dx = dx * (x > 0)
        out["Input@GRAD"] = to_channel_last(dx, g.last)
    if mask[1]:
        out["Filter@GRAD"] = dw
    return out


def _register_conv(op: str, nd: int, transposed: bool, fmt: str) -> None:
    """One registration per conv op type: N, C and ``nd`` spatial dims in either layout."""
    attrs: dict[str, Any] = {
        "strides": [1] * nd, "paddings": [0] * nd, "padding_algorithm": "EXPLICIT",
        "dilations": [1] * nd, "groups": 1, "use_cudnn": False, "use_mkldnn": False,
        "data_format": fmt, "is_test": False, "workspace_size_MB": 512}
    if transposed:
        attrs["output_size"] = []
    else:
        attrs.update({"exhaustive_search": False, "fuse_relu_before_depthwise_conv": False})
    register_op(op, inputs=("Input", "Filter"), outputs=("Output",), attrs=attrs,
                infer_shape=lambda ins, a: _conv_infer(op, nd, transposed, ins, a),
                kernel=lambda ins, a, ctx: {"Output": _conv_forward(op, nd, transposed, ins, a)},
                grad_kernel=lambda ins, a, ctx: _conv_backward(op, nd, transposed, ins, a, ctx),
                grad_uses=("Input", "Filter"), fresh_output=True)


_register_conv("conv2d", 2, False, "NCHW")
_register_conv("depthwise_conv2d", 2, False, "NCHW")
_register_conv("conv3d", 3, False, "NCDHW")
_register_conv("conv2d_transpose", 2, True, "NCHW")
_register_conv("depthwise_conv2d_transpose", 2, True, "NCHW")
_register_conv("conv3d_transpose", 3, True, "NCHW")  # Fluid's default for it, too
