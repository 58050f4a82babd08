"""Op table: ops whose result depends on the LoD of their input, as in Fluid 1.6
(fill_constant_batch_size_like counts sequences; cvm hands its LoD on to Y and spreads a
per-sequence CVM over the rows of each sequence in its gradient)."""

import numpy as np
import pytest

import parafluid as fluid
from parafluid.testing import OpCase, check_forward, check_grad, check_op, rand, run_layers

SHOWS = rand(5, 4, low=0.0, high=1.0, seed=2)
CVM_PER_SEQ = np.array([[0.6, 0.4], [0.2, 0.1]])


def _cvm_ref(X, CVM, attrs):
    if not attrs["use_cvm"]:
        return {"Y": X[:, 2:]}
    show = np.log(X[:, :1] + 1)
    return {"Y": np.concatenate([show, np.log(X[:, 1:2] + 1) - show, X[:, 2:]], 1)}


CASES = [
    OpCase("fill_constant_batch_size_like", {"Input": rand(5, 3)},
           attrs={"shape": [-1, 4], "value": 2.0, "dtype": "float64"},
           ref=lambda Input: {"Out": np.full((5, 4), 2.0)}, id="fill_batch_like_no_lod"),
    OpCase("cvm", {"X": SHOWS, "CVM": rand(5, 2, seed=3)}, ref=_cvm_ref,
           id="cvm_no_lod"),
]

# The inferred batch of a LoD input is its declared row count, the run-time one the number
# of sequences (Fluid declares such inputs with a -1 batch): forward and gradients only.
# (cvm's gradient is Fluid's rule, not a derivative: see the test below.)
LOD_CASES = [
    OpCase("fill_constant_batch_size_like", {"Input": rand(5, 3)},
           attrs={"shape": [-1, 4], "value": 2.0, "dtype": "float64"},
           lod={"Input": [[0, 2, 5]]}, ref=lambda Input: {"Out": np.full((2, 4), 2.0)},
           id="fill_batch_like_lod_counts_sequences"),
    OpCase("fill_constant_batch_size_like", {"Input": rand(5, 3)},
           attrs={"shape": [4, -1], "value": 1.0, "dtype": "int64", "output_dim_idx": 1},
           lod={"Input": [[0, 2, 5]]}, ref=lambda Input: {"Out": np.ones((4, 2), "int64")},
           id="fill_batch_like_lod_output_dim_idx1"),
    OpCase("fill_constant_batch_size_like", {"Input": rand(5, 3)},
           attrs={"shape": [-1, 2], "value": 1.0, "dtype": "float64", "input_dim_idx": 1},
           lod={"Input": [[0, 2, 5]]}, ref=lambda Input: {"Out": np.ones((3, 2))},
           id="fill_batch_like_lod_input_dim_idx1_uses_dims"),
    OpCase("cvm", {"X": SHOWS, "CVM": CVM_PER_SEQ}, lod={"X": [[0, 2, 5]]}, ref=_cvm_ref,
           id="cvm_lod_per_sequence_cvm"),
    OpCase("cvm", {"X": SHOWS, "CVM": CVM_PER_SEQ}, attrs={"use_cvm": False},
           lod={"X": [[0, 2, 5]]}, ref=_cvm_ref, id="cvm_lod_no_use_cvm"),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_op(case):
    check_op(case)


@pytest.mark.parametrize("case", LOD_CASES, ids=str)
def test_lod_op(case):
    check_forward(case)
    check_grad(case)


def test_cvm_gradient_gives_each_sequence_its_cvm_row():
    x = fluid.create_lod_tensor(SHOWS, [[2, 3]], fluid.CPUPlace())

    def build():
        xv = fluid.layers.data("x", [4], dtype="float64", lod_level=1)
        xv.stop_gradient = False
        cv = fluid.layers.data("c", [2], dtype="float64")
        y = fluid.layers.continuous_value_model(xv, cv, True)
        pooled = fluid.layers.sequence_pool(y, "sum")  # needs Y's LoD
        loss = fluid.layers.reduce_sum(pooled)
        grad, = fluid.backward.gradients([loss], [xv])
        return [pooled, grad]

    pooled, grad = run_layers(build, {"x": x, "c": CVM_PER_SEQ})
    y = _cvm_ref(SHOWS, CVM_PER_SEQ, {"use_cvm": True})["Y"]
    np.testing.assert_allclose(pooled, [y[:2].sum(0), y[2:].sum(0)])
    np.testing.assert_allclose(grad[:, :2], CVM_PER_SEQ[[0, 0, 1, 1, 1]])
    np.testing.assert_allclose(grad[:, 2:], np.ones((5, 2)))
