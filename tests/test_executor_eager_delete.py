"""The Executor drops each temporary after its last use, never a fetch target or persistable."""

from __future__ import annotations

import numpy as np

import parafluid as fluid
from parafluid.executor import compile_program


def _program():
    main, startup = fluid.Program(), fluid.Program()
    startup.random_seed = 1
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        x = fluid.layers.data(name="x", shape=[3], dtype="float32")
        a = fluid.layers.scale(x, scale=2.0)
        b = fluid.layers.elementwise_add(a, x)
        c = fluid.layers.mean(fluid.layers.fc(input=b, size=2))
    return main, startup, x, a, b, c


def test_temporaries_are_freed_at_their_last_use_only() -> None:
    main, _, x, a, b, c = _program()
    plan = compile_program(main, ["x"], [c.name, a.name], "cpu")
    freed = {name: i for i, names in plan.releases.items() for name in names}
    ops = main.global_block().ops
    assert freed["x"] == 1 and ops[1].type == "elementwise_add"  # x's last reader
    assert freed[b.name] == 2 and ops[2].type == "mul"
    assert a.name not in freed and c.name not in freed  # fetched
    assert not any(main.global_block().var(n).persistable for n in freed)  # fc_0.w_0 stays


def test_fetching_intermediates_and_training_still_work() -> None:
    main, startup, x, a, b, c = _program()
    scope, exe = fluid.Scope(), fluid.Executor(fluid.CPUPlace())
    exe.run(startup, scope=scope)
    xs = np.arange(6, dtype="float32").reshape(2, 3)
    got_a, got_b, got_c = exe.run(main, feed={"x": xs}, fetch_list=[a, b, c], scope=scope)
    np.testing.assert_allclose(got_a, 2 * xs)
    np.testing.assert_allclose(got_b, 3 * xs)
    w = np.array(scope.find_var("fc_0.w_0").get_tensor())
    bias = np.array(scope.find_var("fc_0.b_0").get_tensor())
    np.testing.assert_allclose(got_c, [(got_b @ w + bias).mean()], rtol=1e-5, atol=1e-5)


def test_a_block_with_a_sub_block_op_keeps_every_value() -> None:
    # the sub-block reads b, which the op holding it does not list (as listen_and_serv's
    # blocks do): the liveness seen through the slots is not exact, nothing is released
    main, _, x, a, b, c = _program()
    sub = main._create_block()
    y = sub.create_var(name="y", shape=[-1, 3], dtype="float32")
    sub.append_op("scale", inputs={"X": [b]}, outputs={"Out": [y]}, attrs={"scale": 3.0})
    main._rollback()
    main.global_block().ops[0]._set_attr("sub_block", sub)
    plan = compile_program(main, ["x"], [c.name], "cpu")
    assert not plan.releases


def test_sub_blocks_keep_every_value() -> None:
    main, _, x, a, b, c = _program()
    sub = main._create_block()
    y = sub.create_var(name="y", shape=[-1, 3], dtype="float32")
    sub.append_op("scale", inputs={"X": [a]}, outputs={"Out": [y]}, attrs={"scale": 3.0})
    sub.append_op("scale", inputs={"X": [y]}, outputs={"Out": [b]}, attrs={"scale": 1.0})
    main._rollback()
    plan = compile_program(main, [], [], "cpu", block_idx=1)
    assert not plan.releases
