"""Fluid 1.6's LoDTensor helpers its own tests use: ``_alloc_float`` / ``_alloc_int`` /
``_mutable_data`` after ``_set_dims``, and slicing a tensor into a new one."""

from __future__ import annotations

import numbers

import numpy as np
import pytest

import parafluid as fluid
from parafluid import core


@pytest.mark.parametrize("alloc, dtype", [("_alloc_float", np.float32),
                                          ("_alloc_int", np.int32)])
def test_alloc_after_set_dims_holds_a_tensor_of_those_dims(alloc, dtype):
    tensor = core.Scope().var("t").get_tensor()
    tensor._set_dims([4, 3])
    getattr(tensor, alloc)(core.CPUPlace())
    got = np.array(tensor)
    assert got.shape == (4, 3) and got.dtype == dtype
    got[1, 2] = 7
    tensor.set(got, core.CPUPlace())
    assert np.array(tensor)[1, 2] == 7
    empty = core.Scope().var("e").get_tensor()
    empty._set_dims([0, 1])
    empty._alloc_float(core.CPUPlace())
    assert np.array(empty).shape == (0, 1)


def test_mutable_data_gives_the_address_of_a_tensor_of_the_dtype():
    tensor = core.Scope().var("t").get_tensor()
    tensor._set_dims([2, 2])
    assert isinstance(tensor._mutable_data(core.CPUPlace(), core.VarDesc.VarType.INT64),
                      numbers.Integral)
    assert np.array(tensor).dtype == np.int64


def test_slicing_a_tensor_gives_a_tensor_of_the_slice():
    values = np.arange(27).reshape(3, 3, 3)
    tensor = fluid.Tensor()
    tensor.set(values, core.CPUPlace())
    for index in (1, slice(1, None), slice(2, None, -2), (slice(0, None), slice(0, None, -1),
                                                           slice(2, None))):
        part = tensor[index]
        assert isinstance(part, fluid.LoDTensor)
        np.testing.assert_array_equal(np.array(part), values[index])
    np.testing.assert_array_equal(np.array(tensor[2::-2][0]), values[2::-2][0])
