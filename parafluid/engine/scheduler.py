"""A dataflow scheduler: runs a DAG of callables on persistent worker threads.

It knows nothing of programs, devices or ops: a :class:`TaskGraph` is a list of
zero-argument callables with dependency edges, built once and run many times by a
:class:`Scheduler`. The ParallelExecutor turns its SSA graph into one.

Example::

    from parafluid.engine.scheduler import Scheduler, TaskGraph

    out = []
    graph = TaskGraph.from_edges(
        [lambda: out.append("a"), lambda: out.append("b"), lambda: out.append("c")],
        edges=[(0, 2), (1, 2)], names=["a", "b", "c"])
    with Scheduler(num_threads=2) as sched:
        sched.run(graph)          # "c" runs after both "a" and "b"

How a run works (the original ParallelExecutor's algorithm): every run copies the
per-task dependency counters from the graph's template; every task with no predecessor is
queued; a worker that finishes a task decrements its successors' counters, keeps ONE newly
ready successor and runs it next on the same thread (no queue round-trip, so a chain of
ops runs on one thread without a thread switch) and queues the rest. An exception stops the
run: no task starts after the failure is seen, tasks in flight finish, and the caller gets a
:class:`TaskError` chained to the original exception.

Threads and torch (see docs/scheduler.md for the measurements): torch's intra-op thread
count is *per thread* once a thread has run a parallel op (OpenMP), so setting it on the
caller does not reach the workers. Pass ``initializer=`` to set it in each worker, e.g.
``torch_threads_initializer(intra_op_threads(device_count, num_threads))``; the executors
build their schedulers that way through ``make_scheduler``.

Tasks must not wait for one another (no barrier between two tasks): express every such
wait as an edge, or make a collective one task. A task that blocks on another task can
starve the pool when there are fewer threads than waiting tasks. A task may block on the
*outside* (an op receiving from another process) if it bounds its own wait (ops use
``ctx.deadline_s``, Fluid's FLAGS_rpc_deadline) and raises when it passes: the run then stops
like on any failure; ``run(timeout=...)`` bounds the whole graph.
"""

from __future__ import annotations

import os
import queue
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from types import TracebackType

__all__ = ["Task", "TaskGraph", "TaskError", "Scheduler", "make_scheduler",
           "default_num_threads", "intra_op_threads", "torch_threads_initializer"]

_NAMES_IN_MESSAGES = 8


class Task:
    """One node of a DAG: ``fn()`` runs it; ``successors`` are indices of tasks that depend on it.

    Args:
        fn: a zero-argument callable; its return value is ignored.
        name: shown in errors and timeouts (default ``"task #i"``).

    ``num_deps`` (the number of predecessors) is filled in by :class:`TaskGraph`.

    Example::

        a, b = Task(load, "load"), Task(train, "train")
        a.successors.append(1)
        graph = TaskGraph([a, b])
    """

    __slots__ = ("fn", "successors", "num_deps", "name")

    def __init__(self, fn: Callable[[], None], name: str = "") -> None:
        self.fn = fn
        self.successors: list[int] = []
        self.num_deps = 0
        self.name = name

    def __repr__(self) -> str:
        return f"Task({self.name!r}, successors={self.successors})"


