"""The IR: naming, printing, clone(for_test), serialization round trip, verifier errors."""

import numpy as np
import pytest

import parafluid as fluid
from parafluid.framework import OpRole
from parafluid.verifier import ProgramVerificationError


def build_regression():
    x = fluid.layers.data(name="x", shape=[13], dtype="float32")
    y = fluid.layers.data(name="y", shape=[1], dtype="float32")
    pred = fluid.layers.fc(input=x, size=1)
    diff = fluid.layers.elementwise_sub(pred, y)
    cost = fluid.layers.elementwise_mul(diff, diff)
    avg = fluid.layers.mean(cost)
    return x, y, pred, avg


def test_fluid_names_and_data_shape():
    x, y, pred, avg = build_regression()
    assert x.shape == (-1, 13)
    names = [v.name for v in fluid.default_main_program().list_vars()]
    assert {"fc_0.w_0", "fc_0.b_0", "fc_0.tmp_0", "fc_0.tmp_1"} <= set(names)
    assert fluid.layers.data(name="z", shape=[-1, 3], dtype="int64").shape == (-1, 3)
    assert fluid.layers.data(name="w", shape=[4], append_batch_size=False).shape == (4,)
    params = fluid.default_main_program().all_parameters()
    assert [p.name for p in params] == ["fc_0.w_0", "fc_0.b_0"]
    assert params[0].shape == (13, 1) and params[0].persistable and params[0].trainable


def test_str_is_one_op_per_line_and_stable():
    build_regression()
    text = str(fluid.default_main_program())
    assert "{Out=[fc_0.tmp_0]} = mul(X=[x], Y=[fc_0.w_0]) {x_num_col_dims=1, y_num_col_dims=1}" \
        in text
    assert str(fluid.default_main_program()) == text
    assert "op_role" not in text
    assert "op_role" in fluid.default_main_program().to_string(with_details=True)


def test_op_roles_and_role_vars_after_minimize():
    *_, avg = build_regression()
    fluid.optimizer.SGD(learning_rate=0.1).minimize(avg)
    ops = fluid.default_main_program().global_block().ops
    roles = {op.type: op.attr("op_role") for op in ops}
    assert roles["mul"] == OpRole.Forward
    assert roles["mean"] == OpRole.Forward | OpRole.Loss
    assert roles["fill_constant"] == OpRole.Backward | OpRole.Loss
    assert roles["mul_grad"] == OpRole.Backward
    assert roles["sgd"] == OpRole.Optimize
    mul_grad = next(op for op in ops if op.type == "mul_grad")
    assert mul_grad.attr("op_role_var") == ["fc_0.w_0", "fc_0.w_0@GRAD"]
    sgd_vars = sorted(op.attr("op_role_var")[0] for op in ops if op.type == "sgd")
    assert sgd_vars == ["fc_0.b_0", "fc_0.w_0"]


def test_clone_for_test_drops_backward_and_optimize():
    *_, avg = build_regression()
    test_prog = fluid.default_main_program().clone(for_test=True)
    fluid.optimizer.SGD(learning_rate=0.1).minimize(avg)
    full = fluid.default_main_program()
    test_after = full.clone(for_test=True)
    assert [op.type for op in test_after.global_block().ops] == \
        [op.type for op in test_prog.global_block().ops] == \
        ["mul", "elementwise_add", "elementwise_sub", "elementwise_mul", "mean"]
    assert not any(n.endswith("@GRAD") for n in test_after.global_block().vars)
    # a plain clone is a deep copy: editing it leaves the original alone
    copy = full.clone()
    copy.global_block().ops[0]._set_attr("x_num_col_dims", 1)
    copy.global_block()._remove_op(0)
    assert len(copy.global_block().ops) == len(full.global_block().ops) - 1


def test_clone_for_test_sets_is_test():
    prog = fluid.Program()
    blk = prog.global_block()
    blk.create_var(name="x", shape=[2, 3], dtype="float32", is_data=True)
    op = blk.append_op("fill_constant", outputs={"Out": ["y"]},
                       attrs={"shape": [1], "value": 1.0, "dtype": "float32"})
    op.attrs["is_test"] = False  # any op with an is_test attr gets it set
    assert prog.clone(for_test=True).global_block().ops[0].attr("is_test") is True


