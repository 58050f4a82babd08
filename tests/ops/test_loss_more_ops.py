"""Op table: squared_l2_distance, hinge_loss, modified_huber_loss and minus (Fluid 1.6's
definitions, float64 gradients)."""

import numpy as np
import pytest

import parafluid as fluid
from parafluid.testing import OpCase, check_op, rand


def _sq_l2(X, Y):
    sub = X.reshape(X.shape[0], -1) - Y.reshape(Y.shape[0], -1)
    return {"sub_result": sub, "Out": (sub ** 2).sum(1, keepdims=True)}


def _hinge(Logits, Labels):
    return {"Loss": np.maximum(1 - Logits * (2 * Labels - 1), 0)}


def _huber(X, Y):
    v = X * (2 * Y - 1)
    return {"IntermediateVal": v,
            "Out": np.where(v < -1, -4 * v, np.where(v < 1, (1 - v) ** 2, 0.0))}


LABELS = np.array([[0.0], [1.0], [1.0], [0.0], [1.0], [0.0]])
# margins x * (2y - 1) away from the kinks at -1 and 1
MARGINS = np.array([[-2.5], [-0.3], [0.4], [1.8], [-1.6], [0.7]])
LOGITS = MARGINS * (2 * LABELS - 1)

CASES = [
    OpCase("squared_l2_distance", {"X": rand(4, 3), "Y": rand(4, 3, seed=1)}, ref=_sq_l2,
           grad=["X", "Y"], grad_outputs=["Out"], id="squared_l2_distance_same_rows"),
    OpCase("squared_l2_distance", {"X": rand(4, 3), "Y": rand(1, 3, seed=1)}, ref=_sq_l2,
           grad=["X", "Y"], grad_outputs=["Out"], id="squared_l2_distance_one_row_y"),
    OpCase("squared_l2_distance", {"X": rand(3, 2, 2), "Y": rand(1, 2, 2, seed=1)},
           ref=_sq_l2, grad=["X", "Y"], grad_outputs=["Out"], id="squared_l2_distance_rank3"),
    OpCase("hinge_loss", {"Logits": LOGITS, "Labels": LABELS}, ref=_hinge, grad=["Logits"]),
    OpCase("modified_huber_loss", {"X": LOGITS, "Y": LABELS}, ref=_huber, grad=["X"],
           grad_outputs=["Out"]),
    OpCase("minus", {"X": rand(3, 4), "Y": rand(3, 4, seed=1)},
           ref=lambda X, Y: {"Out": X - Y}, grad=["X", "Y"]),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_op(case):
    check_op(case)


def test_minus_gradient_is_two_scale_ops():
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        x = fluid.data("x", [2, 3], dtype="float64")
        y = fluid.data("y", [2, 3], dtype="float64")
        x.stop_gradient = y.stop_gradient = False
        out = main.global_block().create_var(name="out", dtype="float64", shape=[2, 3])
        main.global_block().append_op("minus", inputs={"X": [x], "Y": [y]},
                                      outputs={"Out": [out]})
        fluid.backward.gradients([out], [x, y])
    grads = [op for op in main.global_block().ops if op.type == "scale"]
    assert sorted(op.attr("scale") for op in grads) == [-1.0, 1.0]


@pytest.mark.parametrize("op,inputs", [
    ("squared_l2_distance", {"X": rand(4, 3), "Y": rand(2, 3)}),
    ("hinge_loss", {"Logits": rand(4, 2), "Labels": rand(4, 2)}),
    ("minus", {"X": rand(4, 3), "Y": rand(3, 4)}),
])
def test_bad_shapes_are_reported_with_the_op_name(op, inputs):
    with pytest.raises(ValueError, match=op):
        check_op(OpCase(op, inputs))
