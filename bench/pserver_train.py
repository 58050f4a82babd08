"""Training throughput of the parameter-server mode vs the collective mode, side by side.

Every job: 2 trainer processes x 1 torch thread on 127.0.0.1, the MLP 784-512-512-10 of
bench/data_parallel.py, global batch 256 (128 rows per trainer), SGD. The jobs:

* ``pserver sync, 1 pserver`` / ``2 pservers``: ``DistributeTranspiler`` in pserver mode
  (default slicing: the 784x512 and 512x512 weights are cut into 2 blocks over 2 pservers),
  every step a push of every gradient, barriers, a pull of every parameter;
* ``pserver async, 1 pserver`` / ``2 pservers``: no barriers;
* ``collective``: nccl2 mode over gloo (bench/collective_train.py's job).

The jobs alternate for ``--rounds`` rounds; printed: the median samples/s of each and its
ratio to the collective mode. Not a test: nothing is asserted.

``--overlap``: instead, the sync jobs with the trainers' sends overlapping the backward pass
(``FLAGS_rpc_overlap_send=1``, the default) and without (``=0``), alternating, and the ratio
on / off of each.

    PYTHONPATH=$PWD python bench/pserver_train.py [--rounds 3] [--steps 20] [--repeats 3]
    PYTHONPATH=$PWD python bench/pserver_train.py --overlap [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, ROOT)

KIND = "mlp"


def worker(steps: int, repeats: int, sync: bool) -> None:
    """One pserver or trainer (PADDLE_* set by run_pserver_job); trainer 0 prints samples/s."""
    import torch
    from data_parallel import BATCH, batch, fluid_model, samples_per_s

    import parafluid as fluid

    torch.set_num_threads(1)
    job = fluid.distributed.env()
    main, startup, loss = fluid_model(KIND)
    config = fluid.DistributeTranspilerConfig()
    config.sync_mode = sync
    t = fluid.DistributeTranspiler(config=config)
    t.transpile(job.trainer_id, program=main, startup_program=startup,
                pservers=",".join(job.pserver_endpoints), trainers=job.trainers,
                sync_mode=sync)
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.Scope()
    if job.training_role == "PSERVER":
        prog, pstartup = t.get_pserver_programs(job.current_endpoint)
        exe.run(pstartup, scope=scope)
        exe.run(prog, scope=scope)
        return
    prog = t.get_trainer_program()
    exe.run(startup, scope=scope)
    feed = batch(KIND, BATCH // job.trainers, seed=job.trainer_id)
    rate = samples_per_s(lambda: exe.run(prog, feed=feed, fetch_list=[loss], scope=scope),
                         steps, repeats, n=BATCH)
    exe.close()
    if job.trainer_id == 0:
        print(json.dumps({"rate": rate}), flush=True)


def run_pserver_job(pservers: int, sync: bool, steps: int, repeats: int,
                    overlap: bool | None = None) -> float:
    """samples/s of one job; ``overlap`` sets ``FLAGS_rpc_overlap_send`` (None: as set)."""
    from parafluid.distributed.launch import free_ports

    ports = free_ports(pservers + 2)
    servers = ",".join(f"127.0.0.1:{p}" for p in ports[:pservers])
    trainers = ",".join(f"127.0.0.1:{p}" for p in ports[pservers:])
    base = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
                PADDLE_PSERVER_ENDPOINTS=servers, PADDLE_TRAINERS_NUM="2",
                PADDLE_TRAINER_ENDPOINTS=trainers)
    if overlap is not None:
        base["FLAGS_rpc_overlap_send"] = "1" if overlap else "0"
    cmd = [sys.executable, __file__, "--worker", "sync" if sync else "async", "--steps",
           str(steps), "--repeats", str(repeats)]
    procs = []
    try:
        for ep in servers.split(","):
            env = dict(base, PADDLE_TRAINING_ROLE="PSERVER", PADDLE_CURRENT_ENDPOINT=ep)
            procs.append(subprocess.Popen(cmd, env=env))
        for t, ep in enumerate(trainers.split(",")):
            env = dict(base, PADDLE_TRAINING_ROLE="TRAINER", PADDLE_TRAINER_ID=str(t),
                       PADDLE_CURRENT_ENDPOINT=ep)
            procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True))
        out = procs[pservers].communicate(timeout=900)[0]
        for p in procs:
            p.wait(timeout=120)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    if any(p.returncode for p in procs):
        raise RuntimeError(f"a pserver-mode process failed: exit codes "
                           f"{[p.returncode for p in procs]}")
    return json.loads(out.strip().splitlines()[-1])["rate"]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--overlap", action="store_true",
                   help="sync jobs with the sends overlapping the backward pass vs not")
    p.add_argument("--worker", choices=["sync", "async"], help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.worker:
        worker(a.steps, a.repeats, a.worker == "sync")
        return 0
    if a.overlap:
        return compare_overlap(a.rounds, a.steps, a.repeats)
    from collective_train import run_parafluid

    jobs = {"pserver sync, 1 pserver": lambda: run_pserver_job(1, True, a.steps, a.repeats),
            "pserver sync, 2 pservers": lambda: run_pserver_job(2, True, a.steps, a.repeats),
            "pserver async, 1 pserver": lambda: run_pserver_job(1, False, a.steps, a.repeats),
            "pserver async, 2 pservers": lambda: run_pserver_job(2, False, a.steps, a.repeats),
            "collective (nccl2 mode, gloo)": lambda: run_parafluid(KIND, a.steps, a.repeats)}
    print(f"2 trainers x 1 torch thread on 127.0.0.1, MLP 784-512-512-10, global batch 256, "
          f"SGD; {a.rounds} alternating rounds of {a.repeats} x {a.steps} steps (best of "
          "repeats)")
    rates: dict[str, list[float]] = {name: [] for name in jobs}
    for _ in range(a.rounds):
        for name, run in jobs.items():
            rates[name].append(run())
    base = statistics.median(rates["collective (nccl2 mode, gloo)"])
    for name, values in rates.items():
        med = statistics.median(values)
        print(f"{name:32s} {med:>9,.0f} samples/s   {med / base:.2f}x collective "
              f"(rounds: {', '.join(f'{v:,.0f}' for v in values)})")
    return 0


def compare_overlap(rounds: int, steps: int, repeats: int) -> int:
    """Sync jobs, sends overlapping the backward pass or not, alternating; medians, ratios."""
    print(f"2 trainers x 1 torch thread on 127.0.0.1, MLP 784-512-512-10, global batch 256, "
          f"SGD, sync mode; {rounds} alternating rounds of {repeats} x {steps} steps (best "
          "of repeats)")
    rates: dict[tuple[int, bool], list[float]] = {}
    for _ in range(rounds):
        for pservers in (1, 2):
            for on in (True, False):
                rates.setdefault((pservers, on), []).append(
                    run_pserver_job(pservers, True, steps, repeats, overlap=on))
    for pservers in (1, 2):
        on, off = (statistics.median(rates[(pservers, x)]) for x in (True, False))
        ratios = [a / b for a, b in zip(rates[(pservers, True)], rates[(pservers, False)])]
        print(f"{pservers} pserver(s): overlap on {on:>7,.0f} samples/s, off {off:>7,.0f}: "
              f"on / off {on / off:.2f}x (per round: "
              f"{', '.join(f'{r:.2f}' for r in ratios)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
