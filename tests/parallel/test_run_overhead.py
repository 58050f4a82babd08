"""The cheaper run prologue/epilogue keeps what a run shows: feed checks, scopes, fetches."""

from __future__ import annotations

import numpy as np
import pytest

import parafluid as fluid
from parafluid import unique_name

pytestmark = pytest.mark.timeout(60)


def _build(ndev: int, threads: int = 0) -> tuple:
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 5
    with unique_name.guard(), fluid.program_guard(main, startup):
        x = fluid.layers.data(name="x", shape=[3], dtype="float32")
        y = fluid.layers.data(name="y", shape=[1], dtype="float32")
        h = fluid.layers.fc(input=x, size=4, act="relu")
        pred = fluid.layers.fc(input=h, size=1)
        loss = fluid.layers.mean(fluid.layers.square_error_cost(pred, y))
        fluid.optimizer.SGD(learning_rate=0.1).minimize(loss)
    scope = fluid.Scope()
    fluid.Executor(fluid.CPUPlace()).run(startup, scope=scope)
    es = fluid.ExecutionStrategy()
    es.num_threads = threads
    pe = fluid.ParallelExecutor(False, loss_name=loss.name, main_program=main, scope=scope,
                                exec_strategy=es, places=fluid.cpu_places(ndev))
    return pe, scope, main, loss, h


def _feed(rows: int = 8) -> dict[str, np.ndarray]:
    rng = np.random.RandomState(1)
    return {"x": rng.rand(rows, 3).astype("float32"), "y": rng.rand(rows, 1).astype("float32")}


def test_feed_checks_still_apply_after_a_checked_feed() -> None:
    pe, _, _, loss, _ = _build(2)
    feed = _feed()
    pe.run([loss.name], feed=feed)  # the (name, dtype, shape) of x and y are now known
    with pytest.raises(TypeError, match="must be 'float32', but received 'float64'"):
        pe.run([loss.name], feed={"x": feed["x"].astype("float64"), "y": feed["y"]})
    with pytest.raises(ValueError, match="should have dimensions"):
        pe.run([loss.name], feed={"x": np.ones((8, 5), "float32"), "y": feed["y"]})
    pe.close()


@pytest.mark.parametrize("rows", [8, 9])  # 9: the last device gets the remainder
def test_repeated_feeds_split_as_the_first(rows: int) -> None:
    """Same losses from the fast path (a known feed) and from checked, copied feeds."""
    runs = []
    for layout in ("c", "fortran"):
        pe, _, _, loss, _ = _build(2)
        feed = _feed(rows)
        if layout == "fortran":  # not C-contiguous: the checked path, a copy each run
            feed = {k: np.asfortranarray(v) for k, v in feed.items()}
        runs.append([pe.run([loss.name], feed=feed, return_merged=False)[0] for _ in range(3)])
        pe.close()
    for a, b in zip(*runs):
        assert [v.tolist() for v in a] == [v.tolist() for v in b]


@pytest.mark.parametrize("threads", [1, 2])
def test_temporaries_reach_the_local_scopes_every_run(threads: int) -> None:
    """Written back by each device's last task: visible after the run, fresh every run."""
    pe, _, _, loss, h = _build(2, threads)
    previous = None
    for step in range(3):
        feed = _feed()
        feed["x"] = feed["x"] + step
        _, hs = pe.run([loss.name, h.name], feed=feed, return_merged=False)
        for d in range(2):
            holder = pe._scopes.local_scopes[d].find_local_var(h.name)
            assert pe._scopes.local_scopes[d].parent is pe._scopes.scopes[d]
            np.testing.assert_array_equal(holder.value.numpy(), hs[d])
        assert previous is None or not np.array_equal(previous, hs[0])
        previous = hs[0]
    pe.close()


def test_fetched_arrays_are_copies() -> None:
    pe, scope, main, loss, h = _build(2)
    pe.run([h.name], feed=_feed())
    got, = pe.run([h.name], feed=_feed())
    got[:] = 12345.0
    for local in pe._scopes.local_scopes:
        assert not (local.find_local_var(h.name).value.numpy() == 12345.0).any()
    pe.close()


def test_an_unchecked_feed_is_split_as_fluid_takes_it() -> None:
    # layers.data declares [10] (no batch dim); fed [2, 10] over 2 devices, each gets a
    # [1, 10] row: Fluid checks only fluid.data feeds, so the run goes ahead
    main, startup = fluid.Program(), fluid.Program()
    with unique_name.guard(), fluid.program_guard(main, startup):
        d = fluid.layers.data("d", shape=[10], append_batch_size=False, dtype="float32")
        out = fluid.layers.scale(d, scale=2.0)
    pe = fluid.ParallelExecutor(False, main_program=main, scope=fluid.Scope(),
                                places=fluid.cpu_places(2))
    rows = np.arange(20, dtype="float32").reshape(2, 10)
    got, = pe.run([out.name], feed={"d": rows})
    np.testing.assert_array_equal(got, 2 * rows)
    pe.close()
