"""The engine: Plan.run owns a step's inputs and outputs; make_scheduler shares the cores.
(What the engine may import: tests/test_layering.py.)"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import parafluid as fluid
from parafluid.engine.graph import build_graph
from parafluid.engine.plan import Plan, RunServices
from parafluid.engine.scheduler import Scheduler, make_scheduler


def _program() -> tuple[fluid.Program, fluid.Program, str, str]:
    main, startup = fluid.Program(), fluid.Program()
    startup.random_seed = 3
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        x = fluid.layers.data(name="x", shape=[3], dtype="float32")
        hidden = fluid.layers.fc(input=x, size=4, act="relu")
        out = fluid.layers.mean(hidden)
    return main, startup, hidden.name, out.name


def _plan(main: fluid.Program, fetch: tuple[str, ...], ndev: int = 1,
          release: bool = True) -> Plan:
    devices = [torch.device("cpu")] * ndev
    services = [RunServices(main, device_index=d, local_writes=d > 0, device=devices[d])
                for d in range(ndev)]
    return Plan(build_graph(main, ndev), main.global_block(), devices, services, ("x",), fetch,
                release=release, name_devices=ndev > 1, serial=ndev == 1)


def test_plan_run_fills_from_feeds_and_scope_and_returns_the_fetches() -> None:
    main, startup, hidden, out = _program()
    scope = fluid.Scope()
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup, scope=scope)
    xs = np.arange(6, dtype="float32").reshape(2, 3)
    want_hidden, want_out = exe.run(main, feed={"x": xs}, fetch_list=[hidden, out], scope=scope)

    plan = _plan(main, (hidden, out))
    (got,) = plan.run([scope], [{"x": torch.from_numpy(xs)}], Scheduler(1))
    np.testing.assert_array_equal(got[0].numpy(), want_hidden)
    np.testing.assert_array_equal(got[1].numpy(), want_out)
    # the plan keeps nothing and is free; the services do not hold on to the scope
    assert not plan.envs[0] and not plan.in_use and plan.services[0].scope is None


def test_plan_run_gives_one_fetch_list_per_device() -> None:
    main, startup, hidden, out = _program()
    scopes = [fluid.Scope(), fluid.Scope()]
    for scope in scopes:
        fluid.Executor(fluid.CPUPlace()).run(startup, scope=scope)
    plan = _plan(main, (out,), ndev=2)
    feeds = [{"x": torch.ones(2, 3)}, {"x": torch.zeros(5, 3)}]
    with make_scheduler(2) as sched:
        fetches = plan.run(scopes, feeds, sched)
    assert len(fetches) == 2 and all(len(f) == 1 for f in fetches)
    for d in range(2):
        (single,) = _plan(main, (out,)).run([scopes[d]], [feeds[d]], Scheduler(1))
        torch.testing.assert_close(fetches[d][0], single[0], rtol=0, atol=0)


def test_a_failed_plan_run_names_the_variable_and_leaves_the_plan_free() -> None:
    main, _, hidden, out = _program()
    scope = fluid.Scope()  # the startup program did not run: no parameters
    plan = _plan(main, (out,))
    with pytest.raises(RuntimeError, match="fc_0.w_0.*not initialized.*startup program"):
        plan.run([scope], [{"x": torch.ones(2, 3)}], Scheduler(1))
    assert not plan.envs[0] and not plan.in_use and plan.services[0].scope is None
    with pytest.raises(RuntimeError, match="custom: fc_0.w_0"):
        plan.run([scope], [{"x": torch.ones(2, 3)}], Scheduler(1),
                 missing=lambda block, name, feed: f"custom: {name}")


def test_plan_run_keeps_temporaries_where_asked() -> None:
    main, startup, hidden, out = _program()
    scope = fluid.Scope()
    fluid.Executor(fluid.CPUPlace()).run(startup, scope=scope)
    feed = [{"x": torch.ones(2, 3)}]
    # keep_temps: every temporary goes to the given scope (the ParallelExecutor's local ones)
    local = scope.new_scope()
    _plan(main, (out,), release=False).run([scope], feed, Scheduler(1), keep_temps=[local])
    assert set(local.local_var_names()) >= {"x", hidden, out}
    assert scope.find_local_var(hidden) is None
    # update_scope_vars: only the variables the scope already holds get the new value
    holder = scope.var(hidden)
    _plan(main, (out,), release=False).run([scope], feed, Scheduler(1), update_scope_vars=True)
    assert holder.value is not None and tuple(holder.value.shape) == (2, 4)
    assert scope.find_local_var(out) is None


def test_make_scheduler_shares_the_cores_between_its_workers(monkeypatch) -> None:
    from parafluid.engine.scheduler import TaskGraph

    monkeypatch.setattr("os.cpu_count", lambda: 8)  # 2 ops at once at most: 4 cores each
    caller = torch.get_num_threads()
    seen: list[int] = []
    graph = TaskGraph.from_edges([lambda: seen.append(torch.get_num_threads())] * 4, [])
    for kwargs, want in (({}, 4), ({"replicas": 4}, 4), ({"replicas": 1}, 8)):
        seen.clear()
        with make_scheduler(2, **kwargs) as sched:
            sched.run(graph)
        assert set(seen) == {want}, kwargs
    assert torch.get_num_threads() == caller
    assert make_scheduler(1).num_threads == 1
