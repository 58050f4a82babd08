"""Executor overhead: parafluid's Executor against the same computation in plain torch calls.

Case ``mlp``: one training step (forward, backward, SGD update) of an MLP 784-512-512-10
with ReLU and softmax cross-entropy, batch 128. parafluid runs the program with
``Executor.run(feed=numpy arrays, fetch_list=[loss])``; the reference is the same model
written directly with torch tensor ops (hand-written backward, no autograd) in a plain
Python loop. Prints the ratio of the median step times, parafluid / torch (target <= 1.10).

Case ``chain``: 200 tiny elementwise ops (add, scale, mul, repeating) on 16-element tensors,
forward only, against the same 200 raw torch calls. Prints the per-op overhead
``(t_parafluid - t_torch) / 200`` in microseconds (target <= 5 us), run overhead included;
with ``--with-profiler`` also what ``fluid.profiler`` adds per op while it is on (its op
hook; the table and trace it writes at the end are not counted).

Both sides use the same number of torch intra-op threads and run alternately in one process
(a block of steps of one, then of the other, repeated); figures are medians over the
repetitions, with the median of the per-repetition ratios and the ratio of the minima next to
them (more robust on a shared machine). For the MLP, a third line times the very ops the
Executor runs, called in a bare loop: its gap to the Executor line is Executor.run's own cost,
its gap to torch is the cost of the op-by-op program itself. Benchmarks are not tests:
nothing here asserts on a time.

    python bench/executor_overhead.py                   # both cases
    python bench/executor_overhead.py --threads 1 --reps 9
    python bench/executor_overhead.py --case chain --profile
    python bench/executor_overhead.py --case chain --with-profiler
"""

from __future__ import annotations

import argparse
import cProfile
import os
import platform
import pstats
import statistics
import sys
import time
from collections.abc import Callable

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from models import classifier  # noqa: E402

import parafluid as fluid  # noqa: E402
from parafluid.executor import compile_program  # noqa: E402

BATCH, SIZES, LR = 128, (784, 512, 512, 10), 0.01
CHAIN_OPS, CHAIN_WIDTH = 200, 16


# ---------------------------------------------------------------------- case 1: MLP step


def build_mlp() -> tuple[Callable[[], float], Callable[[], float], Callable[[], float]]:
    """(parafluid step, torch step, parafluid's bound ops called without Executor.run), all
    starting from the same weights and fed the same batch."""
    main, startup, loss = classifier("mlp", hidden=SIZES[1:-1],
                                     optimizer=fluid.optimizer.SGD(learning_rate=LR))
    scope, exe = fluid.Scope(), fluid.Executor(fluid.CPUPlace())
    exe.run(startup, scope=scope)

    rng = np.random.RandomState(0)
    xs = rng.uniform(0, 1, (BATCH, SIZES[0])).astype("float32")
    ys = rng.randint(0, SIZES[-1], (BATCH, 1)).astype("int64")
    feed = {"x": xs, "label": ys}

    def parafluid_step() -> float:
        out, = exe.run(main, feed=feed, fetch_list=[loss], scope=scope)
        return float(out[0])

    names = [(f"fc_{i}.w_0", f"fc_{i}.b_0") for i in range(len(SIZES) - 1)]
    params = [(scope.find_var(w).value.clone(), scope.find_var(b).value.clone())
              for w, b in names]
    tx, tlabel = torch.from_numpy(xs), torch.from_numpy(ys)
    rows = torch.arange(BATCH)

    def torch_step() -> float:
        acts, pre = [tx], []
        for i, (w, b) in enumerate(params):
            z = acts[-1] @ w + b
            pre.append(z)
            acts.append(torch.relu(z) if i < len(params) - 1 else z)
        logp = torch.log_softmax(acts[-1], dim=1)
        loss_value = -logp.gather(1, tlabel).mean()
        d = logp.exp()
        d[rows, tlabel[:, 0]] -= 1.0
        d /= BATCH
        for i in range(len(params) - 1, -1, -1):
            w, b = params[i]
            if i < len(params) - 1:
                d = d * (pre[i] > 0)
            dw, db = acts[i].t() @ d, d.sum(0)
            if i > 0:
                d = d @ w.t()
            w.sub_(dw, alpha=LR)
            b.sub_(db, alpha=LR)
        return loss_value.item()

    # The same bound ops the Executor runs, called in a bare loop: the time between this and
    # parafluid_step is what Executor.run itself costs (feeds, scope, fetch).
    plan = compile_program(main, ("label", "x"), (loss.name,), torch.device("cpu"))
    plain_scope = fluid.Scope()
    plan.services[0].scope = plain_scope
    for name in plan.reads[0]:
        if name not in feed:
            plain_scope.var(name).value = scope.find_var(name).value.clone()
    tfeed = {"x": tx, "label": tlabel}

    def ops_only_step() -> float:
        plan.begin()
        env = plan.envs[0]
        env.update(tfeed)
        for name in plan.reads[0]:
            if name not in env:
                env[name] = plain_scope.find_var(name).value
        for task in plan.tasks:  # the Executor's tasks (op, write-back, release) in a loop
            task()
        return env[loss.name].item()

    first = (parafluid_step(), torch_step(), ops_only_step())
    if not np.allclose(first, first[0], rtol=1e-4):
        raise RuntimeError(f"the MLP steps disagree: losses (parafluid, torch, ops alone) "
                           f"= {first}")
    return parafluid_step, torch_step, ops_only_step


