"""Op table: image ops (conv2d_transpose, conv3d(_transpose), pool3d, adaptive pooling,
interpolation, padding, crop, rearrangements) and the extra normalizations."""

import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import parafluid as fluid
from parafluid.testing import OpCase, check_op, rand, run_op


def _t(a):
    return torch.from_numpy(np.asarray(a))


# ----------------------------------------------------------------------------- references


def conv_t_ref(stride=1, pad=0, dilation=1, groups=1, output_padding=0, nd=2):
    def ref(Input, Filter):
        fn = F.conv_transpose2d if nd == 2 else F.conv_transpose3d
        out = fn(_t(Input), _t(Filter), None, stride, pad, output_padding, groups, dilation)
        return {"Output": out.numpy()}
    return ref


def conv3d_ref(stride=1, pad=0):
    def ref(Input, Filter):
        return {"Output": F.conv3d(_t(Input), _t(Filter), None, stride, pad).numpy()}
    return ref


def adaptive_ref(X, attrs):
    """Fluid's adaptive bins written as loops: [floor(i*H/o), ceil((i+1)*H/o))."""
    oh, ow = attrs["ksize"]
    n, c, h, w = X.shape
    out = np.zeros((n, c, oh, ow), X.dtype)
    for i in range(oh):
        for j in range(ow):
            hs, he = (i * h) // oh, -(-((i + 1) * h) // oh)
            ws, we = (j * w) // ow, -(-((j + 1) * w) // ow)
            win = X[:, :, hs:he, ws:we]
            out[:, :, i, j] = win.max((2, 3)) if attrs["pooling_type"] == "max" \
                else win.mean((2, 3))
    return {"Out": out}


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


def lrn_ref(X, attrs):
    n_, k, alpha, beta = attrs["n"], attrs["k"], attrs["alpha"], attrs["beta"]
    c = X.shape[1]
    pre = (n_ - 1) // 2
    mid = np.full(X.shape, k, dtype=X.dtype)
    for ch in range(c):
        for j in range(ch - pre, ch - pre + n_):
            if 0 <= j < c:
                mid[:, ch] += alpha * X[:, j] ** 2
    return {"Out": X * mid ** -beta, "MidOut": mid}


def group_norm_ref(X, Scale, Bias, attrs):
    n, c = X.shape[:2]
    g, eps = attrs["groups"], attrs["epsilon"]
    xg = X.reshape(n, g, -1)
    mean, var = xg.mean(2), xg.var(2)
    y = ((xg - mean[..., None]) / np.sqrt(var[..., None] + eps)).reshape(X.shape)
    view = (1, c) + (1,) * (X.ndim - 2)
    return {"Y": y * Scale.reshape(view) + Bias.reshape(view), "Mean": mean, "Variance": var}


def instance_norm_ref(X, Scale, Bias, attrs):
    mean = X.mean((2, 3), keepdims=True)
    inv = 1 / np.sqrt(X.var((2, 3), keepdims=True) + attrs["epsilon"])
    y = (X - mean) * inv * Scale.reshape(1, -1, 1, 1) + Bias.reshape(1, -1, 1, 1)
    return {"Y": y, "SavedMean": mean.reshape(-1), "SavedVariance": inv.reshape(-1)}


def prelu_ref(X, Alpha, attrs):
    mode = attrs["mode"]
    a = Alpha.reshape(()) if mode == "all" else (
        Alpha.reshape(1, -1, 1, 1) if mode == "channel" else Alpha.reshape(1, *X.shape[1:]))
    return {"Out": np.where(X > 0, X, a * X)}


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


# Positive inputs away from 0 keep prelu/maxout away from their kinks; distinct values
# keep maxout away from ties.
DISTINCT = (np.random.RandomState(4).permutation(48).reshape(1, 4, 3, 4) / 10.0 - 2.35)

POOL3 = {"pooling_type": "max", "ksize": [2, 2, 2], "strides": [2, 2, 2],
         "paddings": [0, 0, 0], "global_pooling": False, "exclusive": True, "ceil_mode": False}

