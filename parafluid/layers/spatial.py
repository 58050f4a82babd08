"""Spatial-transformer, video and distillation layers of Fluid 1.6: affine_grid,
grid_sampler, temporal_shift, fsp_matrix."""

from __future__ import annotations

from typing import Any

from ..framework import Variable
from ..layer_helper import LayerHelper

__all__ = ["affine_grid", "grid_sampler", "temporal_shift", "fsp_matrix"]


def _check(layer: str, **args: Any) -> None:
    for arg, v in args.items():
        if not isinstance(v, Variable):
            raise TypeError(f"{layer}: {arg} must be a Variable, got {type(v).__name__}")


def _append(op_type: str, inputs: dict[str, Any], attrs: dict[str, Any], dtype: Any,
            name: str | None, out_slot: str = "Out") -> Variable:
    helper = LayerHelper(op_type, name=name)
    out = helper.create_variable_for_type_inference(dtype)
    helper.append_op(op_type, inputs=inputs, outputs={out_slot: [out]}, attrs=attrs)
    return out


def affine_grid(theta: Variable, out_shape: Any, name: str | None = None) -> Variable:
    """Sampling grid ``[N, H, W, 2]`` of the affine maps ``theta [N, 2, 3]`` for an output of
    ``out_shape = [N, C, H, W]`` (ints, or an int32 Variable); coordinates in ``[-1, 1]``.

    Example::

        grid = fluid.layers.affine_grid(theta, out_shape=[-1, 1, 28, 28])
        warped = fluid.layers.grid_sampler(img, grid)
    """
    _check("affine_grid", theta=theta)
    inputs: dict[str, Any] = {"Theta": [theta]}
    attrs: dict[str, Any] = {}
    if isinstance(out_shape, Variable):
        inputs["OutputShape"] = [out_shape]
    else:
        attrs["output_shape"] = [int(v) for v in out_shape]
    return _append("affine_grid", inputs, attrs, theta.dtype, name, "Output")


def grid_sampler(x: Variable, grid: Variable, name: str | None = None) -> Variable:
    """Bilinear samples of ``x [N, C, H, W]`` at ``grid [N, H', W', 2]`` (x, y in
    ``[-1, 1]``, corners at the corner pixels' centres; zeros outside)."""
    _check("grid_sampler", x=x, grid=grid)
    return _append("grid_sampler", {"X": [x], "Grid": [grid]}, {}, x.dtype, name, "Output")


def temporal_shift(x: Variable, seg_num: int, shift_ratio: float = 0.25,
                   name: str | None = None) -> Variable:
    """TSM's temporal shift over ``x [N * seg_num, C, H, W]``: the first ``C * shift_ratio``
    channels come from the previous segment, the next as many from the following one."""
    _check("temporal_shift", x=x)
    return _append("temporal_shift", {"X": [x]},
                   {"seg_num": int(seg_num), "shift_ratio": float(shift_ratio)}, x.dtype, name)


def fsp_matrix(x: Variable, y: Variable) -> Variable:
    """The FSP matrix of two feature maps (distillation): ``x_flat @ y_flat^T / (H * W)``,
    ``[N, C_x, C_y]``."""
    _check("fsp_matrix", x=x, y=y)
    return _append("fsp", {"X": [x], "Y": [y]}, {}, x.dtype, None)
