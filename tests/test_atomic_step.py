"""A training step happens whole or not at all.

An op that fails, the NaN/Inf check, or Ctrl-C at any moment leaves every persistable of
every device as before the step (or, for a Ctrl-C that lands once the updates ran, as after
it), the replicas equal, and the next step gives what an executor that never failed gives.
"""

from __future__ import annotations

import _thread
import random
import signal
import threading
import time
import warnings
from typing import Any

import numpy as np
import pytest
import torch

import parafluid as fluid
from parafluid.ops.registry import register_op, same_as

pytestmark = pytest.mark.timeout(120)

# ------------------------------------------------------------------ test-only ops

FAIL: dict[str, Any] = {"device": None}


def _fail_on(ins: dict, attrs: dict, ctx: Any) -> dict:
    if FAIL["device"] is not None and ctx.device_index == FAIL["device"]:
        raise ValueError("injected evaluation failure")
    return {"Out": ins["X"] * 1.0}


register_op("atomic_test_eval", inputs=("X",), outputs=("Out",), infer_shape=same_as("X"),
            kernel=_fail_on)

SIGNAL_AT: dict[str, Any] = {"on": False}


def _interrupt(ins: dict, attrs: dict, ctx: Any) -> dict:
    # a Ctrl-C arriving while this op runs (Python delivers it on the main thread)
    if SIGNAL_AT["on"]:
        _thread.interrupt_main(signal.SIGINT)
        time.sleep(0.01)  # give the main thread the chance to act on it mid-step
    return {"Out": ins["X"] * 1.0}


register_op("atomic_test_interrupt", inputs=("X",), outputs=("Out",), infer_shape=same_as("X"),
            kernel=_interrupt)


def _tail_update(ins: dict, attrs: dict, ctx: Any) -> dict:
    # an update op (writes a persistable in place) that fails on one device
    if FAIL["device"] is not None and ctx.device_index == FAIL["device"]:
        raise RuntimeError("injected update failure")
    ins["X"].add_(1.0)
    return {"Out": ins["X"]}


register_op("atomic_test_tail_update", inputs=("X",), outputs=("Out",),
            infer_shape=same_as("X"), kernel=_tail_update)


POINT: dict[str, Any] = {"at": None}  # (point id, device) that fails


def _point(ins: dict, attrs: dict, ctx: Any) -> dict:
    if POINT["at"] == (attrs["point"], ctx.device_index):
        raise RuntimeError(f"injected failure at point {attrs['point']}")
    return {"Out": ins["X"] * 1.0}


def _point_grad(op: Any, no_grad: Any, ctx: Any) -> list[dict]:
    # the gradient is a failure point of the backward pass
    return [{"type": "atomic_test_point", "inputs": {"X": [op.output("Out")[0] + "@GRAD"]},
             "outputs": {"Out": [op.input("X")[0] + "@GRAD"]},
             "attrs": {"point": op.attrs["point"] + 100}}]


register_op("atomic_test_point", inputs=("X",), outputs=("Out",), attrs={"point": 0},
            infer_shape=same_as("X"), kernel=_point, grad=_point_grad)


@pytest.fixture(autouse=True)
def two_cpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CPU_NUM", "2")
    monkeypatch.delenv("FLAGS_check_nan_inf", raising=False)
    FAIL["device"] = None
    SIGNAL_AT["on"] = False
    POINT["at"] = None


def _append(op_type: str, x: Any, attrs: dict | None = None) -> Any:
    helper = fluid.layer_helper.LayerHelper(op_type)
    out = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op(op_type, inputs={"X": [x]}, outputs={"Out": [out]}, attrs=attrs or {})
    return out


