"""memory_optimize chooses the reuses Fluid's transpiler pass chose: its own unit tests
(test_memory_optimization_transpiler.py) as Fluid wrote them, its pool order (the smallest
fitting dead buffer at level 1), its level-1 shape rule and its ``skip_grads``."""

from __future__ import annotations

import numpy as np
import pytest

import parafluid as fluid
from parafluid import layers, optimizer
from parafluid.framework import Program, program_guard
from parafluid.transpiler import memory_optimize

pytestmark = pytest.mark.timeout(120)


def _get_vars(prog):
    all_vars = set()
    for op in prog.global_block().ops:
        all_vars.update(op.input_arg_names)
        all_vars.update(op.output_arg_names)
    return all_vars


def _fc_regression():
    program = Program()
    with program_guard(program, startup_program=Program()):
        x = layers.data(name="x", shape=[13], dtype="float32")
        y_predict = layers.fc(input=x, size=1, act=None)
        y = layers.data(name="y", shape=[1], dtype="float32")
        cost = layers.square_error_cost(input=y_predict, label=y)
        avg_cost = layers.mean(cost)
        optimizer.SGD(learning_rate=0.001).minimize(avg_cost)
    return program


def _reshapes():
    program = Program()
    with program_guard(program, startup_program=Program()):
        x = layers.data(name="x", shape=[13], dtype="float32")
        fc = layers.fc(input=x, size=10, act=None)
        reshape = layers.reshape(x=fc, shape=[-1, 2, 5])
        fc = layers.reshape(x=reshape, shape=[-1, 5, 2])
        y_predict = layers.fc(input=fc, size=1, act=None)
        y = layers.data(name="y", shape=[1], dtype="float32")
        cost = layers.square_error_cost(input=y_predict, label=y)
        avg_cost = layers.mean(cost)
        optimizer.SGD(learning_rate=0.001).minimize(avg_cost)
    return program, {cost.name, fc.name}


def test_control_flow_graph():
    program = _fc_regression()
    result_program = program.clone()
    memory_optimize(program)
    assert _get_vars(program) != _get_vars(result_program)
    # the square's gradient takes the dead square output's buffer, and so on down the chain
    assert program.meta.memory_reuse == {
        "square_error_cost_0.tmp_1": [("square_error_cost_0.tmp_0@GRAD", 7)],
        "square_error_cost_0.tmp_0": [("fc_0.tmp_1@GRAD", 8)],
        "square_error_cost_0.tmp_1@GRAD": [("fc_0.tmp_0@GRAD", 9)]}


def test_inplace_ops_and_skip_opt():
    program, skip = _reshapes()
    result_program = program.clone()
    memory_optimize(program)
    assert _get_vars(program) != _get_vars(result_program)
    program, skip = _reshapes()
    result_program = program.clone()
    memory_optimize(program, skip_opt_set=skip)
    assert _get_vars(program) != _get_vars(result_program)
    used = _get_vars(program)
    assert skip <= used and not skip & set(program.meta.memory_reuse)


def test_skip_opt_set_takes_variables_as_fluid_does():
    program, skip = _reshapes()
    block = program.global_block()
    memory_optimize(program, skip_opt_set=[block.var(n) for n in skip])
    assert skip <= _get_vars(program) and not skip & set(program.meta.memory_reuse)


def test_cascade_reuse():
    program = Program()
    with program_guard(program, startup_program=Program()):
        word = fluid.layers.data(name="word", shape=[1], dtype="int64")
        emb = [fluid.layers.embedding(word, size=[65536, 256], param_attr="emb")
               for _ in range(6)]
        left = emb.pop(0)
        while len(emb) != 0:
            right = emb.pop(0)
            left = fluid.layers.concat([left, right])
        emb = fluid.layers.mean(left)
        fluid.backward.append_backward(emb)
    block = program.block(0)
    assert "concat_4.tmp_0@GRAD" in block.vars
    memory_optimize(program)
    # the cascade of concat gradients reuses dead buffers (Fluid's disabled assertions)
    assert "concat_4.tmp_0@GRAD" in block.vars
    for i in range(4):
        assert f"concat_{i}.tmp_0@GRAD" not in block.vars


def _level1_program():
    """big [-1, 16] dies first, then mid [-1, 8]; then small [-1, 4] is born."""
    prog = fluid.Program()
    block = prog.global_block()
    for name, shape in (("x", [-1, 16]), ("big", [-1, 16]), ("h", [-1, 8]), ("mid", [-1, 8]),
                        ("g", [-1, 8]), ("small", [-1, 4]), ("rest", [-1, 4]),
                        ("out", [-1, 4])):
        block.create_var(name=name, shape=shape, dtype="float32", is_data=name == "x")
    block.append_op("scale", inputs={"X": ["x"]}, outputs={"Out": ["big"]})
    block.append_op("split", inputs={"X": ["big"]}, outputs={"Out": ["h", "mid"]},
                    attrs={"axis": 1, "num": 2})
    block.append_op("elementwise_add", inputs={"X": ["h"], "Y": ["mid"]},
                    outputs={"Out": ["g"]})
    block.append_op("split", inputs={"X": ["g"]}, outputs={"Out": ["small", "rest"]},
                    attrs={"axis": 1, "num": 2})
    block.append_op("elementwise_mul", inputs={"X": ["small"], "Y": ["rest"]},
                    outputs={"Out": ["out"]})
    return prog


def _run(prog, x):
    exe = fluid.Executor(fluid.CPUPlace())
    return exe.run(prog, feed={"x": x}, fetch_list=["out"], scope=fluid.Scope())[0]


def test_level_1_takes_the_smallest_dead_buffer_that_fits():
    x = np.arange(32, dtype="float32").reshape(2, 16)
    want = _run(_level1_program(), x)
    prog = _level1_program()
    memory_optimize(prog, level=1, skip_opt_set={"g"})
    # big died before h and mid, but Fluid's pool is ordered by size: [-1, 8] is the
    # smallest that holds [-1, 4] (h before mid: the same size, names in order)
    assert prog.meta.memory_reuse == {"h": [("small", 3)], "mid": [("rest", 3)]}
    np.testing.assert_array_equal(_run(prog, x), want)


def test_level_1_compares_the_batch_dim_and_the_element_count_as_fluid():
    from parafluid.passes.memory_optimize import _shape_fits

    assert _shape_fits([-1, 2, 5], [-1, 10], 1)  # other rank, as many elements
    assert not _shape_fits([-1, 11], [-1, 10], 1)
    assert not _shape_fits([4, 2], [-1, 8], 1)  # batch-sized vs not
    assert not _shape_fits([-1, 2, 5], [-1, 10], 0)


def test_skip_grads_keeps_the_parameter_gradients_only():
    program = _fc_regression()
    memory_optimize(program, skip_grads=True)
    touched = set(program.meta.memory_reuse) | {
        x for pairs in program.meta.memory_reuse.values() for x, _ in pairs}
    params = {p.name + "@GRAD" for p in program.all_parameters()}
    assert not touched & params
    assert any(n.endswith("@GRAD") for n in touched)  # other gradients still reuse
    assert program._is_mem_optimized and not _fc_regression()._is_mem_optimized
