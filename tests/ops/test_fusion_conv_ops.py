"""Op table: conv2d_fusion (conv2d + bias + residual + activation, split_channels) against a
numpy convolution, and against its unfused ops run as a parafluid program. Fluid registers
no gradient for it."""

import numpy as np
import pytest

from parafluid.ops import get_op_def
from parafluid.testing import OpCase, check_op, rand, run_op, run_op_chain


def conv_np(x, w, stride, pad, groups):
    n, c, h, wd = x.shape
    oc, cg, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad[0], pad[0]), (pad[1], pad[1])))
    oh = (h + 2 * pad[0] - kh) // stride[0] + 1
    ow = (wd + 2 * pad[1] - kw) // stride[1] + 1
    out = np.zeros((n, oc, oh, ow))
    per = oc // groups
    for o in range(oc):
        g = o // per
        for i in range(oh):
            for j in range(ow):
                patch = xp[:, g * cg:(g + 1) * cg, i * stride[0]:i * stride[0] + kh,
                           j * stride[1]:j * stride[1] + kw]
                out[:, o, i, j] = (patch * w[o]).sum((1, 2, 3))
    return out


ACTS = {"identity": lambda v: v, "relu": lambda v: np.maximum(v, 0),
        "relu6": lambda v: np.clip(v, 0, 6), "sigmoid": lambda v: 1 / (1 + np.exp(-v)),
        "tanh": np.tanh}


def ref(Input, Filter, attrs, Bias=None, ResidualData=None):
    y = conv_np(Input, Filter, attrs["strides"], attrs["paddings"], attrs["groups"])
    if Bias is not None:
        y = y + Bias.reshape(1, -1, 1, 1)
    if ResidualData is not None:
        y = y + ResidualData
    y = ACTS[attrs["activation"]](y)
    out = {"Output": y}
    if attrs["split_channels"]:
        out["Outputs"] = np.split(y, np.cumsum(attrs["split_channels"])[:-1], 1)
    return out


X = rand(2, 4, 5, 5, seed=1) * 3
W = rand(6, 4, 3, 3, seed=2)
W_G = rand(6, 2, 3, 3, seed=3)
BIAS = rand(6, seed=4)
RES = rand(2, 6, 5, 5, seed=5)

CASES = [
    OpCase("conv2d_fusion", {"Input": X, "Filter": W, "Bias": BIAS, "ResidualData": RES},
           attrs={"paddings": [1, 1], "activation": act}, ref=ref, outputs=["Output"],
           id=f"conv2d_fusion-{act}")
    for act in ACTS
] + [
    OpCase("conv2d_fusion", {"Input": X, "Filter": W_G, "Bias": BIAS},
           attrs={"strides": [2, 2], "groups": 2, "activation": "relu",
                  "split_channels": [2, 4]},
           ref=ref, out_counts={"Outputs": 2}, id="conv2d_fusion-groups-split"),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_op(case):
    check_op(case)


def test_no_gradient_as_in_fluid():
    assert get_op_def("conv2d_fusion").grad is None


def test_conv2d_fusion_equals_its_unfused_ops():
    case = CASES[1]  # relu
    ops = [("conv2d", {"Input": ["x"], "Filter": ["w"]}, {"Output": ["c"]},
            {"paddings": [1, 1]}),
           ("elementwise_add", {"X": ["c"], "Y": ["b"]}, {"Out": ["cb"]}, {"axis": 1}),
           ("elementwise_add", {"X": ["cb"], "Y": ["r"]}, {"Out": ["cbr"]}, {}),
           ("relu", {"X": ["cbr"]}, {"Out": ["out"]}, {})]
    want, = run_op_chain(ops, {"x": X, "w": W, "b": BIAS, "r": RES}, ["out"])
    np.testing.assert_array_equal(run_op(case)["Output"], want)


def test_cudnn_only_activations_are_refused():
    case = OpCase("conv2d_fusion", {"Input": X, "Filter": W}, attrs={"activation": "relux"})
    with pytest.raises(ValueError, match="activation must be one of"):
        run_op(case)
