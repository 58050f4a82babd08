"""ParallelExecutor API: feeds, fetches, scopes, share_vars_from, errors."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest
import torch

import parafluid as fluid
from parafluid.ops.registry import register_op, same_as

pytestmark = pytest.mark.timeout(60)

RAISE_ON_DEVICE: dict[str, int | None] = {"device": None}


def _maybe_raise(ins: dict, attrs: dict, ctx: Any) -> dict:
    if ctx.device_index == RAISE_ON_DEVICE["device"]:
        raise ValueError("injected failure")
    return {"Out": ins["X"] * 1.0}


register_op("pe_test_maybe_raise", inputs=("X",), outputs=("Out",), infer_shape=same_as("X"),
            kernel=_maybe_raise,
            grad=lambda op, no_grad, ctx: [{"type": "scale",
                                       "inputs": {"X": [op.output("Out")[0] + "@GRAD"]},
                                       "outputs": {"Out": [op.input("X")[0] + "@GRAD"]},
                                       "attrs": {"scale": 1.0}}])


@pytest.fixture(autouse=True)
def two_cpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CPU_NUM", "2")


def regression(extra_op: str | None = None) -> dict[str, Any]:
    """fc(relu) -> fc -> mean squared error, SGD; built in the default programs."""
    fluid.default_main_program().random_seed = 11
    fluid.default_startup_program().random_seed = 11
    x = fluid.layers.data(name="x", shape=[3], dtype="float32")
    y = fluid.layers.data(name="y", shape=[1], dtype="float32")
    h = fluid.layers.fc(input=x, size=4, act="relu")
    if extra_op is not None:
        helper = fluid.layer_helper.LayerHelper(extra_op)
        out = helper.create_variable_for_type_inference("float32")
        helper.append_op(extra_op, inputs={"X": [h]}, outputs={"Out": [out]})
        h = out
    pred = fluid.layers.fc(input=h, size=1)
    loss = fluid.layers.mean(fluid.layers.square(fluid.layers.elementwise_sub(pred, y)))
    test_program = fluid.default_main_program().clone(for_test=True)
    fluid.optimizer.SGD(learning_rate=0.1).minimize(loss)
    fluid.Executor(fluid.CPUPlace()).run(fluid.default_startup_program())
    return {"x": x, "y": y, "h": h, "pred": pred, "loss": loss, "test": test_program}


def data(rows: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.RandomState(seed)
    return {"x": rng.rand(rows, 3).astype("float32"), "y": rng.rand(rows, 1).astype("float32")}


def params() -> dict[str, np.ndarray]:
    scope = fluid.global_scope()
    return {p.name: np.array(scope.find_var(p.name).get_tensor())
            for p in fluid.default_main_program().global_block().all_parameters()}


def scope_holds(scope: fluid.Scope, name: str) -> bool:
    """Whether ``name`` has a value in ``scope`` or any scope below it."""
    v = scope.find_local_var(name)
    if v is not None and v.value is not None:
        return True
    return any(scope_holds(kid, name) for kid in scope.kids())


# ---------------------------------------------------------------------------- devices


def test_cpu_num_unset_warns_and_uses_one_device(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CPU_NUM")
    m = regression()
    with pytest.warns(UserWarning, match="CPU_NUM is not set"):
        pe = fluid.ParallelExecutor(use_cuda=False, loss_name=m["loss"].name)
    assert pe.device_count == 1


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a GPU")
def test_use_cuda_without_gpu_is_a_clear_error() -> None:
    m = regression()
    with pytest.raises(RuntimeError, match="no CUDA device.*use_cuda=False"):
        fluid.ParallelExecutor(use_cuda=True, loss_name=m["loss"].name)


def test_constructor_type_errors() -> None:
    m = regression()
    with pytest.raises(TypeError, match="use_cuda must be a bool"):
        fluid.ParallelExecutor(use_cuda="no")
    with pytest.raises(TypeError, match="share_vars_from must be a ParallelExecutor"):
        fluid.ParallelExecutor(False, share_vars_from=fluid.Executor())
    with pytest.raises(TypeError, match="exec_strategy must be an ExecutionStrategy"):
        fluid.ParallelExecutor(False, exec_strategy=fluid.BuildStrategy())
    with pytest.raises(TypeError, match="main_program must be a Program"):
        fluid.ParallelExecutor(False, main_program="main")
    with pytest.raises(ValueError, match="num_trainers=2 needs the trainers' endpoints"):
        fluid.ParallelExecutor(False, loss_name=m["loss"].name, num_trainers=2, trainer_id=1)
    bs = fluid.BuildStrategy()
    bs.trainers_endpoints = ["127.0.0.1:6170", "127.0.0.1:6171"]
    with pytest.raises(ValueError, match="num_trainers=1 but 2 trainer endpoints"):
        fluid.ParallelExecutor(False, loss_name=m["loss"].name, build_strategy=bs)
    with pytest.raises(ValueError, match="trainer_id must be in 0..1, got 2"):
        fluid.ParallelExecutor(False, loss_name=m["loss"].name, num_trainers=2, trainer_id=2,
                               build_strategy=bs)


def test_missing_loss_name_warns_that_gradients_are_not_aggregated() -> None:
    regression()
    with pytest.warns(UserWarning, match="loss_name is not set"):
        fluid.ParallelExecutor(False)


# ---------------------------------------------------------------------------- feed


def test_dict_feed_splits_with_remainder_on_the_last_device() -> None:
    m = regression()
    pe = fluid.ParallelExecutor(False, loss_name=m["loss"].name)
    feed = data(5)
    xs, = pe.run([m["x"].name], feed=feed, return_merged=False)
    assert [x.shape for x in xs] == [(2, 3), (3, 3)]
    np.testing.assert_array_equal(np.concatenate(xs), feed["x"])
    merged, loss = pe.run([m["x"], m["loss"]], feed=feed)
    np.testing.assert_array_equal(merged, feed["x"])
    assert loss.shape == (2,), "a [1] loss comes back as [device_count]"


def test_dict_feed_of_python_lists_takes_the_variable_dtype() -> None:
    """As in the plain Executor: nested lists are converted to the variable's dtype."""
    m = regression()
    pe = fluid.ParallelExecutor(False, loss_name=m["loss"].name)
    rows = [[1, 2, 3], [4, 5, 6], [7, 8, 9]]
    xs, = pe.run([m["x"]], feed={"x": rows, "y": [[1], [2], [3]]}, return_merged=False)
    assert [x.dtype for x in xs] == [np.float32, np.float32]
    np.testing.assert_array_equal(np.concatenate(xs), np.array(rows, "float32"))


