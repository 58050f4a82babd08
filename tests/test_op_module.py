"""fluid.op.Operator: one op built from keyword arguments and run on a scope, as Fluid's
single-op programs and tests drive it; SelectedRows through the scope's handles."""

from __future__ import annotations

import numpy as np
import pytest

import parafluid as fluid
from parafluid import core
from parafluid.op import Operator, OperatorFactory

PLACE = core.CPUPlace()


def _scope(**arrays):
    scope = core.Scope()
    for name, arr in arrays.items():
        scope.var(name).get_tensor().set(arr, PLACE)
    return scope


def test_dense_op_reads_the_scope_and_writes_its_output():
    x = np.arange(6, dtype="float32").reshape(2, 3)
    scope = _scope(X=x)
    op = Operator("scale", X="X", Out="Out", scale=2.0, bias=1.0)
    assert op.type() == "scale" and op.input("X") == ["X"] and op.output("Out") == ["Out"]
    assert op.attr("scale") == 2.0
    op.run(scope, PLACE)
    np.testing.assert_array_equal(np.array(scope.find_var("Out").get_tensor()), x * 2 + 1)
    np.testing.assert_array_equal(np.array(scope.find_var("X").get_tensor()), x)


def test_duplicable_inputs_lod_and_numpy_attributes():
    scope = _scope(a=np.ones((2, 2), "float32"), b=np.full((2, 2), 3.0, "float32"))
    Operator("sum", X=["a", "b"], Out="s").run(scope, PLACE)
    np.testing.assert_array_equal(np.array(scope.find_var("s").get_tensor()), 4.0)

    scope = core.Scope()
    t = scope.var("seq").get_tensor()
    t.set(np.arange(5, dtype="float32").reshape(5, 1), PLACE)
    t.set_recursive_sequence_lengths([[2, 3]])
    Operator("sequence_pool", X="seq", Out="pooled", MaxIndex="idx",
             pooltype=np.str_("SUM")).run(scope, PLACE)
    np.testing.assert_array_equal(np.array(scope.find_var("pooled").get_tensor()),
                                  [[1.0], [9.0]])
    Operator("sequence_softmax", X="seq", Out="soft").run(scope, PLACE)
    assert scope.find_var("soft").get_tensor().recursive_sequence_lengths() == [[2, 3]]

    scope = core.Scope()
    Operator("fill_constant", Out="c", shape=np.array([2, 3]), value=np.float32(1.5),
             dtype=int(fluid.core.VarDesc.VarType.FP64)).run(scope, PLACE)
    out = np.array(scope.find_var("c").get_tensor())
    assert out.dtype == np.float64 and out.shape == (2, 3) and (out == 1.5).all()


def _selected_rows(scope, name, height, rows, value):
    sr = scope.var(name).get_selected_rows()
    sr.set_height(height)
    sr.set_rows(rows)
    sr.get_tensor().set(value, PLACE)
    return sr


def test_selected_rows_handle_round_trip():
    scope = core.Scope()
    value = np.arange(6, dtype="float32").reshape(3, 2)
    sr = _selected_rows(scope, "g", 10, [0, 4, 4], value)
    assert sr.height() == 10 and sr.rows() == [0, 4, 4] and sr.numel() == 6
    np.testing.assert_array_equal(np.array(sr.get_tensor()), value)
    # the scope's value is the engine's row-sparse value: densified on fetch
    dense = np.zeros((10, 2), "float32")
    np.add.at(dense, [0, 4, 4], value)
    np.testing.assert_array_equal(fluid.scope.as_numpy(scope.find_var("g").value), dense)
    with pytest.raises(TypeError, match="not SelectedRows"):
        _scope(t=np.ones(2, "float32")).find_var("t").get_selected_rows()


