"""Text-matching layers of Fluid 1.6 over LoD sequences: ``match_matrix_tensor`` and
``var_conv_2d`` (convolution of the variable-sized match images)."""

from __future__ import annotations

from typing import Any

from ..framework import Variable
from ..layer_helper import LayerHelper

__all__ = ["match_matrix_tensor", "var_conv_2d"]


def match_matrix_tensor(x: Variable, y: Variable, channel_num: int, act: str | None = None,
                        param_attr: Any = None, dtype: str = "float32",
                        name: str | None = None) -> tuple[Variable, Variable]:
    """Bilinear match matrices of paired sequences: for the ``b``-th sequences of ``x``
    ``[Tx, h]`` and ``y`` ``[Ty, h]`` (one LoD level each) and each of ``channel_num``
    channels, ``x_b @ W[:, t, :] @ y_b^T`` with the parameter ``W`` ``[h, channel_num, h]``.
    Returns ``(out, tmp)``: ``out`` one column of every pair's matrices, row-major, channel by
    channel (LoD: ``channel_num * lx * ly`` rows per pair), then ``act``; ``tmp`` is
    ``x @ W`` as ``[Tx, channel_num * h]``.

    Example::

        x = fluid.layers.data(name="x", shape=[10], dtype="float32", lod_level=1)
        y = fluid.layers.data(name="y", shape=[10], dtype="float32", lod_level=1)
        out, tmp = fluid.layers.match_matrix_tensor(x=x, y=y, channel_num=3)
    """
    for arg, v in (("x", x), ("y", y)):
        if not isinstance(v, Variable):
            raise TypeError(f"match_matrix_tensor: {arg} must be a Variable, got "
                            f"{type(v).__name__}")
    xs, ys = list(x.shape or ()), list(y.shape or ())
    if len(xs) != 2 or len(ys) != 2 or xs[-1] != ys[-1]:
        raise ValueError(f"match_matrix_tensor: x and y must be 2-D with the same width, got "
                         f"shapes {xs} and {ys}")
    helper = LayerHelper("match_matrix_tensor", param_attr=param_attr, act=act, name=name)
    w = helper.create_parameter(helper.param_attr, [xs[-1], channel_num, ys[-1]], dtype)
    out = helper.create_variable_for_type_inference(dtype)
    tmp = helper.create_variable_for_type_inference(dtype, stop_gradient=True)
    helper.append_op("match_matrix_tensor", inputs={"X": [x], "Y": [y], "W": [w]},
                     outputs={"Out": [out], "Tmp": [tmp]}, attrs={"dim_t": int(channel_num)})
    out.lod_level = 1
    return helper.append_activation(out), tmp


def var_conv_2d(input: Variable, row: Variable, col: Variable, input_channel: int,
                output_channel: int, filter_size: int | list[int], stride: int | list[int] = 1,
                param_attr: Any = None, act: str | None = None, dtype: str = "float32",
                name: str | None = None) -> Variable:
    """2-D convolution of variable-sized images: sample ``b`` of ``input`` (``[sum, 1]``,
    one LoD level) is a ``[input_channel, H_b, W_b]`` image, ``H_b`` the length of sequence
    ``b`` of ``row`` and ``W_b`` that of ``col``. The centred kernel (``filter_size``, zeros
    outside the image) moves by ``stride``; each sample gives
    ``[output_channel, (H_b - 1) // stride_h + 1, (W_b - 1) // stride_w + 1]``, flattened in
    one column with a LoD per sample, then ``act``. The filter is
    ``[output_channel, input_channel * kh * kw]``.

    Example::

        x = fluid.layers.data(name="x", shape=[1], dtype="float32", lod_level=1)
        row = fluid.layers.data(name="row", shape=[6], dtype="float32", lod_level=1)
        col = fluid.layers.data(name="col", shape=[6], dtype="float32", lod_level=1)
        out = fluid.layers.var_conv_2d(x, row, col, input_channel=3, output_channel=5,
                                       filter_size=[3, 3], stride=1)
    """
    for arg, v in (("input", input), ("row", row), ("col", col)):
        if not isinstance(v, Variable):
            raise TypeError(f"var_conv_2d: {arg} must be a Variable, got {type(v).__name__}")
    if len(list(input.shape or ())) != 2:
        raise ValueError(f"var_conv_2d: input must be 2-D [sum of C*H*W, 1], got shape "
                         f"{list(input.shape or ())}")

    def pair(v: int | list[int], what: str) -> list[int]:
        vals = [int(v), int(v)] if isinstance(v, int) else [int(i) for i in v]
        if len(vals) != 2:
            raise ValueError(f"var_conv_2d: {what} must be an int or two ints, got {v!r}")
        return vals

    (kh, kw), (sh, sw) = pair(filter_size, "filter_size"), pair(stride, "stride")
    helper = LayerHelper("var_conv_2d", param_attr=param_attr, act=act, name=name)
    w = helper.create_parameter(helper.param_attr,
                                [int(output_channel), int(input_channel) * kh * kw], dtype)
    out = helper.create_variable_for_type_inference(dtype)
    patches = helper.create_variable_for_type_inference(dtype, stop_gradient=True)
    helper.append_op("var_conv_2d",
                     inputs={"X": [input], "ROW": [row], "COLUMN": [col], "W": [w]},
                     outputs={"Out": [out], "Col": [patches]},
                     attrs={"InputChannel": int(input_channel),
                            "OutputChannel": int(output_channel), "StrideH": sh,
                            "StrideW": sw, "KernelH": kh, "KernelW": kw})
    out.lod_level = 1
    return helper.append_activation(out)
