"""Gradients through While (while_grad) and conditional blocks (conditional_block_grad):
a loop trained with SGD matches the same model unrolled in Python, step for step; IfElse and
Switch branches train like the same model written with masks."""

import numpy as np
import pytest
from control_flow_models import rnn_cell, two_branches

import parafluid as fluid

L = fluid.layers
STEPS = 3
RNG = np.random.RandomState(7)
XS = RNG.uniform(-1, 1, (4, 3)).astype("float32")
PARAMS = {"wx": RNG.uniform(-0.5, 0.5, (3, 3)).astype("float32"),
          "wh": RNG.uniform(-0.5, 0.5, (3, 3)).astype("float32"),
          "b": RNG.uniform(-0.1, 0.1, (3,)).astype("float32")}


def _rnn(loop: bool):
    """h_{t+1} = tanh(x wx + h_t wh + b) for STEPS steps, loss = mean(h_T^2); SGD."""
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = L.data(name="x", shape=[3], dtype="float32")
        h = L.fill_constant_batch_size_like(x, [-1, 3], "float32", 0.0)
        h.stop_gradient = False
        if loop:
            i = L.fill_constant([1], "int64", 0)
            n = L.fill_constant([1], "int64", STEPS)
            cond = L.less_than(x=i, y=n)
            w = L.While(cond=cond)
            with w.block():
                L.assign(rnn_cell(PARAMS, x, h), output=h)
                L.increment(x=i, value=1, in_place=True)
                L.less_than(x=i, y=n, cond=cond)
        else:
            for _ in range(STEPS):
                h = rnn_cell(PARAMS, x, h)
        loss = L.mean(L.square(h))
        fluid.optimizer.SGD(learning_rate=0.5).minimize(loss)
    return main, startup, loss


def _train(main, startup, loss, steps=3):
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    for name, value in PARAMS.items():
        scope.find_var(name).get_tensor().set(value, fluid.CPUPlace())
    out = []
    for _ in range(steps):
        out.append(exe.run(main, feed={"x": XS}, fetch_list=[loss, "wx@GRAD", "wh@GRAD",
                                                               "b@GRAD"], scope=scope))
    return out


def test_a_while_loop_trains_like_the_unrolled_program():
    looped = _train(*_rnn(loop=True))
    unrolled = _train(*_rnn(loop=False))
    for step_l, step_u in zip(looped, unrolled):
        for a, b in zip(step_l, step_u):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert float(looped[-1][0]) < float(looped[0][0])  # it learns


def test_a_cloned_and_a_reloaded_loop_program_train_the_same():
    main, startup, loss = _rnn(loop=True)
    main.verify()  # the body, and its gradient block (fed: the outputs' gradients)
    want = _train(main, startup, loss)
    for other in (main.clone(), fluid.Program.parse_from_string(main.serialize_to_string())):
        assert other.num_blocks == main.num_blocks  # the body and its gradient block
        got = _train(other, startup, loss)
        for a_step, b_step in zip(got, want):
            for a, b in zip(a_step, b_step):
                np.testing.assert_array_equal(a, b)
    test_prog = main.clone(for_test=True)
    assert [op.type for op in test_prog.global_block().ops].count("while_grad") == 0
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    first, = exe.run(test_prog, feed={"x": XS}, fetch_list=[loss], scope=scope)
    np.testing.assert_allclose(first, want[0][0], rtol=1e-6)


@pytest.mark.timeout(60)
def test_parallel_executor_trains_the_loop_like_one_device():
    from parafluid.testing.data_parallel import assert_same_training, run_parallel, run_single

    def build():
        return _rnn(loop=True)

    xs = np.random.RandomState(3).uniform(-1, 1, (8, 3)).astype("float32")
    feeds = [{"x": xs}] * 3
    assert_same_training(run_single(build, feeds), run_parallel(build, feeds, ndev=2),
                         atol=1e-5)


