"""Data-parallel training throughput, side by side in one run (a benchmark, not a test).

For the MLP 784-512-512-10 and a small CNN (global batch 256, SGD, softmax cross entropy),
samples/s of one training step for:

  (a)  parafluid Executor, 1 device, one intra-op thread per core
  (a1) parafluid Executor, 1 device, 1 intra-op thread (one core: the unit (b) scales)
  (b)  parafluid ParallelExecutor, 2 CPU devices (CPU_NUM=2), default threading policy
  (b2) (b) with BuildStrategy.fall_back_to_one_device (timed after its measuring steps)
  (c)  the same model hand-written in PyTorch, one process, 2 intra-op threads
  (d)  PyTorch DistributedDataParallel over gloo, 2 processes x 1 thread (batch 128 each)
  (e)  a control: PyTorch, one replica per Python thread (1 torch thread, batch 128 each) and
       no gradient exchange at all: the ceiling of in-process data parallelism here

and the executor's overhead per op on a graph of tiny ops. Pin the process to the cores you
mean to measure (``taskset -c 0,1``): the figures assume 2 cores.

Run::

    PYTHONPATH=$PWD taskset -c 0,1 python bench/data_parallel.py [--quick]
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import time
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from models import classifier  # noqa: E402

import parafluid as fluid  # noqa: E402
from parafluid import unique_name  # noqa: E402
from parafluid.parallel.device_fallback import TIMED_STEPS, WARM_STEPS  # noqa: E402

BATCH = 256


# ---------------------------------------------------------------------- models


def fluid_model(kind: str) -> tuple[Any, Any, Any]:
    return classifier(kind)


def torch_model(kind: str) -> torch.nn.Module:
    nn = torch.nn
    if kind == "mlp":
        return nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                             nn.Linear(512, 10))
    return nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(32 * 7 * 7, 10))


def batch(kind: str, n: int = BATCH, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.RandomState(seed)
    shape = (n, 784) if kind == "mlp" else (n, 1, 28, 28)
    return {"x": rng.rand(*shape).astype("float32"),
            "label": rng.randint(0, 10, (n, 1)).astype("int64")}


# ---------------------------------------------------------------------- timing


def samples_per_s(step: Callable[[], None], steps: int, repeats: int, n: int = BATCH) -> float:
    for _ in range(3):
        step()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        times.append(time.perf_counter() - t0)
    return n * steps / min(times)


def run_executor(kind: str, steps: int, repeats: int, threads: int | None) -> float:
    main, startup, loss = fluid_model(kind)
    scope, exe = fluid.Scope(), fluid.Executor(fluid.CPUPlace())
    exe.run(startup, scope=scope)
    feed = batch(kind)
    old = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        return samples_per_s(lambda: exe.run(main, feed=feed, fetch_list=[loss], scope=scope),
                             steps, repeats)
    finally:
        torch.set_num_threads(old)


def run_parallel(kind: str, steps: int, repeats: int, ndev: int = 2,
                 overlap: bool = True, fall_back: bool = False) -> float:
    main, startup, loss = fluid_model(kind)
    scope = fluid.Scope()
    fluid.Executor(fluid.CPUPlace()).run(startup, scope=scope)
    bs = fluid.BuildStrategy()
    bs.overlap_communication = overlap
    bs.fall_back_to_one_device = fall_back
    pe = fluid.ParallelExecutor(False, loss_name=loss.name, main_program=main, scope=scope,
                                places=fluid.cpu_places(ndev), build_strategy=bs)
    feed = batch(kind)
    if fall_back:  # its measuring steps first: the figure is the run after its choice
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for _ in range(2 * (WARM_STEPS + TIMED_STEPS) + 1):
                pe.run([loss.name], feed=feed)
        print(f"  ({kind}: fall_back_to_one_device chose {pe.devices_in_use} device(s))")
    try:
        return samples_per_s(lambda: pe.run([loss.name], feed=feed), steps, repeats)
    finally:
        pe.close()


def run_torch(kind: str, steps: int, repeats: int, threads: int = 2) -> float:
    torch.manual_seed(1)
    model = torch_model(kind)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = batch(kind)
    x, y = torch.from_numpy(data["x"]), torch.from_numpy(data["label"]).reshape(-1)

    def step() -> None:
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()

    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        return samples_per_s(step, steps, repeats)
    finally:
        torch.set_num_threads(old)


def _ddp_worker(rank: int, world: int, port: int, kind: str, steps: int, repeats: int,
                out: Any) -> None:
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world)
    torch.manual_seed(1)
    model = torch.nn.parallel.DistributedDataParallel(torch_model(kind))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = batch(kind, BATCH // world, seed=rank)
    x, y = torch.from_numpy(data["x"]), torch.from_numpy(data["label"]).reshape(-1)

    def step() -> None:
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()

    rate = samples_per_s(step, steps, repeats, n=BATCH)
    dist.barrier()  # both ranks done before gloo's threads are torn down
    if rank == 0:
        out.put(rate)
    dist.barrier()
    dist.destroy_process_group()


def run_ddp(kind: str, steps: int, repeats: int, world: int = 2) -> float:
    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    out = ctx.SimpleQueue()
    mp.start_processes(_ddp_worker, args=(world, port, kind, steps, repeats, out), nprocs=world,
                       start_method="spawn", join=True)
    return out.get()


def run_threads_no_exchange(kind: str, steps: int, repeats: int, ndev: int = 2) -> float:
    """(e) PyTorch, one model replica per Python thread (1 torch thread each), half the batch
    each, and NO gradient exchange: an upper bound for any in-process data parallelism on
    this machine, (b) included (which also splits the feed and all-reduces)."""
    import threading

    torch.manual_seed(1)
    replicas = []
    for rank in range(ndev):
        model = torch_model(kind)
        data = batch(kind, BATCH // ndev, seed=rank)
        replicas.append((model, torch.optim.SGD(model.parameters(), lr=0.01),
                         torch.from_numpy(data["x"]),
                         torch.from_numpy(data["label"]).reshape(-1)))

    def one_step(model: Any, opt: Any, x: Any, y: Any) -> None:
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()

    class Workers:
        """Persistent threads, released once per step (no thread start in the timing)."""

        def __init__(self) -> None:
            self.go = [threading.Semaphore(0) for _ in replicas]
            self.done = threading.Semaphore(0)
            self.stop = False
            self.threads = [threading.Thread(target=self.loop, args=(r,), daemon=True)
                            for r in range(ndev)]
            for t in self.threads:
                t.start()

        def loop(self, r: int) -> None:
            torch.set_num_threads(1)
            while True:
                self.go[r].acquire()
                if self.stop:
                    return
                one_step(*replicas[r])
                self.done.release()

        def step(self) -> None:
            for g in self.go:
                g.release()
            for _ in replicas:
                self.done.acquire()

        def close(self) -> None:
            self.stop = True
            for g in self.go:
                g.release()
            for t in self.threads:
                t.join()

    workers = Workers()
    try:
        return samples_per_s(workers.step, steps, repeats)
    finally:
        workers.close()


# ---------------------------------------------------------------------- control


def thread_scaling_control(repeats: int) -> float:
    """Speed-up of the MLP's matmuls in 2 Python threads (1 torch thread, 128 rows each)
    over 1 thread on 256 rows: what the machine allows 2 CPU devices, engine aside."""
    import threading

    def work(rows: int) -> None:
        torch.set_num_threads(1)
        g = torch.Generator().manual_seed(0)
        w1, w2 = torch.randn(784, 512, generator=g), torch.randn(512, 512, generator=g)
        x = torch.randn(rows, 784, generator=g)
        for _ in range(10):
            h = x @ w1
            h2 = h @ w2
            _ = (h2.t() @ h, h.t() @ x, (h2 @ w2.t()) @ w1.t())

    def one() -> None:
        t = threading.Thread(target=work, args=(BATCH,))
        t.start()
        t.join()

    def two() -> None:
        ts = [threading.Thread(target=work, args=(BATCH // 2,)) for _ in range(2)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()

    return min(_elapsed(one) for _ in range(repeats)) / min(_elapsed(two) for _ in range(repeats))


# ---------------------------------------------------------------------- per-op overhead


def tiny_program(n_ops: int) -> tuple[Any, Any, Any]:
    main, startup = fluid.Program(), fluid.Program()
    with unique_name.guard(), fluid.program_guard(main, startup):
        x = fluid.layers.data(name="x", shape=[1], dtype="float32")
        h = x
        for _ in range(n_ops):
            h = fluid.layers.scale(h, scale=1.0001)
    return main, startup, h


def op_overhead(n_ops: int, repeats: int) -> dict[str, float]:
    """Microseconds per op: executors vs calling the same bound kernels in a plain loop."""
    from parafluid.engine.runtime import bind_op

    main, _, out = tiny_program(n_ops)
    feed = {"x": np.ones([2, 1], "float32")}
    runners = [bind_op(op, torch.device("cpu")) for op in main.global_block().ops]
    env0 = {"x": torch.ones([1, 1])}

    def direct() -> None:
        env = dict(env0)
        for r in runners:
            r(env)

    def per_op(fn: Callable[[], None], ops: int) -> float:
        for _ in range(3):
            fn()
        best = min(_elapsed(fn) for _ in range(repeats))
        return best / ops * 1e6

    exe = fluid.Executor(fluid.CPUPlace())
    res = {"kernel call (plain loop)": per_op(direct, n_ops),
           "Executor": per_op(lambda: exe.run(main, feed={"x": feed["x"][:1]},
                                              fetch_list=[out]), n_ops)}
    for ndev, threads in ((1, 1), (2, 1), (2, 2)):
        es = fluid.ExecutionStrategy()
        es.num_threads = threads
        pe = fluid.ParallelExecutor(False, main_program=main, exec_strategy=es,
                                    places=fluid.cpu_places(ndev), scope=fluid.Scope())
        res[f"ParallelExecutor {ndev} dev, {threads} thr"] = per_op(
            lambda pe=pe: pe.run([out.name], feed=feed), n_ops * ndev)
        pe.close()
    return res


def _elapsed(fn: Callable[[], None]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


# ---------------------------------------------------------------------- main


def compare_overlap(kinds: list[str], steps: int, repeats: int, rounds: int) -> None:
    """(b) with overlap_communication on and off, alternating; medians and ratios."""
    import statistics

    print(f"# ParallelExecutor CPU_NUM=2, all-reduces overlapping the backward or not: batch "
          f"{BATCH}, {rounds} alternating rounds of {steps} steps x best of {repeats}, load "
          f"average {os.getloadavg()[0]:.2f}")
    for kind in kinds:
        rates: dict[bool, list[float]] = {True: [], False: []}
        for _ in range(rounds):
            for on in (True, False):
                rates[on].append(run_parallel(kind, steps, repeats, overlap=on))
        on, off = statistics.median(rates[True]), statistics.median(rates[False])
        ratios = [a / b for a, b in zip(rates[True], rates[False])]
        print(f"  {kind}: on {on:8.0f} samples/s, off {off:8.0f}: on / off {on / off:.2f}x "
              f"(per round: {', '.join(f'{r:.2f}' for r in ratios)})")
    print(f"# load average at the end {os.getloadavg()[0]:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="few steps (a smoke run)")
    parser.add_argument("--models", default="mlp,cnn")
    parser.add_argument("--no-ddp", action="store_true")
    parser.add_argument("--overlap", action="store_true",
                        help="only (b), its all-reduces overlapping the backward pass or not "
                        "(BuildStrategy.overlap_communication), alternating")
    parser.add_argument("--rounds", type=int, default=5, help="rounds of --overlap")
    args = parser.parse_args()
    steps, repeats = (3, 2) if args.quick else (10, 5)
    if args.overlap:
        compare_overlap(args.models.split(","), steps, repeats, args.rounds)
        return
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count() or 1
    print(f"# parafluid data-parallel benchmark: torch {torch.__version__}, {cores} cores, "
          f"batch {BATCH}, {steps} steps x best of {repeats}, "
          f"load average {os.getloadavg()[0]:.2f}")
    # NOTE: read (and so initialise) the main thread's torch threads before any worker sets
    # the process-wide default, and put that default back after the control's workers.
    main_threads = torch.get_num_threads()
    print(f"control: torch matmuls in 2 threads vs 1 (ideal 2.00 on an idle machine): "
          f"{thread_scaling_control(repeats):.2f}x")
    torch.set_num_threads(main_threads)
    for kind in args.models.split(","):
        rates = {
            "(a) Executor, 1 device": run_executor(kind, steps, repeats, cores),
            "(a1) Executor, 1 device, 1 thread": run_executor(kind, steps, repeats, 1),
            "(b) ParallelExecutor, CPU_NUM=2": run_parallel(kind, steps, repeats),
            "(b2) (b) with fall_back_to_one_device": run_parallel(kind, steps, repeats,
                                                                 fall_back=True),
            "(c) PyTorch, 1 process, 2 threads": run_torch(kind, steps, repeats),
            "(e) PyTorch, 2 threads x 1 replica, no exchange": run_threads_no_exchange(
                kind, steps, repeats),
        }
        if not args.no_ddp:
            try:
                rates["(d) PyTorch DDP gloo, 2 x 1 thread"] = run_ddp(kind, steps, repeats)
            except Exception as e:  # a crashed worker must not hide the other figures
                print(f"  (d) failed: {type(e).__name__}: {e}")
        print(f"\n## {kind}: samples/s")
        for name, rate in rates.items():
            print(f"  {name:48s} {rate:10.0f}")
        a, a1, b = rates["(a) Executor, 1 device"], rates["(a1) Executor, 1 device, 1 thread"], \
            rates["(b) ParallelExecutor, CPU_NUM=2"]
        best_torch = max(v for k, v in rates.items() if k.startswith(("(c)", "(d)")))
        e = rates["(e) PyTorch, 2 threads x 1 replica, no exchange"]
        print(f"  (b)/(a) = {b / a:.2f}   (b)/(a1) = {b / a1:.2f}   "
              f"(b)/max((c),(d)) = {b / best_torch:.2f}   (b)/(e) = {b / e:.2f}")
        b2 = rates["(b2) (b) with fall_back_to_one_device"]
        print(f"  (b2)/(a) = {b2 / a:.2f}   (b2)/max((c),(d)) = {b2 / best_torch:.2f}")
    print("\n## executor overhead per op (us), chain of 200 tiny scale ops")
    for name, us in op_overhead(200, repeats).items():
        print(f"  {name:38s} {us:8.1f}")
    print(f"\n# load average at the end {os.getloadavg()[0]:.2f} (above ~0.5 on 2 cores the "
          "2-way figures measure the other jobs too)")


if __name__ == "__main__":
    main()