class TaskGraph:
    """An immutable DAG of Tasks: build once, run many times.

    Args:
        tasks: the nodes; ``tasks[i].successors`` lists the indices that depend on task i.

    Raises ``ValueError`` for a successor index out of range, a non-callable ``fn``, or a
    cycle (the message spells the cycle). The graph snapshots the tasks: editing a Task
    afterwards does not change the graph.

    Example::

        graph = TaskGraph.from_edges([f, g, h], edges=[(0, 1), (0, 2)])
        len(graph)    # 3
    """

    __slots__ = ("tasks", "fns", "names", "successors", "num_deps", "roots", "order",
                 "serial_fns")

    def __init__(self, tasks: Sequence[Task], order: Sequence[int] | None = None) -> None:
        tasks = tuple(tasks)
        n = len(tasks)
        num_deps = [0] * n
        for i, task in enumerate(tasks):
            if not isinstance(task, Task):
                raise TypeError(f"TaskGraph: element #{i} must be a Task, got "
                                f"{type(task).__name__}")
            if not callable(task.fn):
                raise ValueError(f"TaskGraph: task #{i} {task.name!r} has a non-callable fn "
                                 f"({type(task.fn).__name__})")
            for s in task.successors:
                if type(s) is not int or not 0 <= s < n:
                    raise ValueError(f"TaskGraph: task #{i} {task.name!r} has successor {s!r}, "
                                     f"expected an index in [0, {n})")
                num_deps[s] += 1
        self.tasks = tasks
        self.fns = tuple(t.fn for t in tasks)
        self.names = tuple(t.name or f"task #{i}" for i, t in enumerate(tasks))
        self.successors = tuple(tuple(t.successors) for t in tasks)
        self.num_deps = tuple(num_deps)
        for task, deps in zip(tasks, num_deps):
            task.num_deps = deps
        self.roots = tuple(i for i in range(n) if num_deps[i] == 0)
        self.order = self._serial_order() if order is None else self._check_order(order)
        self.serial_fns = tuple(self.fns[i] for i in self.order)  # one lane runs these

    @staticmethod
    def from_edges(fns: Sequence[Callable[[], None]], edges: Iterable[tuple[int, int]],
                   names: Sequence[str] | None = None,
                   order: Sequence[int] | None = None) -> TaskGraph:
        """Build a graph from callables and ``(before, after)`` index pairs.

        Args:
            fns: one callable per task.
            edges: ``(a, b)`` means task b starts only after task a finished; duplicates
                are ignored.
            names: optional task names, one per callable.
            order: the order one lane runs the tasks in (a topological order; default: the
                order a worker would follow).

        Example::

            graph = TaskGraph.from_edges([f, g], [(0, 1)], names=["f", "g"])
        """
        if names is not None and len(names) != len(fns):
            raise ValueError(f"TaskGraph.from_edges: got {len(fns)} callables but "
                             f"{len(names)} names")
        tasks = [Task(fn, names[i] if names is not None else "") for i, fn in enumerate(fns)]
        n = len(tasks)
        seen: set[tuple[int, int]] = set()
        for edge in edges:
            a, b = edge
            if type(a) is not int or type(b) is not int or not (0 <= a < n and 0 <= b < n):
                raise ValueError(f"TaskGraph.from_edges: edge {edge!r} needs two task "
                                 f"indices in [0, {n})")
            if (a, b) not in seen:
                seen.add((a, b))
                tasks[a].successors.append(b)
        return TaskGraph(tasks, order)

    def __len__(self) -> int:
        return len(self.fns)

    def __repr__(self) -> str:
        edges = sum(len(s) for s in self.successors)
        return f"TaskGraph({len(self.fns)} tasks, {edges} edges, {len(self.roots)} roots)"

    def _serial_order(self) -> tuple[int, ...]:
        # The order one worker would follow: keep one ready successor, queue the rest FIFO.
        # It is a topological order; running in it keeps a producer next to its consumer.
        counts = list(self.num_deps)
        succ = self.successors
        ready = deque(self.roots)
        order: list[int] = []
        while ready:
            i = ready.popleft()
            while i >= 0:
                order.append(i)
                nxt = -1
                for s in succ[i]:
                    counts[s] -= 1
                    if counts[s] == 0:
                        if nxt < 0:
                            nxt = s
                        else:
                            ready.append(s)
                i = nxt
        if len(order) != len(self.fns):
            raise ValueError(f"TaskGraph: the dependencies form a cycle: {self._find_cycle()}")
        return tuple(order)

    def _check_order(self, order: Sequence[int]) -> tuple[int, ...]:
        order = tuple(order)
        position = {t: k for k, t in enumerate(order)}
        if sorted(order) != list(range(len(self.fns))):
            raise ValueError(f"TaskGraph: order must list every task index once, got {order!r}")
        for i, succ in enumerate(self.successors):
            for s in succ:
                if position[s] < position[i]:
                    raise ValueError(f"TaskGraph: order runs task #{s} {self.names[s]!r} before "
                                     f"its predecessor #{i} {self.names[i]!r}")
        return order  # (a cycle would have an edge running backwards in any order)

    def _find_cycle(self) -> str:
        # Iterative DFS with colours; only called on a graph known to hold a cycle.
        succ = self.successors
        color = [0] * len(succ)  # 0 new, 1 on the stack, 2 done
        for start in range(len(succ)):
            if color[start]:
                continue
            path = [start]
            iters = [iter(succ[start])]
            color[start] = 1
            while iters:
                s = next(iters[-1], None)
                if s is None:
                    color[path.pop()] = 2
                    iters.pop()
                elif color[s] == 1:
                    cycle = path[path.index(s):] + [s]
                    return " -> ".join(f"#{i} {self.names[i]!r}" for i in cycle)
                elif color[s] == 0:
                    color[s] = 1
                    path.append(s)
                    iters.append(iter(succ[s]))
        return "(not found)"


