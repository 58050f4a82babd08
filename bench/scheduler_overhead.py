"""Benchmark of the dataflow scheduler (not a test: it prints numbers, asserts nothing).

1. Per-task overhead in microseconds on graphs of no-op tasks: a chain (every task depends
   on the previous one) and a wide fan-out (root -> N independent tasks -> sink), at
   ``num_threads`` 1, 2 and 4. Overhead = (scheduler run time - plain loop calling the same
   callables) / tasks, best and median of several repetitions.
2. Threading experiment: two independent chains of matmuls (two "device replicas", as
   ParallelExecutor with CPU_NUM=2 builds; 512x512 down to 64x64) run on the calling thread
   (num_threads=1, torch threads 2 or 1) or by 2 or 4 workers with 1 or 2 torch intra-op
   threads each. Also prints CPU time / wall time: how many cores were really busy.

Run::

    PYTHONPATH=$PWD python bench/scheduler_overhead.py [--quick] [--part overhead|threads]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, wait

import torch

from parafluid.engine.scheduler import Scheduler, TaskGraph, torch_threads_initializer


def _noop() -> None:
    pass


def chain_graph(n: int) -> TaskGraph:
    return TaskGraph.from_edges([_noop] * n, [(i, i + 1) for i in range(n - 1)])


def fanout_graph(n: int) -> TaskGraph:
    edges = [(0, i) for i in range(1, n - 1)] + [(i, n - 1) for i in range(1, n - 1)]
    return TaskGraph.from_edges([_noop] * n, edges)


def _time(fn: Callable[[], None], reps: int) -> list[float]:
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def overhead(reps: int, n: int) -> None:
    print(f"== per-task overhead, {n} no-op tasks, {reps} reps (us/task: best / median) ==")
    fns = [_noop] * n

    def plain() -> None:
        for f in fns:
            f()
    base = min(_time(plain, reps)) / n * 1e6
    print(f"plain loop calling the callables: {base:.3f} us/task")
    for threads in (1, 2, 4):
        with Scheduler(threads) as sched:
            for label, graph in (("chain", chain_graph(n)), ("fan-out", fanout_graph(n))):
                sched.run(graph)  # warm-up
                times = _time(lambda g=graph: sched.run(g), reps)
                best = min(times) / n * 1e6 - base
                med = statistics.median(times) / n * 1e6 - base
                print(f"num_threads={threads}  {label:8s} {best:7.2f} / {med:7.2f}")
    # Reference: the floor of a design with a concurrent.futures submit per task (no
    # dependency tracking at all, just submit n no-ops and wait for them).
    for threads in (2, 4):
        with ThreadPoolExecutor(threads) as pool:
            def submit_all(pool: ThreadPoolExecutor = pool) -> None:
                wait([pool.submit(_noop) for _ in range(n)])
            submit_all()
            times = _time(submit_all, reps)
        best, med = (t / n * 1e6 - base for t in (min(times), statistics.median(times)))
        print(f"ThreadPoolExecutor({threads}).submit per task, independent no-ops: "
              f"{best:.2f} / {med:.2f}")
    with Scheduler(2) as sched:
        tiny = chain_graph(2)
        sched.run(tiny)
        times = _time(lambda: sched.run(tiny), reps * 20)
        print(f"fixed cost of one run (2-task chain, 2 threads): "
              f"{min(times) * 1e6:.1f} / {statistics.median(times) * 1e6:.1f} us")


def matmul_experiment(rounds: int, ops: int, size: int) -> None:
    cores = os.cpu_count() or 1
    print(f"\n== 2 replicas x {ops} chained {size}x{size} matmuls ({cores} cores); "
          f"ms per run: best / median of {rounds} rounds; CPU time / wall time ==")
    gen = torch.Generator().manual_seed(0)
    a = [torch.randn(size, size, generator=gen) for _ in range(2)]
    c = [torch.empty(size, size) for _ in range(2)]

    def op(d: int) -> Callable[[], None]:
        return lambda: torch.mm(a[d], a[d], out=c[d])
    fns = [op(d) for d in range(2) for _ in range(ops)]
    edges = [(d * ops + k, d * ops + k + 1) for d in range(2) for k in range(ops - 1)]
    graph = TaskGraph.from_edges(fns, edges)
    main_threads = torch.get_num_threads()
    configs = [(1, main_threads), (1, 1)] + [(t, k) for t in (2, 4) for k in (1, 2)]
    scheds = [Scheduler(t, initializer=torch_threads_initializer(k) if t > 1 else None)
              for t, k in configs]
    torch.set_num_threads(main_threads)  # the initializer also moved torch's global default
    times: list[list[float]] = [[] for _ in configs]
    cpu = [0.0] * len(configs)  # process CPU seconds: cpu / wall = cores kept busy
    probe: list[int] = []
    probe_graph = TaskGraph.from_edges([lambda: probe.append(torch.get_num_threads())], [])

    def run(k: int, g: TaskGraph) -> None:
        threads, torch_threads = configs[k]
        if threads > 1:
            scheds[k].run(g)
            return
        torch.set_num_threads(torch_threads)  # serial: the caller's own setting
        try:
            scheds[k].run(g)
        finally:
            torch.set_num_threads(main_threads)
    try:
        for k in range(len(configs)):
            run(k, graph)  # warm-up: each worker's OpenMP team and MKL buffers
            run(k, probe_graph)  # what a task really sees
        # NOTE: configurations alternate within each round so that load from other processes
        # on a shared machine hits all of them alike.
        for _ in range(rounds):
            for k in range(len(configs)):
                c0 = time.process_time()
                times[k] += _time(lambda k=k: run(k, graph), 1)
                cpu[k] += time.process_time() - c0
    finally:
        for sched in scheds:
            sched.close()
    for (threads, _), ts, seen, c in zip(configs, times, probe, cpu):
        where = "caller" if threads == 1 else "worker"
        print(f"scheduler threads={threads}, torch threads per {where}={seen}: "
              f"{min(ts) * 1e3:8.2f} / {statistics.median(ts) * 1e3:8.2f}   "
              f"cores busy {c / sum(ts):.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    parser.add_argument("--part", choices=("all", "overhead", "threads"), default="all")
    args = parser.parse_args()
    # NOTE: parallel speed-ups need idle cores; on a shared machine read them with the load.
    print("load average at start: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    if args.part in ("all", "overhead"):
        overhead(5 if args.quick else 15, n=2000)
    if args.part in ("all", "threads"):
        rounds = 5 if args.quick else 15
        for size, ops in ((512, 20), (256, 40), (128, 100), (64, 200)):
            matmul_experiment(rounds, ops=ops, size=size)
    print("\nload average at end: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))


if __name__ == "__main__":
    main()
