"""``fluid.layers.tree_conv``: tree-based convolution over the nodes of trees (Fluid 1.6)."""

from __future__ import annotations

from typing import Any

from ..framework import Variable
from ..layer_helper import LayerHelper

__all__ = ["tree_conv"]


def tree_conv(nodes_vector: Variable, edge_set: Variable, output_size: int,
              num_filters: int = 1, max_depth: int = 2, act: str | None = "tanh",
              param_attr: Any = None, bias_attr: Any = None,
              name: str | None = None) -> Variable:
    """Tree-based convolution: ``[B, N, output_size, num_filters]`` from node features
    ``nodes_vector`` ``[B, N, F]`` and edges ``edge_set`` ``[B, E, 2]`` (int32 parent, child;
    nodes numbered from 1; a pair holding 0 ends a sample's edges). Node ``u``'s window is
    ``u`` and its descendants less than ``max_depth`` levels below, each weighted by its
    depth and its place among its siblings (``ops/tree_conv.py``); the filter is
    ``[F, 3, output_size, num_filters]``; then the bias ``[N, output_size, num_filters]``
    and ``act``.

    Example::

        nodes = fluid.layers.data(name="nodes", shape=[10, 5], dtype="float32")
        edges = fluid.layers.data(name="edges", shape=[10, 2], dtype="int32")
        out = fluid.layers.tree_conv(nodes, edges, output_size=6, num_filters=1, max_depth=2)
    """
    for arg, v in (("nodes_vector", nodes_vector), ("edge_set", edge_set)):
        if not isinstance(v, Variable):
            raise TypeError(f"tree_conv: {arg} must be a Variable, got {type(v).__name__}")
    shape = list(nodes_vector.shape or ())
    if len(shape) != 3:
        raise ValueError(f"tree_conv: nodes_vector must be [B, N, F], got shape {shape}")
    helper = LayerHelper("tree_conv", param_attr=param_attr, bias_attr=bias_attr, act=act,
                         name=name)
    dtype = nodes_vector.dtype
    w = helper.create_parameter(helper.param_attr, [shape[2], 3, output_size, num_filters],
                                dtype)
    out = helper.create_variable_for_type_inference(dtype)
    helper.append_op("tree_conv",
                     inputs={"NodesVector": [nodes_vector], "EdgeSet": [edge_set], "Filter": [w]},
                     outputs={"Out": [out]}, attrs={"max_depth": int(max_depth)})
    return helper.append_activation(helper.append_bias_op(out))
