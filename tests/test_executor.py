"""The sequential Executor and Scope: feeds, fetches, errors with context, caching."""

import numpy as np
import pytest
import torch

import parafluid as fluid


def build():
    x = fluid.layers.data(name="x", shape=[3], dtype="float32")
    label = fluid.layers.data(name="label", shape=[1], dtype="int64")
    out = fluid.layers.fc(input=x, size=2)
    loss = fluid.layers.mean(out)
    return x, label, out, loss


def started():
    parts = build()
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(fluid.default_startup_program())
    return exe, parts


def test_fetch_by_variable_and_name_and_lodtensor():
    exe, (x, _, out, loss) = started()
    feed = {"x": np.ones((4, 3), "float32")}
    a, b = exe.run(feed=feed, fetch_list=[out, loss.name])
    assert a.shape == (4, 2) and b.shape == (1,)
    np.testing.assert_allclose(b, a.mean(keepdims=True).reshape(1), rtol=1e-6)
    t, = exe.run(feed=feed, fetch_list=[out], return_numpy=False)
    assert isinstance(t, fluid.LoDTensor) and t.shape() == [4, 2]
    np.testing.assert_array_equal(np.array(t), a)


def test_parameters_live_in_scope_and_temporaries_do_not():
    exe, (x, _, out, loss) = started()
    exe.run(feed={"x": np.ones((2, 3), "float32")}, fetch_list=[loss])
    scope = fluid.global_scope()
    w = np.array(scope.find_var("fc_0.w_0").get_tensor())
    assert w.shape == (3, 2)
    assert scope.find_var(out.name) is None


def test_scope_set_and_read_back():
    exe, (x, _, out, loss) = started()
    scope = fluid.global_scope()
    scope.find_var("fc_0.w_0").get_tensor().set(np.full((3, 2), 0.5, "float32"),
                                                  fluid.CPUPlace())
    scope.find_var("fc_0.b_0").get_tensor().set(np.zeros(2, "float32"), fluid.CPUPlace())
    o, = exe.run(feed={"x": np.ones((1, 3), "float32")}, fetch_list=[out])
    np.testing.assert_allclose(o, [[1.5, 1.5]])


def test_child_scopes_find_parent_vars():
    parent = fluid.Scope()
    parent.var("a").get_tensor().set(np.arange(3, dtype="float32"), fluid.CPUPlace())
    kid = parent.new_scope()
    assert kid.find_var("a") is parent.find_var("a")
    assert kid.find_local_var("a") is None
    kid.var("a")
    assert kid.find_var("a") is not parent.find_var("a")


def test_feed_dtype_error_names_var_expected_and_got():
    exe, _ = started()
    with pytest.raises(TypeError, match="feeded Variable 'x' must be 'float32', but "
                                        "received 'float64'"):
        exe.run(feed={"x": np.ones((2, 3))})


def test_feed_shape_error_names_var_expected_and_got():
    exe, _ = started()
    with pytest.raises(ValueError, match=r"^The feeded Variable 'x' should have dimensions = "
                                         r"2, shape = \(-1, 3\), but received feeded shape "
                                         r"\[2, 4\]; then while running op #0 mul"):
        exe.run(feed={"x": np.ones((2, 4), "float32")})


def test_a_checked_feed_fails_in_fluids_words_before_any_op_runs():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.data("x", shape=[None, 3], dtype="float32")
        fluid.layers.fc(x, size=2)
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    with pytest.raises(ValueError, match=r"^The feeded Variable 'x' should have dimensions = "
                                         r"2, shape = \(-1, 3\), but received feeded shape "
                                         r"\[2, 4\]$"):
        exe.run(main, feed={"x": np.ones((2, 4), "float32")})
    for kind in (ValueError, TypeError):  # Fluid's ValueError; a value of the wrong type
        with pytest.raises(kind, match="^The data type of feeded Variable 'x' must be "
                                       "'float32', but received 'float64'$"):
            exe.run(main, feed={"x": np.ones((2, 3))})


