"""Op table: optimizer update ops (sgd, momentum, adam, adagrad, rmsprop, decayed_adagrad,
adamax, ftrl, lamb, adadelta, lars_momentum, average_accumulates) against numpy references
written from Fluid 1.6's kernels (paddle/fluid/operators/optimizers/*_op.h).

An update op is not differentiated (it runs after the backward pass), so these rows check
the forward values and inferred shapes of one dense step, for each attribute branch.
"""

from __future__ import annotations

import numpy as np
import pytest

from parafluid.testing import OpCase, check_op, rand

P = rand(2, 3, seed=11)
G = rand(2, 3, seed=12)
LR = np.array([0.1])
POS = rand(2, 3, low=0.1, high=1.0, seed=13)  # second moments, accumulators: positive


def _sgd(Param, Grad, LearningRate):
    return {"ParamOut": Param - LearningRate * Grad}


def _momentum(Param, Grad, Velocity, LearningRate, attrs):
    mu = attrs["mu"]
    v = Velocity * mu + Grad
    if attrs["use_nesterov"]:
        p = Param - (Grad + v * mu) * LearningRate
    else:
        p = Param - LearningRate * v
    return {"ParamOut": p, "VelocityOut": v}


def _adam(Param, Grad, LearningRate, Moment1, Moment2, Beta1Pow, Beta2Pow, attrs):
    b1, b2, eps = attrs["beta1"], attrs["beta2"], attrs["epsilon"]
    lr = LearningRate * np.sqrt(1 - Beta2Pow) / (1 - Beta1Pow)
    m1 = b1 * Moment1 + (1 - b1) * Grad
    m2 = b2 * Moment2 + (1 - b2) * Grad * Grad
    return {"ParamOut": Param - lr * (m1 / (np.sqrt(m2) + eps)), "Moment1Out": m1,
            "Moment2Out": m2}


def _adagrad(Param, Grad, Moment, LearningRate, attrs):
    m = Moment + Grad * Grad
    return {"ParamOut": Param - LearningRate * Grad / (np.sqrt(m) + attrs["epsilon"]),
            "MomentOut": m}


def _rmsprop(Param, MeanSquare, Grad, Moment, LearningRate, attrs, MeanGrad=None):
    rho, eps, mom = attrs["decay"], attrs["epsilon"], attrs["momentum"]
    ms = rho * MeanSquare + (1 - rho) * Grad * Grad
    out = {"MeanSquareOut": ms}
    if attrs["centered"]:
        mg = rho * MeanGrad + (1 - rho) * Grad
        m = mom * Moment + LearningRate * Grad / np.sqrt(ms - mg * mg + eps)
        out["MeanGradOut"] = mg
    else:
        m = mom * Moment + LearningRate * Grad / np.sqrt(ms + eps)
    out.update(ParamOut=Param - m, MomentOut=m)
    return out


def _decayed_adagrad(Param, Grad, Moment, LearningRate, attrs):
    d = attrs["decay"]
    m = d * Moment + (1 - d) * Grad * Grad
    return {"ParamOut": Param - LearningRate * Grad / (np.sqrt(m) + attrs["epsilon"]),
            "MomentOut": m}


def _adamax(Param, Grad, LearningRate, Moment, InfNorm, Beta1Pow, attrs):
    b1, b2, eps = attrs["beta1"], attrs["beta2"], attrs["epsilon"]
    m = b1 * Moment + (1 - b1) * Grad
    inf = np.maximum(np.abs(Grad), b2 * InfNorm + eps)
    lr_t = LearningRate / (1 - Beta1Pow)
    return {"ParamOut": Param - lr_t * (m / inf), "MomentOut": m, "InfNormOut": inf}


def _ftrl(Param, SquaredAccumulator, LinearAccumulator, Grad, LearningRate, attrs):
    l1, l2, power = attrs["l1"], attrs["l2"], attrs["lr_power"]
    new_acc = SquaredAccumulator + Grad * Grad
    lin = LinearAccumulator + Grad - (
        (new_acc ** -power - SquaredAccumulator ** -power) / LearningRate) * Param
    x = l1 * np.sign(lin) - lin
    y = new_acc ** -power / LearningRate + 2 * l2
    p = np.where(np.abs(lin) > l1, x / y, 0.0)
    return {"ParamOut": p, "SquaredAccumOut": new_acc, "LinearAccumOut": lin}


def _lamb(Param, Grad, LearningRate, Moment1, Moment2, Beta1Pow, Beta2Pow, attrs):
    # Fluid 1.6's lamb: no bias correction (Beta1Pow/Beta2Pow are read, not used)
    b1, b2, eps, wd = attrs["beta1"], attrs["beta2"], attrs["epsilon"], attrs["weight_decay"]
    m1 = b1 * Moment1 + (1 - b1) * Grad
    m2 = b2 * Moment2 + (1 - b2) * Grad * Grad
    r = m1 / (np.sqrt(m2) + eps) + wd * Param
    p_norm, r_norm = np.sqrt((Param ** 2).sum()), np.sqrt((r ** 2).sum())
    ratio = p_norm / r_norm if p_norm > 0 and r_norm > 0 else 1.0
    return {"ParamOut": Param - LearningRate * ratio * r, "Moment1Out": m1, "Moment2Out": m2}


