"""parafluid's cross-process all-reduce vs a bare ``torch.distributed.all_reduce``, side by side.

Starts 2 processes on 127.0.0.1 (gloo, one CPU device each). Each builds a parafluid
``ProcessGroupCommunicator`` (rendezvous, heartbeats, deadlines) and, next to it, a plain
torch.distributed default process group. For 1, 4 and 16 MB float32 gradients it times,
in turn ``comm.all_reduce([g])``, ``comm.all_reduce([g2], donate=True)`` (summed in place),
``comm.all_reduce([g])`` with the per-collective signature check (``verify_collectives``, on by
default; off in the other two), the all-reduce the ParallelExecutor issues for gradients
("shared": checked by its own data, through the trainers' shared memory unless
``FLAGS_collective_shared_memory_mb=0``) and ``dist.all_reduce(buf)``; prints the medians and
the ratios to the bare call (the target is <= 1.1x without the check).

    python bench/collective.py [--reps 30] [--sizes-mb 1 4 16] [--threads 1]
    python bench/collective.py --sizes-mb 0.004 1     # a 4 KB gradient: the check's latency

What differs: by default parafluid never modifies its input, so it all-reduces a fresh copy
(one memcpy of the gradient); ``donate=True`` skips that copy. Both take a lock and a few
Python calls per collective. The check adds one 16-byte all-reduce (a round trip).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from parafluid.distributed.launch import free_ports  # noqa: E402


def worker(rank: int, eps: str, bare_port: int, sizes_mb: list[float], reps: int,
           threads: int) -> None:
    import torch
    import torch.distributed as dist

    from parafluid.distributed.collective import init_collective

    torch.set_num_threads(threads)
    comm = init_collective(eps, rank, [torch.device("cpu")], deadline_s=60)
    comm.verify_collectives = False  # the check is timed on its own ("checked")
    store = dist.TCPStore("127.0.0.1", bare_port, 2, rank == 0,
                          datetime.timedelta(seconds=60), wait_for_workers=False)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=2)
    rows = []
    for mb in sizes_mb:
        n = int(mb * (1 << 20)) // 4
        g = torch.randn(n, generator=torch.Generator().manual_seed(rank))
        buf, donated = g.clone(), g.clone()
        def checked(g=g) -> None:
            comm.verify_collectives = True
            comm.all_reduce([g])
            comm.verify_collectives = False

        def shared(g=g) -> None:  # as the ParallelExecutor's gradient all-reduces
            comm.verify_collectives = comm.sizes_agreed = True
            comm.all_reduce([g])
            comm.verify_collectives = comm.sizes_agreed = False

        calls = {"ours": lambda g=g: comm.all_reduce([g]),
                 "donated": lambda d=donated: comm.all_reduce([d], donate=True),
                 "checked": checked,
                 "shared": shared,
                 "bare": lambda b=buf: dist.all_reduce(b)}
        times: dict[str, list[float]] = {k: [] for k in calls}
        names = list(calls)
        for i in range(reps + 3):  # 3 warm-up rounds
            # NOTE: rotate the order each round, so that none always runs first after the
            # barrier (on a busy machine, position alone shifts the timings).
            for name in names[i % len(names):] + names[:i % len(names)]:
                dist.barrier()
                t0 = time.perf_counter()
                calls[name]()
                if i >= 3:
                    times[name].append(time.perf_counter() - t0)
        row = {"mb": mb, "shared_memory": comm.shared_memory,
               **{k: statistics.median(v) for k, v in times.items()}}
        # NOTE: the ratio of each round's pair, then the median: load that drifts between
        # rounds on a busy machine cancels out.
        for k in ("ours", "donated", "checked", "shared"):
            row[k + "_paired"] = statistics.median(a / b for a, b in zip(times[k], times["bare"]))
        rows.append(row)
    dist.destroy_process_group()
    comm.close()
    if rank == 0:
        print(json.dumps(rows))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reps", type=int, default=30)
    p.add_argument("--sizes-mb", type=float, nargs="+", default=[1, 4, 16])
    p.add_argument("--threads", type=int, default=1, help="torch threads per process")
    p.add_argument("--worker", nargs=3, metavar=("RANK", "EPS", "PORT"), help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.worker:
        worker(int(a.worker[0]), a.worker[1], int(a.worker[2]), a.sizes_mb, a.reps, a.threads)
        return 0
    ports = free_ports(3)
    eps = f"127.0.0.1:{ports[0]},127.0.0.1:{ports[1]}"
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    args = ["--reps", str(a.reps), "--threads", str(a.threads), "--sizes-mb",
            *map(str, a.sizes_mb)]
    procs = [subprocess.Popen([sys.executable, __file__, *args, "--worker", str(r), eps,
                               str(ports[2])], env=env, stdout=subprocess.PIPE, text=True)
             for r in (0, 1)]
    try:
        out = procs[0].communicate(timeout=600)[0]
        procs[1].wait(timeout=60)
    finally:
        for pr in procs:
            if pr.poll() is None:
                pr.kill()
                pr.wait()
    if procs[0].returncode or procs[1].returncode:
        print(f"a worker failed (exit {procs[0].returncode}, {procs[1].returncode})")
        return 1
    rows = json.loads(out.strip().splitlines()[-1])
    print(f"all-reduce, 2 processes x 1 CPU device, gloo on 127.0.0.1, median of {a.reps} "
          f"(torch threads {a.threads})")
    print("ratio: of the medians; paired: median of each round's ratio (steadier under load)")
    print(f"{'size':>8} {'parafluid ms':>13} {'donate=True ms':>15} {'torch.distributed ms':>21}"
          f" {'ratio':>7} {'paired':>7} {'donated ratio':>14} {'paired':>7}"
          f" {'checked ms':>11} {'checked paired':>15} {'shared ms':>10} {'paired':>7}")
    for r in rows:
        print(f"{r['mb']:>6g}MB {r['ours'] * 1e3:>13.2f} {r['donated'] * 1e3:>15.2f} "
              f"{r['bare'] * 1e3:>21.2f} {r['ours'] / r['bare']:>6.2f}x "
              f"{r['ours_paired']:>6.2f}x {r['donated'] / r['bare']:>13.2f}x "
              f"{r['donated_paired']:>6.2f}x {r['checked'] * 1e3:>11.2f} "
              f"{r['checked_paired']:>14.2f}x {r['shared'] * 1e3:>10.2f} "
              f"{r['shared_paired']:>6.2f}x")
    print(f"shared: through the trainers' shared memory: {rows[0]['shared_memory']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