def build(eval_after: bool = False, lr_decay: bool = False, interrupt_in: str = "",
          tail_update: bool = False, points: bool = False) -> dict[str, Any]:
    """fc(relu) -> fc -> squared error, Adam (in-place moments, beta-pow accumulators).

    eval_after: an evaluation op after minimize (fails on FAIL["device"]);
    lr_decay: a learning-rate schedule (a step counter written at the start of the step);
    interrupt_in: "forward" or "tail": an op there raises SIGINT while SIGNAL_AT["on"];
    tail_update: a last update op that fails on FAIL["device"];
    points: failure points (POINT) after each layer, and their gradients in the backward.
    """
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 5
    with fluid.program_guard(main, startup):
        x = fluid.layers.data(name="x", shape=[6], dtype="float32")
        y = fluid.layers.data(name="y", shape=[1], dtype="float32")
        h = fluid.layers.fc(input=x, size=8, act="relu")
        if points:
            h = _append("atomic_test_point", h, {"point": 1})
        if interrupt_in == "forward":
            h = _append("atomic_test_interrupt", h)
        pred = fluid.layers.fc(input=h, size=1)
        if points:
            pred = _append("atomic_test_point", pred, {"point": 2})
        loss = fluid.layers.mean(fluid.layers.square(fluid.layers.elementwise_sub(pred, y)))
        lr = fluid.layers.exponential_decay(0.05, decay_steps=2, decay_rate=0.5) \
            if lr_decay else 0.05
        fluid.optimizer.Adam(learning_rate=lr).minimize(loss)
        block = main.global_block()
        if eval_after:
            _append("atomic_test_eval", pred)
        if interrupt_in == "tail":
            # an update op in the middle of the update tail raising SIGINT; another update
            # follows it
            flag = fluid.layers.create_global_var(shape=[1], value=0.0, dtype="float32",
                                                  persistable=True, name="tail_flag")
            block.append_op("atomic_test_interrupt", inputs={"X": [flag]},
                            outputs={"Out": [flag]})
        if tail_update or interrupt_in == "tail":
            counter = fluid.layers.create_global_var(shape=[1], value=0.0, dtype="float32",
                                                     persistable=True, name="tail_counter")
            block.append_op("atomic_test_tail_update", inputs={"X": [counter]},
                            outputs={"Out": [counter]})
    return {"main": main, "startup": startup, "loss": loss, "pred": pred}


def batch(seed: int, rows: int = 8) -> dict[str, np.ndarray]:
    rng = np.random.RandomState(seed)
    return {"x": rng.uniform(-1, 1, (rows, 6)).astype("float32"),
            "y": rng.uniform(-1, 1, (rows, 1)).astype("float32")}


def persistables(scope: fluid.Scope, program: Any) -> dict[str, np.ndarray]:
    out = {}
    for var in program.list_vars():
        if var.persistable:
            holder = scope.find_var(var.name)
            if holder is not None and holder.value is not None:
                out[var.name] = np.array(holder.value.detach().cpu().numpy(), copy=True)
    return out


def device_state(pe: fluid.ParallelExecutor, program: Any) -> list[dict[str, np.ndarray]]:
    """Every device's own view of the persistables (device d > 0: its local copies)."""
    return [persistables(s, program) for s in pe._scopes.scopes]


