"""Multi-process training throughput: parafluid's nccl2 mode vs PyTorch DDP, side by side.

Both sides: 2 processes x 1 torch thread on 127.0.0.1 (gloo), global batch 256 (128 rows
per process), the models of bench/data_parallel.py (MLP 784-512-512-10 and the small CNN),
SGD. parafluid: ``DistributeTranspiler`` in nccl2 mode + ``ParallelExecutor(num_trainers=2)``
(CPU_NUM=1). PyTorch: ``DistributedDataParallel`` (bucketed all-reduce overlapping the
backward pass). The jobs alternate (parafluid, DDP, parafluid, ...) for ``--rounds`` rounds;
prints the median samples/s of each and the ratio parafluid / DDP (target >= 1.0). With
``--compile`` a third job runs parafluid with ``BuildStrategy.enable_compile`` (compiled
segments on each trainer; the first steps, which compile, are not timed). ``--no-overlap``
adds a job with ``BuildStrategy.overlap_communication`` off (each all-reduce waited for where
the backward pass issues it); ``--unfused`` adds one with ``fuse_all_reduce_ops`` off (one
all-reduce per gradient instead of the fused group the collective mode sends by default);
``--gloo`` adds one with ``FLAGS_collective_shared_memory_mb=0`` (every all-reduce over gloo,
as between machines, instead of the trainers' shared memory);
``--before ROOT`` adds a job running this same worker from another checkout (``ROOT``, e.g.
the main branch), so that a change is measured side by side.

    python bench/collective_train.py [--rounds 3] [--steps 20] [--kinds mlp cnn] [--compile]
        [--no-overlap] [--unfused] [--gloo] [--before /path/to/other/checkout]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, ROOT)

from parafluid.distributed.launch import free_ports  # noqa: E402


def parafluid_worker(kind: str, steps: int, repeats: int, compile: bool = False,
                     overlap: bool = True, fuse: bool = True) -> None:
    """One trainer (PADDLE_* set by main); rank 0 prints the job's samples/s."""
    import torch
    from data_parallel import BATCH, batch, fluid_model, samples_per_s

    import parafluid as fluid

    torch.set_num_threads(1)
    job = fluid.distributed.env()
    main, startup, loss = fluid_model(kind)
    config = fluid.DistributeTranspilerConfig()
    config.mode = "nccl2"
    fluid.DistributeTranspiler(config=config).transpile(
        job.trainer_id, program=main, startup_program=startup,
        trainers=",".join(job.trainer_endpoints), current_endpoint=job.current_endpoint)
    scope = fluid.Scope()
    fluid.Executor(fluid.CPUPlace()).run(startup, scope=scope)
    bs = fluid.BuildStrategy()
    bs.enable_compile = compile
    if not overlap:
        bs.overlap_communication = False
    if not fuse:
        bs.fuse_all_reduce_ops = False
    pe = fluid.ParallelExecutor(False, loss_name=loss.name, main_program=main, scope=scope,
                                num_trainers=job.trainers, trainer_id=job.trainer_id,
                                build_strategy=bs)
    feed = batch(kind, BATCH // job.trainers, seed=job.trainer_id)
    if compile:
        for _ in range(3):  # compile (and the recompile-free steady state) before timing
            pe.run([loss.name], feed=feed)
    rate = samples_per_s(lambda: pe.run([loss.name], feed=feed), steps, repeats, n=BATCH)
    if job.trainer_id == 0:
        print(json.dumps({"rate": rate}), flush=True)


def run_parafluid(kind: str, steps: int, repeats: int, compile: bool = False,
                  overlap: bool = True, fuse: bool = True, root: str = ROOT,
                  shared: bool = True) -> float:
    ports = free_ports(2)
    eps = ",".join(f"127.0.0.1:{p}" for p in ports)
    procs = []
    try:
        for t in range(2):
            env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""),
                       CPU_NUM="1", PADDLE_TRAINER_ID=str(t), PADDLE_TRAINERS_NUM="2",
                       PADDLE_TRAINER_ENDPOINTS=eps, PADDLE_CURRENT_ENDPOINT=eps.split(",")[t])
            if not shared:
                env["FLAGS_collective_shared_memory_mb"] = "0"
            procs.append(subprocess.Popen(
                [sys.executable, os.path.join(root, "bench", os.path.basename(__file__)),
                 "--worker", kind, "--steps", str(steps), "--repeats", str(repeats),
                 *(["--compile"] if compile else []), *([] if overlap else ["--no-overlap"]),
                 *([] if fuse else ["--unfused"])],
                env=env,
                stdout=subprocess.PIPE, text=True))
        out = procs[0].communicate(timeout=900)[0]
        procs[1].wait(timeout=60)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    if any(p.returncode for p in procs):
        codes = [p.returncode for p in procs]
        raise RuntimeError(f"a parafluid trainer failed: exit codes {codes}")
    return json.loads(out.strip().splitlines()[-1])["rate"]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--kinds", nargs="+", default=["mlp", "cnn"], choices=["mlp", "cnn"])
    p.add_argument("--compile", action="store_true",
                   help="also run parafluid with compiled segments (enable_compile)")
    p.add_argument("--no-overlap", action="store_true",
                   help="also run parafluid with BuildStrategy.overlap_communication off")
    p.add_argument("--unfused", action="store_true",
                   help="also run parafluid with BuildStrategy.fuse_all_reduce_ops off (one "
                   "all-reduce per gradient, each overlapping the backward)")
    p.add_argument("--gloo", action="store_true",
                   help="also run parafluid with every all-reduce over gloo (the trainers' "
                   "shared memory off)")
    p.add_argument("--before", metavar="ROOT",
                   help="also run this worker from another checkout (e.g. the main branch)")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.worker:
        parafluid_worker(a.worker, a.steps, a.repeats, a.compile, overlap=not a.no_overlap,
                         fuse=not a.unfused)
        return 0
    from data_parallel import run_ddp

    print(f"2 processes x 1 torch thread, gloo on 127.0.0.1, global batch 256, SGD; "
          f"{a.rounds} alternating rounds of {a.repeats} x {a.steps} steps (best of repeats)")
    for kind in a.kinds:
        before = {"root": os.path.abspath(a.before)} if a.before else None
        jobs: dict[str, dict[str, Any]] = {"parafluid": {}}
        if a.no_overlap:
            jobs["parafluid, no overlap"] = {"overlap": False}
        if a.unfused:
            jobs["parafluid, unfused"] = {"fuse": False}
        if a.gloo:
            jobs["parafluid, gloo"] = {"shared": False}
        if before:
            jobs["parafluid before"] = before
        if a.compile:
            jobs["parafluid compiled"] = {"compile": True}
            if before:
                jobs["parafluid compiled before"] = {"compile": True, **before}
        rates: dict[str, list[float]] = {name: [] for name in [*jobs, "DDP"]}
        for _ in range(a.rounds):  # alternating: every job of a round sees the same load
            for name, options in jobs.items():
                rates[name].append(run_parafluid(kind, a.steps, a.repeats, **options))
            rates["DDP"].append(run_ddp(kind, a.steps, a.repeats))
        md = statistics.median(rates["DDP"])
        print(f"{kind}: DDP {md:,.0f} samples/s")
        for name in jobs:
            ratios = [o / d for o, d in zip(rates[name], rates["DDP"])]
            mo = statistics.median(rates[name])
            print(f"{kind}: {name} {mo:,.0f} samples/s, ratio to DDP {mo / md:.2f} "
                  f"(median of per-round ratios {statistics.median(ratios):.2f}; per round: "
                  f"{', '.join(f'{r:.2f}' for r in ratios)})")
        # the changes measured side by side: each job against its counterpart, per round
        for new, old in (("parafluid", "parafluid, no overlap"),
                         ("parafluid", "parafluid, unfused"), ("parafluid", "parafluid, gloo"),
                         ("parafluid", "parafluid before"),
                         ("parafluid compiled", "parafluid compiled before")):
            if new in rates and old in rates:
                ratios = [a / b for a, b in zip(rates[new], rates[old])]
                print(f"{kind}: {new} / {old}: median of per-round ratios "
                      f"{statistics.median(ratios):.2f} (per round: "
                      f"{', '.join(f'{r:.2f}' for r in ratios)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
