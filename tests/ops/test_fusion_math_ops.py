"""Op table: Fluid's fused math ops (fusion_repeated_fc_relu, fusion_squared_mat_sub,
fused_fc_elementwise_layernorm, fusion_transpose_flatten_concat, multihead_matmul) against
numpy references, and each against its chain of unfused ops run as a parafluid program
(bitwise: the fused kernels run the unfused kernels). Fluid registers no gradient for them."""

import numpy as np
import pytest

from parafluid.ops import get_op_def
from parafluid.testing import OpCase, check_op, rand, run_op, run_op_chain


def relu(v):
    return np.maximum(v, 0)


def softmax(v, axis=-1):
    e = np.exp(v - v.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def layer_norm(v, scale, bias, eps, axis):
    rows = int(np.prod(v.shape[:axis]))
    v2 = v.reshape(rows, -1)
    mean, var = v2.mean(1), v2.var(1)
    y = (v2 - mean[:, None]) / np.sqrt(var[:, None] + eps)
    if scale is not None:
        y = y * scale.reshape(-1)
    if bias is not None:
        y = y + bias.reshape(-1)
    return y.reshape(v.shape), mean, var


# ---------------------------------------------------------------- references


def repeated_ref(X, W, Bias):
    h, relus = X, []
    for w, b in zip(W, Bias):
        h = relu(h @ w + b.reshape(-1))
        relus.append(h)
    return {"Out": relus[-1], "ReluOut": relus[:-1]}


def squared_ref(X, Y, attrs):
    return {"SquaredX": X ** 2, "SquaredY": Y ** 2, "SquaredXY": (X @ Y) ** 2,
            "Out": ((X @ Y) ** 2 - (X ** 2) @ (Y ** 2)) * attrs["scalar"]}


def fc_ln_ref(X, W, Y, attrs, Bias0=None, Scale=None, Bias1=None):
    k = attrs["x_num_col_dims"]
    fc = (X.reshape(int(np.prod(X.shape[:k])), -1) @ W).reshape(*X.shape[:k], -1)
    if Bias0 is not None:
        fc = fc + Bias0.reshape(-1)
    if attrs["activation_type"] == "relu":
        fc = relu(fc)
    out, mean, var = layer_norm(fc + Y, Scale, Bias1, attrs["epsilon"],
                                attrs["begin_norm_axis"])
    return {"Out": out, "Mean": mean, "Variance": var}


def tfc_ref(X, attrs):
    flat = []
    for x in X:
        t = np.transpose(x, attrs["trans_axis"])
        axis = attrs["flatten_axis"]
        flat.append(t.reshape(int(np.prod(t.shape[:axis])), -1))
    return {"Out": np.concatenate(flat, attrs["concat_axis"])}


def mhm_ref(Q, K, V, BiasQ, BiasK, BiasV, BiasQK, attrs):
    heads = attrs["head_number"]
    b, s, w = Q.shape

    def split(x, bias):
        return (x + bias.reshape(-1)).reshape(b, s, heads, w // heads).transpose(0, 2, 1, 3)

    q, k, v = split(Q, BiasQ) * attrs["alpha"], split(K, BiasK), split(V, BiasV)
    probs = softmax(q @ k.transpose(0, 1, 3, 2) + BiasQK, 3)
    return {"Out": (probs @ v).transpose(0, 2, 1, 3).reshape(b, s, w)}


X5 = rand(5, 4, seed=1)
W_CHAIN = [rand(4, 3, seed=2), rand(3, 6, seed=3), rand(6, 2, seed=4)]
B_CHAIN = [rand(1, 3, seed=5), rand(6, seed=6), rand(1, 2, seed=7)]
FC_X = rand(2, 3, 4, seed=8)
FC_W = rand(4, 5, seed=9)
FC_Y = rand(2, 3, 5, seed=10)
TFC_X = [rand(2, 3, 4, 2, seed=11), rand(2, 5, 4, 2, seed=12)]
MHM = {"Q": rand(2, 3, 4, seed=13), "K": rand(2, 3, 4, seed=14), "V": rand(2, 3, 4, seed=15),
       "BiasQ": rand(1, 4, seed=16), "BiasK": rand(1, 4, seed=17), "BiasV": rand(1, 4, seed=18),
       "BiasQK": rand(2, 2, 3, 3, seed=19)}

CASES = [
    OpCase("fusion_repeated_fc_relu", {"X": X5, "W": W_CHAIN[:2], "Bias": B_CHAIN[:2]},
           ref=repeated_ref, out_counts={"ReluOut": 1}, id="repeated_fc_relu-2"),
    OpCase("fusion_repeated_fc_relu", {"X": X5, "W": W_CHAIN, "Bias": B_CHAIN},
           ref=repeated_ref, out_counts={"ReluOut": 2}, id="repeated_fc_relu-3"),
    OpCase("fusion_squared_mat_sub", {"X": rand(3, 4, seed=20), "Y": rand(4, 2, seed=21)},
           attrs={"scalar": 0.5}, ref=squared_ref, id="squared_mat_sub-scalar0.5"),
    OpCase("fusion_squared_mat_sub", {"X": rand(2, 3, seed=22), "Y": rand(3, 3, seed=23)},
           ref=squared_ref, id="squared_mat_sub-default"),
    OpCase("fused_fc_elementwise_layernorm",
           {"X": FC_X, "W": FC_W, "Bias0": rand(1, 5, seed=24), "Y": FC_Y,
            "Scale": rand(5, seed=25), "Bias1": rand(5, seed=26)},
           attrs={"x_num_col_dims": 2, "activation_type": "relu", "begin_norm_axis": 2},
           ref=fc_ln_ref, id="fc_ln-relu-x_num_col_dims2"),
    OpCase("fused_fc_elementwise_layernorm",
           {"X": X5, "W": rand(4, 6, seed=27), "Y": rand(5, 6, seed=28)},
           ref=fc_ln_ref, outputs=["Out", "Mean", "Variance"], id="fc_ln-no-bias-no-scale"),
    OpCase("fusion_transpose_flatten_concat", {"X": TFC_X},
           attrs={"trans_axis": [0, 2, 3, 1], "flatten_axis": 1, "concat_axis": 1},
           ref=tfc_ref, id="tfc-concat1"),
    OpCase("fusion_transpose_flatten_concat", {"X": TFC_X},
           attrs={"trans_axis": [1, 0, 2, 3], "flatten_axis": 2, "concat_axis": 0},
           ref=tfc_ref, id="tfc-concat0"),
    OpCase("multihead_matmul", MHM, attrs={"head_number": 2, "alpha": 0.125}, ref=mhm_ref,
           id="multihead-2heads"),
    OpCase("multihead_matmul", {**MHM, "BiasQK": rand(1, 1, 3, 3, seed=29)},
           attrs={"head_number": 1}, ref=mhm_ref, id="multihead-1head-broadcast-biasqk"),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_op(case):
    check_op(case)


@pytest.mark.parametrize("op", ["fusion_repeated_fc_relu", "fusion_squared_mat_sub",
                                "fused_fc_elementwise_layernorm",
                                "fusion_transpose_flatten_concat", "multihead_matmul"])
def test_no_gradient_as_in_fluid(op):
    assert get_op_def(op).grad is None


def _fetch(case, slot):
    return run_op(case)[slot]


def test_repeated_fc_relu_equals_its_unfused_ops():
    ops, h = [], "x"
    for i in range(3):
        ops += [("mul", {"X": [h], "Y": [f"w{i}"]}, {"Out": [f"m{i}"]}, {}),
                ("elementwise_add", {"X": [f"m{i}"], "Y": [f"b{i}"]}, {"Out": [f"a{i}"]}, {}),
                ("relu", {"X": [f"a{i}"]}, {"Out": [f"r{i}"]}, {})]
        h = f"r{i}"
    feed = {"x": X5, **{f"w{i}": w for i, w in enumerate(W_CHAIN)},
            **{f"b{i}": b.reshape(-1) for i, b in enumerate(B_CHAIN)}}
    want, = run_op_chain(ops, feed, ["r2"])
    np.testing.assert_array_equal(_fetch(CASES[1], "Out"), want)


def test_squared_mat_sub_equals_its_unfused_ops():
    x, y = CASES[2].inputs["X"], CASES[2].inputs["Y"]
    ops = [("matmul", {"X": ["x"], "Y": ["y"]}, {"Out": ["xy"]}, {}),
           ("square", {"X": ["xy"]}, {"Out": ["xy2"]}, {}),
           ("square", {"X": ["x"]}, {"Out": ["x2"]}, {}),
           ("square", {"X": ["y"]}, {"Out": ["y2"]}, {}),
           ("matmul", {"X": ["x2"], "Y": ["y2"]}, {"Out": ["p"]}, {}),
           ("elementwise_sub", {"X": ["xy2"], "Y": ["p"]}, {"Out": ["d"]}, {}),
           ("scale", {"X": ["d"]}, {"Out": ["out"]}, {"scale": 0.5})]
    want, = run_op_chain(ops, {"x": x, "y": y}, ["out"])
    np.testing.assert_array_equal(_fetch(CASES[2], "Out"), want)


def test_fc_elementwise_layernorm_equals_its_unfused_ops():
    case = CASES[4]
    ops = [("mul", {"X": ["x"], "Y": ["w"]}, {"Out": ["m"]}, {"x_num_col_dims": 2}),
           ("elementwise_add", {"X": ["m"], "Y": ["b0"]}, {"Out": ["fc"]}, {}),
           ("relu", {"X": ["fc"]}, {"Out": ["r"]}, {}),
           ("elementwise_add", {"X": ["r"], "Y": ["y"]}, {"Out": ["s"]}, {}),
           ("layer_norm", {"X": ["s"], "Scale": ["scale"], "Bias": ["b1"]},
            {"Y": ["out"], "Mean": ["mean"], "Variance": ["var"]}, {"begin_norm_axis": 2})]
    feed = {"x": FC_X, "w": FC_W, "b0": case.inputs["Bias0"].reshape(-1), "y": FC_Y,
            "scale": case.inputs["Scale"], "b1": case.inputs["Bias1"]}
    want = run_op_chain(ops, feed, ["out", "mean", "var"])
    got = run_op(case)
    for slot, w in zip(("Out", "Mean", "Variance"), want):
        np.testing.assert_array_equal(got[slot], w)


def test_transpose_flatten_concat_equals_its_unfused_ops():
    ops = []
    for i in range(2):
        ops += [("transpose", {"X": [f"x{i}"]}, {"Out": [f"t{i}"]}, {"axis": [0, 2, 3, 1]}),
                ("flatten", {"X": [f"t{i}"]}, {"Out": [f"f{i}"]}, {"axis": 1})]
    ops.append(("concat", {"X": ["f0", "f1"]}, {"Out": ["out"]}, {"axis": 1}))
    want, = run_op_chain(ops, {"x0": TFC_X[0], "x1": TFC_X[1]}, ["out"])
    np.testing.assert_array_equal(_fetch(CASES[6], "Out"), want)


def test_multihead_matmul_equals_its_unfused_ops():
    ops = []
    for n in "qkv":
        ops += [("elementwise_add", {"X": [n], "Y": [f"b{n}"]}, {"Out": [f"{n}b"]}, {}),
                ("reshape", {"X": [f"{n}b"]}, {"Out": [f"{n}r"]}, {"shape": [2, 3, 2, 2]}),
                ("transpose", {"X": [f"{n}r"]}, {"Out": [f"{n}t"]}, {"axis": [0, 2, 1, 3]})]
    ops += [("scale", {"X": ["qt"]}, {"Out": ["qs"]}, {"scale": 0.125}),
            ("matmul", {"X": ["qs"], "Y": ["kt"]}, {"Out": ["qk"]}, {"transpose_Y": True}),
            ("elementwise_add", {"X": ["qk"], "Y": ["bqk"]}, {"Out": ["qkb"]}, {}),
            ("softmax", {"X": ["qkb"]}, {"Out": ["p"]}, {}),
            ("matmul", {"X": ["p"], "Y": ["vt"]}, {"Out": ["o"]}, {}),
            ("transpose", {"X": ["o"]}, {"Out": ["ot"]}, {"axis": [0, 2, 1, 3]}),
            ("reshape", {"X": ["ot"]}, {"Out": ["out"]}, {"shape": [2, 3, 4]})]
    feed = {"q": MHM["Q"], "k": MHM["K"], "v": MHM["V"], "bq": MHM["BiasQ"].reshape(-1),
            "bk": MHM["BiasK"].reshape(-1), "bv": MHM["BiasV"].reshape(-1),
            "bqk": MHM["BiasQK"]}
    want, = run_op_chain(ops, feed, ["out"])
    np.testing.assert_allclose(_fetch(CASES[8], "Out"), want, rtol=1e-12, atol=1e-12)


def test_multihead_matmul_refuses_another_layout():
    case = OpCase("multihead_matmul", MHM, attrs={"transpose_K": False}, ref=mhm_ref)
    with pytest.raises(ValueError, match="transpose_K=True"):
        run_op(case)
