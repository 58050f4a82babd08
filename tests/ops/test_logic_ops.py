"""Op table: comparison, logical and finiteness ops (isfinite / isinf / isnan)."""

import numpy as np
import pytest

from parafluid.testing import OpCase, check_op, rand, run_op

A, B = rand(3, 4, seed=1), rand(3, 4, seed=2)
B[0, 0] = A[0, 0]  # one tie, so equal / less_equal see both outcomes
X = rand(3, 4, seed=3)

NAN_INF = np.array([1.0, np.inf, -2.0], "float32")

CASES = [
    OpCase("isfinite", {"X": NAN_INF}, ref=lambda X: {"Out": np.array([False])}),
    OpCase("isfinite", {"X": X}, ref=lambda X: {"Out": np.array([True])}, id="isfinite_all"),
    OpCase("isinf", {"X": NAN_INF}, ref=lambda X: {"Out": np.array([True])}),
    OpCase("isnan", {"X": NAN_INF}, ref=lambda X: {"Out": np.array([False])}),
]
for name, fn in (("less_than", np.less), ("less_equal", np.less_equal),
                 ("greater_than", np.greater), ("greater_equal", np.greater_equal),
                 ("equal", np.equal), ("not_equal", np.not_equal)):
    CASES.append(OpCase(name, {"X": A, "Y": B}, ref=lambda X, Y, fn=fn: {"Out": fn(X, Y)}))
CASES.append(OpCase("less_than", {"X": A, "Y": B[0]}, ref=lambda X, Y: {"Out": X < Y},
                    id="less_than_broadcast"))
P, Q = A > 0, B > 0
for name, fn in (("logical_and", np.logical_and), ("logical_or", np.logical_or),
                 ("logical_xor", np.logical_xor)):
    CASES.append(OpCase(name, {"X": P, "Y": Q}, ref=lambda X, Y, fn=fn: {"Out": fn(X, Y)}))
CASES.append(OpCase("logical_not", {"X": P}, ref=lambda X: {"Out": ~X}))


@pytest.mark.parametrize("case", CASES, ids=str)
def test_op(case):
    check_op(case)


def test_logical_ops_want_bool():
    with pytest.raises(TypeError, match="logical op: X must be bool"):
        run_op(OpCase("logical_not", {"X": A}))
