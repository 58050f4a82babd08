"""A profiled step of the collective (nccl2) mode, drawn: all-reduces overlapping the backward.

Two trainers (1 device, 1 torch thread each, gloo on 127.0.0.1) train the MLP of
bench/collective_train.py (784-512-512-10, 128 rows each) for a few steps; the last ones run
under ``fluid.profiler``, one trace per trainer. The traces are merged
(``parafluid.timeline``) and one step of trainer 0 is drawn as an SVG: the compute lane
(forward, backward, then the SGD updates after the barrier) and, in the collectives track,
each gradient's all-reduce from its start to the transport's completion ("c_allreduce_sum in
flight"), which runs while the backward ops go on.

    python bench/collective_timeline.py [--svg docs/collective_overlap.svg] [--no-overlap]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, ROOT)

from parafluid.distributed.launch import free_ports  # noqa: E402


def worker(out: str, overlap: bool) -> None:
    import torch
    from data_parallel import BATCH, batch, fluid_model

    import parafluid as fluid
    import parafluid.profiler as profiler

    torch.set_num_threads(1)
    job = fluid.distributed.env()
    main, startup, loss = fluid_model("mlp")
    config = fluid.DistributeTranspilerConfig()
    config.mode = "nccl2"
    fluid.DistributeTranspiler(config=config).transpile(
        job.trainer_id, program=main, startup_program=startup,
        trainers=",".join(job.trainer_endpoints), current_endpoint=job.current_endpoint)
    scope = fluid.Scope()
    fluid.Executor(fluid.CPUPlace()).run(startup, scope=scope)
    bs = fluid.BuildStrategy()
    bs.overlap_communication = overlap
    # one all-reduce per gradient, as the picture shows them (unset, across processes the
    # gradients go out in one fused group after the backward: docs/distributed.md)
    bs.fuse_all_reduce_ops = False
    pe = fluid.ParallelExecutor(False, loss_name=loss.name, main_program=main, scope=scope,
                                num_trainers=job.trainers, trainer_id=job.trainer_id,
                                build_strategy=bs)
    feed = batch("mlp", BATCH // job.trainers, seed=job.trainer_id)
    for _ in range(5):
        pe.run([loss.name], feed=feed)
    with profiler.profiler("CPU", None, os.path.join(out, f"rank{job.trainer_id}.json")):
        for _ in range(3):
            pe.run([loss.name], feed=feed)
    pe.close()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--svg", default=os.path.join(ROOT, "docs", "collective_overlap.svg"))
    p.add_argument("--trace", default=None, help="also keep the merged Chrome trace here")
    p.add_argument("--no-overlap", action="store_true",
                   help="BuildStrategy.overlap_communication off (for comparison)")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.worker:
        worker(a.worker, not a.no_overlap)
        return 0
    from parafluid.timeline import merge_traces, render_svg

    out = tempfile.mkdtemp(prefix="parafluid-timeline-")
    eps = ",".join(f"127.0.0.1:{port}" for port in free_ports(2))
    procs = []
    try:
        for t in range(2):
            env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
                       CPU_NUM="1", PADDLE_TRAINER_ID=str(t), PADDLE_TRAINERS_NUM="2",
                       PADDLE_TRAINER_ENDPOINTS=eps, PADDLE_CURRENT_ENDPOINT=eps.split(",")[t])
            procs.append(subprocess.Popen(
                [sys.executable, __file__, "--worker", out,
                 *(["--no-overlap"] if a.no_overlap else [])], env=env,
                stdout=subprocess.DEVNULL))
        for proc in procs:
            proc.wait(timeout=600)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    if any(proc.returncode for proc in procs):
        raise RuntimeError(f"a trainer failed: {[proc.returncode for proc in procs]}")
    traces = []
    for t in range(2):
        with open(os.path.join(out, f"rank{t}.json")) as f:
            traces.append(json.load(f))
    merged = merge_traces(traces, ["trainer 0", "trainer 1"])
    if a.trace:
        with open(a.trace, "w") as f:
            json.dump(merged, f)
    # one step of trainer 0: from its last step's first op to its last update
    evs = [e for e in merged["traceEvents"] if e.get("ph") == "X" and e["pid"] < 1000]
    starts = sorted(e["ts"] for e in evs if e["args"].get("op_index") == 0)
    lo = starts[-1]
    hi = max(e["ts"] + e["dur"] for e in evs if e["ts"] >= lo)
    mine = {**merged, "traceEvents": [e for e in merged["traceEvents"]
                                      if e.get("ph") != "X" or e["pid"] < 1000]}
    svg = render_svg(mine, lo / 1e3 - 0.05, hi / 1e3 + 0.05)
    with open(a.svg, "w") as f:
        f.write(svg)
    flights = [e for e in evs if e["ts"] >= lo and e["name"].endswith(" in flight")]
    grads = [e for e in evs if e["ts"] >= lo and e["name"].endswith("_grad")]
    print(f"one step of trainer 0: {(hi - lo) / 1e3:.2f} ms; {len(flights)} all-reduces in "
          f"flight for {sum(e['dur'] for e in flights) / 1e3:.2f} ms in all; backward ops "
          f"{sum(e['dur'] for e in grads) / 1e3:.2f} ms -> {a.svg}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