def _adadelta(Param, Grad, AvgSquaredGrad, AvgSquaredUpdate, attrs):
    rho, eps = attrs["rho"], attrs["epsilon"]
    g2 = rho * AvgSquaredGrad + (1 - rho) * Grad * Grad
    update = -np.sqrt((AvgSquaredUpdate + eps) / (g2 + eps)) * Grad
    return {"ParamOut": Param + update, "AvgSquaredGradOut": g2,
            "AvgSquaredUpdateOut": rho * AvgSquaredUpdate + (1 - rho) * update * update}


def _lars(Param, Grad, Velocity, LearningRate, attrs):
    mu, coeff, wd = attrs["mu"], attrs["lars_coeff"], attrs["lars_weight_decay"]
    p_norm, g_norm = np.sqrt((Param ** 2).sum()), np.sqrt((Grad ** 2).sum())
    lr = LearningRate
    if p_norm > 0 and g_norm > 0:
        lr = LearningRate * coeff * p_norm / (g_norm + wd * p_norm)
    v = Velocity * mu + lr * (Grad + wd * Param)
    return {"ParamOut": Param - v, "VelocityOut": v}


def _avg_acc(param, in_sum_1, in_sum_2, in_sum_3, in_num_accumulates, in_old_num_accumulates,
             in_num_updates, attrs):
    num_upd = int(in_num_updates[0]) + 1
    num_acc = int(in_num_accumulates[0]) + 1
    old_acc = int(in_old_num_accumulates[0])
    s1, s2, s3 = in_sum_1 + param, in_sum_2.copy(), in_sum_3.copy()
    if num_upd % 16384 == 0:
        s2, s1 = in_sum_2 + in_sum_1, np.zeros_like(s1)
    if num_acc >= attrs["min_average_window"] and \
            num_acc >= min(attrs["max_average_window"], num_upd * attrs["average_window"]):
        s3 = in_sum_1 + in_sum_2
        s1, s2 = np.zeros_like(s1), np.zeros_like(s2)
        old_acc, num_acc = num_acc, 0
    as_count = lambda v: np.array([v], "int64")  # noqa: E731
    return {"out_sum_1": s1, "out_sum_2": s2, "out_sum_3": s3,
            "out_num_accumulates": as_count(num_acc),
            "out_old_num_accumulates": as_count(old_acc),
            "out_num_updates": as_count(num_upd)}


def _adam_ins(b1pow: float = 0.9 ** 3, b2pow: float = 0.999 ** 3) -> dict:
    return {"Param": P, "Grad": G, "LearningRate": LR, "Moment1": rand(2, 3, seed=14),
            "Moment2": POS, "Beta1Pow": np.array([b1pow]), "Beta2Pow": np.array([b2pow])}


def _acc_ins(num_acc: int, old_acc: int, num_upd: int) -> dict:
    return {"param": P, "in_sum_1": rand(2, 3, seed=15), "in_sum_2": rand(2, 3, seed=16),
            "in_sum_3": rand(2, 3, seed=17), "in_num_accumulates": np.array([num_acc], "int64"),
            "in_old_num_accumulates": np.array([old_acc], "int64"),
            "in_num_updates": np.array([num_upd], "int64")}


_RMS = {"Param": P, "MeanSquare": POS, "Grad": G, "Moment": rand(2, 3, seed=18),
        "LearningRate": LR}
_FTRL = {"Param": P, "SquaredAccumulator": POS, "LinearAccumulator": rand(2, 3, seed=19),
         "Grad": G, "LearningRate": LR}
_RMS_OUT = ("ParamOut", "MomentOut", "MeanSquareOut")

