"""Neural-network ops: conv2d, pool2d, dropout and lookup_table (embeddings).

Forward kernels use ``torch.nn.functional``; gradients are explicit kernels (aten backward
kernels or the math written out), never torch autograd. Normalization ops (batch_norm,
layer_norm) live in ``norm.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F

from ..scope import SelectedRows
from .registry import Meta, register_op

__all__ = ["pair", "conv_out_size", "pool_out_size"]


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


def _check_rank(op: str, slot: str, meta: Meta, rank: int) -> None:
    if len(meta.shape) != rank:
        raise ValueError(f"{op}: input {slot} must be {rank}-D, got shape {list(meta.shape)}")


# ----------------------------------------------------------------------------- conv2d


def _conv_params(attrs: dict) -> tuple[list[int], list[int], list[int], int]:
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
    strides, pads, dilations, groups = _conv_params(attrs)
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
    strides, pads, dilations, groups = _conv_params(attrs)
    return {"Output": F.conv2d(ins["Input"], ins["Filter"], None, strides, pads, dilations,
                               groups)}


def _conv2d_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, w, dy = ins["Input"], ins["Filter"], ins["Output@GRAD"]
    strides, pads, dilations, groups = _conv_params(attrs)
    mask = ["Input" in ctx.need, "Filter" in ctx.need, False]
    dx, dw, _ = torch.ops.aten.convolution_backward(dy, x, w, None, strides, pads, dilations,
                                                    False, [0, 0], groups, mask)
    out = {}
    if mask[0]:
        out["Input@GRAD"] = dx
    if mask[1]:
        out["Filter@GRAD"] = dw
    return out


register_op("conv2d", inputs=("Input", "Filter"), outputs=("Output",),
            attrs={"strides": [1, 1], "paddings": [0, 0], "dilations": [1, 1], "groups": 1,
                   "use_cudnn": True, "data_format": "NCHW"},
            infer_shape=_conv2d_shape, kernel=_conv2d, grad_kernel=_conv2d_grad,
            grad_uses=("Input", "Filter"), fresh_output=True)

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

# ----------------------------------------------------------------------------- dropout

_DROPOUT_IMPLS = ("downgrade_in_infer", "upscale_in_train")


def _dropout_shape(ins: dict, attrs: dict) -> dict:
    x = ins["X"]
    p = attrs["dropout_prob"]
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout: dropout_prob must be in [0, 1], got {p}")
    if attrs["dropout_implementation"] not in _DROPOUT_IMPLS:
        raise ValueError(f"dropout: dropout_implementation must be one of {_DROPOUT_IMPLS}, "
                         f"got {attrs['dropout_implementation']!r}")
    return {"Out": x, "Mask": Meta(x.shape, "uint8")}


def _dropout(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, p = ins["X"], float(attrs["dropout_prob"])
    upscale = attrs["dropout_implementation"] == "upscale_in_train"
    if attrs["is_test"]:
        # Nothing is dropped; an expanded scalar stands for the all-ones mask without memory.
        mask = torch.ones((), dtype=torch.uint8, device=x.device).expand(x.shape)
        return {"Out": x if upscale else x * (1.0 - p), "Mask": mask}
    gen = None
    if attrs["fix_seed"]:
        # Fluid reseeds its engine on every run: a fixed seed gives the same mask each time.
        gen = ctx.generator(attrs["seed"]) or torch.Generator(device=x.device)
        gen.manual_seed(int(attrs["seed"]))
    mask = (torch.rand(x.shape, generator=gen, device=x.device) >= p).to(torch.uint8)
    if upscale:
        out = x * mask / (1.0 - p) if p < 1.0 else torch.zeros_like(x)
    else:
        out = x * mask
    return {"Out": out, "Mask": mask}


def _dropout_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    dout, mask = ins["Out@GRAD"], ins["Mask"]
    p = float(attrs["dropout_prob"])
    upscale = attrs["dropout_implementation"] == "upscale_in_train"
    if attrs["is_test"]:
        return {"X@GRAD": dout if upscale else dout * (1.0 - p)}
    if upscale:
        return {"X@GRAD": dout * mask / (1.0 - p) if p < 1.0 else torch.zeros_like(dout)}
    return {"X@GRAD": dout * mask}


register_op("dropout", inputs=("X",), outputs=("Out", "Mask"),
            attrs={"dropout_prob": 0.5, "is_test": False, "fix_seed": False, "seed": 0,
                   "dropout_implementation": "downgrade_in_infer"},
            infer_shape=_dropout_shape, kernel=_dropout, grad_kernel=_dropout_grad,
            grad_uses=("Mask",),
            grad_infer_shape=lambda ins, attrs: {"X@GRAD": ins["Out@GRAD"]},
            share_lod=("X", "Out"))

# ----------------------------------------------------------------------------- lookup_table


def _ids_out_shape(ids: Sequence[int]) -> tuple[int, ...]:
    """Fluid's rule: a trailing dim of 1 on Ids is the id slot itself and is dropped."""
    ids = tuple(ids)
    return ids[:-1] if len(ids) > 1 and ids[-1] == 1 else ids


