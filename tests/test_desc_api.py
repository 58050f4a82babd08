"""Fluid's description-level API: ``op.desc``, ``block.desc`` (its ``VarDesc``s and
``append_op``) and ``core.get_grad_op_desc``, as Fluid's programs that build a gradient op
by hand use them."""

from __future__ import annotations

import numpy as np
import pytest

import parafluid as fluid
from parafluid import core


def test_a_gradient_op_built_desc_by_desc_computes_the_gradient():
    x_np = np.random.RandomState(0).rand(4, 3).astype("float32")
    dy_np = np.random.RandomState(1).rand(4, 3).astype("float32")
    program = fluid.Program()
    block = program.global_block()
    x = block.create_var(name="x", shape=[4, 3], dtype="float32")
    y = block.create_var(name="y", dtype="float32")
    op = block.append_op(type="scale", inputs={"X": [x]}, outputs={"Out": [y]},
                         attrs={"scale": 3.0})
    op.desc.infer_var_type(block.desc)
    op.desc.infer_shape(block.desc)
    block.create_var(name="y@GRAD", shape=[4, 3], dtype="float32")

    descs, grad_to_var = core.get_grad_op_desc(op.desc, set(), [])
    assert [d.type() for d in descs] == ["scale"] and grad_to_var == {"x@GRAD": "x"}
    new = block.desc.append_op()
    new.copy_from(descs[0])
    for name in descs[0].output_arg_names():
        block.desc.var(name.encode("ascii"))
    descs[0].infer_var_type(block.desc)
    descs[0].infer_shape(block.desc)
    grad = block.desc.find_var(b"x@GRAD")
    grad.set_dtype(core.VarDesc.VarType.FP32)
    assert grad.shape() == [4, 3] and grad.dtype() == "float32"
    assert block.desc.find_var(b"missing") is None and new.type() == "scale"

    got, = fluid.Executor(fluid.CPUPlace()).run(program, feed={"x": x_np, "y@GRAD": dy_np},
                                                fetch_list=["x@GRAD"])
    np.testing.assert_allclose(got, 3.0 * dy_np, rtol=1e-6)


def test_an_op_without_a_gradient_and_an_unfilled_desc():
    program = fluid.Program()
    block = program.global_block()
    out = block.create_var(name="o", dtype="float32")
    op = block.append_op(type="fill_constant", outputs={"Out": [out]},
                         attrs={"shape": [2], "value": 1.0, "dtype": "float32"})
    assert core.get_grad_op_desc(op.desc, set(), []) == ([], {})
    with pytest.raises(AttributeError, match="copy_from"):
        block.desc.append_op().type()
