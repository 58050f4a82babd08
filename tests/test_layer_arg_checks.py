"""Layer functions check their arguments when the program is built, as Fluid 1.6's do: an
input that is not a Variable, or a Variable of a dtype the layer does not take, is a
TypeError; ``use_cudnn`` that is not a bool is a ValueError (parafluid/layers/arg_checks.py)."""

from __future__ import annotations

import numpy as np
import pytest

import parafluid as fluid
from parafluid.layers import arg_checks

L = fluid.layers


def _data(name, dtype, shape=(4,)):
    return L.data(name=name, shape=list(shape), dtype=dtype)


def _lod_tensor():
    return fluid.create_lod_tensor(np.array([[-1.0]]), [[1]], fluid.CPUPlace())


@pytest.mark.parametrize("call, match", [
    (lambda: L.reshape(_lod_tensor(), shape=[1]), "reshape: x must be a Variable"),
    (lambda: L.reshape(_data("b", "bool"), shape=[2, 2]), "reshape: x must be of dtype"),
    (lambda: L.reshape(_data("x", "float32"), shape=1), "reshape: shape must be"),
    (lambda: L.reshape(_data("x", "float32"), shape=[4], actual_shape=1),
     "reshape: actual_shape must be a Variable"),
    (lambda: L.elementwise_add(_lod_tensor(), _data("y", "float32")),
     "elementwise_add: x must be a Variable"),
    (lambda: L.elementwise_mul(_data("x", "float32"), _data("y", "bool")),
     "elementwise_mul: y must be of dtype"),
    (lambda: L.concat([_data("x", "float32"), np.ones((1, 4), "float32")]),
     r"concat: input\[1\] must be a Variable"),
    (lambda: L.softmax(_data("i", "int32")), "softmax: input must be of dtype"),
    (lambda: L.embedding(_data("ids", "int32", (1,)), size=[10, 3]),
     "embedding: input must be of dtype int64"),
    (lambda: L.squeeze(_data("x", "float32", (1, 4)), axes=(1,)),
     "squeeze: axes must be a list"),
    (lambda: L.transpose(_data("x", "float32", (2, 3)), perm=(0, 2, 1)),
     "transpose: perm must be a list"),
    (lambda: L.reduce_sum(_data("b", "bool")), "reduce_sum: input must be of dtype"),
    (lambda: L.conv2d(_data("i", "int32", (3, 4, 5, 6)), 1, 1),
     "conv2d: input must be of dtype"),  # the dtype before the rank, as Fluid
    (lambda: L.fill_constant([1], "uint8", 5), "fill_constant: dtype must be"),
    (lambda: L.fill_constant(1, "float32", 5), "fill_constant: shape must be"),
    (lambda: L.fill_constant([1], "float64", 5, out=_data("o", "int32")),
     "fill_constant: dtype float64 differs"),
    (lambda: L.uniform_random([2, 3], "int32"), "uniform_random: dtype must be"),
])
def test_refused_with_a_type_error(call, match):
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        with pytest.raises(TypeError, match=match):
            call()


@pytest.mark.parametrize("layer", ["conv2d", "pool2d"])
def test_use_cudnn_must_be_a_bool(layer):
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        x = _data("x", "float32", (3, 8, 8))
        kwargs = {"num_filters": 2, "filter_size": 3} if layer == "conv2d" else {"pool_size": 2}
        with pytest.raises(ValueError, match=f"{layer}: use_cudnn must be True or False"):
            getattr(L, layer)(x, use_cudnn=[0], **kwargs)
        getattr(L, layer)(x, use_cudnn=False, **kwargs)


def test_an_unknown_dtype_name_is_both_a_type_and_a_value_error():
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        for kind in (TypeError, ValueError):
            with pytest.raises(kind, match="unsupported dtype 'uint4'"):
                L.fill_constant(shape=[1], value=5, dtype="uint4")


def test_accepted_inputs_still_build_and_fluid_module_paths_are_the_checked_layers():
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        x = _data("x", "float32", (2, 2))
        L.reshape(x, shape=[-1, 4])
        L.reshape(_data("f16", "float16", (4,)), shape=[-1, 2, 2])
        L.concat([x, x], axis=1)
        L.embedding(_data("ids", "int64", (1,)), size=[10, 3])
    assert fluid.layers.tensor.concat is fluid.layers.concat
    assert fluid.layers.nn.reshape is fluid.layers.reshape
    assert all(hasattr(L, name) for name in arg_checks.LAYER_CHECKS)


def test_embedding_checks_its_ids_and_dtype_in_both_forms():
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        ids = fluid.data(name="ids", shape=[4, 1], dtype="int64")
        for layer in (L.embedding, fluid.embedding):
            with pytest.raises(TypeError, match="embedding: dtype must be one of"):
                layer(input=ids, size=(10, 4), dtype="int64")
            with pytest.raises(TypeError, match="embedding: input must be a Variable"):
                layer(input=np.ones((4, 1), "int64"), size=(10, 4))
            layer(input=ids, size=(10, 4), dtype="float64")


def test_resize_scale_must_be_a_number():
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        x = fluid.data(name="x", shape=[1, 3, 6, 6], dtype="float32")
        with pytest.raises(TypeError, match="scale must be a float"):
            L.resize_nearest(x, scale="scale")
        with pytest.raises(ValueError, match="scale must be > 0"):
            L.resize_nearest(x, scale=-0.3)


def test_scatter_nd_add_errors_carry_fluids_wording():
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        ref = L.data(name="ref", shape=[3, 4, 5], dtype="float32")
        with pytest.raises(ValueError, match=r"Input\(Index\).shape\[-1\] should be no greater"):
            L.scatter_nd_add(ref, L.data(name="i", shape=[2, 10], dtype="int32"),
                             L.data(name="u", shape=[2, 10], dtype="float32"))
        with pytest.raises(ValueError, match="Updates has wrong shape"):
            L.scatter_nd(L.data(name="j", shape=[2, 1], dtype="int32"),
                         L.data(name="v", shape=[2, 4, 5, 20], dtype="float32"), [3, 4, 5])
        with pytest.raises(ValueError, match="ref and updates must have the same dtype"):
            L.scatter_nd_add(L.data(name="r64", shape=[4], dtype="float64"),
                             L.data(name="k", shape=[1], dtype="int32"),
                             L.data(name="w", shape=[1], dtype="float32"))


def test_sign_takes_float_variables_and_arrays():
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        with pytest.raises(TypeError, match="sign: x must be a Variable or a numpy ndarray"):
            L.sign(12)
        with pytest.raises(TypeError, match="sign: x must be float16, float32 or float64"):
            L.sign(L.data(name="i", shape=[12, 10], dtype="int32"))
        L.sign(L.data(name="h", shape=[4], dtype="float16"))
        L.sign(np.array([-2.0, 3.0], "float32"))