CASES = [
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
    OpCase("pool3d", {"X": rand(1, 2, 4, 4, 4)}, attrs=dict(POOL3),
           ref=lambda X: {"Out": F.max_pool3d(_t(X), 2, 2).numpy()}, grad=["X"],
           id="pool3d_max"),
    OpCase("pool3d", {"X": rand(1, 1, 3, 3, 3)},
           attrs={**POOL3, "pooling_type": "avg", "ksize": [3, 3, 3], "strides": [1, 1, 1],
                  "paddings": [1, 1, 1]},
           ref=lambda X: {"Out": F.avg_pool3d(_t(X), 3, 1, 1, count_include_pad=False).numpy()},
           grad=["X"], id="pool3d_avg_exclusive"),
    OpCase("pool3d", {"X": rand(1, 2, 3, 5, 4)},
           attrs={**POOL3, "pooling_type": "avg", "ksize": [2, 2, 3], "adaptive": True},
           ref=lambda X: {"Out": F.adaptive_avg_pool3d(_t(X), [2, 2, 3]).numpy()}, grad=["X"],
           id="pool3d_adaptive_avg"),
    OpCase("pool2d", {"X": rand(2, 2, 5, 7)},
           attrs={"pooling_type": "avg", "ksize": [2, 3], "adaptive": True},
           ref=adaptive_ref, grad=["X"], id="pool2d_adaptive_avg"),
    OpCase("pool2d", {"X": rand(1, 2, 7, 5)},
           attrs={"pooling_type": "max", "ksize": [3, 2], "adaptive": True},
           ref=adaptive_ref, grad=["X"], id="pool2d_adaptive_max"),
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
           ref=lambda X: {"Out": F.interpolate(_t(X), size=(3, 4, 3), mode="trilinear",
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
           ref=lambda X: {"Out": F.pixel_shuffle(_t(X), 2).numpy()}, grad=["X"]),
    OpCase("space_to_depth", {"X": rand(2, 8, 4, 6)}, attrs={"blocksize": 2},
           ref=space_to_depth_ref, grad=["X"]),
    OpCase("shuffle_channel", {"X": rand(1, 6, 2, 2)}, attrs={"group": 3}, ref=shuffle_ref,
           grad=["X"]),
    OpCase("norm", {"X": rand(3, 4)}, attrs={"axis": 1, "epsilon": 1e-10},
           ref=lambda X: {"Out": X / np.sqrt((X ** 2).sum(1, keepdims=True) + 1e-10),
                          "Norm": np.sqrt((X ** 2).sum(1, keepdims=True) + 1e-10)},
           grad=["X"], grad_outputs=["Out"]),
    OpCase("norm", {"X": rand(2, 3, 4)}, attrs={"axis": 0, "epsilon": 1e-6},
           ref=lambda X: {"Out": X / np.sqrt((X ** 2).sum(0, keepdims=True) + 1e-6)},
           grad=["X"], grad_outputs=["Out"], id="norm_axis0"),
    OpCase("group_norm", {"X": rand(2, 4, 3, 2), "Scale": rand(4, seed=1),
                          "Bias": rand(4, seed=2)},
           attrs={"groups": 2, "epsilon": 1e-5}, ref=group_norm_ref,
           grad=["X", "Scale", "Bias"], grad_outputs=["Y"]),
    OpCase("lrn", {"X": rand(2, 6, 2, 3)}, attrs={"n": 5, "k": 1.0, "alpha": 0.1,
                                                  "beta": 0.75},
           ref=lrn_ref, grad=["X"], grad_outputs=["Out"]),
    OpCase("lrn", {"X": rand(1, 4, 2, 2)}, attrs={"n": 4, "k": 2.0, "alpha": 0.3,
                                                  "beta": 0.5},
           ref=lrn_ref, grad=["X"], grad_outputs=["Out"], id="lrn_even_window"),
    OpCase("prelu", {"X": DISTINCT, "Alpha": np.array([0.3])}, attrs={"mode": "all"},
           ref=prelu_ref, grad=["X", "Alpha"], id="prelu_all"),
    OpCase("prelu", {"X": DISTINCT, "Alpha": rand(1, 4, 1, 1, seed=2)},
           attrs={"mode": "channel"}, ref=prelu_ref, grad=["X", "Alpha"], id="prelu_channel"),
    OpCase("prelu", {"X": DISTINCT, "Alpha": rand(1, 4, 3, 4, seed=2)},
           attrs={"mode": "element"}, ref=prelu_ref, grad=["X", "Alpha"], id="prelu_element"),
    OpCase("maxout", {"X": DISTINCT}, attrs={"groups": 2}, ref=maxout_ref, grad=["X"]),
    OpCase("affine_channel", {"X": rand(2, 3, 2, 2), "Scale": rand(3, seed=1),
                              "Bias": rand(3, seed=2)}, attrs={"data_layout": "NCHW"},
           ref=lambda X, Scale, Bias: {"Out": X * Scale.reshape(1, 3, 1, 1)
                                       + Bias.reshape(1, 3, 1, 1)},
           grad=["X", "Scale", "Bias"]),
    OpCase("affine_channel", {"X": rand(2, 2, 3), "Scale": rand(3, seed=1),
                              "Bias": rand(3, seed=2)}, attrs={"data_layout": "NHWC"},
           ref=lambda X, Scale, Bias: {"Out": X * Scale + Bias},
           grad=["X", "Scale", "Bias"], id="affine_channel_nhwc"),
    OpCase("instance_norm", {"X": rand(2, 3, 2, 3), "Scale": rand(3, seed=1),
                             "Bias": rand(3, seed=2)}, ref=instance_norm_ref,
           grad=["X", "Scale", "Bias"], grad_outputs=["Y"]),
    OpCase("unfold", {"X": rand(2, 2, 4, 5)},
           attrs={"kernel_sizes": [2, 3], "strides": [1, 2], "paddings": [1, 0, 0, 1],
                  "dilations": [2, 1]},
           ref=lambda X: {"Y": F.unfold(F.pad(_t(X), [0, 1, 1, 0]), (2, 3), dilation=(2, 1),
                                        stride=(1, 2)).numpy()}, grad=["X"]),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_op(case):
    check_op(case)


# ----------------------------------------------------------------------------- beyond the table


def test_interp_matches_torch_where_torch_has_the_mode():
    x = rand(2, 3, 5, 6, seed=3)
    for align, mode, torch_align in ((True, 1, True), (False, 0, False)):
        got = run_op(OpCase("bilinear_interp", {"X": x},
                            attrs=interp_attrs("bilinear", out_h=9, out_w=4,
                                               align_corners=align, align_mode=mode)))["Out"]
        want = F.interpolate(_t(x), size=(9, 4), mode="bilinear", align_corners=torch_align)
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-10, atol=1e-12)


def test_interp_out_size_tensor_overrides_attrs():
    case = OpCase("bilinear_interp", {"X": rand(1, 1, 3, 3),
                                      "OutSize": np.array([5, 2], "int32")},
                  attrs=interp_attrs("bilinear", out_h=4, out_w=4))
    assert run_op(case)["Out"].shape == (1, 1, 5, 2)


def _build(fn, shape, dtype="float32"):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data(name="x", shape=shape, dtype=dtype)
        out = fn(x)
    return main, startup, out


def _run(main, startup, out, feed):
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    return exe.run(main, feed=feed, fetch_list=[out], scope=scope)[0], scope


def test_conv2d_transpose_layer_shapes_params_and_filter_from_output_size():
    main, _, out = _build(lambda x: fluid.layers.conv2d_transpose(
        x, num_filters=6, filter_size=4, stride=2, padding=1, act="relu"), [3, 5, 5])
    assert out.shape == (-1, 6, 10, 10)
    params = {p.name: p.shape for p in main.global_block().all_parameters()}
    assert params == {"conv2d_transpose_0.w_0": (3, 6, 4, 4), "conv2d_transpose_0.b_0": (6,)}
    assert [op.type for op in main.global_block().ops] == ["conv2d_transpose",
                                                           "elementwise_add", "relu"]
    # filter_size=None: Fluid sizes the filter to reach output_size exactly
    main, _, out = _build(lambda x: fluid.layers.conv2d_transpose(
        x, num_filters=2, output_size=[12, 12], stride=2), [3, 5, 5])
    assert out.shape == (-1, 2, 12, 12)
    w = next(p for p in main.global_block().all_parameters() if p.name.endswith("w_0"))
    assert w.shape == (3, 2, 4, 4)


def test_conv2d_transpose_output_size_out_of_reach_names_the_range():
    with pytest.raises(ValueError, match=re.escape("must be in [9, 11)")):
        _build(lambda x: fluid.layers.conv2d_transpose(
            x, num_filters=2, output_size=[12, 12], filter_size=3, stride=2), [3, 4, 4])


def test_resize_layers_and_adaptive_pool_build_fluid_ops():
    main, startup, out = _build(lambda x: fluid.layers.resize_bilinear(
        fluid.layers.adaptive_pool2d(x, pool_size=[2, 3], pool_type="avg"),
        out_shape=[4, 6]), [2, 5, 7])
    ops = main.global_block().ops
    assert [op.type for op in ops] == ["pool2d", "bilinear_interp"]
    assert ops[0].attr("adaptive") and ops[1].attr("align_corners") and \
        ops[1].attr("align_mode") == 1
    x = rand(3, 2, 5, 7, seed=5).astype("float32")
    got, _ = _run(main, startup, out, {"x": x})
    pooled = adaptive_ref(x, {"ksize": [2, 3], "pooling_type": "avg"})["Out"]
    want = F.interpolate(_t(pooled), size=(4, 6), mode="bilinear", align_corners=True)
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-5, atol=1e-6)
    _, _, near = _build(lambda x: fluid.layers.resize_nearest(x, scale=2.0), [2, 5, 7])
    assert near.shape == (-1, 2, 10, 14)
    _, _, short = _build(lambda x: fluid.layers.image_resize_short(x, 4), [2, 5, 7])
    assert short.shape == (-1, 2, 4, 6)  # 7 * 4 / 5 = 5.6 rounds to 6
    main, _, tri = _build(lambda x: fluid.layers.resize_trilinear(x, out_shape=[4, 6, 2]),
                          [1, 2, 3, 4])
    assert tri.shape == (-1, 1, 4, 6, 2)
    assert main.global_block().ops[-1].attr("out_d") == 4


