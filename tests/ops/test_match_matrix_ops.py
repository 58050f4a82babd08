"""Op table: match_matrix_tensor (bilinear match matrices of paired LoD sequences) against a
numpy loop, with gradients vs finite differences; its layer."""

import numpy as np
import pytest

import parafluid as fluid
from parafluid.testing import OpCase, check_op, rand

X_OFFS, Y_OFFS = [0, 2, 5], [0, 3, 4]


def match_ref(X, Y, W, attrs):
    h, dim_t = X.shape[1], attrs["dim_t"]
    out = []
    for b in range(len(X_OFFS) - 1):
        xs, ys = X[X_OFFS[b]:X_OFFS[b + 1]], Y[Y_OFFS[b]:Y_OFFS[b + 1]]
        for t in range(dim_t):
            for i in range(len(xs)):
                for j in range(len(ys)):
                    out.append(xs[i] @ W[:, t, :] @ ys[j])
    return {"Out": np.array(out).reshape(-1, 1), "Tmp": X @ W.reshape(h, dim_t * h)}


CASES = [
    OpCase("match_matrix_tensor", {"X": rand(5, 3, seed=1), "Y": rand(4, 3, seed=2),
                                   "W": rand(3, 2, 3, seed=3)},
           attrs={"dim_t": 2}, lod={"X": [X_OFFS], "Y": [Y_OFFS]}, ref=match_ref,
           grad=["X", "Y", "W"], grad_outputs=["Out"]),
    OpCase("match_matrix_tensor", {"X": rand(5, 4, seed=4), "Y": rand(4, 4, seed=5),
                                   "W": rand(4, 1, 4, seed=6)},
           attrs={"dim_t": 1}, lod={"X": [X_OFFS], "Y": [Y_OFFS]}, ref=match_ref,
           grad=["X", "Y", "W"], grad_outputs=["Out"], id="match_matrix_tensor_one_channel"),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_op(case):
    check_op(case)


def test_match_matrix_tensor_layer_lod_and_values():
    x_np, y_np = rand(5, 3, seed=7, dtype="float32"), rand(4, 3, seed=8, dtype="float32")
    w_np = rand(3, 2, 3, seed=9, dtype="float32")
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data(name="x", shape=[3], dtype="float32", lod_level=1)
        y = fluid.layers.data(name="y", shape=[3], dtype="float32", lod_level=1)
        out, tmp = fluid.layers.match_matrix_tensor(
            x, y, channel_num=2, act="tanh",
            param_attr=fluid.ParamAttr(name="mm_w",
                                       initializer=fluid.initializer.NumpyArrayInitializer(w_np)))
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    place = fluid.CPUPlace()
    got, = exe.run(main, feed={"x": fluid.create_lod_tensor(x_np, [[2, 3]], place),
                               "y": fluid.create_lod_tensor(y_np, [[3, 1]], place)},
                   fetch_list=[out], return_numpy=False)
    assert got.lod() == [[0, 12, 18]]  # 2 channels x 2 x 3, then 2 x 3 x 1
    want = np.tanh(match_ref(x_np.astype("float64"), y_np.astype("float64"),
                             w_np.astype("float64"), {"dim_t": 2})["Out"])
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5)
