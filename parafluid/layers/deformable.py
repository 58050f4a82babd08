"""Deformable convolution of Fluid 1.6's ``layers.nn``: ``deformable_conv`` (ops in
``parafluid/ops/deformable_conv.py``).

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

__all__ = ["deformable_conv"]


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
