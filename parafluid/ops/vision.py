"""Image-shaped ops: resizing (bilinear_interp, nearest_interp), padding (pad, pad2d,
pad_constant_like), cropping (crop, crop_tensor), the channel/space rearrangements
(pixel_shuffle, space_to_depth, shuffle_channel) and unfold.

Every gradient is an explicit kernel: a transposed interpolation matrix, a slice of the
padded gradient, or the inverse rearrangement.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F

from .attr_inputs import given, int_list, ints_of, list_meta
from .registry import Meta, register_op

__all__ = ["interp_matrix"]


def _check_rank(op: str, slot: str, meta: Meta, rank: int) -> None:
    if len(meta.shape) != rank:
        raise ValueError(f"{op}: input {slot} must be {rank}-D, got shape {list(meta.shape)}")


# ----------------------------------------------------------------------------- interpolation


def interp_matrix(in_size: int, out_size: int, method: str, align_corners: bool,
                  align_mode: int, dtype: torch.dtype, device: Any) -> torch.Tensor:
    """``[out_size, in_size]`` weights of Fluid's 1-D interpolation along one axis.

    Resizing is separable, so ``out = A_h @ x @ A_w^T`` per channel and the gradient is
    ``A_h^T @ dout @ A_w``. Source positions follow Fluid's interpolate kernels:
    ``align_corners`` maps corner to corner (ratio ``(in-1)/(out-1)``); otherwise the ratio
    is ``in/out`` and bilinear with ``align_mode=0`` samples at half-pixel centres
    (``ratio*(k+0.5)-0.5``, clamped at 0) while ``align_mode=1`` samples at ``ratio*k``.
    Nearest takes ``round(ratio*k)`` with ``align_corners`` and ``floor(ratio*k)`` without.
    """
    k = torch.arange(out_size, dtype=torch.float64)
    if out_size > 1:
        ratio = (in_size - 1) / (out_size - 1) if align_corners else in_size / out_size
    else:
        ratio = 0.0
    a = torch.zeros(out_size, in_size, dtype=torch.float64)
    rows = torch.arange(out_size)
    if method == "nearest":  # bilinear and trilinear are the same 1-D weights per axis
        src = torch.floor(ratio * k + 0.5) if align_corners else torch.floor(ratio * k)
        a[rows, src.long().clamp(0, in_size - 1)] = 1.0
        return a.to(dtype=dtype, device=device)
    if not align_corners and align_mode == 0:
        pos = (ratio * (k + 0.5) - 0.5).clamp(min=0.0)
    else:
        pos = ratio * k
    lo = torch.floor(pos).long().clamp(0, in_size - 1)
    hi = (lo + 1).clamp(max=in_size - 1)
    frac = pos - lo.to(torch.float64)
    a.index_put_((rows, lo), 1.0 - frac, accumulate=True)
    a.index_put_((rows, hi), frac, accumulate=True)
    return a.to(dtype=dtype, device=device)


def _interp_out_size(attrs: dict, in_sizes: Sequence[int], keys: Sequence[str],
                     scale: float | None = None) -> list[int]:
    """Fluid's rule: a scale > 0 (the Scale input's, else the attribute) gives
    ``int(in * scale)`` and wins over the ``out_d``/``out_h``/``out_w`` attributes."""
    scale = float(attrs["scale"]) if scale is None else scale
    if scale > 0:
        return [-1 if d == -1 or int(d * scale) <= 0 else int(d * scale) for d in in_sizes]
    return [int(attrs[k]) for k in keys]


def _apply_matrices(x: torch.Tensor, mats: Sequence[torch.Tensor]) -> torch.Tensor:
    """Multiply spatial dim ``i`` of ``x`` (N, C, spatial...) by ``mats[i]`` (``[out, in]``)."""
    for i, a in enumerate(mats):
        x = torch.movedim(torch.matmul(a, torch.movedim(x, 2 + i, -2)), -2, 2 + i)
    return x.contiguous()


# Fluid's interpolate ops read data_layout "NCHW" (channels first, also for 5-D inputs) or
# "NHWC" (channels last); NCDHW / NDHWC are accepted as their 5-D spellings.
_CHANNEL_LAST = {"NCHW": False, "NCDHW": False, "NHWC": True, "NDHWC": True}


def _channel_last(op: str, attrs: dict) -> bool:
    layout = str(attrs["data_layout"]).upper()
    if layout not in _CHANNEL_LAST:
        raise ValueError(f"{op}: data_layout must be 'NCHW' (channels first) or 'NHWC' "
                         f"(channels last), got {attrs['data_layout']!r}")
    return _CHANNEL_LAST[layout]


def _register_interp(op: str, method: str, nd: int) -> None:
    keys = ("out_h", "out_w") if nd == 2 else ("out_d", "out_h", "out_w")
    # as Fluid, the interp_method attribute picks the method (bilinear_interp with
    # interp_method='nearest' resizes by nearest neighbour)
    methods = ("bilinear", "nearest") if nd == 2 else ("trilinear",)

    def check_method(attrs: dict) -> str:
        if attrs["interp_method"] not in methods:
            raise ValueError(f"{op}: interp_method must be one of {list(methods)} for a "
                             f"{nd + 2}-D input, got {attrs['interp_method']!r}")
        return attrs["interp_method"]

    def infer(ins: dict, attrs: dict) -> dict:
        x = ins["X"]
        _check_rank(op, "X", x, nd + 2)
        check_method(attrs)
        last = _channel_last(op, attrs)
        n, c = x.shape[0], x.shape[-1] if last else x.shape[1]
        spatial = x.shape[1:-1] if last else x.shape[2:]

        def meta(sizes: Sequence[int]) -> Meta:
            return Meta((n, *sizes, c) if last else (n, c, *sizes), x.dtype)
        size_list = ins.get("SizeTensor") or []
        if size_list:  # the run-time sizes; Fluid shows the out_* attributes meanwhile
            if len(size_list) != nd:
                raise ValueError(f"{op}: SizeTensor must hold {nd} tensors (one per spatial "
                                 f"dimension), got {len(size_list)}")
            return {"Out": meta([int(attrs[k]) if int(attrs[k]) > 0 else -1 for k in keys])}
        if ins.get("OutSize") is not None or ins.get("Scale") is not None:
            return {"Out": meta([-1] * nd)}
        sizes = _interp_out_size(attrs, spatial, keys)
        no_size = float(attrs["scale"]) <= 0 and min(int(attrs[k]) for k in keys) <= 0
        if no_size or any(d == 0 or d < -1 for d in sizes):
            given = ", ".join(f"{k}={attrs[k]}" for k in keys)
            raise ValueError(f"{op}: the output size must be positive; give out_shape or a "
                             f"scale > 0 (got {given}, scale={attrs['scale']})")
        return {"Out": meta(sizes)}

    def run_sizes(x: torch.Tensor, attrs: dict, ins: dict) -> list[int]:
        """Fluid's order: SizeTensor, else OutSize, else the scale (Scale input, then the
        attribute), else the out_* attributes."""
        size_list = ins.get("SizeTensor") or []
        if size_list:
            return [int(t.reshape(-1)[0]) for t in size_list]
        if ins.get("OutSize") is not None:
            return [int(v) for v in ins["OutSize"].reshape(-1).tolist()]
        scale_t = ins.get("Scale")
        scale = None if scale_t is None else float(scale_t.reshape(-1)[0])
        return _interp_out_size(attrs, x.shape[2:], keys, scale)

    def matrices(x: torch.Tensor, attrs: dict, ins: dict) -> list[torch.Tensor]:
        sizes = run_sizes(x, attrs, ins)
        if any(d <= 0 for d in sizes):
            raise ValueError(f"{op}: the output size must be positive, got {sizes}")
        align = bool(attrs["align_corners"])
        mode = int(attrs["align_mode"])
        how = check_method(attrs)
        return [interp_matrix(x.shape[2 + i], sizes[i], how, align, mode, x.dtype,
                              x.device) for i in range(nd)]

    def kernel(ins: dict, attrs: dict, ctx: Any) -> dict:
        last = _channel_last(op, attrs)
        x = ins["X"].movedim(-1, 1) if last else ins["X"]
        if not x.is_floating_point():
            # an integer image (uint8) is interpolated in float32 and the result truncated
            # to its type, as Fluid's kernel assigns the float result to T
            xf = x.float()
            out = _apply_matrices(xf, matrices(xf, attrs, ins)).to(x.dtype)
        else:
            out = _apply_matrices(x, matrices(x, attrs, ins))
        return {"Out": out.movedim(1, -1).contiguous() if last else out}

    def grad(ins: dict, attrs: dict, ctx: Any) -> dict:
        last = _channel_last(op, attrs)
        x, dout = ins["X"], ins["Out@GRAD"]
        if last:
            x, dout = x.movedim(-1, 1), dout.movedim(-1, 1)
        mats = matrices(x, attrs, ins)
        dx = _apply_matrices(dout, [a.t() for a in mats])
        return {"X@GRAD": dx.movedim(1, -1).contiguous() if last else dx}

    register_op(op, inputs=("X", "OutSize?", "SizeTensor[]?", "Scale?"), outputs=("Out",),
                attrs={"out_d": 0, "out_h": 0, "out_w": 0, "scale": 0.0,
                       "interp_method": method, "align_corners": True, "align_mode": 1,
                       "data_layout": "NCHW"},
                infer_shape=infer, kernel=kernel, grad_kernel=grad,
                grad_uses=("X", "OutSize", "SizeTensor", "Scale"),
                no_grad_inputs=("OutSize", "SizeTensor", "Scale"))


_register_interp("bilinear_interp", "bilinear", 2)
_register_interp("nearest_interp", "nearest", 2)
_register_interp("trilinear_interp", "trilinear", 3)

# ----------------------------------------------------------------------------- pad


def _pad_pairs(op: str, paddings: Sequence[int], rank: int) -> list[int]:
    pads = [int(p) for p in paddings]
    if len(pads) != 2 * rank:
        raise ValueError(f"{op}: paddings must have 2 * rank = {2 * rank} values (before, "
                         f"after for each dim), got {pads}")
    if any(p < 0 for p in pads):
        raise ValueError(f"{op}: paddings must be >= 0, got {pads}")
    return pads


def _torch_pad(pads: Sequence[int]) -> list[int]:
    """Fluid's (before, after) per dim from the first dim on -> torch's from the last dim."""
    out: list[int] = []
    for i in range(len(pads) // 2 - 1, -1, -1):
        out += [pads[2 * i], pads[2 * i + 1]]
    return out


def _unpad(g: torch.Tensor, pads: Sequence[int]) -> torch.Tensor:
    index = tuple(slice(pads[2 * i], g.shape[i] - pads[2 * i + 1]) for i in range(g.dim()))
    return g[index].contiguous()


def _pad_shape(ins: dict, attrs: dict) -> dict:
    x = ins["X"]
    pads = _pad_pairs("pad", attrs["paddings"], len(x.shape))
    shape = [d if d == -1 else d + pads[2 * i] + pads[2 * i + 1] for i, d in enumerate(x.shape)]
    return {"Out": Meta(tuple(shape), x.dtype)}


register_op("pad", inputs=("X",), outputs=("Out",), attrs={"paddings": [], "pad_value": 0.0},
            infer_shape=_pad_shape,
            kernel=lambda ins, attrs, ctx: {"Out": F.pad(
                ins["X"], _torch_pad(attrs["paddings"]), value=float(attrs["pad_value"]))},
            grad_kernel=lambda ins, attrs, ctx: {"X@GRAD": _unpad(ins["Out@GRAD"],
                                                                  attrs["paddings"])},
            grad_uses=("X",))


_PAD2D_MODES = {"constant": "constant", "reflect": "reflect", "edge": "replicate"}


def _pad2d_shape(ins: dict, attrs: dict) -> dict:
    x = ins["X"]
    _check_rank("pad2d", "X", x, 4)
    if ins.get("Paddings") is not None:  # the paddings come when it runs
        attrs = {**attrs, "paddings": [0, 0, 0, 0]}
    top, bottom, left, right = _pad2d_params(attrs)
    nchw = attrs["data_format"] == "NCHW"
    h, w = (2, 3) if nchw else (1, 2)
    shape = list(x.shape)
    if ins.get("Paddings") is not None:  # known when the program runs
        shape[h] = shape[w] = -1
        return {"Out": Meta(tuple(shape), x.dtype)}
    for axis, before, after in ((h, top, bottom), (w, left, right)):
        if shape[axis] == -1:
            continue
        if attrs["mode"] == "reflect" and max(before, after) >= shape[axis]:
            raise ValueError(f"pad2d: reflect paddings {attrs['paddings']} must each be "
                             f"smaller than the padded dim of X {list(x.shape)}")
        shape[axis] += before + after
    return {"Out": Meta(tuple(shape), x.dtype)}


def _pad2d_params(attrs: dict) -> list[int]:
    pads = [int(p) for p in attrs["paddings"]]
    if len(pads) != 4 or any(p < 0 for p in pads):
        raise ValueError(f"pad2d: paddings must be 4 values >= 0 (top, bottom, left, right), "
                         f"got {pads}")
    if attrs["mode"] not in _PAD2D_MODES:
        raise ValueError(f"pad2d: mode must be one of {sorted(_PAD2D_MODES)}, "
                         f"got {attrs['mode']!r}")
    if attrs["data_format"] not in ("NCHW", "NHWC"):
        raise ValueError(f"pad2d: data_format must be 'NCHW' or 'NHWC', "
                         f"got {attrs['data_format']!r}")
    return pads


def _nchw(x: torch.Tensor, attrs: dict) -> torch.Tensor:
    return x if attrs["data_format"] == "NCHW" else x.permute(0, 3, 1, 2)


def _back(x: torch.Tensor, attrs: dict) -> torch.Tensor:
    return x if attrs["data_format"] == "NCHW" else x.permute(0, 2, 3, 1).contiguous()


def _with_paddings(ins: dict, attrs: dict) -> dict:
    """The attributes with ``paddings`` from the Paddings input, when it is given."""
    if ins.get("Paddings") is None:
        return attrs
    return {**attrs, "paddings": ints_of("pad2d", "Paddings", ins["Paddings"])}


def _pad2d(ins: dict, attrs: dict, ctx: Any) -> dict:
    attrs = _with_paddings(ins, attrs)
    top, bottom, left, right = _pad2d_params(attrs)
    mode = _PAD2D_MODES[attrs["mode"]]
    x = _nchw(ins["X"], attrs)
    value = float(attrs["pad_value"]) if mode == "constant" else None
    out = F.pad(x, [left, right, top, bottom], mode=mode, value=value)
    return {"Out": _back(out, attrs)}


def _pad2d_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    attrs = _with_paddings(ins, attrs)
    top, bottom, left, right = _pad2d_params(attrs)
    x, dout = _nchw(ins["X"], attrs), _nchw(ins["Out@GRAD"], attrs)
    pads = [left, right, top, bottom]
    if attrs["mode"] == "constant":
        dx = dout[:, :, top:dout.shape[2] - bottom, left:dout.shape[3] - right]
    elif attrs["mode"] == "reflect":
        dx = torch.ops.aten.reflection_pad2d_backward(dout.contiguous(), x, pads)
    else:
        dx = torch.ops.aten.replication_pad2d_backward(dout.contiguous(), x, pads)
    return {"X@GRAD": _back(dx.contiguous(), attrs)}


register_op("pad2d", inputs=("X", "Paddings?"), outputs=("Out",),
            attrs={"paddings": [0, 0, 0, 0], "mode": "constant", "pad_value": 0.0,
                   "data_format": "NCHW"},
            infer_shape=_pad2d_shape, kernel=_pad2d, grad_kernel=_pad2d_grad,
            grad_uses=("X", "Paddings"), no_grad_inputs=("Paddings",))


def _pad_like_shape(ins: dict, attrs: dict) -> dict:
    x, y = ins["X"], ins["Y"]
    if len(x.shape) != len(y.shape):
        raise ValueError(f"pad_constant_like: X {list(x.shape)} and Y {list(y.shape)} must have "
                         "the same rank")
    for a, b in zip(x.shape, y.shape):
        if a != -1 and b != -1 and b > a:
            raise ValueError(f"pad_constant_like: Y {list(y.shape)} must not be larger than "
                             f"X {list(x.shape)} in any dim")
    return {"Out": Meta(x.shape, y.dtype)}


def _pad_like(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, y = ins["X"], ins["Y"]
    pads = [v for i in range(x.dim()) for v in (0, x.shape[i] - y.shape[i])]
    return {"Out": F.pad(y, _torch_pad(pads), value=float(attrs["pad_value"]))}


def _pad_like_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    y, dout = ins["Y"], ins["Out@GRAD"]
    return {"Y@GRAD": dout[tuple(slice(0, d) for d in y.shape)].contiguous()}


register_op("pad_constant_like", inputs=("X", "Y"), outputs=("Out",),
            attrs={"pad_value": 0.0}, infer_shape=_pad_like_shape, kernel=_pad_like,
            grad_kernel=_pad_like_grad, grad_uses=("Y",), no_grad_inputs=("X",))

# ----------------------------------------------------------------------------- crop


def _crop_box(op_shape: Sequence[int], x_shape: Sequence[int], offsets: Sequence[int]
              ) -> tuple[list[int], list[int]]:
    shape, offsets = list(op_shape), list(offsets) or [0] * len(x_shape)
    if len(shape) != len(x_shape) or len(offsets) != len(x_shape):
        raise ValueError(f"crop: shape {shape} and offsets {offsets} must have one value per "
                         f"dim of X {list(x_shape)}")
    shape = [x_shape[i] - offsets[i] if s == -1 else s for i, s in enumerate(shape)]
    for i, (s, o, d) in enumerate(zip(shape, offsets, x_shape)):
        if d != -1 and (o < 0 or s < 0 or o + s > d):
            raise ValueError(f"crop: dim {i}: offset {o} + size {s} exceeds X's {d} "
                             f"(X {list(x_shape)}, shape {shape}, offsets {offsets})")
    return shape, offsets


def _crop_args(ins: dict, attrs: dict) -> tuple[list[int], list[int]]:
    x = ins["X"]
    shape = list(ins["Y"].shape) if ins.get("Y") is not None else list(attrs["shape"])
    offsets = ([int(v) for v in ins["Offsets"].reshape(-1).tolist()]
               if ins.get("Offsets") is not None else list(attrs["offsets"]))
    return _crop_box(shape, list(x.shape), offsets)


def _crop_shape(ins: dict, attrs: dict) -> dict:
    x = ins["X"]
    shape = list(ins["Y"].shape) if ins.get("Y") is not None else list(attrs["shape"])
    if ins.get("Offsets") is not None:
        return {"Out": Meta(tuple(shape), x.dtype)}
    shape, _ = _crop_box(shape, x.shape, attrs["offsets"])
    return {"Out": Meta(tuple(shape), x.dtype)}


def _crop(ins: dict, attrs: dict, ctx: Any) -> dict:
    shape, offsets = _crop_args(ins, attrs)
    box = tuple(slice(o, o + s) for o, s in zip(offsets, shape))
    return {"Out": ins["X"][box].contiguous()}


def _crop_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, dout = ins["X"], ins["Out@GRAD"]
    shape, offsets = _crop_args(ins, attrs)
    dx = torch.zeros_like(x)
    dx[tuple(slice(o, o + s) for o, s in zip(offsets, shape))] = dout
    return {"X@GRAD": dx}


register_op("crop", inputs=("X", "Y?", "Offsets?"), outputs=("Out",),
            attrs={"shape": [], "offsets": []}, infer_shape=_crop_shape, kernel=_crop,
            grad_kernel=_crop_grad, grad_uses=("X", "Y", "Offsets"),
            no_grad_inputs=("Y", "Offsets"))

# ----------------------------------------------------------------------------- rearrangements


def _pixel_shuffle_shape(ins: dict, attrs: dict) -> dict:
    x, r = ins["X"], int(attrs["upscale_factor"])
    _check_rank("pixel_shuffle", "X", x, 4)
    n, c, h, w = x.shape
    if r <= 0 or (c != -1 and c % (r * r)):
        raise ValueError(f"pixel_shuffle: the {c} channels of X must be divisible by "
                         f"upscale_factor**2 = {r * r}")
    return {"Out": Meta((n, -1 if c == -1 else c // (r * r), -1 if h == -1 else h * r,
                         -1 if w == -1 else w * r), x.dtype)}


def _pixel_shuffle_grad_shape(ins: dict, attrs: dict) -> dict:
    n, c, h, w = ins["Out@GRAD"].shape
    r = int(attrs["upscale_factor"])
    unknown_or = lambda d, v: -1 if d == -1 else v  # noqa: E731
    return {"X@GRAD": Meta((n, unknown_or(c, c * r * r), unknown_or(h, h // r),
                            unknown_or(w, w // r)), ins["Out@GRAD"].dtype)}


register_op("pixel_shuffle", inputs=("X",), outputs=("Out",), attrs={"upscale_factor": 1},
            infer_shape=_pixel_shuffle_shape,
            kernel=lambda ins, attrs, ctx: {"Out": F.pixel_shuffle(
                ins["X"], int(attrs["upscale_factor"]))},
            grad_kernel=lambda ins, attrs, ctx: {"X@GRAD": F.pixel_unshuffle(
                ins["Out@GRAD"], int(attrs["upscale_factor"]))},
            grad_uses=(), grad_infer_shape=_pixel_shuffle_grad_shape)


def _space_to_depth_shape(ins: dict, attrs: dict) -> dict:
    x, b = ins["X"], int(attrs["blocksize"])
    _check_rank("space_to_depth", "X", x, 4)
    n, c, h, w = x.shape
    for name, d, div in (("height", h, b), ("width", w, b), ("channels", c, b * b)):
        if b <= 0 or (d != -1 and d % div):
            raise ValueError(f"space_to_depth: the {name} of X {list(x.shape)} must be "
                             f"divisible by {div} (blocksize={b})")
    return {"Out": Meta((n, -1 if c == -1 else c * b * b, -1 if h == -1 else h // b,
                         -1 if w == -1 else w // b), x.dtype)}


def _space_to_depth(ins: dict, attrs: dict, ctx: Any) -> dict:
    """Fluid's (darknet "reorg") order: input channel ``k = (oh * b + ow) * C/b^2 + c2`` at
    ``(j, i)`` lands at ``(c2, j * b + oh, i * b + ow)`` of a ``[C/b^2, H*b, W*b]`` grid,
    which is then read in memory order as ``[C*b^2, H/b, W/b]``."""
    x, b = ins["X"], int(attrs["blocksize"])
    n, c, h, w = x.shape
    grid = x.reshape(n, b, b, c // (b * b), h, w).permute(0, 3, 4, 1, 5, 2)
    return {"Out": grid.reshape(n, c * b * b, h // b, w // b)}


def _space_to_depth_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, dout, b = ins["X"], ins["Out@GRAD"], int(attrs["blocksize"])
    n, c, h, w = x.shape
    grid = dout.reshape(n, c // (b * b), h, b, w, b).permute(0, 3, 5, 1, 2, 4)
    return {"X@GRAD": grid.reshape(n, c, h, w)}


register_op("space_to_depth", inputs=("X",), outputs=("Out",), attrs={"blocksize": 2},
            infer_shape=_space_to_depth_shape, kernel=_space_to_depth,
            grad_kernel=_space_to_depth_grad, grad_uses=("X",))


def _shuffle_channel_shape(ins: dict, attrs: dict) -> dict:
    x, g = ins["X"], int(attrs["group"])
    _check_rank("shuffle_channel", "X", x, 4)
    if g <= 0 or (x.shape[1] != -1 and x.shape[1] % g):
        raise ValueError(f"shuffle_channel: the {x.shape[1]} channels of X must be divisible "
                         f"by group={g}")
    return {"Out": x}


def _shuffle(x: torch.Tensor, groups: int) -> torch.Tensor:
    n, c, h, w = x.shape
    return x.reshape(n, groups, c // groups, h, w).transpose(1, 2).reshape(n, c, h, w)


register_op("shuffle_channel", inputs=("X",), outputs=("Out",), attrs={"group": 1},
            infer_shape=_shuffle_channel_shape,
            kernel=lambda ins, attrs, ctx: {"Out": _shuffle(ins["X"], int(attrs["group"]))},
            grad_kernel=lambda ins, attrs, ctx: {"X@GRAD": _shuffle(
                ins["Out@GRAD"], ins["Out@GRAD"].shape[1] // int(attrs["group"]))},
            grad_uses=(), grad_infer_shape=lambda ins, attrs: {"X@GRAD": ins["Out@GRAD"]})

# ----------------------------------------------------------------------------- unfold


def _unfold_params(attrs: dict) -> tuple[list[int], list[int], list[int], list[int]]:
    ks, st, dl = (list(attrs[k]) for k in ("kernel_sizes", "strides", "dilations"))
    pads = list(attrs["paddings"])  # top, left, bottom, right
    if len(ks) != 2 or len(st) != 2 or len(dl) != 2 or len(pads) != 4:
        raise ValueError(f"unfold: kernel_sizes, strides, dilations need 2 values and "
                         f"paddings 4, got {ks}, {st}, {dl}, {pads}")
    return ks, st, dl, pads


def _unfold_shape(ins: dict, attrs: dict) -> dict:
    x = ins["X"]
    _check_rank("unfold", "X", x, 4)
    (kh, kw), (sh, sw), (dh, dw), (pt, pl, pb, pr) = _unfold_params(attrs)
    sizes = []
    for size, k, s, d, before, after in ((x.shape[2], kh, sh, dh, pt, pb),
                                         (x.shape[3], kw, sw, dw, pl, pr)):
        sizes.append(-1 if size == -1 else (size + before + after - (d * (k - 1) + 1)) // s + 1)
    if any(v == 0 or v < -1 for v in sizes):
        raise ValueError(f"unfold: X {list(x.shape)} is smaller than the dilated kernel")
    blocks = -1 if -1 in sizes else sizes[0] * sizes[1]
    c = -1 if x.shape[1] == -1 else x.shape[1] * kh * kw
    return {"Y": Meta((x.shape[0], c, blocks), x.dtype)}


def _unfold(ins: dict, attrs: dict, ctx: Any) -> dict:
    ks, st, dl, (pt, pl, pb, pr) = _unfold_params(attrs)
    return {"Y": F.unfold(F.pad(ins["X"], [pl, pr, pt, pb]), ks, dilation=dl, stride=st)}


def _unfold_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, dy = ins["X"], ins["Y@GRAD"]
    ks, st, dl, (pt, pl, pb, pr) = _unfold_params(attrs)
    h, w = x.shape[2], x.shape[3]
    dx = F.fold(dy, (h + pt + pb, w + pl + pr), ks, dilation=dl, stride=st)
    return {"X@GRAD": dx[:, :, pt:pt + h, pl:pl + w].contiguous()}


register_op("unfold", inputs=("X",), outputs=("Y",),
            attrs={"kernel_sizes": [1, 1], "strides": [1, 1], "paddings": [0, 0, 0, 0],
                   "dilations": [1, 1]},
            infer_shape=_unfold_shape, kernel=_unfold, grad_kernel=_unfold_grad,
            grad_uses=("X",))


# ----------------------------------------------------------------------------- crop_tensor


def _crop_tensor_args(ins: dict, attrs: dict, x_shape: list[int]) -> tuple[list[int], list[int]]:
    """Fluid 1.6's order: the ``ShapeTensor`` / ``OffsetsTensor`` lists, else the
    ``Shape`` / ``Offsets`` tensors, else the attributes."""
    shape = int_list("crop_tensor", ins, attrs, "shape", "Shape", "ShapeTensor")
    offsets = int_list("crop_tensor", ins, attrs, "offsets", "Offsets", "OffsetsTensor")
    return _crop_box(shape, x_shape, offsets)


def _crop_tensor_shape(ins: dict, attrs: dict) -> dict:
    x = ins["X"]
    if ins.get("ShapeTensor"):
        shape = list_meta(ins, attrs, "shape", "Shape", "ShapeTensor")
        return {"Out": Meta(tuple(shape), x.dtype)}
    if ins.get("Shape") is not None:
        return {"Out": Meta((-1,) * len(x.shape), x.dtype)}
    if given(ins, "Offsets", "OffsetsTensor"):
        shape = [-1 if s == -1 else s for s in attrs["shape"]]
        return {"Out": Meta(tuple(shape), x.dtype)}
    shape, _ = _crop_box(list(attrs["shape"]), list(x.shape), list(attrs["offsets"]))
    return {"Out": Meta(tuple(shape), x.dtype)}


def _crop_tensor_box(ins: dict, attrs: dict) -> tuple[slice, ...]:
    x = ins["X"]
    shape, offsets = _crop_tensor_args(ins, attrs, list(x.shape))
    return tuple(slice(o, o + s) for o, s in zip(offsets, shape))


def _crop_tensor_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    dx = torch.zeros_like(ins["X"])
    dx[_crop_tensor_box(ins, attrs)] = ins["Out@GRAD"]
    return {"X@GRAD": dx}


register_op("crop_tensor",
            inputs=("X", "Shape?", "Offsets?", "ShapeTensor[]?", "OffsetsTensor[]?"),
            outputs=("Out",), attrs={"shape": [], "offsets": []},
            infer_shape=_crop_tensor_shape,
            kernel=lambda ins, attrs, ctx: {"Out": ins["X"][_crop_tensor_box(
                ins, attrs)].contiguous()},
            grad_kernel=_crop_tensor_grad,
            no_grad_inputs=("Shape", "Offsets", "ShapeTensor", "OffsetsTensor"),
            grad_infer_shape=lambda ins, attrs: {"X@GRAD": ins["X"]})
