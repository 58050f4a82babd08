"""Image layers of Fluid 1.6: transposed and 3-D convolutions, 3-D and adaptive pooling,
resizing, padding, cropping, normalizations and channel rearrangements.

Each keeps Fluid 1.6's signature and appends the op Fluid appends (see docs/fluid_compat.md).
"""

from __future__ import annotations

from typing import Any

from ..framework import Variable
from ..layer_helper import LayerHelper
from .window_args import channel_axis, check_format, int_or_ints, padding_attrs

__all__ = ["conv2d_transpose", "conv3d", "conv3d_transpose", "pool3d", "adaptive_pool2d",
           "adaptive_pool3d", "image_resize", "image_resize_short", "resize_bilinear",
           "resize_trilinear", "resize_nearest", "pad",
           "pad2d", "pad_constant_like", "crop", "l2_normalize", "prelu", "group_norm", "lrn",
           "maxout", "pixel_shuffle", "space_to_depth", "shuffle_channel", "affine_channel",
           "instance_norm", "unfold"]


def _check_rank(layer: str, input: Variable, rank: int, layout: str) -> None:
    if not isinstance(input, Variable):
        raise TypeError(f"{layer}: input must be a Variable, got {type(input).__name__}")
    if len(input.shape or ()) != rank:
        raise ValueError(f"{layer}: input {input.name!r} must be {rank}-D {layout}, "
                         f"got shape {list(input.shape or [])}")


def _known_channels(layer: str, input: Variable, axis: int = 1) -> int:
    c = input.shape[axis]
    if c <= 0:
        raise ValueError(f"{layer}: input {input.name!r} has an unknown channel dimension "
                         f"(shape {list(input.shape)})")
    return c


def _one(op_type: str, inputs: dict[str, Any], attrs: dict[str, Any], name: str | None,
         act: str | None = None, dtype: Any = None) -> Variable:
    helper = LayerHelper(op_type, name=name, act=act)
    first = next(iter(inputs.values()))[0]
    out = helper.create_variable_for_type_inference(dtype or first.dtype)
    helper.append_op(op_type, inputs=inputs, outputs={"Out": [out]}, attrs=attrs)
    return helper.append_activation(out)


# ----------------------------------------------------------------------------- convolutions


