"""Spatial-transformer and video ops: affine_grid, grid_sampler, temporal_shift, and the
distillation op fsp.

``affine_grid`` and ``grid_sampler`` follow Fluid 1.6: grid coordinates run from -1 to 1
across the corner pixels' centres (torch's ``align_corners=True``), bilinear sampling, zeros
outside. Gradients call aten's backward kernels or are written out.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from .registry import Meta, register_op

__all__: list[str] = []


def _rank(op: str, slot: str, meta: Meta, rank: int) -> None:
    if len(meta.shape) != rank:
        raise ValueError(f"{op}: {slot} must be {rank}-D, got shape {list(meta.shape)}")


# ----------------------------------------------------------------------------- affine_grid


def _grid_size(ins: dict, attrs: dict, theta_rows: int) -> list[int]:
    shape = ins.get("OutputShape")
    size = [int(v) for v in shape.reshape(-1).tolist()] if shape is not None else \
        [int(v) for v in attrs["output_shape"]]
    if len(size) != 4:
        raise ValueError(f"affine_grid: the output shape must be [N, C, H, W], got {size}")
    return [theta_rows, *size[1:]]


def _affine_grid_shape(ins: dict, attrs: dict) -> dict:
    theta = ins["Theta"]
    _rank("affine_grid", "Theta", theta, 3)
    if tuple(theta.shape[1:]) != (2, 3):
        raise ValueError(f"affine_grid: Theta must be [N, 2, 3], got {list(theta.shape)}")
    if ins.get("OutputShape") is not None:
        return {"Output": Meta((theta.shape[0], -1, -1, 2), theta.dtype)}
    size = list(attrs["output_shape"])
    if len(size) != 4:
        raise ValueError(f"affine_grid: out_shape must be [N, C, H, W], got {size}")
    return {"Output": Meta((theta.shape[0], size[2], size[3], 2), theta.dtype)}


register_op("affine_grid", inputs=("Theta", "OutputShape?"), outputs=("Output",),
            attrs={"output_shape": []}, infer_shape=_affine_grid_shape,
            kernel=lambda ins, attrs, ctx: {"Output": F.affine_grid(
                ins["Theta"], _grid_size(ins, attrs, ins["Theta"].shape[0]),
                align_corners=True)},
            grad_kernel=lambda ins, attrs, ctx: {"Theta@GRAD": (
                torch.ops.aten.affine_grid_generator_backward(
                    ins["Output@GRAD"], _grid_size(ins, attrs, ins["Theta"].shape[0]), True))},
            grad_uses=("Theta", "OutputShape"), no_grad_inputs=("OutputShape",))

# ----------------------------------------------------------------------------- grid_sampler


def _grid_sampler_shape(ins: dict, attrs: dict) -> dict:
    x, grid = ins["X"], ins["Grid"]
    _rank("grid_sampler", "X", x, 4)
    _rank("grid_sampler", "Grid", grid, 4)
    if grid.shape[3] != 2:
        raise ValueError(f"grid_sampler: Grid must be [N, H, W, 2], got {list(grid.shape)}")
    return {"Output": Meta((x.shape[0], x.shape[1], grid.shape[1], grid.shape[2]), x.dtype)}


def _grid_sampler_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, grid, dout = ins["X"], ins["Grid"], ins["Output@GRAD"]
    mask = ["X" in ctx.need, "Grid" in ctx.need]
    # interpolation 0 = bilinear, padding 0 = zeros, align_corners
    dx, dgrid = torch.ops.aten.grid_sampler_2d_backward(dout.contiguous(), x, grid, 0, 0, True,
                                                        mask)
    out = {}
    if mask[0]:
        out["X@GRAD"] = dx
    if mask[1]:
        out["Grid@GRAD"] = dgrid
    return out


register_op("grid_sampler", inputs=("X", "Grid"), outputs=("Output",),
            infer_shape=_grid_sampler_shape,
            kernel=lambda ins, attrs, ctx: {"Output": F.grid_sample(
                ins["X"], ins["Grid"], mode="bilinear", padding_mode="zeros",
                align_corners=True)},
            grad_kernel=_grid_sampler_grad, grad_uses=("X", "Grid"))

# ----------------------------------------------------------------------------- temporal_shift


def _shift_channels(c: int, ratio: float) -> tuple[int, int]:
    return int(c * ratio), int(c * 2 * ratio)


def _temporal_shift_shape(ins: dict, attrs: dict) -> dict:
    x, t = ins["X"], int(attrs["seg_num"])
    _rank("temporal_shift", "X", x, 4)
    if t <= 0 or (x.shape[0] != -1 and x.shape[0] % t):
        raise ValueError(f"temporal_shift: the batch {x.shape[0]} of X must be a multiple of "
                         f"seg_num={t}")
    if not 0 < float(attrs["shift_ratio"]) <= 0.5:
        raise ValueError(f"temporal_shift: shift_ratio must be in (0, 0.5], "
                         f"got {attrs['shift_ratio']}")
    return {"Out": x}


def _shift(x: torch.Tensor, t: int, ratio: float, sign: int) -> torch.Tensor:
    """TSM's shift: channels ``[0, c1)`` take the previous segment (``sign=1``), channels
    ``[c1, c2)`` the next one, the rest stay; ``sign=-1`` shifts the other way (the
    gradient)."""
    nt, c, h, w = x.shape
    c1, c2 = _shift_channels(c, ratio)
    v = x.reshape(nt // t, t, c, h, w)
    out = torch.zeros_like(v)
    past, future = (slice(0, c1), slice(c1, c2)) if sign > 0 else (slice(c1, c2), slice(0, c1))
    out[:, 1:, past] = v[:, :-1, past]
    out[:, :-1, future] = v[:, 1:, future]
    out[:, :, c2:] = v[:, :, c2:]
    return out.reshape(nt, c, h, w)


register_op("temporal_shift", inputs=("X",), outputs=("Out",),
            attrs={"seg_num": 1, "shift_ratio": 0.25}, infer_shape=_temporal_shift_shape,
            kernel=lambda ins, attrs, ctx: {"Out": _shift(
                ins["X"], int(attrs["seg_num"]), float(attrs["shift_ratio"]), 1)},
            grad_kernel=lambda ins, attrs, ctx: {"X@GRAD": _shift(
                ins["Out@GRAD"], int(attrs["seg_num"]), float(attrs["shift_ratio"]), -1)},
            grad_uses=(), grad_infer_shape=lambda ins, attrs: {"X@GRAD": ins["Out@GRAD"]})

# ----------------------------------------------------------------------------- fsp


def _fsp_shape(ins: dict, attrs: dict) -> dict:
    x, y = ins["X"], ins["Y"]
    _rank("fsp", "X", x, 4)
    _rank("fsp", "Y", y, 4)
    if any(a != b and -1 not in (a, b) for a, b in zip(x.shape[2:], y.shape[2:])):
        raise ValueError(f"fsp: X {list(x.shape)} and Y {list(y.shape)} must have the same "
                         "height and width")
    return {"Out": Meta((x.shape[0], x.shape[1], y.shape[1]), x.dtype)}


def _flat(t: torch.Tensor) -> torch.Tensor:
    return t.reshape(t.shape[0], t.shape[1], -1)


def _fsp_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, y, dout = ins["X"], ins["Y"], ins["Out@GRAD"]
    hw = x.shape[2] * x.shape[3]
    out = {}
    if "X" in ctx.need:
        out["X@GRAD"] = torch.bmm(dout, _flat(y)).reshape(x.shape) / hw
    if "Y" in ctx.need:
        out["Y@GRAD"] = torch.bmm(dout.transpose(1, 2), _flat(x)).reshape(y.shape) / hw
    return out


register_op("fsp", inputs=("X", "Y"), outputs=("Out",), infer_shape=_fsp_shape,
            kernel=lambda ins, attrs, ctx: {"Out": torch.bmm(
                _flat(ins["X"]), _flat(ins["Y"]).transpose(1, 2))
                / (ins["X"].shape[2] * ins["X"].shape[3])},
            grad_kernel=_fsp_grad, grad_uses=("X", "Y"))