def same(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> bool:
    return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


def make_pe(m: dict[str, Any], scope: fluid.Scope, threads: int = 2) -> fluid.ParallelExecutor:
    es = fluid.ExecutionStrategy()
    es.num_threads = threads
    fluid.Executor(fluid.CPUPlace()).run(m["startup"], scope=scope)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fluid.ParallelExecutor(False, loss_name=m["loss"].name, main_program=m["main"],
                                      scope=scope, exec_strategy=es)


# ------------------------------------------------------------------ Executor


def test_executor_failure_after_the_optimizer_leaves_every_persistable_as_before() -> None:
    m = build(eval_after=True, lr_decay=True)
    scope, ref_scope = fluid.Scope(), fluid.Scope()
    # NOTE: one executor per scope: a seeded random op continues its sequence on a rerun
    exe, ref = fluid.Executor(fluid.CPUPlace()), fluid.Executor(fluid.CPUPlace())
    exe.run(m["startup"], scope=scope)
    ref.run(m["startup"], scope=ref_scope)
    for k in range(2):  # the first run of a plan and a later one
        exe.run(m["main"], feed=batch(k), fetch_list=[m["loss"]], scope=scope)
        ref.run(m["main"], feed=batch(k), fetch_list=[m["loss"]], scope=ref_scope)
    before = persistables(scope, m["main"])
    assert any("moment" in n for n in before) and any("beta1_pow" in n for n in before)
    FAIL["device"] = 0
    with pytest.raises(fluid.OpRunError, match="atomic_test_eval"):
        exe.run(m["main"], feed=batch(7), fetch_list=[m["loss"]], scope=scope)
    FAIL["device"] = None
    after = persistables(scope, m["main"])
    assert same(after, before), [n for n in before if not np.array_equal(before[n], after[n])]
    # the next step is the step of an executor that never failed
    got, = exe.run(m["main"], feed=batch(3), fetch_list=[m["loss"]], scope=scope)
    want, = ref.run(m["main"], feed=batch(3), fetch_list=[m["loss"]], scope=ref_scope)
    np.testing.assert_array_equal(got, want)
    assert same(persistables(scope, m["main"]), persistables(ref_scope, m["main"]))


def test_ctrl_c_in_the_forward_pass_undoes_the_step_counter() -> None:
    m = build(lr_decay=True, interrupt_in="forward")
    scope = fluid.Scope()
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(m["startup"], scope=scope)
    exe.run(m["main"], feed=batch(0), fetch_list=[m["loss"]], scope=scope)
    before = persistables(scope, m["main"])
    SIGNAL_AT["on"] = True
    with pytest.raises(KeyboardInterrupt):
        exe.run(m["main"], feed=batch(1), fetch_list=[m["loss"]], scope=scope)
    SIGNAL_AT["on"] = False
    assert same(persistables(scope, m["main"]), before)


def test_ctrl_c_among_the_updates_lands_after_every_update() -> None:
    m = build(interrupt_in="tail")
    scope, ref_scope = fluid.Scope(), fluid.Scope()
    exe, ref = fluid.Executor(fluid.CPUPlace()), fluid.Executor(fluid.CPUPlace())
    for e, s in ((exe, scope), (ref, ref_scope)):
        e.run(m["startup"], scope=s)
        e.run(m["main"], feed=batch(0), fetch_list=[m["loss"]], scope=s)
    SIGNAL_AT["on"] = True
    with pytest.raises(KeyboardInterrupt):
        exe.run(m["main"], feed=batch(1), fetch_list=[m["loss"]], scope=scope)
    SIGNAL_AT["on"] = False
    ref.run(m["main"], feed=batch(1), fetch_list=[m["loss"]], scope=ref_scope)
    # the step happened whole: the updates after the interrupting op ran too
    state = persistables(scope, m["main"])
    assert state["tail_counter"][0] == 2.0
    assert same(state, persistables(ref_scope, m["main"]))


def test_a_sigint_handler_of_the_program_runs_after_the_whole_step() -> None:
    m = build(lr_decay=True, interrupt_in="forward")
    scope, ref_scope = fluid.Scope(), fluid.Scope()
    exe, ref = fluid.Executor(fluid.CPUPlace()), fluid.Executor(fluid.CPUPlace())
    for e, s in ((exe, scope), (ref, ref_scope)):
        e.run(m["startup"], scope=s)
    seen: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: seen.append(signum))
    try:
        SIGNAL_AT["on"] = True
        exe.run(m["main"], feed=batch(1), fetch_list=[m["loss"]], scope=scope)
        SIGNAL_AT["on"] = False
        assert seen == [signal.SIGINT]  # called once, after the step
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        SIGNAL_AT["on"] = True
        exe.run(m["main"], feed=batch(2), fetch_list=[m["loss"]], scope=scope)  # ignored
    finally:
        SIGNAL_AT["on"] = False
        signal.signal(signal.SIGINT, previous)
    assert signal.getsignal(signal.SIGINT) is previous
    for k in (1, 2):
        ref.run(m["main"], feed=batch(k), fetch_list=[m["loss"]], scope=ref_scope)
    assert same(persistables(scope, m["main"]), persistables(ref_scope, m["main"]))


# ------------------------------------------------------------------ ParallelExecutor