# ---------------------------------------------------------------------- case 2: op chain


def chain_program() -> tuple[fluid.Program, fluid.Variable]:
    """The chain: CHAIN_OPS elementwise ops (add, scale, mul, repeating) from x and y; its
    output."""
    main = fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, fluid.Program()):
        x = fluid.layers.data(name="x", shape=[CHAIN_WIDTH], dtype="float32",
                              append_batch_size=False)
        y = fluid.layers.data(name="y", shape=[CHAIN_WIDTH], dtype="float32",
                              append_batch_size=False)
        h = x
        for i in range(CHAIN_OPS):
            kind = i % 3
            if kind == 0:
                h = fluid.layers.elementwise_add(h, y)
            elif kind == 1:
                h = fluid.layers.scale(h, scale=0.5)
            else:
                h = fluid.layers.elementwise_mul(h, y)
    assert len(main.global_block().ops) == CHAIN_OPS
    return main, h


def build_chain() -> tuple[Callable[[], object], Callable[[], object]]:
    main, h = chain_program()
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    rng = np.random.RandomState(0)
    xs = rng.uniform(0.5, 1.0, CHAIN_WIDTH).astype("float32")
    ys = rng.uniform(0.5, 1.0, CHAIN_WIDTH).astype("float32")
    feed = {"x": xs, "y": ys}
    tx, ty = torch.from_numpy(xs), torch.from_numpy(ys)

    def parafluid_chain() -> object:
        return exe.run(main, feed=feed, fetch_list=[h], scope=scope)[0]

    def torch_chain() -> object:
        t = tx
        for i in range(CHAIN_OPS):
            kind = i % 3
            if kind == 0:
                t = torch.add(t, ty)
            elif kind == 1:
                t = t * 0.5
            else:
                t = torch.mul(t, ty)
        return t.numpy().copy()

    np.testing.assert_allclose(parafluid_chain(), torch_chain(), rtol=1e-6)
    return parafluid_chain, torch_chain


def profiled(fn: Callable[[], object]) -> Callable[[], object]:
    """``fn`` run with fluid.profiler's op hook registered (what profiling costs per op, not
    counting the table and trace written at the end)."""
    from parafluid.engine.runtime import add_op_hook, remove_op_hook
    from parafluid.profiler import _Recording

    recording = _Recording("CPU")

    def run() -> object:
        add_op_hook(recording.hook)
        try:
            return fn()
        finally:
            remove_op_hook(recording.hook)
            recording.records.clear()
    return run


# ---------------------------------------------------------------------- timing


def interleaved(fns: list[Callable[[], object]], reps: int, steps: int,
                warmup: int) -> list[list[float]]:
    """Per-step seconds of each of ``fns``: ``reps`` rounds of one block of ``steps`` calls each,
    the block order rotating every round so that no side always runs first."""
    for _ in range(warmup):
        for fn in fns:
            fn()
    times: list[list[float]] = [[] for _ in fns]
    for r in range(reps):
        for k in range(len(fns)):
            i = (k + r) % len(fns)
            start = time.perf_counter()
            for _ in range(steps):
                fns[i]()
            times[i].append((time.perf_counter() - start) / steps)
    return times


