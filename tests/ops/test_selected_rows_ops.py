"""SelectedRows ops (merge_selected_rows, get_tensor_from_selected_rows) on a sparse gradient."""

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