@pytest.mark.parametrize("threads", [1, 2])
def test_parallel_failure_on_one_device_keeps_the_replicas_equal(threads: int) -> None:
    m = build(eval_after=True)
    scope, ref_scope = fluid.Scope(), fluid.Scope()
    pe, ref = make_pe(m, scope, threads), make_pe(m, ref_scope, threads)
    for k in range(2):
        pe.run([m["loss"]], feed=batch(k))
        ref.run([m["loss"]], feed=batch(k))
    before = device_state(pe, m["main"])
    FAIL["device"] = 1
    with pytest.raises(fluid.OpRunError, match="on device 1"):
        pe.run([m["loss"]], feed=batch(5))
    FAIL["device"] = None
    after = device_state(pe, m["main"])
    for d in range(2):
        assert same(after[d], before[d]), f"device {d} kept part of the failed step"
    assert pe.check_replicas() > 0
    got, = pe.run([m["loss"]], feed=batch(2))
    want, = ref.run([m["loss"]], feed=batch(2))
    np.testing.assert_array_equal(got, want)
    for a, b in zip(device_state(pe, m["main"]), device_state(ref, m["main"])):
        assert same(a, b)


def test_an_update_op_failing_on_its_first_run_is_undone_on_every_device() -> None:
    m = build(tail_update=True)
    scope = fluid.Scope()
    pe = make_pe(m, scope)
    before = device_state(make_pe(m, fluid.Scope()), m["main"])[0]  # fresh startup values
    FAIL["device"] = 1
    with pytest.raises(fluid.OpRunError, match="atomic_test_tail_update.*on device 1"):
        pe.run([m["loss"]], feed=batch(0))
    FAIL["device"] = None
    for state in device_state(pe, m["main"]):
        assert same(state, before)
    pe.check_replicas()


def test_an_update_op_failing_on_a_later_run_says_the_step_is_partly_applied() -> None:
    # the one case not undone (an update kernel out of memory, say): the error says so and
    # check_replicas finds the devices apart
    m = build(tail_update=True)
    pe = make_pe(m, fluid.Scope())
    pe.run([m["loss"]], feed=batch(0))
    FAIL["device"] = 1
    with pytest.raises(fluid.OpRunError) as info:
        pe.run([m["loss"]], feed=batch(1))
    FAIL["device"] = None
    assert "the step may be partly applied" in "\n".join(info.value.__notes__)
    with pytest.raises(RuntimeError, match="'tail_counter' on device 1 differs"):
        pe.check_replicas()


def test_check_replicas_names_a_device_copy_that_differs() -> None:
    m = build()
    scope = fluid.Scope()
    pe = make_pe(m, scope)
    pe.run([m["loss"]], feed=batch(0))
    assert pe.check_replicas() >= 4
    name = m["main"].global_block().all_parameters()[0].name
    pe._scopes.scopes[1].find_local_var(name).value.add_(0.5)
    with pytest.raises(RuntimeError, match=rf"'{name}' on device 1 differs from device 0 "
                                           r"\(largest difference 0.5\)"):
        pe.check_replicas()


POINTS = [(p, d) for p in (1, 2, 101, 102) for d in (0, 1)]


def _attempt(pe: fluid.ParallelExecutor, m: dict[str, Any], feed: dict[str, np.ndarray],
             rng: random.Random, run_s: float) -> str:
    """One run failed (an op raising on one device, forward or backward) or interrupted
    (Ctrl-C at a random moment); returns what happened."""
    if rng.random() < 0.5:
        POINT["at"] = rng.choice(POINTS)
        try:
            pe.run([m["loss"]], feed=feed)
            return "completed"
        except fluid.OpRunError:
            return "failed"
        finally:
            POINT["at"] = None
    timer = threading.Timer(rng.uniform(0.0, run_s), _thread.interrupt_main)
    outcome = "completed"
    try:
        try:
            timer.start()
            pe.run([m["loss"]], feed=feed)
        finally:
            timer.cancel()
            timer.join()
        for _ in range(100):  # an interrupt that fired at the very end lands here
            pass
    except KeyboardInterrupt:
        outcome = "interrupted"
    return outcome