CASES = [
    OpCase("sgd", {"Param": P, "Grad": G, "LearningRate": LR}, ref=_sgd),
    OpCase("sgd", {"Param": rand(5, seed=3), "Grad": rand(5, seed=4), "LearningRate": LR},
           ref=_sgd, id="sgd_1d"),
    OpCase("momentum", {"Param": P, "Grad": G, "Velocity": rand(2, 3, seed=5),
                        "LearningRate": LR}, attrs={"mu": 0.9}, ref=_momentum),
    OpCase("momentum", {"Param": P, "Grad": G, "Velocity": rand(2, 3, seed=5),
                        "LearningRate": LR}, attrs={"mu": 0.5, "use_nesterov": True},
           ref=_momentum, id="momentum_nesterov"),
    OpCase("adam", _adam_ins(), ref=_adam),
    OpCase("adam", _adam_ins(0.5, 0.25), attrs={"beta1": 0.5, "beta2": 0.25, "epsilon": 1e-4},
           ref=_adam, id="adam_betas_epsilon"),
    # lazy_mode only changes a sparse gradient's update; a dense one updates every row
    OpCase("adam", _adam_ins(), attrs={"lazy_mode": True}, ref=_adam, id="adam_lazy_dense"),
    OpCase("adam", _adam_ins(), attrs={"min_row_size_to_use_multithread": 10}, ref=_adam,
           id="adam_min_row_size_to_use_multithread"),
    OpCase("adagrad", {"Param": P, "Grad": G, "Moment": POS, "LearningRate": LR},
           ref=_adagrad),
    OpCase("adagrad", {"Param": P, "Grad": G, "Moment": POS, "LearningRate": LR},
           attrs={"epsilon": 0.1}, ref=_adagrad, id="adagrad_epsilon"),
    OpCase("rmsprop", _RMS, outputs=_RMS_OUT, ref=_rmsprop),
    OpCase("rmsprop", _RMS, outputs=_RMS_OUT,
           attrs={"decay": 0.8, "momentum": 0.5, "epsilon": 1e-6}, ref=_rmsprop,
           id="rmsprop_momentum_decay_epsilon"),
    OpCase("rmsprop", {**_RMS, "MeanSquare": POS + 1.0, "MeanGrad": rand(2, 3, seed=20)},
           attrs={"centered": True, "momentum": 0.3}, ref=_rmsprop, id="rmsprop_centered"),
    OpCase("decayed_adagrad", {"Param": P, "Grad": G, "Moment": POS, "LearningRate": LR},
           ref=_decayed_adagrad),
    OpCase("decayed_adagrad", {"Param": P, "Grad": G, "Moment": POS, "LearningRate": LR},
           attrs={"decay": 0.5, "epsilon": 1e-3}, ref=_decayed_adagrad,
           id="decayed_adagrad_decay_epsilon"),
    OpCase("adamax", {"Param": P, "Grad": G, "LearningRate": LR, "Moment": rand(2, 3, seed=21),
                      "InfNorm": POS, "Beta1Pow": np.array([0.9 ** 2])}, ref=_adamax),
    OpCase("adamax", {"Param": P, "Grad": G, "LearningRate": LR, "Moment": rand(2, 3, seed=21),
                      "InfNorm": POS, "Beta1Pow": np.array([0.5])},
           attrs={"beta1": 0.5, "beta2": 0.6, "epsilon": 1e-3}, ref=_adamax,
           id="adamax_betas_epsilon"),
    OpCase("ftrl", _FTRL, ref=_ftrl),
    OpCase("ftrl", _FTRL, attrs={"l1": 0.1, "l2": 0.2}, ref=_ftrl, id="ftrl_l1_l2"),
    OpCase("ftrl", _FTRL, attrs={"l1": 0.05, "l2": 0.1, "lr_power": -0.7}, ref=_ftrl,
           id="ftrl_lr_power"),
    OpCase("lamb", _adam_ins(), ref=_lamb),
    OpCase("lamb", _adam_ins(), attrs={"weight_decay": 0.0, "beta1": 0.8, "epsilon": 1e-4},
           ref=_lamb, id="lamb_no_weight_decay"),
    OpCase("adadelta", {"Param": P, "Grad": G, "AvgSquaredGrad": POS,
                        "AvgSquaredUpdate": POS + 0.5}, ref=_adadelta),
    OpCase("adadelta", {"Param": P, "Grad": G, "AvgSquaredGrad": POS,
                        "AvgSquaredUpdate": POS + 0.5}, attrs={"rho": 0.5, "epsilon": 1e-3},
           ref=_adadelta, id="adadelta_rho_epsilon"),
    OpCase("lars_momentum", {"Param": P, "Grad": G, "Velocity": rand(2, 3, seed=22),
                             "LearningRate": LR}, attrs={"mu": 0.9}, ref=_lars),
    OpCase("lars_momentum", {"Param": P, "Grad": G, "Velocity": rand(2, 3, seed=22),
                             "LearningRate": LR},
           attrs={"mu": 0.5, "lars_coeff": 0.01, "lars_weight_decay": 0.1}, ref=_lars,
           id="lars_momentum_coeff_decay"),
    # a zero gradient norm keeps the global learning rate
    OpCase("lars_momentum", {"Param": P, "Grad": np.zeros((2, 3)),
                             "Velocity": rand(2, 3, seed=22), "LearningRate": LR},
           attrs={"mu": 0.9}, ref=_lars, id="lars_momentum_zero_grad"),
    OpCase("average_accumulates", _acc_ins(3, 0, 7), ref=_avg_acc,
           id="average_accumulates_accumulate"),
    # the window is long enough: the sums move into sum_3 and the window restarts
    OpCase("average_accumulates", _acc_ins(4, 2, 9),
           attrs={"average_window": 0.5, "min_average_window": 3, "max_average_window": 100},
           ref=_avg_acc, id="average_accumulates_window_restarts"),
    # every 16384 updates sum_1 moves into sum_2 (precision)
    OpCase("average_accumulates", _acc_ins(5, 1, 16383), ref=_avg_acc,
           id="average_accumulates_sum_1_into_sum_2"),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_op(case):
    check_op(case)
