"""The dataflow scheduler, tested with dummy tasks (no programs, no devices)."""

from __future__ import annotations

import gc
import itertools
import random
import signal
import threading
import time

import pytest

from parafluid.engine.scheduler import (
    Scheduler,
    Task,
    TaskError,
    TaskGraph,
    default_num_threads,
    intra_op_threads,
    torch_threads_initializer,
)

pytestmark = pytest.mark.timeout(60)

THREADS = (1, 2, 4, 8)


class Recorder:
    """Tasks that log a global start/finish sequence number and the thread they ran on."""

    def __init__(self, n: int, yield_every: int = 3) -> None:
        self.seq = itertools.count()
        self.start = [-1] * n
        self.finish = [-1] * n
        self.runs = [0] * n
        self.thread = [0] * n
        self.yield_every = yield_every

    def fn(self, i: int):
        def task() -> None:
            self.start[i] = next(self.seq)
            self.runs[i] += 1
            self.thread[i] = threading.get_ident()
            if self.yield_every and i % self.yield_every == 0:
                time.sleep(0)  # give the GIL away so that tasks really interleave
            self.finish[i] = next(self.seq)
        return task

    def fns(self) -> list:
        return [self.fn(i) for i in range(len(self.start))]

    def check(self, edges, times: int = 1) -> None:
        assert self.runs == [times] * len(self.runs)
        for a, b in edges:
            assert self.finish[a] < self.start[b], f"edge {a}->{b} violated"


def random_dag(n: int, seed: int) -> list[tuple[int, int]]:
    rng = random.Random(seed)
    perm = list(range(n))
    rng.shuffle(perm)  # task indices are not in topological order
    edges = set()
    for k in range(1, n):
        for _ in range(rng.randint(0, 4)):
            edges.add((perm[rng.randrange(0, k)], perm[k]))
    return sorted(edges)


@pytest.mark.parametrize("num_threads", THREADS)
@pytest.mark.parametrize("n,seed", [(200, 0), (600, 1), (1000, 2)])
def test_random_dag_respects_every_edge(num_threads, n, seed):
    edges = random_dag(n, seed)
    rec = Recorder(n)
    graph = TaskGraph.from_edges(rec.fns(), edges)
    with Scheduler(num_threads) as sched:
        sched.run(graph, timeout=30)
        rec.check(edges)
        sched.run(graph, timeout=30)  # the same graph again: counters come from the template
        rec.check(edges, times=2)


@pytest.mark.parametrize("num_threads", THREADS)
def test_diamond_and_wide_fan_in(num_threads):
    # 0 -> {1, 2} -> 3 (diamond), then 3 -> 300 tasks -> 304 (fan-out / fan-in)
    n = 305
    edges = [(0, 1), (0, 2), (1, 3), (2, 3)]
    edges += [(3, k) for k in range(4, 304)] + [(k, 304) for k in range(4, 304)]
    rec = Recorder(n, yield_every=2)
    with Scheduler(num_threads) as sched:
        sched.run(TaskGraph.from_edges(rec.fns(), edges), timeout=30)
    rec.check(edges)
    assert rec.start[304] == max(rec.start)


def test_wide_graph_uses_several_threads():
    # Each task holds its thread until another thread has taken a task too.
    seen: set[int] = set()
    lock = threading.Lock()
    two = threading.Event()

    def task() -> None:
        with lock:
            seen.add(threading.get_ident())
            if len(seen) >= 2:
                two.set()
        two.wait(5)
    with Scheduler(4) as sched:
        sched.run(TaskGraph.from_edges([task] * 8, []), timeout=30)
    assert two.is_set() and len(seen) >= 2


