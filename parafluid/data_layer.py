"""``fluid.data``: Fluid 1.6's input declaration, with the full shape given by the user.

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

__all__ = ["data"]


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