def test_prelu_and_group_norm_layers_create_fluid_parameters():
    main, startup, out = _build(lambda x: fluid.layers.group_norm(
        fluid.layers.prelu(x, mode="channel"), groups=2), [4, 3, 3])
    params = {p.name: p.shape for p in main.global_block().all_parameters()}
    assert params == {"prelu_0.w_0": (1, 4, 1, 1), "group_norm_0.w_0": (4,),
                      "group_norm_0.b_0": (4,)}
    x = rand(2, 4, 3, 3, seed=6).astype("float32")
    got, scope = _run(main, startup, out, {"x": x})
    alpha = np.array(scope.find_var("prelu_0.w_0").get_tensor())
    np.testing.assert_allclose(alpha, 0.25)
    want = group_norm_ref(np.where(x > 0, x, 0.25 * x), np.ones(4), np.zeros(4),
                          {"groups": 2, "epsilon": 1e-5})["Y"]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    main, _, _ = _build(lambda x: fluid.layers.prelu(x, mode="element"), [4, 3, 3])
    assert [p.shape for p in main.global_block().all_parameters()] == [(1, 4, 3, 3)]


def test_l2_normalize_pad_crop_lrn_maxout_layers():
    def net(x):
        h = fluid.layers.l2_normalize(x, axis=1)
        h = fluid.layers.pad(h, paddings=[0, 0, 1, 1, 0, 0, 0, 0])
        h = fluid.layers.lrn(h, n=3)
        h = fluid.layers.maxout(h, groups=2)
        return fluid.layers.crop(h, shape=[-1, 3, 2, 2], offsets=[0, 0, 1, 1])
    main, startup, out = _build(net, [4, 3, 3])
    assert out.shape == (-1, 3, 2, 2)
    x = rand(2, 4, 3, 3, seed=8).astype("float32")
    got, _ = _run(main, startup, out, {"x": x})
    h = x / np.sqrt((x ** 2).sum(1, keepdims=True) + 1e-12)
    h = np.pad(h, [(0, 0), (1, 1), (0, 0), (0, 0)])
    h = lrn_ref(h, {"n": 3, "k": 1.0, "alpha": 1e-4, "beta": 0.75})["Out"]
    h = maxout_ref(h, {"groups": 2})["Out"]
    np.testing.assert_allclose(got, h[:, :, 1:3, 1:3], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op,inputs,attrs,message", [
    ("conv2d_transpose", {"Input": rand(1, 3, 3, 3), "Filter": rand(2, 2, 3, 3)}, {},
     "Input has 3 channels"),
    ("pad2d", {"X": rand(1, 1, 2, 2)}, {"paddings": [2, 0, 0, 0], "mode": "reflect"},
     "must each be smaller than the padded dim"),
    ("pad", {"X": rand(2, 3)}, {"paddings": [1, 1]}, "2 * rank = 4 values"),
    ("crop", {"X": rand(3, 4)}, {"shape": [2, 3], "offsets": [2, 0]}, "exceeds X's 3"),
    ("pixel_shuffle", {"X": rand(1, 6, 2, 2)}, {"upscale_factor": 2}, "divisible by"),
    ("space_to_depth", {"X": rand(1, 4, 3, 4)}, {"blocksize": 2}, "height of X"),
    ("group_norm", {"X": rand(2, 6, 2)}, {"groups": 4}, "divisible by groups=4"),
    ("prelu", {"X": rand(2, 3, 2, 2), "Alpha": rand(2)}, {"mode": "channel"},
     "needs 3 alpha values"),
    ("bilinear_interp", {"X": rand(1, 1, 2, 2)}, interp_attrs("bilinear"),
     "output size must be positive"),
])
def test_bad_shapes_and_attrs_name_the_op(op, inputs, attrs, message):
    with pytest.raises(ValueError, match=r"(?s)" + op + ".*" + re.escape(message)):
        run_op(OpCase(op, inputs, attrs=attrs))
