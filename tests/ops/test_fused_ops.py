"""Op table: fused_elemwise_activation over Fluid's compound functor pairs, against numpy
compositions of the unfused functors, gradients by finite differences (the loss reads both
Out and IntermediateOut, so the intermediate's gradient path is checked too)."""

import numpy as np
import pytest

from parafluid.testing import OpCase, check_op

RNG = np.random.RandomState(5)
# |values| >= 0.2 keeps relu's kink out of the finite differences
X = (RNG.uniform(0.2, 1.0, (3, 4)) * RNG.choice([-1, 1], (3, 4))).astype("float64")
Y_ROW = np.array([0.9, -1.3, 0.7, -0.6])  # broadcast along axis=1 (a bias)
Y_FULL = (RNG.uniform(0.3, 1.0, (3, 4)) * RNG.choice([-1, 1], (3, 4))).astype("float64")

UNARY = {"relu": lambda v, s: np.maximum(v, 0), "sigmoid": lambda v, s: 1 / (1 + np.exp(-v)),
         "tanh": lambda v, s: np.tanh(v), "scale": lambda v, s: v * s}
BINARY = {"elementwise_add": np.add, "elementwise_mul": np.multiply}


def _ref(functors, scale):
    def ref(X, Y, attrs):
        if functors[0] in UNARY:  # Out = unary(binary(X, Y))
            inter = BINARY[functors[1]](X, Y)
            return {"Out": UNARY[functors[0]](inter, scale), "IntermediateOut": inter}
        inter = UNARY[functors[1]](Y, scale)  # Out = binary(X, unary(Y))
        return {"Out": BINARY[functors[0]](X, inter), "IntermediateOut": inter}
    return ref


def _cases():
    cases = []
    for u in UNARY:
        for b in BINARY:
            for functors in ([u, b], [b, u]):
                for y, axis, tag in ((Y_ROW, 1, "row"), (Y_FULL, -1, "full")):
                    cases.append(OpCase(
                        "fused_elemwise_activation", {"X": X, "Y": y},
                        attrs={"functor_list": functors, "axis": axis, "scale": 0.5},
                        ref=_ref(functors, 0.5), grad=["X", "Y"],
                        id=f"{functors[0]},{functors[1]}-{tag}"))
    return cases


@pytest.mark.parametrize("case", _cases(), ids=str)
def test_op(case):
    check_op(case)


def test_an_unsupported_pair_names_the_supported_functors():
    case = OpCase("fused_elemwise_activation", {"X": X, "Y": Y_FULL},
                  attrs={"functor_list": ["relu", "tanh"]}, ref=_ref(["relu", "tanh"], 0.0))
    with pytest.raises(ValueError, match=r"functor_list must be .* got \['relu', 'tanh'\]"):
        check_op(case)