class TaskError(RuntimeError):
    """A task raised; ``.task_index``, ``.task_name``, ``__cause__`` = the original exception.

    Example::

        try:
            sched.run(graph)
        except TaskError as err:
            print(err.task_name, repr(err.__cause__))
    """

    def __init__(self, message: str, task_index: int, task_name: str) -> None:
        super().__init__(message)
        self.task_index = task_index
        self.task_name = task_name


def _task_error(graph: TaskGraph, index: int, exc: BaseException, others: int) -> TaskError:
    name = graph.names[index]
    msg = f"while running task #{index} {name}: {type(exc).__name__}: {exc}"
    if others:
        msg += f"\n  ({others} more task(s) failed in this run; this one failed first)"
    return TaskError(msg, index, name)


def _describe(graph: TaskGraph, indices: list[int]) -> str:
    shown = ", ".join(f"#{i} {graph.names[i]}" for i in indices[:_NAMES_IN_MESSAGES])
    more = len(indices) - _NAMES_IN_MESSAGES
    return shown + (f" and {more} more" if more > 0 else "") if indices else "none"


class _Run:
    """The state of one run of a graph; queued work items are ``(run, task_index)``."""

    __slots__ = ("graph", "counts", "lock", "outstanding", "failed", "error", "others", "done",
                 "put", "state")

    def __init__(self, graph: TaskGraph, put: Callable[[object], None]) -> None:
        self.graph = graph
        self.counts = list(graph.num_deps)
        self.lock = threading.Lock()
        self.outstanding = len(graph.roots)  # tasks queued or running, not yet retired
        self.failed = False
        self.error: tuple[int, BaseException] | None = None
        self.others = 0
        self.done = threading.Lock()
        self.done.acquire()  # released by whichever worker retires the last outstanding task
        self.put = put
        self.state = bytearray(len(graph))  # 0 pending, 1 running, 2 finished (for timeouts)

    def drive(self, i: int) -> None:
        """Run task i, then the one successor it keeps, and so on; queue the others."""
        fns = self.graph.fns
        succ = self.graph.successors
        counts = self.counts
        lock = self.lock
        state = self.state
        while not self.failed:
            state[i] = 1
            try:
                fns[i]()
            except BaseException as exc:  # noqa: BLE001 - re-raised in the caller
                state[i] = 2
                with lock:
                    self.failed = True
                    if self.error is None:
                        self.error = (i, exc)
                    else:
                        self.others += 1
                break
            state[i] = 2
            nxt = -1
            succ_i = succ[i]
            if succ_i:
                with lock:
                    for s in succ_i:
                        c = counts[s] - 1
                        counts[s] = c
                        if c == 0:
                            if nxt < 0:
                                nxt = s
                            else:
                                self.outstanding += 1
                                self.put((self, s))
            if nxt < 0:
                break
            i = nxt
        with lock:
            self.outstanding -= 1
            last = self.outstanding == 0
        if last:
            self.done.release()

    def stop(self) -> None:
        with self.lock:
            self.failed = True

    def retire(self, n: int) -> None:
        """Count ``n`` roots that were never queued as done."""
        if n <= 0:
            return
        with self.lock:
            self.outstanding -= n
            last = self.outstanding == 0
        if last:
            self.done.release()

    def drain(self, deadline: float | None) -> None:
        """Wait until a stopped run has no task in flight (a second interrupt gives up)."""
        try:
            # NOTE: ``done`` is released exactly when ``outstanding`` reaches 0, so a
            # positive count means it is still to come (never consumed already).
            if self.outstanding > 0:
                wait = -1 if deadline is None else max(deadline - time.monotonic(), 0.0)
                self.done.acquire(timeout=wait)
        except BaseException:  # noqa: BLE001 - the original interrupt is re-raised
            pass

    def unfinished(self) -> tuple[list[int], list[int]]:
        state = self.state
        running = [i for i, s in enumerate(state) if s == 1]
        pending = [i for i, s in enumerate(state) if s == 0]
        return running, pending


