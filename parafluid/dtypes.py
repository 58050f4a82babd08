"""Data types: Fluid's names (``'float32'``, ``VarType.FP32``) normalised to one string form."""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["VarType", "UnsupportedDtypeError", "convert_dtype", "to_torch", "to_numpy",
           "FLOAT_DTYPES", "convert_np_dtype_to_dtype_"]

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
            "half": "float16", "fp16": "float16", "fp32": "float32", "fp64": "float64",
            # Fluid's Python side passes float16 values as numpy uint16 holding their bits
            # (numpy had no float16 its C++ side could bind): a uint16 array is float16
            "uint16": "float16"}
_TORCH_TO_NAME = {t: name for name, (t, _) in _CANONICAL.items()}


class _Member(str):
    """A ``VarType`` member: the dtype's name as a string (what parafluid compares and stores),
    with Fluid's enum value for ``int()`` (framework.proto: FP32 is 5)."""

    value: int

    def __new__(cls, name: str, value: int) -> _Member:
        member = super().__new__(cls, name)
        member.value = value
        return member

    def __int__(self) -> int:
        return self.value

    def __reduce__(self) -> tuple:
        return (_Member, (str(self), self.value))


class VarType:
    """Fluid's ``core.VarDesc.VarType``: dtype constants plus variable kinds.

    Each member is the dtype's name (``VarType.FP32 == 'float32'``) and converts with
    ``int()`` to Fluid's enum value (``int(VarType.FP32) == 5``).
    """

    BOOL = _Member("bool", 0)
    INT16 = _Member("int16", 1)
    INT32 = _Member("int32", 2)
    INT64 = _Member("int64", 3)
    FP16 = _Member("float16", 4)
    FP32 = _Member("float32", 5)
    FP64 = _Member("float64", 6)
    SIZE_T = _Member("size_t", 19)
    UINT8 = _Member("uint8", 20)
    INT8 = _Member("int8", 21)
    LOD_TENSOR = _Member("lod_tensor", 7)
    SELECTED_ROWS = _Member("selected_rows", 8)
    FEED_MINIBATCH = _Member("feed_minibatch", 9)
    FETCH_LIST = _Member("fetch_list", 10)
    STEP_SCOPES = _Member("step_scopes", 11)
    LOD_RANK_TABLE = _Member("lod_rank_table", 12)
    LOD_TENSOR_ARRAY = _Member("lod_tensor_array", 13)
    PLACE_LIST = _Member("place_list", 14)
    READER = _Member("reader", 15)
    RAW = _Member("raw", 17)
    TUPLE = _Member("tuple", 18)


_ENUM_NAMES = {m.value: str.__str__(m) for m in vars(VarType).values()
               if isinstance(m, _Member) and str.__str__(m) in _CANONICAL}
_NUMPY_NAMES: dict[np.dtype, str] = {}  # numpy dtype -> canonical name, filled on use


class UnsupportedDtypeError(TypeError, ValueError):
    """A dtype parafluid does not know. Both a TypeError (what a wrong argument type raises)
    and a ValueError (what Fluid's ``convert_dtype`` raises for an unknown name), so code
    written against either catches it."""


def convert_dtype(dtype: object) -> str:
    """Return the canonical name ('float32', 'int64', ...) of a str, numpy or torch dtype."""
    if isinstance(dtype, str):
        name = _ALIASES.get(dtype, dtype)
        if name in _CANONICAL:
            # NOTE: a VarType member becomes the plain name: programs hold plain strings
            return name if type(name) is str else str.__str__(name)
    elif isinstance(dtype, (int, np.integer)) and not isinstance(dtype, (bool, np.bool_)):
        # NOTE: Fluid's ops store dtype attributes as framework.proto enum values, and its
        # programs pass them as ints (``int(VarType.FP64)``): 6 means float64.
        name = _ENUM_NAMES.get(int(dtype))
        if name is not None:
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
        name = _ALIASES.get(name, name)  # type: ignore[arg-type]
        if name in _CANONICAL:
            if isinstance(dtype, np.dtype):
                _NUMPY_NAMES[dtype] = name
            return name
    raise UnsupportedDtypeError(f"unsupported dtype {dtype!r}; expected one of "
                                f"{sorted(_CANONICAL)}")


def to_torch(dtype: str) -> torch.dtype:
    return _CANONICAL[dtype][0]


def to_numpy(dtype: str) -> type:
    np_type = _CANONICAL[dtype][1]
    if np_type is None:
        raise TypeError(f"dtype {dtype} has no numpy equivalent")
    return np_type


def convert_np_dtype_to_dtype_(np_dtype: object) -> _Member:
    """Fluid's ``framework.convert_np_dtype_to_dtype_``: the ``VarType`` member of a numpy
    dtype (or its name), e.g. ``np.float32`` -> ``VarType.FP32`` (``int()`` gives 5)."""
    name = np.dtype(np_dtype).name  # type: ignore[call-overload]
    for member in vars(VarType).values():
        if isinstance(member, _Member) and str(member) == name:
            return member
    raise ValueError(f"Not supported numpy dtype {name}")