@pytest.mark.parametrize("threads", [2, 8])
@pytest.mark.parametrize("program", ["updates_last", "eval_after"])
def test_randomly_failed_and_interrupted_runs_never_split_the_replicas(
        threads: int, program: str) -> None:
    """50 runs per case (200 in all) fail or get Ctrl-C at random points; after each the
    devices agree and hold either the state before or after the step, and the next step is
    the step of an executor that never failed. With the updates last they form the update
    tail; with an evaluation op after them every update is recorded in the undo log."""
    rng = random.Random(1234 + threads + len(program))
    eval_after = program == "eval_after"
    m = build(lr_decay=True, points=True, eval_after=eval_after)
    scope, ref_scope = fluid.Scope(), fluid.Scope()
    pe, ref = make_pe(m, scope, threads), make_pe(m, ref_scope, threads)
    pe.run([m["loss"]], feed=batch(0))
    ref.run([m["loss"]], feed=batch(0))
    plan = next(iter(pe._plans.values()))
    assert bool(plan.tail_nodes) != eval_after and plan.recorded_nodes
    start = time.perf_counter()
    for _ in range(5):
        pe.run([m["loss"]], feed=batch(1))
        ref.run([m["loss"]], feed=batch(1))
    run_s = (time.perf_counter() - start) / 10
    outcomes: dict[str, int] = {}
    for trial in range(50):
        feed = batch(100 + trial)
        before = device_state(pe, m["main"])
        outcome = _attempt(pe, m, feed, rng, run_s)
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
        after = device_state(pe, m["main"])
        for d in range(1, len(after)):
            assert same(after[d], after[0]), f"trial {trial} ({outcome}): device {d} differs"
        if same(after[0], before[0]):
            assert outcome != "completed"
        else:  # the step happened whole (a Ctrl-C after the updates, or no failure at all)
            ref.run([m["loss"]], feed=feed)
            want_state = device_state(ref, m["main"])[0]
            differ = [n for n in want_state if not np.array_equal(after[0].get(n), want_state[n])]
            assert not differ, f"trial {trial} ({outcome}): a part of the step: {differ}"
        got, = pe.run([m["loss"]], feed=batch(trial))
        want, = ref.run([m["loss"]], feed=batch(trial))
        np.testing.assert_array_equal(got, want, err_msg=f"trial {trial} ({outcome})")
    # (about 25 failures and 10 to 20 interrupts; the bounds only keep the test from
    # passing with nothing failed or interrupted, even on a loaded machine)
    assert outcomes.get("failed", 0) >= 8 and outcomes.get("interrupted", 0) >= 2, outcomes


# ------------------------------------------------------------------ NaN/Inf check


def nan_program() -> dict[str, Any]:
    """log(x) of a fed x: a negative x gives NaN in the forward pass."""
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 2
    with fluid.program_guard(main, startup):
        x = fluid.layers.data(name="x", shape=[6], dtype="float32")
        y = fluid.layers.data(name="y", shape=[1], dtype="float32")
        h = fluid.layers.fc(input=fluid.layers.log(x), size=1)
        loss = fluid.layers.mean(fluid.layers.square(fluid.layers.elementwise_sub(h, y)))
        fluid.optimizer.Adam(0.01).minimize(loss)
    return {"main": main, "startup": startup, "loss": loss}


def positive(seed: int, sign: float = 1.0) -> dict[str, np.ndarray]:
    feed = batch(seed)
    feed["x"] = (np.abs(feed["x"]) + 0.1) * sign
    return feed


@pytest.mark.parametrize("how", ["env", "core.globals", "option"])
def test_check_nan_inf_names_the_first_op_and_variable_before_any_update(
        how: str, monkeypatch: pytest.MonkeyPatch) -> None:
    m = nan_program()
    scope = fluid.Scope()
    exe = fluid.Executor(fluid.CPUPlace(), check_nan_inf=how == "option")
    if how == "env":
        monkeypatch.setenv("FLAGS_check_nan_inf", "1")
    elif how == "core.globals":
        fluid.core.globals()["FLAGS_check_nan_inf"] = True
    exe.run(m["startup"], scope=scope)
    exe.run(m["main"], feed=positive(0), fetch_list=[m["loss"]], scope=scope)
    before = persistables(scope, m["main"])
    with pytest.raises(fluid.OpRunError) as info:
        exe.run(m["main"], feed=positive(1, -1.0), fetch_list=[m["loss"]], scope=scope)
    msg = str(info.value)
    assert "op #0 log (X=[x])" in msg and "FloatingPointError" in msg
    assert "variable 'log_0.tmp_0' holds 48 NaN and 0 Inf of 48 values" in msg
    assert same(persistables(scope, m["main"]), before)


