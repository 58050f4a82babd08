"""Dtype attributes given as framework.proto enum values (``int(VarType.FP64)``), as Fluid's
programs store and pass them."""

from __future__ import annotations

import numpy as np
import pytest

from parafluid.dtypes import VarType, convert_dtype
from parafluid.testing import OpCase, check_op, rand

CASES = [
    OpCase("cast", {"X": rand(3, 4).astype("float32")},
           attrs={"in_dtype": int(VarType.FP32), "out_dtype": int(VarType.FP64)},
           ref=lambda X: {"Out": X.astype("float64")}, id="cast_enum_f32_to_f64"),
    OpCase("cast", {"X": np.array([[1.7, -2.2], [0.0, 3.9]])},
           attrs={"in_dtype": int(VarType.FP64), "out_dtype": int(VarType.INT32)},
           ref=lambda X: {"Out": X.astype("int32")}, id="cast_enum_f64_to_int32"),
    OpCase("cast", {"X": np.array([[3], [0]], dtype="int64")},
           attrs={"in_dtype": int(VarType.INT64), "out_dtype": int(VarType.UINT8)},
           ref=lambda X: {"Out": X.astype("uint8")}, id="cast_enum_int64_to_uint8"),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_op(case: OpCase) -> None:
    check_op(case)


def test_enum_values_name_their_dtype_and_others_are_refused() -> None:
    assert [convert_dtype(v) for v in (0, 1, 2, 3, 4, 5, 6, 20, 21)] == [
        "bool", "int16", "int32", "int64", "float16", "float32", "float64", "uint8", "int8"]
    for bad in (7, 19, True):  # a variable kind, size_t, and a bool are no dtypes
        with pytest.raises(TypeError, match="unsupported dtype"):
            convert_dtype(bad)
