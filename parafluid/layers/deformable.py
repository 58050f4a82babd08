"""Deformable layers of Fluid 1.6's ``layers.nn``: ``deformable_conv`` and
``deformable_roi_pooling`` (ops in ``parafluid/ops/deformable_conv.py`` and
``deformable_roi.py``).

Example::

    import parafluid as fluid
    x = fluid.layers.data(name="x", shape=[8, 16, 16], dtype="float32")
    offset = fluid.layers.conv2d(x, num_filters=2 * 9, filter_size=3, padding=1)
    mask = fluid.layers.sigmoid(fluid.layers.conv2d(x, num_filters=9, filter_size=3,
                                                    padding=1))
    y = fluid.layers.deformable_conv(x, offset, mask, num_filters=8, filter_size=3, padding=1)
"""

from __future__ import annotations

from typing import Any

from ..framework import Variable
from ..layer_helper import LayerHelper

__all__ = ["deformable_conv", "deformable_roi_pooling"]


def deformable_conv(input: Variable, offset: Variable, mask: Variable | None,
                    num_filters: int, filter_size: Any, stride: Any = 1, padding: Any = 0,
                    dilation: Any = 1, groups: int | None = None,
                    deformable_groups: int | None = None, im2col_step: int | None = None,
                    param_attr: Any = None, bias_attr: Any = None, modulated: bool = True,
                    name: str | None = None) -> Variable:
    """Deformable convolution (DCN v2; ``modulated=False``: v1, no mask): each kernel tap
    reads ``input`` at its position moved by ``offset [N, 2 * dg * kh * kw, Ho, Wo]``
    (bilinear), scaled by ``mask [N, dg * kh * kw, Ho, Wo]``; plus a bias.

    Example::

        y = fluid.layers.deformable_conv(x, offset, mask, num_filters=8, filter_size=3,
                                         padding=1)
    """
    from ..initializer import Normal
    from .nn import _channels, _int_pair

    for arg, v in (("input", input), ("offset", offset)) + \
            ((("mask", mask),) if modulated else ()):
        if not isinstance(v, Variable):
            raise TypeError(f"deformable_conv: {arg} must be a Variable, got "
                            f"{type(v).__name__}")
    helper = LayerHelper("deformable_conv", input=input, param_attr=param_attr,
                         bias_attr=bias_attr, name=name)
    dtype = helper.input_dtype()
    channels = _channels("deformable_conv", input, 1)
    groups = 1 if groups is None else int(groups)
    if groups <= 0 or channels % groups:
        raise ValueError(f"deformable_conv: the {channels} input channels of {input.name!r} "
                         f"are not divisible by groups={groups}")
    kh, kw = _int_pair(filter_size, "filter_size", "deformable_conv")
    w = helper.create_parameter(helper.param_attr, [num_filters, channels // groups, kh, kw],
                                dtype, default_initializer=Normal(
                                    0.0, (2.0 / (kh * kw * channels)) ** 0.5, 0))
    pre_bias = helper.create_variable_for_type_inference(dtype)
    inputs = {"Input": [input], "Offset": [offset], "Filter": [w]}
    if modulated:
        inputs["Mask"] = [mask]
    helper.append_op("deformable_conv" if modulated else "deformable_conv_v1", inputs=inputs,
                     outputs={"Output": [pre_bias]},
                     attrs={"strides": _int_pair(stride, "stride", "deformable_conv"),
                            "paddings": _int_pair(padding, "padding", "deformable_conv"),
                            "dilations": _int_pair(dilation, "dilation", "deformable_conv"),
                            "groups": groups, "deformable_groups": int(deformable_groups or 1),
                            "im2col_step": int(im2col_step or 64)})
    return helper.append_bias_op(pre_bias, dim_start=1, dim_end=2)


def deformable_roi_pooling(input: Variable, rois: Variable, trans: Variable,
                           no_trans: bool = False, spatial_scale: float = 1.0,
                           group_size: Any = (1, 1), pooled_height: int = 1,
                           pooled_width: int = 1, part_size: Any = None,
                           sample_per_part: int = 1, trans_std: float = 0.1,
                           position_sensitive: bool = False,
                           name: str | None = None) -> Variable:
    """Deformable (position-sensitive) ROI pooling: each bin of each ROI (LoD ``rois
    [R, 4]``) is moved by ``trans [R, 2 * classes, part_h, part_w] * trans_std`` (times the
    ROI's size) and averages ``sample_per_part ** 2`` bilinear samples.
    ``[R, C (or C / (pooled_height * pooled_width) if position_sensitive), pooled_height,
    pooled_width]``.

    Example::

        pooled = fluid.layers.deformable_roi_pooling(feat, rois, offsets, pooled_height=7,
                                                     pooled_width=7, spatial_scale=1 / 16.)
    """
    from .nn import _int_pair

    for arg, v in (("input", input), ("rois", rois), ("trans", trans)):
        if not isinstance(v, Variable):
            raise TypeError(f"deformable_roi_pooling: {arg} must be a Variable, got "
                            f"{type(v).__name__}")
    channels = input.shape[1]
    out_dim = channels // (pooled_height * pooled_width) if position_sensitive else channels
    part = [pooled_height, pooled_width] if part_size is None else \
        _int_pair(part_size, "part_size", "deformable_roi_pooling")
    helper = LayerHelper("deformable_psroi_pooling", name=name)
    out = helper.create_variable_for_type_inference(input.dtype)
    count = helper.create_variable_for_type_inference(input.dtype, stop_gradient=True)
    helper.append_op("deformable_psroi_pooling",
                     inputs={"Input": [input], "ROIs": [rois], "Trans": [trans]},
                     outputs={"Output": [out], "TopCount": [count]},
                     attrs={"no_trans": bool(no_trans), "spatial_scale": float(spatial_scale),
                            "output_dim": int(out_dim),
                            "group_size": _int_pair(group_size, "group_size",
                                                    "deformable_roi_pooling"),
                            "pooled_height": int(pooled_height),
                            "pooled_width": int(pooled_width), "part_size": part,
                            "sample_per_part": int(sample_per_part),
                            "trans_std": float(trans_std)})
    return out
