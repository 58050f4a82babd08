"""Gradients through bodies that hold control flow themselves: a While inside a While, a
Switch (conditional_block) inside a While, an IfElse inside a DynamicRNN step. The gradient
block of the outer loop differentiates the inner op through its own while_grad /
conditional_block_grad; each case is checked against the unrolled (or masked) program
and against finite differences."""

import numpy as np
from control_flow_models import param_attr, rnn_cell, two_branches

import parafluid as fluid

L = fluid.layers
OUTER, INNER = 2, 3
RNG = np.random.RandomState(11)
XS = RNG.uniform(-1, 1, (4, 3))
PARAMS = {"wx": RNG.uniform(-0.5, 0.5, (3, 3)), "wh": RNG.uniform(-0.5, 0.5, (3, 3)),
          "b": RNG.uniform(-0.1, 0.1, (3,)), "v": RNG.uniform(-0.5, 0.5, (3, 3))}


def _counted_loop(n, body):
    """``for _ in range(n): body()`` as a While (the counter made where it is called)."""
    i = L.fill_constant([1], "int64", 0)
    limit = L.fill_constant([1], "int64", n)
    cond = L.less_than(x=i, y=limit)
    w = L.While(cond=cond)
    with w.block():
        body(i)
        L.increment(x=i, value=1, in_place=True)
        L.less_than(x=i, y=limit, cond=cond)


def _nested(loop: bool, train: bool = True):
    """OUTER times: INNER cell steps, then h = h v (a projection between the inner loops);
    loss = mean(h^2), trained with SGD (or only differentiated w.r.t. x)."""
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = L.data(name="x", shape=[3], dtype="float64")
        x.stop_gradient = False
        h = L.fill_constant_batch_size_like(x, [-1, 3], "float64", 0.0)
        h.stop_gradient = False

        def project(v):
            return L.fc(input=v, size=3, param_attr=param_attr(PARAMS, "v"), bias_attr=False)
        if loop:
            def outer_body(_):
                _counted_loop(INNER, lambda _: L.assign(rnn_cell(PARAMS, x, h), output=h))
                L.assign(project(h), output=h)
            _counted_loop(OUTER, outer_body)
        else:
            for _ in range(OUTER):
                for _ in range(INNER):
                    h = rnn_cell(PARAMS, x, h)
                h = project(h)
        loss = L.mean(L.square(h))
        if train:
            fluid.optimizer.SGD(learning_rate=0.5).minimize(loss)
            return main, startup, loss
        gx, = fluid.backward.gradients([loss], [x])
    return main, startup, loss, gx


def _train(main, startup, fetch, feed, steps=3):
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    return [exe.run(main, feed=feed, fetch_list=fetch, scope=scope) for _ in range(steps)]


def _finite_differences(main, startup, loss, feed, name):
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    base = feed[name]
    fd = np.zeros_like(base)
    for k in np.ndindex(base.shape):
        d = np.zeros_like(base)
        d[k] = 1e-6
        hi = float(exe.run(main, feed={**feed, name: base + d}, fetch_list=[loss],
                           scope=scope)[0])
        lo = float(exe.run(main, feed={**feed, name: base - d}, fetch_list=[loss],
                           scope=scope)[0])
        fd[k] = (hi - lo) / 2e-6
    return fd


def test_a_while_inside_a_while_trains_like_the_unrolled_program():
    looped_main, looped_startup, loss = _nested(loop=True)
    looped_main.verify()
    ops = [op.type for b in looped_main.blocks for op in b.ops]
    assert ops.count("while_grad") == 2  # the outer one, and the inner one in its grad block
    names = ["wx@GRAD", "wh@GRAD", "b@GRAD", "v@GRAD"]
    looped = _train(looped_main, looped_startup, [loss, *names], {"x": XS})
    unrolled_main, unrolled_startup, uloss = _nested(loop=False)
    unrolled = _train(unrolled_main, unrolled_startup, [uloss, *names], {"x": XS})
    for step_l, step_u in zip(looped, unrolled):
        for a, b in zip(step_l, step_u):
            np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)
    assert float(looped[-1][0]) < float(looped[0][0])


def test_nested_while_gradient_matches_finite_differences():
    main, startup, loss, gx = _nested(loop=True, train=False)
    main.verify()
    got, = _train(main, startup, [gx], {"x": XS}, steps=1)[0]
    np.testing.assert_allclose(got, _finite_differences(main, startup, loss, {"x": XS}, "x"),
                               rtol=1e-6, atol=1e-10)


def _switch_in_loop(control_flow: bool):
    """Four steps of h = cell(x, h); from the third step on, a Switch case also projects
    h through v (the case holds on the loop counter)."""
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = L.data(name="x", shape=[3], dtype="float64")
        x.stop_gradient = False
        h = L.fill_constant_batch_size_like(x, [-1, 3], "float64", 0.2)
        h.stop_gradient = False
        if control_flow:
            def body(i):
                L.assign(rnn_cell(PARAMS, x, h), output=h)
                with L.Switch() as switch:
                    with switch.case(L.greater_equal(i, L.fill_constant([1], "int64", 2))):
                        L.assign(L.fc(input=h, size=3, param_attr=param_attr(PARAMS, "v"),
                                      bias_attr=False), output=h)
            _counted_loop(4, body)
        else:
            for t in range(4):
                h = rnn_cell(PARAMS, x, h)
                if t >= 2:
                    h = L.fc(input=h, size=3, param_attr=param_attr(PARAMS, "v"), bias_attr=False)
        loss = L.mean(L.square(h))
        grads = fluid.backward.gradients([loss], [x, main.global_block().var("v")])
    return main, startup, loss, grads


