"""Op table: the elementwise ops on int32 / int64 operands compute in the operands' type, as
Fluid 1.6's integer kernels (C++ arithmetic: division truncates toward zero, ``%`` keeps the
sign of X, ``std::pow`` is truncated back to the integer type)."""

import numpy as np
import pytest
import torch

from parafluid.ops.registry import get_op_def
from parafluid.testing import OpCase, check_op

X = np.array([[7, -7, 9], [-9, 5, 0]], "int64")
Y = np.array([[3, 3, -4], [4, -2, 3]], "int64")
POW_Y = np.array([[3, 2, 0], [-1, 1, 2]], "int64")


def _c_div(x, y):
    # C++ integer division: the quotient is truncated toward zero (numpy's // floors)
    return (np.sign(x) * np.sign(y) * (np.abs(x) // np.abs(y))).astype(x.dtype)


def _c_pow(x, y):
    return np.trunc(np.power(x.astype("float64"), y.astype("float64"))).astype(x.dtype)


_REFS = {
    "elementwise_add": lambda x, y: x + y,
    "elementwise_sub": lambda x, y: x - y,
    "elementwise_mul": lambda x, y: x * y,
    "elementwise_div": _c_div,
    "elementwise_max": np.maximum,
    "elementwise_min": np.minimum,
    "elementwise_mod": np.fmod,
    "elementwise_floordiv": _c_div,
}


def _ref(fn):
    return lambda X, Y: {"Out": fn(X, Y)}


CASES = [
    OpCase(op, {"X": X.astype(dt), "Y": Y.astype(dt)}, ref=_ref(fn), id=f"{op}_{dt}")
    for op, fn in _REFS.items() for dt in ("int32", "int64")
] + [
    OpCase("elementwise_pow", {"X": X.astype(dt), "Y": POW_Y.astype(dt)}, ref=_ref(_c_pow),
           id=f"elementwise_pow_{dt}_negative_exponent")
    for dt in ("int32", "int64")
] + [
    OpCase("elementwise_div", {"X": X.astype("int32"), "Y": np.array([2, -3], "int32")},
           attrs={"axis": 0}, ref=lambda X, Y: {"Out": _c_div(X, Y.reshape(2, 1))},
           id="elementwise_div_int32_axis0"),
    OpCase("elementwise_div", {"X": X, "Y": np.array([4], "int64")},
           ref=lambda X, Y: {"Out": _c_div(X, Y)}, id="elementwise_div_int64_scalar_y"),
    OpCase("elementwise_mod", {"X": X.astype("float64"), "Y": Y.astype("float64")},
           ref=lambda X, Y: {"Out": np.fmod(X, Y)}, id="elementwise_mod_float64_fmod"),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_op(case):
    check_op(case)


def test_in_place_integer_division_truncates_as_the_kernel():
    x = torch.tensor([[7, -7, 9]], dtype=torch.int64)
    get_op_def("elementwise_div").inplace(x, torch.tensor([2], dtype=torch.int64), {"axis": -1})
    assert x.tolist() == [[3, -3, 4]]


def test_integer_division_by_zero_is_an_error():
    case = OpCase("elementwise_div", {"X": X, "Y": np.zeros_like(Y)})
    with pytest.raises(Exception, match="division by zero"):
        check_op(case)
