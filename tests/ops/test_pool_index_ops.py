"""Op table: max_pool2d/3d_with_index (Out and Mask), unpool, spp, conv_shift, and
group_norm's NHWC layout, against loop references written from Fluid's kernels."""

import numpy as np
import pytest

import parafluid as fluid
from parafluid.testing import OpCase, check_op, rand
from parafluid.testing.refs import build_layer, run_built
from parafluid.testing.window_refs import pool_ref


def _distinct(*shape, seed=0):
    """Values far apart, so that a max window's argmax survives the FD step."""
    n = int(np.prod(shape))
    return (np.random.RandomState(seed).permutation(n).reshape(shape) / n).astype("float64")


def with_index_ref(nd):
    """Fluid's MaxPool*WithIndex: clipped windows, floor mode, Mask = the first maximum's
    position flattened in its (n, c) plane."""
    def ref(X, attrs):
        spatial = X.shape[2:]
        ksize, strides = list(attrs["ksize"]), list(attrs["strides"])
        pads = list(attrs["paddings"])
        if attrs["global_pooling"]:
            ksize, pads = list(spatial), [0] * nd
        if attrs["adaptive"]:
            sizes = ksize
        else:
            sizes = [(spatial[i] + 2 * pads[i] - ksize[i]) // strides[i] + 1 for i in range(nd)]
        out = np.zeros(X.shape[:2] + tuple(sizes))
        mask = np.zeros(X.shape[:2] + tuple(sizes), "int32")
        for pos in np.ndindex(*sizes):
            bounds = []
            for i, p in enumerate(pos):
                if attrs["adaptive"]:
                    bounds.append(((p * spatial[i]) // sizes[i],
                                   -(-((p + 1) * spatial[i]) // sizes[i])))
                else:
                    s = p * strides[i] - pads[i]
                    bounds.append((max(s, 0), min(s + ksize[i], spatial[i])))
            for n, c in np.ndindex(*X.shape[:2]):
                win = X[(n, c) + tuple(slice(a, b) for a, b in bounds)]
                local = np.unravel_index(np.argmax(win), win.shape)
                where = tuple(a + l for (a, _), l in zip(bounds, local))
                out[(n, c) + pos] = X[(n, c) + where]
                mask[(n, c) + pos] = np.ravel_multi_index(where, spatial)
        return {"Out": out, "Mask": mask}
    return ref


WI = {"global_pooling": False, "adaptive": False}


def unpool_ref(X, Indices, attrs):
    (kh, kw), (sh, sw), (ph, pw) = attrs["ksize"], attrs["strides"], attrs["paddings"]
    h, w = (X.shape[2] - 1) * sh - 2 * ph + kh, (X.shape[3] - 1) * sw - 2 * pw + kw
    out = np.zeros(X.shape[:2] + (h * w,))
    for n, c in np.ndindex(*X.shape[:2]):
        out[n, c, Indices[n, c].reshape(-1)] = X[n, c].reshape(-1)
    return {"Out": out.reshape(X.shape[:2] + (h, w))}


def _pool_mask(x, k):
    """Indices of a k x k, stride k max pooling (unpool's input)."""
    return with_index_ref(2)(x, {**WI, "ksize": [k, k], "strides": [k, k],
                                 "paddings": [0, 0]})


def spp_ref(X, attrs):
    n, c, h, w = X.shape
    outs = []
    for p in range(attrs["pyramid_height"]):
        bins = 2 ** p
        kh, kw = -(-h // bins), -(-w // bins)
        level = pool_ref()(X, {"pooling_type": attrs["pooling_type"], "ksize": [kh, kw],
                               "strides": [kh, kw],
                               "paddings": [(kh * bins - h + 1) // 2, (kw * bins - w + 1) // 2],
                               "global_pooling": False, "exclusive": True,
                               "ceil_mode": False})["Out"]
        assert level.shape[2:] == (bins, bins)
        outs.append(level.reshape(n, -1))
    return {"Out": np.concatenate(outs, 1)}


def conv_shift_ref(X, Y):
    b, m = X.shape
    half = (Y.shape[1] - 1) // 2
    out = np.zeros_like(X)
    for i in range(m):
        for j in range(Y.shape[1]):
            out[:, i] += X[:, (i + j - half) % m] * Y[:, j]
    return {"Out": out}


def group_norm_ref(X, Scale, Bias, attrs):
    last = attrs["data_layout"] == "NHWC"
    x = np.moveaxis(X, -1, 1) if last else X
    n, c = x.shape[:2]
    g = attrs["groups"]
    xg = x.reshape(n, g, -1)
    mean, var = xg.mean(-1), xg.var(-1)
    y = ((xg - mean[..., None]) / np.sqrt(var[..., None] + attrs["epsilon"])).reshape(x.shape)
    y = y * Scale.reshape(1, c, *[1] * (x.ndim - 2)) + Bias.reshape(1, c, *[1] * (x.ndim - 2))
    return {"Y": np.moveaxis(y, 1, -1) if last else y, "Mean": mean, "Variance": var}


_UNPOOL_X = _distinct(1, 2, 4, 4)
_UNPOOL = _pool_mask(_UNPOOL_X, 2)

CASES = [
    OpCase("max_pool2d_with_index", {"X": _distinct(2, 2, 4, 4)},
           attrs={**WI, "ksize": [2, 2], "strides": [2, 2], "paddings": [0, 0]},
           ref=with_index_ref(2), grad=["X"], grad_outputs=["Out"],
           id="max_pool2d_with_index"),
    OpCase("max_pool2d_with_index", {"X": _distinct(1, 2, 5, 5)},
           attrs={**WI, "ksize": [3, 3], "strides": [1, 1], "paddings": [1, 1]},
           ref=with_index_ref(2), grad=["X"], grad_outputs=["Out"],
           id="max_pool2d_with_index_padding"),
    OpCase("max_pool2d_with_index", {"X": _distinct(1, 2, 5, 5)},
           attrs={**WI, "ksize": [3, 3], "strides": [2, 2], "paddings": [2, 2]},
           ref=with_index_ref(2), grad=["X"], grad_outputs=["Out"],
           id="max_pool2d_with_index_padding_past_half_window"),
    OpCase("max_pool2d_with_index", {"X": _distinct(1, 3, 4, 5)},
           attrs={**WI, "ksize": [1, 1], "strides": [1, 1], "paddings": [1, 1],
                  "global_pooling": True},
           ref=with_index_ref(2), grad=["X"], grad_outputs=["Out"],
           id="max_pool2d_with_index_global"),
    OpCase("max_pool2d_with_index", {"X": _distinct(1, 2, 5, 7)},
           attrs={**WI, "ksize": [2, 3], "strides": [1, 1], "paddings": [0, 0],
                  "adaptive": True},
           ref=with_index_ref(2), grad=["X"], grad_outputs=["Out"],
           id="max_pool2d_with_index_adaptive"),
    OpCase("max_pool3d_with_index", {"X": _distinct(1, 2, 4, 4, 4)},
           attrs={**WI, "ksize": [2, 2, 2], "strides": [2, 2, 2], "paddings": [0, 0, 0]},
           ref=with_index_ref(3), grad=["X"], grad_outputs=["Out"],
           id="max_pool3d_with_index"),
    OpCase("max_pool3d_with_index", {"X": _distinct(1, 1, 3, 5, 4)},
           attrs={**WI, "ksize": [2, 3, 2], "strides": [1, 1, 1], "paddings": [0, 0, 0],
                  "adaptive": True},
           ref=with_index_ref(3), grad=["X"], grad_outputs=["Out"],
           id="max_pool3d_with_index_adaptive"),
    OpCase("unpool", {"X": _UNPOOL["Out"], "Indices": _UNPOOL["Mask"]},
           attrs={"unpooling_type": "max", "ksize": [2, 2], "strides": [2, 2],
                  "paddings": [0, 0]}, ref=unpool_ref, grad=["X"], id="unpool"),
    OpCase("spp", {"X": _distinct(1, 2, 4, 4)}, attrs={"pyramid_height": 3,
                                                       "pooling_type": "max"},
           ref=spp_ref, grad=["X"], id="spp_max"),
    OpCase("spp", {"X": rand(2, 2, 5, 5)}, attrs={"pyramid_height": 2, "pooling_type": "avg"},
           ref=spp_ref, grad=["X"], id="spp_avg_padded_level"),
    OpCase("conv_shift", {"X": rand(2, 5), "Y": rand(2, 3, seed=1)}, ref=conv_shift_ref,
           grad=["X", "Y"], id="conv_shift"),
    OpCase("conv_shift", {"X": rand(3, 4), "Y": rand(3, 1, seed=1)}, ref=conv_shift_ref,
           grad=["X", "Y"], id="conv_shift_width1"),
    OpCase("group_norm", {"X": np.moveaxis(rand(2, 4, 3, 2), 1, -1).copy(),
                          "Scale": rand(4, seed=1), "Bias": rand(4, seed=2)},
           attrs={"groups": 2, "epsilon": 1e-5, "data_layout": "NHWC"},
           ref=group_norm_ref, grad=["X", "Scale", "Bias"], grad_outputs=["Y"],
           id="group_norm_nhwc"),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_op(case):
    check_op(case)


def test_adaptive_max_layers_emit_with_index_ops_and_return_the_mask():
    x = _distinct(2, 3, 5, 7)
    main, startup, out = build_layer(lambda v: fluid.layers.adaptive_pool2d(
        v, pool_size=[2, 3], pool_type="max", require_index=True), [3, 5, 7], "float64")
    pooled, mask = out
    assert [o.type for o in main.global_block().ops] == ["max_pool2d_with_index"]
    assert mask.dtype == "int32" and pooled.shape == (-1, 3, 2, 3)
    got, _ = run_built(main, startup, pooled, {"x": x})
    attrs = {**WI, "ksize": [2, 3], "strides": [1, 1], "paddings": [0, 0], "adaptive": True}
    np.testing.assert_allclose(got, with_index_ref(2)(x, attrs)["Out"])
    main, _, out = build_layer(lambda v: fluid.layers.adaptive_pool3d(
        v, pool_size=2, pool_type="max"), [1, 4, 4, 4])
    assert [o.type for o in main.global_block().ops] == ["max_pool3d_with_index"]


def test_group_norm_layer_nhwc_parameters_follow_the_last_axis():
    main, startup, out = build_layer(lambda v: fluid.layers.group_norm(
        v, groups=2, data_layout="NHWC", param_attr=fluid.ParamAttr(),
        bias_attr=fluid.ParamAttr()), [3, 2, 4])
    shapes = sorted(p.shape for p in main.global_block().all_parameters())
    assert shapes == [(4,), (4,)]
    op = next(o for o in main.global_block().ops if o.type == "group_norm")
    assert op.attr("data_layout") == "NHWC"
    x = rand(2, 3, 2, 4).astype("float32")
    got, _ = run_built(main, startup, out, {"x": x})
    want = group_norm_ref(x.astype("float64"), np.ones(4), np.zeros(4),
                          {"groups": 2, "epsilon": 1e-5, "data_layout": "NHWC"})["Y"]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
