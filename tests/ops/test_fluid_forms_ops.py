"""Op table: values and input forms that Fluid 1.6's own op tests rely on: im2sequence with
real image sizes larger than the image (the grid reaches past it and reads zeros), gather_nd
refusing an index deeper than X with Fluid's wording."""

import numpy as np
import pytest

from parafluid.testing import OpCase, check_op, rand


def im2seq_ref(X, Y, attrs):
    """Per image: a grid of filter positions from its real size (divided by out_stride,
    rounded up); a position past the image reads zeros (padding)."""
    (kh, kw), (sh, sw) = attrs["kernels"], attrs["strides"]
    pu, pl, pd, pr = attrs["paddings"]
    osh, osw = attrs["out_stride"]
    n, c, h, w = X.shape
    rows = []
    for i in range(n):
        rh, rw = -(-int(Y[i, 0]) // osh), -(-int(Y[i, 1]) // osw)
        gh = (rh + pu + pd - kh) // sh + 1
        gw = (rw + pl + pr - kw) // sw + 1
        for r in range(gh):
            for q in range(gw):
                patch = np.zeros((c, kh, kw))
                for a in range(kh):
                    for b in range(kw):
                        y, x = r * sh + a - pu, q * sw + b - pl
                        if 0 <= y < h and 0 <= x < w:
                            patch[:, a, b] = X[i, :, y, x]
                rows.append(patch.reshape(-1))
    return {"Out": np.array(rows)}


CASES = [
    OpCase("im2sequence", {"X": rand(3, 1, 4, 5, seed=3),
                           "Y": np.array([[8, 10], [5, 8], [5, 8]], "float64")},
           attrs={"kernels": [2, 1], "strides": [1, 1], "paddings": [0, 0, 0, 0],
                  "out_stride": [1, 1]}, ref=im2seq_ref, grad=["X"],
           id="im2sequence_real_size_past_the_image"),
    OpCase("im2sequence", {"X": rand(2, 2, 5, 4, seed=4),
                           "Y": np.array([[9, 3], [4, 7]], "float64")},
           attrs={"kernels": [2, 2], "strides": [2, 1], "paddings": [1, 0, 0, 1],
                  "out_stride": [2, 1]}, ref=im2seq_ref, grad=["X"],
           id="im2sequence_real_size_strided_padded"),
    OpCase("gather_nd", {"X": rand(3, 4), "Index": np.zeros((2, 3), "int64")},
           refused="Input(Index).shape[-1] should be no greater than Input(X).rank",
           id="gather_nd_index_deeper_than_x"),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_op(case):
    check_op(case)
