"""Op table: the input forms of Fluid 1.6's shape rules that a narrower rule refused.

- ``cross_entropy`` / ``cross_entropy2`` take a hard Label without the class dim (``[N]``
  for ``[N, D]``, ``[N, T]`` for ``[N, T, D]``); Y then has the Label's shape;
- ``cos_sim`` takes inputs of any rank >= 2, each row's trailing dims one vector;
- ``rank_loss`` takes each of Label, Left, Right as ``[N]`` or ``[N, 1]``; Out has Label's;
- ``fused_elemwise_activation``'s ``scale`` multiplies by the factor in the value's type;
- ``edit_distance`` takes padded rows with ``HypsLength`` / ``RefsLength``;
- ``pad2d`` takes its paddings from the ``Paddings`` tensor when given;
- ``shard_index`` keeps the LoD; a shard holds ``index_num // nshards`` ids.
"""

from __future__ import annotations

import numpy as np
import pytest

import parafluid as fluid
from parafluid.testing import OpCase, check_op, rand


def _softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


P2 = _softmax(rand(5, 4, seed=1))
P3 = _softmax(rand(2, 3, 4, seed=2))
L1 = np.array([0, 3, 1, 2, 3], "int64")
L2 = np.array([[1, 0, 3], [2, 2, 1]], "int64")


def _ce(X, Label):
    return {"Y": -np.log(np.take_along_axis(X, Label[..., None], -1))[..., 0]}


def _ce2(X, Label):
    picked = np.take_along_axis(X, Label[..., None], -1)
    return {"Y": -np.log(picked)[..., 0], "MatchX": picked}


def _cos(X, Y):
    x, y = X.reshape(len(X), -1), Y.reshape(len(Y), -1)
    xn = np.linalg.norm(x, axis=1, keepdims=True)
    yn = np.linalg.norm(y, axis=1, keepdims=True)
    return {"Out": (x * y).sum(1, keepdims=True) / (xn * yn), "XNorm": xn, "YNorm": yn}


def _rank(Label, Left, Right):
    o = Left.reshape(-1) - Right.reshape(-1)
    return {"Out": (np.log1p(np.exp(o)) - Label.reshape(-1) * o).reshape(Label.shape)}


_IMG8 = np.random.RandomState(13).randint(0, 256, (1, 1, 3, 3)).astype("uint8")


def _bilinear_u8(X):
    """align_corners=False, align_mode=1 upsampling 3 -> 5, in float32, truncated."""
    x = X.astype("float32")
    src = np.arange(5, dtype="float32") * np.float32(3 / 5)
    lo = np.floor(src).astype(int)
    hi = np.minimum(lo + 1, 2)
    w = (src - lo).astype("float32")
    rows = x[:, :, lo, :] * (1 - w)[:, None] + x[:, :, hi, :] * w[:, None]
    out = rows[:, :, :, lo] * (1 - w) + rows[:, :, :, hi] * w
    return {"Out": out.astype("uint8")}


_QX = (np.random.RandomState(14).random_sample((2, 3)) - 0.5) * 10