def _conv_nd(op: str, nd: int, input: Variable, num_filters: int, filter_size: Any,
             stride: Any, padding: Any, dilation: Any, groups: int | None, param_attr: Any,
             bias_attr: Any, use_cudnn: bool, act: str | None, name: str | None,
             transposed: bool, output_size: Any = None, data_format: str = "NCHW") -> Variable:
    from ..initializer import Normal

    last = check_format(op, data_format, nd)
    _check_rank(op, input, nd + 2, data_format)
    axis = channel_axis(nd, last)
    channels = _known_channels(op, input, axis)
    op_type = op
    if op == "conv2d_transpose" and channels == groups and num_filters == channels and \
            not use_cudnn:
        op_type = "depthwise_conv2d_transpose"
    helper = LayerHelper(op_type, input=input, param_attr=param_attr, bias_attr=bias_attr,
                         act=act, name=name)
    dtype = helper.input_dtype()
    groups = 1 if groups is None else int(groups)
    if groups <= 0 or channels % groups or (transposed and num_filters % groups):
        raise ValueError(f"{op}: the {channels} input channels of {input.name!r} (and "
                         f"num_filters={num_filters}) must be divisible by groups={groups}")
    strides = int_or_ints(op, "stride", stride, nd)
    pads, algorithm = padding_attrs(op, padding, nd, last, pairs=True)
    dilations = int_or_ints(op, "dilation", dilation, nd)
    out_sizes = [] if output_size is None else int_or_ints(op, "output_size", output_size, nd)
    if filter_size is None:
        if not out_sizes:
            raise ValueError(f"{op}: give filter_size or output_size")
        in_sizes = input.shape[1:-1] if last else input.shape[2:]
        if any(d <= 0 for d in in_sizes):
            raise ValueError(f"{op}: filter_size=None needs the spatial dims of "
                             f"{input.name!r} to be known, got {list(input.shape)}")
        # Fluid derives the filter that makes the output exactly output_size.
        k = [(out_sizes[i] - (in_sizes[i] - 1) * strides[i] + pads[2 * i] +
              pads[2 * i + 1] - 1) // dilations[i] + 1 for i in range(nd)]
    else:
        k = int_or_ints(op, "filter_size", filter_size, nd)
    attrs: dict[str, Any] = {"strides": strides, "paddings": pads,
                             "padding_algorithm": algorithm, "dilations": dilations,
                             "groups": groups, "use_cudnn": use_cudnn,
                             "data_format": data_format}
    if transposed:
        shape = [channels, num_filters // groups, *k]
        w = helper.create_parameter(helper.param_attr, shape, dtype)  # Xavier, as Fluid
        attrs["output_size"] = out_sizes
        if nd == 3:  # Fluid's conv3d_transpose op names its layouts as the 2-D one
            attrs["data_format"] = "NHWC" if last else "NCHW"
    else:
        numel = channels
        for d in k:
            numel *= d
        w = helper.create_parameter(helper.param_attr, [num_filters, channels // groups, *k],
                                    dtype, default_initializer=Normal(0.0, (2.0 / numel) ** 0.5,
                                                                      0))
        attrs["use_mkldnn"] = False
    pre_bias = helper.create_variable_for_type_inference(dtype)
    helper.append_op(op_type, inputs={"Input": [input], "Filter": [w]},
                     outputs={"Output": [pre_bias]}, attrs=attrs)
    pre_act = helper.append_bias_op(pre_bias, dim_start=axis, dim_end=axis + 1)
    return helper.append_activation(pre_act)


def conv2d_transpose(input: Variable, num_filters: int, output_size: Any = None,
                     filter_size: Any = None, padding: Any = 0, stride: Any = 1,
                     dilation: Any = 1, groups: int | None = None, param_attr: Any = None,
                     bias_attr: Any = None, use_cudnn: bool = True, act: str | None = None,
                     name: str | None = None, data_format: str = "NCHW") -> Variable:
    """Transposed 2-D convolution (NCHW or NHWC); the filter is
    ``[C, num_filters / groups, kh, kw]``.

    Output size ``(H - 1) * stride - pad_before - pad_after + dilation * (k - 1) + 1``; an
    ``output_size`` up to ``stride - 1`` larger is reached by extra trailing rows, and with
    ``filter_size=None`` the filter is sized to give ``output_size`` exactly. ``padding``
    takes ``conv2d``'s forms ('SAME', 'VALID', pairs).

    Example::

        up = fluid.layers.conv2d_transpose(h, num_filters=16, filter_size=4, stride=2,
                                           padding=1)   # doubles H and W
    """
    return _conv_nd("conv2d_transpose", 2, input, num_filters, filter_size, stride, padding,
                    dilation, groups, param_attr, bias_attr, use_cudnn, act, name, True,
                    output_size, data_format)


def conv3d_transpose(input: Variable, num_filters: int, output_size: Any = None,
                     filter_size: Any = None, padding: Any = 0, stride: Any = 1,
                     dilation: Any = 1, groups: int | None = None, param_attr: Any = None,
                     bias_attr: Any = None, use_cudnn: bool = True, act: str | None = None,
                     name: str | None = None, data_format: str = "NCDHW") -> Variable:
    """Transposed 3-D convolution (NCDHW or NDHWC); see ``conv2d_transpose``."""
    return _conv_nd("conv3d_transpose", 3, input, num_filters, filter_size, stride, padding,
                    dilation, groups, param_attr, bias_attr, use_cudnn, act, name, True,
                    output_size, data_format)


def conv3d(input: Variable, num_filters: int, filter_size: Any, stride: Any = 1,
           padding: Any = 0, dilation: Any = 1, groups: int | None = None,
           param_attr: Any = None, bias_attr: Any = None, use_cudnn: bool = True,
           act: str | None = None, name: str | None = None,
           data_format: str = "NCDHW") -> Variable:
    """3-D convolution over an NCDHW (or NDHWC) input; filter
    ``[num_filters, C / groups, kd, kh, kw]`` starting from
    ``Normal(0, sqrt(2 / (kd * kh * kw * C)))``.

    Example::

        h = fluid.layers.conv3d(vol, num_filters=4, filter_size=3, padding=1, act="relu")
    """
    return _conv_nd("conv3d", 3, input, num_filters, filter_size, stride, padding, dilation,
                    groups, param_attr, bias_attr, use_cudnn, act, name, False,
                    data_format=data_format)


# ----------------------------------------------------------------------------- pooling


def pool3d(input: Variable, pool_size: Any = -1, pool_type: str = "max", pool_stride: Any = 1,
           pool_padding: Any = 0, global_pooling: bool = False, use_cudnn: bool = True,
           ceil_mode: bool = False, name: str | None = None, exclusive: bool = True,
           data_format: str = "NCDHW") -> Variable:
    """Max or average pooling over an NCDHW (or NDHWC) input (``pool2d``'s rules in 3-D)."""
    if pool_type not in ("max", "avg"):
        raise ValueError(f"pool3d: pool_type must be 'max' or 'avg', got {pool_type!r}")
    if not global_pooling and pool_size == -1:
        raise ValueError("pool3d: pool_size must be given when global_pooling is False")
    last = check_format("pool3d", data_format, 3)
    _check_rank("pool3d", input, 5, data_format)
    pads, algorithm = padding_attrs("pool3d", pool_padding, 3, last, pairs=False,
                                    name="pool_padding")
    if algorithm == "VALID" and ceil_mode:
        raise ValueError("pool3d: pool_padding 'VALID' needs ceil_mode=False")
    ksize = [1, 1, 1] if global_pooling and pool_size == -1 else \
        int_or_ints("pool3d", "pool_size", pool_size, 3)
    return _one("pool3d", {"X": [input]}, {
        "pooling_type": pool_type, "ksize": ksize,
        "strides": int_or_ints("pool3d", "pool_stride", pool_stride, 3),
        "paddings": pads, "padding_algorithm": algorithm,
        "global_pooling": global_pooling, "use_cudnn": use_cudnn, "ceil_mode": ceil_mode,
        "use_mkldnn": False, "exclusive": exclusive, "data_format": data_format}, name)


def _adaptive(nd: int, input: Variable, pool_size: Any, pool_type: str, require_index: bool,
              name: str | None) -> Any:
    """Fluid's adaptive pooling: ``pool{nd}d`` for 'avg', ``max_pool{nd}d_with_index``
    (an Out and a Mask of flat argmax positions) for 'max'."""
    layer = f"adaptive_pool{nd}d"
    if pool_type not in ("max", "avg"):
        raise ValueError(f"{layer}: pool_type must be 'max' or 'avg', got {pool_type!r}")
    if pool_type == "avg" and require_index:
        raise ValueError(f"{layer}: require_index=True needs pool_type 'max'")
    _check_rank(layer, input, nd + 2, "NCHW" if nd == 2 else "NCDHW")
    size = int_or_ints(layer, "pool_size", pool_size, nd)
    attrs = {"pooling_type": pool_type, "ksize": size, "adaptive": True}
    if pool_type == "avg":
        return _one(f"pool{nd}d", {"X": [input]}, attrs, name)
    op = f"max_pool{nd}d_with_index"
    helper = LayerHelper(op, name=name)
    out = helper.create_variable_for_type_inference(input.dtype)
    mask = helper.create_variable_for_type_inference("int32", stop_gradient=True)
    helper.append_op(op, inputs={"X": [input]}, outputs={"Out": [out], "Mask": [mask]},
                     attrs=attrs)
    return (out, mask) if require_index else out


def adaptive_pool2d(input: Variable, pool_size: Any, pool_type: str = "max",
                    require_index: bool = False, name: str | None = None) -> Any:
    """Pool an NCHW input to ``pool_size`` output bins; bin ``i`` of ``out`` covers rows
    ``[floor(i * H / out), ceil((i + 1) * H / out))``. 'avg' appends ``pool2d`` with
    ``adaptive=True``, 'max' appends ``max_pool2d_with_index`` (``require_index=True``
    returns its Mask too), as Fluid.

    Example::

        feat = fluid.layers.adaptive_pool2d(h, pool_size=[3, 3], pool_type="avg")
    """
    return _adaptive(2, input, pool_size, pool_type, require_index, name)


def adaptive_pool3d(input: Variable, pool_size: Any, pool_type: str = "max",
                    require_index: bool = False, name: str | None = None) -> Any:
    """``adaptive_pool2d`` over an NCDHW input (``pool3d`` / ``max_pool3d_with_index``)."""
    return _adaptive(3, input, pool_size, pool_type, require_index, name)


# ----------------------------------------------------------------------------- resizing

_RESAMPLE = {"BILINEAR": "bilinear_interp", "NEAREST": "nearest_interp",
             "TRILINEAR": "trilinear_interp"}


def _size_tensors(helper: LayerHelper, out_shape: Any) -> list[Variable]:
    """One ``[1]`` int32 tensor per entry of ``out_shape`` (ints become fill_constant)."""
    tensors = []
    for dim in out_shape:
        if isinstance(dim, Variable):
            dim.stop_gradient = True
            tensors.append(dim)
        else:
            t = helper.create_variable_for_type_inference("int32")
            helper.append_op("fill_constant", outputs={"Out": [t]},
                             attrs={"shape": [1], "dtype": "int32", "value": float(dim),
                                    "force_cpu": True})
            t.stop_gradient = True
            tensors.append(t)
    return tensors


def image_resize(input: Variable, out_shape: Any = None, scale: Any = None,
                 name: str | None = None, resample: str = "BILINEAR",
                 actual_shape: Variable | None = None, align_corners: bool = True,
                 align_mode: int = 1, data_format: str = "NCHW") -> Variable:
    """Resize the spatial dims as Fluid's interpolate ops: H and W of a 4-D input
    (``BILINEAR``, ``NEAREST``) or D, H and W of a 5-D one (``TRILINEAR``), channels first
    (``data_format`` NCHW / NCDHW) or last (NHWC / NDHWC).

    ``out_shape`` is ``[out_h, out_w]`` (``[out_d, out_h, out_w]``): ints, ints and
    one-element int32 Variables (op input ``SizeTensor``), or one int32 Variable
    (``OutSize``); otherwise ``scale`` (a number, or a one-element Variable: ``Scale``)
    gives ``int(size * scale)``. ``actual_shape`` (an int32 Variable) overrides the size at
    run time. ``align_corners`` maps corner pixels onto corner pixels; without it, linear
    ``align_mode=0`` samples at half-pixel centres and ``align_mode=1`` at ``in / out * k``.

    Example::

        up = fluid.layers.image_resize(feat, out_shape=[64, 64])   # bilinear, align_corners
    """
    resample = resample.upper()
    if resample not in _RESAMPLE:
        raise ValueError(f"image_resize: resample must be one of {sorted(_RESAMPLE)}, "
                         f"got {resample!r}")
    if align_mode not in (0, 1):
        raise ValueError(f"image_resize: align_mode must be 0 or 1, got {align_mode!r}")
    op = _RESAMPLE[resample]
    nd = 3 if resample == "TRILINEAR" else 2
    keys = ["out_h", "out_w"] if nd == 2 else ["out_d", "out_h", "out_w"]
    formats = ("NCHW", "NHWC") if nd == 2 else ("NCDHW", "NDHWC")
    if data_format not in formats:
        raise ValueError(f"image_resize: data_format must be one of {list(formats)} for a "
                         f"{nd + 2}-D input, got {data_format!r}")
    _check_rank("image_resize", input, nd + 2, data_format)
    if out_shape is None and scale is None:
        raise ValueError("image_resize: one of out_shape and scale must be given")
    helper = LayerHelper(op, name=name)
    inputs: dict[str, Any] = {"X": [input]}
    attrs: dict[str, Any] = {"interp_method": resample.lower(), "align_corners": align_corners,
                             "align_mode": align_mode, "scale": 0.0, **{k: -1 for k in keys},
                             "data_layout": "NCHW" if data_format[1] == "C" else "NHWC"}
    if isinstance(out_shape, Variable):
        out_shape.stop_gradient = True
        inputs["OutSize"] = [out_shape]
    elif out_shape is not None:
        if not isinstance(out_shape, (list, tuple)) or len(out_shape) != nd or not all(
                isinstance(v, Variable) or (isinstance(v, int) and v > 0) for v in out_shape):
            raise ValueError(f"image_resize: out_shape must be {nd} positive ints or int32 "
                             f"Variables {keys}, got {out_shape!r}")
        if any(isinstance(v, Variable) for v in out_shape):
            inputs["SizeTensor"] = _size_tensors(helper, out_shape)
        attrs.update({k: -1 if isinstance(v, Variable) else int(v)
                      for k, v in zip(keys, out_shape)})
    elif isinstance(scale, Variable):
        scale.stop_gradient = True
        inputs["Scale"] = [scale]
    else:
        if not isinstance(scale, (int, float)) or isinstance(scale, bool):
            raise TypeError(f"image_resize: scale must be a float, an int or a Variable, got "
                            f"{type(scale).__name__}: {scale!r}")
        if float(scale) <= 0:
            raise ValueError(f"image_resize: scale must be > 0, got {scale}")
        attrs["scale"] = float(scale)
    if actual_shape is not None:
        if not isinstance(actual_shape, Variable):
            raise TypeError(f"image_resize: actual_shape must be a Variable or None, got "
                            f"{type(actual_shape).__name__}")
        actual_shape.stop_gradient = True
        inputs["OutSize"] = [actual_shape]
    return _one(op, inputs, attrs, name)


def image_resize_short(input: Variable, out_short_len: int,
                       resample: str = "BILINEAR") -> Variable:
    """Resize so that the shorter of H and W becomes ``out_short_len``, keeping the aspect
    ratio (the longer side rounds to the nearest int)."""
    _check_rank("image_resize_short", input, 4, "NCHW")
    hw = list(input.shape[2:4])
    if min(hw) <= 0:
        raise ValueError(f"image_resize_short: H and W of {input.name!r} must be known, got "
                         f"{list(input.shape)}")
    short = hw.index(min(hw))
    out = list(hw)
    out[short] = int(out_short_len)
    out[1 - short] = int(float(hw[1 - short]) * (float(out_short_len) / hw[short]) + 0.5)
    return image_resize(input, out_shape=out, resample=resample)


def resize_bilinear(input: Variable, out_shape: Any = None, scale: Any = None,
                    name: str | None = None, actual_shape: Variable | None = None,
                    align_corners: bool = True, align_mode: int = 1,
                    data_format: str = "NCHW") -> Variable:
    """``image_resize(..., resample="BILINEAR")``."""
    return image_resize(input, out_shape, scale, name, "BILINEAR", actual_shape,
                        align_corners, align_mode, data_format)


def resize_trilinear(input: Variable, out_shape: Any = None, scale: Any = None,
                     name: str | None = None, actual_shape: Variable | None = None,
                     align_corners: bool = True, align_mode: int = 1,
                     data_format: str = "NCDHW") -> Variable:
    """``image_resize(..., resample="TRILINEAR")`` over a 5-D input."""
    return image_resize(input, out_shape, scale, name, "TRILINEAR", actual_shape,
                        align_corners, align_mode, data_format)


def resize_nearest(input: Variable, out_shape: Any = None, scale: Any = None,
                   name: str | None = None, actual_shape: Variable | None = None,
                   align_corners: bool = True, data_format: str = "NCHW") -> Variable:
    """``image_resize(..., resample="NEAREST")``."""
    return image_resize(input, out_shape, scale, name, "NEAREST", actual_shape,
                        align_corners, 1, data_format)


# ----------------------------------------------------------------------------- pad / crop


def pad(x: Variable, paddings: list[int], pad_value: float = 0.0,
        name: str | None = None) -> Variable:
    """Pad every dim with a constant: ``paddings`` is ``[before_0, after_0, before_1, ...]``.

    Example::

        y = fluid.layers.pad(x, paddings=[0, 0, 1, 2], pad_value=0.0)   # x: [N, D]
    """
    if len(paddings) != 2 * len(x.shape or ()):
        raise ValueError(f"pad: paddings must have 2 values per dim of {x.name!r} "
                         f"{list(x.shape or [])}, got {list(paddings)}")
    return _one("pad", {"X": [x]}, {"paddings": [int(p) for p in paddings],
                                    "pad_value": float(pad_value)}, name)


def pad2d(input: Variable, paddings: Any = (0, 0, 0, 0), mode: str = "constant",
          pad_value: float = 0.0, data_format: str = "NCHW",
          name: str | None = None) -> Variable:
    """Pad H and W of a 4-D input: ``paddings = [top, bottom, left, right]``; ``mode`` is
    ``constant``, ``reflect`` or ``edge``.

    Example::

        y = fluid.layers.pad2d(img, paddings=[1, 1, 2, 2], mode="reflect")
    """
    if isinstance(paddings, Variable):
        # read when the program runs (an int32 tensor of 4 values), as Fluid 1.6's Paddings
        return _one("pad2d", {"X": [input], "Paddings": [paddings]},
                    {"paddings": [0, 0, 0, 0], "mode": mode, "pad_value": float(pad_value),
                     "data_format": data_format}, name)
    _check_rank("pad2d", input, 4, data_format)
    return _one("pad2d", {"X": [input]}, {"paddings": [int(p) for p in paddings], "mode": mode,
                                          "pad_value": float(pad_value),
                                          "data_format": data_format}, name)


def pad_constant_like(x: Variable, y: Variable, pad_value: float = 0.0,
                      name: str | None = None) -> Variable:
    """Pad ``y`` at the end of each dim with ``pad_value`` up to the shape of ``x``."""
    helper = LayerHelper("pad_constant_like", name=name)
    out = helper.create_variable_for_type_inference(y.dtype)
    helper.append_op("pad_constant_like", inputs={"X": [x], "Y": [y]}, outputs={"Out": [out]},
                     attrs={"pad_value": float(pad_value)})
    return out


def crop(x: Variable, shape: Any = None, offsets: Any = None,
         name: str | None = None) -> Variable:
    """Crop ``x`` to ``shape`` (ints, or a Variable whose shape is used) at ``offsets``
    (ints or an int32 Variable; default all 0).

    Example::

        y = fluid.layers.crop(x, shape=[-1, 2, 3], offsets=[0, 1, 0])
    """
    inputs: dict[str, Any] = {"X": [x]}
    attrs: dict[str, Any] = {}
    if isinstance(shape, Variable):
        inputs["Y"] = [shape]
    elif shape is None:
        raise ValueError("crop: shape must be given (a list of ints or a Variable)")
    else:
        attrs["shape"] = [int(s) for s in shape]
    if isinstance(offsets, Variable):
        inputs["Offsets"] = [offsets]
    else:
        attrs["offsets"] = [0] * len(x.shape or ()) if offsets is None else \
            [int(o) for o in offsets]
    return _one("crop", inputs, attrs, name)


# ----------------------------------------------------------------------------- normalizations


def l2_normalize(x: Variable, axis: int, epsilon: float = 1e-12,
                 name: str | None = None) -> Variable:
    """``x / sqrt(sum(x^2, axis) + epsilon)`` (appends the ``norm`` op).

    Example::

        emb = fluid.layers.l2_normalize(emb, axis=1)
    """
    if len(x.shape or ()) == 1:
        axis = 0
    helper = LayerHelper("l2_normalize", name=name)
    out = helper.create_variable_for_type_inference(x.dtype)
    norm = helper.create_variable_for_type_inference(x.dtype, stop_gradient=True)
    helper.append_op("norm", inputs={"X": [x]}, outputs={"Out": [out], "Norm": [norm]},
                     attrs={"axis": 1 if axis is None else int(axis),
                            "epsilon": float(epsilon)})
    return out


def prelu(x: Variable, mode: str, param_attr: Any = None, name: str | None = None) -> Variable:
    """``x`` where positive, ``alpha * x`` elsewhere; ``alpha`` (a parameter starting at 0.25)
    is one value (``mode="all"``), one per channel (``"channel"``, shape ``[1, C, 1, 1]``) or
    one per element of a sample (``"element"``).

    Example::

        h = fluid.layers.prelu(h, mode="channel")
    """
    from ..initializer import Constant

    if mode not in ("all", "channel", "element"):
        raise ValueError(f"prelu: mode must be 'all', 'channel' or 'element', got {mode!r}")
    helper = LayerHelper("prelu", param_attr=param_attr, name=name)
    shape = list(x.shape or ())
    if mode == "all":
        alpha_shape = [1]
    elif mode == "channel":
        if len(shape) < 2 or shape[1] <= 0:
            raise ValueError(f"prelu: mode 'channel' needs a known channel dim, "
                             f"got {x.name!r} of shape {shape}")
        alpha_shape = [1, shape[1], 1, 1]
    else:
        alpha_shape = [1] + shape[1:]
    alpha = helper.create_parameter(helper.param_attr, alpha_shape, "float32",
                                    default_initializer=Constant(0.25))
    out = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op("prelu", inputs={"X": [x], "Alpha": [alpha]}, outputs={"Out": [out]},
                     attrs={"mode": mode})
    return out


def group_norm(input: Variable, groups: int, epsilon: float = 1e-05, param_attr: Any = None,
               bias_attr: Any = None, act: str | None = None, data_layout: str = "NCHW",
               name: str | None = None) -> Variable:
    """Normalize each sample over groups of ``C / groups`` channels, then scale and shift
    per channel when asked: as Fluid 1.6's layer, the scale (starting at 1) exists only when
    ``param_attr`` is given and the bias (at 0) only when ``bias_attr`` is (the defaults,
    None, leave both out: a program saved by Fluid 1.6 has no such parameters).

    Example::

        h = fluid.layers.group_norm(h, groups=4, act="relu",
                                    param_attr=fluid.ParamAttr(), bias_attr=fluid.ParamAttr())
    """
    if data_layout not in ("NCHW", "NHWC"):
        raise ValueError(f"group_norm: data_layout must be 'NCHW' or 'NHWC', "
                         f"got {data_layout!r}")
    helper = LayerHelper("group_norm", input=input, param_attr=param_attr,
                         bias_attr=bias_attr, act=act, name=name)
    # NOTE: Fluid 1.6 tests the arguments themselves for truth (``if param_attr:``)
    out = _channel_norm(helper, "group_norm", input, param_attr if param_attr else False,
                        bias_attr if bias_attr else False,
                        ("Mean", "Variance"), {"epsilon": float(epsilon), "groups": int(groups),
                                               "data_layout": data_layout},
                        axis=-1 if data_layout == "NHWC" else 1)
    return helper.append_activation(out)


def _channel_norm(helper: LayerHelper, op: str, input: Variable, param_attr: Any,
                  bias_attr: Any, stats: tuple[str, str], attrs: dict[str, Any],
                  axis: int = 1) -> Variable:
    """Append a normalization op with a per-channel scale (starting at 1) and bias (at 0),
    either left out by ``False``; its two statistics outputs ``stats``; return ``Y``."""
    from ..initializer import Constant

    dtype = helper.input_dtype()
    c = _known_channels(op, input, axis)
    inputs: dict[str, Any] = {"X": [input]}
    if param_attr is not False:
        inputs["Scale"] = [helper.create_parameter(helper.param_attr, [c], dtype,
                                                   default_initializer=Constant(1.0))]
    if bias_attr is not False:
        inputs["Bias"] = [helper.create_parameter(helper.bias_attr, [c], dtype, is_bias=True)]
    out = helper.create_variable_for_type_inference(dtype)
    outputs = {"Y": [out]}
    for slot in stats:
        outputs[slot] = [helper.create_variable_for_type_inference(dtype, stop_gradient=True)]
    helper.append_op(op, inputs=inputs, outputs=outputs, attrs=attrs)
    return out


def lrn(input: Variable, n: int = 5, k: float = 1.0, alpha: float = 1e-4, beta: float = 0.75,
        name: str | None = None) -> Variable:
    """Local response normalization across channels (AlexNet):
    ``x / (k + alpha * sum_{n channels around c} x^2) ** beta``.

    Example::

        h = fluid.layers.lrn(h, n=5, alpha=1e-4, beta=0.75)
    """
    _check_rank("lrn", input, 4, "NCHW")
    helper = LayerHelper("lrn", name=name)
    out = helper.create_variable_for_type_inference(input.dtype)
    mid = helper.create_variable_for_type_inference(input.dtype, stop_gradient=True)
    helper.append_op("lrn", inputs={"X": [input]}, outputs={"Out": [out], "MidOut": [mid]},
                     attrs={"n": int(n), "k": float(k), "alpha": float(alpha),
                            "beta": float(beta)})
    return out


def maxout(x: Variable, groups: int, name: str | None = None) -> Variable:
    """Max over each run of ``groups`` consecutive channels: ``[N, C, H, W]`` ->
    ``[N, C / groups, H, W]``."""
    _check_rank("maxout", x, 4, "NCHW")
    return _one("maxout", {"X": [x]}, {"groups": int(groups)}, name)


def affine_channel(x: Variable, scale: Variable | None = None, bias: Variable | None = None,
                   data_layout: str = "NCHW", name: str | None = None,
                   act: str | None = None) -> Variable:
    """``x * scale[c] + bias[c]`` with given ``[C]`` variables (a frozen batch norm)."""
    if scale is None or bias is None:
        raise ValueError("affine_channel: scale and bias must both be given as [C] Variables")
    return _one("affine_channel", {"X": [x], "Scale": [scale], "Bias": [bias]},
                {"data_layout": data_layout}, name, act=act)


# ----------------------------------------------------------------------------- rearrangements


def pixel_shuffle(x: Variable, upscale_factor: int) -> Variable:
    """``[N, C * r^2, H, W]`` -> ``[N, C, H * r, W * r]`` (sub-pixel convolution)."""
    _check_rank("pixel_shuffle", x, 4, "NCHW")
    return _one("pixel_shuffle", {"X": [x]}, {"upscale_factor": int(upscale_factor)}, None)


def space_to_depth(x: Variable, blocksize: int, name: str | None = None) -> Variable:
    """``[N, C, H, W]`` -> ``[N, C * b^2, H / b, W / b]`` in Fluid's element order (the
    darknet "reorg" layer; ``C`` must be divisible by ``b^2``)."""
    _check_rank("space_to_depth", x, 4, "NCHW")
    return _one("space_to_depth", {"X": [x]}, {"blocksize": int(blocksize)}, name)


def shuffle_channel(x: Variable, group: int, name: str | None = None) -> Variable:
    """ShuffleNet's channel shuffle: ``[N, g, C/g, H, W]`` transposed to ``[N, C/g, g, H, W]``."""
    _check_rank("shuffle_channel", x, 4, "NCHW")
    return _one("shuffle_channel", {"X": [x]}, {"group": int(group)}, name)


def instance_norm(input: Variable, epsilon: float = 1e-05, param_attr: Any = None,
                  bias_attr: Any = None, name: str | None = None) -> Variable:
    """Normalize each channel of each sample over its spatial dims, then scale and shift per
    channel (style transfer, GANs).

    Example::

        h = fluid.layers.instance_norm(fluid.layers.conv2d(img, 32, 3))
    """
    helper = LayerHelper("instance_norm", input=input, param_attr=param_attr,
                         bias_attr=bias_attr, name=name)
    return _channel_norm(helper, "instance_norm", input, param_attr, bias_attr,
                         ("SavedMean", "SavedVariance"), {"epsilon": float(epsilon)})


def unfold(x: Variable, kernel_sizes: Any, strides: Any = 1, paddings: Any = 0,
           dilations: Any = 1, name: str | None = None) -> Variable:
    """im2col: ``[N, C, H, W]`` -> ``[N, C * kh * kw, L]``, one column per block;
    ``paddings`` is an int, 2 values ``[h, w]`` or 4 ``[top, left, bottom, right]``."""
    _check_rank("unfold", x, 4, "NCHW")
    pads = [paddings] * 4 if isinstance(paddings, int) else [int(p) for p in paddings]
    if len(pads) == 2:
        pads = pads + pads
    if len(pads) != 4:
        raise ValueError(f"unfold: paddings must be an int, 2 or 4 ints, got {paddings!r}")
    helper = LayerHelper("unfold", name=name)
    out = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op("unfold", inputs={"X": [x]}, outputs={"Y": [out]},
                     attrs={"kernel_sizes": int_or_ints("unfold", "kernel_sizes", kernel_sizes, 2),
                            "strides": int_or_ints("unfold", "strides", strides, 2),
                            "paddings": pads,
                            "dilations": int_or_ints("unfold", "dilations", dilations, 2)})
    return out