def test_sgd_on_a_row_sparse_parameter_updates_the_rows_holding_the_ids():
    scope = core.Scope()
    _selected_rows(scope, "Grad", 10, [0, 4, 7], np.ones((3, 4), "float32"))
    w = np.arange(32, dtype="float32").reshape(8, 4)
    # the parameter's rows in another order than their ids
    param_ids = [7, 6, 5, 4, 3, 2, 1, 0]
    param = _selected_rows(scope, "Param", 8, param_ids, w)
    scope.var("LR").get_tensor().set(np.array([0.5], "float32"), PLACE)
    Operator("sgd", Param="Param", Grad="Grad", LearningRate="LR", ParamOut="Param").run(
        scope, PLACE)
    expect = w.copy()
    for gid in (0, 4, 7):
        expect[param_ids.index(gid)] -= 0.5
    np.testing.assert_array_equal(np.array(param.get_tensor()), expect)

    _selected_rows(scope, "Grad", 10, [9], np.ones((1, 4), "float32"))
    with pytest.raises(Exception, match=r"holds no row \[9\]"):
        Operator("sgd", Param="Param", Grad="Grad", LearningRate="LR",
                 ParamOut="Param").run(scope, PLACE)
    np.testing.assert_array_equal(np.array(param.get_tensor()), expect)  # nothing applied


def test_bad_operators_are_named():
    with pytest.raises(ValueError, match="no op type 'sclae'.*'scale'"):
        Operator("sclae", X="X")
    with pytest.raises(ValueError, match="'X' expects only one variable"):
        Operator("scale", X=["a", "b"], Out="o")
    with pytest.raises(TypeError, match="variable name"):
        Operator("scale", X=3, Out="o")
    with pytest.raises(ValueError, match="input variable 'missing' is not in the scope"):
        Operator("scale", X="missing", Out="o").run(core.Scope(), PLACE)
    scope = core.Scope()
    scope.var("empty")
    with pytest.raises(ValueError, match="'empty' holds no value"):
        Operator("scale", X="empty", Out="o").run(scope, PLACE)
    assert OperatorFactory()("scale", X="X", Out="o").type() == "scale"
    assert "sgd" in OperatorFactory().types()


def test_assign_checks_its_input_as_fluid():
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        x = fluid.layers.data(name="x", shape=[4], dtype="float16")
        for bad in (fluid.create_lod_tensor(np.array([[-1.0]]), [[1]], PLACE), x,
                    np.ones(2, "float64"), np.ones(2, "int64"), np.ones(2, bool), [1.0, 2.0]):
            with pytest.raises(TypeError, match="assign"):
                fluid.layers.assign(bad)


def test_assign_value_uses_fluids_value_attributes_and_the_arrays_dtype():
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        ints = np.array([[-3, 7], [100, 0]], "int32")
        out = fluid.layers.create_tensor(dtype="float32")
        fluid.layers.assign(ints, output=out)
        floats = fluid.layers.assign(np.array([0.5, -2.0], "float32"))
    ops = [op for op in main.global_block().ops if op.type == "assign_value"]
    assert ops[0].attr("int32_values") == [-3, 7, 100, 0]
    assert ops[1].attr("fp32_values") == [0.5, -2.0]
    got_i, got_f = fluid.Executor(PLACE).run(main, fetch_list=[out, floats])
    assert got_i.dtype == np.int32
    np.testing.assert_array_equal(got_i, ints)
    np.testing.assert_array_equal(got_f, [0.5, -2.0])


def test_lookup_table_reads_a_row_sparse_table_by_its_row_ids():
    scope = core.Scope()
    table = np.arange(12, dtype="float32").reshape(4, 3)
    _selected_rows(scope, "W", 4, [10, 3, 7, 5], table)
    scope.var("Ids").get_tensor().set(np.array([[7], [10], [7]], "int64"), PLACE)
    Operator("lookup_table", W="W", Ids="Ids", Out="Out").run(scope, PLACE)
    np.testing.assert_array_equal(np.array(scope.find_var("Out").get_tensor()),
                                  table[[2, 0, 2]])
    scope.var("Ids").get_tensor().set(np.array([[4]], "int64"), PLACE)
    with pytest.raises(Exception, match=r"holds no row \[4\]"):
        Operator("lookup_table", W="W", Ids="Ids", Out="Out").run(scope, PLACE)


