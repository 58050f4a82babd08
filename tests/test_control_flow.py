"""Control flow layers (While, Switch, IfElse, ConditionalBlock) and tensor arrays, against
numpy; their sub-blocks through the passes (prune, clone, serialization, memory passes) and
the ParallelExecutor."""

import numpy as np
import pytest

import parafluid as fluid

L = fluid.layers


def _run(main, startup, feed, fetch, scope=None):
    exe = fluid.Executor(fluid.CPUPlace())
    scope = scope or fluid.Scope()
    exe.run(startup, scope=scope)
    return exe.run(main, feed=feed, fetch_list=fetch, scope=scope)


def _loop_program(steps=4, read=True):
    """x -> a While that writes tanh(x * w + k) at slot k of an array for k < steps and sums
    the slots' means; then reads slot 2 and the array's length."""
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = L.data(name="x", shape=[3], dtype="float32")
        w = L.create_global_var(shape=[3], value=0.5, dtype="float32", persistable=True,
                                name="w")
        i = L.fill_constant([1], "int64", 0)
        n = L.fill_constant([1], "int64", steps)
        total = L.fill_constant([1], "float32", 0.0)
        arr = L.create_array("float32")
        cond = L.less_than(x=i, y=n)
        loop = L.While(cond=cond)
        with loop.block():
            k = L.cast(i, "float32")
            y = L.tanh(L.elementwise_add(L.elementwise_mul(x, w), k))
            L.array_write(y, i=i, array=arr)
            L.assign(L.elementwise_add(total, L.reduce_mean(y)), output=total)
            L.increment(x=i, value=1, in_place=True)
            L.less_than(x=i, y=n, cond=cond)
        slot2 = L.array_read(arr, L.fill_constant([1], "int64", 2)) if read else None
        length = L.array_length(arr)
    return main, startup, {"x": x, "i": i, "total": total, "arr": arr, "slot2": slot2,
                           "length": length, "cond": cond}


XS = np.linspace(-1, 1, 6, dtype="float32").reshape(2, 3)


def _loop_reference(steps=4):
    ys = [np.tanh(XS * 0.5 + k) for k in range(steps)]
    return ys, sum(float(y.mean()) for y in ys)


# ----------------------------------------------------------------------------- While


def test_while_counts_writes_an_array_and_carries_values():
    main, startup, v = _loop_program()
    i, total, slot2, length, arr = _run(main, startup, {"x": XS},
                                        [v["i"], v["total"], v["slot2"], v["length"], v["arr"]])
    ys, ref_total = _loop_reference()
    assert int(i) == 4 and int(length) == 4
    np.testing.assert_allclose(float(total), ref_total, rtol=1e-5)
    np.testing.assert_allclose(slot2, ys[2], rtol=1e-6)
    # a fetched tensor array is a list of numpy arrays, one per slot
    assert isinstance(arr, list) and len(arr) == 4
    for got, want in zip(arr, ys):
        np.testing.assert_allclose(got, want, rtol=1e-6)


def test_while_op_lists_what_the_body_reads_and_writes():
    main, _, v = _loop_program()
    op = next(op for op in main.global_block().ops if op.type == "while")
    assert op.attr("sub_block").idx == 1
    assert op.input("Condition") == [v["cond"].name]
    assert {"x", "w", v["i"].name, v["total"].name}.issubset(op.input("X"))
    assert set(op.output("Out")) == {v["i"].name, v["total"].name, v["arr"].name,
                                     v["cond"].name}
    main.verify()


def test_while_that_never_runs_hands_on_the_values_before_it():
    main, startup, v = _loop_program(steps=0, read=False)
    i, total, length = _run(main, startup, {"x": XS}, [v["i"], v["total"], v["length"]])
    assert int(i) == 0 and float(total) == 0.0 and int(length) == 0


def test_nested_while_sums_a_triangle():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        i = L.fill_constant([1], "int64", 0)
        n = L.fill_constant([1], "int64", 5)
        acc = L.fill_constant([1], "int64", 0)
        c1 = L.less_than(x=i, y=n)
        outer = L.While(cond=c1)
        with outer.block():
            j = L.fill_constant([1], "int64", 0)
            c2 = L.less_than(x=j, y=i)
            inner = L.While(cond=c2)
            with inner.block():
                L.assign(L.elementwise_add(acc, j), output=acc)
                L.increment(x=j, value=1, in_place=True)
                L.less_than(x=j, y=i, cond=c2)
            L.increment(x=i, value=1, in_place=True)
            L.less_than(x=i, y=n, cond=c1)
    acc_v, = _run(main, startup, {}, [acc])
    assert int(acc_v) == sum(j for i in range(5) for j in range(i))


