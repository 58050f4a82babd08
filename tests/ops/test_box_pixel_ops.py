"""Op table: Fluid 1.6's pixel-box convention in the box ops. A pixel box [x1, y1, x2, y2]
covers x2 - x1 + 1 pixels and its centre is x1 + width / 2 (half a pixel right of the
midpoint (x1 + x2) / 2); decoding subtracts the pixel back from the far corner. Rows with
hand-computed values pin the convention; the numpy references follow Fluid's kernels."""

import numpy as np
import pytest

from parafluid.testing import OpCase, check_op, rand


def decode_assign_ref(PriorBox, TargetBox, BoxScore, attrs, PriorBoxVar=None):
    r, c = BoxScore.shape
    v = np.ones(4) if PriorBoxVar is None else PriorBoxVar.reshape(-1)[:4]
    out = np.zeros((r, c, 4))
    assign = np.zeros((r, 4))
    for i in range(r):
        x1, y1, x2, y2 = PriorBox[i]
        pw, ph = x2 - x1 + 1, y2 - y1 + 1
        pcx, pcy = x1 + 0.5 * pw, y1 + 0.5 * ph
        for j in range(c):
            dx, dy, dw, dh = TargetBox[i, 4 * j:4 * j + 4]
            cx, cy = v[0] * dx * pw + pcx, v[1] * dy * ph + pcy
            w = np.exp(min(v[2] * dw, attrs["box_clip"])) * pw
            h = np.exp(min(v[3] * dh, attrs["box_clip"])) * ph
            out[i, j] = [cx - w / 2, cy - h / 2, cx + w / 2 - 1, cy + h / 2 - 1]
        best, best_score = -1, -1.0
        for j in range(1, c):
            if BoxScore[i, j] > best_score:
                best, best_score = j, BoxScore[i, j]
        assign[i] = out[i, best] if best > 0 else PriorBox[i]
    return {"DecodeBox": out.reshape(r, -1), "OutputAssignBox": assign}


# zero deltas decode a prior box to itself: [0, 0, 9, 9] (10 x 10 pixels, centre 5.0)
ZERO_PRIOR = np.array([[0, 0, 9, 9], [2, 4, 5, 11]], "float64")
ZERO_DELTAS = np.zeros((2, 8), "float64")
ZERO_SCORES = np.array([[0.2, 0.8], [0.9, 0.1]], "float64")
# dx = 1 with variance 0.1 moves the box by 0.1 * width = 1 pixel:
# prior [0, 0, 9, 9] -> [1, 0, 10, 9]
SHIFT_DELTAS = np.array([[0, 0, 0, 0, 1, 0, 0, 0]], "float64")

BOX_CASES = [
    OpCase("box_decoder_and_assign",
           {"PriorBox": ZERO_PRIOR, "PriorBoxVar": np.array([0.1, 0.1, 0.2, 0.2]),
            "TargetBox": ZERO_DELTAS, "BoxScore": ZERO_SCORES},
           attrs={"box_clip": 4.135},
           ref=lambda **kw: {"DecodeBox": np.tile(ZERO_PRIOR, 2),
                             "OutputAssignBox": ZERO_PRIOR},
           id="box_decoder_and_assign_zero_deltas_identity"),
    OpCase("box_decoder_and_assign",
           {"PriorBox": ZERO_PRIOR[:1], "PriorBoxVar": np.array([0.1, 0.1, 0.2, 0.2]),
            "TargetBox": SHIFT_DELTAS, "BoxScore": np.array([[0.1, 0.9]])},
           attrs={"box_clip": 4.135},
           ref=lambda **kw: {"DecodeBox": np.array([[0, 0, 9, 9, 1, 0, 10, 9]], "float64"),
                             "OutputAssignBox": np.array([[1, 0, 10, 9]], "float64")},
           id="box_decoder_and_assign_shift_one_pixel"),
    OpCase("box_decoder_and_assign",
           {"PriorBox": np.sort(rand(5, 4, seed=3, low=0, high=40).reshape(5, 2, 2), 1)
            .transpose(0, 2, 1).reshape(5, 4),
            "PriorBoxVar": np.array([0.1, 0.1, 0.2, 0.2]),
            "TargetBox": rand(5, 12, seed=4, low=-2, high=2),
            "BoxScore": rand(5, 3, seed=5, low=0, high=1)},
           attrs={"box_clip": 0.5}, ref=decode_assign_ref, id="box_decoder_and_assign_random"),
    OpCase("box_decoder_and_assign",
           {"PriorBox": ZERO_PRIOR, "TargetBox": rand(2, 8, seed=6, low=-1, high=1),
            "BoxScore": ZERO_SCORES},
           attrs={"box_clip": 4.135}, ref=decode_assign_ref,
           id="box_decoder_and_assign_no_variance"),
]


@pytest.mark.parametrize("case", BOX_CASES, ids=str)
def test_op(case):
    check_op(case)
