"""Op table: normalizations (batch_norm, layer_norm, group_norm, instance_norm) and their
layers' parameters and moving statistics."""

import re

import numpy as np
import pytest

import parafluid as fluid
from parafluid.testing import OpCase, check_op, rand, run_op
from parafluid.testing.refs import build_layer, run_built


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


def bn_inputs(x, c, seed=3):
    return {"X": x, "Scale": rand(c, low=0.5, high=1.5, seed=seed),
            "Bias": rand(c, seed=seed + 1), "Mean": rand(c, seed=seed + 2),
            "Variance": rand(c, low=0.5, high=2.0, seed=seed + 3)}


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


CASES = [
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
    OpCase("group_norm", {"X": rand(2, 4, 3, 2), "Scale": rand(4, seed=1),
                          "Bias": rand(4, seed=2)},
           attrs={"groups": 2, "epsilon": 1e-5}, ref=group_norm_ref,
           grad=["X", "Scale", "Bias"], grad_outputs=["Y"]),
    OpCase("instance_norm", {"X": rand(2, 3, 2, 3), "Scale": rand(3, seed=1),
                             "Bias": rand(3, seed=2)}, ref=instance_norm_ref,
           grad=["X", "Scale", "Bias"], grad_outputs=["Y"]),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_op(case):
    check_op(case)


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


def test_group_norm_layer_has_a_scale_and_bias_only_when_asked_as_fluid_1_6():
    # Fluid 1.6's layer creates them under ``if param_attr:`` / ``if bias_attr:``: with the
    # defaults (None) the op has no Scale and no Bias, and runs without a startup program
    main, _, out = build_layer(lambda x: fluid.layers.group_norm(x, groups=2), [4, 3, 3])
    assert main.global_block().all_parameters() == []
    op = next(o for o in main.global_block().ops if o.type == "group_norm")
    assert "Scale" not in op.inputs and "Bias" not in op.inputs
    x = rand(2, 4, 3, 3, seed=6).astype("float32")
    got, = fluid.Executor(fluid.CPUPlace()).run(main, feed={"x": x}, fetch_list=[out],
                                                 scope=fluid.Scope())
    want = group_norm_ref(x, np.ones(4), np.zeros(4), {"groups": 2, "epsilon": 1e-5})["Y"]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    main, _, _ = build_layer(lambda x: fluid.layers.group_norm(
        x, groups=2, param_attr=fluid.ParamAttr()), [4, 3, 3])
    assert [p.shape for p in main.global_block().all_parameters()] == [(4,)]  # the scale


def test_prelu_and_group_norm_layers_create_fluid_parameters():
    main, startup, out = build_layer(lambda x: fluid.layers.group_norm(
        fluid.layers.prelu(x, mode="channel"), groups=2, param_attr=fluid.ParamAttr(),
        bias_attr=fluid.ParamAttr()), [4, 3, 3])
    params = {p.name: p.shape for p in main.global_block().all_parameters()}
    assert params == {"prelu_0.w_0": (1, 4, 1, 1), "group_norm_0.w_0": (4,),
                      "group_norm_0.b_0": (4,)}
    x = rand(2, 4, 3, 3, seed=6).astype("float32")
    got, scope = run_built(main, startup, out, {"x": x})
    alpha = np.array(scope.find_var("prelu_0.w_0").get_tensor())
    np.testing.assert_allclose(alpha, 0.25)
    want = group_norm_ref(np.where(x > 0, x, 0.25 * x), np.ones(4), np.zeros(4),
                          {"groups": 2, "epsilon": 1e-5})["Y"]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    main, _, _ = build_layer(lambda x: fluid.layers.prelu(x, mode="element"), [4, 3, 3])
    assert [p.shape for p in main.global_block().all_parameters()] == [(1, 4, 3, 3)]


@pytest.mark.parametrize("op,inputs,attrs,message", [
    ("batch_norm", bn_inputs(rand(2, 3, 2, 2), 4), {}, "Scale must have shape [3]"),
    ("layer_norm", {"X": rand(2, 3), "Scale": rand(4)}, {}, "Scale must have 3 elements"),
    ("group_norm", {"X": rand(2, 6, 2)}, {"groups": 4}, "divisible by groups=4"),
])
def test_bad_shapes_and_attrs_name_the_op(op, inputs, attrs, message):
    with pytest.raises(ValueError, match=r"(?s)" + op + ".*" + re.escape(message)):
        run_op(OpCase(op, inputs, attrs=attrs))