def test_while_whose_body_never_writes_its_condition_is_refused():
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        i = L.fill_constant([1], "int64", 0)
        cond = L.less_than(x=i, y=L.fill_constant([1], "int64", 3))
        loop = L.While(cond=cond)
        with pytest.raises(ValueError, match="never writes its condition"):
            with loop.block():
                L.increment(x=i, value=1, in_place=True)
    assert main.current_block_idx == 0


def test_while_wants_a_bool_condition():
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        with pytest.raises(TypeError, match="While: cond must be a bool variable, got int64"):
            L.While(cond=L.fill_constant([1], "int64", 1))


def test_array_read_of_a_slot_never_written_names_the_index():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = L.fill_constant([2], "float32", 1.0)
        arr = L.array_write(x, i=L.fill_constant([1], "int64", 0))
        out = L.array_read(arr, L.fill_constant([1], "int64", 3))
    with pytest.raises(fluid.OpRunError, match="read_from_array: index 3 was never written"):
        _run(main, startup, {}, [out])


def test_array_write_grows_the_array_and_leaves_earlier_values_alone():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        a = L.fill_constant([2], "float32", 1.0)
        b = L.fill_constant([2], "float32", 2.0)
        arr = L.array_write(a, i=L.fill_constant([1], "int64", 0))
        first_len = L.array_length(arr)
        L.array_write(b, i=L.fill_constant([1], "int64", 2), array=arr)
        n = L.array_length(arr)
        back = L.array_read(arr, L.fill_constant([1], "int64", 2))
    first, n_v, back_v, arr_v = _run(main, startup, {}, [first_len, n, back, arr])
    assert int(first) == 1 and int(n_v) == 3
    np.testing.assert_array_equal(back_v, [2.0, 2.0])
    assert arr_v[1] is None and arr_v[0].tolist() == [1.0, 1.0]


# ----------------------------------------------------------------------------- Switch


def _piecewise_program(boundaries=(3.0, 5.0), values=(1.0, 0.5, 0.1)):
    """Fluid's piecewise_decay written by hand with Switch over a persistable step counter."""
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        step = L.create_global_var(shape=[1], value=0.0, dtype="float32", persistable=True,
                                   name="step")
        L.increment(step, 1.0)
        lr = L.create_global_var(shape=[1], value=0.0, dtype="float32", persistable=True,
                                 name="lr")
        with L.Switch() as switch:
            for b, val in zip(boundaries, values):
                with switch.case(L.less_than(step, L.fill_constant([1], "float32", b))):
                    L.assign(L.fill_constant([1], "float32", val), output=lr)
            with switch.default():
                L.assign(L.fill_constant([1], "float32", values[-1]), output=lr)
    return main, startup, step, lr


def test_switch_takes_the_first_true_case_else_the_default():
    main, startup, step, lr = _piecewise_program()
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    got = [float(exe.run(main, fetch_list=[lr], scope=scope)[0]) for _ in range(7)]
    want = [1.0 if s < 3 else 0.5 if s < 5 else 0.1 for s in range(1, 8)]
    assert got == pytest.approx(want)
    assert sum(op.type == "conditional_block" for op in main.global_block().ops) == 3


def test_switch_case_outside_the_with_is_refused():
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        switch = L.Switch()
        with pytest.raises(ValueError, match="inside 'with Switch"):
            switch.case(L.fill_constant([1], "bool", 1))
        with switch, pytest.raises(ValueError, match="at least one case"):
            switch.default()


def test_conditional_block_that_does_not_run_keeps_the_old_value():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        flag = L.data(name="flag", shape=[1], dtype="bool", append_batch_size=False)
        out = L.fill_constant([2], "float32", 7.0)
        cb = L.ConditionalBlock([flag], is_scalar_condition=True)
        with cb.block():
            L.assign(L.fill_constant([2], "float32", -1.0), output=out)
        res = L.scale(out, scale=2.0)
    for flag, want in ((True, -2.0), (False, 14.0)):
        r, = _run(main, startup, {"flag": np.array([flag])}, [res])
        assert r.tolist() == [want, want]


# ----------------------------------------------------------------------------- IfElse