def _worker(work: queue.SimpleQueue, initializer: Callable[[], None] | None,
            ready: queue.SimpleQueue) -> None:
    # NOTE: the worker holds the queue, never the Scheduler, so that an unreferenced
    # Scheduler is collected and its finalizer stops the threads.
    if initializer is not None:
        try:
            initializer()
        except BaseException as exc:  # noqa: BLE001 - reported by Scheduler.__init__
            ready.put(exc)
            return
    ready.put(None)
    get = work.get
    while True:
        item = get()
        if item is None:
            return
        item[0].drive(item[1])
        item = None  # do not keep the finished run (its graph, its error) alive while idle


def _post_stop(work: queue.SimpleQueue, n: int) -> None:
    for _ in range(n):
        work.put(None)


class Scheduler:
    """Runs a TaskGraph: every task starts as soon as all its predecessors finished.

    Args:
        num_threads: worker threads (>= 1). With 1, every task runs on the calling thread
            in a fixed topological order (``graph.order``) and no thread is created.
        initializer: called once in each worker thread before it takes work (for example
            to set torch's per-thread intra-op thread count); not called with
            ``num_threads=1``. An exception in it is raised from the constructor.

    Example::

        with Scheduler(2) as sched:
            for _ in range(10):
                sched.run(graph, timeout=60)
    """

    def __init__(self, num_threads: int,
                 initializer: Callable[[], None] | None = None) -> None:
        if type(num_threads) is not int or num_threads < 1:
            raise ValueError(f"Scheduler: num_threads must be an int >= 1, got {num_threads!r}")
        self._num_threads = num_threads
        self._work: queue.SimpleQueue = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._idents: frozenset[int] = frozenset()
        self._closed = False
        self._pid = os.getpid()
        if num_threads == 1:
            self._finalizer = None
            return
        ready: queue.SimpleQueue = queue.SimpleQueue()
        for k in range(num_threads):
            t = threading.Thread(target=_worker, args=(self._work, initializer, ready),
                                 name=f"parafluid-scheduler-{id(self):x}-{k}", daemon=True)
            t.start()
            self._threads.append(t)
        self._idents = frozenset(t.ident for t in self._threads)
        self._finalizer = weakref.finalize(self, _post_stop, self._work, num_threads)
        self._finalizer.atexit = False  # daemon threads die with the interpreter anyway
        errors = [e for e in (ready.get() for _ in range(num_threads)) if e is not None]
        if errors:
            self.close()
            raise RuntimeError(f"Scheduler: the worker initializer raised "
                               f"{type(errors[0]).__name__}: {errors[0]}") from errors[0]

    @property
    def num_threads(self) -> int:
        """How many threads run tasks (1: the calling thread only)."""
        return self._num_threads

    def run(self, graph: TaskGraph, timeout: float | None = None) -> None:
        """Run every task of ``graph`` once, each after all its predecessors.

        Args:
            graph: the DAG to run.
            timeout: seconds to wait before giving up with ``TimeoutError`` naming the
                tasks still running and pending (``None``: wait forever). Tasks already
                running cannot be interrupted: they finish in the background and no task
                of that run starts afterwards. With ``num_threads=1`` the deadline is
                checked between tasks.

        Raises:
            TaskError: a task raised (the first failure; ``__cause__`` is its exception).
                No task starts after the failure is seen; running ones finish first.

        Example::

            sched.run(TaskGraph.from_edges([f, g], [(0, 1)]), timeout=30)
        """
        if self._closed:
            raise RuntimeError("Scheduler.run: the scheduler is closed")
        if not isinstance(graph, TaskGraph):
            raise TypeError(f"Scheduler.run: expected a TaskGraph, got {type(graph).__name__}")
        if not graph.fns:
            return
        if self._num_threads == 1:
            self._run_serial(graph, timeout)
            return
        if os.getpid() != self._pid:
            raise RuntimeError("Scheduler.run: this scheduler was created in another process "
                               "(before a fork); its worker threads do not exist here. Create "
                               "a new Scheduler in this process.")
        if threading.get_ident() in self._idents:
            raise RuntimeError("Scheduler.run: called from a task of the same scheduler; the "
                               "nested run could wait forever for busy workers. Use another "
                               "Scheduler for nested graphs.")
        run = _Run(graph, self._work.put)
        put = self._work.put
        deadline = None if timeout is None else time.monotonic() + max(timeout, 0.0)
        queued = 0
        try:
            for r in graph.roots:
                put((run, r))
                queued += 1
            finished = run.done.acquire(timeout=-1 if timeout is None else max(timeout, 0.0))
        except BaseException:
            # e.g. KeyboardInterrupt: no task of this run starts any more, and the caller
            # goes on only once the tasks in flight finished (its handler may save the
            # parameters they are updating)
            run.stop()
            run.retire(len(graph.roots) - queued)
            run.drain(deadline)
            raise
        if not finished:
            run.stop()
            if not run.done.acquire(blocking=False):
                running, pending = run.unfinished()
                raise TimeoutError(
                    f"Scheduler.run: the graph did not finish within {timeout} s; running: "
                    f"{_describe(graph, running)}; not started: {_describe(graph, pending)}. "
                    "Running tasks finish in the background; no other task of this run starts.")
        if run.error is not None:
            index, exc = run.error
            raise _task_error(graph, index, exc, run.others) from exc

    def _run_serial(self, graph: TaskGraph, timeout: float | None) -> None:
        order = graph.order
        if timeout is None:
            # NOTE: the hot path of the Executor: a bare loop, the failing task found by its
            # position only when one raises
            k = 0
            try:
                for k, fn in enumerate(graph.serial_fns):  # noqa: B007 (read on failure)
                    fn()
            except Exception as exc:
                raise _task_error(graph, order[k], exc, 0) from exc
            return
        fns = graph.fns
        deadline = None if timeout is None else time.monotonic() + timeout
        for k, i in enumerate(order):
            if deadline is not None and time.monotonic() > deadline:
                last = f"#{order[k - 1]} {graph.names[order[k - 1]]}" if k else "none"
                raise TimeoutError(
                    f"Scheduler.run: the graph did not finish within {timeout} s; the last "
                    f"task to finish was {last}; not started: "
                    f"{_describe(graph, sorted(order[k:]))}")
            try:
                fns[i]()
            except Exception as exc:
                raise _task_error(graph, i, exc, 0) from exc

    def close(self) -> None:
        """Stop the worker threads (idempotent); running tasks finish first."""
        if self._closed:
            return
        self._closed = True
        if self._finalizer is not None:
            self._finalizer()
        me = threading.current_thread()
        for t in self._threads:
            if t is not me:
                t.join()

    def __enter__(self) -> Scheduler:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"Scheduler(num_threads={self._num_threads}, {state})"


