"""Op table: attributes given as tensors, as in Fluid 1.6 (the tensor overrides the
attribute; its values are known at run time only). fill_constant / uniform_random
(ShapeTensor, ShapeTensorList), slice and strided_slice (Starts/Ends/Strides tensors and
tensor lists, decrease_axis, infer_flags), expand (ExpandTimes, expand_times_tensor),
crop_tensor (Shape, Offsets, ShapeTensor, OffsetsTensor), the interpolate ops (OutSize,
SizeTensor, Scale; a scale wins over out_h/out_w; NHWC), top_k (K), sequence_mask
(MaxLenTensor)."""

import numpy as np
import pytest

from parafluid.testing import OpCase, check_op, rand

I32 = "int32"


def _i(*v, dtype=I32):
    return np.array(v, dtype)


def _ones_list(*v):
    return [np.array([x], I32) for x in v]


X = rand(4, 5, 6)


def _interp_matrix(n_in, n_out, align_corners=True):
    # bilinear weights along one axis (align_corners: corner to corner)
    a = np.zeros((n_out, n_in))
    ratio = (n_in - 1) / (n_out - 1) if align_corners and n_out > 1 else \
        (n_in / n_out if not align_corners else 0.0)
    for k in range(n_out):
        pos = ratio * k
        lo = min(int(np.floor(pos)), n_in - 1)
        hi = min(lo + 1, n_in - 1)
        f = pos - lo
        a[k, lo] += 1 - f
        a[k, hi] += f
    return a


def _bilinear(x, oh, ow):
    ah, aw = _interp_matrix(x.shape[2], oh), _interp_matrix(x.shape[3], ow)
    return np.einsum("ih,nchw,jw->ncij", ah, x, aw)


IMG = rand(2, 3, 4, 5, seed=5)


def _check_uniform(shape):
    def check(got, attrs):
        out = got["Out"]
        assert out.shape == shape and out.min() >= -1 and out.max() <= 1
    return check


def _slice_ref(Input, **kw):
    return {"Out": Input[1:3, :, -4:-1]}


