"""Op table: group_norm in Fluid 1.6's channels-last layout (data_layout "NHWC"), forward
and finite-difference gradients, and the layer that appends it."""

from __future__ import annotations

import numpy as np
import pytest
from test_norm_ops import group_norm_ref

import parafluid as fluid
from parafluid.testing import OpCase, check_op, rand, run_layers


def _nhwc_group_norm(X, Scale, Bias, attrs):
    out = group_norm_ref(np.moveaxis(X, -1, 1), Scale, Bias, attrs)
    return {**out, "Y": np.moveaxis(out["Y"], 1, -1)}


CASES = [
    OpCase("group_norm", {"X": rand(2, 3, 2, 4), "Scale": rand(4, seed=1),
                          "Bias": rand(4, seed=2)},
           attrs={"groups": 2, "epsilon": 1e-5, "data_layout": "NHWC"},
           ref=_nhwc_group_norm, grad=["X", "Scale", "Bias"], grad_outputs=["Y"],
           id="group_norm_nhwc"),
    OpCase("group_norm", {"X": rand(2, 5, 6, seed=3), "Scale": rand(6, seed=1),
                          "Bias": rand(6, seed=2)},
           attrs={"groups": 3, "epsilon": 1e-4, "data_layout": "NHWC"},
           ref=_nhwc_group_norm, grad=["X", "Scale", "Bias"], grad_outputs=["Y"],
           id="group_norm_nhwc_3d_input"),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_op(case):
    check_op(case)


def test_group_norm_layer_in_nhwc_normalizes_channel_groups_of_the_last_axis():
    x = rand(2, 3, 2, 4, seed=5).astype("float32")

    def build():
        data = fluid.layers.data(name="x", shape=[3, 2, 4], dtype="float32")
        return [fluid.layers.group_norm(data, groups=2, data_layout="NHWC")]

    got, = run_layers(build, {"x": x})
    want = _nhwc_group_norm(x.astype("float64"), np.ones(4), np.zeros(4),
                            {"groups": 2, "epsilon": 1e-5})["Y"]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