def test_unknown_feed_and_fetch_names():
    exe, _ = started()
    with pytest.raises(ValueError, match="feed 'xx' is not a variable.*did you mean 'x'"):
        exe.run(feed={"xx": np.ones((2, 3), "float32")})
    with pytest.raises(ValueError, match="fetch target 'nope' is not a variable"):
        exe.run(feed={"x": np.ones((2, 3), "float32")}, fetch_list=["nope"])
    with pytest.raises(TypeError, match="fetch_list items must be Variables or names"):
        exe.run(feed={"x": np.ones((2, 3), "float32")}, fetch_list=[3])


def test_missing_feed_says_which_and_what_was_fed():
    exe, _ = started()
    with pytest.raises(RuntimeError, match="'x' is needed by op #0 mul but was not fed"):
        exe.run(feed={}, fetch_list=[])


def test_uninitialized_parameter_says_run_startup():
    build()
    exe = fluid.Executor(fluid.CPUPlace())
    with pytest.raises(RuntimeError, match="run the startup program first"):
        exe.run(feed={"x": np.ones((2, 3), "float32")})


def test_failing_op_is_reraised_with_context_and_executor_survives():
    prog = fluid.Program()
    with fluid.program_guard(prog, fluid.Program()):
        a = fluid.layers.data(name="a", shape=[2, 3], dtype="float32", append_batch_size=False)
        b = fluid.layers.data(name="b", shape=[-1, -1], dtype="float32",
                              append_batch_size=False)
        c = fluid.layers.mul(a, b)  # the line the error must point at
    exe = fluid.Executor(fluid.CPUPlace())
    with pytest.raises(fluid.OpRunError) as info:
        exe.run(prog, feed={"a": np.ones((2, 3), "float32"), "b": np.ones((4, 5), "float32")},
                fetch_list=[c])
    msg = str(info.value)
    assert "while running op #0 mul (X=[a], Y=[b])" in msg
    assert "test_executor.py" in msg and info.value.op_type == "mul"
    assert isinstance(info.value.__cause__, RuntimeError)
    out, = exe.run(prog, feed={"a": np.ones((2, 3), "float32"),
                               "b": np.ones((3, 5), "float32")}, fetch_list=[c])
    np.testing.assert_allclose(out, np.full((2, 5), 3.0))


def test_plan_is_cached_and_invalidated_when_program_changes():
    exe, (x, _, out, loss) = started()
    feed = {"x": np.ones((2, 3), "float32")}
    main = fluid.default_main_program()

    def plans():
        return [key for key in exe._cache if key[0] is main]

    exe.run(feed=feed, fetch_list=[loss])
    exe.run(feed=feed, fetch_list=[loss])
    assert len(plans()) == 1
    doubled = fluid.layers.scale(loss, scale=2.0)
    l1, l2 = exe.run(feed=feed, fetch_list=[loss, doubled])
    np.testing.assert_allclose(l2, 2 * l1)
    assert len(plans()) == 1  # the stale plan was dropped


def test_feeding_does_not_alias_user_memory_for_persistables():
    x, _, out, loss = build()
    fluid.optimizer.SGD(learning_rate=1.0).minimize(loss)
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(fluid.default_startup_program())
    w = np.full((3, 2), 1.0, "float32")
    exe.run(feed={"x": np.ones((2, 3), "float32"), "fc_0.w_0": w}, fetch_list=[loss])
    np.testing.assert_array_equal(w, np.ones((3, 2), "float32"))


def test_closed_executor_refuses_to_run():
    exe, _ = started()
    exe.close()
    with pytest.raises(RuntimeError, match="after close"):
        exe.run(fluid.default_startup_program())


def test_cuda_place_is_a_clear_error_without_gpu():
    if torch.cuda.is_available():
        pytest.skip("a GPU is visible")
    with pytest.raises(RuntimeError, match="torch sees no CUDA device"):
        fluid.Executor(fluid.CUDAPlace(0))
    with pytest.raises(RuntimeError, match="no CUDA device"):
        fluid.cuda_places()


