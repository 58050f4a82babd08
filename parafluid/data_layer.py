"""``fluid.data`` and ``fluid.embedding``: Fluid 1.6's full-shape input declaration and
its embedding that keeps every dimension of the ids.

Unlike ``fluid.layers.data``, no batch dimension is prepended: write it yourself (``None``
or -1 for a size known only at run time).

Example::

    import parafluid as fluid
    img = fluid.data(name="img", shape=[None, 1, 28, 28], dtype="float32")
    label = fluid.data(name="label", shape=[None, 1], dtype="int64")
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .dtypes import VarType
from .framework import Variable, default_main_program
from .layer_helper import LayerHelper
from .layers.arg_checks import checked

__all__ = ["data", "embedding", "one_hot"]


def data(name: str, shape: Sequence[int | None], dtype: Any = "float32",
         lod_level: int = 0) -> Variable:
    """Declare a fed variable of exactly ``shape`` (``None`` / -1: any size).

    Args:
        name: the feed name.
        shape: the full shape, batch dimension included.
        dtype: the element type.
        lod_level: 1 for a batch of variable-length sequences (feed a LoDTensor).
    """
    if not isinstance(name, str):
        raise TypeError(f"fluid.data: name must be a str, got {type(name).__name__}")
    if isinstance(shape, int) or not isinstance(shape, (list, tuple)):
        raise TypeError(f"fluid.data: shape must be a list of ints (None for unknown), got "
                        f"{shape!r}")
    dims = [-1 if d is None else int(d) for d in shape]
    return default_main_program().global_block().create_var(
        name=name, shape=dims, dtype=dtype, type=VarType.LOD_TENSOR, lod_level=lod_level,
        stop_gradient=True, is_data=True, need_check_feed=True)


@checked("embedding")
def embedding(input: Variable, size: Sequence[int], is_sparse: bool = False,
              is_distributed: bool = False, padding_idx: int | None = None,
              param_attr: Any = None, dtype: Any = "float32") -> Variable:
    """Fluid 1.6's ``fluid.embedding``: like ``fluid.layers.embedding``, but the output is
    ``input.shape + [size[1]]`` (ids ``[N, 1]`` give ``[N, 1, D]``; ``layers.embedding``
    drops that trailing 1). Op ``lookup_table_v2``.

    Example::

        words = fluid.data(name="words", shape=[None], dtype="int64", lod_level=1)
        emb = fluid.embedding(input=words, size=[5000, 32], is_sparse=True)   # [-1, 32]
    """
    if len(size) != 2 or not all(isinstance(s, int) and s > 0 for s in size):
        raise ValueError(f"embedding: size must be [vocab_size, emb_dim] of positive ints, "
                         f"got {size!r}")
    helper = LayerHelper("embedding", input=input, param_attr=param_attr)
    w = helper.create_parameter(helper.param_attr, list(size), dtype)
    pad = -1 if padding_idx is None else (padding_idx + size[0] if padding_idx < 0
                                          else padding_idx)
    if not -1 <= pad < size[0]:
        raise ValueError(f"embedding: padding_idx must be in [-{size[0]}, {size[0]}), "
                         f"got {padding_idx}")
    out = helper.create_variable_for_type_inference(w.dtype)
    helper.append_op("lookup_table_v2", inputs={"Ids": [input], "W": [w]},
                     outputs={"Out": [out]},
                     attrs={"is_sparse": is_sparse, "is_distributed": is_distributed,
                            "remote_prefetch": is_sparse and not is_distributed,
                            "padding_idx": pad})
    out.lod_level = input.lod_level
    return out


def one_hot(input: Variable, depth: int | Variable, allow_out_of_range: bool = False) -> Variable:
    """Fluid 1.6's ``fluid.one_hot`` (op ``one_hot_v2``): float32 one-hot rows with every dim
    of ``input`` kept (ids ``[N]`` give ``[N, depth]``, ids ``[N, 1]`` give
    ``[N, 1, depth]``), unlike ``fluid.layers.one_hot``, which replaces a trailing 1.
    ``depth`` is an int or a one-element int Variable. No gradient.

    Example::

        label = fluid.data(name="label", shape=[None], dtype="int64")
        onehot = fluid.one_hot(label, depth=10)   # [-1, 10]
    """
    from .layers.tensor import _one_hot_layer

    if not isinstance(input, Variable):
        raise TypeError(f"one_hot: input must be a Variable, got {type(input).__name__}")
    return _one_hot_layer("one_hot_v2", input, depth, allow_out_of_range)