def test_a_scope_tensor_array_is_fluids_lod_tensor_array():
    scope = core.Scope()
    arr = scope.var("arr").get_lod_tensor_array()
    assert len(arr) == 0
    for i, n in enumerate((2, 1, 1)):
        t = fluid.LoDTensor()
        t.set(np.full((n, 3), i, "float32"), PLACE)
        t.set_lod([[0, n]])
        arr.append(t)
    assert len(scope.find_var("arr").get_lod_tensor_array()) == 3
    assert arr[0].lod() == [[0, 2]]
    np.testing.assert_array_equal(np.array(arr[-1]), np.full((1, 3), 2, "float32"))
    Operator("tensor_array_to_tensor", X="arr", Out="out", OutIndex="idx", axis=0,
             use_stack=False).run(scope, PLACE)
    assert np.array(scope.find_var("out").get_tensor()).shape == (4, 3)
    np.testing.assert_array_equal(np.array(scope.find_var("idx").get_tensor()), [2, 1, 1])
    with pytest.raises(TypeError, match="not a tensor array"):
        _scope(t=np.ones(2, "float32")).find_var("t").get_lod_tensor_array()


def test_set_dims_resizes_as_fluids_tensor():
    t = fluid.LoDTensor()
    t.set(np.arange(6, dtype="float32"), PLACE)
    t._set_dims([2, 3])
    assert t._get_dims() == [2, 3]
    np.testing.assert_array_equal(np.array(t), np.arange(6, dtype="float32").reshape(2, 3))
    t._set_dims([4])
    assert np.array(t).shape == (4,)


def test_tensor_array_to_tensor_stacks_and_its_gradient_unstacks():
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        xs = [fluid.data(name=f"x{i}", shape=[2, 3], dtype="float64") for i in range(3)]
        for x in xs:
            x.stop_gradient = False
        arr = fluid.layers.create_array("float64")
        for i, x in enumerate(xs):
            fluid.layers.array_write(x, fluid.layers.fill_constant([1], "int64", i), array=arr)
        out, idx = fluid.layers.tensor_array_to_tensor(arr, axis=1, use_stack=True)
        w = fluid.layers.assign(np.arange(18, dtype="float32").reshape(2, 3, 3))
        loss = fluid.layers.reduce_sum(out * fluid.layers.cast(w, "float64"))
        grads = fluid.backward.gradients([loss], xs)
    feed = {f"x{i}": np.random.RandomState(i).rand(2, 3) for i in range(3)}
    got = fluid.Executor(PLACE).run(main, feed=feed, fetch_list=[out, idx, *grads])
    np.testing.assert_array_equal(got[0], np.stack([feed[f"x{i}"] for i in range(3)], 1))
    np.testing.assert_array_equal(got[1], [1, 1, 1])
    wv = np.arange(18, dtype="float64").reshape(2, 3, 3)
    for i in range(3):
        np.testing.assert_array_equal(got[2 + i], wv[:, i])


def test_sum_of_row_sparse_values_merges_their_rows_as_fluid():
    scope = core.Scope()
    base = np.arange(6, dtype="float32").reshape(3, 2)
    _selected_rows(scope, "a", 8, [5, 1, 5], base)
    _selected_rows(scope, "b", 8, [1], np.ones((1, 2), "float32"))
    _selected_rows(scope, "c", 8, [], base)  # lists no rows: adds nothing
    out = scope.var("out").get_selected_rows()
    Operator("sum", X=["a", "b", "c"], Out="out").run(scope, PLACE)
    assert out.rows() == [1, 5] and out.height() == 8
    np.testing.assert_array_equal(np.array(out.get_tensor()),
                                  [base[1] + 1, base[0] + base[2]])


