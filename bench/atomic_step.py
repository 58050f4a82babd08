"""The cost of atomic steps: the same runs with and without what makes a step atomic.

A step is atomic (``parafluid.engine.atomic``): compute nodes that write persistables record
them in an undo log, update-tail nodes check the step guard (and record their writes while
compute nodes still run), SIGINT goes to the guard during the run. "Without" runs the same
bound ops with none of that: each op in a plain task wrapper (op, error, scope writes,
releases), all tasks in one graph, nothing recorded, SIGINT untouched (``unguarded_run_plan``
below, swapped in for ``run_plan`` around each "without" block). Both
sides run alternately in one process, in small blocks, so that a shared, noisy machine slows
both alike; the figure is the median of the per-pair ratios with / without (1.00 = free).

Cases:
  mlp      Executor, MLP 784-512-512-10, batch 128, SGD (bench/executor_overhead.py's step)
  adam     the same with Adam (in-place moments, beta-pow accumulators in the update tail)
  pe       ParallelExecutor, CPU_NUM=2, the Adam MLP, batch 128 split over the devices
  pe-sgd   ParallelExecutor, CPU_NUM=2, the SGD MLP, batch 256 (bench/data_parallel.py's (b))
  chain    Executor, 200 tiny elementwise ops, forward only (per-run overhead, no tail)

    python bench/atomic_step.py                      # every case
    python bench/atomic_step.py --case mlp --pairs 60
    python bench/atomic_step.py --case mlp --threads 1 --clock cpu   # on a loaded machine
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("CPU_NUM", "2")

from models import classifier  # noqa: E402

import parafluid as fluid  # noqa: E402
import parafluid.engine.plan as plan_module  # noqa: E402
from parafluid.engine.plan import Plan, run_plan  # noqa: E402
from parafluid.engine.runtime import OpRunError, op_error  # noqa: E402
from parafluid.engine.scheduler import TaskError, TaskGraph  # noqa: E402

BATCH, SIZES = 128, (784, 512, 512, 10)
_UNGUARDED: dict[int, TaskGraph] = {}


def unguarded_task(plan: Plan, i: int) -> Callable[[], None]:
    """Node ``i``'s task in a plain wrapper: no undo log, no step guard."""
    node = plan.graph.nodes[i]
    fn, writes = plan._fns[i], plan._writes[i]
    lock, pending, envs = plan._lock, plan._pending, plan.envs
    op, index = node.op, node.op_index
    device = node.device if plan._name_devices else None
    drops = [(envs[key[0]], key[1], key if n > 1 else None)
             for key, n in plan._releases.get(i) or ()]

    def task() -> None:
        try:
            fn()
        except OpRunError:
            raise
        except Exception as e:
            raise op_error(op, index, e, device) from e
        if writes:
            for svc, env, name in writes:
                svc.write_persistable(name, env[name])
        if drops:
            for env, name, key in drops:
                if key is None:
                    env.pop(name, None)
                    continue
                with lock:
                    pending[key] -= 1
                    last = pending[key] == 0
                if last:
                    env.pop(name, None)
    return task


def unguarded_run_plan(plan: Plan, scheduler: Any, timeout: float | None = None,
                    check_nan_inf: bool = False) -> None:
    """A plan run without atomic steps: one graph of plain tasks, nothing recorded."""
    graph = _UNGUARDED.get(id(plan))
    if graph is None:
        graph = _UNGUARDED[id(plan)] = TaskGraph.from_edges(
            [unguarded_task(plan, i) for i in range(len(plan.tasks))], plan.edges,
            names=plan.names, order=range(len(plan.tasks)))
    try:
        scheduler.run(graph, timeout=timeout)
    except TaskError as e:
        if isinstance(e.__cause__, OpRunError):
            raise e.__cause__ from e.__cause__.__cause__
        raise


def without(step: Callable[[], Any]) -> Callable[[], Any]:
    def run() -> Any:
        plan_module.run_plan = unguarded_run_plan  # what Plan.run calls
        try:
            return step()
        finally:
            plan_module.run_plan = run_plan
    return run


def mlp_program(adam: bool) -> tuple[Any, Any, Any]:
    opt = fluid.optimizer.Adam(1e-3) if adam else fluid.optimizer.SGD(0.01)
    return classifier("mlp", hidden=SIZES[1:-1], optimizer=opt)


