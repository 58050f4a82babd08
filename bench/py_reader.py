"""Feeding through a ``py_reader`` against ``feed=`` dicts, side by side.

One epoch of training steps of an MLP 784-256-10 (batch 64, SGD) over the same pre-built
numpy batches, three ways: ``exe.run(feed={...})``; a ``py_reader`` (the ``read`` op takes
each batch from the queue a producer thread fills, ``EOFException`` ends the epoch); and a
non-iterable ``DataLoader``. The ways run alternately, an epoch each, ``--reps`` times;
prints the median epoch times and each reader's ratio to the feed dicts (the median of the
per-repetition ratios). On two CPU cores the producer thread competes with the step for
them. Benchmarks are not tests: nothing here asserts on a time.

    python bench/py_reader.py
    python bench/py_reader.py --batches 100 --reps 7 --threads 2
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch

import parafluid as fluid


def build(kind: str):
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 1
    reader = None
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        if kind == "py_reader":
            reader = fluid.layers.py_reader(capacity=8, shapes=[(-1, 784), (-1, 1)],
                                            dtypes=["float32", "int64"])
            img, label = fluid.layers.read_file(reader)
        else:
            img = fluid.layers.data(name="img", shape=[784], dtype="float32")
            label = fluid.layers.data(name="label", shape=[1], dtype="int64")
            if kind == "loader":
                reader = fluid.io.DataLoader.from_generator(feed_list=[img, label], capacity=8,
                                                            iterable=False)
        hidden = fluid.layers.fc(img, size=256, act="relu")
        pred = fluid.layers.fc(hidden, size=10, act="softmax")
        loss = fluid.layers.mean(fluid.layers.cross_entropy(pred, label))
        fluid.optimizer.SGD(learning_rate=0.01).minimize(loss)
    scope, exe = fluid.Scope(), fluid.Executor(fluid.CPUPlace())
    exe.run(startup, scope=scope)
    return main, loss, reader, scope, exe


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=50)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    rng = np.random.RandomState(0)
    batches = [(rng.rand(64, 784).astype("float32"),
                rng.randint(0, 10, (64, 1)).astype("int64")) for _ in range(args.batches)]
    ways = {kind: build(kind) for kind in ("feed", "py_reader", "loader")}
    ways["py_reader"][2].decorate_tensor_provider(lambda: iter([list(b) for b in batches]))
    ways["loader"][2].set_batch_generator(lambda: iter([list(b) for b in batches]))

    def epoch(kind: str) -> float:
        program, loss, reader, scope, exe = ways[kind]
        begin = time.perf_counter()
        if reader is None:
            for img, label in batches:
                exe.run(program, feed={"img": img, "label": label}, fetch_list=[loss],
                        scope=scope)
        else:
            reader.start()
            try:
                while True:
                    exe.run(program, fetch_list=[loss], scope=scope)
            except fluid.core.EOFException:
                reader.reset()
        return time.perf_counter() - begin

    for kind in ways:  # warm-up: plans compiled, allocator warm
        epoch(kind)
    times: dict[str, list[float]] = {kind: [] for kind in ways}
    for _ in range(args.reps):
        for kind in ways:
            times[kind].append(epoch(kind))
    base = times["feed"]
    print(f"{args.batches} steps per epoch, {args.reps} repetitions, "
          f"{args.threads} torch thread(s)")
    for kind, ts in times.items():
        ratio = statistics.median(t / b for t, b in zip(ts, base))
        print(f"{kind:10s} median epoch {statistics.median(ts) * 1e3:8.1f} ms   "
              f"ratio to feed dicts {ratio:.3f}")


if __name__ == "__main__":
    main()
