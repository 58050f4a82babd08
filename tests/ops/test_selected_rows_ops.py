"""SelectedRows ops (merge_selected_rows, get_tensor_from_selected_rows, lookup_rows) on a sparse
gradient."""

import numpy as np
import pytest

import parafluid as fluid
from parafluid.testing import OpCase, rand, run_op


def test_selected_rows_layers_on_a_sparse_gradient():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        ids = fluid.layers.data(name="ids", shape=[1], dtype="int64")
        emb = fluid.layers.embedding(ids, size=[6, 2], is_sparse=True,
                                     param_attr=fluid.ParamAttr(name="table"))
        loss = fluid.layers.reduce_sum(emb)
        fluid.backward.append_backward(loss)
        grad = main.global_block().var("table@GRAD")
        merged = fluid.layers.merge_selected_rows(grad)
        rows = fluid.layers.get_tensor_from_selected_rows(merged)
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    got, = exe.run(main, feed={"ids": np.array([[4], [1], [4]], "int64")}, fetch_list=[rows])
    np.testing.assert_allclose(got, [[1.0, 1.0], [2.0, 2.0]])  # rows 1 and 4, 4 seen twice


def test_merge_selected_rows_refuses_a_dense_variable():
    with pytest.raises(TypeError, match="merge_selected_rows: X must be a SelectedRows"):
        run_op(OpCase("merge_selected_rows", {"X": rand(2, 2)}))


def test_lookup_rows_reads_each_touched_row_of_the_table_once():
    """What weight decay of a sparse gradient reads: the rows of the table the gradient
    touches (ids 4, 1, 4 touch rows 1 and 4), as a SelectedRows of the table's height."""
    table = np.arange(12, dtype="float64").reshape(6, 2)
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        ids = fluid.layers.data(name="ids", shape=[1], dtype="int64")
        emb = fluid.layers.embedding(ids, size=[6, 2], is_sparse=True, dtype="float64",
                                     param_attr=fluid.ParamAttr(
                                         name="table",
                                         initializer=fluid.initializer.NumpyArrayInitializer(
                                             table)))
        fluid.backward.append_backward(fluid.layers.reduce_sum(emb))
        block = main.global_block()
        out = block.create_var(name="touched", type="selected_rows", dtype="float64")
        block.append_op("lookup_rows", inputs={"W": ["table"], "X": ["table@GRAD"]},
                        outputs={"Out": [out]})
        rows = fluid.layers.get_tensor_from_selected_rows(out)
    assert out.type == "selected_rows"
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    got, = exe.run(main, feed={"ids": np.array([[4], [1], [4]], "int64")}, fetch_list=[rows],
                   scope=scope)
    np.testing.assert_array_equal(got, table[[1, 4]])


def test_lookup_rows_refuses_a_dense_gradient():
    with pytest.raises(TypeError, match="lookup_rows: X must be a SelectedRows"):
        run_op(OpCase("lookup_rows", {"W": rand(3, 2), "X": rand(3, 2)}))


def test_a_sparse_gradient_times_or_over_one_number_and_its_zero_stay_sparse():
    """What mixed precision does to a sparse gradient: divide it by the loss scaling, and
    zero it (fill_zeros_like) after an overflow."""
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        ids = fluid.layers.data(name="ids", shape=[1], dtype="int64")
        emb = fluid.layers.embedding(ids, size=[6, 2], is_sparse=True,
                                     param_attr=fluid.ParamAttr(name="table"))
        fluid.backward.append_backward(fluid.layers.reduce_sum(emb))
        grad = main.global_block().var("table@GRAD")
        four = fluid.layers.fill_constant([1], "float32", 4.0)
        halved = fluid.layers.elementwise_div(grad, four)
        doubled = fluid.layers.elementwise_mul(grad, fluid.layers.fill_constant(
            [1], "float32", 2.0))
        zero = fluid.layers.zeros_like(grad)
        assert halved.type == doubled.type == "selected_rows"
        outs = [fluid.layers.get_tensor_from_selected_rows(v) for v in (halved, doubled, zero)]
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    got = exe.run(main, feed={"ids": np.array([[4], [1]], "int64")}, fetch_list=outs)
    np.testing.assert_allclose(got[0], np.full((2, 2), 0.25))
    np.testing.assert_allclose(got[1], np.full((2, 2), 2.0))
    np.testing.assert_allclose(got[2], np.zeros((2, 2)))
    with pytest.raises(Exception, match="a SelectedRows X takes a one-element Y"):
        with fluid.program_guard(main, startup):
            bad = fluid.layers.elementwise_div(grad, fluid.layers.fill_constant(
                [2], "float32", 4.0))
        exe.run(main, feed={"ids": np.array([[4], [1]], "int64")}, fetch_list=[bad])