def make_scheduler(num_threads: int, replicas: int | None = None,
                   share_cores: bool = True) -> Scheduler:
    """The Scheduler of an executor: ``num_threads`` workers sharing the cores.

    Each worker sets torch's intra-op threads to ``intra_op_threads(replicas,
    num_threads)``, so that ops running at once (``replicas`` device replicas, default one
    per worker) get an equal share of the cores instead of each spawning a thread per core
    (docs/scheduler.md). ``share_cores=False`` leaves the workers' count as it is (GPU
    replicas). One thread is the calling thread's lane, ``Scheduler(1)``.

    Example::

        lanes = make_scheduler(2)                   # a program placed on cpu:0 and cpu:1
        pool = make_scheduler(2, replicas=4)        # 4 CPU replicas on 2 worker threads
    """
    if num_threads == 1 or not share_cores:
        return Scheduler(num_threads)
    import torch

    concurrent = replicas if replicas is not None else num_threads
    previous = torch.get_num_threads()
    try:
        return Scheduler(num_threads, initializer=torch_threads_initializer(
            intra_op_threads(concurrent, num_threads)))
    finally:
        # NOTE: set_num_threads in a worker also moved the default of threads started
        # later; the creating thread keeps its own count
        torch.set_num_threads(previous)


def default_num_threads(device_count: int, use_cuda: bool) -> int:
    """The thread count used when ``ExecutionStrategy.num_threads`` is 0 (automatic).

    CPU: one thread per device replica, capped at the number of cores (at least 1).
    CUDA: two threads per device. See docs/scheduler.md for the measurements behind this.

    Args:
        device_count: devices the graph is replicated on (>= 1).
        use_cuda: whether the devices are GPUs.

    Example::

        default_num_threads(2, use_cuda=False)    # 2 on a machine with >= 2 cores
    """
    if type(device_count) is not int or device_count < 1:
        raise ValueError(f"default_num_threads: device_count must be an int >= 1, "
                         f"got {device_count!r}")
    if use_cuda:
        return 2 * device_count
    return max(1, min(device_count, os.cpu_count() or 1))