def test_ifelse_runs_each_branch_on_its_rows_and_merges_in_order():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = L.data(name="x", shape=[2], dtype="float32")
        limit = L.fill_constant_batch_size_like(x, [-1, 1], "float32", 2.5)
        cond = L.less_than(L.reduce_mean(x, dim=[1], keep_dim=True), limit)
        ie = L.IfElse(cond)
        with ie.true_block():
            xt = ie.input(x)
            ie.output(L.scale(xt, scale=10.0), L.reduce_sum(xt, dim=[1], keep_dim=True))
        with ie.false_block():
            xf = ie.input(x)
            ie.output(L.scale(xf, scale=-1.0), L.reduce_max(xf, dim=[1], keep_dim=True))
        a, b = ie()
    xs = np.arange(10, dtype="float32").reshape(5, 2)
    av, bv = _run(main, startup, {"x": xs}, [a, b])
    low = xs.mean(1) < 2.5
    np.testing.assert_allclose(av, np.where(low[:, None], xs * 10, -xs))
    np.testing.assert_allclose(bv[:, 0], np.where(low, xs.sum(1), xs.max(1)))
    # a batch where every row takes one branch leaves the other with no rows
    av, = _run(main, startup, {"x": xs[3:]}, [a])
    np.testing.assert_allclose(av, -xs[3:])


def test_ifelse_branches_must_give_as_many_outputs():
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        x = L.data(name="x", shape=[2], dtype="float32")
        ie = L.IfElse(L.less_than(x, x))
        with ie.true_block():
            ie.output(ie.input(x), ie.input(x))
        with ie.false_block():
            ie.output(ie.input(x))
        with pytest.raises(ValueError, match="true branch gave 2 outputs and the false "
                                             "branch 1"):
            ie()


# ----------------------------------------------------------------------------- passes


def _loop_results(program, startup, fetch_names):
    return _run(program, startup, {"x": XS}, fetch_names)


def test_prune_keeps_what_the_loop_body_reads_and_drops_what_nobody_needs():
    from parafluid.passes.prune import eliminate_dead_code, prune

    main, startup, v = _loop_program()
    want, = _loop_results(main, startup, [v["total"].name])
    pruned = prune(main, [v["total"]], ["x"])
    types = [op.type for op in pruned.global_block().ops]
    # the bound n is produced by an op only the loop body reads
    assert types.count("fill_constant") == 3 and "while" in types
    assert "read_from_array" not in types and "lod_array_length" not in types
    assert pruned.num_blocks == 2
    got, = _loop_results(pruned, startup, [v["total"].name])
    assert float(got) == float(want)
    lean = eliminate_dead_code(main, keep=[v["total"]])
    assert "while" in [op.type for op in lean.global_block().ops]
    assert float(_loop_results(lean, startup, [v["total"].name])[0]) == float(want)


def test_clone_for_test_and_a_serialization_round_trip_keep_the_sub_block():
    main, startup, v = _loop_program()
    names = [v["total"].name, v["slot2"].name, v["arr"].name]
    want = _loop_results(main, startup, names)
    for other in (main.clone(for_test=True), main.clone(),
                  fluid.Program.parse_from_string(main.serialize_to_string())):
        assert other.num_blocks == 2
        op = next(op for op in other.global_block().ops if op.type == "while")
        assert op.attr("sub_block") is other.block(1)  # the copy's own block
        other.verify()
        got = _loop_results(other, startup, names)
        assert float(got[0]) == float(want[0])
        np.testing.assert_array_equal(got[1], want[1])
        assert len(got[2]) == len(want[2])


def test_eager_deletion_frees_temporaries_around_the_loop_but_not_what_it_reads():
    from parafluid.executor import compile_program

    main, startup, v = _loop_program()
    plan = compile_program(main, ["x"], [v["total"].name], "cpu")
    ops = main.global_block().ops
    loop_at = next(i for i, op in enumerate(ops) if op.type == "while")
    # a value several ops read is dropped once the last of them ran (a count per reader):
    # whatever the loop reads is never dropped before it, and the bound n dies with it
    for name in ops[loop_at].input("X"):
        nodes = [i for i, names in plan.releases.items() if name in names]
        assert not nodes or max(nodes) >= loop_at, (name, nodes)
    assert {"x", v["i"].name}.issubset(plan.releases[loop_at])
    assert v["arr"].name in plan.releases[len(ops) - 1]  # the array's last reader
    freed = {name for names in plan.releases.values() for name in names}
    assert v["total"].name not in freed  # fetched
    ys, ref_total = _loop_reference()
    total, = _loop_results(main, startup, [v["total"].name])
    np.testing.assert_allclose(float(total), ref_total, rtol=1e-5)