def test_while_gradient_matches_finite_differences():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = L.data(name="x", shape=[3], dtype="float64")
        x.stop_gradient = False
        acc = L.fill_constant_batch_size_like(x, [-1, 3], "float64", 0.5)
        acc.stop_gradient = False
        i = L.fill_constant([1], "int64", 0)
        n = L.fill_constant([1], "int64", 3)
        cond = L.less_than(x=i, y=n)
        w = L.While(cond=cond)
        with w.block():
            L.assign(L.elementwise_mul(L.sin(acc), x), output=acc)
            L.increment(x=i, value=1, in_place=True)
            L.less_than(x=i, y=n, cond=cond)
        loss = L.reduce_sum(acc)
        gx, = fluid.backward.gradients([loss], [x])
    _check_with_finite_differences(main, loss, gx, RNG.uniform(0.5, 1.5, (2, 3)), atol=1e-7)


def test_gradient_through_a_tensor_array_written_in_the_loop():
    """Each step writes h_t into an array; the loss weighs every slot: the gradient comes
    back through the array reads, the loop and the array writes."""
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = L.data(name="x", shape=[3], dtype="float64")
        x.stop_gradient = False
        h = L.fill_constant_batch_size_like(x, [-1, 3], "float64", 0.1)
        h.stop_gradient = False
        arr = L.create_array("float64")
        i = L.fill_constant([1], "int64", 0)
        n = L.fill_constant([1], "int64", 3)
        cond = L.less_than(x=i, y=n)
        w = L.While(cond=cond)
        with w.block():
            L.assign(L.tanh(L.elementwise_add(L.elementwise_mul(h, x), x)), output=h)
            L.array_write(h, i=i, array=arr)
            L.increment(x=i, value=1, in_place=True)
            L.less_than(x=i, y=n, cond=cond)
        terms = [L.scale(L.reduce_sum(L.array_read(arr, L.fill_constant([1], "int64", k))),
                         scale=float(k + 1)) for k in range(3)]
        loss = L.sums(terms)
        gx, = fluid.backward.gradients([loss], [x])
    _check_with_finite_differences(main, loss, gx, RNG.uniform(-1, 1, (2, 3)), atol=1e-8)


def _check_with_finite_differences(main, loss, gx, xs, atol):
    """The program's gradient of ``loss`` for feed ``x`` against central differences."""
    exe = fluid.Executor(fluid.CPUPlace())

    def f(v):
        return float(exe.run(main, feed={"x": v}, fetch_list=[loss], scope=fluid.Scope())[0])

    g, = exe.run(main, feed={"x": xs}, fetch_list=[gx], scope=fluid.Scope())
    fd = np.zeros_like(xs)
    for k in np.ndindex(xs.shape):
        d = np.zeros_like(xs)
        d[k] = 1e-6
        fd[k] = (f(xs + d) - f(xs - d)) / 2e-6
    np.testing.assert_allclose(g, fd, rtol=1e-5, atol=atol)


def _branches(control_flow: bool):
    """Rows whose mean is below 0 go through fc A, the others through fc B."""
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = L.data(name="x", shape=[3], dtype="float32")
        zero = L.fill_constant_batch_size_like(x, [-1, 1], "float32", 0.0)
        cond = L.less_than(L.reduce_mean(x, dim=[1], keep_dim=True), zero)

        def fc(v, tag):
            return L.fc(input=v, size=2, act="sigmoid", param_attr=fluid.ParamAttr(name="w" + tag),
                        bias_attr=fluid.ParamAttr(name="b" + tag))
        out = two_branches(cond, x, fc, "float32", control_flow)
        loss = L.mean(L.square(out))
        fluid.optimizer.SGD(learning_rate=1.0).minimize(loss)
    return main, startup, loss


def test_ifelse_branches_train_like_the_masked_model():
    results = []
    for control_flow in (True, False):
        main, startup, loss = _branches(control_flow)
        exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
        startup.random_seed = 3
        exe.run(startup, scope=scope)
        rng = np.random.RandomState(1)
        for name in ("wa", "wb"):
            scope.find_var(name).get_tensor().set(rng.uniform(-1, 1, (3, 2)).astype("float32"),
                                                  fluid.CPUPlace())
        xs = np.random.RandomState(2).uniform(-1, 1, (6, 3)).astype("float32")
        results.append([exe.run(main, feed={"x": xs}, fetch_list=[loss, "wa@GRAD", "wb@GRAD"],
                                scope=scope) for _ in range(3)])
    for a_step, b_step in zip(*results):
        for a, b in zip(a_step, b_step):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_switch_branch_gradient_flows_only_through_the_branch_taken():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = L.data(name="x", shape=[2], dtype="float32")
        x.stop_gradient = False
        flag = L.data(name="flag", shape=[1], dtype="bool", append_batch_size=False)
        out = L.scale(x, scale=1.0)  # kept when the case does not run
        with L.Switch() as switch:
            with switch.case(flag):
                L.assign(L.scale(x, scale=3.0), output=out)
        loss = L.reduce_sum(L.square(out))
        gx, = fluid.backward.gradients([loss], [x])
    exe = fluid.Executor(fluid.CPUPlace())
    xs = np.array([[1.0, -2.0]], "float32")
    for flag, k in ((True, 3.0), (False, 1.0)):
        g, = exe.run(main, feed={"x": xs, "flag": np.array([flag])}, fetch_list=[gx],
                     scope=fluid.Scope())
        np.testing.assert_allclose(g, 2 * k * k * xs, rtol=1e-6)


