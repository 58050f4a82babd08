"""Op table: math family (mul, elementwise_* including mod / floordiv, sum, mean, scale,
cumsum, bilinear_tensor_product)."""

import numpy as np
import pytest

import parafluid as fluid
from parafluid.testing import OpCase, check_op, rand, run_op

INTS_X = np.array([[7, -7, 9], [-9, 5, 0]], "int64")

INTS_Y = np.array([[3, 3, -4], [4, -2, 3]], "int64")

def c_mod(X, Y):
    return {"Out": np.fmod(X, Y)}

def c_floordiv(X, Y):
    return {"Out": np.trunc(X / Y).astype(X.dtype)}

def _cumsum_ref(X, attrs):
    axis, x = attrs.get("axis", -1), X
    if attrs.get("reverse"):
        x = np.flip(x, axis)
    out = np.cumsum(x, axis)
    if attrs.get("exclusive"):
        out = out - x
    return {"Out": np.flip(out, axis) if attrs.get("reverse") else out}

X = rand(3, 4, seed=3)

CASES = [
    OpCase("mul", {"X": rand(3, 4), "Y": rand(4, 5, seed=1)},
           ref=lambda X, Y: {"Out": X @ Y}, grad=["X", "Y"]),
    OpCase("mul", {"X": rand(2, 3, 4), "Y": rand(12, 2, seed=1)},
           attrs={"x_num_col_dims": 1}, ref=lambda X, Y: {"Out": X.reshape(2, 12) @ Y},
           grad=["X", "Y"], id="mul_flatten"),
    # 3 output columns of a 128 x 64 input: the product and Y's gradient are computed
    # transposed on a CPU (ops/common.py, mm)
    OpCase("mul", {"X": rand(128, 64, seed=2), "Y": rand(64, 3, seed=4)},
           ref=lambda X, Y: {"Out": X @ Y}, grad=["Y"], atol=1e-4, rtol=1e-4,
           id="mul_narrow_output"),
    OpCase("elementwise_add", {"X": rand(3, 4), "Y": rand(4, seed=1)},
           ref=lambda X, Y: {"Out": X + Y}, grad=["X", "Y"]),
    OpCase("elementwise_add", {"X": rand(2, 3, 4), "Y": rand(3, seed=1)}, attrs={"axis": 1},
           ref=lambda X, Y: {"Out": X + Y.reshape(1, 3, 1)}, grad=["X", "Y"], id="add_axis1"),
    OpCase("elementwise_sub", {"X": rand(3, 4), "Y": rand(3, 4, seed=1)},
           ref=lambda X, Y: {"Out": X - Y}, grad=["X", "Y"]),
    OpCase("elementwise_mul", {"X": rand(3, 4), "Y": rand(3, 1, seed=1)},
           ref=lambda X, Y: {"Out": X * Y}, grad=["X", "Y"], id="mul_bcast_same_rank"),
    OpCase("elementwise_div", {"X": rand(3, 4), "Y": rand(4, low=0.5, high=2, seed=1)},
           ref=lambda X, Y: {"Out": X / Y}, grad=["X", "Y"]),
    OpCase("elementwise_max", {"X": rand(3, 4), "Y": rand(3, 4, seed=1)},
           ref=lambda X, Y: {"Out": np.maximum(X, Y)}, grad=["X", "Y"]),
    OpCase("elementwise_min", {"X": rand(3, 4), "Y": rand(3, 4, seed=1)},
           ref=lambda X, Y: {"Out": np.minimum(X, Y)}, grad=["X", "Y"]),
    OpCase("elementwise_pow", {"X": rand(3, 4, low=0.5, high=2), "Y": rand(3, 4, seed=1)},
           ref=lambda X, Y: {"Out": X ** Y}, grad=["X", "Y"]),
    OpCase("matmul", {"X": rand(3, 4), "Y": rand(4, 5, seed=1)},
           ref=lambda X, Y: {"Out": X @ Y}, grad=["X", "Y"]),
    OpCase("matmul", {"X": rand(2, 3, 4), "Y": rand(2, 5, 4, seed=1)},
           attrs={"transpose_Y": True, "alpha": 0.5},
           ref=lambda X, Y: {"Out": 0.5 * X @ Y.transpose(0, 2, 1)}, grad=["X", "Y"],
           id="matmul_batched_transpose_alpha"),
    OpCase("matmul", {"X": rand(4, 3), "Y": rand(2, 4, 5, seed=1)},
           attrs={"transpose_X": True},
           ref=lambda X, Y: {"Out": X.T @ Y}, grad=["X", "Y"], id="matmul_broadcast_batch"),
    OpCase("matmul", {"X": rand(4), "Y": rand(4, 3, seed=1)},
           ref=lambda X, Y: {"Out": X @ Y}, grad=["X", "Y"], id="matmul_vector"),
    OpCase("sum", {"X": [rand(2, 3), rand(2, 3, seed=1), rand(2, 3, seed=2)]},
           ref=lambda X: {"Out": X[0] + X[1] + X[2]}, grad=["X"]),
    OpCase("mean", {"X": rand(3, 4)}, ref=lambda X: {"Out": np.array([X.mean()])}, grad=["X"]),
    OpCase("scale", {"X": rand(3, 4)}, attrs={"scale": 2.5, "bias": 0.5},
           ref=lambda X: {"Out": X * 2.5 + 0.5}, grad=["X"]),
    OpCase("scale", {"X": rand(3, 4)},
           attrs={"scale": 2.0, "bias": 1.0, "bias_after_scale": False},
           ref=lambda X: {"Out": (X + 1.0) * 2.0}, grad=["X"], id="scale_bias_first"),
    OpCase("cos_sim", {"X": rand(4, 3, seed=51), "Y": rand(4, 3, seed=52)},
           ref=lambda X, Y: {"Out": ((X * Y).sum(1) / np.linalg.norm(X, axis=1)
                                     / np.linalg.norm(Y, axis=1)).reshape(-1, 1)},
           grad=["X", "Y"], grad_outputs=["Out"]),
    OpCase("cos_sim", {"X": rand(4, 3, seed=51), "Y": rand(1, 3, seed=53)},
           ref=lambda X, Y: {"Out": (X @ Y[0] / np.linalg.norm(X, axis=1)
                                     / np.linalg.norm(Y)).reshape(-1, 1)},
           grad=["X", "Y"], grad_outputs=["Out"], id="cos_sim_one_row_y"),
    OpCase("elementwise_mod", {"X": INTS_X, "Y": INTS_Y}, ref=c_mod),
    OpCase("elementwise_mod", {"X": rand(2, 3, high=5.0), "Y": np.array([1.5, -2.0, 0.7])},
           ref=c_mod, id="elementwise_mod_float_broadcast"),
    OpCase("elementwise_floordiv", {"X": INTS_X, "Y": INTS_Y}, ref=c_floordiv),
    OpCase("cumsum", {"X": X}, ref=_cumsum_ref, grad=["X"]),
    OpCase("cumsum", {"X": X}, attrs={"axis": 0, "exclusive": True}, ref=_cumsum_ref,
           grad=["X"], id="cumsum_exclusive"),
    OpCase("cumsum", {"X": X}, attrs={"axis": 1, "reverse": True, "exclusive": True},
           ref=_cumsum_ref, grad=["X"], id="cumsum_reverse_exclusive"),
    OpCase("bilinear_tensor_product", {"X": rand(3, 2), "Y": rand(3, 4, seed=1),
                                       "Weight": rand(5, 2, 4, seed=2),
                                       "Bias": rand(1, 5, seed=3)},
           ref=lambda X, Y, Weight, Bias: {"Out": np.einsum("ni,kij,nj->nk", X, Weight, Y)
                                           + Bias},
           grad=["X", "Y", "Weight", "Bias"]),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_op(case):
    check_op(case)


def test_variable_orderings_are_comparison_ops_and_equality_stays_identity():
    """``a < b`` and ``a >= 2.0`` append Fluid 1.6's comparison ops (a bool variable), as
    programs like Fluid's own piecewise_decay write them; ``==`` keeps Python's meaning."""
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        a = fluid.layers.data(name="a", shape=[3], dtype="float32", append_batch_size=False)
        b = fluid.layers.data(name="b", shape=[3], dtype="float32", append_batch_size=False)
        outs = [a < b, a <= 1.0, a > b, a >= 2.0]
    assert [op.type for op in main.global_block().ops if "than" in op.type or "equal" in
            op.type] == ["less_than", "less_equal", "greater_than", "greater_equal"]
    assert all(v.dtype == "bool" for v in outs)
    av, bv = np.array([1, 2, 3], "float32"), np.array([2, 2, 2], "float32")
    got = fluid.Executor(fluid.CPUPlace()).run(main, feed={"a": av, "b": bv}, fetch_list=outs)
    for g, want in zip(got, [av < bv, av <= 1.0, av > bv, av >= 2.0]):
        np.testing.assert_array_equal(g, want)
    assert (a == a) is True and (a == b) is False and {a: 1}[a] == 1 and a in [b, a]


def test_integer_division_by_zero_is_an_error():
    case = OpCase("elementwise_floordiv", {"X": INTS_X, "Y": np.zeros_like(INTS_Y)})
    with pytest.raises(fluid.OpRunError, match="integer division by zero"):
        run_op(case)


def test_narrow_products_equal_the_plain_ones_contiguous() -> None:
    import torch

    from parafluid.ops.common import mm

    gen = torch.Generator().manual_seed(0)
    # transposed (2-15 columns, not tiny), then plain: tiny, 1 column, 16 columns
    for m, k, n in [(128, 64, 3), (128, 512, 10), (256, 2048, 2), (32, 64, 10), (128, 512, 1),
                    (128, 512, 16)]:
        a, b = torch.randn(m, k, generator=gen), torch.randn(k, n, generator=gen)
        out = mm(a, b)
        assert out.shape == (m, n) and out.is_contiguous()
        np.testing.assert_allclose(out.numpy(), a.double().numpy() @ b.double().numpy(),
                                   rtol=1e-4, atol=1e-3)
        d = torch.randn(m, n, generator=gen)  # a transposed operand, as the weight gradient's
        np.testing.assert_allclose(mm(a.t(), d).numpy(), a.double().numpy().T @ d.double().numpy(),
                                   rtol=1e-4, atol=1e-3)
