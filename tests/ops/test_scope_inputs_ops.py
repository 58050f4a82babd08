"""Inputs an op looks up in the scope at run time (a registration's ``scope_inputs``): as
Fluid's ``OperatorBase`` ops, ``rnn_memory_helper_grad`` finds no ``Out@GRAD`` variable when
its block does not declare one, and its ``X@GRAD`` is then zeros of ``X``'s shape."""

from __future__ import annotations

import numpy as np
import pytest

import parafluid as fluid
from parafluid.testing import OpCase, check_op, rand

SCOPE_INPUT_CASES = [
    # the declared Out@GRAD passes through (the undeclared one: the tests below)
    OpCase("rnn_memory_helper_grad", {"X": rand(2, 3, seed=41), "Out": rand(2, 3, seed=42),
                                      "Out@GRAD": rand(2, 3, seed=43)},
           ref=lambda **kw: {"X@GRAD": kw["Out@GRAD"]}, outputs=("X@GRAD",),
           id="rnn_memory_helper_grad_out_grad_declared"),
]


@pytest.mark.parametrize("case", SCOPE_INPUT_CASES, ids=str)
def test_op(case):
    check_op(case)


def _program(declare_out_grad: bool) -> tuple[fluid.Program, dict]:
    program = fluid.Program()
    block = program.global_block()
    ins = {n: block.create_var(name=n, shape=[2, 3], dtype="float64", is_data=True)
           for n in ("X", "Out")}
    # an Out@GRAD of another program: the block of the op does not declare it
    other = program if declare_out_grad else fluid.Program()
    ins["Out@GRAD"] = other.global_block().create_var(name="Out@GRAD", shape=[2, 3],
                                                      dtype="float64")
    x_grad = block.create_var(name="X@GRAD", shape=[2, 3], dtype="float64")
    block.append_op(type="rnn_memory_helper_grad", inputs=ins, outputs={"X@GRAD": x_grad},
                    attrs={})
    return program, {"X": rand(2, 3, seed=44), "Out": rand(2, 3, seed=45)}


def test_rnn_memory_helper_grad_of_an_undeclared_out_grad_is_zeros():
    program, feed = _program(declare_out_grad=False)
    assert "Out@GRAD" in str(program)  # the op still names it, as Fluid's op desc does
    program.verify()
    got, = fluid.Executor(fluid.CPUPlace()).run(program, feed=feed, fetch_list=["X@GRAD"],
                                                scope=fluid.Scope())
    np.testing.assert_array_equal(got, np.zeros((2, 3)))
    assert got.dtype == np.float64


def test_rnn_memory_helper_grad_of_a_declared_out_grad_passes_it_through():
    program, feed = _program(declare_out_grad=True)
    feed["Out@GRAD"] = rand(2, 3, seed=46)
    got, = fluid.Executor(fluid.CPUPlace()).run(program, feed=feed, fetch_list=["X@GRAD"],
                                                scope=fluid.Scope())
    np.testing.assert_array_equal(got, feed["Out@GRAD"])