def test_batch_smaller_than_device_count_says_the_numbers_and_the_fix(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CPU_NUM", "4")
    m = regression()
    pe = fluid.ParallelExecutor(False, loss_name=m["loss"].name)
    with pytest.raises(ValueError, match=r"3 rows but there are 4 devices.*drop the last.*"
                                         r"CPU_NUM=3"):
        pe.run([m["loss"]], feed=data(3))


def test_persistable_feed_one_row_or_one_per_device() -> None:
    m = regression()
    gvar = fluid.layers.create_global_var(shape=[1, 1], value=1.0, dtype="float32",
                                          persistable=True, name="gain")
    scaled = fluid.layers.elementwise_mul(m["pred"], gvar)
    fluid.Executor(fluid.CPUPlace()).run(fluid.default_startup_program())
    pe = fluid.ParallelExecutor(False, loss_name=m["loss"].name)
    feed = data(4)
    for gain, per_device in ((np.full([1, 1], 3.0, "float32"), [3.0, 3.0]),
                             (np.array([[2.0], [5.0]], "float32"), [2.0, 5.0])):
        pred, out, g = pe.run([m["pred"], scaled, "gain"], feed=dict(feed, gain=gain),
                              return_merged=False)
        assert [v.item() for v in g] == per_device  # 1 row: copied; n rows: one each
        for d in range(2):
            np.testing.assert_allclose(out[d], pred[d] * per_device[d], rtol=1e-6)
    with pytest.raises(ValueError, match="persistable variable is fed with 3 rows on 2 devices"):
        pe.run([scaled], feed=dict(feed, gain=np.ones([3, 1], "float32")))


def test_list_feed_one_dict_per_device() -> None:
    m = regression()
    pe = fluid.ParallelExecutor(False, loss_name=m["loss"].name)
    a, b = data(10), data(9, seed=1)
    xs, = pe.run([m["x"]], feed=[a, b], return_merged=False)
    assert [x.shape for x in xs] == [(10, 3), (9, 3)]
    with pytest.raises(ValueError, match="got 3 dicts for 2 devices"):
        pe.run([m["loss"]], feed=[a, b, a])
    with pytest.raises(TypeError, match=r"feed\[1\] must be a dict"):
        pe.run([m["loss"]], feed=[a, [b["x"], b["y"]]])
    with pytest.raises(ValueError, match=r"feed\[1\] feeds \['x'\]"):
        pe.run([m["loss"]], feed=[a, {"x": b["x"]}])
    with pytest.raises(ValueError, match="feed must be a dict"):
        pe.run([m["loss"]], feed=(x for x in [a, b]))


def test_feed_errors_name_the_variable() -> None:
    m = regression()
    pe = fluid.ParallelExecutor(False, loss_name=m["loss"].name)
    with pytest.raises(ValueError, match="'xx' is not a variable.*did you mean 'x'"):
        pe.run([m["loss"]], feed={"xx": data(4)["x"], "y": data(4)["y"]})
    with pytest.raises(TypeError, match="'x' must be 'float32', but received 'float64'"):
        pe.run([m["loss"]], feed={"x": data(4)["x"].astype("float64"), "y": data(4)["y"]})
    with pytest.raises(ValueError, match="fetch target 'nope'"):
        pe.run(["nope"], feed=data(4))
    with pytest.warns(DeprecationWarning, match="feed_dict is deprecated"):
        pe.run([m["loss"]], feed_dict=data(4))


def test_fetch_formats() -> None:
    m = regression()
    pe = fluid.ParallelExecutor(False, loss_name=m["loss"].name)
    loss, = pe.run([m["loss"]], feed=data(4), return_numpy=False)
    assert isinstance(loss, fluid.LoDTensor) and np.array(loss).shape == (2,)
    per_dev, = pe.run([m["loss"]], feed=data(4), return_merged=False)
    assert len(per_dev) == 2 and all(v.shape == (1,) for v in per_dev)


# ---------------------------------------------------------------------------- scopes


def test_test_executor_with_share_vars_from_sees_trained_parameters() -> None:
    m = regression()
    train = fluid.ParallelExecutor(False, loss_name=m["loss"].name)
    test = fluid.ParallelExecutor(False, main_program=m["test"], share_vars_from=train)
    with pytest.raises(RuntimeError, match="share_vars_from names an executor that has not "
                                           "run yet"):
        test.run([m["loss"]], feed=data(4))
    for step in range(3):
        train.run([m["loss"]], feed=data(4, seed=step))
    got, = test.run([m["loss"]], feed=data(6, seed=9))
    # device 0's scope is the global scope: the single-device executor sees the same params
    exe = fluid.Executor(fluid.CPUPlace())
    test_data = data(6, seed=9)
    want = [exe.run(m["test"], feed={k: v[i:j] for k, v in test_data.items()},
                    fetch_list=[m["loss"]])[0] for i, j in ((0, 3), (3, 6))]
    np.testing.assert_allclose(got, np.concatenate(want), atol=1e-6)
    fresh = fluid.ParallelExecutor(False, main_program=m["test"], scope=fluid.Scope())
    with pytest.raises(RuntimeError, match="not initialized in the scope"):
        fresh.run([m["loss"]], feed=data(4))


def test_share_vars_from_keeps_each_device_own_persistable_state() -> None:
    """batch_norm's moving statistics differ per device; a test executor must not overwrite
    device 1's with device 0's (it used to, on its first run, since it had not seen the
    source's copies)."""
    x = fluid.layers.data(name="x", shape=[4], dtype="float32")
    h = fluid.layers.batch_norm(fluid.layers.fc(input=x, size=3))
    loss = fluid.layers.mean(h)
    test_program = fluid.default_main_program().clone(for_test=True)
    fluid.optimizer.SGD(learning_rate=0.1).minimize(loss)
    fluid.Executor(fluid.CPUPlace()).run(fluid.default_startup_program())
    train = fluid.ParallelExecutor(False, loss_name=loss.name)
    test = fluid.ParallelExecutor(False, main_program=test_program, share_vars_from=train)
    rng = np.random.RandomState(0)
    xb = np.concatenate([rng.rand(4, 4), 10 * rng.rand(4, 4)]).astype("float32")
    train.run([loss], feed={"x": xb})
    stats = [v.name for v in test_program.list_vars()
             if v.persistable and v.name.startswith("batch_norm") and v.name.endswith(("w_1",
                                                                                       "w_2"))]
    assert len(stats) == 2
    dev1 = train._scopes.scopes[1]
    before = {n: np.array(dev1.find_var(n).get_tensor()) for n in stats}
    assert not np.allclose(before[stats[0]],
                           np.array(fluid.global_scope().find_var(stats[0]).get_tensor()))
    preds, = test.run([h], feed={"x": xb}, return_merged=False)
    for n in stats:
        np.testing.assert_array_equal(np.array(dev1.find_var(n).get_tensor()), before[n])
    # device 1 normalizes its shard with its own moving statistics
    mean, var = (np.array(dev1.find_var(n).get_tensor()) for n in stats)
    scope = fluid.global_scope()
    w, b = (np.array(scope.find_var(n).get_tensor()) for n in ("fc_0.w_0", "fc_0.b_0"))
    z = xb[4:] @ w + b
    want = (z - mean) / np.sqrt(var + 1e-5) * np.array(
        scope.find_var("batch_norm_0.w_0").get_tensor()) + np.array(
        scope.find_var("batch_norm_0.b_0").get_tensor())
    np.testing.assert_allclose(preds[1], want, rtol=1e-4, atol=1e-5)


def test_drop_local_exe_scopes_drops_temporaries() -> None:
    m = regression()
    pe = fluid.ParallelExecutor(False, loss_name=m["loss"].name)
    tmp = m["h"].name
    scope = fluid.global_scope()
    pe.run([m["loss"]], feed=data(4))
    assert scope_holds(scope, tmp)
    pe.drop_local_exe_scopes()
    assert not scope_holds(scope, tmp)
    assert scope_holds(scope, "fc_0.w_0"), "parameters stay"


def test_num_iteration_per_drop_scope() -> None:
    m = regression()
    es = fluid.ExecutionStrategy()
    es.num_iteration_per_drop_scope = 2
    pe = fluid.ParallelExecutor(False, loss_name=m["loss"].name, exec_strategy=es)
    scope, tmp = fluid.global_scope(), m["h"].name
    seen = []
    for _ in range(4):
        pe.run([m["loss"]], feed=data(4))
        seen.append(scope_holds(scope, tmp))
    assert seen == [True, False, True, False]


def test_num_iteration_per_run_runs_the_graph_n_times() -> None:
    m = regression()
    start = params()
    pe1 = fluid.ParallelExecutor(False, loss_name=m["loss"].name)
    losses = [pe1.run([m["loss"]], feed=data(4))[0] for _ in range(3)]
    after_three = params()
    for name, value in start.items():  # reset
        fluid.global_scope().find_var(name).get_tensor().set(value, fluid.CPUPlace())
    es = fluid.ExecutionStrategy()
    es.num_iteration_per_run = 3
    pe3 = fluid.ParallelExecutor(False, loss_name=m["loss"].name, exec_strategy=es)
    last, = pe3.run([m["loss"]], feed=data(4))
    np.testing.assert_array_equal(last, losses[-1])
    for name, value in params().items():
        np.testing.assert_array_equal(value, after_three[name])


# ---------------------------------------------------------------------------- errors


@pytest.mark.parametrize("num_threads", [1, 4])
def test_op_raising_mid_run_is_reported_and_the_executor_stays_usable(num_threads: int) -> None:
    m = regression(extra_op="pe_test_maybe_raise")
    es = fluid.ExecutionStrategy()
    es.num_threads = num_threads
    pe = fluid.ParallelExecutor(False, loss_name=m["loss"].name, exec_strategy=es)
    RAISE_ON_DEVICE["device"] = 1
    try:
        with pytest.raises(fluid.OpRunError) as info:
            pe.run([m["loss"]], feed=data(4))
    finally:
        RAISE_ON_DEVICE["device"] = None
    msg = str(info.value)
    assert "pe_test_maybe_raise" in msg and "on device 1" in msg
    assert "test_parallel_executor.py" in msg, "the user's line that built the op"
    assert "ValueError: injected failure" in msg
    assert isinstance(info.value.__cause__, ValueError)
    # the failed run's values (feeds, activations) are not kept: a caller that retries after,
    # say, an out-of-memory error gets that memory back
    assert all(not env for plan in pe._plans.values() for env in plan.envs)
    loss, = pe.run([m["loss"]], feed=data(4))
    assert loss.shape == (2,) and np.isfinite(loss).all()


# ---------------------------------------------------------------------------- strategies


def test_strategy_is_finalized_once_used() -> None:
    m = regression()
    bs = fluid.BuildStrategy()
    fluid.ParallelExecutor(False, loss_name=m["loss"].name, build_strategy=bs)
    with pytest.raises(RuntimeError, match="already used to build an executor"):
        bs.memory_optimize = True


def test_strategy_stays_editable_when_the_executor_could_not_be_built() -> None:
    m = regression()
    bs, es = fluid.BuildStrategy(), fluid.ExecutionStrategy()
    with pytest.raises(ValueError, match="loss_name 'nope' is not a variable"):
        fluid.ParallelExecutor(False, loss_name="nope", build_strategy=bs, exec_strategy=es)
    bs.memory_optimize = True  # no executor was built: the user may fix and retry
    es.num_threads = 1
    pe = fluid.ParallelExecutor(False, loss_name=m["loss"].name, build_strategy=bs,
                                exec_strategy=es)
    assert pe.run([m["loss"]], feed=data(4))[0].shape == (2,)


def _train(build_fields: dict[str, Any], steps: int = 3, **exec_fields: Any) -> tuple:
    """Train the regression model in fresh programs and a fresh global scope."""
    fluid.framework.switch_main_program(fluid.Program())
    fluid.framework.switch_startup_program(fluid.Program())
    m = regression()
    bs = fluid.BuildStrategy()
    for k, v in build_fields.items():
        setattr(bs, k, v)
    es = fluid.ExecutionStrategy()
    for k, v in exec_fields.items():
        setattr(es, k, v)
    pe = fluid.ParallelExecutor(False, loss_name=m["loss"].name, build_strategy=bs,
                                exec_strategy=es)
    losses = [pe.run([m["loss"]], feed=data(6, seed=s))[0] for s in range(steps)]
    return losses, params(), pe, m


@pytest.mark.parametrize("fields", [{"memory_optimize": True}, {"enable_inplace": True},
                                    {"enable_sequential_execution": True},
                                    {"memory_optimize": True, "enable_inplace": True}],
                         ids=["memory_optimize", "inplace", "sequential", "both"])
def test_optimizations_do_not_change_results(fields: dict[str, Any]) -> None:
    with fluid.unique_name.guard(), fluid.scope_guard(fluid.Scope()):
        base_losses, base_params, _, _ = _train({})
    with fluid.unique_name.guard():
        losses, got, pe, m = _train(fields, num_threads=2)
    for a, b in zip(base_losses, losses):
        np.testing.assert_array_equal(a, b)
    for name, value in base_params.items():
        np.testing.assert_array_equal(value, got[name])
    plan = next(iter(pe._plans.values()))
    if fields.get("memory_optimize"):
        assert not scope_holds(fluid.global_scope(), m["h"].name), "freed after its last use"
        assert scope_holds(fluid.global_scope(), m["loss"].name), "fetched: kept"
    if fields.get("enable_inplace"):
        assert plan.inplace_nodes, "relu writes into its dead pre-activation input"


def test_enable_inplace_warns_when_nothing_qualifies() -> None:
    x = fluid.layers.data(name="x", shape=[3], dtype="float32")
    out = fluid.layers.fc(input=x, size=2)
    bs = fluid.BuildStrategy()
    bs.enable_inplace = True
    pe = fluid.ParallelExecutor(False, build_strategy=bs)
    fluid.Executor().run(fluid.default_startup_program())
    with pytest.warns(UserWarning, match="enable_inplace has no effect on this program"):
        pe.run([out], feed={"x": np.ones([2, 3], "float32")})


def test_fields_that_cannot_apply_warn() -> None:
    m = regression()
    bs = fluid.BuildStrategy()
    bs.reduce_strategy = fluid.BuildStrategy.ReduceStrategy.Reduce
    bs.fuse_all_reduce_ops = True
    bs.fuse_all_optimizer_ops = True
    es = fluid.ExecutionStrategy()
    es.allow_op_delay = True
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fluid.ParallelExecutor(False, loss_name=m["loss"].name, build_strategy=bs,
                               exec_strategy=es)
    text = "\n".join(str(w.message) for w in caught)
    assert "fuse_all_reduce_ops has no effect in Reduce mode" in text
    assert "fuse_all_optimizer_ops has no effect" in text
    assert "allow_op_delay has no effect" in text


def test_debug_graphviz_path_writes_both_graphs(tmp_path: Any) -> None:
    import shutil

    m = regression()
    bs = fluid.BuildStrategy()
    bs.debug_graphviz_path = str(tmp_path / "g")
    fluid.ParallelExecutor(False, loss_name=m["loss"].name, build_strategy=bs)
    original = (tmp_path / "g_original.dot").read_text()
    multi = (tmp_path / "g_multi_devices.dot").read_text()
    assert original.startswith("digraph program") and "mul" in original
    assert multi.startswith("digraph multi_devices") and "c_allreduce_sum" in multi
    assert "style=dashed" in multi, "write-after-read control edges"
    if shutil.which("dot"):
        assert (tmp_path / "g_multi_devices.svg").exists()


# ---------------------------------------------------------------------------- CompiledProgram


def test_compiled_program_through_executor_run() -> None:
    m = regression()
    main = fluid.default_main_program()
    exe = fluid.Executor(fluid.CPUPlace())
    compiled = fluid.CompiledProgram(main).with_data_parallel(loss_name=m["loss"].name)
    loss, = exe.run(compiled, feed=data(4), fetch_list=[m["loss"]])
    assert loss.shape == (2,)
    loss, = exe.run(compiled, feed=[data(2), data(3)], fetch_list=[m["loss"]])
    assert loss.shape == (2,)
    with pytest.raises(ValueError, match="compiled for another scope"):
        exe.run(compiled, feed=data(4), fetch_list=[m["loss"]], scope=fluid.Scope())
    with pytest.raises(RuntimeError, match="already called"):
        compiled.with_data_parallel(loss_name=m["loss"].name)
    with pytest.raises(TypeError, match="share_vars_from must be a CompiledProgram"):
        fluid.CompiledProgram(m["test"]).with_data_parallel(share_vars_from=object())
    test = fluid.CompiledProgram(m["test"]).with_data_parallel(share_vars_from=compiled,
                                                               places=fluid.cpu_places(2))
    got, = exe.run(test, feed=data(4), fetch_list=[m["loss"]])
    assert got.shape == (2,)
    single = fluid.CompiledProgram(m["test"])
    got, = exe.run(single, feed=data(4), fetch_list=[m["loss"]])
    assert got.shape == (1,), "without with_data_parallel: the executor's place only"


# ---------------------------------------------------------------------------- threading

THREAD_LOG: list[tuple[int, int]] = []
BARRIER: dict[str, Any] = {}


def _meet(ins: dict, attrs: dict, ctx: Any) -> dict:

    THREAD_LOG.append((ctx.device_index, torch.get_num_threads()))
    BARRIER["b"].wait(timeout=10)  # passes only if both devices' ops run at the same time
    return {"Out": ins["X"] * 1.0}


register_op("pe_test_meet", inputs=("X",), outputs=("Out",), infer_shape=same_as("X"),
            kernel=_meet)


def test_two_cpu_devices_run_side_by_side_with_one_torch_thread_each() -> None:
    import os
    import threading

    x = fluid.layers.data(name="x", shape=[3], dtype="float32")
    helper = fluid.layer_helper.LayerHelper("meet")
    out = helper.create_variable_for_type_inference("float32")
    helper.append_op("pe_test_meet", inputs={"X": [x]}, outputs={"Out": [out]})
    before = torch.get_num_threads()
    es = fluid.ExecutionStrategy()
    es.num_threads = 2  # what num_threads=0 picks on a machine with >= 2 cores
    pe = fluid.ParallelExecutor(False, exec_strategy=es)
    BARRIER["b"] = threading.Barrier(2)
    THREAD_LOG.clear()
    pe.run([out], feed={"x": np.ones([2, 3], "float32")})
    cores = os.cpu_count() or 1
    assert sorted(d for d, _ in THREAD_LOG) == [0, 1]
    assert all(n == max(1, cores // 2) for _, n in THREAD_LOG), THREAD_LOG
    assert torch.get_num_threads() == before, "the caller's torch threads are untouched"
    pe.close()


def test_values_replaced_in_the_scope_reach_every_device() -> None:
    """A checkpoint loaded (or a tensor set) after the first run is used by all devices."""
    m = regression()
    pe = fluid.ParallelExecutor(False, main_program=m["test"])
    feed = data(4)
    pe.run([m["pred"]], feed=feed)
    scope = fluid.global_scope()
    for p in m["test"].global_block().all_parameters():
        value = np.array(scope.find_var(p.name).get_tensor())
        scope.find_var(p.name).get_tensor().set(np.full_like(value, 0.5), fluid.CPUPlace())
    preds, = pe.run([m["pred"]], feed=feed, return_merged=False)
    h = np.maximum(feed["x"] @ np.full([3, 4], 0.5) + 0.5, 0)
    want = h @ np.full([4, 1], 0.5) + 0.5
    np.testing.assert_allclose(np.concatenate(preds), want, rtol=1e-6)