class CountingQueue:
    """Wraps the scheduler's work queue to count submissions (white-box)."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.puts = 0

    def put(self, item) -> None:
        self.puts += 1
        self.inner.put(item)


def test_keeps_one_ready_successor_instead_of_queueing_it():
    n = 50
    chain = [(i, i + 1) for i in range(n - 1)]
    rec = Recorder(n)
    with Scheduler(4) as sched:
        sched._work = counting = CountingQueue(sched._work)
        sched.run(TaskGraph.from_edges(rec.fns(), chain))
        rec.check(chain)
        assert counting.puts == 1  # only the root: the chain never goes back to the queue
        assert len(set(rec.thread)) == 1 and rec.thread[0] != threading.get_ident()
        counting.puts = 0
        fan = [(0, k) for k in range(1, 11)] + [(k, 11) for k in range(1, 11)]
        sched.run(TaskGraph.from_edges([lambda: None] * 12, fan))
        assert counting.puts == 1 + 9  # root, then 9 of its 10 successors; the sink is kept


def test_single_thread_runs_on_caller_in_graph_order():
    edges = random_dag(300, 7)
    rec = Recorder(300)
    graph = TaskGraph.from_edges(rec.fns(), edges)
    sched = Scheduler(1)
    before = set(threading.enumerate())
    sched.run(graph)
    assert [t for t in threading.enumerate() if t not in before] == []
    rec.check(edges)
    assert set(rec.thread) == {threading.get_ident()}
    assert sorted(range(300), key=lambda i: rec.start[i]) == list(graph.order)


def test_failure_stops_scheduling_waits_in_flight_and_scheduler_is_reusable():
    started_after_failure = itertools.count()
    failing = threading.Event()
    finished: list[str] = []
    fail = [True]

    def slow() -> None:
        failing.wait(5)
        time.sleep(0.05)  # still running when the failure is seen
        finished.append("slow")

    def boom() -> None:
        if fail[0]:
            failing.set()
            raise ZeroDivisionError("bad batch")
        finished.append("boom")

    def later() -> None:
        next(started_after_failure)
    # roots: slow (0), boom (1); 20 successors of slow and 20 of boom must not start.
    fns = [slow, boom] + [later] * 40
    edges = [(0, k) for k in range(2, 22)] + [(1, k) for k in range(22, 42)]
    names = ["slow", "boom"] + [f"later{k}" for k in range(40)]
    graph = TaskGraph.from_edges(fns, edges, names)
    with Scheduler(2) as sched:
        with pytest.raises(TaskError, match="boom") as info:
            sched.run(graph, timeout=30)
        err = info.value
        assert err.task_name == "boom" and err.task_index == 1
        assert isinstance(err.__cause__, ZeroDivisionError)
        assert "ZeroDivisionError: bad batch" in str(err)
        assert finished == ["slow"]  # the task in flight finished before run() raised
        assert next(started_after_failure) == 0
        fail[0] = False
        sched.run(graph, timeout=30)
        assert next(started_after_failure) == 41  # all 40 ran (+1 for this probe)


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread()
                    or not hasattr(signal, "pthread_kill"), reason="needs SIGINT on main")
def test_interrupt_waits_for_the_tasks_in_flight_before_raising():
    """Ctrl-C while run() waits: every task that started has finished when KeyboardInterrupt
    reaches the caller (a task may be updating state that the caller's handler saves, a
    checkpoint say), and the scheduler serves the next run."""
    main = threading.main_thread().ident
    log: list[str] = []

    def interrupted() -> None:
        signal.pthread_kill(main, signal.SIGINT)
        time.sleep(0.2)  # still running when the caller sees the interrupt
        log.append("in flight done")

    def successor() -> None:
        # NOTE: may run when the signal reaches the caller only after the run (it can land
        # just before the caller blocks); it then has finished too.
        log.append("successor start")
        time.sleep(0.05)
        log.append("successor done")
    graph = TaskGraph.from_edges([interrupted, successor], [(0, 1)])
    with Scheduler(2) as sched:
        with pytest.raises(KeyboardInterrupt):
            sched.run(graph, timeout=30)
        assert log in (["in flight done"],
                       ["in flight done", "successor start", "successor done"])
        sched.run(TaskGraph.from_edges([lambda: log.append("next run")], []), timeout=30)
        assert log[-1] == "next run"


def test_failure_in_the_middle_of_a_chain():
    ran: list[int] = []

    def step(i: int):
        def task() -> None:
            if i == 5:
                raise KeyError("missing")
            ran.append(i)
        return task
    graph = TaskGraph.from_edges([step(i) for i in range(10)], [(i, i + 1) for i in range(9)],
                                 [f"step{i}" for i in range(10)])
    for num_threads in (1, 2):
        ran.clear()
        with Scheduler(num_threads) as sched:
            with pytest.raises(TaskError, match=r"task #5 step5: KeyError") as info:
                sched.run(graph)
        assert isinstance(info.value.__cause__, KeyError)
        assert ran == [0, 1, 2, 3, 4]


def test_several_failures_at_once_raise_the_first():
    barrier = threading.Barrier(2)

    def first() -> None:
        barrier.wait(5)
        raise ValueError("first")

    def second() -> None:
        barrier.wait(5)
        time.sleep(0.05)
        raise RuntimeError("second")
    graph = TaskGraph.from_edges([first, second], [], ["first", "second"])
    with Scheduler(2) as sched:
        with pytest.raises(TaskError) as info:
            sched.run(graph, timeout=30)
    assert info.value.task_name == "first"
    assert isinstance(info.value.__cause__, ValueError)
    assert "1 more task(s) failed" in str(info.value)


def test_cycle_is_a_value_error_naming_it():
    with pytest.raises(ValueError, match=r"cycle: #1 'b' -> #2 'c' -> #3 'd' -> #1 'b'"):
        TaskGraph.from_edges([print] * 4, [(0, 1), (1, 2), (2, 3), (3, 1)], "abcd")
    with pytest.raises(ValueError, match=r"cycle: #0 'task #0' -> #0 'task #0'"):
        TaskGraph.from_edges([print], [(0, 0)])


def test_bad_graphs_are_rejected():
    t = Task(print, "p")
    t.successors.append(3)
    with pytest.raises(ValueError, match=r"task #0 'p' has successor 3, expected an index in "
                                         r"\[0, 1\)"):
        TaskGraph([t])
    with pytest.raises(ValueError, match="non-callable"):
        TaskGraph([Task(None, "x")])
    with pytest.raises(TypeError, match="must be a Task"):
        TaskGraph([print])
    with pytest.raises(ValueError, match=r"edge \(0, 5\)"):
        TaskGraph.from_edges([print, print], [(0, 5)])
    with pytest.raises(ValueError, match="2 callables but 1 names"):
        TaskGraph.from_edges([print, print], [], ["a"])
    with pytest.raises(ValueError, match="num_threads must be an int >= 1, got 0"):
        Scheduler(0)


def test_graph_snapshots_tasks_and_fills_num_deps():
    calls: list[str] = []
    a, b, c = (Task(lambda k=k: calls.append(k), k) for k in "abc")
    a.successors += [1, 2]
    b.successors.append(2)
    graph = TaskGraph([a, b, c])
    assert (a.num_deps, b.num_deps, c.num_deps) == (0, 1, 2)
    a.successors.clear()  # does not change the built graph
    c.fn = lambda: calls.append("changed")
    Scheduler(1).run(graph)
    assert calls == ["a", "b", "c"]
    assert graph.roots == (0,) and len(graph) == 3


def test_timeout_names_the_blocked_task_and_drops_the_rest():
    release = threading.Event()
    after: list[str] = []

    def stuck() -> None:
        release.wait(5)
    graph = TaskGraph.from_edges([stuck, lambda: after.append("x")], [(0, 1)],
                                 ["stuck_op", "after_op"])
    with Scheduler(2) as sched:
        t0 = time.monotonic()
        with pytest.raises(TimeoutError, match=r"running: #0 stuck_op; not started: #1 after_op"):
            sched.run(graph, timeout=0.1)
        assert time.monotonic() - t0 < 3
        release.set()
        # the other worker serves the next run, and the abandoned run never resumes
        ok = TaskGraph.from_edges([lambda: after.append("ok")], [])
        sched.run(ok, timeout=10)
        time.sleep(0.05)
        assert after == ["ok"]


def test_timeout_on_calling_thread():
    graph = TaskGraph.from_edges([lambda: time.sleep(0.1), print], [(0, 1)], ["nap", "never"])
    with pytest.raises(TimeoutError, match=r"last task to finish was #0 nap; not started: "
                                           r"#1 never"):
        Scheduler(1).run(graph, timeout=0.01)


def test_nested_run_in_own_task_is_refused():
    with Scheduler(2) as sched:
        inner = TaskGraph.from_edges([print], [])
        graph = TaskGraph.from_edges([lambda: sched.run(inner)], [], ["outer"])
        with pytest.raises(TaskError, match="called from a task of the same scheduler"):
            sched.run(graph, timeout=10)


def test_many_runs_and_empty_graph():
    counts = [0] * 20

    def inc(i: int):
        def task() -> None:
            counts[i] += 1
        return task
    graph = TaskGraph.from_edges([inc(i) for i in range(20)], random_dag(20, 3))
    with Scheduler(2) as sched:
        for _ in range(200):
            sched.run(graph, timeout=10)
        sched.run(TaskGraph([]))
    assert counts == [200] * 20


def test_concurrent_runs_from_two_callers():
    edges = random_dag(300, 11)
    recs = [Recorder(300), Recorder(300)]
    graphs = [TaskGraph.from_edges(r.fns(), edges) for r in recs]
    errors: list[BaseException] = []
    with Scheduler(2) as sched:
        def caller(k: int) -> None:
            try:
                for _ in range(5):
                    sched.run(graphs[k], timeout=30)
            except BaseException as exc:  # noqa: BLE001 - checked below
                errors.append(exc)
        callers = [threading.Thread(target=caller, args=(k,)) for k in range(2)]
        for t in callers:
            t.start()
        for t in callers:
            t.join()
    assert errors == []
    for rec in recs:
        rec.check(edges, times=5)


def _scheduler_threads(sched: Scheduler) -> list[threading.Thread]:
    prefix = f"parafluid-scheduler-{id(sched):x}-"
    return [t for t in threading.enumerate() if t.name.startswith(prefix)]


def test_close_stops_threads_and_run_after_close_fails():
    sched = Scheduler(3)
    assert len(_scheduler_threads(sched)) == 3 and sched.num_threads == 3
    sched.close()
    assert _scheduler_threads(sched) == []
    sched.close()  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        sched.run(TaskGraph.from_edges([print], []))


def test_run_in_a_forked_child_is_refused(monkeypatch):
    with Scheduler(2) as sched:
        monkeypatch.setattr("os.getpid", lambda: -1)  # what a forked child would see
        with pytest.raises(RuntimeError, match="created in another process"):
            sched.run(TaskGraph.from_edges([print], []))


def _wait_for_no_new_threads(before: set, timeout: float = 5.0) -> list:
    """Threads alive now that were not alive before (waiting up to ``timeout`` for them)."""
    deadline = time.monotonic() + timeout
    while True:
        new = [t for t in threading.enumerate() if t not in before]
        if not new or time.monotonic() > deadline:
            return new
        time.sleep(0.01)


def test_no_thread_leak_after_many_create_close_cycles():
    # NOTE: compare thread identities, not counts: threads of earlier tests may still be
    # exiting while this one runs.
    before = set(threading.enumerate())
    graph = TaskGraph.from_edges([lambda: None] * 4, [(0, 1)])
    for _ in range(40):
        with Scheduler(4) as sched:
            sched.run(graph)
    assert [t for t in threading.enumerate() if t not in before] == []
    for _ in range(20):  # dropped without close(): the finalizer stops the workers
        Scheduler(2).run(graph)
    gc.collect()
    assert _wait_for_no_new_threads(before) == []


def test_initializer_runs_in_every_worker_and_its_error_is_raised():
    idents: list[int] = []
    lock = threading.Lock()

    def init() -> None:
        with lock:
            idents.append(threading.get_ident())
    with Scheduler(3, initializer=init) as sched:
        assert sorted(idents) == sorted(t.ident for t in _scheduler_threads(sched))
    before = set(threading.enumerate())

    def bad() -> None:
        raise OSError("no such device")
    with pytest.raises(RuntimeError, match="initializer raised OSError: no such device"):
        Scheduler(2, initializer=bad)
    assert _wait_for_no_new_threads(before) == []


def test_torch_threads_initializer_sets_workers_not_caller():
    torch = pytest.importorskip("torch")
    before = torch.get_num_threads()
    seen: list[int] = []
    later: list[int] = []
    try:
        with Scheduler(2, initializer=torch_threads_initializer(1)) as sched:
            torch.set_num_threads(before)  # the default for threads started from now on
            sched.run(TaskGraph.from_edges([lambda: seen.append(torch.get_num_threads())], []))
            assert torch.get_num_threads() == before
            other = threading.Thread(target=lambda: later.append(torch.get_num_threads()))
            other.start()
            other.join()
            sched.run(TaskGraph.from_edges([lambda: seen.append(torch.get_num_threads())], []))
        assert seen == [1, 1] and later == [before]
    finally:
        torch.set_num_threads(before)


def test_thread_count_helpers(monkeypatch):
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    assert default_num_threads(2, use_cuda=False) == 2
    assert default_num_threads(1, use_cuda=False) == 1
    assert default_num_threads(8, use_cuda=False) == 2
    assert default_num_threads(2, use_cuda=True) == 4
    assert intra_op_threads(2) == 1 and intra_op_threads(1) == 2
    assert intra_op_threads(2, cores=16) == 8 and intra_op_threads(4, cores=2) == 1
    assert intra_op_threads(4, num_threads=2, cores=8) == 4
    assert intra_op_threads(1, num_threads=4, cores=8) == 8
    with pytest.raises(ValueError, match="device_count must be an int >= 1, got 0"):
        default_num_threads(0, use_cuda=False)
    with pytest.raises(ValueError, match="device_count"):
        intra_op_threads(0)
    with pytest.raises(ValueError, match="n must be an int >= 1, got 0"):
        torch_threads_initializer(0)