def test_serialization_round_trip_is_exact():
    *_, avg = build_regression()
    fluid.optimizer.SGD(learning_rate=0.1).minimize(avg)
    prog = fluid.default_main_program()
    prog.random_seed = 7
    prog.global_block().ops[0]._set_attr("weird_float", 0.1 + 0.2)
    data = prog.serialize_to_string()
    back = fluid.Program.parse_from_string(data)
    assert str(back) == str(prog)
    assert back.to_string(with_details=True) == prog.to_string(with_details=True)
    assert back.serialize_to_string() == data
    assert back.random_seed == 7
    assert back.global_block().ops[0].attr("weird_float") == 0.1 + 0.2
    assert [p.name for p in back.all_parameters()] == ["fc_0.w_0", "fc_0.b_0"]


def test_serialized_program_runs_identically():
    x, y, pred, avg = build_regression()
    fluid.default_startup_program().random_seed = 3
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(fluid.default_startup_program())
    feed = {"x": np.ones((4, 13), "float32"), "y": np.zeros((4, 1), "float32")}
    want = exe.run(feed=feed, fetch_list=[avg])[0]
    back = fluid.Program.parse_from_string(fluid.default_main_program().serialize_to_string())
    np.testing.assert_array_equal(exe.run(back, feed=feed, fetch_list=[avg.name])[0], want)


def test_parse_rejects_garbage_and_unknown_ops():
    with pytest.raises(ValueError, match="header"):
        fluid.Program.parse_from_string(b"\x80\x04pickle")
    good = fluid.Program()
    good.global_block().append_op("fill_constant", outputs={"Out": ["o"]})
    data = good.serialize_to_string()
    with pytest.raises(ValueError, match="corrupt"):
        fluid.Program.parse_from_string(data[:-10])
    with pytest.raises(ValueError, match='Operator "fill_konstant" has not been registered'):
        fluid.Program.parse_from_string(data.replace(b"fill_constant", b"fill_konstant"))


def test_verifier_accepts_built_programs():
    *_, avg = build_regression()
    fluid.optimizer.SGD(learning_rate=0.1).minimize(avg)
    fluid.default_main_program().verify()
    fluid.default_startup_program().verify()


def test_verifier_reports_each_problem():
    prog = fluid.Program()
    blk = prog.global_block()
    blk.create_var(name="a", shape=[2, 3], dtype="float32", is_data=True)
    blk.create_var(name="b", shape=[3, 4], dtype="float32")
    blk.create_var(name="c", shape=[2, 5], dtype="float32")
    blk.create_var(name="d", shape=[2, 3], dtype="float32")
    # bypass append_op's checks to build a broken program on purpose
    from parafluid.framework import Operator
    blk.ops.append(Operator(blk, "mul", {"X": ["a"], "Y": ["b"]}, {"Out": ["c"]},
                            {"x_num_col_dims": 1, "y_num_col_dims": 1}))
    blk.ops.append(Operator(blk, "no_such_op", {}, {}, {}))
    blk.ops.append(Operator(blk, "relu_", {"X": ["a"]}, {"Out": ["d"]}, {}))
    blk.ops.append(Operator(blk, "scale", {"X": ["missing"], "Bad": ["a"]}, {"Out": ["d"]},
                            {"scale": 1.0, "bias": 0.0, "bias_after_scale": True}))
    blk.ops.append(Operator(blk, "relu", {"X": ["a", "d"]}, {"Out": ["d", "c"]}, {}))
    with pytest.raises(ProgramVerificationError) as info:
        prog.verify()
    problems = "\n".join(info.value.problems)
    assert "'b' is used before any op defines it" in problems
    assert "output 'c' is declared [2, 5] but the op infers [2, 4]" in problems
    assert 'Operator "no_such_op" has not been registered.' in problems
    assert "unknown input slot 'Bad'" in problems
    assert "input 'missing' is not a variable" in problems
    assert "op #4 relu: input slot 'X' takes one variable, got 2: ['a', 'd']" in problems
    assert "op #4 relu: output slot 'Out' takes one variable, got 2: ['d', 'c']" in problems


