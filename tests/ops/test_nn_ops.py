"""Op table: nn family (conv2d, pool2d, batch_norm, layer_norm, dropout, lookup_table)."""

import math
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


def conv_ref(strides=1, paddings=0, dilations=1, groups=1):
    def ref(Input, Filter):
        out = F.conv2d(_t(Input), _t(Filter), None, strides, paddings, dilations, groups)
        return {"Output": out.numpy()}
    return ref


def fluid_pool_ref(X, attrs):
    """Fluid's pool2d semantics written as loops: clipped windows, Fluid's divisors."""
    n, c, h, w = X.shape
    if attrs["global_pooling"]:
        kh, kw, sh, sw, ph, pw = h, w, 1, 1, 0, 0
    else:
        (kh, kw), (sh, sw), (ph, pw) = attrs["ksize"], attrs["strides"], attrs["paddings"]

    def out_size(size, k, s, p):
        if not attrs["ceil_mode"]:
            return (size + 2 * p - k) // s + 1
        out = -(-(size + 2 * p - k) // s) + 1
        return out - 1 if (out - 1) * s >= size + p else out

    oh, ow = out_size(h, kh, sh, ph), out_size(w, kw, sw, pw)
    out = np.zeros((n, c, oh, ow), X.dtype)
    for i in range(oh):
        for j in range(ow):
            hs, ws = i * sh - ph, j * sw - pw
            he, we = min(hs + kh, h), min(ws + kw, w)
            hs, ws = max(hs, 0), max(ws, 0)
            win = X[:, :, hs:he, ws:we]
            if attrs["pooling_type"] == "max":
                out[:, :, i, j] = win.max(axis=(2, 3))
            else:
                div = win.shape[2] * win.shape[3] if attrs["exclusive"] else kh * kw
                out[:, :, i, j] = win.sum(axis=(2, 3)) / div
    return {"Out": out}


def bn_ref(X, Scale, Bias, Mean, Variance, attrs):
    layout = attrs["data_layout"]
    axis = X.ndim - 1 if layout == "NHWC" and X.ndim > 2 else 1
    dims = tuple(d for d in range(X.ndim) if d != axis)
    view = [1] * X.ndim
    view[axis] = -1
    eps, m = attrs["epsilon"], attrs["momentum"]
    if attrs["is_test"] or attrs["use_global_stats"]:
        mean, var = Mean, Variance
        mean_out, var_out = Mean, Variance
    else:
        mean, var = X.mean(axis=dims), X.var(axis=dims)
        mean_out, var_out = Mean * m + mean * (1 - m), Variance * m + var * (1 - m)
    inv = 1.0 / np.sqrt(var + eps)
    y = (X - mean.reshape(view)) * inv.reshape(view) * Scale.reshape(view) + Bias.reshape(view)
    return {"Y": y, "MeanOut": mean_out, "VarianceOut": var_out, "SavedMean": mean,
            "SavedVariance": inv}


def ln_ref(X, attrs, Scale=None, Bias=None):
    k = attrs["begin_norm_axis"]
    x2 = X.reshape(int(np.prod(X.shape[:k])), -1)
    mean, var = x2.mean(1), x2.var(1)
    y = (x2 - mean[:, None]) / np.sqrt(var[:, None] + attrs["epsilon"])
    if Scale is not None:
        y = y * Scale.reshape(-1)
    if Bias is not None:
        y = y + Bias.reshape(-1)
    return {"Y": y.reshape(X.shape), "Mean": mean, "Variance": var}


def lookup_ref(W, Ids, attrs):
    flat = Ids.reshape(-1)
    out = W[flat].copy()
    if attrs["padding_idx"] != -1:
        out[flat == attrs["padding_idx"]] = 0
    shape = Ids.shape[:-1] if Ids.ndim > 1 and Ids.shape[-1] == 1 else Ids.shape
    return {"Out": out.reshape(*shape, W.shape[1])}


def bn_inputs(x, c, seed=3):
    return {"X": x, "Scale": rand(c, low=0.5, high=1.5, seed=seed),
            "Bias": rand(c, seed=seed + 1), "Mean": rand(c, seed=seed + 2),
            "Variance": rand(c, low=0.5, high=2.0, seed=seed + 3)}


def dropout_check(p, upscale):
    def check(got, attrs):
        x, out, mask = DROPOUT_X, got["Out"], got["Mask"]
        assert mask.dtype == np.uint8 and set(np.unique(mask)) <= {0, 1}
        keep = mask.mean()
        # 2000 Bernoulli draws: the kept fraction is within 4.5 sigma of 1 - p.
        assert abs(keep - (1 - p)) < 4.5 * math.sqrt(p * (1 - p) / mask.size), keep
        scale = 1.0 / (1 - p) if upscale else 1.0
        np.testing.assert_allclose(out, x * mask * scale, rtol=1e-6)
    return check


DROPOUT_X = rand(40, 50, low=0.5, high=1.5, seed=7).astype("float32")

POOL = {"pooling_type": "max", "ksize": [2, 2], "strides": [2, 2], "paddings": [0, 0],
        "global_pooling": False, "exclusive": True, "ceil_mode": False}

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
    OpCase("pool2d", {"X": rand(1, 2, 4, 4)}, attrs=dict(POOL), ref=fluid_pool_ref,
           grad=["X"], id="pool2d_max"),
    OpCase("pool2d", {"X": rand(1, 2, 5, 5)},
           attrs={**POOL, "ksize": [3, 3], "paddings": [1, 1]}, ref=fluid_pool_ref,
           grad=["X"], id="pool2d_max_pad"),
    OpCase("pool2d", {"X": rand(1, 2, 5, 5)},
           attrs={**POOL, "pooling_type": "avg", "ksize": [3, 3], "paddings": [1, 1]},
           ref=fluid_pool_ref, grad=["X"], id="pool2d_avg_exclusive"),
    OpCase("pool2d", {"X": rand(1, 1, 5, 5)},
           attrs={**POOL, "pooling_type": "avg", "ksize": [2, 2], "paddings": [1, 1],
                  "exclusive": False, "ceil_mode": True},
           ref=fluid_pool_ref, grad=["X"], id="pool2d_avg_inclusive_ceil"),
    OpCase("pool2d", {"X": rand(1, 1, 5, 5)},
           attrs={**POOL, "ksize": [2, 2], "ceil_mode": True},
           ref=fluid_pool_ref, grad=["X"], id="pool2d_max_ceil"),
    OpCase("pool2d", {"X": rand(2, 3, 3, 4)},
           attrs={**POOL, "pooling_type": "avg", "global_pooling": True},
           ref=fluid_pool_ref, grad=["X"], id="pool2d_global_avg"),
    OpCase("batch_norm", bn_inputs(rand(2, 3, 2, 2), 3), ref=bn_ref,
           grad=["X", "Scale", "Bias"], grad_outputs=["Y"], id="batch_norm_train"),
    OpCase("batch_norm", bn_inputs(rand(2, 3, 2, 2), 3), attrs={"is_test": True},
           ref=bn_ref, grad=["X", "Scale", "Bias"], grad_outputs=["Y"],
           id="batch_norm_is_test"),
    OpCase("batch_norm", bn_inputs(rand(2, 3, 2, 2), 3), attrs={"use_global_stats": True},
           ref=bn_ref, grad=["X", "Scale", "Bias"], grad_outputs=["Y"],
           id="batch_norm_global_stats"),
    OpCase("batch_norm", bn_inputs(rand(5, 3), 3), attrs={"momentum": 0.8}, ref=bn_ref,
           grad=["X", "Scale", "Bias"], grad_outputs=["Y"], id="batch_norm_2d"),
    OpCase("batch_norm", bn_inputs(rand(2, 2, 2, 3), 3), attrs={"data_layout": "NHWC"},
           ref=bn_ref, grad=["X", "Scale", "Bias"], grad_outputs=["Y"],
           id="batch_norm_nhwc"),
    OpCase("layer_norm", {"X": rand(2, 3, 4), "Scale": rand(12, seed=1),
                          "Bias": rand(12, seed=2)},
           ref=ln_ref, grad=["X", "Scale", "Bias"], grad_outputs=["Y"]),
    OpCase("layer_norm", {"X": rand(2, 3, 4), "Scale": rand(4, seed=1),
                          "Bias": rand(4, seed=2)}, attrs={"begin_norm_axis": 2},
           ref=ln_ref, grad=["X", "Scale", "Bias"], grad_outputs=["Y"], id="layer_norm_axis2"),
    OpCase("layer_norm", {"X": rand(3, 5)}, ref=ln_ref, grad=["X"], grad_outputs=["Y"],
           id="layer_norm_no_affine"),
    OpCase("dropout", {"X": DROPOUT_X}, attrs={"dropout_prob": 0.3, "fix_seed": True,
                                               "seed": 11},
           check=dropout_check(0.3, False), id="dropout_downgrade_stats"),
    OpCase("dropout", {"X": DROPOUT_X},
           attrs={"dropout_prob": 0.6, "fix_seed": True, "seed": 5,
                  "dropout_implementation": "upscale_in_train"},
           check=dropout_check(0.6, True), id="dropout_upscale_stats"),
    OpCase("dropout", {"X": rand(3, 4)}, attrs={"dropout_prob": 0.4, "fix_seed": True,
                                                "seed": 3},
           grad=["X"], id="dropout_grad_fixed_seed"),
    OpCase("dropout", {"X": rand(3, 4)},
           attrs={"dropout_prob": 0.4, "fix_seed": True, "seed": 3,
                  "dropout_implementation": "upscale_in_train"},
           grad=["X"], id="dropout_upscale_grad"),
    OpCase("dropout", {"X": rand(3, 4)}, attrs={"dropout_prob": 0.4, "is_test": True},
           ref=lambda X: {"Out": X * 0.6, "Mask": np.ones((3, 4), np.uint8)}, grad=["X"],
           id="dropout_is_test"),
    OpCase("dropout", {"X": rand(3, 4)},
           attrs={"dropout_prob": 0.4, "is_test": True,
                  "dropout_implementation": "upscale_in_train"},
           ref=lambda X: {"Out": X}, grad=["X"], id="dropout_is_test_upscale"),
    OpCase("lookup_table", {"W": rand(5, 3), "Ids": np.array([[1], [3], [1], [0]], "int64")},
           ref=lookup_ref, grad=["W"]),
    OpCase("lookup_table", {"W": rand(5, 3), "Ids": np.array([4, 2, 4], "int64")},
           attrs={"padding_idx": 2}, ref=lookup_ref, grad=["W"], id="lookup_table_1d_padding"),
    OpCase("lookup_table", {"W": rand(6, 2), "Ids": np.array([[[1], [5]], [[1], [0]]], "int64")},
           attrs={"is_sparse": True}, ref=lookup_ref, grad=["W"], id="lookup_table_sparse"),
    OpCase("lookup_table_v2", {"W": rand(5, 3), "Ids": np.array([[1], [3], [1], [0]], "int64")},
           ref=lambda W, Ids: {"Out": W[Ids]}, grad=["W"]),  # keeps the trailing 1: [4, 1, 3]
    OpCase("lookup_table_v2", {"W": rand(5, 3), "Ids": np.array([4, 2, 4], "int64")},
           attrs={"padding_idx": 2, "is_sparse": True},
           ref=lambda W, Ids: {"Out": np.where((Ids == 2)[:, None], 0.0, W[Ids])}, grad=["W"],
           id="lookup_table_v2_sparse_padding"),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_op(case):
    check_op(case)


# ----------------------------------------------------------------------------- beyond the table


def _dropout_case(**attrs):
    return OpCase("dropout", {"X": DROPOUT_X}, attrs={"dropout_prob": 0.5, **attrs})


def test_dropout_fixed_seed_repeats_and_seeds_differ():
    a = run_op(_dropout_case(fix_seed=True, seed=17))["Mask"]
    b = run_op(_dropout_case(fix_seed=True, seed=17))["Mask"]
    c = run_op(_dropout_case(fix_seed=True, seed=18))["Mask"]
    np.testing.assert_array_equal(a, b)
    assert (a != c).mean() > 0.3  # independent masks disagree on about half the entries


def test_dropout_fixed_seed_repeats_across_runs_of_one_program():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data(name="x", shape=[50], dtype="float32")
        y = fluid.layers.dropout(x, dropout_prob=0.5, seed=9)
    exe = fluid.Executor(fluid.CPUPlace())
    feed = {"x": DROPOUT_X}
    first, = exe.run(main, feed=feed, fetch_list=[y])
    second, = exe.run(main, feed=feed, fetch_list=[y])
    np.testing.assert_array_equal(first, second)
    assert 0.3 < (first == 0).mean() < 0.7


def test_dropout_unseeded_masks_change_between_runs():
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        x = fluid.layers.data(name="x", shape=[50], dtype="float32")
        y = fluid.layers.dropout(x, dropout_prob=0.5)
    exe = fluid.Executor(fluid.CPUPlace())
    first, = exe.run(main, feed={"x": DROPOUT_X}, fetch_list=[y])
    second, = exe.run(main, feed={"x": DROPOUT_X}, fetch_list=[y])
    assert ((first == 0) != (second == 0)).mean() > 0.3


def _embedding_program(is_sparse, padding_idx=None):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        ids = fluid.layers.data(name="ids", shape=[1], dtype="int64")
        emb = fluid.layers.embedding(ids, size=[6, 3], is_sparse=is_sparse,
                                     padding_idx=padding_idx,
                                     param_attr=fluid.ParamAttr(name="emb_w"))
        loss = fluid.layers.mean(emb)
        fluid.optimizer.SGD(learning_rate=0.5).minimize(loss)
    return main, startup, loss


@pytest.mark.parametrize("is_sparse", [False, True])
def test_embedding_sgd_updates_only_looked_up_rows(is_sparse):
    main, startup, loss = _embedding_program(is_sparse, padding_idx=4)
    grad_var = main.global_block().var("emb_w@GRAD")
    assert grad_var.type == ("selected_rows" if is_sparse else "lod_tensor")
    scope = fluid.Scope()
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup, scope=scope)
    before = np.array(scope.find_var("emb_w").get_tensor())
    ids = np.array([[1], [3], [1], [4]], "int64")
    exe.run(main, feed={"ids": ids}, fetch_list=[loss], scope=scope)
    after = np.array(scope.find_var("emb_w").get_tensor())
    # mean over 4x3 outputs: each looked-up element has gradient 1/12; row 1 is used twice
    # and row 4 is the padding row (zero gradient).
    expected = before.copy()
    expected[1] -= 0.5 * 2 / 12
    expected[3] -= 0.5 / 12
    np.testing.assert_allclose(after, expected, rtol=1e-6)


