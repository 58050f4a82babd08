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
    # as Fluid's empty OpDesc: an op of no type yet, in the block, to fill
    new = block.desc.append_op()
    assert new.type() == "" and block.desc.op(1) == new and block.desc.op_size() == 2


def test_a_program_built_desc_by_desc_as_fluids_core_program_desc():
    desc = core.ProgramDesc()
    block = desc.block(0)
    for name in (b"x1", b"x2"):
        var = block.var(name)
        var.set_type(core.VarDesc.VarType.LOD_TENSOR)
        var.set_shape([10, 20])
    out = block.var(b"out")
    op = block.append_op()
    op.set_type("sum")
    op.set_input("X", ["x1", "x2"])
    op.set_output("Out", ["out"])
    op.check_attrs()
    op.infer_shape(block)
    assert out.shape() == [10, 20]
    assert set(block.all_vars()) == {block.find_var(b"x1"), block.find_var(b"x2"), out}
    # attributes and their kinds
    mul = block.append_op()
    mul.set_type("mul")
    mul.check_attrs()
    assert mul.attr("x_num_col_dims") == 1 and mul.attr_type("x_num_col_dims") == \
        core.AttrType.INT
    mul._set_attr("floats", [1.5, 2.0])
    mul._set_attr("flag", False)
    assert mul.attr_type("floats") == core.AttrType.FLOATS
    assert mul.attr_type("flag") == core.AttrType.BOOLEAN
    mul.set_block_attr("sub_block", desc.block(0))
    assert mul._block_attr_id("sub_block") == 0
    # blocks, op order, removal
    b1 = desc.append_block(block)
    b2 = desc.append_block(b1)
    assert (b1.parent, b2.parent, desc.num_blocks()) == (0, b1.id, 3)
    first = block._prepend_op()
    assert [block.op(i) for i in range(block.op_size())] == [first, op, mul]
    block._remove_op(1, 2)
    assert [block.op(i) for i in range(block.op_size())] == [first, mul]
    # a reader's several shapes, dtypes and LoD levels
    reader = block.var(b"r")
    reader.set_type(core.VarDesc.VarType.READER)
    reader.set_shapes([[2, 3], [4]])
    reader.set_dtypes([core.VarDesc.VarType.INT32, core.VarDesc.VarType.FP64])
    reader.set_lod_levels([1, 0])
    assert reader.shapes() == [[2, 3], [4]] and reader.lod_levels() == [1, 0]
    assert reader.dtypes() == [core.VarDesc.VarType.INT32, core.VarDesc.VarType.FP64]
    assert reader.type() == core.VarDesc.VarType.READER
    # a copy (of ops of known types)
    first.set_type("fill_constant")
    first.set_output("Out", ["x1"])
    first.check_attrs()
    copy = core.ProgramDesc(desc)
    assert copy.num_blocks() == 3 and copy.block(0).op_size() == 2 and copy != desc
    again = core.ProgramDesc(fluid.Program().desc.serialize_to_string())
    assert again.num_blocks() == 1 and again.block(0).op_size() == 0


def test_an_op_knows_its_index_a_variable_its_writer_and_type_is_required():
    program = fluid.Program()
    block = program.global_block()
    x = block.create_var(name="x", shape=[2], dtype="float32")
    y = block.create_var(name="y", shape=[2], dtype="float32")
    assert y.op is None
    first = block.append_op(type="scale", inputs={"X": [x]}, outputs={"Out": [y]})
    second = block.append_op(type="relu", inputs={"X": [y]}, outputs={"Out": [y]})
    assert (first.idx, second.idx) == (0, 1) and y.op is second
    assert first.attr_type("scale") == core.AttrType.FLOAT
    with pytest.raises(ValueError, match="`type` to initialized an Operator can not be None."):
        block.append_op()
