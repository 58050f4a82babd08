"""Op table: the interpolation ops in both of Fluid 1.6's layouts (data_layout "NCHW",
channels first, also for 5-D inputs, and "NHWC", channels last) and with the attribute
defaults (out_d/out_h/out_w 0: the size comes from scale)."""

from __future__ import annotations

import numpy as np
import pytest
import torch.nn.functional as F
from test_vision_ops import interp_ref, space_to_depth_ref

from parafluid.testing import OpCase, check_op, rand
from parafluid.testing.refs import to_torch


def _nhwc(ref):
    """A channels-last reference from a channels-first one."""
    def wrapped(X, attrs):
        out = ref(np.moveaxis(X, -1, 1), attrs)["Out"]
        return {"Out": np.moveaxis(out, 1, -1)}
    return wrapped


def _interp_attrs(method, **kw):
    attrs = {"interp_method": method, "out_h": 0, "out_w": 0, "scale": 0.0,
             "align_corners": True, "align_mode": 1}
    attrs.update(kw)
    return attrs


def _trilinear(X, attrs):
    out = F.interpolate(to_torch(np.moveaxis(X, -1, 1)), size=(3, 4, 3), mode="trilinear",
                        align_corners=False).numpy()
    return {"Out": np.moveaxis(out, 1, -1)}


CASES = [
    OpCase("bilinear_interp", {"X": rand(1, 3, 4, 2)},
           attrs={**_interp_attrs("bilinear", out_h=5, out_w=7), "data_layout": "NHWC"},
           ref=_nhwc(interp_ref), grad=["X"], id="bilinear_interp_nhwc"),
    OpCase("bilinear_interp", {"X": rand(2, 4, 4, 3)},
           attrs={**_interp_attrs("bilinear", out_h=3, out_w=6, align_corners=False,
                                  align_mode=0), "data_layout": "NHWC"},
           ref=_nhwc(interp_ref), grad=["X"], id="bilinear_interp_nhwc_half_pixel"),
    OpCase("nearest_interp", {"X": rand(1, 3, 4, 2)},
           attrs={**_interp_attrs("nearest", out_h=6, out_w=5), "data_layout": "NHWC"},
           ref=_nhwc(interp_ref), grad=["X"], id="nearest_interp_nhwc"),
    OpCase("nearest_interp", {"X": rand(1, 4, 4, 2)},
           attrs={**_interp_attrs("nearest", scale=1.5, align_corners=False),
                  "data_layout": "NHWC"},
           ref=_nhwc(interp_ref), grad=["X"], id="nearest_interp_nhwc_scale"),
    # the op's defaults: out_h = out_w = 0, so scale sets the size; data_layout "NCHW"
    OpCase("bilinear_interp", {"X": rand(1, 2, 3, 4)}, attrs={"scale": 2.0},
           ref=interp_ref, grad=["X"], id="bilinear_interp_defaults_scale"),
    OpCase("trilinear_interp", {"X": rand(1, 2, 3, 4, 2)},
           attrs={"out_d": 3, "out_h": 4, "out_w": 3, "align_corners": False, "align_mode": 0,
                  "data_layout": "NHWC"},
           ref=_trilinear, grad=["X"], id="trilinear_interp_nhwc"),
    # Fluid's 5-D channels-first layout is spelled "NCHW", its default
    OpCase("trilinear_interp", {"X": rand(1, 2, 2, 3, 4)},
           attrs={"out_d": 3, "out_h": 4, "out_w": 3, "align_corners": False, "align_mode": 0,
                  "data_layout": "NCHW"},
           ref=lambda X: {"Out": F.interpolate(to_torch(X), size=(3, 4, 3), mode="trilinear",
                                               align_corners=False).numpy()},
           grad=["X"], id="trilinear_interp_nchw_spelling"),
]


def _sized(**sizes):
    """interp_ref at the given sizes (the ones SizeTensor / Scale carry at run time)."""
    def ref(X, attrs, **ins):
        return interp_ref(X, {**attrs, **sizes})
    return ref


_INT = lambda v: np.array([v], "int32")  # noqa: E731

# the size inputs, in Fluid's order: SizeTensor, OutSize, the Scale input, the scale
# attribute (which wins over out_h/out_w), the out_h/out_w attributes
CASES += [
    OpCase("bilinear_interp", {"X": rand(1, 2, 3, 4), "SizeTensor": [_INT(5), _INT(3)]},
           attrs=_interp_attrs("bilinear"), ref=_sized(out_h=5, out_w=3), grad=["X"],
           id="bilinear_interp_size_tensor"),
    OpCase("bilinear_interp", {"X": rand(1, 2, 3, 4), "SizeTensor": [_INT(5), _INT(3)],
                               "OutSize": np.array([2, 2], "int32")},
           attrs=_interp_attrs("bilinear"), ref=_sized(out_h=5, out_w=3),
           id="bilinear_interp_size_tensor_before_out_size"),
    OpCase("bilinear_interp", {"X": rand(1, 2, 3, 4), "Scale": np.array([2.0], "float32")},
           attrs=_interp_attrs("bilinear", out_h=2, out_w=2, scale=0.5),
           ref=_sized(out_h=6, out_w=8), grad=["X"], id="bilinear_interp_scale_tensor"),
    OpCase("bilinear_interp", {"X": rand(1, 2, 3, 4)},
           attrs=_interp_attrs("bilinear", out_h=2, out_w=2, scale=1.5),
           ref=_sized(out_h=4, out_w=6), grad=["X"], id="bilinear_interp_scale_wins_over_out_hw"),
    # the interp_method attribute picks the method, whatever the op type says
    OpCase("bilinear_interp", {"X": rand(1, 2, 3, 4)},
           attrs=_interp_attrs("nearest", out_h=5, out_w=7), ref=interp_ref, grad=["X"],
           id="bilinear_interp_method_nearest"),
    OpCase("nearest_interp", {"X": rand(1, 3, 4, 2), "SizeTensor": [_INT(2), _INT(5)]},
           attrs={**_interp_attrs("nearest"), "data_layout": "NHWC"},
           ref=lambda X, SizeTensor, attrs: _nhwc(interp_ref)(X, {**attrs, "out_h": 2,
                                                                  "out_w": 5}),
           grad=["X"], id="nearest_interp_nhwc_size_tensor"),
    OpCase("trilinear_interp", {"X": rand(1, 2, 3, 4, 2),
                                "SizeTensor": [_INT(3), _INT(4), _INT(3)]},
           attrs={"align_corners": False, "align_mode": 0, "data_layout": "NHWC"},
           ref=lambda X, SizeTensor: _trilinear(X, {}), grad=["X"],
           id="trilinear_interp_size_tensor"),
]

# Fluid's default blocksize is 2 (the reference does not read the op's default)
CASES.append(OpCase("space_to_depth", {"X": rand(1, 4, 4, 6)},
                    ref=lambda X, attrs: space_to_depth_ref(X, {**attrs, "blocksize": 2}),
                    grad=["X"], id="space_to_depth_default_blocksize"))


@pytest.mark.parametrize("case", CASES, ids=str)
def test_op(case):
    check_op(case)


def test_an_unknown_layout_is_refused_naming_both():
    case = OpCase("bilinear_interp", {"X": rand(1, 2, 3, 4)},
                  attrs={"out_h": 2, "out_w": 2, "data_layout": "NWHC"})
    with pytest.raises(ValueError, match="data_layout must be 'NCHW'.*'NHWC'.*got 'NWHC'"):
        check_op(case)
