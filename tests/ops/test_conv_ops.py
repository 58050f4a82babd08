"""Op table: convolutions (conv2d, conv2d_transpose, conv3d, conv3d_transpose) against
torch, with gradients vs finite differences; the conv2d_transpose layer."""

import re

import pytest
import torch.nn.functional as F

import parafluid as fluid
from parafluid.testing import OpCase, check_op, rand, run_op
from parafluid.testing.refs import build_layer, to_torch


def conv_ref(strides=1, paddings=0, dilations=1, groups=1):
    def ref(Input, Filter):
        out = F.conv2d(to_torch(Input), to_torch(Filter), None, strides, paddings, dilations,
                       groups)
        return {"Output": out.numpy()}
    return ref


def conv_t_ref(stride=1, pad=0, dilation=1, groups=1, output_padding=0, nd=2):
    def ref(Input, Filter):
        fn = F.conv_transpose2d if nd == 2 else F.conv_transpose3d
        out = fn(to_torch(Input), to_torch(Filter), None, stride, pad, output_padding, groups,
                 dilation)
        return {"Output": out.numpy()}
    return ref


def conv3d_ref(stride=1, pad=0):
    def ref(Input, Filter):
        return {"Output": F.conv3d(to_torch(Input), to_torch(Filter), None, stride, pad).numpy()}
    return ref


CASES = [
    OpCase("conv2d", {"Input": rand(1, 2, 5, 5), "Filter": rand(3, 2, 3, 3, seed=1)},
           ref=conv_ref(), grad=["Input", "Filter"]),
    OpCase("conv2d", {"Input": rand(1, 2, 5, 5), "Filter": rand(2, 2, 3, 3, seed=1)},
           attrs={"strides": [2, 2], "paddings": [1, 1]}, ref=conv_ref(2, 1),
           grad=["Input", "Filter"], id="conv2d_stride_pad"),
    OpCase("conv2d", {"Input": rand(1, 4, 5, 5), "Filter": rand(4, 2, 2, 2, seed=1)},
           attrs={"groups": 2, "dilations": [2, 2], "paddings": [1, 1]},
           ref=conv_ref(1, 1, 2, 2), grad=["Input", "Filter"], id="conv2d_groups_dilation"),
    OpCase("conv2d", {"Input": rand(1, 1, 4, 3), "Filter": rand(2, 1, 2, 2, seed=1)},
           attrs={"paddings": [1, 1, 2, 2]}, ref=conv_ref(1, (1, 2)), grad=["Input", "Filter"],
           id="conv2d_four_paddings"),
    OpCase("conv2d_transpose", {"Input": rand(1, 2, 3, 3), "Filter": rand(2, 3, 3, 3, seed=1)},
           ref=conv_t_ref(), grad=["Input", "Filter"]),
    OpCase("conv2d_transpose", {"Input": rand(1, 2, 3, 3), "Filter": rand(2, 2, 4, 4, seed=1)},
           attrs={"strides": [2, 2], "paddings": [1, 1]}, ref=conv_t_ref(2, 1),
           grad=["Input", "Filter"], id="conv2d_transpose_stride2_pad1"),
    OpCase("conv2d_transpose", {"Input": rand(1, 4, 3, 2), "Filter": rand(4, 1, 2, 2, seed=1)},
           attrs={"groups": 2, "dilations": [2, 2]}, ref=conv_t_ref(1, 0, 2, 2),
           grad=["Input", "Filter"], id="conv2d_transpose_groups_dilation"),
    OpCase("conv2d_transpose", {"Input": rand(1, 1, 3, 3), "Filter": rand(1, 2, 3, 3, seed=1)},
           attrs={"strides": [2, 2], "paddings": [1, 1], "output_size": [6, 6]},
           ref=conv_t_ref(2, 1, output_padding=1), grad=["Input", "Filter"],
           id="conv2d_transpose_output_size"),
    OpCase("conv3d", {"Input": rand(1, 2, 3, 4, 3), "Filter": rand(2, 2, 2, 2, 2, seed=1)},
           attrs={"paddings": [1, 1, 1]}, ref=conv3d_ref(1, 1), grad=["Input", "Filter"]),
    OpCase("conv3d_transpose", {"Input": rand(1, 2, 2, 2, 2),
                                "Filter": rand(2, 1, 2, 2, 2, seed=1)},
           attrs={"strides": [2, 2, 2]}, ref=conv_t_ref(2, nd=3), grad=["Input", "Filter"]),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_op(case):
    check_op(case)


def test_conv2d_transpose_layer_shapes_params_and_filter_from_output_size():
    main, _, out = build_layer(lambda x: fluid.layers.conv2d_transpose(
        x, num_filters=6, filter_size=4, stride=2, padding=1, act="relu"), [3, 5, 5])
    assert out.shape == (-1, 6, 10, 10)
    params = {p.name: p.shape for p in main.global_block().all_parameters()}
    assert params == {"conv2d_transpose_0.w_0": (3, 6, 4, 4), "conv2d_transpose_0.b_0": (6,)}
    assert [op.type for op in main.global_block().ops] == ["conv2d_transpose",
                                                           "elementwise_add", "relu"]
    # filter_size=None: Fluid sizes the filter to reach output_size exactly
    main, _, out = build_layer(lambda x: fluid.layers.conv2d_transpose(
        x, num_filters=2, output_size=[12, 12], stride=2), [3, 5, 5])
    assert out.shape == (-1, 2, 12, 12)
    w = next(p for p in main.global_block().all_parameters() if p.name.endswith("w_0"))
    assert w.shape == (3, 2, 4, 4)


def test_conv2d_transpose_output_size_out_of_reach_names_the_range():
    with pytest.raises(ValueError, match=re.escape("must be in [9, 11)")):
        build_layer(lambda x: fluid.layers.conv2d_transpose(
            x, num_filters=2, output_size=[12, 12], filter_size=3, stride=2), [3, 4, 4])


@pytest.mark.parametrize("op,inputs,attrs,message", [
    ("conv2d", {"Input": rand(1, 3, 5, 5), "Filter": rand(2, 2, 3, 3)}, {},
     "Input has 3 channels"),
    ("conv2d", {"Input": rand(1, 2, 2, 2), "Filter": rand(2, 2, 3, 3)}, {}, "too small"),
    ("conv2d", {"Input": rand(1, 2, 5, 5), "Filter": rand(2, 2, 3, 3)},
     {"padding_algorithm": "FULL"}, "padding_algorithm must be"),
    ("conv2d_transpose", {"Input": rand(1, 3, 3, 3), "Filter": rand(2, 2, 3, 3)}, {},
     "Input has 3 channels"),
])
def test_bad_shapes_and_attrs_name_the_op(op, inputs, attrs, message):
    with pytest.raises(ValueError, match=r"(?s)" + op + ".*" + re.escape(message)):
        run_op(OpCase(op, inputs, attrs=attrs))
