"""Op table: convolutions in every layout and padding form Fluid 1.6 accepts (channel-last
data_format, asymmetric paddings, padding_algorithm SAME / VALID), the depthwise op types,
against loop references written from Fluid's definitions."""

import numpy as np
import pytest

import parafluid as fluid
from parafluid.testing import OpCase, check_op, rand
from parafluid.testing.refs import build_layer, run_built
from parafluid.testing.window_refs import conv_ref, conv_transpose_ref

GRADS = ["Input", "Filter"]


def _nhwc(x):
    return np.ascontiguousarray(np.moveaxis(x, 1, -1))


CASES = [
    # channel-last
    OpCase("conv2d", {"Input": _nhwc(rand(1, 2, 5, 4)), "Filter": rand(3, 2, 3, 3, seed=1)},
           attrs={"data_format": "NHWC", "paddings": [1, 1]}, ref=conv_ref(), grad=GRADS,
           id="conv2d_nhwc"),
    OpCase("conv2d", {"Input": _nhwc(rand(1, 4, 6, 5)), "Filter": rand(4, 2, 2, 2, seed=1)},
           attrs={"data_format": "NHWC", "groups": 2, "strides": [2, 1],
                  "dilations": [1, 2]}, ref=conv_ref(), grad=GRADS,
           id="conv2d_nhwc_groups_stride_dilation"),
    OpCase("conv2d", {"Input": rand(1, 2, 4, 4), "Filter": rand(2, 2, 3, 3, seed=1)},
           attrs={"data_format": "AnyLayout", "paddings": [1, 1]}, ref=conv_ref(),
           grad=GRADS, id="conv2d_anylayout"),
    # asymmetric paddings [top, bottom, left, right]
    OpCase("conv2d", {"Input": rand(1, 2, 4, 5), "Filter": rand(2, 2, 3, 3, seed=1)},
           attrs={"paddings": [1, 0, 2, 1]}, ref=conv_ref(), grad=GRADS,
           id="conv2d_asymmetric_paddings"),
    OpCase("conv2d", {"Input": _nhwc(rand(1, 2, 5, 5)), "Filter": rand(2, 2, 3, 3, seed=1)},
           attrs={"paddings": [0, 2, 1, 0], "strides": [2, 2], "data_format": "NHWC"},
           ref=conv_ref(), grad=GRADS, id="conv2d_nhwc_asymmetric_stride"),
    # padding_algorithm
    OpCase("conv2d", {"Input": rand(1, 1, 7, 7), "Filter": rand(2, 1, 3, 3, seed=1)},
           attrs={"paddings": [1, 1], "padding_algorithm": "VALID"}, ref=conv_ref(),
           grad=GRADS, id="conv2d_valid_ignores_paddings"),
    OpCase("conv2d", {"Input": rand(1, 2, 5, 6), "Filter": rand(2, 2, 3, 3, seed=1)},
           attrs={"strides": [2, 2], "padding_algorithm": "SAME"}, ref=conv_ref(),
           grad=GRADS, id="conv2d_same_stride2"),
    OpCase("conv2d", {"Input": _nhwc(rand(1, 2, 5, 5)), "Filter": rand(2, 2, 2, 2, seed=1)},
           attrs={"dilations": [2, 2], "padding_algorithm": "SAME", "data_format": "NHWC"},
           ref=conv_ref(), grad=GRADS, id="conv2d_same_resets_dilation_nhwc"),
    # 3-D
    OpCase("conv3d", {"Input": np.moveaxis(rand(1, 2, 3, 4, 3), 1, -1).copy(),
                      "Filter": rand(2, 2, 2, 2, 2, seed=1)},
           attrs={"data_format": "NDHWC", "paddings": [1, 0, 0]}, ref=conv_ref(3),
           grad=GRADS, id="conv3d_ndhwc"),
    OpCase("conv3d", {"Input": rand(1, 1, 3, 4, 3), "Filter": rand(2, 1, 2, 2, 2, seed=1)},
           attrs={"paddings": [1, 0, 0, 1, 1, 1]}, ref=conv_ref(3), grad=GRADS,
           id="conv3d_six_paddings"),
    OpCase("conv3d", {"Input": rand(1, 1, 4, 3, 5), "Filter": rand(1, 1, 3, 2, 3, seed=1)},
           attrs={"strides": [2, 2, 2], "padding_algorithm": "SAME"}, ref=conv_ref(3),
           grad=GRADS, id="conv3d_same"),
    # transposed
    OpCase("conv2d_transpose", {"Input": _nhwc(rand(1, 2, 3, 3)),
                                "Filter": rand(2, 3, 3, 3, seed=1)},
           attrs={"data_format": "NHWC", "strides": [2, 1], "paddings": [1, 0]},
           ref=conv_transpose_ref(), grad=GRADS, id="conv2d_transpose_nhwc"),
    OpCase("conv2d_transpose", {"Input": rand(1, 2, 3, 3), "Filter": rand(2, 2, 3, 3, seed=1)},
           attrs={"strides": [2, 2], "paddings": [1, 0, 0, 2]}, ref=conv_transpose_ref(),
           grad=GRADS, id="conv2d_transpose_asymmetric_paddings"),
    OpCase("conv2d_transpose", {"Input": rand(1, 1, 3, 3), "Filter": rand(1, 2, 3, 3, seed=1)},
           attrs={"strides": [2, 2], "paddings": [1, 0, 1, 0], "output_size": [7, 7]},
           ref=conv_transpose_ref(), grad=GRADS,
           id="conv2d_transpose_asymmetric_output_size"),
    OpCase("conv2d_transpose", {"Input": rand(1, 2, 3, 4), "Filter": rand(2, 2, 3, 3, seed=1)},
           attrs={"strides": [2, 2], "dilations": [2, 2], "padding_algorithm": "SAME"},
           ref=conv_transpose_ref(), grad=GRADS, id="conv2d_transpose_same"),
    OpCase("conv2d_transpose", {"Input": rand(1, 2, 3, 3), "Filter": rand(2, 2, 3, 3, seed=1)},
           attrs={"paddings": [2, 2], "padding_algorithm": "VALID"},
           ref=conv_transpose_ref(), grad=GRADS, id="conv2d_transpose_valid"),
    OpCase("conv3d_transpose", {"Input": np.moveaxis(rand(1, 2, 2, 3, 2), 1, -1).copy(),
                                "Filter": rand(2, 1, 2, 2, 2, seed=1)},
           attrs={"data_format": "NHWC", "strides": [2, 1, 2]}, ref=conv_transpose_ref(3),
           grad=GRADS, id="conv3d_transpose_channel_last"),
    OpCase("conv3d_transpose", {"Input": rand(1, 1, 2, 2, 2),
                                "Filter": rand(1, 2, 2, 2, 2, seed=1)},
           attrs={"paddings": [1, 0, 0, 0, 0, 1], "strides": [2, 2, 2]},
           ref=conv_transpose_ref(3), grad=GRADS, id="conv3d_transpose_six_paddings"),
    # depthwise op types (groups == channels)
    OpCase("depthwise_conv2d", {"Input": rand(1, 3, 5, 5), "Filter": rand(6, 1, 3, 3, seed=1)},
           attrs={"groups": 3, "strides": [2, 2], "paddings": [1, 1]}, ref=conv_ref(),
           grad=GRADS, id="depthwise_conv2d"),
    OpCase("depthwise_conv2d", {"Input": _nhwc(rand(1, 2, 4, 4)),
                                "Filter": rand(2, 1, 3, 3, seed=1)},
           attrs={"groups": 2, "padding_algorithm": "SAME", "data_format": "NHWC"},
           ref=conv_ref(), grad=GRADS, id="depthwise_conv2d_nhwc_same"),
    OpCase("depthwise_conv2d", {"Input": rand(1, 2, 4, 4, low=0.1) *
                                np.where(rand(1, 2, 4, 4, seed=3) > 0, 1, -1),
                                "Filter": rand(2, 1, 3, 3, seed=1)},
           attrs={"groups": 2, "paddings": [1, 1], "fuse_relu_before_depthwise_conv": True},
           ref=conv_ref(relu_input=True), grad=GRADS, id="depthwise_conv2d_fuse_relu"),
    OpCase("depthwise_conv2d_transpose", {"Input": rand(1, 2, 3, 3),
                                          "Filter": rand(2, 1, 3, 3, seed=1)},
           attrs={"groups": 2, "strides": [2, 2], "paddings": [1, 1]},
           ref=conv_transpose_ref(), grad=GRADS, id="depthwise_conv2d_transpose"),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_op(case):
    check_op(case)


def _run(fn, shape):
    main, startup, out = build_layer(fn, shape)
    x = rand(2, *shape).astype("float32")
    got, _ = run_built(main, startup, out, {"x": x})
    return main, out, x, got


def test_conv2d_layer_nhwc_same_padding_and_bias_on_the_channel_axis():
    main, out, x, got = _run(lambda v: fluid.layers.conv2d(
        v, num_filters=3, filter_size=3, stride=2, padding="SAME", data_format="NHWC"),
        [5, 5, 2])
    assert out.shape == (-1, 3, 3, 3)
    op = next(o for o in main.global_block().ops if o.type == "conv2d")
    assert op.attr("padding_algorithm") == "SAME" and op.attr("data_format") == "NHWC"
    assert got.shape == (2, 3, 3, 3)


def test_conv_layers_take_fluid_padding_forms():
    _, out, _, _ = _run(lambda v: fluid.layers.conv2d(
        v, num_filters=2, filter_size=3, padding=[[0, 0], [0, 0], [1, 0], [2, 1]]), [2, 5, 5])
    assert out.shape == (-1, 2, 4, 6)
    _, out, _, _ = _run(lambda v: fluid.layers.conv2d(
        v, num_filters=2, filter_size=3, padding="VALID"), [2, 7, 7])
    assert out.shape == (-1, 2, 5, 5)
    _, out, _, _ = _run(lambda v: fluid.layers.conv3d(
        v, num_filters=2, filter_size=2, padding=[1, 0, 0, 1, 0, 0], data_format="NDHWC"),
        [3, 3, 3, 2])
    assert out.shape == (-1, 3, 3, 2, 2)
    _, out, _, _ = _run(lambda v: fluid.layers.conv2d_transpose(
        v, num_filters=2, filter_size=3, stride=2, padding="SAME", data_format="NHWC"),
        [3, 3, 2])
    # Fluid pads a transposed conv as the forward conv of its input: (1, 1) here
    assert out.shape == (-1, 5, 5, 2)
    _, out, _, _ = _run(lambda v: fluid.layers.conv3d_transpose(
        v, num_filters=2, filter_size=2, data_format="NDHWC"), [2, 2, 2, 3])
    assert out.shape == (-1, 3, 3, 3, 2)


def test_depthwise_layers_emit_the_depthwise_op_types():
    main, _, _, _ = _run(lambda v: fluid.layers.conv2d(
        v, num_filters=4, filter_size=3, groups=4, use_cudnn=False), [4, 5, 5])
    assert "depthwise_conv2d" in [o.type for o in main.global_block().ops]
    main, _, _, _ = _run(lambda v: fluid.layers.conv2d_transpose(
        v, num_filters=4, filter_size=3, groups=4, use_cudnn=False), [4, 5, 5])
    assert "depthwise_conv2d_transpose" in [o.type for o in main.global_block().ops]
