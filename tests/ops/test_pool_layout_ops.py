"""Op table: pool2d / pool3d in every layout and padding form Fluid 1.6 accepts
(channel-last data_format, asymmetric paddings, padding_algorithm SAME / VALID, Fluid's
ceil-mode length), against a loop reference written from Fluid's pooling kernel."""

import numpy as np
import pytest

import parafluid as fluid
from parafluid.testing import OpCase, check_op, rand
from parafluid.testing.refs import build_layer, run_built
from parafluid.testing.window_refs import pool_ref

P2 = {"pooling_type": "max", "ksize": [3, 3], "strides": [1, 1], "paddings": [0, 0],
      "global_pooling": False, "exclusive": True, "ceil_mode": False}
P3 = {**P2, "ksize": [2, 2, 2], "strides": [1, 1, 1], "paddings": [0, 0, 0]}


def _last(x):
    return np.ascontiguousarray(np.moveaxis(x, 1, -1))


def _distinct(*shape, seed=0):
    """Values far apart, so that a max window's argmax survives the FD step."""
    n = int(np.prod(shape))
    return (np.random.RandomState(seed).permutation(n).reshape(shape) / n).astype("float64")


CASES = [
    # channel-last: was pooled as if channel-first
    OpCase("pool2d", {"X": _last(_distinct(2, 3, 5, 5))}, attrs={**P2, "data_format": "NHWC"},
           ref=pool_ref(), grad=["X"], id="pool2d_nhwc_max"),
    OpCase("pool2d", {"X": _last(rand(1, 3, 5, 4))},
           attrs={**P2, "pooling_type": "avg", "paddings": [1, 1], "data_format": "NHWC"},
           ref=pool_ref(), grad=["X"], id="pool2d_nhwc_avg_exclusive"),
    OpCase("pool2d", {"X": _last(rand(1, 2, 5, 5))},
           attrs={**P2, "pooling_type": "avg", "paddings": [1, 1], "exclusive": False,
                  "strides": [2, 2], "ceil_mode": True, "data_format": "NHWC"},
           ref=pool_ref(), grad=["X"], id="pool2d_nhwc_avg_inclusive_ceil"),
    OpCase("pool2d", {"X": _last(rand(2, 3, 3, 4))},
           attrs={**P2, "pooling_type": "avg", "global_pooling": True, "data_format": "NHWC"},
           ref=pool_ref(), grad=["X"], id="pool2d_nhwc_global_avg"),
    OpCase("pool2d", {"X": _last(rand(1, 2, 7, 5))},
           attrs={**P2, "pooling_type": "avg", "ksize": [3, 2], "adaptive": True,
                  "data_format": "NHWC"}, ref=pool_ref(), grad=["X"],
           id="pool2d_nhwc_adaptive_avg"),
    # asymmetric paddings [top, bottom, left, right]
    OpCase("pool2d", {"X": _distinct(1, 2, 5, 5)}, attrs={**P2, "paddings": [1, 0, 1, 2]},
           ref=pool_ref(), grad=["X"], id="pool2d_asymmetric_max"),
    OpCase("pool2d", {"X": rand(1, 2, 5, 5)},
           attrs={**P2, "pooling_type": "avg", "paddings": [1, 2, 1, 2]},
           ref=pool_ref(), grad=["X"], id="pool2d_asymmetric_avg_exclusive"),
    OpCase("pool2d", {"X": _last(rand(1, 2, 5, 5))},
           attrs={**P2, "pooling_type": "avg", "paddings": [2, 1, 0, 1], "exclusive": False,
                  "strides": [2, 2], "ceil_mode": True, "data_format": "NHWC"},
           ref=pool_ref(), grad=["X"], id="pool2d_nhwc_asymmetric_avg_inclusive_ceil"),
    OpCase("pool2d", {"X": rand(1, 2, 5, 5)},
           attrs={**P2, "pooling_type": "avg", "paddings": [1, 1, 0, 2], "adaptive": True},
           ref=pool_ref(), grad=["X"], id="pool2d_adaptive_ignores_paddings"),
    # padding_algorithm
    OpCase("pool2d", {"X": rand(1, 1, 7, 7)},
           attrs={**P2, "pooling_type": "avg", "paddings": [1, 1],
                  "padding_algorithm": "VALID"}, ref=pool_ref(), grad=["X"],
           id="pool2d_valid_ignores_paddings"),
    OpCase("pool2d", {"X": _distinct(1, 2, 5, 6)},
           attrs={**P2, "strides": [2, 2], "padding_algorithm": "SAME"}, ref=pool_ref(),
           grad=["X"], id="pool2d_same_stride2_max"),
    OpCase("pool2d", {"X": _last(rand(1, 2, 6, 5))},
           attrs={**P2, "pooling_type": "avg", "ksize": [2, 2], "strides": [2, 2],
                  "padding_algorithm": "SAME", "data_format": "NHWC"}, ref=pool_ref(),
           grad=["X"], id="pool2d_nhwc_same_avg"),
    # Fluid's ceil-mode length keeps a last window that lies in the padding
    OpCase("pool2d", {"X": rand(1, 1, 5, 5)},
           attrs={**P2, "pooling_type": "avg", "ksize": [2, 2], "strides": [2, 2],
                  "paddings": [1, 1], "exclusive": False, "ceil_mode": True},
           ref=pool_ref(), grad=["X"], id="pool2d_ceil_window_in_padding_avg"),
    OpCase("pool2d", {"X": rand(1, 1, 5, 5)},
           attrs={**P2, "ksize": [2, 2], "strides": [2, 2], "paddings": [1, 1],
                  "ceil_mode": True}, ref=pool_ref(), id="pool2d_ceil_window_in_padding_max"),
    # 3-D
    OpCase("pool3d", {"X": _last(_distinct(1, 2, 3, 4, 3))},
           attrs={**P3, "data_format": "NDHWC", "paddings": [1, 0, 1]}, ref=pool_ref(3),
           grad=["X"], id="pool3d_ndhwc_max"),
    OpCase("pool3d", {"X": _last(rand(1, 2, 3, 4, 3))},
           attrs={**P3, "pooling_type": "avg", "global_pooling": True,
                  "data_format": "NDHWC"}, ref=pool_ref(3), grad=["X"],
           id="pool3d_ndhwc_global_avg"),
    OpCase("pool3d", {"X": rand(1, 1, 3, 4, 3)},
           attrs={**P3, "pooling_type": "avg", "paddings": [1, 0, 0, 1, 1, 1],
                  "exclusive": False}, ref=pool_ref(3), grad=["X"],
           id="pool3d_six_paddings_avg_inclusive"),
    OpCase("pool3d", {"X": _distinct(1, 1, 4, 3, 5)},
           attrs={**P3, "ksize": [3, 3, 3], "strides": [2, 2, 2], "padding_algorithm": "SAME"},
           ref=pool_ref(3), grad=["X"], id="pool3d_same_max"),
    OpCase("pool3d", {"X": _last(rand(1, 2, 4, 3, 5))},
           attrs={**P3, "pooling_type": "avg", "ksize": [2, 2, 3], "adaptive": True,
                  "data_format": "NDHWC"}, ref=pool_ref(3), grad=["X"],
           id="pool3d_ndhwc_adaptive_avg"),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_op(case):
    check_op(case)


def test_pool_layers_take_data_format_and_padding_forms():
    shape = [5, 5, 3]
    main, startup, out = build_layer(lambda v: fluid.layers.pool2d(
        v, pool_size=3, pool_type="avg", pool_stride=2, pool_padding="SAME",
        data_format="NHWC"), shape)
    assert out.shape == (-1, 3, 3, 3)
    x = rand(2, *shape).astype("float32")
    got, _ = run_built(main, startup, out, {"x": x})
    want = pool_ref()(x, {**P2, "pooling_type": "avg", "strides": [2, 2],
                          "padding_algorithm": "SAME", "data_format": "NHWC"})["Out"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    _, _, out = build_layer(lambda v: fluid.layers.pool2d(
        v, pool_size=2, pool_padding=[[0, 0], [1, 0], [0, 1], [0, 0]], data_format="NHWC"),
        [4, 4, 3])
    assert out.shape == (-1, 4, 4, 3)
    _, _, out = build_layer(lambda v: fluid.layers.pool3d(
        v, pool_size=2, pool_padding=[1, 0, 0, 0, 0, 1], data_format="NDHWC"), [3, 3, 3, 2])
    assert out.shape == (-1, 3, 2, 3, 2)


def test_max_pool_grad_keeps_the_inputs_memory_layout_and_values():
    """The CPU kernel pools on channels_last memory; the gradient it returns has the input's
    layout (a channels_last dx made the relu gradient before it several times slower), and
    the same values as pooling in the input's layout."""
    import torch

    from parafluid.ops.registry import get_op_def

    attrs = {**get_op_def("pool2d").attrs, "pooling_type": "max", "ksize": [2, 2],
             "strides": [2, 2], "paddings": [0, 0]}
    torch.manual_seed(0)
    x = torch.randn(3, 4, 6, 6, dtype=torch.float64).relu()  # ties among the zeros
    dy = torch.randn(3, 4, 3, 3, dtype=torch.float64)
    ctx = type("Ctx", (), {"need": {"X"}})()
    grad = get_op_def("pool2d_grad").kernel
    dx = grad({"X": x, "Out@GRAD": dy}, attrs, ctx)["X@GRAD"]
    assert dx.is_contiguous()
    _, idx = torch.nn.functional.max_pool2d(x, 2, 2, return_indices=True)
    want = torch.ops.aten.max_pool2d_with_indices_backward(dy, x, [2, 2], [2, 2], [0, 0],
                                                           [1, 1], False, idx)
    assert torch.equal(dx, want)
