"""Convolutions: conv2d, conv2d_transpose, conv3d, conv3d_transpose, and the shape helpers
the pooling ops share (``pair``, ``conv_out_size``).

Forward kernels are ``torch.nn.functional`` calls; gradients call aten's backward kernels
(``convolution_backward``), never autograd.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from .registry import Meta, register_op

__all__ = ["pair", "conv_out_size", "conv_transpose_out_size"]


def pair(value: Any, name: str, op: str, size: int = 2) -> list[int]:
    """An int or a list of ``size`` ints (Fluid accepts both for strides, paddings, ...)."""
    if isinstance(value, int):
        return [value] * size
    values = [int(v) for v in value]
    if len(values) == 1:
        return values * size
    if len(values) != size:
        raise ValueError(f"{op}: attr {name} must be an int or a list of {size} ints, "
                         f"got {list(value)}")
    return values


def conv_out_size(size: int, k: int, pad: int, stride: int, dilation: int) -> int:
    """Output length of a convolution along one dim (-1 stays unknown)."""
    if size == -1:
        return -1
    return (size + 2 * pad - (dilation * (k - 1) + 1)) // stride + 1


def _check_rank(op: str, slot: str, meta: Meta, rank: int) -> None:
    if len(meta.shape) != rank:
        raise ValueError(f"{op}: input {slot} must be {rank}-D, got shape {list(meta.shape)}")


# ----------------------------------------------------------------------------- conv2d


def _conv2d_params(attrs: dict) -> tuple[list[int], list[int], list[int], int]:
    strides = pair(attrs["strides"], "strides", "conv2d")
    dilations = pair(attrs["dilations"], "dilations", "conv2d")
    pads = [int(p) for p in ([attrs["paddings"]] if isinstance(attrs["paddings"], int)
                             else attrs["paddings"])]
    if len(pads) == 4:
        if pads[0] != pads[1] or pads[2] != pads[3]:
            raise ValueError(f"conv2d: asymmetric paddings {pads} (top, bottom, left, right) "
                             "are not supported; pad the input explicitly")
        pads = [pads[0], pads[2]]
    pads = pair(pads, "paddings", "conv2d")
    return strides, pads, dilations, int(attrs["groups"] or 1)


def _conv2d_shape(ins: dict, attrs: dict) -> dict:
    x, w = ins["Input"], ins["Filter"]
    _check_rank("conv2d", "Input", x, 4)
    _check_rank("conv2d", "Filter", w, 4)
    strides, pads, dilations, groups = _conv2d_params(attrs)
    in_c, out_c = x.shape[1], w.shape[0]
    if in_c != -1 and in_c != w.shape[1] * groups:
        raise ValueError(f"conv2d: Input has {in_c} channels but Filter {list(w.shape)} with "
                         f"groups={groups} expects {w.shape[1] * groups}")
    if out_c % groups:
        raise ValueError(f"conv2d: Filter's {out_c} output channels are not divisible by "
                         f"groups={groups}")
    hw = [conv_out_size(x.shape[2 + i], w.shape[2 + i], pads[i], strides[i], dilations[i])
          for i in range(2)]
    if any(d == 0 or d < -1 for d in hw):
        raise ValueError(f"conv2d: Input {list(x.shape)} is too small for Filter "
                         f"{list(w.shape)} with paddings {pads}, dilations {dilations}")
    return {"Output": Meta((x.shape[0], out_c, *hw), x.dtype)}


def _conv2d(ins: dict, attrs: dict, ctx: Any) -> dict:
    strides, pads, dilations, groups = _conv2d_params(attrs)
    return {"Output": F.conv2d(ins["Input"], ins["Filter"], None, strides, pads, dilations,
                               groups)}


def _conv_backward(ins: dict, ctx: Any, strides: list[int], pads: list[int],
                   dilations: list[int], groups: int, transposed: bool,
                   extra: list[int]) -> dict:
    """Input@GRAD and Filter@GRAD (those the gradient op needs) of any convolution, from
    aten's ``convolution_backward``; ``extra`` is a transposed conv's output padding."""
    x, w, dy = ins["Input"], ins["Filter"], ins["Output@GRAD"]
    mask = ["Input" in ctx.need, "Filter" in ctx.need, False]
    dx, dw, _ = torch.ops.aten.convolution_backward(dy, x, w, None, strides, pads, dilations,
                                                    transposed, extra, groups, mask)
    out = {}
    if mask[0]:
        out["Input@GRAD"] = dx
    if mask[1]:
        out["Filter@GRAD"] = dw
    return out


def _conv2d_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    return _conv_backward(ins, ctx, *_conv2d_params(attrs), False, [0, 0])


register_op("conv2d", inputs=("Input", "Filter"), outputs=("Output",),
            attrs={"strides": [1, 1], "paddings": [0, 0], "dilations": [1, 1], "groups": 1,
                   "use_cudnn": True, "data_format": "NCHW"},
            infer_shape=_conv2d_shape, kernel=_conv2d, grad_kernel=_conv2d_grad,
            grad_uses=("Input", "Filter"), fresh_output=True)


# ----------------------------------------------------------------------------- transposed, 3-D


def conv_transpose_out_size(size: int, k: int, pad: int, stride: int, dilation: int) -> int:
    """Output length of a transposed convolution along one dim (-1 stays unknown)."""
    if size == -1:
        return -1
    return (size - 1) * stride - 2 * pad + dilation * (k - 1) + 1


def _paddings(op: str, value: Any, nd: int) -> list[int]:
    """``nd`` paddings, or ``2 * nd`` (before, after per dim) when each pair is symmetric."""
    pads = [int(value)] if isinstance(value, int) else [int(p) for p in value]
    if len(pads) == 2 * nd:
        if any(pads[2 * i] != pads[2 * i + 1] for i in range(nd)):
            raise ValueError(f"{op}: asymmetric paddings {pads} are not supported; pad the "
                             "input explicitly (fluid.layers.pad)")
        pads = pads[::2]
    return pair(pads, "paddings", op, nd)


def _conv_params(op: str, attrs: dict, nd: int) -> tuple[list[int], list[int], list[int], int]:
    return (pair(attrs["strides"], "strides", op, nd), _paddings(op, attrs["paddings"], nd),
            pair(attrs["dilations"], "dilations", op, nd), int(attrs["groups"] or 1))


def _output_padding(op: str, attrs: dict, nd: int, in_sizes: list[int], k: list[int],
                    strides: list[int], pads: list[int], dilations: list[int]) -> list[int]:
    """Extra trailing output rows a transposed conv needs to reach attr ``output_size``.

    Fluid accepts any ``output_size`` in ``[inferred, inferred + stride)``; torch's
    ``output_padding`` says the same thing as an offset.
    """
    want = list(attrs.get("output_size") or [])
    if not want:
        return [0] * nd
    want = pair(want, "output_size", op, nd)
    extra = []
    for i in range(nd):
        base = conv_transpose_out_size(in_sizes[i], k[i], pads[i], strides[i], dilations[i])
        if base == -1:
            extra.append(0)
            continue
        if not base <= want[i] < base + strides[i]:
            raise ValueError(f"{op}: output_size {want} is not reachable: dim {i} must be in "
                             f"[{base}, {base + strides[i]}) for this input, filter and stride")
        extra.append(want[i] - base)
    return extra


def _register_conv(op: str, nd: int, transposed: bool) -> None:
    """One registration for conv{2,3}d(_transpose): NC + ``nd`` spatial dims."""
    rank = nd + 2

    def infer(ins: dict, attrs: dict) -> dict:
        x, w = ins["Input"], ins["Filter"]
        _check_rank(op, "Input", x, rank)
        _check_rank(op, "Filter", w, rank)
        strides, pads, dilations, groups = _conv_params(op, attrs, nd)
        in_c = x.shape[1]
        want_c = w.shape[0] if transposed else w.shape[1] * groups
        if in_c != -1 and in_c != want_c:
            raise ValueError(f"{op}: Input has {in_c} channels but Filter {list(w.shape)} with "
                             f"groups={groups} expects {want_c}")
        out_c = w.shape[1] * groups if transposed else w.shape[0]
        k = list(w.shape[2:])
        if transposed:
            extra = _output_padding(op, attrs, nd, list(x.shape[2:]), k, strides, pads,
                                    dilations)
            sizes = [conv_transpose_out_size(x.shape[2 + i], k[i], pads[i], strides[i],
                                             dilations[i]) for i in range(nd)]
            sizes = [s if s == -1 else s + e for s, e in zip(sizes, extra)]
        else:
            sizes = [conv_out_size(x.shape[2 + i], k[i], pads[i], strides[i], dilations[i])
                     for i in range(nd)]
        if any(d == 0 or d < -1 for d in sizes):
            raise ValueError(f"{op}: Input {list(x.shape)} and Filter {list(w.shape)} with "
                             f"paddings {pads}, dilations {dilations} give an empty output")
        return {"Output": Meta((x.shape[0], out_c, *sizes), x.dtype)}

    def extra_of(x: torch.Tensor, w: torch.Tensor, attrs: dict) -> list[int]:
        strides, pads, dilations, _ = _conv_params(op, attrs, nd)
        return _output_padding(op, attrs, nd, list(x.shape[2:]), list(w.shape[2:]), strides,
                               pads, dilations)

    def kernel(ins: dict, attrs: dict, ctx: Any) -> dict:
        x, w = ins["Input"], ins["Filter"]
        strides, pads, dilations, groups = _conv_params(op, attrs, nd)
        if transposed:
            fn = F.conv_transpose2d if nd == 2 else F.conv_transpose3d
            out = fn(x, w, None, strides, pads, extra_of(x, w, attrs), groups, dilations)
        else:
            fn = F.conv2d if nd == 2 else F.conv3d
            out = fn(x, w, None, strides, pads, dilations, groups)
        return {"Output": out}

    def grad(ins: dict, attrs: dict, ctx: Any) -> dict:
        extra = extra_of(ins["Input"], ins["Filter"], attrs) if transposed else [0] * nd
        return _conv_backward(ins, ctx, *_conv_params(op, attrs, nd), transposed, extra)

    attrs = {"strides": [1] * nd, "paddings": [0] * nd, "dilations": [1] * nd, "groups": 1,
             "use_cudnn": True, "data_format": "NCHW" if nd == 2 else "NCDHW"}
    if transposed:
        attrs["output_size"] = []
    register_op(op, inputs=("Input", "Filter"), outputs=("Output",), attrs=attrs,
                infer_shape=infer, kernel=kernel, grad_kernel=grad,
                grad_uses=("Input", "Filter"))


_register_conv("conv2d_transpose", 2, transposed=True)
_register_conv("conv3d", 3, transposed=False)
_register_conv("conv3d_transpose", 3, transposed=True)
