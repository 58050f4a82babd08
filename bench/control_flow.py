"""The cost of a While loop against the same recurrence unrolled in Python at build time.

The model: h_{t+1} = tanh(x Wx + h_t Wh + b) for T steps, loss = mean(h_T^2), SGD; batch B,
hidden H. "loop" builds it with fluid.layers.While (each iteration runs the body's sub-block
through ctx.run_block; training runs while_grad, which recomputes each iteration's body from
its recorded inputs before its gradient ops); "unrolled" repeats the cell T times in the
program. Both run alternately in one process, in pairs; the figure is the median of the
per-pair ratios loop / unrolled (1.00 = no overhead), and each side's median step time.

    python bench/control_flow.py                       # T=20, B=64, H=64, train and forward
    python bench/control_flow.py --steps 50 --hidden 256 --pairs 30
    python bench/control_flow.py --threads 1           # on a shared, loaded machine

Several torch threads on a loaded machine make both sides noisy (the ratio then says more
about the load than about the loop): compare with ``--threads 1``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import parafluid as fluid  # noqa: E402

L = fluid.layers


def build(loop: bool, steps: int, hidden: int, train: bool):
    main, startup = fluid.Program(), fluid.Program()
    startup.random_seed = 1
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        x = L.data(name="x", shape=[hidden], dtype="float32")
        h = L.fill_constant_batch_size_like(x, [-1, hidden], "float32", 0.0)
        h.stop_gradient = False

        def cell(h):
            return L.fc(input=[x, h], size=hidden, act="tanh",
                        param_attr=[fluid.ParamAttr(name="wx"), fluid.ParamAttr(name="wh")],
                        bias_attr=fluid.ParamAttr(name="b"))
        if loop:
            i = L.fill_constant([1], "int64", 0)
            n = L.fill_constant([1], "int64", steps)
            cond = L.less_than(x=i, y=n)
            w = L.While(cond=cond)
            with w.block():
                L.assign(cell(h), output=h)
                L.increment(x=i, value=1, in_place=True)
                L.less_than(x=i, y=n, cond=cond)
        else:
            for _ in range(steps):
                h = cell(h)
        loss = L.mean(L.square(h))
        if train:
            fluid.optimizer.SGD(learning_rate=0.01).minimize(loss)
    return main, startup, loss


def timed_runs(args: argparse.Namespace, train: bool) -> tuple[float, float, float]:
    xs = np.random.RandomState(0).uniform(-1, 1, (args.batch, args.hidden)).astype("float32")
    runners = []
    for loop in (True, False):
        main, startup, loss = build(loop, args.steps, args.hidden, train)
        exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
        exe.run(startup, scope=scope)

        def run(exe=exe, main=main, loss=loss, scope=scope) -> None:
            exe.run(main, feed={"x": xs}, fetch_list=[loss], scope=scope)
        for _ in range(3):
            run()  # warm-up: plans built
        runners.append(run)
    ratios, times = [], ([], [])
    for _ in range(args.pairs):
        pair = []
        for k, run in enumerate(runners):
            t0 = time.perf_counter()
            run()
            pair.append(time.perf_counter() - t0)
            times[k].append(pair[-1])
        ratios.append(pair[0] / pair[1])
    return statistics.median(ratios), statistics.median(times[0]), statistics.median(times[1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--pairs", type=int, default=20)
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    args = p.parse_args()
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    import torch

    print(f"T={args.steps} B={args.batch} H={args.hidden}, {args.pairs} pairs, "
          f"{torch.get_num_threads()} torch threads")
    for train in (False, True):
        ratio, t_loop, t_unrolled = timed_runs(args, train)
        print(f"{'train  ' if train else 'forward'}  loop {t_loop * 1e3:8.2f} ms  unrolled "
              f"{t_unrolled * 1e3:8.2f} ms  loop/unrolled {ratio:5.2f}")


if __name__ == "__main__":
    main()
