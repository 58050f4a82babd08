"""Op table: var_conv_2d (convolution of variable-sized images held in LoD) against a
numpy loop written after Fluid's im2col, with gradients vs finite differences; its layer."""

import numpy as np
import pytest

import parafluid as fluid
from parafluid.testing import OpCase, check_op, rand

C = 2
HEIGHTS, WIDTHS = [3, 2, 0, 4], [4, 1, 3, 3]  # sample 2 is an empty image


def _offsets(lengths):
    return list(np.concatenate([[0], np.cumsum(lengths)]).astype(int))


X_OFFS = _offsets([C * h * w for h, w in zip(HEIGHTS, WIDTHS)])


def var_conv_ref(X, ROW, COLUMN, W, attrs):
    kh, kw, sh, sw = attrs["KernelH"], attrs["KernelW"], attrs["StrideH"], attrs["StrideW"]
    out, cols = [], []
    for b, (h, w) in enumerate(zip(HEIGHTS, WIDTHS)):
        if h == 0 or w == 0:
            continue
        img = X[X_OFFS[b]:X_OFFS[b + 1], 0].reshape(C, h, w)
        ys, xs = list(range(0, h, sh)), list(range(0, w, sw))
        col = np.zeros((C * kh * kw, len(ys) * len(xs)))
        for z in range(C):
            for yi, y in enumerate(ys):
                for xi, x in enumerate(xs):
                    for ky in range(kh):
                        for kx in range(kw):
                            iy, ix = y + ky - kh // 2, x + kx - kw // 2
                            if 0 <= iy < h and 0 <= ix < w:
                                col[(z * kh + ky) * kw + kx, yi * len(xs) + xi] = img[z, iy, ix]
        out.append((W @ col).reshape(-1))
        cols.append(col.reshape(-1))
    return {"Out": np.concatenate(out).reshape(-1, 1), "Col": np.concatenate(cols).reshape(-1, 1)}


def case(kh, kw, sh, sw, oc, id):
    return OpCase("var_conv_2d",
                  {"X": rand(X_OFFS[-1], 1, seed=1), "ROW": rand(sum(HEIGHTS), 1, seed=2),
                   "COLUMN": rand(sum(WIDTHS), 1, seed=3), "W": rand(oc, C * kh * kw, seed=4)},
                  attrs={"InputChannel": C, "OutputChannel": oc, "KernelH": kh, "KernelW": kw,
                         "StrideH": sh, "StrideW": sw},
                  lod={"X": [X_OFFS], "ROW": [_offsets(HEIGHTS)], "COLUMN": [_offsets(WIDTHS)]},
                  ref=var_conv_ref, grad=["X", "W"], grad_outputs=["Out"], id=id)


CASES = [case(3, 3, 1, 1, 3, "var_conv_2d_3x3"),
         case(2, 3, 2, 1, 2, "var_conv_2d_even_kernel_stride2"),
         case(1, 1, 1, 2, 1, "var_conv_2d_1x1_stride")]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_op(case):
    check_op(case)


def test_var_conv_2d_layer_output_lod_and_values():
    place = fluid.CPUPlace()
    x_np = rand(X_OFFS[-1], 1, seed=5, dtype="float32")
    w_np = rand(4, C * 9, seed=6, dtype="float32")
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data(name="x", shape=[1], dtype="float32", lod_level=1)
        row = fluid.layers.data(name="row", shape=[1], dtype="float32", lod_level=1)
        col = fluid.layers.data(name="col", shape=[1], dtype="float32", lod_level=1)
        out = fluid.layers.var_conv_2d(
            x, row, col, input_channel=C, output_channel=4, filter_size=3, act="relu",
            param_attr=fluid.ParamAttr(initializer=fluid.initializer.NumpyArrayInitializer(w_np)))
    exe = fluid.Executor(place)
    exe.run(startup)
    feed = {"x": fluid.create_lod_tensor(x_np, [[C * h * w for h, w in zip(HEIGHTS, WIDTHS)]],
                                         place),
            "row": fluid.create_lod_tensor(np.zeros((sum(HEIGHTS), 1), "float32"), [HEIGHTS],
                                           place),
            "col": fluid.create_lod_tensor(np.zeros((sum(WIDTHS), 1), "float32"), [WIDTHS],
                                           place)}
    got, = exe.run(main, feed=feed, fetch_list=[out], return_numpy=False)
    assert got.lod() == [_offsets([4 * h * w for h, w in zip(HEIGHTS, WIDTHS)])]
    attrs = {"KernelH": 3, "KernelW": 3, "StrideH": 1, "StrideW": 1}
    want = np.maximum(var_conv_ref(x_np.astype("float64"), None, None, w_np.astype("float64"),
                                   attrs)["Out"], 0)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-6)
