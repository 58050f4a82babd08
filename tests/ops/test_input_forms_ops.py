"""Op table: input forms Fluid 1.6 accepts that were refused or computed differently:
matmul with 1-D operands (a 1-D X is a row, a 1-D Y a column, before the transpose flags),
fused_elemwise_activation with a one-element Y or with X the smaller operand, auc on an
[N, 1] prediction with slide_steps windows and earlier statistics, gather_nd /
scatter_nd_add with an empty index (every row takes the whole of X)."""

import numpy as np
import pytest

from parafluid.testing import OpCase, check_op, rand


def _mm(x, y, tx=False, ty=False, alpha=1.0):
    x2 = x[None, :] if x.ndim == 1 else x
    y2 = y[:, None] if y.ndim == 1 else y
    if tx:
        x2 = np.swapaxes(x2, -1, -2)
    if ty:
        y2 = np.swapaxes(y2, -1, -2)
    out = alpha * np.matmul(x2, y2)
    dims = list(out.shape)
    if x.ndim == 1 and dims[-2] == 1:
        dims.pop(-2)
    if y.ndim == 1 and dims and dims[-1] == 1:
        dims.pop(-1)
    return out.reshape(dims or [1])


def _mm_ref(tx=False, ty=False, alpha=1.0):
    return lambda X, Y: {"Out": _mm(X, Y, tx, ty, alpha)}


def _auc_bins(p, label, nt):
    b = np.floor(p * nt).astype(int)
    return (np.bincount(b[label == 1], minlength=nt + 1),
            np.bincount(b[label == 0], minlength=nt + 1))


def _auc_value(pos, neg):
    tp = np.concatenate([[0.0], np.cumsum(pos[::-1])])
    fp = np.concatenate([[0.0], np.cumsum(neg[::-1])])
    area = ((fp[1:] - fp[:-1]) * (tp[1:] + tp[:-1]) / 2).sum()
    return area / (tp[-1] * fp[-1]) if tp[-1] > 0 and fp[-1] > 0 else 0.0


_P = np.random.RandomState(4).uniform(0, 1, 12)
_L = (np.random.RandomState(5).uniform(0, 1, 12) < _P).astype("int64")
OLD_POS = np.array([[1, 0, 2, 0, 0, 1], [0, 1, 0, 0, 3, 1]], "int64")
OLD_NEG = np.array([[0, 2, 0, 1, 0, 0], [2, 0, 1, 1, 0, 0]], "int64")


def _auc_slide(Predict, Label, StatPos, StatNeg, attrs):
    nt = attrs["num_thresholds"]
    pos, neg = _auc_bins(Predict[:, -1], Label[:, 0], nt)
    if attrs["slide_steps"] == 0:
        sp, sn = StatPos + pos, StatNeg + neg
    else:
        sp = np.concatenate([StatPos[1:], pos[None]])
        sn = np.concatenate([StatNeg[1:], neg[None]])
    return {"AUC": np.array([_auc_value(sp.sum(0), sn.sum(0))]), "StatPosOut": sp,
            "StatNegOut": sn}


XE = np.array([[65, 17, 2], [-14, -25, -1], [76, 22, 3]], "float64")
EMPTY = np.zeros((2, 0), "int32")
UPD = np.array([[[-1, -2], [1, 2]], [[3, 4], [-3, -4]]], "float64")