CASES = [
    OpCase("fill_constant", {"ShapeTensor": _i(2, 3)}, attrs={"value": 1.5, "dtype": "float64"},
           ref=lambda ShapeTensor: {"Out": np.full((2, 3), 1.5)},
           id="fill_constant_shape_tensor"),
    OpCase("fill_constant", {"ShapeTensorList": _ones_list(3, 2, 1)},
           attrs={"shape": [3, -1, 1], "value": 2.0, "dtype": "int64"},
           ref=lambda ShapeTensorList: {"Out": np.full((3, 2, 1), 2, "int64")},
           id="fill_constant_shape_tensor_list"),
    OpCase("fill_constant", {"ShapeTensor": _i(2, 2, dtype="int64"),
                             "ShapeTensorList": _ones_list(3)},
           attrs={"shape": [5], "value": 0.5, "dtype": "float32"},
           ref=lambda **kw: {"Out": np.full((2, 2), 0.5, "float32")},
           id="fill_constant_shape_tensor_wins_over_list"),
    OpCase("uniform_random", {"ShapeTensor": _i(3, 4)}, attrs={"dtype": "float64"},
           check=_check_uniform((3, 4)), id="uniform_random_shape_tensor"),
    OpCase("uniform_random", {"ShapeTensorList": _ones_list(2, 5)},
           attrs={"shape": [-1, 5], "dtype": "float32"}, check=_check_uniform((2, 5)),
           id="uniform_random_shape_tensor_list"),
    OpCase("slice", {"Input": X, "StartsTensor": _i(1, -4), "EndsTensor": _i(3, -1)},
           attrs={"axes": [0, 2]}, ref=_slice_ref, grad=["Input"],
           id="slice_starts_ends_tensor"),
    OpCase("slice", {"Input": X, "StartsTensorList": _ones_list(1, -4),
                     "EndsTensorList": _ones_list(3, -1)},
           attrs={"axes": [0, 2], "starts": [-1, -4], "ends": [-1, -1],
                  "infer_flags": [-1, -1]},
           ref=_slice_ref, grad=["Input"], id="slice_tensor_lists"),
    OpCase("slice", {"Input": X, "StartsTensor": _i(0), "EndsTensorList": _ones_list(3)},
           attrs={"axes": [0], "starts": [2], "ends": [4]},
           ref=lambda **kw: {"Out": kw["Input"][0:3]}, id="slice_mixed_tensor_and_list"),
    OpCase("slice", {"Input": X}, attrs={"axes": [0, 1], "starts": [2, 1], "ends": [3, 4],
                                         "decrease_axis": [0]},
           ref=lambda Input: {"Out": Input[2, 1:4]}, grad=["Input"],
           id="slice_decrease_axis"),
    OpCase("slice", {"Input": X}, attrs={"axes": [0, 1, 2], "starts": [2, 1, 0],
                                         "ends": [3, 2, 1], "decrease_axis": [0, 1, 2]},
           ref=lambda Input: {"Out": Input[2, 1, 0:1]}, id="slice_decrease_every_axis"),
    OpCase("slice", {"Input": X}, attrs={"axes": [1], "starts": [1], "ends": [3],
                                         "infer_flags": [-1]},
           ref=lambda Input: {"Out": Input[:, 1:3]}, id="slice_infer_flags_unknown"),
    OpCase("strided_slice", {"Input": X, "StartsTensor": _i(0, 5), "EndsTensor": _i(4, 0),
                             "StridesTensor": _i(2, -2)},
           attrs={"axes": [0, 2]}, ref=lambda **kw: {"Out": kw["Input"][0:4:2, :, 5:0:-2]},
           grad=["Input"], id="strided_slice_tensors"),
    OpCase("strided_slice", {"Input": X, "StartsTensorList": _ones_list(1),
                             "EndsTensorList": _ones_list(5),
                             "StridesTensorList": _ones_list(3)},
           attrs={"axes": [1], "starts": [-1], "ends": [-1], "strides": [-1],
                  "infer_flags": [-1]},
           ref=lambda **kw: {"Out": kw["Input"][:, 1:5:3]}, grad=["Input"],
           id="strided_slice_tensor_lists"),
    OpCase("strided_slice", {"Input": X}, attrs={"axes": [0, 2], "starts": [1, 0],
                                                 "ends": [2, 6], "strides": [1, 2],
                                                 "decrease_axis": [0]},
           ref=lambda Input: {"Out": Input[1, :, 0:6:2]}, grad=["Input"],
           id="strided_slice_decrease_axis"),
    OpCase("expand", {"X": rand(2, 3), "ExpandTimes": _i(2, 1)},
           ref=lambda X, ExpandTimes: {"Out": np.tile(X, (2, 1))}, grad=["X"],
           id="expand_expand_times_tensor"),
    OpCase("expand", {"X": rand(2, 3), "expand_times_tensor": _ones_list(1, 3)},
           attrs={"expand_times": [1, -1]},
           ref=lambda **kw: {"Out": np.tile(kw["X"], (1, 3))}, grad=["X"],
           id="expand_times_tensor_list"),
    OpCase("expand", {"X": rand(2, 3), "ExpandTimes": _i(3, 1),
                      "expand_times_tensor": _ones_list(1, 2)},
           ref=lambda **kw: {"Out": np.tile(kw["X"], (3, 1))},
           id="expand_expand_times_wins_over_list"),
    OpCase("crop_tensor", {"X": X, "Shape": _i(2, 3, 4), "Offsets": _i(1, 2, 1)},
           ref=lambda **kw: {"Out": kw["X"][1:3, 2:5, 1:5]}, grad=["X"],
           id="crop_tensor_shape_and_offsets_tensors"),
    OpCase("crop_tensor", {"X": X, "ShapeTensor": _ones_list(2, 3, 4),
                           "OffsetsTensor": _ones_list(1, 2, 1)},
           attrs={"shape": [2, -1, 4]},
           ref=lambda **kw: {"Out": kw["X"][1:3, 2:5, 1:5]}, grad=["X"],
           id="crop_tensor_tensor_lists"),
    OpCase("crop_tensor", {"X": X, "ShapeTensor": _ones_list(2, -1, 4)},
           attrs={"shape": [2, -1, 4], "offsets": [0, 1, 2]},
           ref=lambda **kw: {"Out": kw["X"][0:2, 1:5, 2:6]},
           id="crop_tensor_list_minus_one_takes_the_rest"),
    OpCase("bilinear_interp", {"X": IMG, "OutSize": _i(6, 7)},
           ref=lambda X, OutSize: {"Out": _bilinear(X, 6, 7)}, grad=["X"],
           id="bilinear_out_size_tensor"),
    OpCase("bilinear_interp", {"X": IMG, "SizeTensor": _ones_list(3, 8)},
           attrs={"out_h": -1, "out_w": 8},
           ref=lambda X, SizeTensor: {"Out": _bilinear(X, 3, 8)}, grad=["X"],
           id="bilinear_size_tensor_list"),
    OpCase("bilinear_interp", {"X": IMG, "SizeTensor": _ones_list(3, 8), "OutSize": _i(6, 7)},
           ref=lambda **kw: {"Out": _bilinear(kw["X"], 3, 8)},
           id="bilinear_size_tensor_wins_over_out_size"),
    OpCase("bilinear_interp", {"X": IMG, "Scale": np.array([1.5], "float32")},
           ref=lambda X, Scale: {"Out": _bilinear(X, 6, 7)}, grad=["X"],
           id="bilinear_scale_tensor"),
    OpCase("bilinear_interp", {"X": IMG}, attrs={"scale": 2.0, "out_h": 3, "out_w": 3},
           ref=lambda X: {"Out": _bilinear(X, 8, 10)}, id="bilinear_scale_wins_over_out_hw"),
    OpCase("bilinear_interp", {"X": np.ascontiguousarray(IMG.transpose(0, 2, 3, 1))},
           attrs={"out_h": 6, "out_w": 3, "data_layout": "NHWC"},
           ref=lambda X: {"Out": _bilinear(X.transpose(0, 3, 1, 2), 6, 3).transpose(
               0, 2, 3, 1)}, grad=["X"], id="bilinear_nhwc"),
    OpCase("nearest_interp", {"X": IMG, "OutSize": _i(8, 10)},
           ref=lambda X, OutSize: {"Out": X[:, :, np.floor(np.arange(8) * 3 / 7 + 0.5)
                                           .astype(int)][:, :, :, np.floor(
                                               np.arange(10) * 4 / 9 + 0.5).astype(int)]},
           id="nearest_out_size_tensor"),
    OpCase("top_k", {"X": rand(3, 6), "K": _i(2)},
           ref=lambda X, K: {"Out": -np.sort(-X, 1)[:, :2],
                             "Indices": np.argsort(-X, 1)[:, :2]},
           grad=["X"], grad_outputs=["Out"], id="top_k_k_tensor"),
    OpCase("top_k", {"X": rand(3, 6), "K": _i(4)}, attrs={"k": 1},
           ref=lambda X, K: {"Out": -np.sort(-X, 1)[:, :4]}, id="top_k_k_tensor_wins"),
    OpCase("sequence_mask", {"X": np.array([1, 3, 0], "int64"), "MaxLenTensor": _i(4)},
           ref=lambda X, MaxLenTensor: {"Y": (np.arange(4) < X[:, None]).astype("int64")},
           id="sequence_mask_max_len_tensor"),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_op(case):
    check_op(case)


def test_inferred_shapes_mark_tensor_given_dims_unknown():
    import parafluid as fluid

    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        block = main.global_block()
        x = fluid.data("x", [4, 5, 6], dtype="float64")
        st = fluid.data("st", [2], dtype="int32")
        k = fluid.data("k", [1], dtype="int32")

        def op(type, inputs, attrs, outs=("Out",)):
            vars_ = {o: block.create_var(name=f"{type}_{o}") for o in outs}
            block.append_op(type, inputs=inputs, outputs={o: [v] for o, v in vars_.items()},
                            attrs=attrs)
            return vars_[outs[0]]

        assert list(op("fill_constant", {"ShapeTensor": [st]}, {"dtype": "float32"}).shape) \
            == [-1, -1]
        assert list(op("slice", {"Input": [x], "StartsTensor": [st]},
                       {"axes": [0, 2], "ends": [3, 4]}).shape) == [-1, 5, -1]
        assert list(op("top_k", {"X": [x], "K": [k]}, {}, ("Out", "Indices")).shape) == \
            [4, 5, -1]
        assert list(op("expand", {"X": [x], "ExpandTimes": [k]}, {}).shape) == [-1, -1, -1]


def test_layers_pass_variables_to_the_tensor_inputs():
    import parafluid as fluid
    from parafluid.testing import run_layers

    x = rand(4, 5, 6)
    img = rand(1, 2, 3, 4, seed=7)

    def build():
        xv = fluid.data("x", [4, 5, 6], dtype="float64")
        iv = fluid.data("img", [1, 2, 3, 4], dtype="float64")
        two = fluid.layers.fill_constant([1], "int32", 2)
        three = fluid.layers.fill_constant([1], "int32", 3)
        pair = fluid.layers.fill_constant([2], "int32", 3)
        outs = [
            fluid.layers.fill_constant([two, 3], "float32", 1.0),
            fluid.layers.fill_constant(pair, "float32", 2.0),
            fluid.layers.uniform_random([three, 2]),
            fluid.layers.slice(xv, axes=[0, 2], starts=[1, two], ends=[three, 6]),
            fluid.layers.strided_slice(xv, axes=[1], starts=[0], ends=[three], strides=[two]),
            fluid.layers.expand(fluid.layers.slice(xv, [0], [0], [1]), [two, 1, 1]),
            fluid.layers.crop_tensor(xv, shape=[two, 3, -1], offsets=[1, two, 0]),
            fluid.layers.topk(xv, k=two)[0],
            fluid.layers.sequence_mask(fluid.layers.fill_constant([2], "int64", 1.0),
                                       maxlen=three),
            fluid.layers.resize_bilinear(iv, out_shape=[two, three]),
            fluid.layers.resize_bilinear(iv, scale=fluid.layers.fill_constant(
                [1], "float32", 2.0)),
        ]
        types = {op.type for op in xv.block.ops}
        assert {"slice", "strided_slice", "expand", "crop_tensor", "top_k"} <= types
        assert any(op.input("StartsTensorList") for op in xv.block.ops if op.type == "slice")
        assert [op.input("K") for op in xv.block.ops if op.type == "top_k"] != [[]]
        return outs

    outs = run_layers(build, {"x": x, "img": img})
    np.testing.assert_array_equal(outs[0], np.ones((2, 3), "float32"))
    np.testing.assert_array_equal(outs[1], np.full((3, 3), 2.0, "float32"))
    assert outs[2].shape == (3, 2)
    np.testing.assert_array_equal(outs[3], x[1:3, :, 2:6])
    np.testing.assert_array_equal(outs[4], x[:, 0:3:2])
    np.testing.assert_array_equal(outs[5], np.tile(x[0:1], (2, 1, 1)))
    np.testing.assert_array_equal(outs[6], x[1:3, 2:5, 0:6])
    np.testing.assert_array_equal(outs[7], -np.sort(-x, -1)[..., :2])
    np.testing.assert_array_equal(outs[8], np.array([[1, 0, 0], [1, 0, 0]]))
    np.testing.assert_allclose(outs[9], _bilinear(img, 2, 3))
    np.testing.assert_allclose(outs[10], _bilinear(img, 6, 8))
