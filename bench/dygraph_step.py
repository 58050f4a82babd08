"""The imperative mode's per-step cost against the Executor's, on one model.

The same MLP (784-256-256-10, softmax cross entropy, Adam) trained one step at a time:
(a) in the imperative mode (``fluid.dygraph``: every op built, checked and bound as it is
appended, recorded, then ``backward()`` and an eager ``minimize``), (b) as a Program run by
the Executor (ops bound once, reused every step). Both run alternately in one process, in
small blocks, so that a shared machine slows both alike; the figure is the median of the
per-block ratios imperative / Executor, with each side's median step time.

    python bench/dygraph_step.py
    python bench/dygraph_step.py --batch 32 --blocks 20
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch

import parafluid as fluid
from parafluid import dygraph


class MLP(dygraph.Layer):
    def __init__(self, name_scope: str) -> None:
        super().__init__(name_scope)
        sizes = [784, 256, 256, 10]
        self.ws = [self.create_parameter(None, [a, b], "float32")
                   for a, b in zip(sizes, sizes[1:])]
        for i, w in enumerate(self.ws):
            self.add_parameter(f"w{i}", w)

    def forward(self, x, y):
        h = x
        for i, w in enumerate(self.ws):
            h = fluid.layers.matmul(h, w)
            if i < len(self.ws) - 1:
                h = fluid.layers.relu(h)
        return fluid.layers.mean(fluid.layers.softmax_with_cross_entropy(h, y))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--blocks", type=int, default=10)
    parser.add_argument("--steps", type=int, default=5, help="steps per block and side")
    args = parser.parse_args()
    torch.set_num_threads(1)
    rng = np.random.RandomState(0)
    xb = rng.rand(args.batch, 784).astype("float32")
    yb = rng.randint(0, 10, (args.batch, 1)).astype("int64")

    main_prog, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main_prog, startup):
        x = fluid.layers.data("x", shape=[784])
        y = fluid.layers.data("y", shape=[1], dtype="int64")
        loss = MLP("mlp")(x, y)
        fluid.optimizer.Adam(0.001).minimize(loss)
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)

    def static_steps() -> float:
        start = time.perf_counter()
        for _ in range(args.steps):
            exe.run(main_prog, feed={"x": xb, "y": yb}, fetch_list=[loss])
        return (time.perf_counter() - start) / args.steps

    with dygraph.guard():
        model, opt = MLP("mlp"), fluid.optimizer.Adam(0.001)

        def eager_steps() -> float:
            start = time.perf_counter()
            for _ in range(args.steps):
                out = model(dygraph.to_variable(xb), dygraph.to_variable(yb))
                out.backward()
                opt.minimize(out)
                model.clear_gradients()
                out.numpy()
            return (time.perf_counter() - start) / args.steps

        eager_steps(), static_steps()  # warm-up
        pairs = [(eager_steps(), static_steps()) for _ in range(args.blocks)]
    ratio = statistics.median(e / s for e, s in pairs)
    print(f"batch {args.batch}: imperative {statistics.median(e for e, _ in pairs) * 1e3:.2f} "
          f"ms/step, Executor {statistics.median(s for _, s in pairs) * 1e3:.2f} ms/step, "
          f"ratio {ratio:.2f}")


if __name__ == "__main__":
    main()
