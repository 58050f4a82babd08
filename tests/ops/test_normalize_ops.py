"""Op table: rescaling ops (norm / l2_normalize, lrn, affine_channel, spectral_norm)."""

import numpy as np
import pytest

import parafluid as fluid
from parafluid.testing import OpCase, check_op, rand
from parafluid.testing.refs import lrn_ref


def spectral_ref(Weight, U, V, attrs):
    dim = attrs["dim"]
    mat = np.moveaxis(Weight, dim, 0).reshape(Weight.shape[dim], -1)
    u, v = U, V
    for _ in range(attrs["power_iters"]):
        v = mat.T @ u
        v = v / (np.linalg.norm(v) + attrs["eps"])
        u = mat @ v
        u = u / (np.linalg.norm(u) + attrs["eps"])
    return {"Out": Weight / (u @ mat @ v)}


W = rand(3, 4, 2, seed=5)


CASES = [
    OpCase("spectral_norm", {"Weight": W, "U": rand(4, seed=1), "V": rand(6, seed=2)},
           attrs={"dim": 1, "power_iters": 2}, ref=spectral_ref),
    # enough iterations for the power method to converge: the gradient with u, v held
    # constant is then the exact one
    OpCase("spectral_norm", {"Weight": W, "U": rand(3, seed=1), "V": rand(8, seed=2)},
           attrs={"dim": 0, "power_iters": 60}, ref=spectral_ref, grad=["Weight"],
           grad_atol=1e-4, id="spectral_norm_converged_grad"),
    OpCase("norm", {"X": rand(3, 4)}, attrs={"axis": 1, "epsilon": 1e-10},
           ref=lambda X: {"Out": X / np.sqrt((X ** 2).sum(1, keepdims=True) + 1e-10),
                          "Norm": np.sqrt((X ** 2).sum(1, keepdims=True) + 1e-10)},
           grad=["X"], grad_outputs=["Out"]),
    OpCase("norm", {"X": rand(2, 3, 4)}, attrs={"axis": 0, "epsilon": 1e-6},
           ref=lambda X: {"Out": X / np.sqrt((X ** 2).sum(0, keepdims=True) + 1e-6)},
           grad=["X"], grad_outputs=["Out"], id="norm_axis0"),
    OpCase("lrn", {"X": rand(2, 6, 2, 3)}, attrs={"n": 5, "k": 1.0, "alpha": 0.1,
                                                  "beta": 0.75},
           ref=lrn_ref, grad=["X"], grad_outputs=["Out"]),
    OpCase("lrn", {"X": rand(1, 4, 2, 2)}, attrs={"n": 4, "k": 2.0, "alpha": 0.3,
                                                  "beta": 0.5},
           ref=lrn_ref, grad=["X"], grad_outputs=["Out"], id="lrn_even_window"),
    OpCase("affine_channel", {"X": rand(2, 3, 2, 2), "Scale": rand(3, seed=1),
                              "Bias": rand(3, seed=2)}, attrs={"data_layout": "NCHW"},
           ref=lambda X, Scale, Bias: {"Out": X * Scale.reshape(1, 3, 1, 1)
                                       + Bias.reshape(1, 3, 1, 1)},
           grad=["X", "Scale", "Bias"]),
    OpCase("affine_channel", {"X": rand(2, 2, 3), "Scale": rand(3, seed=1),
                              "Bias": rand(3, seed=2)}, attrs={"data_layout": "NHWC"},
           ref=lambda X, Scale, Bias: {"Out": X * Scale + Bias},
           grad=["X", "Scale", "Bias"], id="affine_channel_nhwc"),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_op(case):
    check_op(case)


def test_spectral_norm_layer_divides_by_the_top_singular_value():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        w = fluid.layers.data(name="w", shape=[4, 6], dtype="float32",
                              append_batch_size=False)
        out = fluid.layers.spectral_norm(w, dim=0, power_iters=50)
    params = main.global_block().all_parameters()
    assert sorted(p.shape for p in params) == [(4,), (6,)]
    assert not any(p.trainable for p in params)
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    x = rand(4, 6, seed=3).astype("float32")
    got, = exe.run(main, feed={"w": x}, fetch_list=[out])
    np.testing.assert_allclose(got, x / np.linalg.svd(x, compute_uv=False)[0], rtol=1e-4)
