"""Peak memory of a training step: unoptimised vs memory_optimize vs release_memory.

Models: ``mlp``, a deep MLP (784 -> 8 x fc(1024, relu) -> 10, batch 256, SGD) and ``cnn``,
the CNN of bench/data_parallel.py (conv16-pool-conv32-pool-fc10 on 1x28x28, batch 256,
SGD). Configurations, all with the sequential Executor:

- ``none``: ``FLAGS_eager_delete_tensor_gb=-1``: every temporary lives to the end of the
  step (Fluid 1.x before eager deletion; the ParallelExecutor's default too);
- ``memory_optimize``: the same, on a program rewritten by ``fluid.memory_optimize``;
- ``mo level 1``: the same with ``memory_optimize(level=1)``;
- ``release_memory``: the same, on a program rewritten by ``fluid.release_memory``;
- ``eager``: the Executor's default, eager deletion of each temporary after its last use;
- ``mo+eager``: memory_optimize and eager deletion.

Each configuration runs in a fresh process (so no heap of an earlier one is reused) and
reports two measurements of a training step:

- ``torch peak``: the largest rise of the bytes held by torch's CPU allocator during the
  fourth step, from torch.profiler's memory events (``profile_memory=True``, "Total Allocated").
  It counts every tensor the step allocates (kernel temporaries included) and nothing else:
  the honest figure for "what the step needs", independent of malloc's caching;
- ``RSS peak``: the rise of the process's peak resident set (Linux VmHWM, reset through
  /proc/self/clear_refs after the startup program) over the first three steps: what
  the OS sees, including malloc's retained free blocks and fragmentation.

Also the median step time of 5 more steps (the passes must not slow a step down). Ratios are
against ``none``; the target is ``<= 0.7`` for memory_optimize and release_memory. Benchmarks
are not tests: nothing here asserts.

    python bench/memory.py                 # both models, every configuration
    python bench/memory.py --model cnn
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from models import classifier  # noqa: E402

BATCH = 256
CONFIGS = ("none", "memory_optimize", "mo level 1", "release_memory", "eager", "mo+eager")


def build(model: str) -> tuple[Any, Any, Any]:
    return classifier(model, hidden=(1024,) * 8)


def _status(key: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(key)


def _torch_peak(step: Any) -> int:
    """Largest rise of torch's CPU allocator's total during ``step()``."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step()
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        prof.export_chrome_trace(f.name)
        events = json.load(open(f.name))["traceEvents"]
    mem = [e["args"] for e in events if e.get("name") == "[memory]"]
    if not mem:
        return 0
    mem.sort(key=lambda a: a.get("Ev Idx", 0))
    start = mem[0]["Total Allocated"] - mem[0]["Bytes"]
    return max(a["Total Allocated"] for a in mem) - start


def worker(model: str, config: str) -> dict[str, float]:
    if config in ("none", "memory_optimize", "mo level 1", "release_memory"):
        os.environ["FLAGS_eager_delete_tensor_gb"] = "-1"
    import torch

    import parafluid as fluid

    torch.set_num_threads(1)
    main, startup, loss = build(model)
    if config in ("memory_optimize", "mo+eager"):
        fluid.memory_optimize(main)
    elif config == "mo level 1":
        fluid.memory_optimize(main, level=1)
    elif config == "release_memory":
        fluid.release_memory(main)
    rng = np.random.RandomState(0)
    shape = (BATCH, 784) if model == "mlp" else (BATCH, 1, 28, 28)
    feed = {"x": rng.rand(*shape).astype("float32"),
            "label": rng.randint(0, 10, (BATCH, 1)).astype("int64")}
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)

    def step() -> None:
        exe.run(main, feed=feed, fetch_list=[loss], scope=scope)

    has_hwm = os.access("/proc/self/clear_refs", os.W_OK)
    if has_hwm:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    base = _status("VmRSS")
    for _ in range(3):
        step()
    # NOTE: read before the torch profiler runs: its own buffers would count otherwise
    rss_peak = _status("VmHWM") - base if has_hwm else float("nan")
    torch_peak = _torch_peak(step)
    times = []
    for _ in range(5):
        t = time.perf_counter()
        step()
        times.append(time.perf_counter() - t)
    return {"torch_peak": torch_peak, "rss_peak": rss_peak,
            "step_ms": statistics.median(times) * 1e3}


def run_config(model: str, config: str) -> dict[str, float]:
    env = dict(os.environ)
    env.pop("FLAGS_eager_delete_tensor_gb", None)
    out = subprocess.run([sys.executable, __file__, "--worker", model, config],
                         capture_output=True, text=True, env=env, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=("mlp", "cnn", "both"), default="both")
    parser.add_argument("--worker", nargs=2, metavar=("MODEL", "CONFIG"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(*args.worker)))
        return
    models = ("mlp", "cnn") if args.model == "both" else (args.model,)
    for model in models:
        results = {c: run_config(model, c) for c in CONFIGS}
        ref = results["none"]
        print(f"\n{model} (batch {BATCH}, 1 thread): peak memory added by a training step")
        print(f"{'config':<17}{'torch peak MiB':>15}{'ratio':>7}{'RSS peak MiB':>14}"
              f"{'ratio':>7}{'step ms':>9}")
        for c, r in results.items():
            print(f"{c:<17}{r['torch_peak'] / 2**20:>15.1f}"
                  f"{r['torch_peak'] / ref['torch_peak']:>7.2f}"
                  f"{r['rss_peak'] / 2**20:>14.1f}{r['rss_peak'] / ref['rss_peak']:>7.2f}"
                  f"{r['step_ms']:>9.1f}")


if __name__ == "__main__":
    main()
