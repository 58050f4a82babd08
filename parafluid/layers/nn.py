"""Neural-network layers: fc and the per-op layer functions of the nn/math op families."""

from __future__ import annotations

from typing import Any

from ..framework import Variable
from ..layer_helper import LayerHelper
from ..ops.common import numel
from .common import append_one, check_vars
from .window_args import channel_axis, check_format, padding_attrs

__all__ = ["fc", "mean", "mul", "matmul", "elementwise_add", "elementwise_sub", "elementwise_mul",
           "elementwise_div", "elementwise_max", "elementwise_min", "elementwise_pow", "scale",
           "sums", "bilinear_tensor_product", "continuous_value_model"]


def fc(input: Variable | list[Variable], size: int, num_flatten_dims: int = 1,
       param_attr: Any = None, bias_attr: Any = None, act: str | None = None,
       name: str | None = None, is_test: bool = False) -> Variable:
    """Fully connected layer: ``act(sum_i flatten(input_i) @ W_i + b)``.

    Example::

        hidden = fluid.layers.fc(input=x, size=128, act="relu")
    """
    helper = LayerHelper("fc", input=input, param_attr=param_attr, bias_attr=bias_attr,
                         act=act, name=name)
    dtype = helper.input_dtype()
    partial = []
    for x, attr in helper.iter_inputs_and_params():
        if x.shape is None or len(x.shape) <= num_flatten_dims:
            raise ValueError(f"fc: input {x.name!r} of shape {list(x.shape or [])} needs more than "
                             f"num_flatten_dims={num_flatten_dims} dimensions")
        in_features = numel(x.shape[num_flatten_dims:])
        if in_features <= 0:
            raise ValueError(f"fc: input {x.name!r} has unknown feature dims "
                             f"{list(x.shape[num_flatten_dims:])}")
        w = helper.create_parameter(attr, [in_features, size], dtype)
        tmp = helper.create_variable_for_type_inference(dtype)
        helper.append_op("mul", inputs={"X": [x], "Y": [w]}, outputs={"Out": [tmp]},
                         attrs={"x_num_col_dims": num_flatten_dims, "y_num_col_dims": 1})
        partial.append(tmp)
    if len(partial) == 1:
        pre_bias = partial[0]
    else:
        pre_bias = helper.create_variable_for_type_inference(dtype)
        helper.append_op("sum", inputs={"X": partial}, outputs={"Out": [pre_bias]})
    pre_act = helper.append_bias_op(pre_bias, dim_start=num_flatten_dims)
    return helper.append_activation(pre_act)


def _simple(op_type: str, inputs: dict[str, Any], attrs: dict[str, Any] | None = None,
            name: str | None = None, out_slot: str = "Out", act: str | None = None) -> Variable:
    """One op, one output (then ``act``): the shape of most per-op layer functions."""
    # NOTE: one helper for the op and its activation, as Fluid: a second LayerHelper would
    # take another number from the layer type's name counter.
    helper = LayerHelper(op_type, name=name, act=act)
    first = next(iter(inputs.values()))
    first = first[0] if isinstance(first, (list, tuple)) else first
    out = helper.create_variable_for_type_inference(first.dtype)
    helper.append_op(op_type, inputs=inputs, outputs={out_slot: [out]}, attrs=attrs or {})
    return helper.append_activation(out)


def mean(x: Variable, name: str | None = None) -> Variable:
    """Mean of all elements, shape [1]."""
    return _simple("mean", {"X": [x]}, name=name)


def mul(x: Variable, y: Variable, x_num_col_dims: int = 1, y_num_col_dims: int = 1,
        name: str | None = None) -> Variable:
    """Matrix product of ``x`` and ``y`` flattened to 2-D at the given dims."""
    return _simple("mul", {"X": [x], "Y": [y]},
                   {"x_num_col_dims": x_num_col_dims, "y_num_col_dims": y_num_col_dims}, name)