def test_check_nan_inf_off_lets_nan_through_and_adds_no_task() -> None:
    m = nan_program()
    scope = fluid.Scope()
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(m["startup"], scope=scope)
    exe.run(m["main"], feed=positive(0), fetch_list=[m["loss"]], scope=scope)
    loss, = exe.run(m["main"], feed=positive(1, -1.0), fetch_list=[m["loss"]], scope=scope)
    assert np.isnan(loss).all()
    plan = next(p for p in exe._cache.values() if p.fetch == (m["loss"].name,))
    # when off, a run takes the plain task list: the check costs nothing per op
    assert plan.tail_nodes and plan.proven
    graph, record_tail = plan.graph_for_run()
    assert not record_tail and list(graph.fns) == [*plan.tasks, plan.guard.enter_tail]


def test_check_nan_inf_catches_an_update_that_overflows_and_restores_it() -> None:
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data(name="x", shape=[6], dtype="float32")
        loss = fluid.layers.mean(fluid.layers.fc(input=x, size=1))
        fluid.optimizer.SGD(learning_rate=3e38).minimize(loss)  # finite grads, inf update
    scope = fluid.Scope()
    exe = fluid.Executor(fluid.CPUPlace(), check_nan_inf=True)
    exe.run(startup, scope=scope)
    before = persistables(scope, main)
    with pytest.raises(fluid.OpRunError, match=r"(?s)sgd .*variable 'fc_0\.w_0' holds 0 NaN and "
                                               r"\d+ Inf"):
        exe.run(main, feed={"x": np.full((4, 6), 1e3, "float32")}, fetch_list=[loss],
                scope=scope)
    assert same(persistables(scope, main), before)


def test_parallel_check_nan_inf_names_the_device() -> None:
    m = nan_program()
    scope = fluid.Scope()
    fluid.Executor(fluid.CPUPlace()).run(m["startup"], scope=scope)
    es = fluid.ExecutionStrategy()
    es.check_nan_inf = True
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pe = fluid.ParallelExecutor(False, loss_name=m["loss"].name, main_program=m["main"],
                                    scope=scope, exec_strategy=es)
    pe.run([m["loss"]], feed=positive(0))
    before = device_state(pe, m["main"])
    feed = positive(1)
    feed["x"][5, 2] = -1.0  # a NaN on device 1 only (rows 4..7)
    with pytest.raises(fluid.OpRunError, match=r"(?s)op #0 log \(X=\[x\]\) on device 1.*"
                                               r"'log_0.tmp_0' holds 1 NaN"):
        pe.run([m["loss"]], feed=feed)
    for a, b in zip(device_state(pe, m["main"]), before):
        assert same(a, b)
    pe.check_replicas()


def test_nan_inf_flag_values(monkeypatch: pytest.MonkeyPatch) -> None:
    from parafluid.engine.atomic import nan_inf_flag

    for raw, want in (("1", True), ("true", True), ("0", False), ("", False),
                      ("false", False)):
        monkeypatch.setenv("FLAGS_check_nan_inf", raw)
        assert nan_inf_flag() is want, raw
    monkeypatch.delenv("FLAGS_check_nan_inf")
    assert nan_inf_flag() is False
    with pytest.raises(TypeError, match="check_nan_inf must be a bool, got int"):
        fluid.Executor(fluid.CPUPlace(), check_nan_inf=1)  # type: ignore[arg-type]


def test_undo_log_restores_in_place_and_replaced_values() -> None:
    from parafluid.engine.atomic import UndoLog

    scope = fluid.Scope()
    scope.var("w").value = torch.ones(3)
    scope.var("c").value = torch.zeros(1)
    w = scope.find_var("w").value
    log = UndoLog()
    log.record(scope, "w", in_place=True)
    log.record(scope, "c", in_place=False)
    log.record(scope, "new", in_place=False)
    w.add_(2.0)
    scope.var("c").value = torch.full([1], 5.0)
    scope.var("new").value = torch.ones(1)
    log.rollback()
    assert scope.find_var("w").value is w and torch.equal(w, torch.ones(3))
    assert torch.equal(scope.find_var("c").value, torch.zeros(1))
    assert scope.find_var("new") is None
    assert len(log) == 0
