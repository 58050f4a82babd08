"""The attributes Fluid's framework gives every op (op_role, op_role_var, op_namescope,
op_callstack), and mul's attributes as Fluid 1.6's mul_op.cc declares them."""

from __future__ import annotations

import parafluid as fluid
from parafluid.core import AttrType
from parafluid.ops.registry import FRAMEWORK_ATTRS, get_op_def, registered_ops


def _mul_program() -> tuple[fluid.Program, fluid.framework.Operator]:
    prog = fluid.Program()
    block = prog.global_block()
    x = block.create_var(name="x", shape=[5, 10], dtype="float32")
    y = block.create_var(name="y", shape=[10, 8], dtype="float32")
    out = block.create_var(name="out", shape=[5, 8], dtype="float32")
    op = block.append_op(type="mul", inputs={"X": [x], "Y": [y]}, outputs={"Out": [out]},
                         attrs={"x_num_col_dims": 1})
    return prog, op


def test_mul_has_fluids_attributes_and_the_framework_ones():
    _, op = _mul_program()
    assert set(op.attr_names) == {
        "x_num_col_dims", "y_num_col_dims", "use_mkldnn", "scale_x", "scale_y", "scale_out",
        "force_fp32_output", "op_role", "op_role_var", "op_namescope", "op_callstack"}
    assert (op.attr("use_mkldnn"), op.attr("scale_x"), op.attr("scale_y"),
            op.attr("scale_out"), op.attr("force_fp32_output")) == (False, 1.0, [1.0], 1.0, False)
    assert op.attr_type("x_num_col_dims") == AttrType.INT
    assert op.attr_type("scale_y") == AttrType.FLOATS
    assert op.attr_type("op_callstack") == AttrType.STRINGS
    assert op.attr_type("op_role_var") == AttrType.STRINGS


def test_every_op_type_declares_the_framework_attributes():
    missing = [t for t in registered_ops()
               if not FRAMEWORK_ATTRS.keys() <= get_op_def(t).attrs.keys()]
    assert not missing


def test_op_callstack_is_the_creating_python_stack_innermost_first():
    _, op = _mul_program()
    stack = op.attr("op_callstack")
    assert all(isinstance(line, str) and line.startswith('  File "') for line in stack)
    # Fluid's order: the framework's append_op first, then its callers outward
    assert "in append_op" in stack[0]
    mine = [line for line in stack if __file__ in line]
    assert "in _mul_program" in mine[0] and 'op = block.append_op(type="mul"' in mine[0]
    assert "in test_op_callstack_is_the_creating_python_stack_innermost_first" in mine[1]


def test_op_namescope_is_the_full_name_scope_root_included():
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        x = fluid.layers.data(name="x", shape=[3], dtype="float32")
        y = fluid.layers.scale(x, 2.0)
        with fluid.name_scope("block1"):
            fluid.layers.scale(y, 3.0)
    assert [op.attr("op_namescope") for op in main.global_block().ops] == ["/", "/block1/"]


def test_a_gradient_op_keeps_the_stack_and_scope_of_its_forward_op():
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        x = fluid.layers.data(name="x", shape=[3], dtype="float32")
        with fluid.name_scope("net"):
            h = fluid.layers.fc(x, 2)
        loss = fluid.layers.mean(h)
        fluid.backward.append_backward(loss)
    ops = main.global_block().ops
    mul = next(op for op in ops if op.type == "mul")
    mul_grad = next(op for op in ops if op.type == "mul_grad")
    assert mul_grad.attr("op_namescope") == "/net/"
    assert mul_grad.attr("op_callstack") == mul.attr("op_callstack")


def test_listing_leaves_out_the_stack_and_backend_switches_at_their_defaults():
    prog, op = _mul_program()
    assert str(op) == "{Out=[out]} = mul(X=[x], Y=[y]) {x_num_col_dims=1, y_num_col_dims=1}"
    detailed = prog.to_string(with_details=True)
    assert "op_namescope='/'" in detailed and "op_callstack" not in detailed
    op._set_attr("use_mkldnn", True)
    assert "use_mkldnn=True" in str(op)


def test_clone_and_serialization_keep_the_stack():
    prog, op = _mul_program()
    for copy in (prog.clone(), fluid.Program.parse_from_string(prog.serialize_to_string())):
        assert copy.global_block().ops[0].attr("op_callstack") == op.attr("op_callstack")