def matmul(x: Variable, y: Variable, transpose_x: bool = False, transpose_y: bool = False,
           alpha: float = 1.0, name: str | None = None) -> Variable:
    """Batched matrix product ``alpha * op(x) @ op(y)`` (numpy broadcasting of batch dims).

    1-D operands are treated as vectors; ``transpose_*`` swaps the last two dims.

    Example::

        scores = fluid.layers.matmul(q, k, transpose_y=True, alpha=0.125)
    """
    return _simple("matmul", {"X": [x], "Y": [y]},
                   {"transpose_X": transpose_x, "transpose_Y": transpose_y,
                    "alpha": float(alpha)}, name)


def _elementwise(op_type: str) -> Any:
    def layer(x: Variable, y: Variable, axis: int = -1, act: str | None = None,
              name: str | None = None) -> Variable:
        return _simple(op_type, {"X": [x], "Y": [y]}, {"axis": axis}, name, act=act)
    layer.__name__ = op_type
    layer.__doc__ = (f"``{op_type}(x, y, axis=-1)``: Fluid broadcasting, ``y`` lines up with "
                     "``x`` from dim ``axis`` (-1: trailing dims).")
    return layer


elementwise_add = _elementwise("elementwise_add")
elementwise_sub = _elementwise("elementwise_sub")
elementwise_mul = _elementwise("elementwise_mul")
elementwise_div = _elementwise("elementwise_div")
elementwise_max = _elementwise("elementwise_max")
elementwise_min = _elementwise("elementwise_min")
elementwise_pow = _elementwise("elementwise_pow")


def scale(x: Variable, scale: float = 1.0, bias: float = 0.0, bias_after_scale: bool = True,
          act: str | None = None, name: str | None = None) -> Variable:
    """``scale * x + bias`` (or ``scale * (x + bias)``)."""
    return _simple("scale", {"X": [x]}, {"scale": float(scale), "bias": float(bias),
                                         "bias_after_scale": bias_after_scale}, name, act=act)


def sums(input: list[Variable], out: Variable | None = None) -> Variable:
    """Elementwise sum of a list of variables."""
    helper = LayerHelper("sum")
    if out is None:
        out = helper.create_variable_for_type_inference(input[0].dtype)
    helper.append_op("sum", inputs={"X": input}, outputs={"Out": [out]})
    return out


# ----------------------------------------------------------------------------- conv / pool / norm

__all__ += ["conv2d", "pool2d", "batch_norm", "dropout", "layer_norm", "embedding", "cos_sim"]


def _int_pair(value: Any, name: str, layer: str) -> list[int]:
    if isinstance(value, int):
        return [value, value]
    if isinstance(value, (list, tuple)) and len(value) in (1, 2) and \
            all(isinstance(v, int) for v in value):
        return [int(v) for v in value] * (3 - len(value))
    raise TypeError(f"{layer}: {name} must be an int or a pair of ints, got {value!r}")


def _channels(layer: str, input: Variable, axis: int) -> int:
    if input.shape is None or len(input.shape) <= max(axis, 1):
        raise ValueError(f"{layer}: input {input.name!r} of shape {list(input.shape or [])} "
                         "has too few dimensions")
    c = input.shape[axis]
    if c <= 0:
        raise ValueError(f"{layer}: input {input.name!r} has an unknown channel dimension "
                         f"(shape {list(input.shape)})")
    return c