def intra_op_threads(device_count: int, num_threads: int | None = None,
                     cores: int | None = None) -> int:
    """torch intra-op threads per worker so that concurrent device replicas share the cores.

    Returns ``max(1, cores // min(device_count, num_threads))``: as many ops run at once as
    there are replicas (or workers, if fewer), and each gets an equal share of the cores.

    Args:
        device_count: device replicas in the graph (>= 1).
        num_threads: scheduler threads (default: ``device_count``).
        cores: cores to share (default: ``os.cpu_count()``).

    Example::

        intra_op_threads(2, cores=2)    # 1: two replicas, one core each
    """
    if type(device_count) is not int or device_count < 1:
        raise ValueError(f"intra_op_threads: device_count must be an int >= 1, "
                         f"got {device_count!r}")
    concurrent = device_count if num_threads is None else max(1, min(device_count, num_threads))
    cores = cores if cores is not None else (os.cpu_count() or 1)
    return max(1, cores // concurrent)


def torch_threads_initializer(n: int) -> Callable[[], None]:
    """A Scheduler ``initializer`` that sets torch's intra-op threads to ``n`` in each worker.

    torch (OpenMP, MKL) keeps the count per thread, so the calling thread keeps its own.
    ``torch.set_num_threads`` also sets the default that threads *not yet started* will
    take; put it back on the creating thread once the scheduler is built (see the example).

    Example::

        previous = torch.get_num_threads()
        sched = Scheduler(2, initializer=torch_threads_initializer(1))
        torch.set_num_threads(previous)   # the default for later threads, not the workers
    """
    if type(n) is not int or n < 1:
        raise ValueError(f"torch_threads_initializer: n must be an int >= 1, got {n!r}")

    def init() -> None:
        import torch

        # NOTE: torch initialises a thread's count lazily, from its process-wide default, at
        # the thread's first parallel op or get_num_threads(); do that first, or the lazy
        # initialisation would later overwrite the value set here.
        torch.get_num_threads()
        torch.set_num_threads(n)
    return init