CASES = [
    # in inference, with no window wired in, the window is the kept scale
    OpCase("fake_quantize_range_abs_max",
           {"X": _QX, "InScale": np.array([3.0]), "Iter": np.zeros(1, "int64")},
           attrs={"bit_length": 8, "window_size": 2, "is_test": True},
           ref=lambda X, InScale, Iter: {
               "Out": np.round(np.clip(X, -3, 3) / 3 * 127), "OutScale": InScale,
               "OutScales": np.array([3.0, 3.0])},
           outputs=["Out", "OutScale", "OutScales"], id="fake_quantize_range_abs_max_frozen"),
    OpCase("bilinear_interp", {"X": _IMG8}, attrs={"out_h": 5, "out_w": 5,
                                                   "align_corners": False, "align_mode": 1},
           ref=_bilinear_u8, atol=1.0, id="bilinear_interp_uint8"),
    # no instance carries a wanted tag: one placeholder row, weight 0, and no gradient
    OpCase("filter_by_instag", {"Ins": rand(3, 2, seed=12),
                                "Ins_tag": np.array([[1], [2], [3]], "int64"),
                                "Filter_tag": np.array([9], "int64")},
           attrs={"is_lod": False}, lod={"Ins_tag": [[0, 1, 2, 3]]},
           ref=lambda **_: {"Out": np.zeros((1, 2)), "LossWeight": np.zeros((1, 1), "float32"),
                            "IndexMap": np.array([[0, 1, 1]], "int64")},
           grad=["Ins"], grad_outputs=["Out"], id="filter_by_instag_nothing_kept"),
    OpCase("fake_init", {}, attrs={"shape": [4, 3]},
           ref=lambda: {"Out": np.zeros((4, 3), "float32")}, id="fake_init"),
    OpCase("edit_distance", {"Hyps": np.array([[10, 3, 0, 0], [6, 5, 8, 2]], "int64"),
                             "Refs": np.array([[10, 4, 0], [6, 7, 8]], "int64"),
                             "HypsLength": np.array([2, 4], "int64"),
                             "RefsLength": np.array([2, 3], "int64")},
           attrs={"normalized": True},
           ref=lambda **_: {"Out": np.array([[1 / 2], [2 / 3]], "float32"),
                            "SequenceNum": np.array([2], "int64")},
           id="edit_distance_padded"),
    OpCase("pad2d", {"X": rand(1, 2, 3, 3, seed=11), "Paddings": np.array([1, 0, 2, 1], "int32")},
           attrs={"mode": "reflect", "paddings": []},
           ref=lambda X, Paddings: {"Out": np.pad(X, ((0, 0), (0, 0), (1, 0), (2, 1)),
                                                  mode="reflect")},
           grad=["X"], id="pad2d_paddings_tensor"),
    # 15 ids in 2 shards: shard size 15 // 2 = 7 (ids 14 belongs to no shard), with the LoD
    OpCase("shard_index", {"X": np.array([[0], [6], [7], [13], [14]], "int64")},
           attrs={"index_num": 15, "nshards": 2, "shard_id": 1},
           ref=lambda X: {"Out": np.array([[-1], [-1], [0], [6], [-1]])},
           lod={"X": [[0, 2, 5]]}, id="shard_index_uneven_with_lod"),
    OpCase("cross_entropy", {"X": P2, "Label": L1}, ref=_ce, grad=["X"],
           id="cross_entropy_label_without_class_dim"),
    OpCase("cross_entropy", {"X": P3, "Label": L2}, ref=_ce, grad=["X"],
           id="cross_entropy_3d_label_without_class_dim"),
    OpCase("cross_entropy2", {"X": P2, "Label": L1}, ref=_ce2, grad=["X"],
           grad_outputs=["Y"], outputs=["Y", "MatchX", "XShape"],
           id="cross_entropy2_label_without_class_dim"),
    OpCase("cross_entropy2", {"X": P3, "Label": L2}, ref=_ce2, grad=["X"],
           grad_outputs=["Y"], outputs=["Y", "MatchX", "XShape"],
           id="cross_entropy2_3d_label_without_class_dim"),
    OpCase("cos_sim", {"X": rand(4, 3, 2, seed=3), "Y": rand(4, 3, 2, seed=4)}, ref=_cos,
           grad=["X", "Y"], grad_outputs=["Out"], id="cos_sim_rank3"),
    OpCase("cos_sim", {"X": rand(4, 3, 2, seed=5), "Y": rand(1, 3, 2, seed=6)}, ref=_cos,
           grad=["X", "Y"], grad_outputs=["Out"], id="cos_sim_rank3_one_row_y"),
    OpCase("rank_loss", {"Label": np.array([1.0, 0.0, 1.0, 0.5]), "Left": rand(4, seed=7),
                         "Right": rand(4, 1, seed=8)}, ref=_rank, grad=["Left", "Right"],
           id="rank_loss_n_and_n1"),
    OpCase("rank_loss", {"Label": np.array([[1.0], [0.0], [1.0]]), "Left": rand(3, 1, seed=9),
                         "Right": rand(3, seed=10)}, ref=_rank, grad=["Left", "Right"],
           id="rank_loss_n1_label"),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_op(case):
    check_op(case)


def test_fused_scale_multiplies_in_the_values_type():
    x = np.random.RandomState(0).uniform(0.1, 1, (13, 17)).astype("float16")
    y = np.random.RandomState(1).uniform(0.1, 1, (13, 17)).astype("float16")
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        xv = fluid.data(name="x", shape=[13, 17], dtype="float16")
        yv = fluid.data(name="y", shape=[13, 17], dtype="float16")
        out = main.global_block().create_var(name="out", dtype="float16")
        mid = main.global_block().create_var(name="mid", dtype="float16")
        main.global_block().append_op(
            "fused_elemwise_activation", inputs={"X": [xv], "Y": [yv]},
            outputs={"Out": [out], "IntermediateOut": [mid]},
            attrs={"functor_list": ["elementwise_mul", "scale"], "scale": 0.1,
                   "save_intermediate_out": True})
    got, = fluid.Executor(fluid.CPUPlace()).run(main, feed={"x": x, "y": y},
                                                fetch_list=[out])
    # Fluid casts the factor to float16 first (0.1 -> 0.0999756), then multiplies
    np.testing.assert_array_equal(got, x * (y * np.float16(0.1)))


def test_a_uint16_array_is_float16_bits_as_fluids_python_side_passes_them():
    half = np.array([[0.5, -1.25], [3.0, 0.1]], "float16")
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        x = fluid.data(name="x", shape=[2, 2], dtype="float16")
        y = fluid.layers.cast(x, "float32")
    got, = fluid.Executor(fluid.CPUPlace()).run(main, feed={"x": half.view(np.uint16)},
                                                fetch_list=[y])
    np.testing.assert_array_equal(got, half.astype("float32"))
    t = fluid.LoDTensor()
    t.set(half.view(np.uint16), fluid.CPUPlace())
    assert np.array(t).dtype == np.float16
    np.testing.assert_array_equal(np.array(t), half)


def _fluid_perspective_matrix(q, th, tw):
    """Fluid's get_transform_matrix: the width fitted to the quadrilateral's aspect (at
    least 2), and 1e-5 added to the denominator of the projective terms."""
    x, y = q[0::2], q[1::2]
    side = [np.hypot(x[i] - x[(i + 1) % 4], y[i] - y[(i + 1) % 4]) for i in range(4)]
    nh = max(2, th)
    nw = max(2, min(int(np.floor((side[0] + side[2]) / 2 * (nh - 1) / ((side[1] + side[3]) / 2)
                                 + 0.5)) + 1, tw))
    dx1, dx2, dx3 = x[1] - x[2], x[3] - x[2], x[0] - x[1] + x[2] - x[3]
    dy1, dy2, dy3 = y[1] - y[2], y[3] - y[2], y[0] - y[1] + y[2] - y[3]
    den = dx1 * dy2 - dx2 * dy1 + 1e-5
    m6 = (dx3 * dy2 - dx2 * dy3) / den / (nw - 1)
    m7 = (dx1 * dy3 - dx3 * dy1) / den / (nh - 1)
    return [(x[1] - x[0] + m6 * (nw - 1) * x[1]) / (nw - 1),
            (x[3] - x[0] + m7 * (nh - 1) * x[3]) / (nh - 1), x[0],
            (y[1] - y[0] + m6 * (nw - 1) * y[1]) / (nw - 1),
            (y[3] - y[0] + m7 * (nh - 1) * y[3]) / (nh - 1), y[0], m6, m7, 1.0]


def test_roi_perspective_transform_matrix_is_fluids():
    from parafluid.testing import run_op

    quads = np.array([[2, 1, 9, 2, 10, 8, 1, 7], [4.4, 0.6, 11.8, 0.2, 11.2, 9.4, 3.8, 8.6]])
    case = OpCase("roi_perspective_transform",
                  {"X": rand(1, 2, 12, 12, seed=15), "ROIs": quads},
                  attrs={"transformed_height": 3, "transformed_width": 4, "spatial_scale": 1.0},
                  lod={"ROIs": [[0, 2]]})
    got = run_op(case)["TransformMatrix"]
    want = np.array([_fluid_perspective_matrix(q, 3, 4) for q in quads])
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)