def test_cpu_places_follow_cpu_num(monkeypatch):
    monkeypatch.setenv("CPU_NUM", "3")
    assert len(fluid.cpu_places()) == 3
    monkeypatch.delenv("CPU_NUM")
    with pytest.warns(UserWarning, match="CPU_NUM is not set"):
        assert len(fluid.cpu_places()) == 1
    monkeypatch.setenv("CPU_NUM", "zero")
    with pytest.raises(ValueError, match="CPU_NUM must be a positive integer"):
        fluid.cpu_places()


def test_linear_regression_converges():
    x = fluid.layers.data(name="x", shape=[13], dtype="float32")
    y = fluid.layers.data(name="y", shape=[1], dtype="float32")
    pred = fluid.layers.fc(input=x, size=1)
    diff = fluid.layers.elementwise_sub(pred, y)
    avg = fluid.layers.mean(fluid.layers.elementwise_mul(diff, diff))
    fluid.optimizer.SGD(learning_rate=0.05).minimize(avg)
    fluid.default_startup_program().random_seed = 1
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(fluid.default_startup_program())
    rng = np.random.RandomState(0)
    true_w = rng.randn(13, 1).astype("float32")
    first = None
    for _ in range(200):
        xb = rng.randn(32, 13).astype("float32")
        loss, = exe.run(feed={"x": xb, "y": xb @ true_w + 0.5}, fetch_list=[avg])
        first = loss if first is None else first
    assert loss[0] < 1e-4 < first[0]
    w = np.array(fluid.global_scope().find_var("fc_0.w_0").get_tensor())
    np.testing.assert_allclose(w, true_w, atol=1e-2)


def test_feeding_a_torch_tensor_does_not_alias_it_for_persistables():
    x, _, out, loss = build()
    fluid.optimizer.SGD(learning_rate=1.0).minimize(loss)
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(fluid.default_startup_program())
    w = torch.ones(3, 2)
    exe.run(feed={"x": np.ones((2, 3), "float32"), "fc_0.w_0": w}, fetch_list=[loss])
    assert torch.equal(w, torch.ones(3, 2))  # the SGD update went to the scope's copy
    updated = np.array(fluid.global_scope().find_var("fc_0.w_0").get_tensor())
    assert not np.array_equal(updated, np.ones((3, 2), "float32"))


def test_cast_to_the_same_dtype_is_a_copy_not_an_alias():
    """A same-dtype cast of a parameter, fetched after the update, shows the old value."""
    x, _, out, loss = build()
    w = fluid.default_main_program().global_block().var("fc_0.w_0")
    w_cast = fluid.layers.cast(w, "float32")
    fluid.optimizer.SGD(learning_rate=1.0).minimize(loss)
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(fluid.default_startup_program())
    before = np.array(fluid.global_scope().find_var("fc_0.w_0").get_tensor())
    got, after = exe.run(feed={"x": np.ones((2, 3), "float32")}, fetch_list=[w_cast, w])
    assert not np.array_equal(before, after)
    np.testing.assert_array_equal(got, before)


def test_alternating_fetch_lists_reuse_their_plans_and_the_cache_is_bounded():
    from parafluid import executor as executor_module

    exe, (x, _, out, loss) = started()
    feed = {"x": np.ones((2, 3), "float32")}
    exe.run(feed=feed, fetch_list=[loss])
    exe.run(feed=feed, fetch_list=[loss, out])
    plans = dict(exe._cache)
    exe.run(feed=feed, fetch_list=[loss])
    exe.run(feed=feed, fetch_list=[loss, out])
    assert all(exe._cache[k] is v for k, v in plans.items())  # nothing recompiled
    for _ in range(executor_module._MAX_PLANS + 5):
        exe.run(fluid.Program(), feed={}, fetch_list=[])
    assert len(exe._cache) <= executor_module._MAX_PLANS
