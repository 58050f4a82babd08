"""Mixed precision on this machine: a training step of the same MLP in float32 and with
``fluid.contrib.mixed_precision.decorate`` (float16 mul ops, casts, loss scaling).

Both programs run alternately in one process, in pairs, so that a shared, noisy machine
slows both alike; the figure is the median of the per-pair ratios AMP / float32 (below 1.00:
mixed precision is faster). Also printed: the ratio of a bare torch matmul of the MLP's
largest layer in float16 and float32, what the mul ops can gain at most. ``--clock cpu``
(the default) times the process's CPU time with torch on one thread, which a loaded
machine disturbs less than wall-clock time (``--clock wall``).

    python bench/mixed_precision.py
    python bench/mixed_precision.py --pairs 40 --batch 256 --clock wall
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch

import parafluid as fluid

L = fluid.layers


def build(amp: bool, width: int) -> tuple:
    main, start = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, start), fluid.unique_name.guard():
        x = L.data("x", shape=[784], dtype="float32")
        y = L.data("y", shape=[1], dtype="int64")
        h = L.fc(L.fc(x, width, act="relu"), width, act="relu")
        loss = L.mean(L.cross_entropy(L.fc(h, 10, act="softmax"), y))
        opt = fluid.optimizer.SGD(0.01)
        if amp:
            opt = fluid.contrib.mixed_precision.decorate(opt, init_loss_scaling=128.0)
        opt.minimize(loss)
    return main, start, loss


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=20)
    ap.add_argument("--steps", type=int, default=5, help="steps per timed block")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--width", type=int, default=512)
    ap.add_argument("--clock", choices=("cpu", "wall"), default="cpu")
    args = ap.parse_args()
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    if args.clock == "cpu":
        torch.set_num_threads(1)
    rng = np.random.RandomState(0)
    feed = {"x": rng.rand(args.batch, 784).astype("float32"),
            "y": rng.randint(0, 10, (args.batch, 1)).astype("int64")}
    exe = fluid.Executor(fluid.CPUPlace())
    runs = []
    for amp in (False, True):
        prog, start, loss = build(amp, args.width)
        scope = fluid.Scope()
        exe.run(start, scope=scope)
        exe.run(prog, feed=feed, fetch_list=[loss], scope=scope)  # warm up

        def step(prog=prog, scope=scope, loss=loss) -> float:
            t = clock()
            for _ in range(args.steps):
                exe.run(prog, feed=feed, fetch_list=[loss], scope=scope)
            return clock() - t

        runs.append(step)
    ratios = [runs[1]() / runs[0]() for _ in range(args.pairs)]
    a = torch.randn(args.batch, args.width)
    b = torch.randn(args.width, args.width)

    def mm(dtype: torch.dtype) -> float:
        x, w = a.to(dtype), b.to(dtype)
        t = clock()
        for _ in range(50):
            x @ w
        return clock() - t

    mm_ratios = [mm(torch.float16) / mm(torch.float32) for _ in range(args.pairs)]
    print(f"MLP 784-{args.width}-{args.width}-10, batch {args.batch}, SGD; "
          f"{args.pairs} pairs of {args.steps} steps; {args.clock} clock")
    print(f"  training step, AMP / float32:        {statistics.median(ratios):.2f}")
    print(f"  torch matmul [{args.batch}x{args.width}]@[{args.width}x{args.width}], "
          f"float16 / float32: {statistics.median(mm_ratios):.2f}")


if __name__ == "__main__":
    main()