def test_append_op_errors_name_op_slot_and_shapes():
    blk = fluid.default_main_program().global_block()
    blk.create_var(name="a", shape=[2, 3], dtype="float32")
    blk.create_var(name="b", shape=[4, 5], dtype="float32")
    with pytest.raises(ValueError,
                       match='Operator "mull" has not been registered; did you mean mul'):
        blk.append_op("mull", inputs={"X": ["a"]})
    with pytest.raises(ValueError, match="unknown input slot 'Z'"):
        blk.append_op("mul", inputs={"X": ["a"], "Z": ["b"]}, outputs={"Out": ["o"]})
    with pytest.raises(ValueError, match="required input slot 'Y' is missing"):
        blk.append_op("mul", inputs={"X": ["a"]}, outputs={"Out": ["o"]})
    with pytest.raises(ValueError, match="3 columns but Y \\[4, 5\\]"):
        blk.append_op("mul", inputs={"X": ["a"], "Y": ["b"]}, outputs={"Out": ["o"]})


def test_unique_name_guard_restarts_counters():
    from parafluid import unique_name
    with unique_name.guard():
        assert unique_name.generate("fc") == "fc_0"
        assert unique_name.generate("fc") == "fc_1"
    with unique_name.guard():
        assert unique_name.generate("fc") == "fc_0"


def test_program_guard_type_errors():
    with pytest.raises(TypeError, match="main_program must be a Program"):
        with fluid.program_guard("nope"):
            pass


def test_shared_parameter_name_with_another_shape_is_an_error():
    x = fluid.layers.data(name="x", shape=[3], dtype="float32")
    x2 = fluid.layers.data(name="x2", shape=[4], dtype="float32")
    a = fluid.layers.fc(x, size=2, param_attr="w", bias_attr="b")
    b = fluid.layers.fc(x, size=2, param_attr="w", bias_attr="b")  # same sizes: shared
    assert [p.name for p in fluid.default_main_program().all_parameters()] == ["w", "b"]
    assert a.shape == b.shape == (-1, 2)
    with pytest.raises(ValueError, match=r"parameter 'w' was created before with shape \[3, 2\] "
                                         r"float32; now asked for shape \[4, 5\] float32"):
        fluid.layers.fc(x2, size=5, param_attr="w", bias_attr=False)


def test_numpy_attrs_become_plain_data():
    """A numpy array attr is stored as a list, so the program prints and serializes."""
    prog = fluid.Program()
    blk = prog.global_block()
    blk.create_var(name="o")
    op = blk.append_op("fill_constant", outputs={"Out": ["o"]},
                       attrs={"shape": np.array([2, 3]), "value": np.float32(1.5)})
    assert op.attr("shape") == [2, 3] and type(op.attr("shape")[0]) is int
    assert "shape=[2, 3]" in str(prog)
    again = fluid.Program.parse_from_string(prog.serialize_to_string())
    assert str(again) == str(prog)


def test_parse_rejects_well_formed_json_of_the_wrong_structure():
    prog = fluid.Program()
    prog.global_block().append_op("fill_constant", outputs={"Out": ["o"]})
    data = prog.serialize_to_string()
    for bad in (data.replace(b'"inputs":{}', b'"inputs":[]'),
                data.replace(b'"blocks":[', b'"blocks":[[],')):
        with pytest.raises(ValueError, match="corrupt|malformed|out of order"):
            fluid.Program.parse_from_string(bad)


def test_the_program_record_survives_clone_and_serialization_and_copies_are_independent():
    from parafluid.program_meta import ProgramMeta

    build_regression()
    main = fluid.default_main_program()
    assert "meta" not in main.serialize_to_string().decode("utf-8", "replace")  # none set
    record = ProgramMeta(placement_node=("worker", 1), trainer_id=1, num_trainers=2,
                         trainers_endpoints=["127.0.0.1:1", "127.0.0.1:2"],
                         pserver_endpoints=["127.0.0.1:3"], data_parallel_devices=["cpu:0"],
                         memory_reuse={"a": [("b", 2), ("c", 5)]})
    main.meta = record.copy()
    copies = [main.clone(), main.clone(for_test=True),
              fluid.Program.parse_from_string(main.serialize_to_string())]
    for same in copies:
        assert same.meta == record
        assert same.meta.renamed_away("c") == "a" and same.meta.renamed_away("a") is None
    copies[0].meta.trainers_endpoints.append("127.0.0.1:9")
    copies[0].meta.memory_reuse["a"].append(("d", 7))
    assert main.meta == record
    main._trainers_endpoints = ["127.0.0.1:5"]  # Fluid's attribute writes the record
    assert main.meta.trainers_endpoints == ["127.0.0.1:5"]
    with pytest.raises(TypeError, match="_trainers_endpoints must be a list of 'ip:port'"):
        main._trainers_endpoints = "127.0.0.1:5"
