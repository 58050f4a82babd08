"""Data types: Fluid's names (``'float32'``, ``VarType.FP32``) normalised to one string form."""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["VarType", "convert_dtype", "to_torch", "to_numpy", "FLOAT_DTYPES"]

_CANONICAL = {
    "float16": (torch.float16, np.float16),
    "bfloat16": (torch.bfloat16, None),
    "float32": (torch.float32, np.float32),
    "float64": (torch.float64, np.float64),
    "int8": (torch.int8, np.int8),
    "uint8": (torch.uint8, np.uint8),
    "int16": (torch.int16, np.int16),
    "int32": (torch.int32, np.int32),
    "int64": (torch.int64, np.int64),
    "bool": (torch.bool, np.bool_),
}
FLOAT_DTYPES = frozenset({"float16", "bfloat16", "float32", "float64"})

_ALIASES = {"float": "float32", "double": "float64", "int": "int32", "long": "int64",
            "half": "float16", "fp16": "float16", "fp32": "float32", "fp64": "float64"}
_TORCH_TO_NAME = {t: name for name, (t, _) in _CANONICAL.items()}


class VarType:
    """Fluid's ``core.VarDesc.VarType``: dtype constants plus variable kinds."""

    BOOL = "bool"
    INT16 = "int16"
    INT32 = "int32"
    INT64 = "int64"
    FP16 = "float16"
    FP32 = "float32"
    FP64 = "float64"
    UINT8 = "uint8"
    INT8 = "int8"
    LOD_TENSOR = "lod_tensor"
    SELECTED_ROWS = "selected_rows"
    LOD_TENSOR_ARRAY = "lod_tensor_array"
    RAW = "raw"
    # the holders of a program's feed / fetch ops (Fluid's prepend_feed_ops)
    FEED_MINIBATCH = "feed_minibatch"
    FETCH_LIST = "fetch_list"


_NUMPY_NAMES: dict[np.dtype, str] = {}  # numpy dtype -> canonical name, filled on use


def convert_dtype(dtype: object) -> str:
    """Return the canonical name ('float32', 'int64', ...) of a str, numpy or torch dtype."""
    if isinstance(dtype, str):
        name = _ALIASES.get(dtype, dtype)
        if name in _CANONICAL:
            return name
    elif isinstance(dtype, torch.dtype):
        if dtype in _TORCH_TO_NAME:
            return _TORCH_TO_NAME[dtype]
    else:
        if isinstance(dtype, np.dtype):
            # NOTE: every fed array asks this; np.dtype.name builds a string each time
            name = _NUMPY_NAMES.get(dtype)
            if name is not None:
                return name
        try:
            name = np.dtype(dtype).name  # type: ignore[arg-type]
        except TypeError:
            name = None
        if name in _CANONICAL:
            if isinstance(dtype, np.dtype):
                _NUMPY_NAMES[dtype] = name
            return name
    raise TypeError(f"unsupported dtype {dtype!r}; expected one of {sorted(_CANONICAL)}")


def to_torch(dtype: str) -> torch.dtype:
    return _CANONICAL[dtype][0]


def to_numpy(dtype: str) -> type:
    np_type = _CANONICAL[dtype][1]
    if np_type is None:
        raise TypeError(f"dtype {dtype} has no numpy equivalent")
    return np_type
