"""Input layers."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..dataio.legacy_reader import create_py_reader_by_data, double_buffer, py_reader, read_file
from ..dtypes import VarType
from ..framework import Variable, default_main_program

__all__ = ["data", "py_reader", "create_py_reader_by_data", "read_file", "double_buffer",
           "load"]


def data(name: str, shape: Sequence[int], append_batch_size: bool = True,
         dtype: Any = "float32", lod_level: int = 0, type: str = VarType.LOD_TENSOR,
         stop_gradient: bool = True) -> Variable:
    """Declare a variable fed at run time.

    A batch dimension -1 is prepended unless ``append_batch_size=False`` or ``shape`` already
    has a -1/None dimension (Fluid 1.x semantics).

    Example::

        x = fluid.layers.data(name="x", shape=[13], dtype="float32")   # shape [-1, 13]
    """
    if not isinstance(name, str):
        raise TypeError(f"data: name must be a str, got {type(name).__name__}")
    dims = []
    for d in shape:
        if d is None or d < 0:
            append_batch_size = False
            dims.append(-1)
        else:
            dims.append(int(d))
    if append_batch_size:
        dims = [-1] + dims
    return default_main_program().global_block().create_var(
        name=name, shape=dims, dtype=dtype, type=type, lod_level=lod_level,
        # as Fluid's layers.data: the Executor does not check what is fed (fluid.data does)
        stop_gradient=stop_gradient, is_data=True, need_check_feed=False)


def load(out: Variable, file_path: str, load_as_fp16: bool | None = None) -> None:
    """Append a ``load`` op: when the program runs, ``out`` gets its value from
    ``file_path``, a variables file written by ``fluid.io.save_vars`` (and the other
    ``save_*``) or ``fluid.save`` (``<path>.pdparams`` / ``.pdopt``): the entry named like
    ``out``, or the file's only entry. ``load_as_fp16`` converts it to float16.

    Example::

        w = fluid.layers.create_tensor(dtype="float32", name="fc_0.w_0", persistable=True)
        fluid.layers.load(w, "ckpt/__variables__.safetensors")
    """
    from ..layer_helper import LayerHelper

    if not isinstance(out, Variable):
        raise TypeError(f"load: out must be a Variable, got {type(out).__name__}")
    if not isinstance(file_path, str) or not file_path:
        raise ValueError(f"load: file_path must be a non-empty path, got {file_path!r}")
    attrs: dict[str, Any] = {"file_path": file_path}
    if load_as_fp16 is not None:
        attrs["load_as_fp16"] = bool(load_as_fp16)
    LayerHelper("load").append_op("load", inputs={}, outputs={"Out": [out]}, attrs=attrs)


def __getattr__(name: str) -> object:
    # Fluid 1.6's fluid.layers.io.<name> that live elsewhere, or are not provided (with
    # what to use instead)
    from .fluid_paths import resolve

    return resolve("io", name)
