"""Op table: gradient-clipping ops and the step counter's increment."""

import numpy as np
import pytest

from parafluid.testing import OpCase, check_op, rand


def _clip_by_norm(X, attrs):
    norm = np.sqrt(np.sum(X * X))
    return {"Out": X * attrs["max_norm"] / max(norm, attrs["max_norm"])}


def _clip_by_global_norm(X, SquaredNorm, attrs):
    c = attrs["clip_norm"]
    return {"Out": X * c / max(np.sqrt(SquaredNorm[0]), c)}


# Values near the clamp bounds would make finite differences straddle the kink.
_AWAY = np.array([[-0.9, -0.35, 0.1], [0.45, 0.2, 0.8]])

CASES = [
    OpCase("clip_by_value", {"X": _AWAY}, attrs={"min": -0.3, "max": 0.5},
           ref=lambda X: {"Out": np.clip(X, -0.3, 0.5)}, grad=["X"]),
    OpCase("clip_by_norm", {"X": rand(3, 4)}, attrs={"max_norm": 0.5}, ref=_clip_by_norm,
           id="clip_by_norm_clipped"),
    OpCase("clip_by_norm", {"X": rand(3, 4)}, attrs={"max_norm": 50.0}, ref=_clip_by_norm,
           id="clip_by_norm_within"),
    OpCase("squared_l2_norm", {"X": rand(3, 4)},
           ref=lambda X: {"Out": np.array([np.sum(X * X)])}, grad=["X"]),
    OpCase("l1_norm", {"X": _AWAY}, ref=lambda X: {"Out": np.array([np.sum(np.abs(X))])},
           grad=["X"]),
    OpCase("clip_by_global_norm", {"X": rand(3, 4), "SquaredNorm": np.array([9.0])},
           attrs={"clip_norm": 1.5}, ref=_clip_by_global_norm),
    OpCase("increment", {"X": np.array([3], dtype="int64")}, attrs={"step": 2.0},
           ref=lambda X: {"Out": X + 2}, id="increment_int64"),
    OpCase("increment", {"X": np.array([0.5], dtype="float32")},
           ref=lambda X: {"Out": X + 1}, id="increment_float"),
    OpCase("exponential_decay_lr", {"Step": np.array([5], dtype="int64")},
           attrs={"learning_rate": 0.2, "decay_steps": 2, "decay_rate": 0.5, "staircase": True},
           ref=lambda Step: {"Out": np.array([0.2 * 0.5 ** 2], dtype="float32")}),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_op(case):
    check_op(case)