def _lookup_table_shape(ins: dict, attrs: dict) -> dict:
    w, ids = ins["W"], ins["Ids"]
    _check_rank("lookup_table", "W", w, 2)
    if ids.dtype not in ("int64", "int32"):
        raise TypeError(f"lookup_table: Ids must be int64 (or int32), got {ids.dtype}")
    return {"Out": Meta((*_ids_out_shape(ids.shape), w.shape[1]), w.dtype)}


def _flat_ids(ids: torch.Tensor, height: int) -> torch.Tensor:
    flat = ids.reshape(-1).long()
    if flat.numel() and (int(flat.min()) < 0 or int(flat.max()) >= height):
        bad = flat[(flat < 0) | (flat >= height)][0].item()
        raise ValueError(f"lookup_table: id {bad} is out of range for a table of {height} rows")
    return flat


def _lookup_table(ins: dict, attrs: dict, ctx: Any) -> dict:
    w, ids = ins["W"], ins["Ids"]
    flat = _flat_ids(ids, w.shape[0])
    out = w.index_select(0, flat)
    pad = attrs["padding_idx"]
    if pad != -1:
        out = out.masked_fill((flat == pad).unsqueeze(1), 0.0)
    return {"Out": out.reshape(*_ids_out_shape(ids.shape), w.shape[1])}


def _lookup_table_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    w, ids, dout = ins["W"], ins["Ids"], ins["Out@GRAD"]
    flat = ids.reshape(-1).long()
    rows = dout.reshape(-1, w.shape[1])
    pad = attrs["padding_idx"]
    if pad != -1:
        rows = rows.masked_fill((flat == pad).unsqueeze(1), 0.0)
    if attrs["is_sparse"]:
        return {"W@GRAD": SelectedRows(flat, rows, w.shape[0])}
    return {"W@GRAD": torch.zeros_like(w).index_add_(0, flat, rows)}


def _lookup_table_grad_shape(ins: dict, attrs: dict) -> dict:
    w = ins["W"]
    kind = "selected_rows" if attrs["is_sparse"] else "lod_tensor"
    return {"W@GRAD": Meta(w.shape, w.dtype, kind)}


register_op("lookup_table", inputs=("W", "Ids"), outputs=("Out",),
            attrs={"is_sparse": False, "is_distributed": False, "padding_idx": -1,
                   "remote_prefetch": False},
            infer_shape=_lookup_table_shape, kernel=_lookup_table,
            grad_kernel=_lookup_table_grad, grad_uses=("W", "Ids"),
            no_grad_inputs=("Ids",), grad_infer_shape=_lookup_table_grad_shape,
            share_lod=("Ids", "Out"))


# lookup_table_v2 (fluid.embedding): the same lookup, keeping every dim of Ids.


def _lookup_v2_shape(ins: dict, attrs: dict) -> dict:
    w, ids = ins["W"], ins["Ids"]
    _check_rank("lookup_table_v2", "W", w, 2)
    if ids.dtype not in ("int64", "int32"):
        raise TypeError(f"lookup_table_v2: Ids must be int64 (or int32), got {ids.dtype}")
    return {"Out": Meta((*ids.shape, w.shape[1]), w.dtype)}


def _lookup_v2(ins: dict, attrs: dict, ctx: Any) -> dict:
    out = _lookup_table(ins, attrs, ctx)["Out"]
    return {"Out": out.reshape(*ins["Ids"].shape, ins["W"].shape[1])}


register_op("lookup_table_v2", inputs=("W", "Ids"), outputs=("Out",),
            attrs={"is_sparse": False, "is_distributed": False, "padding_idx": -1,
                   "remote_prefetch": False},
            infer_shape=_lookup_v2_shape, kernel=_lookup_v2,
            grad_kernel=_lookup_table_grad, grad_uses=("W", "Ids"),
            no_grad_inputs=("Ids",), grad_infer_shape=_lookup_table_grad_shape,
            share_lod=("Ids", "Out"))