def test_embedding_negative_padding_idx_counts_from_the_end():
    main, _, _ = _embedding_program(False, padding_idx=-1)
    op = next(op for op in main.global_block().ops if op.type == "lookup_table")
    assert op.attr("padding_idx") == 5


@pytest.mark.parametrize("op,inputs,attrs,message", [
    ("conv2d", {"Input": rand(1, 3, 5, 5), "Filter": rand(2, 2, 3, 3)}, {},
     "Input has 3 channels"),
    ("conv2d", {"Input": rand(1, 2, 2, 2), "Filter": rand(2, 2, 3, 3)}, {}, "too small"),
    ("conv2d", {"Input": rand(1, 2, 5, 5), "Filter": rand(2, 2, 3, 3)},
     {"paddings": [0, 1, 0, 0]}, "asymmetric paddings"),
    ("pool2d", {"X": rand(1, 2, 4)}, {}, "must be 4-D"),
    ("batch_norm", bn_inputs(rand(2, 3, 2, 2), 4), {}, "Scale must have shape [3]"),
    ("layer_norm", {"X": rand(2, 3), "Scale": rand(4)}, {}, "Scale must have 3 elements"),
    ("dropout", {"X": rand(2, 3)}, {"dropout_prob": 1.5}, "dropout_prob must be in [0, 1]"),
])
def test_bad_shapes_and_attrs_name_the_op(op, inputs, attrs, message):
    with pytest.raises(ValueError, match=r"(?s)" + op + ".*" + re.escape(message)):
        run_op(OpCase(op, inputs, attrs=attrs))