CASES = [
    OpCase("matmul", {"X": rand(4), "Y": rand(4, seed=1)}, ref=_mm_ref(), grad=["X", "Y"],
           id="matmul_vec_vec"),
    OpCase("matmul", {"X": rand(4), "Y": rand(1, 3, seed=1)}, attrs={"transpose_X": True},
           ref=_mm_ref(tx=True), grad=["X", "Y"], id="matmul_transposed_vec_x_outer"),
    OpCase("matmul", {"X": rand(3, 1), "Y": rand(5, seed=1)}, attrs={"transpose_Y": True},
           ref=_mm_ref(ty=True), grad=["X", "Y"], id="matmul_transposed_vec_y_outer"),
    OpCase("matmul", {"X": rand(4), "Y": rand(2, 4, 3, seed=1)}, attrs={"alpha": 2.0},
           ref=_mm_ref(alpha=2.0), grad=["X", "Y"], id="matmul_vec_batched_alpha"),
    OpCase("matmul", {"X": rand(2, 4, 3), "Y": rand(4, seed=1)}, attrs={"transpose_X": True},
           ref=_mm_ref(tx=True), grad=["X", "Y"], id="matmul_batched_t_vec"),
    OpCase("matmul", {"X": rand(3, 4), "Y": rand(4, seed=1)}, attrs={"alpha": 0.5},
           ref=_mm_ref(alpha=0.5), grad=["X", "Y"], id="matmul_mat_vec_alpha"),
    OpCase("fused_elemwise_activation", {"X": rand(2, 3, 4), "Y": rand(1, seed=1)},
           attrs={"functor_list": ["scale", "elementwise_add"], "scale": 0.1},
           ref=lambda X, Y: {"Out": (X + Y) * 0.1, "IntermediateOut": X + Y},
           grad=["X", "Y"], grad_outputs=["Out"], id="fused_scale_add_one_element_y"),
    OpCase("fused_elemwise_activation", {"X": rand(2, 3, 4), "Y": rand(1, 1, seed=1)},
           attrs={"functor_list": ["elementwise_mul", "scale"], "scale": 0.1},
           ref=lambda X, Y: {"Out": X * (Y.reshape(1) * 0.1), "IntermediateOut": Y * 0.1},
           grad=["X", "Y"], grad_outputs=["Out"], id="fused_mul_scale_1x1_y"),
    OpCase("fused_elemwise_activation", {"X": rand(1, seed=1), "Y": rand(2, 3, 4)},
           attrs={"functor_list": ["elementwise_add", "scale"], "scale": 0.1},
           ref=lambda X, Y: {"Out": X + Y * 0.1, "IntermediateOut": Y * 0.1},
           grad=["X", "Y"], grad_outputs=["Out"], id="fused_add_scale_smaller_x"),
    OpCase("fused_elemwise_activation", {"X": rand(1, seed=1), "Y": rand(2, 3, 4)},
           attrs={"functor_list": ["scale", "elementwise_add"], "scale": 0.1},
           ref=lambda X, Y: {"Out": (X + Y) * 0.1, "IntermediateOut": X + Y},
           grad=["X", "Y"], grad_outputs=["Out"], id="fused_scale_add_smaller_x"),
    OpCase("auc", {"Predict": _P.reshape(-1, 1), "Label": _L.reshape(-1, 1),
                   "StatPos": OLD_POS[:1], "StatNeg": OLD_NEG[:1]},
           attrs={"num_thresholds": 5, "slide_steps": 0}, ref=_auc_slide,
           id="auc_n1_prediction_accumulates"),
    OpCase("auc", {"Predict": np.stack([1 - _P, _P], 1), "Label": _L.reshape(-1, 1),
                   "StatPos": OLD_POS, "StatNeg": OLD_NEG},
           attrs={"num_thresholds": 5, "slide_steps": 2}, ref=_auc_slide,
           id="auc_slide_steps_2_window"),
    OpCase("auc", {"Predict": _P.reshape(-1, 1), "Label": _L.reshape(-1, 1),
                   "StatPos": OLD_POS[:1], "StatNeg": OLD_NEG[:1]},
           attrs={"num_thresholds": 5, "slide_steps": 1}, ref=_auc_slide,
           id="auc_slide_steps_1_this_batch_only"),
    OpCase("gather_nd", {"X": XE, "Index": EMPTY},
           ref=lambda X, Index: {"Out": np.stack([X, X])}, grad=["X"],
           id="gather_nd_empty_index"),
    OpCase("gather_nd", {"X": rand(3, 4, 2), "Index": np.array([[[1, 2]], [[0, 3]]], "int64")},
           ref=lambda X, Index: {"Out": X[Index[..., 0], Index[..., 1]]}, grad=["X"],
           id="gather_nd_3d_index"),
    OpCase("scatter_nd_add", {"X": XE[:2, :2].copy(), "Index": EMPTY, "Updates": UPD},
           ref=lambda X, Index, Updates: {"Out": X + Updates.sum(0)},
           grad=["X", "Updates"], id="scatter_nd_add_empty_index"),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_op(case):
    check_op(case)


def test_auc_refuses_probabilities_outside_0_1():
    case = OpCase("auc", {"Predict": np.array([[0.5], [1.5]]), "Label": np.array([[1], [0]]),
                          "StatPos": np.zeros((1, 6), "int64"),
                          "StatNeg": np.zeros((1, 6), "int64")},
                  attrs={"num_thresholds": 5})
    with pytest.raises(Exception, match="probabilities in"):
        check_op(case)
