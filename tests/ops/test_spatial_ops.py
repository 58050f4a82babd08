"""Op table: affine_grid, grid_sampler, temporal_shift, fsp; references are loops written
from Fluid 1.6's kernels (corner-aligned grids, zero padding)."""

import numpy as np
import pytest

import parafluid as fluid
from parafluid.testing import OpCase, check_op, rand


def affine_grid_ref(Theta, attrs):
    n, _, h, w = attrs["output_shape"]
    ys, xs = np.linspace(-1, 1, h), np.linspace(-1, 1, w)
    base = np.stack([np.tile(xs, (h, 1)), np.tile(ys[:, None], (1, w)), np.ones((h, w))], -1)
    return {"Output": np.einsum("hwk,njk->nhwj", base, Theta)}


def grid_sampler_ref(X, Grid):
    n, c, h, w = X.shape
    out = np.zeros((n, c, Grid.shape[1], Grid.shape[2]))
    for b in range(n):
        for i in range(Grid.shape[1]):
            for j in range(Grid.shape[2]):
                x = (Grid[b, i, j, 0] + 1) * (w - 1) / 2
                y = (Grid[b, i, j, 1] + 1) * (h - 1) / 2
                x0, y0 = int(np.floor(x)), int(np.floor(y))
                for yy, wy in ((y0, y0 + 1 - y), (y0 + 1, y - y0)):
                    for xx, wx in ((x0, x0 + 1 - x), (x0 + 1, x - x0)):
                        if 0 <= yy < h and 0 <= xx < w:
                            out[b, :, i, j] += wy * wx * X[b, :, yy, xx]
    return {"Output": out}


def temporal_shift_ref(X, attrs):
    t, ratio = attrs["seg_num"], attrs["shift_ratio"]
    nt, c, h, w = X.shape
    c1, c2 = int(c * ratio), int(c * 2 * ratio)
    v = X.reshape(nt // t, t, c, h, w)
    out = np.zeros_like(v)
    for it in range(t):
        for ic in range(c):
            src = it - 1 if ic < c1 else (it + 1 if ic < c2 else it)
            if 0 <= src < t:
                out[:, it, ic] = v[:, src, ic]
    return {"Out": out.reshape(X.shape)}


# grid points kept off the pixel lattice (bilinear kinks) and some outside [-1, 1]
GRID = np.random.RandomState(3).uniform(-1.2, 1.2, (2, 3, 4, 2)) * 0.97 + 0.013

CASES = [
    OpCase("affine_grid", {"Theta": rand(2, 2, 3)}, attrs={"output_shape": [2, 1, 3, 4]},
           ref=affine_grid_ref, grad=["Theta"]),
    OpCase("grid_sampler", {"X": rand(2, 2, 4, 5), "Grid": GRID}, ref=grid_sampler_ref,
           grad=["X", "Grid"]),
    OpCase("temporal_shift", {"X": rand(6, 8, 2, 2)}, attrs={"seg_num": 3, "shift_ratio": 0.25},
           ref=temporal_shift_ref, grad=["X"]),
    OpCase("fsp", {"X": rand(2, 3, 2, 4), "Y": rand(2, 5, 2, 4, seed=1)},
           ref=lambda X, Y: {"Out": np.einsum("nik,njk->nij", X.reshape(2, 3, -1),
                                              Y.reshape(2, 5, -1)) / 8},
           grad=["X", "Y"]),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_op(case):
    check_op(case)


def test_spatial_transformer_layers_identity_theta_reproduces_the_image():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        img = fluid.layers.data(name="img", shape=[2, 5, 6], dtype="float32")
        theta = fluid.layers.data(name="theta", shape=[2, 3], dtype="float32")
        grid = fluid.layers.affine_grid(theta, out_shape=[-1, 2, 5, 6])
        warped = fluid.layers.grid_sampler(img, grid)
        shifted = fluid.layers.temporal_shift(warped, seg_num=2)
        fsp = fluid.layers.fsp_matrix(warped, shifted)
    assert warped.shape == (-1, 2, 5, 6) and fsp.shape == (-1, 2, 2)
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    x = rand(4, 2, 5, 6, seed=2).astype("float32")
    eye = np.tile(np.array([[1, 0, 0], [0, 1, 0]], "float32"), (4, 1, 1))
    got, = exe.run(main, feed={"img": x, "theta": eye}, fetch_list=[warped])
    np.testing.assert_allclose(got, x, atol=1e-5)