def mlp_feed(batch: int = BATCH) -> dict[str, np.ndarray]:
    rng = np.random.RandomState(0)
    return {"x": rng.uniform(0, 1, (batch, SIZES[0])).astype("float32"),
            "label": rng.randint(0, SIZES[-1], (batch, 1)).astype("int64")}


def executor_step(adam: bool) -> Callable[[], Any]:
    main, startup, loss = mlp_program(adam)
    scope, exe = fluid.Scope(), fluid.Executor(fluid.CPUPlace())
    exe.run(startup, scope=scope)
    feed = mlp_feed()
    return lambda: exe.run(main, feed=feed, fetch_list=[loss], scope=scope)


def parallel_step(adam: bool = True, batch: int = BATCH) -> Callable[[], Any]:
    main, startup, loss = mlp_program(adam=adam)
    scope = fluid.Scope()
    fluid.Executor(fluid.CPUPlace()).run(startup, scope=scope)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pe = fluid.ParallelExecutor(False, loss_name=loss.name, main_program=main,
                                    scope=scope)
    feed = mlp_feed(batch)
    return lambda: pe.run([loss], feed=feed)


def chain_step() -> Callable[[], Any]:
    main = fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, fluid.Program()):
        x = fluid.layers.data(name="x", shape=[16], dtype="float32", append_batch_size=False)
        h = x
        for i in range(200):
            h = fluid.layers.scale(h, scale=0.5) if i % 2 else fluid.layers.elementwise_add(h, x)
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    feed = {"x": np.ones(16, "float32")}
    return lambda: exe.run(main, feed=feed, fetch_list=[h], scope=scope)


def compare(name: str, step: Callable[[], Any], pairs: int, block: int,
            clock: Callable[[], float] = time.perf_counter) -> None:
    """Alternate blocks of ``block`` steps with and without; print the per-pair ratios."""
    sides = {"with": step, "without": without(step)}
    for fn in sides.values():  # warm up both (plans built, first-run snapshots taken)
        for _ in range(3):
            fn()
    times: dict[str, list[float]] = {"with": [], "without": []}
    for p in range(pairs):
        order = ("with", "without") if p % 2 == 0 else ("without", "with")
        for side in order:
            fn = sides[side]
            start = clock()
            for _ in range(block):
                fn()
            times[side].append((clock() - start) / block)
    ratios = [a / b for a, b in zip(times["with"], times["without"])]
    w, wo = statistics.median(times["with"]), statistics.median(times["without"])
    q = statistics.quantiles(ratios, n=4)
    print(f"{name:6s} with {w * 1e3:8.3f} ms/step  without {wo * 1e3:8.3f} ms/step  "
          f"(difference {(w - wo) * 1e6:+.1f} us/step)   ratio with/without: median "
          f"{statistics.median(ratios):.4f}  (quartiles {q[0]:.4f} .. {q[2]:.4f}, "
          f"{pairs} pairs of {block} steps)")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--case", choices=("mlp", "adam", "pe", "pe-sgd", "chain", "all"),
                   default="all")
    p.add_argument("--pairs", type=int, default=40, help="with/without block pairs")
    p.add_argument("--block", type=int, default=5, help="steps per block")
    p.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                   help="wall: perf_counter; cpu: the process's CPU time (all threads), "
                        "blind to other processes' load but also to idle cores")
    p.add_argument("--threads", type=int, default=torch.get_num_threads(),
                   help="torch intra-op threads of the calling thread (default %(default)s)")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    clock = time.perf_counter if args.clock == "wall" else time.process_time
    print(f"{os.cpu_count()} cores, torch {torch.__version__}, "
          f"{torch.get_num_threads()} intra-op thread(s), CPU_NUM={os.environ['CPU_NUM']}")
    cases = {"mlp": lambda: executor_step(adam=False), "adam": lambda: executor_step(True),
             "pe": parallel_step, "pe-sgd": lambda: parallel_step(adam=False, batch=256),
             "chain": chain_step}
    for name, make in cases.items():
        if args.case in (name, "all"):
            block = args.block * (20 if name == "chain" else 1)
            compare(name, make(), args.pairs, block, clock)


if __name__ == "__main__":
    main()
