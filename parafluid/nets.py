"""``fluid.nets``: Fluid's composite networks, built from ordinary layers.

Example::

    img = fluid.layers.data(name="img", shape=[1, 28, 28], dtype="float32")
    h = fluid.nets.simple_img_conv_pool(img, num_filters=20, filter_size=5, pool_size=2,
                                        pool_stride=2, act="relu")
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from . import layers
from .framework import Variable

__all__ = ["simple_img_conv_pool", "img_conv_group", "sequence_conv_pool", "glu",
           "scaled_dot_product_attention"]


def simple_img_conv_pool(input: Variable, num_filters: int, filter_size: Any, pool_size: Any,
                         pool_stride: Any, pool_padding: Any = 0, pool_type: str = "max",
                         global_pooling: bool = False, conv_stride: Any = 1,
                         conv_padding: Any = 0, conv_dilation: Any = 1, conv_groups: int = 1,
                         param_attr: Any = None, bias_attr: Any = None, act: str | None = None,
                         use_cudnn: bool = True) -> Variable:
    """``conv2d`` (with ``act``) then ``pool2d``.

    Example::

        h = fluid.nets.simple_img_conv_pool(img, 20, 5, pool_size=2, pool_stride=2, act="relu")
    """
    conv = layers.conv2d(input=input, num_filters=num_filters, filter_size=filter_size,
                         stride=conv_stride, padding=conv_padding, dilation=conv_dilation,
                         groups=conv_groups, param_attr=param_attr, bias_attr=bias_attr,
                         act=act, use_cudnn=use_cudnn)
    return layers.pool2d(input=conv, pool_size=pool_size, pool_type=pool_type,
                         pool_stride=pool_stride, pool_padding=pool_padding,
                         global_pooling=global_pooling, use_cudnn=use_cudnn)


def _per_conv(value: Any, n: int, name: str) -> list[Any]:
    if isinstance(value, (list, tuple)):
        if len(value) != n:
            raise ValueError(f"img_conv_group: {name} has {len(value)} entries for {n} "
                             "convolutions")
        return list(value)
    return [value] * n


def img_conv_group(input: Variable, conv_num_filter: Sequence[int], pool_size: Any,
                   conv_padding: Any = 1, conv_filter_size: Any = 3,
                   conv_act: str | None = None, param_attr: Any = None,
                   conv_with_batchnorm: Any = False, conv_batchnorm_drop_rate: Any = 0.0,
                   pool_stride: Any = 1, pool_type: str = "max",
                   use_cudnn: bool = True) -> Variable:
    """A VGG block: one conv2d per entry of ``conv_num_filter`` (each optionally followed by
    batch_norm with ``conv_act`` and dropout), then one pool2d.

    Example::

        h = fluid.nets.img_conv_group(img, conv_num_filter=[16, 16], pool_size=2,
                                      conv_act="relu", conv_with_batchnorm=True, pool_stride=2)
    """
    if not isinstance(conv_num_filter, (list, tuple)) or not conv_num_filter:
        raise TypeError(f"img_conv_group: conv_num_filter must be a non-empty list of ints, "
                        f"got {conv_num_filter!r}")
    n = len(conv_num_filter)
    paddings = _per_conv(conv_padding, n, "conv_padding")
    sizes = _per_conv(conv_filter_size, n, "conv_filter_size")
    attrs = _per_conv(param_attr, n, "param_attr")
    with_bn = _per_conv(conv_with_batchnorm, n, "conv_with_batchnorm")
    drops = _per_conv(conv_batchnorm_drop_rate, n, "conv_batchnorm_drop_rate")
    tmp = input
    for i in range(n):
        tmp = layers.conv2d(input=tmp, num_filters=conv_num_filter[i], filter_size=sizes[i],
                            padding=paddings[i], param_attr=attrs[i],
                            act=None if with_bn[i] else conv_act, use_cudnn=use_cudnn)
        if with_bn[i]:
            tmp = layers.batch_norm(input=tmp, act=conv_act)
            if abs(drops[i]) > 1e-5:
                tmp = layers.dropout(x=tmp, dropout_prob=drops[i])
    return layers.pool2d(input=tmp, pool_size=pool_size, pool_type=pool_type,
                         pool_stride=pool_stride, use_cudnn=use_cudnn)


def sequence_conv_pool(input: Variable, num_filters: int, filter_size: int,
                       param_attr: Any = None, act: str = "sigmoid", pool_type: str = "max",
                       bias_attr: Any = None) -> Variable:
    """``sequence_conv`` (with ``act``) then ``sequence_pool``: one row per sequence.

    Example::

        sentence = fluid.nets.sequence_conv_pool(emb, num_filters=64, filter_size=3,
                                                 act="tanh", pool_type="max")
    """
    conv = layers.sequence_conv(input=input, num_filters=num_filters, filter_size=filter_size,
                                param_attr=param_attr, bias_attr=bias_attr, act=act)
    return layers.sequence_pool(input=conv, pool_type=pool_type)


def glu(input: Variable, dim: int = -1) -> Variable:
    """Gated linear unit: split ``input`` in two halves ``a, b`` along ``dim``; ``a * sigmoid(b)``.

    Example::

        out = fluid.nets.glu(fluid.layers.fc(x, size=64), dim=1)     # [N, 32]
    """
    a, b = layers.split(input, num_or_sections=2, dim=dim)
    return layers.elementwise_mul(x=a, y=layers.sigmoid(b))


def scaled_dot_product_attention(queries: Variable, keys: Variable, values: Variable,
                                 num_heads: int = 1, dropout_rate: float = 0.0) -> Variable:
    """Multi-head attention ``softmax(q kᵀ / sqrt(d)) v`` over 3-D ``[N, L, D]`` inputs.

    With ``num_heads > 1``, q, k and v are first projected by an ``fc`` each (as Fluid) and
    split into heads; the heads' results are joined back to ``[N, Lq, Dv]``.

    Example::

        ctx = fluid.nets.scaled_dot_product_attention(q, k, v, num_heads=2)
    """
    for arg, v in (("queries", queries), ("keys", keys), ("values", values)):
        if len(v.shape or ()) != 3:
            raise ValueError(f"scaled_dot_product_attention: {arg} must be 3-D [N, L, D], got "
                             f"shape {list(v.shape or [])}")
    if queries.shape[-1] != keys.shape[-1]:
        raise ValueError(f"scaled_dot_product_attention: queries have {queries.shape[-1]} "
                         f"features but keys {keys.shape[-1]}; they must be equal")
    if keys.shape[1] != values.shape[1] and -1 not in (keys.shape[1], values.shape[1]):
        raise ValueError(f"scaled_dot_product_attention: keys have {keys.shape[1]} steps but "
                         f"values {values.shape[1]}; they must be equal")
    for arg, v in (("queries", queries), ("values", values)):
        if v.shape[-1] % num_heads:
            raise ValueError(f"scaled_dot_product_attention: the {v.shape[-1]} features of "
                             f"{arg} do not split into num_heads={num_heads}")
    q, k, v = queries, keys, values
    if num_heads > 1:
        q = layers.fc(input=q, size=q.shape[-1], num_flatten_dims=2, bias_attr=False)
        k = layers.fc(input=k, size=k.shape[-1], num_flatten_dims=2, bias_attr=False)
        v = layers.fc(input=v, size=v.shape[-1], num_flatten_dims=2, bias_attr=False)

    def split_heads(x: Variable) -> Variable:
        if num_heads == 1:
            return x
        x = layers.reshape(x, shape=[0, 0, num_heads, x.shape[-1] // num_heads])
        return layers.transpose(x, perm=[0, 2, 1, 3])

    q, k, v = split_heads(q), split_heads(k), split_heads(v)
    scaled_q = layers.scale(q, scale=float(keys.shape[-1] // num_heads) ** -0.5)
    weights = layers.softmax(layers.matmul(scaled_q, k, transpose_y=True))
    if dropout_rate:
        weights = layers.dropout(weights, dropout_prob=dropout_rate, is_test=False)
    ctx = layers.matmul(weights, v)
    if num_heads == 1:
        return ctx
    ctx = layers.transpose(ctx, perm=[0, 2, 1, 3])
    return layers.reshape(ctx, shape=[0, 0, ctx.shape[2] * ctx.shape[3]])
