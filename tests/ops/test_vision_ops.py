"""Op table: image ops (interpolation, padding, crop / crop_tensor, rearrangements, unfold) and
their layers."""

import re

import numpy as np
import pytest
import torch.nn.functional as F

import parafluid as fluid
from parafluid.testing import OpCase, check_op, rand, run_op
from parafluid.testing.refs import adaptive_pool_ref, build_layer, lrn_ref, run_built, to_torch


def interp_ref(X, attrs):
    """Fluid's interpolate kernels as scalar loops (interpolate_op.h, 1.6)."""
    n, c, in_h, in_w = X.shape
    if attrs["out_h"] > 0:
        out_h, out_w = attrs["out_h"], attrs["out_w"]
    else:
        out_h, out_w = int(in_h * attrs["scale"]), int(in_w * attrs["scale"])
    ac, mode = attrs["align_corners"], attrs["align_mode"]

    def ratio(i, o):
        return 0.0 if o <= 1 else ((i - 1) / (o - 1) if ac else i / o)

    rh, rw = ratio(in_h, out_h), ratio(in_w, out_w)
    half = not ac and mode == 0

    def src(r, i, size):
        lo = max(int(r * (i + 0.5) - 0.5) if half else int(r * i), 0)
        hi = min(lo + 1, size - 1)
        pos = max(r * (i + 0.5) - 0.5, 0) if half else r * i
        return lo, hi, pos - lo

    out = np.zeros((n, c, out_h, out_w))
    for k in range(out_h):
        for m in range(out_w):
            if attrs["interp_method"] == "nearest":
                y = int(rh * k + 0.5) if ac else int(rh * k)
                x = int(rw * m + 0.5) if ac else int(rw * m)
                out[:, :, k, m] = X[:, :, y, x]
                continue
            y0, y1, dy = src(rh, k, in_h)
            x0, x1, dx = src(rw, m, in_w)
            out[:, :, k, m] = ((1 - dy) * ((1 - dx) * X[:, :, y0, x0] + dx * X[:, :, y0, x1])
                               + dy * ((1 - dx) * X[:, :, y1, x0] + dx * X[:, :, y1, x1]))
    return {"Out": out}


def interp_attrs(method, **kw):
    attrs = {"interp_method": method, "out_h": -1, "out_w": -1, "scale": 0.0,
             "align_corners": True, "align_mode": 1}
    attrs.update(kw)
    return attrs


