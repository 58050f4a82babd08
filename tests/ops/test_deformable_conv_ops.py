"""Op table: deformable convolution (v2 with its mask, v1), forward against a loop reference
and gradients to the input, offsets, mask and filter by finite differences."""

import numpy as np
import pytest

from parafluid.testing import OpCase, check_op, rand

CASES: list = []


# ----------------------------------------------------------------------------- deformable_conv


def _dcn_bilinear(img, y, x):
    h, w = img.shape
    if not (-1 < y < h and -1 < x < w):
        return 0.0
    y0, x0 = int(np.floor(y)), int(np.floor(x))
    total = 0.0
    for yy, xx in ((y0, x0), (y0, x0 + 1), (y0 + 1, x0), (y0 + 1, x0 + 1)):
        if 0 <= yy < h and 0 <= xx < w:
            total += (1 - abs(y - yy)) * (1 - abs(x - xx)) * img[yy, xx]
    return total


def deformable_conv_ref(Input, Offset, Filter, attrs, Mask=None):
    n, c, h, w = Input.shape
    o, cg, kh, kw = Filter.shape
    (sh, sw), (ph, pw), (dh, dw) = attrs["strides"], attrs["paddings"], attrs["dilations"]
    g, dg = attrs["groups"], attrs["deformable_groups"]
    ho, wo = Offset.shape[2:]
    out = np.zeros((n, o, ho, wo))
    for b in range(n):
        for oc in range(o):
            grp = oc // (o // g)
            for y in range(ho):
                for x in range(wo):
                    acc = 0.0
                    for ci in range(cg):
                        ch = grp * cg + ci
                        d = ch // (c // dg)
                        for i in range(kh):
                            for j in range(kw):
                                k = i * kw + j
                                py = y * sh - ph + i * dh + Offset[b, 2 * (d * kh * kw + k), y, x]
                                px = x * sw - pw + j * dw + Offset[b, 2 * (d * kh * kw + k) + 1,
                                                                   y, x]
                                v = _dcn_bilinear(Input[b, ch], py, px)
                                if Mask is not None:
                                    v *= Mask[b, d * kh * kw + k, y, x]
                                acc += Filter[oc, ci, i, j] * v
                    out[b, oc, y, x] = acc
    return {"Output": out}


# offsets kept off the integers (the bilinear kinks) so finite differences are smooth
DCN_OFFSET = np.round(rand(1, 2 * 2 * 4, 2, 2, low=-1.4, high=1.4, seed=26), 1) + 0.037
DCN_ATTRS = {"strides": [1, 1], "paddings": [0, 0], "dilations": [2, 2], "groups": 2,
             "deformable_groups": 2, "im2col_step": 1}

CASES += [
    OpCase("deformable_conv", {"Input": rand(1, 4, 4, 4, seed=27), "Offset": DCN_OFFSET,
                               "Mask": rand(1, 2 * 4, 2, 2, low=0, high=1, seed=28),
                               "Filter": rand(2, 2, 2, 2, seed=29)},
           attrs=DCN_ATTRS, ref=deformable_conv_ref,
           grad=["Input", "Offset", "Mask", "Filter"], grad_rtol=1e-3),
    OpCase("deformable_conv_v1", {"Input": rand(1, 2, 4, 5, seed=30),
                                  "Offset": np.round(rand(1, 2 * 4, 3, 2, low=-1.4, high=1.4,
                                                          seed=31), 1) + 0.041,
                                  "Filter": rand(3, 2, 2, 2, seed=32)},
           attrs={**DCN_ATTRS, "strides": [1, 2], "dilations": [1, 1], "groups": 1,
                  "deformable_groups": 1}, ref=deformable_conv_ref,
           grad=["Input", "Offset", "Filter"], grad_rtol=1e-3),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_op(case):
    check_op(case)
