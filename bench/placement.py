"""Model parallelism on 2 CPU devices in one process vs the unplaced program, side by side.

An MLP whose two halves each take several ms per step (``--width``, ``--layers`` per
stage, ``--batch``) is trained three ways, in alternating rounds on the same data:

- ``unplaced``: the program as written, on the Executor with 1 torch thread;
- ``2 stages, k=1``: the first half under ``place_guard("/node:worker/cpu:0")``, the second
  under ``/node:worker/cpu:1``, run through ``CompiledProgram(build_strategy=...)``: one
  lane (1 torch thread) per device, a ``memcpy`` where values cross;
- ``2 stages, k=4``: the same with ``BuildStrategy.num_microbatches = 4`` (GPipe-style).

Prints the median step time of each, the speedup over ``unplaced`` (the target is >= 1.6x
with 4 micro-batches on 2 free cores), the bytes that cross between the stages per step and
the time the copies take (measured in a separate run with an op hook, whose records cost a
little), and the machine's ceiling: what 2 threads of bare torch matmuls gain over 1 right
now (on a machine shared with other work, far less than 2x). The losses of the three are
compared step by step.

    python bench/placement.py [--steps 10] [--rounds 3] [--width 512] [--batch 256]
    python bench/placement.py --compile    # a fourth side: k=4 with compiled segments

What limits the figures: with one batch (k=1) stage 1 waits for stage 0 and back, so two
devices are no faster than one; with k micro-batches the pipeline fills and drains once per
step (GPipe's bubble: at best 2k/(k+1) with 2 stages, 1.6x for k=4), the micro-batches'
matmuls are smaller (less efficient per FLOP), and the Python cost per op is paid k times.
On a machine shared with other work the two lanes do not get two free cores.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch

import parafluid as fluid
from parafluid.engine.runtime import add_op_hook, remove_op_hook


def build(placed: bool, width: int, layers: int, seed: int = 5
          ) -> tuple[fluid.Program, fluid.Program, fluid.Variable]:
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = seed
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = fluid.layers.data(name="x", shape=[width], dtype="float32")
        y = fluid.layers.data(name="y", shape=[1], dtype="float32")
        h = x
        for stage in range(2):
            guard = fluid.place_guard(f"/node:worker/cpu:{stage}") if placed else _Null()
            with guard:
                for _ in range(layers):
                    h = fluid.layers.fc(input=h, size=width, act="tanh")
                if stage == 1:
                    pred = fluid.layers.fc(input=h, size=1)
                    loss = fluid.layers.mean(fluid.layers.square_error_cost(input=pred, label=y))
        fluid.optimizer.SGD(learning_rate=0.01).minimize(loss)
    return main, startup, loss


class _Null:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


class Side:
    """One way of training: its program, scope and executor."""

    def __init__(self, name: str, placed: bool, k: int, args: argparse.Namespace,
                 compile: bool = False) -> None:
        self.name, self.k = name, k
        main, startup, self.loss = build(placed, args.width, args.layers)
        self.scope = fluid.Scope()
        self.exe = fluid.Executor(fluid.CPUPlace())
        with fluid.scope_guard(self.scope):
            self.exe.run(startup)
        if placed:
            bs = fluid.BuildStrategy()
            bs.num_microbatches = k
            bs.enable_compile = compile
            self.program = fluid.CompiledProgram(main, build_strategy=bs)
        else:
            self.program = main
        self.times: list[float] = []
        self.losses: list[float] = []

    def step(self, feed: dict[str, np.ndarray]) -> float:
        with fluid.scope_guard(self.scope):
            start = time.perf_counter()
            out, = self.exe.run(self.program, feed=feed, fetch_list=[self.loss])
            elapsed = time.perf_counter() - start
        self.losses.append(float(np.asarray(out).ravel()[0]))
        return elapsed

    def crossing(self, feed: dict[str, np.ndarray], batch: int) -> tuple[int, float]:
        """Bytes copied between devices per step and the copies' time (ms) in one step."""
        if not isinstance(self.program, fluid.CompiledProgram):
            return 0, 0.0
        program = self.program._executor.program
        block = program.global_block()
        copies = {i: op for i, op in enumerate(block.ops) if op.type == "memcpy"}
        nbytes = 0
        for op in copies.values():
            var = block.var(op.input("X")[0])
            rows = batch // self.k
            nbytes += 4 * int(np.prod([rows if d == -1 else d for d in var.shape]))
        records: list = []
        hook = records.append
        add_op_hook(hook)
        try:
            self.step(feed)
        finally:
            remove_op_hook(hook)
        spent = sum(r.end_ns - r.start_ns for r in records if r.op_index in copies) / 1e6
        return nbytes, spent


def machine_ceiling(width: int, batch: int, reps: int = 40) -> float:
    """What 2 threads of bare torch matmuls (1 intra-op thread each) gain over 1 here now:
    the most 2 lanes can gain on this machine, whatever parafluid does."""
    import threading

    a, w = torch.randn(batch, width), torch.randn(width, width)

    def work(n: int) -> None:
        torch.set_num_threads(1)
        for _ in range(n):
            a @ w

    start = time.perf_counter()
    work(2 * reps)
    one = time.perf_counter() - start
    threads = [threading.Thread(target=work, args=(reps,)) for _ in range(2)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return one / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=10, help="timed steps per side and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--layers", type=int, default=2, help="fc layers per stage")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--compile", action="store_true",
                        help="add a side: 2 stages, k=4, with compiled segments")
    args = parser.parse_args()
    torch.set_num_threads(1)  # the unplaced side: one thread; each lane: one thread too
    rng = np.random.default_rng(0)
    x = rng.standard_normal((args.batch, args.width)).astype("float32")
    feed = {"x": x, "y": x[:, :1] * 0.5}
    sides = [Side("unplaced", False, 1, args), Side("2 stages, k=1", True, 1, args),
             Side("2 stages, k=4", True, 4, args)]
    if args.compile:
        sides.append(Side("k=4 compiled", True, 4, args, compile=True))
    for side in sides:  # warm-up: plans, lanes, allocator (and the compile)
        side.step(feed)
        side.step(feed)
    for _ in range(args.rounds):
        for side in sides:
            side.times += [side.step(feed) for _ in range(args.steps)]
    base = statistics.median(sides[0].times)
    print(f"MLP {args.width} wide, {args.layers} fc layers per stage, batch {args.batch}; "
          f"{args.rounds} rounds x {args.steps} steps per side; torch threads per lane: 1")
    print(f"{'side':<16} {'median ms/step':>15} {'speedup':>8} {'bytes crossing/step':>20} "
          f"{'copy ms/step':>13}")
    for side in sides:
        med = statistics.median(side.times)
        nbytes, spent = side.crossing(feed, args.batch)
        print(f"{side.name:<16} {med * 1e3:>15.2f} {base / med:>7.2f}x {nbytes:>20,d} "
              f"{spent:>13.3f}")
    print(f"machine ceiling: 2 threads of bare {args.batch}x{args.width} @ {args.width}x"
          f"{args.width} matmuls run {machine_ceiling(args.width, args.batch):.2f}x as fast as "
          "1 (2.0x on 2 free cores)")
    ref = np.array(sides[0].losses)
    for side in sides[1:]:
        diff = float(np.max(np.abs(np.array(side.losses[: len(ref)]) - ref)))
        print(f"max |loss - unplaced loss| over {len(ref)} steps, {side.name}: {diff:.2e}")


if __name__ == "__main__":
    main()