def test_an_op_whose_sub_block_reads_unlisted_values_turns_release_off():
    from parafluid.passes.liveness import sub_block_io, sub_block_io_listed

    main, _, v = _loop_program()
    op = next(op for op in main.global_block().ops if op.type == "while")
    reads, writes = sub_block_io(op)
    assert reads <= set(op.input("X")) and writes <= set(op.output("Out"))
    assert sub_block_io_listed(main.global_block())
    op.inputs["X"] = [n for n in op.inputs["X"] if n != "w"]
    assert not sub_block_io_listed(main.global_block())


def test_memory_passes_leave_the_loop_values_alone():
    main, startup, v = _loop_program()
    names = [v["total"].name, v["slot2"].name]
    want = _loop_results(main, startup, names)
    inner = {n for op in main.block(1).ops for n in op.input_arg_names + op.output_arg_names}
    with pytest.warns(UserWarning, match="sub-block"):
        fluid.memory_optimize(main)
    with pytest.warns(UserWarning, match="sub-block"):
        fluid.release_memory(main)
    deleted = {n for op in main.global_block().ops if op.type == "delete_var"
               for n in op.input("X")}
    assert not deleted & inner
    got = _loop_results(main, startup, names)
    assert float(got[0]) == float(want[0])
    np.testing.assert_array_equal(got[1], want[1])


def test_parallel_executor_runs_the_loop_on_every_device(monkeypatch):
    monkeypatch.setenv("CPU_NUM", "2")
    main, startup, v = _loop_program()
    xs = np.linspace(-1, 1, 12, dtype="float32").reshape(4, 3)
    scope = fluid.Scope()
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup, scope=scope)
    slot2_single, = exe.run(main, feed={"x": xs}, fetch_list=[v["slot2"]], scope=scope)
    compiled = fluid.CompiledProgram(main).with_data_parallel()
    slot2, total = exe.run(compiled, feed={"x": xs}, fetch_list=[v["slot2"], v["total"]],
                           scope=scope)
    np.testing.assert_allclose(slot2, slot2_single, rtol=1e-6)
    # each device sums the means of its half of the batch
    halves = [sum(float(np.tanh(h * 0.5 + k).mean()) for k in range(4))
              for h in (xs[:2], xs[2:])]
    np.testing.assert_allclose(total, halves, rtol=1e-5)


def _nested_program():
    """A While whose body holds a ConditionalBlock that reads a value of the While's body."""
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = L.data(name="x", shape=[1], dtype="float32", append_batch_size=False)
        i = L.fill_constant([1], "int64", 0)
        n = L.fill_constant([1], "int64", 3)
        total = L.fill_constant([1], "float32", 0.0)
        cond = L.less_than(x=i, y=n)
        loop = L.While(cond=cond)
        with loop.block():
            y = L.elementwise_mul(x, x)  # a variable of the While's block
            small = L.less_than(x=L.cast(i, "float32"),
                                y=L.fill_constant([1], "float32", 1.5))
            inner = L.ConditionalBlock([small], is_scalar_condition=True)
            with inner.block():
                L.assign(L.elementwise_add(total, y), output=total)
            L.increment(x=i, value=1, in_place=True)
            L.less_than(x=i, y=n, cond=cond)
    return main, startup, x, total


def test_an_op_lists_its_sub_blocks():
    main, _, _, _ = _nested_program()
    ops = main.global_block().ops
    loop = next(op for op in ops if op.type == "while")
    assert loop.sub_blocks == [main.block(1)]
    inner = next(op for op in main.block(1).ops if op.type == "conditional_block")
    assert inner.sub_blocks == [main.block(2)]
    assert all(op.sub_blocks == [] for op in ops if op is not loop)
    from parafluid.framework import Operator

    serve = Operator(main.global_block(), "listen_and_serv", {}, {},
                     {"optimize_blocks": [main.block(2), main.block(1)], "Fanin": 1})
    assert serve.sub_blocks == [main.block(2), main.block(1)]


def test_prune_keeps_what_a_nested_sub_block_reads_from_its_parent():
    main, startup, x, total = _nested_program()
    from parafluid.passes.prune import prune

    pruned = prune(main, [total], [x])
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    feed = {"x": np.array([2.0], "float32")}
    want, = exe.run(main, feed=feed, fetch_list=[total])
    got, = exe.run(pruned, feed=feed, fetch_list=[total])
    np.testing.assert_array_equal(got, want)
    assert float(want[0]) == 8.0  # two of the three iterations add x * x