def test_a_test_mode_while_has_no_gradient():
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        x = L.data(name="x", shape=[3], dtype="float32")
        x.stop_gradient = False
        acc = L.fill_constant_batch_size_like(x, [-1, 3], "float32", 0.0)
        acc.stop_gradient = False
        i = L.fill_constant([1], "int64", 0)
        cond = L.less_than(x=i, y=L.fill_constant([1], "int64", 2))
        w = L.While(cond=cond, is_test=True)
        with w.block():
            L.assign(L.elementwise_add(acc, x), output=acc)
            L.increment(x=i, value=1, in_place=True)
            L.less_than(x=i, y=L.fill_constant([1], "int64", 2), cond=cond)
        with pytest.raises(ValueError, match="is_test=True"):
            fluid.backward.gradients([L.mean(acc)], [x])


def test_a_case_that_reads_and_overwrites_a_value_differentiates_what_it_read():
    """``h = fc(h, v)`` inside a Switch case: the gradient of v needs h as the case read
    it, not the value the case left behind."""
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = L.data(name="x", shape=[3], dtype="float64")
        x.stop_gradient = False
        flag = L.data(name="flag", shape=[1], dtype="bool", append_batch_size=False)
        h = L.scale(x, scale=2.0)
        with L.Switch() as switch:
            with switch.case(flag):
                L.assign(L.fc(input=h, size=3, bias_attr=False, param_attr=fluid.ParamAttr(
                    name="v", initializer=fluid.initializer.NumpyArrayInitializer(
                        PARAMS["wx"].astype("float64")))), output=h)
        loss = L.reduce_sum(L.square(h))
        gx, gv = fluid.backward.gradients([loss], [x, main.global_block().var("v")])
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    xs = RNG.uniform(-1, 1, (2, 3))
    for flag in (True, False):
        feed = {"x": xs, "flag": np.array([flag])}
        got_x, got_v = exe.run(main, feed=feed, fetch_list=[gx, gv], scope=scope)
        t = 2 * xs
        v = PARAMS["wx"].astype("float64")
        if flag:
            out = t @ v
            want_v, want_x = t.T @ (2 * out), (2 * out) @ v.T * 2
        else:
            want_v, want_x = np.zeros_like(v), 2 * t * 2
        np.testing.assert_allclose(got_v, want_v, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(got_x, want_x, rtol=1e-10, atol=1e-12)


def test_an_output_read_by_its_gradient_and_overwritten_later_is_read_as_it_was():
    """``h = tanh(x)``, then a case overwrites h: tanh_grad reads the h tanh produced."""
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = L.data(name="x", shape=[3], dtype="float64")
        x.stop_gradient = False
        flag = L.data(name="flag", shape=[1], dtype="bool", append_batch_size=False)
        h = L.tanh(x)
        with L.Switch() as switch:
            with switch.case(flag):
                L.assign(L.scale(h, scale=3.0), output=h)
        loss = L.reduce_sum(L.square(h))
        gx, = fluid.backward.gradients([loss], [x])
    exe = fluid.Executor(fluid.CPUPlace())
    xs = RNG.uniform(-1, 1, (2, 3))
    t = np.tanh(xs)
    for flag, k in ((True, 3.0), (False, 1.0)):
        got, = exe.run(main, feed={"x": xs, "flag": np.array([flag])}, fetch_list=[gx],
                       scope=fluid.Scope())
        np.testing.assert_allclose(got, 2 * k * k * t * (1 - t * t), rtol=1e-10)
