"""Dataset training: what reading MultiSlot files and the Hogwild threads cost or give.

A CTR-style model (two sparse slots through embeddings and sequence_pool, two fc layers,
Adagrad) trained one pass over the same lines three ways, alternating in rounds so that a
noisy machine slows all alike; the figures are medians of the per-round times and ratios:

  feeds     Executor.run over batches built beforehand (no file reading: the baseline)
  thread=1  exe.train_from_dataset on a loaded InMemoryDataset, one thread
  thread=2  the same with two Hogwild threads sharing the parameters

and once, the time of load_into_memory (parsing the text) per line.

    python bench/dataset_train.py
    python bench/dataset_train.py --lines 20000 --rounds 5 --batch 64 --threads 2
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import parafluid as fluid  # noqa: E402


def lines(n: int, dict_size: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        s1 = [rng.randrange(dict_size) for _ in range(rng.randint(1, 8))]
        s2 = [rng.randrange(dict_size) for _ in range(rng.randint(1, 4))]
        out.append(" ".join(map(str, [len(s1), *s1, len(s2), *s2, 1, s1[0] % 2])))
    return out


def model(dict_size: int):
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 1
    with fluid.program_guard(main, startup):
        slots = [fluid.layers.data(name=f"slot{i}", shape=[1], dtype="int64", lod_level=1)
                 for i in (1, 2)]
        click = fluid.layers.data(name="click", shape=[1], dtype="int64")
        pooled = [fluid.layers.sequence_pool(
            fluid.layers.embedding(input=s, size=[dict_size, 16], is_sparse=True), "sum")
            for s in slots]
        hidden = fluid.layers.fc(input=fluid.layers.concat(pooled, axis=1), size=64,
                                 act="relu")
        predict = fluid.layers.fc(input=hidden, size=2, act="softmax")
        loss = fluid.layers.mean(fluid.layers.cross_entropy(input=predict, label=click))
        fluid.optimizer.Adagrad(learning_rate=0.05).minimize(loss)
    return main, startup, [*slots, click], loss


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lines", type=int, default=8000)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--dict", type=int, default=5000)
    ap.add_argument("--threads", type=int, default=1,
                    help="torch intra-op threads (1: steadier on a loaded machine)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    text = lines(args.lines, args.dict)
    path = os.path.join(tempfile.mkdtemp(), "train.txt")
    with open(path, "w") as f:
        f.write("\n".join(text) + "\n")
    prog, startup, use_vars, _ = model(args.dict)
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.Scope()
    exe.run(startup, scope=scope)

    dataset = fluid.DatasetFactory().create_dataset("InMemoryDataset")
    dataset.set_use_var(use_vars)
    dataset.set_batch_size(args.batch)
    dataset.set_filelist([path])
    t0 = time.perf_counter()
    dataset.load_into_memory()
    load_s = time.perf_counter() - t0
    feeds = list(dataset._batches())

    def run_feeds() -> None:
        for feed in feeds:
            exe.run(prog, feed=feed, scope=scope)

    cases = {"feeds": run_feeds,
             "thread=1": lambda: exe.train_from_dataset(prog, dataset, scope=scope, thread=1),
             "thread=2": lambda: exe.train_from_dataset(prog, dataset, scope=scope, thread=2)}
    times: dict[str, list[float]] = {k: [] for k in cases}
    for fn in cases.values():   # warm-up: plans compiled, allocator settled
        fn()
    for _ in range(args.rounds):
        for name, fn in cases.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    print(f"{args.lines} lines, batch {args.batch}, {len(feeds)} batches a pass, "
          f"{os.cpu_count()} cores, {args.threads} torch thread(s)")
    print(f"load_into_memory: {1e6 * load_s / args.lines:.1f} us a line")
    for name, ts in times.items():
        ratios = [t / b for t, b in zip(ts, times["feeds"])]
        print(f"{name:9s} {statistics.median(ts):7.3f} s a pass   "
              f"x{statistics.median(ratios):.2f} of feeds   "
              f"{len(feeds) / statistics.median(ts):7.1f} batches/s")
    print("(losses are not compared: Hogwild threads apply updates as they come)")


if __name__ == "__main__":
    main()
