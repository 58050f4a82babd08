"""Op table: deep gradient compression (dgc, dgc_clip_by_norm, dgc_momentum, c_dgc_allreduce
on one device), against NumPy references of Fluid's formulas."""

import numpy as np
import pytest

from parafluid.testing import OpCase, check_op, rand


def _step(n):
    return np.array([n], dtype="float32")


def _dgc_ref(U, V, Grad, current_step, attrs):
    """Momentum correction, accumulation, top-k of |V|, masking (Fluid's dgc op)."""
    u, v, g = U.astype("float64").copy(), V.astype("float64").copy(), Grad.astype("float64")
    step, begin = int(current_step[0]), int(attrs["rampup_begin_step"])
    if step < begin:
        return {"U_out": u, "V_out": v, "Grad_out": g, "EncodeGrad": np.zeros(g.size),
                "k": np.zeros(1)}
    sp = attrs["sparsity"]
    idx = int(step * len(sp) / attrs["rampup_step"])  # Fluid 1.6: the global step
    s = 0.999 if idx >= len(sp) else sp[idx]
    k = max(1, int(g.size * (1 - s)))
    m = attrs["m"]
    if attrs["use_nesterov"]:
        u = m * (u + g)
        v = v + u + g
    else:
        u = m * u + g
        v = v + u
    idx = np.argsort(-np.abs(v.ravel()))[:k]
    encoded = np.zeros(g.size)
    encoded[idx] = v.ravel()[idx]
    u.ravel()[idx] = 0.0
    v.ravel()[idx] = 0.0
    return {"U_out": u, "V_out": v, "Grad_out": np.zeros_like(g), "EncodeGrad": encoded,
            "k": np.array([k], dtype="float64")}


def _clip_ref(X, current_step, attrs):
    if int(current_step[0]) < int(attrs["rampup_begin_step"]):
        return {"Out": X}
    norm = np.sqrt(np.sum(X * X))
    return {"Out": X * attrs["max_norm"] / max(norm, attrs["max_norm"])}


def _dgc_momentum_ref(Param, Grad, Velocity, LearningRate, current_step, attrs):
    lr, mu = LearningRate[0], attrs["mu"]
    if int(current_step[0]) >= int(attrs["rampup_begin_step"]):
        return {"ParamOut": Param - lr * Grad, "VelocityOut": Velocity}
    v = mu * Velocity + Grad
    step = Grad + mu * v if attrs["use_nesterov"] else v
    return {"ParamOut": Param - lr * step, "VelocityOut": v}


_UVG = {"U": rand(4, 5, seed=1), "V": rand(4, 5, seed=2), "Grad": rand(4, 5, seed=3)}
_DGC = {"m": 0.9, "sparsity": [0.5, 0.8], "rampup_begin_step": 2.0, "rampup_step": 4.0}
_MOM = {"Param": rand(3, 4, seed=4), "Grad": rand(3, 4, seed=5), "Velocity": rand(3, 4, seed=6),
        "LearningRate": np.array([0.1], dtype="float32")}

CASES = [
    OpCase("dgc", {**_UVG, "current_step": _step(1)}, attrs={**_DGC, "use_nesterov": False},
           ref=_dgc_ref, id="dgc_before_rampup"),
    OpCase("dgc", {**_UVG, "current_step": _step(2)}, attrs={**_DGC, "use_nesterov": False},
           ref=_dgc_ref, id="dgc_first_sparsity"),
    OpCase("dgc", {**_UVG, "current_step": _step(4)}, attrs={**_DGC, "use_nesterov": False},
           ref=_dgc_ref, id="dgc_second_sparsity"),
    OpCase("dgc", {**_UVG, "current_step": _step(40)}, attrs={**_DGC, "use_nesterov": True},
           ref=_dgc_ref, id="dgc_nesterov_after_rampup"),
    OpCase("dgc_clip_by_norm", {"X": rand(3, 4), "current_step": _step(0)},
           attrs={"max_norm": 0.5, "rampup_begin_step": 1.0}, ref=_clip_ref,
           id="dgc_clip_by_norm_before_rampup"),
    OpCase("dgc_clip_by_norm", {"X": rand(3, 4), "current_step": _step(1)},
           attrs={"max_norm": 0.5, "rampup_begin_step": 1.0}, ref=_clip_ref,
           id="dgc_clip_by_norm_clipped"),
    OpCase("dgc_momentum", {**_MOM, "current_step": _step(0)},
           attrs={"mu": 0.9, "use_nesterov": False, "rampup_begin_step": 1.0},
           ref=_dgc_momentum_ref, id="dgc_momentum_before_rampup"),
    OpCase("dgc_momentum", {**_MOM, "current_step": _step(0)},
           attrs={"mu": 0.9, "use_nesterov": True, "rampup_begin_step": 1.0},
           ref=_dgc_momentum_ref, id="dgc_momentum_nesterov_before_rampup"),
    OpCase("dgc_momentum", {**_MOM, "current_step": _step(3)},
           attrs={"mu": 0.9, "use_nesterov": False, "rampup_begin_step": 1.0},
           ref=_dgc_momentum_ref, id="dgc_momentum_sgd_after_rampup"),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_op(case):
    check_op(case)