def space_to_depth_ref(X, attrs):
    """The index formula of Fluid's space_to_depth_compute, element by element."""
    b = attrs["blocksize"]
    n, c, h, w = X.shape
    flat_in, out = X.reshape(-1), np.zeros(X.size, X.dtype)
    out_c = c // (b * b)
    for idx in range(X.size):
        bb, rem = divmod(idx, c * h * w)
        k, rem = divmod(rem, h * w)
        j, i = divmod(rem, w)
        c2, offset = k % out_c, k // out_c
        w2, h2 = i * b + offset % b, j * b + offset // b
        out[w2 + w * b * (h2 + h * b * (c2 + out_c * bb))] = flat_in[idx]
    return {"Out": out.reshape(n, c * b * b, h // b, w // b)}


def shuffle_ref(X, attrs):
    n, c, h, w = X.shape
    g = attrs["group"]
    return {"Out": X.reshape(n, g, c // g, h, w).transpose(0, 2, 1, 3, 4).reshape(X.shape)}


def maxout_ref(X, attrs):
    n, c, h, w = X.shape
    g = attrs["groups"]
    return {"Out": X.reshape(n, c // g, g, h, w).max(2)}


def pad2d_ref(X, attrs):
    t, b, l, r = attrs["paddings"]
    mode = {"constant": "constant", "reflect": "reflect", "edge": "edge"}[attrs["mode"]]
    width = [(0, 0), (0, 0), (t, b), (l, r)]
    if attrs["data_format"] == "NHWC":
        width = [(0, 0), (t, b), (l, r), (0, 0)]
    kw = {"constant_values": attrs["pad_value"]} if mode == "constant" else {}
    return {"Out": np.pad(X, width, mode=mode, **kw)}


CASES = [
    OpCase("bilinear_interp", {"X": rand(1, 2, 3, 4)},
           attrs=interp_attrs("bilinear", out_h=5, out_w=7), ref=interp_ref, grad=["X"],
           id="bilinear_align_corners"),
    OpCase("bilinear_interp", {"X": rand(1, 2, 4, 4)},
           attrs=interp_attrs("bilinear", out_h=7, out_w=3, align_corners=False,
                              align_mode=0), ref=interp_ref, grad=["X"],
           id="bilinear_half_pixel"),
    OpCase("bilinear_interp", {"X": rand(2, 1, 3, 5)},
           attrs=interp_attrs("bilinear", scale=2.0, align_corners=False, align_mode=1),
           ref=interp_ref, grad=["X"], id="bilinear_align_mode1_scale"),
    OpCase("nearest_interp", {"X": rand(1, 2, 3, 4)},
           attrs=interp_attrs("nearest", out_h=6, out_w=5), ref=interp_ref, grad=["X"],
           id="nearest_align_corners"),
    OpCase("nearest_interp", {"X": rand(1, 2, 4, 4)},
           attrs=interp_attrs("nearest", out_h=3, out_w=8, align_corners=False),
           ref=interp_ref, grad=["X"], id="nearest_no_align"),
    OpCase("trilinear_interp", {"X": rand(1, 2, 2, 3, 4)},
           attrs={"out_d": 3, "out_h": 4, "out_w": 3, "scale": 0.0, "align_corners": False,
                  "align_mode": 0},
           ref=lambda X: {"Out": F.interpolate(to_torch(X), size=(3, 4, 3), mode="trilinear",
                                               align_corners=False).numpy()},
           grad=["X"]),
    OpCase("pad", {"X": rand(2, 3)}, attrs={"paddings": [1, 0, 2, 3], "pad_value": 0.5},
           ref=lambda X: {"Out": np.pad(X, [(1, 0), (2, 3)], constant_values=0.5)},
           grad=["X"]),
    OpCase("pad2d", {"X": rand(1, 2, 3, 4)},
           attrs={"paddings": [1, 2, 0, 1], "pad_value": -1.0}, ref=pad2d_ref, grad=["X"],
           id="pad2d_constant"),
    OpCase("pad2d", {"X": rand(1, 2, 3, 4)}, attrs={"paddings": [2, 1, 3, 1], "mode": "reflect"},
           ref=pad2d_ref, grad=["X"], id="pad2d_reflect"),
    OpCase("pad2d", {"X": rand(1, 3, 4, 2)},
           attrs={"paddings": [1, 2, 2, 0], "mode": "edge", "data_format": "NHWC"},
           ref=pad2d_ref, grad=["X"], id="pad2d_edge_nhwc"),
    OpCase("pad_constant_like", {"X": rand(3, 4), "Y": rand(2, 3, seed=1)},
           attrs={"pad_value": 2.0},
           ref=lambda X, Y: {"Out": np.pad(Y, [(0, 1), (0, 1)], constant_values=2.0)},
           grad=["Y"]),
    OpCase("crop", {"X": rand(3, 4, 5)}, attrs={"shape": [2, 2, 3], "offsets": [1, 2, 0]},
           ref=lambda X: {"Out": X[1:3, 2:4, 0:3]}, grad=["X"]),
    OpCase("crop", {"X": rand(3, 4), "Y": rand(2, 2, seed=1),
                    "Offsets": np.array([1, 1], "int32")},
           ref=lambda X, Y, Offsets: {"Out": X[1:3, 1:3]}, grad=["X"],
           id="crop_like_y_offsets_tensor"),
    OpCase("pixel_shuffle", {"X": rand(1, 8, 2, 3)}, attrs={"upscale_factor": 2},
           ref=lambda X: {"Out": F.pixel_shuffle(to_torch(X), 2).numpy()}, grad=["X"]),
    OpCase("space_to_depth", {"X": rand(2, 8, 4, 6)}, attrs={"blocksize": 2},
           ref=space_to_depth_ref, grad=["X"]),
    OpCase("shuffle_channel", {"X": rand(1, 6, 2, 2)}, attrs={"group": 3}, ref=shuffle_ref,
           grad=["X"]),
    OpCase("unfold", {"X": rand(2, 2, 4, 5)},
           attrs={"kernel_sizes": [2, 3], "strides": [1, 2], "paddings": [1, 0, 0, 1],
                  "dilations": [2, 1]},
           ref=lambda X: {"Y": F.unfold(F.pad(to_torch(X), [0, 1, 1, 0]), (2, 3), dilation=(2, 1),
                                        stride=(1, 2)).numpy()}, grad=["X"]),
    OpCase("crop_tensor", {"X": rand(3, 4, 5)},
           attrs={"shape": [2, -1, 3], "offsets": [1, 1, 2]},
           ref=lambda X: {"Out": X[1:3, 1:, 2:5]}, grad=["X"]),
    OpCase("crop_tensor", {"X": rand(3, 4), "Shape": np.array([2, 2], "int32"),
                           "Offsets": np.array([0, 2], "int32")},
           ref=lambda X, Shape, Offsets: {"Out": X[0:2, 2:4]}, grad=["X"],
           id="crop_tensor_tensors"),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_op(case):
    check_op(case)


def test_interp_matches_torch_where_torch_has_the_mode():
    x = rand(2, 3, 5, 6, seed=3)
    for align, mode, torch_align in ((True, 1, True), (False, 0, False)):
        got = run_op(OpCase("bilinear_interp", {"X": x},
                            attrs=interp_attrs("bilinear", out_h=9, out_w=4,
                                               align_corners=align, align_mode=mode)))["Out"]
        want = F.interpolate(to_torch(x), size=(9, 4), mode="bilinear", align_corners=torch_align)
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-10, atol=1e-12)


def test_interp_out_size_tensor_overrides_attrs():
    case = OpCase("bilinear_interp", {"X": rand(1, 1, 3, 3),
                                      "OutSize": np.array([5, 2], "int32")},
                  attrs=interp_attrs("bilinear", out_h=4, out_w=4))
    assert run_op(case)["Out"].shape == (1, 1, 5, 2)


def test_resize_layers_and_adaptive_pool_build_fluid_ops():
    main, startup, out = build_layer(lambda x: fluid.layers.resize_bilinear(
        fluid.layers.adaptive_pool2d(x, pool_size=[2, 3], pool_type="avg"),
        out_shape=[4, 6]), [2, 5, 7])
    ops = main.global_block().ops
    assert [op.type for op in ops] == ["pool2d", "bilinear_interp"]
    assert ops[0].attr("adaptive") and ops[1].attr("align_corners") and \
        ops[1].attr("align_mode") == 1
    x = rand(3, 2, 5, 7, seed=5).astype("float32")
    got, _ = run_built(main, startup, out, {"x": x})
    pooled = adaptive_pool_ref(x, {"ksize": [2, 3], "pooling_type": "avg"})["Out"]
    want = F.interpolate(to_torch(pooled), size=(4, 6), mode="bilinear", align_corners=True)
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-5, atol=1e-6)
    _, _, near = build_layer(lambda x: fluid.layers.resize_nearest(x, scale=2.0), [2, 5, 7])
    assert near.shape == (-1, 2, 10, 14)
    _, _, short = build_layer(lambda x: fluid.layers.image_resize_short(x, 4), [2, 5, 7])
    assert short.shape == (-1, 2, 4, 6)  # 7 * 4 / 5 = 5.6 rounds to 6
    main, _, tri = build_layer(lambda x: fluid.layers.resize_trilinear(x, out_shape=[4, 6, 2]),
                          [1, 2, 3, 4])
    assert tri.shape == (-1, 1, 4, 6, 2)
    assert main.global_block().ops[-1].attr("out_d") == 4


def test_l2_normalize_pad_crop_lrn_maxout_layers():
    def net(x):
        h = fluid.layers.l2_normalize(x, axis=1)
        h = fluid.layers.pad(h, paddings=[0, 0, 1, 1, 0, 0, 0, 0])
        h = fluid.layers.lrn(h, n=3)
        h = fluid.layers.maxout(h, groups=2)
        return fluid.layers.crop(h, shape=[-1, 3, 2, 2], offsets=[0, 0, 1, 1])
    main, startup, out = build_layer(net, [4, 3, 3])
    assert out.shape == (-1, 3, 2, 2)
    x = rand(2, 4, 3, 3, seed=8).astype("float32")
    got, _ = run_built(main, startup, out, {"x": x})
    h = x / np.sqrt((x ** 2).sum(1, keepdims=True) + 1e-12)
    h = np.pad(h, [(0, 0), (1, 1), (0, 0), (0, 0)])
    h = lrn_ref(h, {"n": 3, "k": 1.0, "alpha": 1e-4, "beta": 0.75})["Out"]
    h = maxout_ref(h, {"groups": 2})["Out"]
    np.testing.assert_allclose(got, h[:, :, 1:3, 1:3], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op,inputs,attrs,message", [
    ("pad2d", {"X": rand(1, 1, 2, 2)}, {"paddings": [2, 0, 0, 0], "mode": "reflect"},
     "must each be smaller than the padded dim"),
    ("pad", {"X": rand(2, 3)}, {"paddings": [1, 1]}, "2 * rank = 4 values"),
    ("crop", {"X": rand(3, 4)}, {"shape": [2, 3], "offsets": [2, 0]}, "exceeds X's 3"),
    ("pixel_shuffle", {"X": rand(1, 6, 2, 2)}, {"upscale_factor": 2}, "divisible by"),
    ("space_to_depth", {"X": rand(1, 4, 3, 4)}, {"blocksize": 2}, "height of X"),
    ("bilinear_interp", {"X": rand(1, 1, 2, 2)}, interp_attrs("bilinear"),
     "output size must be positive"),
])
def test_bad_shapes_and_attrs_name_the_op(op, inputs, attrs, message):
    with pytest.raises(ValueError, match=r"(?s)" + op + ".*" + re.escape(message)):
        run_op(OpCase(op, inputs, attrs=attrs))