def conv2d(input: Variable, num_filters: int, filter_size: int | list[int], stride: Any = 1,
           padding: Any = 0, dilation: Any = 1, groups: int | None = None,
           param_attr: Any = None, bias_attr: Any = None, use_cudnn: bool = True,
           act: str | None = None, name: str | None = None,
           data_format: str = "NCHW") -> Variable:
    """2-D convolution over an NCHW (or ``data_format="NHWC"``) input, plus a per-channel
    bias and an activation.

    The filter has shape ``[num_filters, C / groups, kh, kw]`` and starts from
    ``Normal(0, sqrt(2 / (kh * kw * C)))``. ``padding`` is an int, ``[ph, pw]``,
    ``[top, bottom, left, right]``, per-dim pairs in the data layout, or 'SAME' / 'VALID'.
    With ``groups == C``, ``num_filters % C == 0`` and ``use_cudnn=False`` the op is
    ``depthwise_conv2d``, as in Fluid.

    Example::

        img = fluid.layers.data(name="img", shape=[1, 28, 28], dtype="float32")
        h = fluid.layers.conv2d(img, num_filters=8, filter_size=3, padding=1, act="relu")
    """
    from ..initializer import Normal
    check_vars("conv2d", input=input)
    last = check_format("conv2d", data_format, 2)
    if len(input.shape or ()) != 4:
        raise ValueError(f"conv2d: input {input.name!r} must be 4-D {data_format}, "
                         f"got shape {list(input.shape or [])}")
    channels = _channels("conv2d", input, channel_axis(2, last))
    op_type = "conv2d"
    if groups is not None and channels == groups and num_filters % channels == 0 \
            and not use_cudnn:
        op_type = "depthwise_conv2d"
    helper = LayerHelper(op_type, input=input, param_attr=param_attr, bias_attr=bias_attr,
                         act=act, name=name)
    dtype = helper.input_dtype()
    groups = 1 if groups is None else int(groups)
    if groups <= 0 or channels % groups:
        raise ValueError(f"conv2d: the {channels} input channels of {input.name!r} are not "
                         f"divisible by groups={groups}")
    kh, kw = _int_pair(filter_size, "filter_size", "conv2d")
    std = (2.0 / (kh * kw * channels)) ** 0.5
    w = helper.create_parameter(helper.param_attr, [num_filters, channels // groups, kh, kw],
                                dtype, default_initializer=Normal(0.0, std, 0))
    pads, algorithm = padding_attrs("conv2d", padding, 2, last, pairs=True)
    pre_bias = helper.create_variable_for_type_inference(dtype)
    helper.append_op(op_type, inputs={"Input": [input], "Filter": [w]},
                     outputs={"Output": [pre_bias]},
                     attrs={"strides": _int_pair(stride, "stride", "conv2d"),
                            "paddings": pads, "padding_algorithm": algorithm,
                            "dilations": _int_pair(dilation, "dilation", "conv2d"),
                            "groups": groups, "use_cudnn": use_cudnn, "use_mkldnn": False,
                            "fuse_relu_before_depthwise_conv": False,
                            "data_format": data_format})
    axis = channel_axis(2, last)
    pre_act = helper.append_bias_op(pre_bias, dim_start=axis, dim_end=axis + 1)
    return helper.append_activation(pre_act)


def pool2d(input: Variable, pool_size: Any = -1, pool_type: str = "max", pool_stride: Any = 1,
           pool_padding: Any = 0, global_pooling: bool = False, use_cudnn: bool = True,
           ceil_mode: bool = False, name: str | None = None, exclusive: bool = True,
           data_format: str = "NCHW") -> Variable:
    """Max or average pooling over an NCHW (or ``data_format="NHWC"``) input.

    ``exclusive=True`` averages over the in-bounds part of each window only;
    ``pool_padding`` takes the forms of ``conv2d``'s ``padding`` ('SAME', 'VALID', pairs).

    Example::

        p = fluid.layers.pool2d(h, pool_size=2, pool_type="max", pool_stride=2)
    """
    if pool_type not in ("max", "avg"):
        raise ValueError(f"pool2d: pool_type must be 'max' or 'avg', got {pool_type!r}")
    if not global_pooling and pool_size == -1:
        raise ValueError("pool2d: pool_size must be given when global_pooling is False")
    check_vars("pool2d", input=input)
    last = check_format("pool2d", data_format, 2)
    pads, algorithm = padding_attrs("pool2d", pool_padding, 2, last, pairs=False,
                                    name="pool_padding")
    if algorithm == "VALID" and ceil_mode:
        raise ValueError("pool2d: pool_padding 'VALID' needs ceil_mode=False")
    ksize = [1, 1] if global_pooling and pool_size == -1 else \
        _int_pair(pool_size, "pool_size", "pool2d")
    return _simple("pool2d", {"X": [input]}, {
        "pooling_type": pool_type, "ksize": ksize,
        "strides": _int_pair(pool_stride, "pool_stride", "pool2d"),
        "paddings": pads, "padding_algorithm": algorithm,
        "global_pooling": global_pooling, "use_cudnn": use_cudnn, "ceil_mode": ceil_mode,
        "use_mkldnn": False, "exclusive": exclusive, "data_format": data_format}, name)


def batch_norm(input: Variable, act: str | None = None, is_test: bool = False,
               momentum: float = 0.9, epsilon: float = 1e-05, param_attr: Any = None,
               bias_attr: Any = None, data_layout: str = "NCHW", in_place: bool = False,
               name: str | None = None, moving_mean_name: str | None = None,
               moving_variance_name: str | None = None,
               do_model_average_for_mean_and_var: bool = True,
               fuse_with_relu: bool = False, use_global_stats: bool = False) -> Variable:
    """Batch normalization; keeps moving statistics for inference.

    In training the batch statistics normalize the input and update the moving mean and
    variance in place: ``moving = moving * momentum + batch * (1 - momentum)``. With
    ``is_test`` (``Program.clone(for_test=True)`` sets it) or ``use_global_stats`` the
    moving statistics are used. The moving statistics are persistable, non-trainable
    parameters starting at 0 (mean) and 1 (variance). ``in_place`` is accepted for
    compatibility; the output is always a new variable. ``fuse_with_relu`` applies relu to
    the output (Fluid's fused kernel), before ``act``.

    Example::

        h = fluid.layers.batch_norm(fluid.layers.conv2d(img, 8, 3), act="relu")
    """
    from ..initializer import Constant
    from ..param_attr import ParamAttr

    helper = LayerHelper("batch_norm", input=input, param_attr=param_attr,
                         bias_attr=bias_attr, act=act, name=name)
    dtype = helper.input_dtype()
    if dtype == "float16":
        dtype = "float32"  # statistics and affine parameters stay in float32
    if data_layout not in ("NCHW", "NHWC"):
        raise ValueError(f"batch_norm: data_layout must be 'NCHW' or 'NHWC', "
                         f"got {data_layout!r}")
    axis = len(input.shape or ()) - 1 if data_layout == "NHWC" else 1
    shape = [_channels("batch_norm", input, axis)]
    scale = helper.create_parameter(helper.param_attr, shape, dtype,
                                    default_initializer=Constant(1.0))
    bias = helper.create_parameter(helper.bias_attr, shape, dtype, is_bias=True)
    stats = []
    for stat_name, value in ((moving_mean_name, 0.0), (moving_variance_name, 1.0)):
        attr = ParamAttr(name=stat_name, initializer=Constant(value), trainable=False,
                         do_model_average=do_model_average_for_mean_and_var)
        var = helper.create_parameter(attr, shape, dtype)
        var.stop_gradient = True
        stats.append(var)
    mean, variance = stats
    saved_mean = helper.create_variable_for_type_inference(dtype, stop_gradient=True)
    saved_variance = helper.create_variable_for_type_inference(dtype, stop_gradient=True)
    out = helper.create_variable_for_type_inference(helper.input_dtype())
    helper.append_op("batch_norm",
                     inputs={"X": [input], "Scale": [scale], "Bias": [bias], "Mean": [mean],
                             "Variance": [variance]},
                     outputs={"Y": [out], "MeanOut": [mean], "VarianceOut": [variance],
                              "SavedMean": [saved_mean], "SavedVariance": [saved_variance]},
                     attrs={"momentum": float(momentum), "epsilon": float(epsilon),
                            "is_test": is_test, "data_layout": data_layout,
                            "use_global_stats": use_global_stats})
    if fuse_with_relu:
        relu_out = helper.create_variable_for_type_inference(out.dtype)
        helper.append_op("relu", inputs={"X": [out]}, outputs={"Out": [relu_out]})
        out = relu_out
    return helper.append_activation(out)


def dropout(x: Variable, dropout_prob: float, is_test: bool = False, seed: int | None = None,
            name: str | None = None,
            dropout_implementation: str = "downgrade_in_infer") -> Variable:
    """Randomly zero elements of ``x`` with probability ``dropout_prob`` in training.

    ``downgrade_in_infer``: train ``x * mask``, infer ``x * (1 - p)``.
    ``upscale_in_train``: train ``x * mask / (1 - p)``, infer ``x``.
    A ``seed`` (or the program's ``random_seed``) fixes the mask: every run draws the same
    one, as in Fluid.

    Example::

        h = fluid.layers.dropout(h, dropout_prob=0.5, dropout_implementation="upscale_in_train")
    """
    helper = LayerHelper("dropout", name=name)
    if (seed is None or seed == 0) and helper.main_program.random_seed != 0:
        seed = helper.main_program.random_seed
    out = helper.create_variable_for_type_inference(x.dtype)
    mask = helper.create_variable_for_type_inference("uint8", stop_gradient=True)
    helper.append_op("dropout", inputs={"X": [x]}, outputs={"Out": [out], "Mask": [mask]},
                     attrs={"dropout_prob": float(dropout_prob), "is_test": is_test,
                            "fix_seed": seed is not None,
                            "seed": int(seed) if seed is not None else 0,
                            "dropout_implementation": dropout_implementation})
    return out


def layer_norm(input: Variable, scale: bool = True, shift: bool = True,
               begin_norm_axis: int = 1, epsilon: float = 1e-05, param_attr: Any = None,
               bias_attr: Any = None, act: str | None = None,
               name: str | None = None) -> Variable:
    """Normalize over the dims from ``begin_norm_axis`` on, then scale and shift.

    Example::

        h = fluid.layers.layer_norm(h, begin_norm_axis=1)
    """
    from ..initializer import Constant

    helper = LayerHelper("layer_norm", input=input, param_attr=param_attr,
                         bias_attr=bias_attr, act=act, name=name)
    dtype = helper.input_dtype()
    shape = input.shape or ()
    if not 0 < begin_norm_axis < len(shape):
        raise ValueError(f"layer_norm: begin_norm_axis must be in [1, {len(shape) - 1}] for "
                         f"input {input.name!r} of shape {list(shape)}, got {begin_norm_axis}")
    norm_size = numel(shape[begin_norm_axis:])
    if norm_size <= 0:
        raise ValueError(f"layer_norm: the normalized dims {list(shape[begin_norm_axis:])} of "
                         f"{input.name!r} must be known")
    inputs: dict[str, Any] = {"X": [input]}
    if scale:
        inputs["Scale"] = [helper.create_parameter(helper.param_attr, [norm_size], dtype,
                                                   default_initializer=Constant(1.0))]
    if shift:
        if bias_attr is False:
            raise ValueError("layer_norm: shift=True needs a bias; pass shift=False instead "
                             "of bias_attr=False")
        inputs["Bias"] = [helper.create_parameter(helper.bias_attr, [norm_size], dtype,
                                                  is_bias=True)]
    out = helper.create_variable_for_type_inference(dtype)
    mean = helper.create_variable_for_type_inference(dtype, stop_gradient=True)
    variance = helper.create_variable_for_type_inference(dtype, stop_gradient=True)
    helper.append_op("layer_norm", inputs=inputs,
                     outputs={"Y": [out], "Mean": [mean], "Variance": [variance]},
                     attrs={"epsilon": float(epsilon), "begin_norm_axis": begin_norm_axis})
    return helper.append_activation(out)


def embedding(input: Variable, size: list[int], is_sparse: bool = False,
              is_distributed: bool = False, padding_idx: int | None = None,
              param_attr: Any = None, dtype: Any = "float32") -> Variable:
    """Look up rows of a ``size = [vocab, dim]`` table for int64 ids.

    ``is_sparse=True`` makes the table's gradient a SelectedRows holding only the looked-up
    rows (optimizers then update only those rows). Ids equal to ``padding_idx`` (negative:
    counted from the end) give zero vectors and no gradient.

    Example::

        ids = fluid.layers.data(name="ids", shape=[1], dtype="int64")
        emb = fluid.layers.embedding(ids, size=[10000, 64], is_sparse=True)
    """
    if not isinstance(input, Variable):
        raise TypeError(f"embedding: input must be a Variable, got {type(input).__name__}")
    if len(size) != 2 or not all(isinstance(s, int) and s > 0 for s in size):
        raise ValueError(f"embedding: size must be [vocab_size, emb_dim] of positive ints, "
                         f"got {size!r}")
    if input.dtype not in ("int64", "int32"):
        raise TypeError(f"embedding: input {input.name!r} must hold int64 ids, "
                        f"got {input.dtype}")
    helper = LayerHelper("embedding", input=input, param_attr=param_attr)
    w = helper.create_parameter(helper.param_attr, list(size), dtype)
    if padding_idx is None:
        padding_idx = -1
    elif padding_idx < 0:
        padding_idx += size[0]
    if not -1 <= padding_idx < size[0]:
        raise ValueError(f"embedding: padding_idx must be in [-{size[0]}, {size[0]}), "
                         f"got {padding_idx}")
    out = helper.create_variable_for_type_inference(w.dtype)
    helper.append_op("lookup_table", inputs={"Ids": [input], "W": [w]}, outputs={"Out": [out]},
                     attrs={"is_sparse": is_sparse, "is_distributed": is_distributed,
                            "remote_prefetch": is_sparse and not is_distributed,
                            "padding_idx": padding_idx})
    return out


def cos_sim(X: Variable, Y: Variable) -> Variable:
    """Cosine similarity of the rows of ``X [N, D]`` and ``Y [N, D]`` (or ``[1, D]``, then
    compared with every row): ``[N, 1]``.

    Example::

        sim = fluid.layers.cos_sim(X=user_vec, Y=movie_vec)
    """
    helper = LayerHelper("cos_sim")
    out = helper.create_variable_for_type_inference(X.dtype)
    xnorm = helper.create_variable_for_type_inference(X.dtype, stop_gradient=True)
    ynorm = helper.create_variable_for_type_inference(X.dtype, stop_gradient=True)
    helper.append_op("cos_sim", inputs={"X": [X], "Y": [Y]},
                     outputs={"Out": [out], "XNorm": [xnorm], "YNorm": [ynorm]})
    return out



def hard_swish(x: Variable, threshold: float = 6.0, scale: float = 6.0, offset: float = 3.0,
               name: str | None = None) -> Variable:
    """``x * min(max(x + offset, 0), threshold) / scale`` (MobileNetV3), one ``hard_swish``
    op; its gradient is Fluid's: ``(2x + offset) / scale`` where
    ``0 < x + offset < threshold``, 1 at or above the threshold, 0 below.

    Example::

        y = fluid.layers.hard_swish(x)
    """
    if not isinstance(x, Variable):
        raise TypeError(f"hard_swish: x must be a Variable, got {type(x).__name__}")
    helper = LayerHelper("hard_swish", name=name)
    out = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op("hard_swish", inputs={"X": [x]}, outputs={"Out": [out]},
                     attrs={"threshold": float(threshold), "scale": float(scale),
                            "offset": float(offset)})
    return out


__all__ += ["hard_swish"]


def similarity_focus(input: Variable, axis: int, indexes: list[int],
                     name: str | None = None) -> Variable:
    """A 0/1 mask of ``input`` ``[N, C, A, B]``: for each of ``indexes`` along ``axis``
    (1, 2 or 3) the greedy one-to-one matching of the remaining two axes (largest value
    first, its row and column then excluded), the union over ``indexes``, repeated along
    ``axis``. No gradient, as in Fluid.

    Example::

        x = fluid.layers.data(name="x", shape=[3, 2, 2], dtype="float32")
        mask = fluid.layers.similarity_focus(input=x, axis=1, indexes=[0])
    """
    if not isinstance(input, Variable):
        raise TypeError(f"similarity_focus: input must be a Variable, got "
                        f"{type(input).__name__}")
    if isinstance(indexes, int):
        indexes = [indexes]
    helper = LayerHelper("similarity_focus", name=name)
    out = helper.create_variable_for_type_inference(input.dtype, stop_gradient=True)
    helper.append_op("similarity_focus", inputs={"X": [input]}, outputs={"Out": [out]},
                     attrs={"axis": int(axis), "indexes": [int(i) for i in indexes]})
    return out


__all__ += ["similarity_focus"]


def filter_by_instag(ins: Variable, ins_tag: Variable, filter_tag: Variable,
                     is_lod: bool) -> tuple[Variable, Variable]:
    """The instances of ``ins`` (rows, or with ``is_lod`` its LoD sequences) that carry a
    tag of ``filter_tag``: ``(out, loss_weight)``; ``ins_tag`` holds each instance's int64
    tags (one LoD sequence per instance). ``out`` has a LoD of the kept lengths and
    ``loss_weight`` a 1 per kept instance; when none is kept ``out`` is one zero row with
    weight 0. The gradient goes back to the kept rows.

    Example::

        ins = fluid.layers.data(name="Ins", shape=[32], lod_level=0, dtype="float64")
        ins_tag = fluid.layers.data(name="Ins_tag", shape=[1], lod_level=1, dtype="int64")
        filter_tag = fluid.layers.data(name="Filter_tag", shape=[1], dtype="int64")
        out, loss_weight = fluid.layers.filter_by_instag(ins, ins_tag, filter_tag, False)
    """
    for arg, v in (("ins", ins), ("ins_tag", ins_tag), ("filter_tag", filter_tag)):
        if not isinstance(v, Variable):
            raise TypeError(f"filter_by_instag: {arg} must be a Variable, got "
                            f"{type(v).__name__}")
    helper = LayerHelper("filter_by_instag")
    out = helper.create_variable_for_type_inference(ins.dtype)
    # float32, as Fluid's kernel writes it (whatever Ins is)
    weight = helper.create_variable_for_type_inference("float32", stop_gradient=True)
    index = helper.create_variable_for_type_inference("int64", stop_gradient=True)
    helper.append_op("filter_by_instag",
                     inputs={"Ins": [ins], "Ins_tag": [ins_tag], "Filter_tag": [filter_tag]},
                     outputs={"Out": [out], "LossWeight": [weight], "IndexMap": [index]},
                     attrs={"is_lod": bool(is_lod)})
    out.lod_level = 1
    return out, weight


__all__ += ["filter_by_instag"]


def bilinear_tensor_product(x: Variable, y: Variable, size: int, act: str | None = None,
                            name: str | None = None, param_attr: Any = None,
                            bias_attr: Any = None) -> Variable:
    """``out[n, k] = x[n] @ W[k] @ y[n] + b[k]`` with ``W [size, M, P]``.

    Example::

        score = fluid.layers.bilinear_tensor_product(user, item, size=8, act="tanh")
    """
    check_vars("bilinear_tensor_product", x=x, y=y)
    helper = LayerHelper("bilinear_tensor_product", param_attr=param_attr,
                         bias_attr=bias_attr, act=act, name=name)
    m, p = (x.shape or (0, 0))[-1], (y.shape or (0, 0))[-1]
    if len(x.shape or ()) != 2 or len(y.shape or ()) != 2 or m <= 0 or p <= 0:
        raise ValueError(f"bilinear_tensor_product: x and y must be 2-D with known widths, got "
                         f"{list(x.shape or [])} and {list(y.shape or [])}")
    dtype = x.dtype
    inputs: dict[str, Any] = {"X": [x], "Y": [y],
                              "Weight": [helper.create_parameter(helper.param_attr,
                                                                 [size, m, p], dtype)]}
    bias = helper.create_parameter(helper.bias_attr, [1, size], dtype, is_bias=True)
    if bias is not None:
        inputs["Bias"] = [bias]
    out = helper.create_variable_for_type_inference(dtype)
    helper.append_op("bilinear_tensor_product", inputs=inputs, outputs={"Out": [out]})
    return helper.append_activation(out)


def continuous_value_model(input: Variable, cvm: Variable, use_cvm: bool = True) -> Variable:
    """CTR models' show/click features: the first two columns of ``input`` (show, click)
    become ``log(show + 1)`` and ``log(click + 1) - log(show + 1)`` (``use_cvm``) or are
    dropped. As in Fluid, the gradient of those two columns is ``cvm`` itself."""
    check_vars("continuous_value_model", input=input, cvm=cvm)
    return append_one("cvm", {"X": [input], "CVM": [cvm]}, {"use_cvm": bool(use_cvm)},
                      input.dtype, out_slot="Y")


def __getattr__(name: str) -> object:
    # Fluid 1.6 spells the layers it defined here as fluid.layers.nn.<name>
    from .fluid_paths import resolve

    return resolve("nn", name)
