"""Op table: pooling (pool2d, pool3d; max and average, global, adaptive, ceil mode)."""

import re

import numpy as np
import pytest
import torch.nn.functional as F

from parafluid.testing import OpCase, check_op, rand, run_op
from parafluid.testing.refs import adaptive_pool_ref, to_torch


def fluid_pool_ref(X, attrs):
    """Fluid's pool2d semantics written as loops: clipped windows, Fluid's divisors."""
    n, c, h, w = X.shape
    if attrs["global_pooling"]:
        kh, kw, sh, sw, ph, pw = h, w, 1, 1, 0, 0
    else:
        (kh, kw), (sh, sw), (ph, pw) = attrs["ksize"], attrs["strides"], attrs["paddings"]

    def out_size(size, k, s, p):  # Fluid's rule: ceil mode keeps a window in the padding
        return (size + 2 * p - k + (s - 1 if attrs["ceil_mode"] else 0)) // s + 1

    oh, ow = out_size(h, kh, sh, ph), out_size(w, kw, sw, pw)
    out = np.zeros((n, c, oh, ow), X.dtype)
    for i in range(oh):
        for j in range(ow):
            hs, ws = i * sh - ph, j * sw - pw
            he, we = min(hs + kh, h), min(ws + kw, w)
            hs, ws = max(hs, 0), max(ws, 0)
            win = X[:, :, hs:he, ws:we]
            if attrs["pooling_type"] == "max":
                out[:, :, i, j] = win.max(axis=(2, 3))
            else:
                div = win.shape[2] * win.shape[3] if attrs["exclusive"] else kh * kw
                out[:, :, i, j] = win.sum(axis=(2, 3)) / div
    return {"Out": out}


POOL = {"pooling_type": "max", "ksize": [2, 2], "strides": [2, 2], "paddings": [0, 0],
        "global_pooling": False, "exclusive": True, "ceil_mode": False}


POOL3 = {"pooling_type": "max", "ksize": [2, 2, 2], "strides": [2, 2, 2],
         "paddings": [0, 0, 0], "global_pooling": False, "exclusive": True, "ceil_mode": False}

CASES = [
    OpCase("pool2d", {"X": rand(1, 2, 4, 4)}, attrs=dict(POOL), ref=fluid_pool_ref,
           grad=["X"], id="pool2d_max"),
    OpCase("pool2d", {"X": rand(1, 2, 5, 5)},
           attrs={**POOL, "ksize": [3, 3], "paddings": [1, 1]}, ref=fluid_pool_ref,
           grad=["X"], id="pool2d_max_pad"),
    OpCase("pool2d", {"X": rand(1, 2, 5, 5)},
           attrs={**POOL, "pooling_type": "avg", "ksize": [3, 3], "paddings": [1, 1]},
           ref=fluid_pool_ref, grad=["X"], id="pool2d_avg_exclusive"),
    OpCase("pool2d", {"X": rand(1, 1, 5, 5)},
           attrs={**POOL, "pooling_type": "avg", "ksize": [2, 2], "paddings": [1, 1],
                  "exclusive": False, "ceil_mode": True},
           ref=fluid_pool_ref, grad=["X"], id="pool2d_avg_inclusive_ceil"),
    OpCase("pool2d", {"X": rand(1, 1, 5, 5)},
           attrs={**POOL, "ksize": [2, 2], "ceil_mode": True},
           ref=fluid_pool_ref, grad=["X"], id="pool2d_max_ceil"),
    OpCase("pool2d", {"X": rand(2, 3, 3, 4)},
           attrs={**POOL, "pooling_type": "avg", "global_pooling": True},
           ref=fluid_pool_ref, grad=["X"], id="pool2d_global_avg"),
    OpCase("pool3d", {"X": rand(1, 2, 4, 4, 4)}, attrs=dict(POOL3),
           ref=lambda X: {"Out": F.max_pool3d(to_torch(X), 2, 2).numpy()}, grad=["X"],
           id="pool3d_max"),
    OpCase("pool3d", {"X": rand(1, 1, 3, 3, 3)},
           attrs={**POOL3, "pooling_type": "avg", "ksize": [3, 3, 3], "strides": [1, 1, 1],
                  "paddings": [1, 1, 1]},
           ref=lambda X: {"Out": F.avg_pool3d(to_torch(X), 3, 1, 1,
                                              count_include_pad=False).numpy()},
           grad=["X"], id="pool3d_avg_exclusive"),
    OpCase("pool3d", {"X": rand(1, 2, 3, 5, 4)},
           attrs={**POOL3, "pooling_type": "avg", "ksize": [2, 2, 3], "adaptive": True},
           ref=lambda X: {"Out": F.adaptive_avg_pool3d(to_torch(X), [2, 2, 3]).numpy()}, grad=["X"],
           id="pool3d_adaptive_avg"),
    OpCase("pool2d", {"X": rand(2, 2, 5, 7)},
           attrs={"pooling_type": "avg", "ksize": [2, 3], "adaptive": True},
           ref=adaptive_pool_ref, grad=["X"], id="pool2d_adaptive_avg"),
    OpCase("pool2d", {"X": rand(1, 2, 7, 5)},
           attrs={"pooling_type": "max", "ksize": [3, 2], "adaptive": True},
           ref=adaptive_pool_ref, grad=["X"], id="pool2d_adaptive_max"),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_op(case):
    check_op(case)


@pytest.mark.parametrize("op,inputs,attrs,message", [
    ("pool2d", {"X": rand(1, 2, 4)}, {}, "must be 4-D"),
])
def test_bad_shapes_and_attrs_name_the_op(op, inputs, attrs, message):
    with pytest.raises(ValueError, match=r"(?s)" + op + ".*" + re.escape(message)):
        run_op(OpCase(op, inputs, attrs=attrs))