def test_a_switch_inside_a_while_differentiates_like_the_unrolled_program():
    main, startup, loss, grads = _switch_in_loop(control_flow=True)
    main.verify()
    assert "conditional_block_grad" in [op.type for b in main.blocks for op in b.ops]
    got = _train(main, startup, [loss, *grads], {"x": XS}, steps=1)[0]
    umain, ustartup, uloss, ugrads = _switch_in_loop(control_flow=False)
    want = _train(umain, ustartup, [uloss, *ugrads], {"x": XS}, steps=1)[0]
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(got[1], _finite_differences(main, startup, loss, {"x": XS},
                                                           "x"), rtol=1e-6, atol=1e-10)


LENGTHS = [2, 4, 1, 3]
SEQ = RNG.uniform(-1, 1, (sum(LENGTHS), 3))


def _branchy_rnn(control_flow: bool):
    """A DynamicRNN whose step sends each running sequence's row through fc A when the
    word's mean is below 0 and through fc B otherwise (an IfElse in the step), or the
    same written with masks."""
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        sentence = L.data(name="x", shape=[3], dtype="float64", lod_level=1)
        sentence.stop_gradient = False

        def fc(v, tag):
            return L.fc(input=v, size=3, act="tanh", param_attr=fluid.ParamAttr(
                name="w" + tag, initializer=fluid.initializer.NumpyArrayInitializer(
                    PARAMS["wx"] if tag == "a" else PARAMS["wh"])), bias_attr=False)
        drnn = L.DynamicRNN()
        with drnn.block():
            word = drnn.step_input(sentence)
            prev = drnn.memory(shape=[3], dtype="float64")
            mixed = L.elementwise_add(word, prev)
            zero = L.fill_constant_batch_size_like(word, [-1, 1], "float64", 0.0)
            cond = L.less_than(L.reduce_mean(word, dim=[1], keep_dim=True), zero)
            hidden = two_branches(cond, mixed, fc, "float64", control_flow)
            drnn.update_memory(prev, hidden)
            drnn.output(hidden)
        loss = L.reduce_sum(L.sequence_pool(drnn(), pool_type="sum"))
        gx, = fluid.backward.gradients([loss], [sentence])
        params = [main.global_block().var("wa"), main.global_block().var("wb")]
        grads = fluid.backward.gradients([loss], params)
    return main, startup, loss, [gx, *grads]


def test_an_ifelse_inside_a_dynamic_rnn_step_differentiates_like_the_masked_model():
    feed = {"x": fluid.create_lod_tensor(SEQ, [LENGTHS], fluid.CPUPlace())}
    main, startup, loss, grads = _branchy_rnn(control_flow=True)
    main.verify()
    got = _train(main, startup, [loss, *grads], feed, steps=1)[0]
    mmain, mstartup, mloss, mgrads = _branchy_rnn(control_flow=False)
    want = _train(mmain, mstartup, [mloss, *mgrads], feed, steps=1)[0]
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    fd = np.zeros_like(SEQ)
    for k in np.ndindex(SEQ.shape):
        d = np.zeros_like(SEQ)
        d[k] = 1e-6
        vals = [float(exe.run(main, feed={"x": fluid.create_lod_tensor(
            SEQ + s * d, [LENGTHS], fluid.CPUPlace())}, fetch_list=[loss], scope=scope)[0])
            for s in (1, -1)]
        fd[k] = (vals[0] - vals[1]) / 2e-6
    np.testing.assert_allclose(got[1], fd, rtol=1e-6, atol=1e-10)


def test_a_cloned_and_a_reloaded_nested_loop_program_train_the_same():
    main, startup, loss = _nested(loop=True)
    names = [loss, "wx@GRAD", "wh@GRAD", "b@GRAD", "v@GRAD"]
    want = _train(main, startup, names, {"x": XS})
    for other in (main.clone(), fluid.Program.parse_from_string(main.serialize_to_string())):
        other.verify()
        assert other.num_blocks == main.num_blocks
        got = _train(other, startup, names, {"x": XS})
        for a_step, b_step in zip(got, want):
            for a, b in zip(a_step, b_step):
                np.testing.assert_array_equal(a, b)


def test_parallel_executor_trains_the_nested_loop_like_one_device():
    from parafluid.testing.data_parallel import assert_same_training, run_parallel, run_single

    def build():
        return _nested(loop=True)

    xs = np.random.RandomState(3).uniform(-1, 1, (8, 3))
    feeds = [{"x": xs}] * 3
    assert_same_training(run_single(build, feeds), run_parallel(build, feeds, ndev=2),
                         atol=1e-9)
