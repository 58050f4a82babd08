"""Fluid 1.6's small helper modules and names that its own tests and programs import:
``fluid.debugger``, ``fluid.default_scope_funcs``, the reserved variable names of
``framework``, ``backward.calc_gradient``'s single result, the imperative layers at the top
(``fluid.Layer``, ``fluid.FC``, ...) and the imperative-only methods of a static variable."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import parafluid as fluid
import parafluid.core as core
import parafluid.framework as framework
from parafluid import debugger, default_scope_funcs
from parafluid.backward import calc_gradient


def _mul_program():
    prog = fluid.Program()
    b = prog.global_block()
    b.create_var(name="rows", dtype="float32", shape=[5, 10],
                 type=core.VarDesc.VarType.SELECTED_ROWS)
    x = b.create_parameter(dtype="float32", shape=[5, 10], name="mul.x")
    y = b.create_var(dtype="float32", shape=[10, 8], name="mul.y")
    out = b.create_var(dtype="float32", shape=[5, 8], name="mul.out")
    b.append_op(type="mul", inputs={"X": x, "Y": y}, outputs={"Out": out},
                attrs={"x_num_col_dims": 1})
    return prog


def test_the_debugger_prints_a_program_as_code():
    text = debugger.pprint_program_codes(_mul_program())
    assert text.startswith("// block-0  parent--1\n// variables\n")
    assert "var mul.x : LOD_TENSOR [5, 10] float32 persistable" in text
    assert "var rows : SELECTED_ROWS" in text
    assert "mul.out = mul(X=mul.x, Y=mul.y) [{" in text and "x_num_col_dims=1" in text


def test_the_debugger_hides_the_backward_part_unless_asked():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data("x", shape=[3])
        loss = fluid.layers.mean(fluid.layers.fc(x, size=2))
        fluid.backward.append_backward(loss)
    hidden = debugger.pprint_block_codes(main.global_block())
    shown = debugger.pprint_block_codes(main.global_block(), show_backward=True)
    assert "_grad(" not in hidden and "@GRAD" not in hidden
    assert "mean_grad(" in shown and "@GRAD" in shown
    with pytest.raises(TypeError, match="block must be a Block, got Program"):
        debugger.pprint_block_codes(main)


def test_the_debugger_draws_a_block_with_highlights(tmp_path):
    path = str(tmp_path / "block.dot")
    written = debugger.draw_block_graphviz(_mul_program().block(0), highlights=["mul\\.x"],
                                           path=path)
    assert written in (path, str(tmp_path / "block.pdf"))
    dot = open(path).read()
    assert dot.startswith("digraph")
    assert '"v:mul.x" [shape=ellipse, style=bold, color=red' in dot  # persistable, matched
    assert '"v:mul.y" [shape=ellipse, label="mul.y"]' in dot
    with pytest.raises(TypeError, match="highlights must be strings"):
        debugger.draw_block_graphviz(_mul_program().block(0), highlights=[1], path=path)


def test_default_scope_funcs_keep_a_stack_of_scopes_per_thread():
    f = default_scope_funcs
    root = f.get_cur_scope()
    assert f.find_var("dsf_missing") is None
    a = f.var("dsf_a")
    assert root.find_var("dsf_a") is a
    f.enter_local_scope()
    assert f.get_cur_scope() is not root and f.find_var("dsf_a") is a  # parent is searched
    f.var("dsf_local").set_int(3)
    f.leave_local_scope()
    assert f.get_cur_scope() is root and f.find_var("dsf_local") is None
    with pytest.raises(RuntimeError, match="no local scope was entered"):
        f.leave_local_scope()

    seen = []

    def step():
        i = f.var("dsf_i")
        assert not i.is_int()
        i.set_int(10)
        seen.append((i.is_int(), i.get_int()))
        with pytest.raises(TypeError, match="holds int, not float"):
            i.get_float()

    for _ in range(3):
        f.scoped_function(step)
    assert seen == [(True, 10)] * 3 and f.find_var("dsf_i") is None

    other = []
    t = threading.Thread(target=lambda: other.append(f.get_cur_scope()))
    t.start()
    t.join()
    assert other[0] is not root  # each thread has its own stack


def test_framework_reserved_names_match_core():
    assert framework.GRAD_VAR_SUFFIX == core.kGradVarSuffix() == core.grad_var_suffix() == "@GRAD"
    assert framework.TEMP_VAR_NAME == core.kTempVarName() == "@TEMP@"
    assert framework.ZERO_VAR_SUFFIX == core.kZeroVarSuffix() == "@ZERO"
    assert framework.EMPTY_VAR_NAME == core.kEmptyVarName() == "@EMPTY@"


def test_calc_gradient_returns_one_gradient_as_itself():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.create_parameter(dtype="float32", shape=[5, 10])
        y = fluid.layers.create_parameter(dtype="float32", shape=[10, 8])
        mul_out = fluid.layers.mul(x=x, y=y)
        mean_out = fluid.layers.mean(mul_out)
        a = calc_gradient(mean_out, mul_out)
        b = calc_gradient(mean_out, [x, y])
    assert isinstance(a, fluid.Variable) and isinstance(b, list) and len(b) == 2
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.Scope()
    exe.run(startup, scope=scope)
    ga, = exe.run(main, fetch_list=[a], scope=scope)
    np.testing.assert_allclose(ga, np.full([5, 8], 1 / 40, "float32"))


def test_the_imperative_layers_are_at_the_top_as_in_fluid():
    assert fluid.Layer is fluid.dygraph.Layer
    for name in ("FC", "Conv2D", "Pool2D", "BatchNorm", "Embedding", "LayerNorm", "GRUUnit",
                 "NCE", "PRelu", "BilinearTensorProduct", "Conv2DTranspose", "Conv3D",
                 "Conv3DTranspose", "GroupNorm", "SpectralNorm", "TreeConv"):
        assert getattr(fluid, name) is getattr(fluid.dygraph, name)
    assert callable(fluid.embedding)  # the static layer keeps its lower-case name


@pytest.mark.parametrize("method", ["detach", "numpy", "backward", "gradient",
                                    "clear_gradient"])
def test_imperative_only_methods_of_a_static_variable_fail_as_fluids(method):
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        y = fluid.layers.data("y", shape=[3])
    with pytest.raises(AssertionError, match=f"^We Only support {method} in Dygraph mode, "
                                             "please use fluid.dygraph.guard"):
        getattr(y, method)()


def test_backward_of_a_many_element_variable_starts_from_ones():
    x0 = np.arange(6, dtype="float32").reshape(2, 3)
    with fluid.dygraph.guard():
        x = fluid.dygraph.to_variable(x0)
        x.stop_gradient = False
        y = x * x
        y.backward()
        np.testing.assert_allclose(x.gradient(), 2 * x0)
        # detach: the second branch gives x no gradient
        x.clear_gradient()
        z = x * 3.0 + x.detach() * 5.0
        fluid.layers.reduce_sum(z).backward()
        np.testing.assert_allclose(x.gradient(), np.full_like(x0, 3.0))


def test_places_tell_their_kind_as_fluids_variant():
    assert fluid.CPUPlace()._type() == 1 and fluid.CUDAPlace(0)._type() == 0
    assert fluid.CUDAPinnedPlace()._type() == 2
    assert fluid.CPUPlace()._equals(fluid.CPUPlace())
    assert not fluid.CPUPlace()._equals(fluid.CUDAPinnedPlace())
    assert fluid.CPUPlace().is_cpu_place() and fluid.CUDAPlace(1).gpu_device_id() == 1


def test_feed_and_fetch_holders_through_core():
    scope = core.Scope()
    t = core.LoDTensor([[2, 2]])
    a = np.ones((4, 3), "float32")
    a[3, 2] = 10
    t.set(a, core.CPUPlace())
    core.set_feed_variable(scope, t, "feed", 1)
    a[3, 2] = 0  # the holder keeps its own copy
    out = core.get_fetch_variable(scope, "feed", 1)
    assert out.recursive_sequence_lengths() == [[2, 2]]
    assert np.array(out)[3, 2] == 10
    with pytest.raises(ValueError, match="holder 'feed' has no item 0"):
        core.get_fetch_variable(scope, "feed", 0)
    with pytest.raises(ValueError, match="no fetch holder 'fetch'"):
        core.get_fetch_variable(scope, "fetch", 0)
    with pytest.raises(TypeError, match="recursive sequence lengths"):
        core.LoDTensor([2, 2])


def test_fetch_var_reads_a_persistable_variable_after_a_run():
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        x = fluid.layers.create_tensor(dtype="int32", persistable=True, name="fv_x")
        fluid.layers.assign(input=np.array([1, 3, 5], "int32"), output=x)
        # written again with another shape: the variable takes it, as in Fluid
        fluid.layers.assign(input=np.array([], "int32"), output=x)
    assert tuple(x.shape) == (0,)
    scope = fluid.Scope()
    fluid.Executor(fluid.CPUPlace()).run(main, scope=scope)
    got = fluid.executor._fetch_var("fv_x", scope=scope)
    assert got.dtype == np.int32 and got.shape == (0,)
    assert isinstance(fluid.executor._fetch_var("fv_x", scope, return_numpy=False),
                      fluid.LoDTensor)
    with pytest.raises(ValueError, match="Cannot find fv_y in scope"):
        fluid.executor._fetch_var("fv_y", scope=scope)


def test_imperative_layers_answer_to_fluids_private_parameter_names():
    with fluid.dygraph.guard():
        x = fluid.dygraph.to_variable(np.ones((2, 4), "float32"))
        fc = fluid.FC("fc", 3)
        fc(x)
        assert fc._w is fc.weight and fc._b is fc.bias
        conv = fluid.Conv2D("conv", 2, 3)
        conv(fluid.dygraph.to_variable(np.ones((1, 1, 5, 5), "float32")))
        assert conv._filter_param is conv.weight and conv._bias_param is conv.bias
        bn = fluid.BatchNorm("bn", 2)
        bn(fluid.dygraph.to_variable(np.ones((2, 2, 3, 3), "float32")))
        assert bn._scale is bn.weight and bn._bias is bn.bias
        emb = fluid.Embedding("emb", size=[10, 4])
        emb(fluid.dygraph.to_variable(np.zeros((2, 1), "int64")))
        assert emb._w is emb.weight and list(emb._w.shape) == [10, 4]
        with pytest.raises(AttributeError, match="'FC' object has no attribute '_nope'"):
            fc._nope  # noqa: B018


def test_dygraph_only_and_not_support_decorators_fail_as_fluids():
    @framework.dygraph_not_support
    def static_only():
        return True

    @framework.dygraph_only
    def eager_only():
        return True

    assert static_only() is True
    with pytest.raises(AssertionError, match="^We Only support eager_only in Dygraph mode"):
        eager_only()
    with fluid.dygraph.guard():
        assert eager_only() is True
        with pytest.raises(AssertionError, match="^We don't support static_only in Dygraph"):
            static_only()
        a = fluid.dygraph.to_variable(np.ones(2, "float32"))
        assert fluid.dygraph.jit.extract_vars([a, (a, 3)]) == [a, a]


def test_block_create_parameter_runs_its_initializer_once_as_fluids():
    prog = fluid.Program()
    block = prog.global_block()
    for _ in range(2):
        block.create_parameter(dtype="float32", shape=[5, 10], name="cp",
                               initializer=fluid.initializer.Constant(2.5))
    assert [op.type for op in block.ops] == ["fill_constant"]  # the second call finds it
    scope = fluid.Scope()
    fluid.Executor(fluid.CPUPlace()).run(prog, scope=scope)
    np.testing.assert_array_equal(np.array(scope.find_var("cp").get_tensor()),
                                  np.full([5, 10], 2.5, "float32"))


@pytest.mark.parametrize("init", [fluid.initializer.Constant(0.5),
                                  fluid.initializer.Uniform(seed=3),
                                  fluid.initializer.Normal(seed=3),
                                  fluid.initializer.NumpyArrayInitializer(
                                      np.arange(6, dtype="float32").reshape(2, 3))],
                         ids=["constant", "uniform", "normal", "numpy"])
def test_a_float16_parameter_is_filled_in_float32_then_cast(init):
    prog = fluid.Program()
    block = prog.global_block()
    block.create_parameter(dtype="float16", shape=[2, 3], name="h", initializer=init)
    assert len(block.ops) == 2 and block.ops[1].type == "cast"
    assert block.ops[1].attr("in_dtype") == core.VarDesc.VarType.FP32
    assert block.ops[1].attr("out_dtype") == core.VarDesc.VarType.FP16
    tmp = block.ops[0].output_arg_names[0]
    assert block.var(tmp).dtype == "float32"
    scope = fluid.Scope()
    t, = fluid.Executor(fluid.CPUPlace()).run(prog, scope=scope, fetch_list=[tmp])
    h = np.array(scope.find_var("h").get_tensor())
    assert h.dtype == np.float16 and h.shape == (2, 3)
    np.testing.assert_array_equal(h, t.astype(np.float16))


def test_apply_gradients_returns_every_op_of_the_update_pass_as_fluids():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data("x", shape=[4])
        y = fluid.layers.fc(x, size=2, param_attr=fluid.ParamAttr(learning_rate=1.1),
                            bias_attr=False)
        loss = fluid.layers.mean(y)
        adam = fluid.optimizer.Adam(learning_rate=0.01)
        ops, _ = adam.minimize(loss)
    # the parameter's own learning rate (a scale), the update, then the bias corrections
    assert [op.type for op in ops] == ["scale", "adam", "scale", "scale"]
    assert ops == main.global_block().ops[-4:]
    assert (adam._moment1_acc_str, adam._beta1_pow_acc_str) == ("moment1", "beta1_pow_acc")
    assert fluid.optimizer.Momentum(0.1, 0.9)._velocity_acc_str == "velocity"


def test_an_imperative_variable_has_fluids_core_variable_view():
    with fluid.dygraph.guard():
        fc = fluid.FC("fc", 2)
        used = fluid.FC("fc_unused", 2)
        x = fluid.dygraph.to_variable(np.ones((3, 4), "float32"))
        loss = fluid.layers.reduce_sum(fc(x))
        used(x)  # its parameters get no gradient from this loss
        loss.backward()
        assert fc._w._ivar._grad_ivar() is not None and used._w._ivar._grad_ivar() is None
        grad = np.array(fc._w._ivar._grad_ivar().value().get_tensor())
        np.testing.assert_array_equal(grad, fc._w.gradient())
        tensor = fc._w.value().get_tensor()
        np.testing.assert_array_equal(np.array(tensor), fc._w.numpy())
        tensor.set(np.zeros((4, 2), "float32"), fluid.CPUPlace())  # writes the parameter
        np.testing.assert_array_equal(fc._w.numpy(), np.zeros((4, 2), "float32"))


def test_a_data_parallel_run_checks_a_fluid_data_feed_whole_before_splitting_it():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.data("x", shape=[4, 3], dtype="float32")  # the whole batch's dim 0
        loss = fluid.layers.mean(fluid.layers.fc(x, size=2))
        fluid.optimizer.SGD(0.1).minimize(loss)
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.Scope()
    exe.run(startup, scope=scope)
    compiled = fluid.CompiledProgram(main).with_data_parallel(
        loss_name=loss.name, places=fluid.cpu_places(2))
    got, = exe.run(compiled, feed={"x": np.ones((4, 3), "float32")}, fetch_list=[loss],
                   scope=scope)  # 2 rows a device, the program says 4: as Fluid, fine
    assert np.isfinite(got).all()
    with pytest.raises(ValueError, match=r"^The feeded Variable 'x' should have dimensions = "
                                         r"2, shape = \(4, 3\), but received feeded shape "
                                         r"\[6, 3\]$"):
        exe.run(compiled, feed={"x": np.ones((6, 3), "float32")}, fetch_list=[loss],
                scope=scope)


def test_name_scopes_form_one_tree_and_a_prefix_entered_again_gets_a_suffix():
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        with fluid.name_scope("ns1"):
            a = fluid.layers.data(name="a", shape=[1], dtype="float32")
            b = a + 1
            with fluid.name_scope("ns2"):
                c = b * 2
        with fluid.name_scope("ns1"):
            d = fluid.layers.pow(c, 2.0)
        d - 1  # noqa: B018  (outside any scope)
    got = [(op.type, op.attr("op_namescope") if "op_namescope" in op.attr_names else None)
           for op in main.global_block().ops]
    assert got == [("scale", "/ns1/"), ("scale", "/ns1/ns2/"), ("pow", "/ns1_1/"),
                   ("scale", "/")]


def test_a_persistable_feed_the_devices_cannot_share_is_enforce_not_met():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data("x", shape=[3])
        lr = fluid.layers.create_global_var(name="fp_lr", shape=[1], value=1.0,
                                            dtype="float32", persistable=True)
        loss = fluid.layers.mean(fluid.layers.fc(x, size=2))
        fluid.optimizer.SGD(learning_rate=lr).minimize(loss)
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.Scope()
    exe.run(startup, scope=scope)
    compiled = fluid.CompiledProgram(main).with_data_parallel(
        loss_name=loss.name, places=fluid.cpu_places(4))
    feed = {"x": np.ones((4, 3), "float32"), "fp_lr": np.array([0.5], "float32")}
    exe.run(compiled, feed=feed, scope=scope)  # one row: every device gets it
    feed["fp_lr"] = np.array([0.5, 0.5], "float32")
    with pytest.raises(core.EnforceNotMet, match="fed with 2 rows on 4 devices"):
        exe.run(compiled, feed=feed, scope=scope)


def test_a_scope_variable_gives_the_rank_table_lod_rank_table_wrote():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data(name="x", shape=[3], dtype="float32", lod_level=2)
        table = fluid.layers.control_flow.lod_rank_table(x, level=1)
        table.persistable = True
    tensor = core.LoDTensor()
    tensor.set(np.zeros([9, 3], "float32"), core.CPUPlace())
    tensor.set_recursive_sequence_lengths([[1, 2], [2, 4, 3], [1] * 9])
    scope = core.Scope()
    fluid.Executor(core.CPUPlace()).run(main, feed={"x": tensor}, scope=scope)
    ranked = scope.find_var(table.name).get_lod_rank_table()
    assert isinstance(ranked, core.LodRankTable)
    assert ranked.items() == [(1, 4), (2, 3), (0, 2)]
    assert scope.var("empty").get_lod_rank_table().items() == []
    scope.var("t").get_tensor().set(np.zeros([2, 3], "float32"), core.CPUPlace())
    with pytest.raises(TypeError, match="'t' holds Tensor, not a lod_rank_table"):
        scope.find_var("t").get_lod_rank_table()


def _fc_loss_program():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data(name="x", shape=[2], dtype="float32")
        label = fluid.layers.data(name="label", shape=[1], dtype="int64")
        y = fluid.layers.fc(input=[x], size=2, act="softmax")
        loss = fluid.layers.mean(fluid.layers.cross_entropy(input=y, label=label))
        drop = fluid.layers.dropout(y, dropout_prob=0.5)
    return main, y, label, loss, drop


def test_program_prune_keeps_what_the_targets_need_as_fluids_core_prune():
    main, y, label, loss, drop = _fc_loss_program()
    types = ["mul", "elementwise_add", "softmax", "cross_entropy2", "mean"]
    assert [op.type for op in main._prune(targets=[loss]).global_block().ops] == types
    assert [op.type for op in main._prune(loss).global_block().ops] == types
    pruned = main._prune_with_input(feeded_var_names=[y.name, label.name], targets=[loss])
    assert [op.type for op in pruned.global_block().ops] == ["cross_entropy2", "mean"]
    assert "fc_0.w_0" not in pruned.global_block().vars and y.name in pruned.global_block().vars
    # an Operator target is kept whatever reads it; is_test is left as it was
    op = main.global_block().ops[-1]
    kept = main._prune([op]).global_block().ops
    assert [o.type for o in kept] == ["mul", "elementwise_add", "softmax", "dropout"]
    assert kept[-1].attr("is_test") is False
    assert len(main.global_block().ops) == 6  # the caller's program is unchanged
    with pytest.raises(ValueError, match="All targets of prune\\(\\) can only be Variable or "
                                         "Operator."):
        main._prune(targets=None)
    with pytest.raises(ValueError, match="feeded_var_names of prune\\(\\) can only be str"):
        main._prune_with_input([y], [loss])
    with pytest.raises(ValueError, match="associated operator that generates it"):
        main._prune(main.global_block().var("x"))


def test_program_desc_and_inference_optimize_as_fluids():
    main, _, _, loss, _ = _fc_loss_program()
    assert main.desc.num_blocks() == 1 and main.desc.block(0).op_size() == 6
    restored = fluid.Program.parse_from_string(main.desc.serialize_to_string())
    assert [o.type for o in restored.global_block().ops] == \
        [o.type for o in main.global_block().ops]
    infer = main._inference_optimize()
    assert infer.global_block().ops[-1].attr("is_test") is True
    assert main.global_block().ops[-1].attr("is_test") is False
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        reader = fluid.layers.py_reader(capacity=2, shapes=[[-1, 3]], dtypes=["float32"])
        x = fluid.layers.read_file(reader)
        fluid.layers.mean(x)
        prog = fluid.default_main_program()
    assert [o.type for o in prog._inference_optimize().global_block().ops] == ["mean"]
    assert [o.type for o in prog._inference_optimize(prune_read_op=False).global_block().ops
            ] == ["create_double_buffer_reader", "read", "mean"]


def test_get_parameter_value_and_the_parameter_shape_rules():
    main = fluid.Program()
    block = main.global_block()
    param = block.create_parameter(name="fc.w", shape=[3, 2], dtype="float32",
                                   initializer=fluid.initializer.ConstantInitializer(1.5))
    exe = fluid.Executor(fluid.CPUPlace())
    with fluid.scope_guard(fluid.Scope()):
        exe.run(main)
        np.testing.assert_array_equal(fluid.io.get_parameter_value(param, exe),
                                      np.full([3, 2], 1.5, "float32"))
        np.testing.assert_array_equal(
            fluid.io.get_parameter_value_by_name("fc.w", exe, main), np.full([3, 2], 1.5))
    with pytest.raises(TypeError, match="is not a Parameter"):
        fluid.io.get_parameter_value(block.create_var(name="v", shape=[1]), exe)
    for kw, what in ((dict(shape=None, dtype="float32"), "shape .* must not be None"),
                     (dict(shape=[1], dtype=None), "dtype .* must not be None"),
                     (dict(shape=[], dtype="float32"), "at least one dimension"),
                     (dict(shape=[-1], dtype="float32"), "must be known")):
        with pytest.raises(ValueError, match=what):
            block.create_parameter(name="p", **kw)


def test_core_layer_is_a_base_computing_nothing_and_a_layer_must_define_forward():
    assert core.Layer().forward([]) == []
    with fluid.dygraph.guard():
        with pytest.raises(NotImplementedError):
            fluid.Layer("l").forward([])


def test_fluid_optimizer_module_holds_append_regularization_ops_as_fluids():
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        x = fluid.layers.data(name="x", shape=[3], dtype="float32")
        out = fluid.layers.mean(fluid.layers.fc(x, 1, param_attr=fluid.ParamAttr(
            regularizer=fluid.regularizer.L1Decay(0.1)), bias_attr=False))
        params_grads = fluid.backward.append_backward(out)
        count = len(main.global_block().ops)
        assert len(fluid.optimizer.append_regularization_ops(params_grads)) == 1
    assert [op.type for op in main.global_block().ops[count:]] == ["sign", "scale", "sum"]
