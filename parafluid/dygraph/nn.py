"""``fluid.dygraph``'s layer classes (Fluid 1.6 ``dygraph/nn.py``): ``FC``, ``Conv2D``,
``Pool2D``, ``BatchNorm``, ``Embedding``, ... as ``Layer`` objects.

Each ``forward`` calls the ``fluid.layers`` function of the same name, so the ops are that
function's in both modes (appended to the Program in static mode, run at once inside
``fluid.dygraph.guard()``). The parameters that function asks for come from the object
(``layer_helper.parameter_source``): on the first call they are made as the function makes
them (its shapes and default initializers), named ``<full_name>.w_<n>`` / ``.b_<n>`` unless
a ``ParamAttr`` names them, and registered on the object; every later call gets the same
ones, so a layer called twice shares its weights.

Example::

    import parafluid as fluid
    conv = fluid.dygraph.Conv2D("conv", num_filters=8, filter_size=3, act="relu")
    pool = fluid.dygraph.Pool2D("pool", pool_size=2, pool_type="max", pool_stride=2)
    img = fluid.layers.data(name="img", shape=[1, 28, 28], dtype="float32")
    y = pool(conv(img))              # static mode: ops of conv2d, relu, pool2d
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import framework, layers
from ..framework import Variable
from .base import to_variable
from .function_layer import FunctionLayer as _FunctionLayer
from .layers import _on_build
from .sequence_nn import RowConv, SequenceConv  # noqa: F401  (nn.RowConv, as Fluid 1.6's)

__all__ = ["FC", "Conv2D", "Conv3D", "Pool2D", "BatchNorm", "Embedding", "LayerNorm", "GRUUnit",
           "NCE", "PRelu", "BilinearTensorProduct", "Conv2DTranspose", "Conv3DTranspose",
           "GroupNorm", "SpectralNorm", "TreeConv", "Linear"]


def _as_variable(value: Any) -> Any:
    """A numpy array as an imperative variable (``to_variable``); anything else as is."""
    return to_variable(value) if isinstance(value, np.ndarray) else value


class FC(_FunctionLayer):
    """``fluid.layers.fc`` as a layer: ``act(flatten(input) @ weight + bias)``; several
    inputs get a weight each (``_w0``, ``_w1``, ...; ``weight`` is then their list, as
    Fluid's), and one ``bias``.

    Example::

        fc = fluid.dygraph.FC("fc", size=10, act="softmax")
        prob = fc(x)
    """

    _fluid_names = {"_w": "weight", "_b": "bias"}
    _optional = ("bias",)

    def __init__(self, name_scope: str, size: int, num_flatten_dims: int = 1,
                 param_attr: Any = None, bias_attr: Any = None, act: str | None = None,
                 is_test: bool = False, dtype: str = "float32") -> None:
        super().__init__(name_scope, dtype)
        self._size, self._num_flatten_dims = size, num_flatten_dims
        self._param_attr, self._bias_attr, self._act = param_attr, bias_attr, act
        self._is_test = is_test

    def __getattr__(self, name: str) -> Any:
        params = self.__dict__.get("_parameters", {})
        if name in ("weight", "_w") and "_w0" in params:
            weights = [params[f"_w{i}"] for i in range(len(params)) if f"_w{i}" in params]
            return weights if name == "weight" else weights[0]
        return super().__getattr__(name)

    def forward(self, input: Variable | list[Variable]) -> Variable:  # noqa: A002
        # NOTE: as Fluid 1.6's FC (through to_variable), numpy inputs are taken in the
        # imperative mode
        if framework.in_dygraph_mode():
            if isinstance(input, (list, tuple)):
                input = [_as_variable(x) for x in input]  # noqa: A001
            else:
                input = _as_variable(input)  # noqa: A001
        if self._supplied is None and isinstance(input, (list, tuple)) and len(input) > 1:
            # fc asks for one weight per input, then the bias
            self._param_names = tuple(f"_w{i}" for i in range(len(input))) + ("bias",)
        return self._call_function(layers.fc, input, self._size, self._num_flatten_dims,
                                   self._param_attr, self._bias_attr, self._act,
                                   is_test=self._is_test)


class Linear(_FunctionLayer):
    """``act(input @ weight + bias)`` over the last dimension, with ``weight`` ``[input_dim,
    output_dim]`` and ``bias`` ``[output_dim]`` made at construction (Fluid 1.6 release's
    ``fluid.dygraph.Linear``; the ops are ``fluid.layers.fc``'s).

    Example::

        linear = fluid.dygraph.Linear(32, 10, act="relu")
        y = linear(x)        # x: [..., 32]
    """

    def __init__(self, input_dim: int, output_dim: int, param_attr: Any = None,
                 bias_attr: Any = None, act: str | None = None,
                 dtype: str = "float32") -> None:
        super().__init__("linear", dtype)
        self._act, self._bias_attr = act, bias_attr
        self.weight = self.create_parameter(param_attr, [input_dim, output_dim], dtype)
        bias = self.create_parameter(bias_attr, [output_dim], dtype, is_bias=True)
        if bias is not None:
            self.bias = bias
        self._supplied = [self.weight] + ([bias] if bias is not None else [])

    def forward(self, input: Variable) -> Variable:  # noqa: A002
        return self._call_function(layers.fc, input, self.weight.shape[1],
                                   len(input.shape) - 1, None,
                                   False if self._bias_attr is False else None, self._act)


class _Conv(_FunctionLayer):
    _fluid_names = {"_filter_param": "weight", "_bias_param": "bias"}
    _optional = ("bias",)

    def __init__(self, name_scope: str, num_filters: int, filter_size: Any, stride: Any = 1,
                 padding: Any = 0, dilation: Any = 1, groups: int | None = None,
                 param_attr: Any = None, bias_attr: Any = None, use_cudnn: bool = True,
                 act: str | None = None, dtype: str = "float32") -> None:
        super().__init__(name_scope, dtype)
        self._args = dict(num_filters=num_filters, filter_size=filter_size, stride=stride,
                          padding=padding, dilation=dilation, groups=groups,
                          param_attr=param_attr, bias_attr=bias_attr, use_cudnn=use_cudnn,
                          act=act)


class Conv2D(_Conv):
    """``fluid.layers.conv2d`` as a layer (filter ``weight`` ``[num_filters, C / groups,
    kh, kw]``, ``bias``).

    Example::

        conv = fluid.dygraph.Conv2D("conv", num_filters=8, filter_size=3, padding=1)
    """

    _function = staticmethod(layers.conv2d)


class Conv3D(_Conv):
    """``fluid.layers.conv3d`` as a layer.

    Example::

        conv = fluid.dygraph.Conv3D("conv3d", num_filters=4, filter_size=3)
    """

    _function = staticmethod(layers.conv3d)

    def __init__(self, name_scope: str, num_filters: int, filter_size: Any, stride: Any = 1,
                 padding: Any = 0, dilation: Any = 1, groups: int | None = None,
                 param_attr: Any = None, bias_attr: Any = None, use_cudnn: bool = True,
                 act: str | None = None) -> None:
        super().__init__(name_scope, num_filters, filter_size, stride, padding, dilation,
                         groups, param_attr, bias_attr, use_cudnn, act)


class _ConvTranspose(_FunctionLayer):
    _fluid_names = {"_img_filter": "weight", "_bias_param": "bias"}
    _optional = ("bias",)
    _bias_unless_asked = True  # False: a bias only when bias_attr is given (Fluid's 3-D layer)

    def __init__(self, name_scope: str, num_filters: int, output_size: Any = None,
                 filter_size: Any = None, padding: Any = 0, stride: Any = 1,
                 dilation: Any = 1, groups: int | None = None, param_attr: Any = None,
                 bias_attr: Any = None, use_cudnn: bool = True, act: str | None = None,
                 name: str | None = None) -> None:
        super().__init__(name_scope)
        if not self._bias_unless_asked and not bias_attr:
            bias_attr = False
        self._args = dict(num_filters=num_filters, output_size=output_size,
                          filter_size=filter_size, padding=padding, stride=stride,
                          dilation=dilation, groups=groups, param_attr=param_attr,
                          bias_attr=bias_attr, use_cudnn=use_cudnn, act=act, name=name)


class Conv2DTranspose(_ConvTranspose):
    """``fluid.layers.conv2d_transpose`` as a layer.

    Example::

        up = fluid.dygraph.Conv2DTranspose("up", num_filters=4, filter_size=2, stride=2)
    """

    _function = staticmethod(layers.conv2d_transpose)


class Conv3DTranspose(_ConvTranspose):
    """``fluid.layers.conv3d_transpose`` as a layer.

    Example::

        up = fluid.dygraph.Conv3DTranspose("up3d", num_filters=4, filter_size=2, stride=2)
    """

    _function = staticmethod(layers.conv3d_transpose)
    # NOTE: Fluid 1.6's Conv3DTranspose makes its bias under ``if self._bias_attr:`` (the
    # default, None, makes none), unlike its 2-D layer
    _bias_unless_asked = False


class Pool2D(_FunctionLayer):
    """``fluid.layers.pool2d`` as a layer (no parameters).

    Example::

        pool = fluid.dygraph.Pool2D("pool", pool_size=2, pool_type="avg", pool_stride=2)
    """

    _function = staticmethod(layers.pool2d)

    def __init__(self, name_scope: str, pool_size: Any = -1, pool_type: str = "max",
                 pool_stride: Any = 1, pool_padding: Any = 0, global_pooling: bool = False,
                 use_cudnn: bool = True, ceil_mode: bool = False, exclusive: bool = True,
                 dtype: str = "float32") -> None:
        super().__init__(name_scope, dtype)
        self._args = dict(pool_size=pool_size, pool_type=pool_type, pool_stride=pool_stride,
                          pool_padding=pool_padding, global_pooling=global_pooling,
                          use_cudnn=use_cudnn, ceil_mode=ceil_mode, exclusive=exclusive)


class BatchNorm(_FunctionLayer):
    """``fluid.layers.batch_norm`` as a layer: ``weight`` (scale), ``bias``, and the moving
    statistics ``_mean`` / ``_variance`` (parameters that are not trained).

    Example::

        bn = fluid.dygraph.BatchNorm("bn", num_channels=8, act="relu")
    """

    _fluid_names = {"_scale": "weight", "_bias": "bias"}

    _function = staticmethod(layers.batch_norm)
    _param_names = ("weight", "bias", "_mean", "_variance")

    def __init__(self, name_scope: str, num_channels: int, act: str | None = None,
                 is_test: bool = False, momentum: float = 0.9, epsilon: float = 1e-05,
                 param_attr: Any = None, bias_attr: Any = None, dtype: str = "float32",
                 data_layout: str = "NCHW", in_place: bool = False,
                 moving_mean_name: str | None = None, moving_variance_name: str | None = None,
                 do_model_average_for_mean_and_var: bool = True, fuse_with_relu: bool = False,
                 use_global_stats: bool = False, trainable_statistics: bool = False) -> None:
        super().__init__(name_scope, dtype)
        if trainable_statistics:
            raise ValueError("BatchNorm: trainable_statistics=True (batch statistics in "
                             "inference) is not provided; leave it False")
        self._num_channels = num_channels
        self._args = dict(act=act, is_test=is_test, momentum=momentum, epsilon=epsilon,
                          param_attr=param_attr, bias_attr=bias_attr, data_layout=data_layout,
                          in_place=in_place, moving_mean_name=moving_mean_name,
                          moving_variance_name=moving_variance_name,
                          do_model_average_for_mean_and_var=do_model_average_for_mean_and_var,
                          fuse_with_relu=fuse_with_relu, use_global_stats=use_global_stats)

    def forward(self, input: Variable) -> Variable:  # noqa: A002
        channels = input.shape[1 if self._args["data_layout"] == "NCHW" else -1]
        if channels not in (-1, self._num_channels):
            raise ValueError(f"BatchNorm {self.full_name()}: num_channels is "
                             f"{self._num_channels} but input {input.name!r} of shape "
                             f"{list(input.shape)} has {channels}")
        return super().forward(input)


class Embedding(_FunctionLayer):
    """``fluid.layers.embedding`` as a layer (table ``weight`` ``size``).

    Example::

        emb = fluid.dygraph.Embedding("emb", size=[1000, 32])
        vectors = emb(ids)
    """

    _fluid_names = {"_w": "weight"}

    _function = staticmethod(layers.embedding)
    _param_names = ("weight",)

    def __init__(self, name_scope: str, size: list[int], is_sparse: bool = False,
                 is_distributed: bool = False, padding_idx: int | None = None,
                 param_attr: Any = None, dtype: str = "float32") -> None:
        super().__init__(name_scope, dtype)
        self._args = dict(size=size, is_sparse=is_sparse, is_distributed=is_distributed,
                          padding_idx=padding_idx, param_attr=param_attr, dtype=dtype)
        # NOTE: as Fluid 1.6's Embedding, the table is made here (its shape is ``size``), so
        # a layer never called has its weight too (with no gradient)
        weight = self.create_parameter(param_attr, list(size), dtype)
        if weight is not None:
            _on_build([weight])
            self.add_parameter("weight", weight)
        self._supplied = [weight]


class LayerNorm(_FunctionLayer):
    """``fluid.layers.layer_norm`` as a layer (``weight`` scale and ``bias`` when ``scale``
    / ``shift``).

    Example::

        ln = fluid.dygraph.LayerNorm("ln", begin_norm_axis=1)
    """

    _fluid_names = {"_scale_w": "weight", "_bias_w": "bias"}

    _function = staticmethod(layers.layer_norm)

    def __init__(self, name_scope: str, scale: bool = True, shift: bool = True,
                 begin_norm_axis: int = 1, epsilon: float = 1e-05, param_attr: Any = None,
                 bias_attr: Any = None, act: str | None = None) -> None:
        super().__init__(name_scope)
        self._args = dict(scale=scale, shift=shift, begin_norm_axis=begin_norm_axis,
                          epsilon=epsilon, param_attr=param_attr, bias_attr=bias_attr,
                          act=act)
        if not scale:
            self._param_names = ("bias",)


class GRUUnit(_FunctionLayer):
    """``fluid.layers.gru_unit`` as a layer: ``forward(input, hidden)`` on the projected
    input ``[N, size]`` returns ``(hidden, reset_hidden_prev, gate)``.

    Example::

        gru = fluid.dygraph.GRUUnit("gru", size=3 * 16)
        h, _, _ = gru(x_projected, h_prev)
    """

    _fluid_names = {"_weight": "weight", "_bias": "bias"}
    _optional = ("bias",)

    def __init__(self, name_scope: str, size: int, param_attr: Any = None,
                 bias_attr: Any = None, activation: str = "tanh",
                 gate_activation: str = "sigmoid", origin_mode: bool = False,
                 dtype: str = "float32") -> None:
        super().__init__(name_scope, dtype)
        self._args = dict(size=size, param_attr=param_attr, bias_attr=bias_attr,
                          activation=activation, gate_activation=gate_activation,
                          origin_mode=origin_mode)

    def forward(self, input: Variable, hidden: Variable) -> Any:  # noqa: A002
        return self._call_function(layers.gru_unit, input, hidden, **self._args)


class NCE(_FunctionLayer):
    """``fluid.layers.nce`` as a layer: ``forward(input, label, sample_weight=None)`` is the
    noise-contrastive loss per example.

    Example::

        nce = fluid.dygraph.NCE("nce", num_total_classes=1000, num_neg_samples=5)
        cost = nce(hidden, label)
    """

    _fluid_names = {"_w": "weight", "_b": "bias"}
    _optional = ("bias",)

    def __init__(self, name_scope: str, num_total_classes: int,
                 sample_weight: Variable | None = None, param_attr: Any = None,
                 bias_attr: Any = None, num_neg_samples: int | None = None,
                 sampler: str = "uniform", custom_dist: Any = None, seed: int = 0,
                 is_sparse: bool = False) -> None:
        super().__init__(name_scope)
        # the weight given here is used when forward gets none
        self._sample_weight = sample_weight
        # NOTE: as Fluid 1.6's NCE layer: a bias only when bias_attr is given (``if
        # self._bias_attr:``), unlike the nce function
        self._args = dict(num_total_classes=num_total_classes, param_attr=param_attr,
                          bias_attr=bias_attr if bias_attr else False,
                          num_neg_samples=num_neg_samples,
                          sampler=sampler, custom_dist=custom_dist, seed=seed,
                          is_sparse=is_sparse)

    def forward(self, input: Variable, label: Variable,  # noqa: A002
                sample_weight: Variable | None = None) -> Variable:
        if sample_weight is None:
            sample_weight = self._sample_weight
        return self._call_function(layers.nce, input, label, sample_weight=sample_weight,
                                   **self._args)


class PRelu(_FunctionLayer):
    """``fluid.layers.prelu`` as a layer (``weight``: the slopes for ``mode`` "all",
    "channel" or "element").

    Example::

        prelu = fluid.dygraph.PRelu("prelu", mode="channel")
    """

    _fluid_names = {"_alpha": "weight"}

    _param_names = ("weight",)

    def __init__(self, name_scope: str, mode: str, param_attr: Any = None) -> None:
        super().__init__(name_scope)
        self._mode, self._param_attr = mode, param_attr

    def forward(self, input: Variable) -> Variable:  # noqa: A002
        return self._call_function(layers.prelu, input, self._mode, self._param_attr)


class BilinearTensorProduct(_FunctionLayer):
    """``fluid.layers.bilinear_tensor_product`` as a layer: ``forward(x, y)``.

    Example::

        btp = fluid.dygraph.BilinearTensorProduct("btp", size=4)
        z = btp(x, y)
    """

    _fluid_names = {"_w": "weight", "_bias_param": "bias"}
    _optional = ("bias",)

    def __init__(self, name_scope: str, size: int, name: str | None = None,
                 act: str | None = None, param_attr: Any = None,
                 bias_attr: Any = None) -> None:
        super().__init__(name_scope)
        self._args = dict(size=size, act=act, name=name, param_attr=param_attr,
                          bias_attr=bias_attr)

    def forward(self, x: Variable, y: Variable) -> Variable:
        return self._call_function(layers.bilinear_tensor_product, x, y, **self._args)


class GroupNorm(_FunctionLayer):
    """``fluid.layers.group_norm`` as a layer.

    Example::

        gn = fluid.dygraph.GroupNorm("gn", groups=4)
    """

    _fluid_names = {"_scale": "weight", "_bias": "bias"}

    _function = staticmethod(layers.group_norm)

    def __init__(self, name_scope: str, groups: int, epsilon: float = 1e-05,
                 param_attr: Any = None, bias_attr: Any = None, act: str | None = None,
                 data_layout: str = "NCHW") -> None:
        super().__init__(name_scope)
        self._args = dict(groups=groups, epsilon=epsilon, param_attr=param_attr,
                          bias_attr=bias_attr, act=act, data_layout=data_layout)


class SpectralNorm(_FunctionLayer):
    """``fluid.layers.spectral_norm`` as a layer: ``forward(weight)`` divides ``weight`` by
    its largest singular value, estimated by power iteration on the vectors ``weight_u`` /
    ``weight_v`` (parameters that are not trained).

    Example::

        sn = fluid.dygraph.SpectralNorm("sn", dim=0, power_iters=2)
        w_normalized = sn(w)
    """

    _fluid_names = {"u": "weight_u", "v": "weight_v"}

    _param_names = ("weight_u", "weight_v")

    def __init__(self, name_scope: str, dim: int = 0, power_iters: int = 1,
                 eps: float = 1e-12, name: str | None = None) -> None:
        super().__init__(name_scope)
        self._args = dict(dim=dim, power_iters=power_iters, eps=eps, name=name)

    def forward(self, weight: Variable) -> Variable:
        return self._call_function(layers.spectral_norm, weight, **self._args)


class TreeConv(_FunctionLayer):
    """``fluid.layers.tree_conv`` as a layer: ``forward(nodes_vector, edge_set)``.

    Example::

        tc = fluid.dygraph.TreeConv("tree", output_size=6, num_filters=1, max_depth=2)
        out = tc(nodes, edges)
    """

    _fluid_names = {"W": "weight", "_bias_param": "bias"}
    _optional = ("bias",)

    def __init__(self, name_scope: str, output_size: int, num_filters: int = 1,
                 max_depth: int = 2, act: str | None = "tanh", param_attr: Any = None,
                 bias_attr: Any = None, name: str | None = None) -> None:
        super().__init__(name_scope)
        # NOTE: as Fluid 1.6's TreeConv layer: a bias only when bias_attr is given
        self._args = dict(output_size=output_size, num_filters=num_filters,
                          max_depth=max_depth, act=act, param_attr=param_attr,
                          bias_attr=bias_attr if bias_attr else False, name=name)

    def forward(self, nodes_vector: Variable, edge_set: Variable) -> Variable:
        return self._call_function(layers.tree_conv, nodes_vector, edge_set, **self._args)