def profile(fn: Callable[[], object], steps: int, top: int = 18) -> None:
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(steps):
        fn()
    prof.disable()
    print(f"\ncProfile of {steps} parafluid runs (tottime, top {top}):")
    pstats.Stats(prof).sort_stats("tottime").print_stats(top)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--case", choices=("mlp", "chain", "all"), default="all")
    p.add_argument("--threads", type=int, default=torch.get_num_threads(),
                   help="torch intra-op threads for both sides (default: torch's, %(default)s)")
    p.add_argument("--reps", type=int, default=11, help="alternating repetitions (median)")
    p.add_argument("--steps", type=int, default=10, help="MLP steps per repetition")
    p.add_argument("--chain-steps", type=int, default=200, help="chain runs per repetition")
    p.add_argument("--profile", action="store_true", help="cProfile the parafluid side")
    p.add_argument("--with-profiler", action="store_true",
                   help="chain case: also time the parafluid side with fluid.profiler on (its "
                        "records make the process allocate more, which slows the other "
                        "sides by a percent or two: off by default)")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, {platform.system()}; "
          f"python {platform.python_version()}, torch {torch.__version__}, "
          f"{torch.get_num_threads()} intra-op thread(s)")
    print(f"repetitions: {args.reps} (medians below), alternating parafluid/torch")

    if args.case in ("mlp", "all"):
        pf, tt, bare = build_mlp()
        ta, tb, tc = interleaved([pf, tt, bare], args.reps, args.steps, warmup=3)
        mp, mt, mc = statistics.median(ta), statistics.median(tb), statistics.median(tc)
        print(f"\nMLP {'-'.join(map(str, SIZES))}, batch {BATCH}, one SGD step "
              f"({args.steps} steps x {args.reps}):")
        print(f"  parafluid Executor  {mp * 1e3:8.3f} ms/step   (min {min(ta) * 1e3:.3f})")
        print(f"  plain torch         {mt * 1e3:8.3f} ms/step   (min {min(tb) * 1e3:.3f})")
        print(f"  parafluid ops alone {mc * 1e3:8.3f} ms/step   (min {min(tc) * 1e3:.3f}; the "
              "bound ops in a bare loop, no Executor.run)")
        ratios = [x / y for x, y in zip(ta, tb)]
        print(f"  ratio parafluid/torch: {mp / mt:.3f} (of the medians)   "
              f"{statistics.median(ratios):.3f} (median of per-rep ratios)   "
              f"{min(ta) / min(tb):.3f} (of the minima)")
        print(f"  per-rep ratios: {', '.join(f'{r:.3f}' for r in ratios)}")
        if args.profile:
            profile(pf, args.steps)

    if args.case in ("chain", "all"):
        pf, tt = build_chain()
        fns = [pf, tt, profiled(pf)] if args.with_profiler else [pf, tt]
        ta, tb, *tp = interleaved(fns, args.reps, args.chain_steps, warmup=20)
        mp, mt = statistics.median(ta), statistics.median(tb)
        print(f"\nchain of {CHAIN_OPS} elementwise ops on {CHAIN_WIDTH}-element tensors, "
              f"forward ({args.chain_steps} runs x {args.reps}):")
        print(f"  parafluid Executor  {mp * 1e6:8.1f} us/run   ({mp * 1e6 / CHAIN_OPS:.2f} us/op)")
        print(f"  plain torch         {mt * 1e6:8.1f} us/run   ({mt * 1e6 / CHAIN_OPS:.2f} us/op)")
        per_rep = [(x - y) * 1e6 / CHAIN_OPS for x, y in zip(ta, tb)]
        print(f"  overhead per op: {(mp - mt) * 1e6 / CHAIN_OPS:.2f} us (of the medians)   "
              f"{statistics.median(per_rep):.2f} us (median of per-rep)   "
              f"{(min(ta) - min(tb)) * 1e6 / CHAIN_OPS:.2f} us (of the minima)")
        print(f"  per-rep overhead (us/op): {', '.join(f'{v:.2f}' for v in per_rep)}")
        if tp:
            mprof = statistics.median(tp[0])
            prof_rep = [(x - y) * 1e6 / CHAIN_OPS for x, y in zip(tp[0], ta)]
            print(f"  fluid.profiler on   {mprof * 1e6:8.1f} us/run   "
                  f"(+{statistics.median(prof_rep):.2f} us/op over profiling off, median of "
                  f"per-rep; x{mprof / mp:.2f})")
        if args.profile:
            profile(pf, args.chain_steps)


if __name__ == "__main__":
    main()