def test_split_ids_and_split_selected_rows_over_row_sparse_values():
    scope = core.Scope()
    value = np.arange(10, dtype="float32").reshape(5, 2)
    _selected_rows(scope, "x", 20, [0, 5, 7, 4, 9], value)
    outs = [scope.var(f"o{i}").get_selected_rows() for i in range(3)]
    Operator("split_ids", Ids="x", Out=["o0", "o1", "o2"]).run(scope, PLACE)
    assert [o.rows() for o in outs] == [[0, 9], [7, 4], [5]]
    np.testing.assert_array_equal(np.array(outs[1].get_tensor()), value[[2, 3]])
    # sections need not add up to the height (Fluid's rule), but cover every row
    parts = [scope.var(f"p{i}").get_selected_rows() for i in range(2)]
    Operator("split_selected_rows", X="x", Out=["p0", "p1"],
             height_sections=[6, 6]).run(scope, PLACE)
    assert [p.rows() for p in parts] == [[0, 5, 4], [1, 3]]
    with pytest.raises(Exception, match="row 9 of X lies past the height_sections"):
        Operator("split_selected_rows", X="x", Out=["p0", "p1"],
                 height_sections=[4, 4]).run(scope, PLACE)


def test_fluid_op_is_a_module_of_the_package_and_run_errors_are_enforce_not_met():
    assert fluid.op.Operator is Operator
    scope = _scope(X=np.ones((2, 2), "int32"))
    with pytest.raises(core.EnforceNotMet, match="fill_any_like"):
        Operator("fill_any_like", X="X", Out="Out", value=1e100).run(scope, PLACE)


def test_pow_rounds_once_as_cs_powf():
    x = np.random.RandomState(0).uniform(1, 2, (11, 17)).astype("float32")
    scope = _scope(X=x, F=np.array([3.0], "float32"))
    Operator("pow", X="X", FactorTensor="F", Out="Out").run(scope, PLACE)
    np.testing.assert_array_equal(np.array(scope.find_var("Out").get_tensor()),
                                  np.power(x, 3))


def test_framework_load_op_library_imports_and_says_what_to_do():
    from parafluid.compat import NotProvidedError
    from parafluid.framework import load_op_library

    with pytest.raises(NotProvidedError, match="custom C..? operators"):
        load_op_library("ops.so")
    with pytest.raises(AttributeError, match="framework.no_such_name"):
        fluid.framework.no_such_name  # noqa: B018


def test_contrib_names_fluid_16_puts_there():
    for name in ("match_matrix_tensor", "var_conv_2d", "tree_conv"):
        assert getattr(fluid.contrib, name) is getattr(fluid.layers, name)
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        ids = fluid.layers.data(name="ids", shape=[1], dtype="int64", lod_level=1)
        pooled = fluid.contrib.fused_embedding_seq_pool(ids, size=[6, 2], param_attr="tab")
        boxes = fluid.data(name="b", shape=[1, 3, 4], dtype="float32")
        scores = fluid.data(name="s", shape=[1, 2, 3], dtype="float32")
        out, index = fluid.contrib.multiclass_nms2(boxes, scores, 0.1, 10, 10,
                                                   return_index=True)
    assert main.global_block().var("tab").shape == (6, 2)
    scope = fluid.Scope()
    ids_t = fluid.create_lod_tensor(np.array([[1], [2], [5]], "int64"), [[2, 1]], PLACE)
    b = np.array([[[0, 0, 1, 1], [0, 0, 1, 1.05], [2, 2, 3, 3]]], "float32")
    s = np.array([[[0.1, 0.2, 0.3], [0.9, 0.8, 0.7]]], "float32")
    with fluid.scope_guard(scope):
        scope.var("tab").get_tensor().set(np.arange(12, dtype="float32").reshape(6, 2), PLACE)
        got_pool, got_out, got_index = fluid.Executor(PLACE).run(
            main, feed={"ids": ids_t, "b": b, "s": s}, fetch_list=[pooled, out, index],
            return_numpy=False)
    np.testing.assert_array_equal(np.array(got_pool), [[6.0, 8.0], [10.0, 11.0]])
    assert np.array(got_out).shape[1] == 6 and np.array(got_index).shape[1] == 1