def test_lookup_table_id_out_of_range():
    case = OpCase("lookup_table", {"W": rand(4, 2), "Ids": np.array([[1], [4]], "int64")})
    with pytest.raises(fluid.OpRunError, match="id 4 is out of range for a table of 4 rows"):
        run_op(case)


def test_batch_norm_layer_updates_moving_stats_in_place_and_test_clone_uses_them():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data(name="x", shape=[3], dtype="float32")
        y = fluid.layers.batch_norm(x, momentum=0.8, moving_mean_name="mm",
                                    moving_variance_name="mv")
    test_program = main.clone(for_test=True)
    op = main.global_block().ops[-1]
    assert op.output("MeanOut") == op.input("Mean") == ["mm"]
    assert main.global_block().var("mm").persistable
    assert not main.global_block().var("mm").trainable
    scope, exe = fluid.Scope(), fluid.Executor(fluid.CPUPlace())
    exe.run(startup, scope=scope)
    batches = [rand(4, 3, seed=s).astype("float32") * (s + 1) for s in range(2)]
    mean, var = np.zeros(3), np.ones(3)
    for xb in batches:
        exe.run(main, feed={"x": xb}, fetch_list=[y], scope=scope)
        mean = mean * 0.8 + xb.mean(0) * 0.2
        var = var * 0.8 + xb.var(0) * 0.2
    np.testing.assert_allclose(np.array(scope.find_var("mm").get_tensor()), mean, rtol=1e-5)
    np.testing.assert_allclose(np.array(scope.find_var("mv").get_tensor()), var, rtol=1e-5)
    probe = rand(2, 3, seed=9).astype("float32")
    got, = exe.run(test_program, feed={"x": probe}, fetch_list=[y.name], scope=scope)
    np.testing.assert_allclose(got, (probe - mean) / np.sqrt(var + 1e-5), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(np.array(scope.find_var("mm").get_tensor()), mean, rtol=1e-5)
