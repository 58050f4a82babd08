"""How the distributed modes scale with trainers, pservers and bandwidth, on one machine.

Every process (pserver, trainer, rank) is forked from this one, on 127.0.0.1. The model's
compute is a sleep of ``--compute-ms`` per step, so what is measured is the runtime's own cost
(the 2 cores of the machine would otherwise be the limit): per step, the step time, each
process's CPU time, the bytes it sent and received (payloads) and its messages. The
gradients are a VGG16-like parameter list (13 conv and 3 fc layers, weights and biases: a few
large tensors, many small), with the channels divided by ``--div``.

* ``pserver``: trainers x pservers, sync and async, ``dense`` (the VGG-like list, sliced over
  the pservers as DistributeTranspiler does: blocks of at least 8192 elements, round robin)
  and ``sparse`` (a distributed lookup table: each step prefetches 1024 random rows from the
  shards and sends the row-sparse gradient back, plus a small dense head). The trainer side
  calls the runtime as a transpiled program does: one ``send`` per gradient (its blocks to
  their pservers at once), send barrier, one ``recv`` per parameter, fetch barrier.
* ``collective``: 1..8 ranks over gloo (``init_collective``), the same VGG-like gradients
  all-reduced one by one, or fused into one buffer (as ``fuse_all_reduce_ops`` does); with
  ``--shared`` the fused buffer goes as the ParallelExecutor sends gradients (checked by its
  data), so through the trainers' shared memory.
* ``--kinds msgs bytes``: calibration jobs (128 gradients of 1 KiB; 4 of 4 MiB) that
  separate a pserver's cost per message from its cost per byte.
* ``faults``: a sync job (default 16 trainers x 4 pservers) in which one trainer, or one
  pserver, is killed (SIGKILL) after a few steps: reports, for every survivor, whether and
  when its error names the victim, and whether any process was left running.
* ``--link BPS,LATENCY``: every process gets a simulated link (bits/s, seconds one way; see
  ``parafluid/distributed/link_shaper.py``); the collective mode (gloo) is not shaped.

Results go to a JSON file (one record per configuration and run); ``bench/scaling_model.py``
fits the cost model and draws the plots from it. Not a test: nothing is asserted.

    PYTHONPATH=$PWD python bench/scaling.py pserver --runs 3 --out /tmp/scaling.json
    PYTHONPATH=$PWD python bench/scaling.py pserver --trainers 4 --pservers 2 --link 1e9,50e-6
    PYTHONPATH=$PWD python bench/scaling.py collective --runs 3 --out /tmp/scaling.json
    PYTHONPATH=$PWD python bench/scaling.py faults --victim trainer
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import os
import signal
import statistics
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import torch  # noqa: E402  (imported before the forks: children start warm)

from parafluid.distributed.launch import free_ports  # noqa: E402

MIN_BLOCK = 8192  # DistributeTranspilerConfig.min_block_size (elements)
TABLE_ROWS, TABLE_WIDTH, IDS_PER_STEP = 100_000, 64, 1024
VGG16 = [64, 64, 128, 128, 256, 256, 256, 512, 512, 512, 512, 512, 512]


def vgg_params(div: int) -> list[tuple[str, int]]:
    """(name, elements) of VGG16's parameters with the channels divided by ``div``."""
    out, c_in = [], 3
    for i, c in enumerate(VGG16):
        c = max(1, c // div)
        out += [(f"conv{i}.w", c * c_in * 9), (f"conv{i}.b", c)]
        c_in = c
    hidden = max(1, 4096 // div)
    for i, (a, b) in enumerate([(c_in * 49, hidden), (hidden, hidden), (hidden, 1000)]):
        out += [(f"fc{i}.w", a * b), (f"fc{i}.b", b)]
    return out


def job_params(kind: str, div: int) -> list[tuple[str, int]]:
    """The dense parameters of a pserver job of ``kind``."""
    if kind == "dense":
        return vgg_params(div)
    if kind == "sparse":  # the table is extra (sharded rows)
        return [("fc.w", TABLE_WIDTH * 64), ("fc.b", 64)]
    # calibration: many small messages, or few large ones (docs/scaling.md)
    return {"msgs": [(f"m{i}", 256) for i in range(128)],
            "bytes": [(f"b{i}", 1 << 20) for i in range(4)]}[kind]


def slice_blocks(params: list[tuple[str, int]], eps: list[str]) -> dict[str, list[tuple]]:
    """{param: [(block name, endpoint, elements), ...]}: DistributeTranspiler's rule."""
    plan, k = {}, 0
    for name, n in params:
        split = min(len(eps), max(1, n // MIN_BLOCK))
        size = math.ceil(n / split)
        blocks = []
        for b in range(math.ceil(n / size)):
            blocks.append((f"{name}.block{b}", eps[k % len(eps)], min(size, n - b * size)))
            k += 1
        plan[name] = blocks
    return plan


# ------------------------------------------------------------------------- pserver mode


def pserver_proc(cfg: dict, idx: int, out: str) -> None:
    from parafluid.distributed.pserver import ParameterServer
    from parafluid.scope import SelectedRows

    ep = cfg["pservers"][idx]
    mine = {b: torch.zeros(n) for blocks in cfg["plan"].values() for b, e, n in blocks
            if e == ep}
    shard = _shard(cfg, idx)
    table = torch.zeros(shard[1], TABLE_WIDTH) if shard else None
    count = {"optimize": 0}

    def optimize(grads: dict[str, list[Any]]) -> None:
        count["optimize"] += 1
        for name, vals in grads.items():
            if isinstance(vals[0], SelectedRows):
                for sr in vals:
                    table.index_add_(0, sr.rows, sr.value, alpha=-0.01 / len(vals))
            else:
                mine[name.removesuffix("@GRAD")].sub_(torch.stack(vals).sum(0),
                                                     alpha=0.01 / len(vals))

    ps = ParameterServer(ep, cfg["trainers"], cfg["sync"], optimize=optimize,
                         get=mine.__getitem__, prefetch=lambda t, rows: table[rows],
                         deadline_s=cfg["deadline_s"], peers=cfg["pservers"],
                         checkpoint_root=tempfile.gettempdir())
    cpu0, wall0 = time.process_time(), time.monotonic()
    rec = {"role": "pserver", "id": idx}
    try:
        ps.serve(handle_sigterm=False)
    except Exception as e:  # noqa: BLE001 - reported to the parent
        rec.update(error=f"{type(e).__name__}: {e}", error_at=time.time())
    rec.update(cpu_s=time.process_time() - cpu0, wall_s=time.monotonic() - wall0,
               updates=count["optimize"], refused=ps.refused)
    _write(out, f"ps{idx}", rec)


def _shard(cfg: dict, idx: int) -> tuple[int, int] | None:
    """(first row, rows) of pserver ``idx``'s shard of the table, or None (dense job)."""
    if cfg["kind"] != "sparse":
        return None
    p = len(cfg["pservers"])
    rows = math.ceil(TABLE_ROWS / p)
    return idx * rows, min(rows, TABLE_ROWS - idx * rows)


def trainer_proc(cfg: dict, t: int, out: str) -> None:
    from parafluid.distributed.ps_client import ClientPool, wait_for_server
    from parafluid.scope import SelectedRows

    torch.manual_seed(t)
    eps, sync, plan = cfg["pservers"], cfg["sync"], cfg["plan"]
    suffix = f".trainer_{t}" if sync and cfg["trainers"] > 1 else ""
    grads = {b: torch.full((n,), 1e-3) for blocks in plan.values() for b, _, n in blocks}
    pool = ClientPool(t, deadline_s=cfg["deadline_s"])
    rec: dict[str, Any] = {"role": "trainer", "id": t, "steps": []}
    sent: dict[str, int] = dict.fromkeys(eps, 0)
    msgs = [0]

    def pull() -> None:
        for blocks in plan.values():
            got = pool.recv([b for b, _, _ in blocks], [e for _, e, _ in blocks])
            for (_, e, _), g in zip(blocks, got):
                sent[e] += g.numel() * 4
            msgs[0] += len(blocks)
        if sync:
            pool.fetch_barrier(eps)
            msgs[0] += len(eps)

    try:
        for ep in eps:
            wait_for_server(ep, cfg["deadline_s"])
        pull()
        for step in range(cfg["warmup"] + cfg["steps"]):
            if step == cfg["warmup"]:
                sent.update(dict.fromkeys(eps, 0))
                msgs[0] = 0
            if cfg.get("kill_at") == step and t == 0:
                _write(out, "killnow", {"at": time.time()})
            w0, c0 = time.monotonic(), time.process_time()
            if cfg["kind"] == "sparse":
                ids = torch.randint(0, TABLE_ROWS, (IDS_PER_STEP,))
                wanted = []
                for i in range(len(eps)):
                    first, rows = _shard(cfg, i)
                    mine = ids[(ids >= first) & (ids < first + rows)] - first
                    if mine.numel():
                        wanted.append((i, torch.unique(mine)))
                got = pool.each_at([eps[i] for i, _ in wanted],
                                   lambda c, k, w=wanted: c.prefetch(f"emb.block{w[k][0]}",
                                                                     w[k][1]))
                for (i, rows), g in zip(wanted, got):
                    sent[eps[i]] += rows.numel() * 8 + g.numel() * 4
                msgs[0] += len(wanted)
            time.sleep(cfg["compute_s"])  # the model's forward and backward
            for blocks in plan.values():
                names = [b + "@GRAD" + suffix for b, _, _ in blocks]
                pool.send(names, [e for _, e, _ in blocks], [grads[b] for b, _, _ in blocks])
                for _, e, n in blocks:
                    sent[e] += n * 4
                msgs[0] += len(blocks)
            if cfg["kind"] == "sparse":
                pool.each_at([eps[i] for i, _ in wanted], lambda c, k, w=wanted: c.send(
                    "emb@GRAD" + suffix, SelectedRows(
                        w[k][1], torch.full((w[k][1].numel(), TABLE_WIDTH), 1e-3),
                        _shard(cfg, w[k][0])[1])))
                for i, rows in wanted:
                    sent[eps[i]] += rows.numel() * (8 + 4 * TABLE_WIDTH)
                msgs[0] += len(wanted)
            if sync:
                pool.send_barrier(eps)
                msgs[0] += len(eps)
            pull()
            rec["steps"].append((time.monotonic() - w0, time.process_time() - c0))
        rec["steps"] = rec["steps"][cfg["warmup"]:]
        rec.update(bytes_per_step={e: v / cfg["steps"] for e, v in sent.items()},
                   msgs_per_step=msgs[0] / cfg["steps"])
        pool.complete()
    except Exception as e:  # noqa: BLE001 - reported to the parent
        rec.update(error=f"{type(e).__name__}: {e}", error_at=time.time())
        pool.close()
    _write(out, f"t{t}", rec)


def _write(out: str, name: str, rec: dict) -> None:
    with open(os.path.join(out, name + ".json.tmp"), "w") as f:
        json.dump(rec, f)
    os.replace(os.path.join(out, name + ".json.tmp"), os.path.join(out, name + ".json"))


def _read(out: str, name: str) -> dict | None:
    path = os.path.join(out, name + ".json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def _run_procs(targets: list[tuple[Callable, tuple]], timeout_s: float,
               on_poll: Callable[[list], None] | None = None) -> list[Any]:
    """Fork one process per target; wait (bounded); kill every one left in the end."""
    ctx = mp.get_context("fork")
    procs = []
    try:
        for fn, args in targets:
            p = ctx.Process(target=_guard, args=(fn, args), daemon=True)
            p.start()
            procs.append(p)
        end = time.monotonic() + timeout_s
        while any(p.is_alive() for p in procs) and time.monotonic() < end:
            if on_poll is not None:
                on_poll(procs)
            time.sleep(0.05)
        return [p.exitcode for p in procs]  # None: still running at the timeout
    finally:
        for p in procs:
            if p.is_alive():
                os.kill(p.pid, signal.SIGKILL)
            p.join(10)


def _guard(fn: Callable, args: tuple) -> None:
    torch.set_num_threads(1)
    logging_quiet()
    try:
        fn(*args)
    except BaseException:
        traceback.print_exc()
        raise


def logging_quiet() -> None:
    import logging

    # NOTE: the fault runs make every pserver log its failure; the errors are in the records
    logging.getLogger("parafluid").setLevel(logging.CRITICAL)


def pserver_config(trainers: int, pservers: int, sync: bool, kind: str, a: argparse.Namespace
                   ) -> dict:
    eps = [f"127.0.0.1:{p}" for p in free_ports(pservers)]
    params = job_params(kind, a.div)
    return {"trainers": trainers, "pservers": eps, "sync": sync, "kind": kind,
            "plan": slice_blocks(params, eps), "steps": a.steps, "warmup": a.warmup,
            "compute_s": a.compute_ms / 1000, "deadline_s": a.deadline,
            "params": sum(n for _, n in params)}


def run_pserver_job(cfg: dict, timeout_s: float, on_poll: Callable | None = None
                    ) -> tuple[dict, str]:
    out = tempfile.mkdtemp(prefix="pf-scaling-")
    n_ps = len(cfg["pservers"])
    targets = [(pserver_proc, (cfg, i, out)) for i in range(n_ps)]
    targets += [(trainer_proc, (cfg, t, out)) for t in range(cfg["trainers"])]
    codes = _run_procs(targets, timeout_s, None if on_poll is None else
                       lambda procs: on_poll(procs, out))
    recs = {"pservers": [_read(out, f"ps{i}") for i in range(n_ps)],
            "trainers": [_read(out, f"t{t}") for t in range(cfg["trainers"])],
            "exit_codes": codes}
    return recs, out


def summarize_pserver(cfg: dict, recs: dict) -> dict:
    tr = [r for r in recs["trainers"] if r]
    errors = [r.get("error") for r in recs["trainers"] + recs["pservers"] if r and
              r.get("error")]
    row = {"mode": "pserver", "sync": cfg["sync"], "kind": cfg["kind"],
           "trainers": cfg["trainers"], "pservers": len(cfg["pservers"]),
           "compute_ms": cfg["compute_s"] * 1000, "params": cfg["params"],
           "errors": errors[:3], "ok": not errors and len(tr) == cfg["trainers"]}
    if not row["ok"]:
        return row
    steps = cfg["warmup"] + cfg["steps"]
    row["step_ms"] = statistics.median(statistics.median(s[0] for s in r["steps"]) for r in tr
                                       ) * 1000
    row["trainer_cpu_ms"] = statistics.median(statistics.median(s[1] for s in r["steps"])
                                              for r in tr) * 1000
    per_ps: dict[str, float] = {}
    for r in tr:
        for e, b in r["bytes_per_step"].items():
            per_ps[e] = per_ps.get(e, 0.0) + b
    row["trainer_bytes"] = statistics.median(sum(r["bytes_per_step"].values()) for r in tr)
    row["pserver_bytes_max"] = max(per_ps.values())
    row["trainer_msgs"] = statistics.median(r["msgs_per_step"] for r in tr)
    row["pserver_cpu_ms"] = max(r["cpu_s"] for r in recs["pservers"]) / (steps + 1) * 1000
    return row


# ---------------------------------------------------------------------- collective mode


def rank_proc(cfg: dict, rank: int, out: str) -> None:
    from parafluid.distributed.collective import close_all, init_collective

    params = vgg_params(cfg["div"])
    grads = [torch.full((n,), 1e-3) for _, n in params]
    comm = init_collective(cfg["endpoints"], rank, [torch.device("cpu")],
                           deadline_s=cfg["deadline_s"])
    steps = []
    for _ in range(cfg["warmup"] + cfg["steps"]):
        w0, c0 = time.monotonic(), time.process_time()
        time.sleep(cfg["compute_s"])
        if cfg["fused"] and cfg.get("shared"):
            # as the ParallelExecutor's gradient all-reduce: checked by its data, through
            # the trainers' shared memory on one machine
            comm.verify_collectives = comm.sizes_agreed = True
            comm.all_reduce([torch.cat(grads)])
            comm.sizes_agreed = False
        elif cfg["fused"]:
            comm.all_reduce([torch.cat(grads)], donate=True)
        else:
            for i, g in enumerate(grads):
                comm.all_reduce([g], donate=True, name=f"g{i}")
        steps.append((time.monotonic() - w0, time.process_time() - c0))
    shared = comm.shared_memory
    close_all()
    _write(out, f"r{rank}", {"steps": steps[cfg["warmup"]:], "shared": shared})


def run_collective(ranks: int, fused: bool, a: argparse.Namespace) -> dict:
    out = tempfile.mkdtemp(prefix="pf-scaling-")
    cfg = {"endpoints": ",".join(f"127.0.0.1:{p}" for p in free_ports(ranks)),
           "fused": fused, "div": a.div, "steps": a.steps, "warmup": a.warmup,
           "compute_s": a.compute_ms / 1000, "deadline_s": a.deadline,
           "shared": a.shared}
    _run_procs([(rank_proc, (cfg, r, out)) for r in range(ranks)], a.timeout)
    recs = [_read(out, f"r{r}") for r in range(ranks)]
    row = {"mode": "collective", "fused": fused, "trainers": ranks,
           "shared": bool(cfg["shared"] and fused and recs[0] and recs[0].get("shared")),
           "compute_ms": a.compute_ms, "params": sum(n for _, n in vgg_params(a.div)),
           "ok": all(recs)}
    if row["ok"]:
        row["step_ms"] = statistics.median(statistics.median(s[0] for s in r["steps"])
                                           for r in recs) * 1000
        row["trainer_cpu_ms"] = statistics.median(statistics.median(s[1] for s in r["steps"])
                                                  for r in recs) * 1000
        # a ring all-reduce sends and receives 2 (n-1)/n of the buffer per rank
        row["trainer_bytes"] = 2 * 2 * (ranks - 1) / ranks * row["params"] * 4
    return row


# ------------------------------------------------------------------------------- faults


def run_faults(a: argparse.Namespace) -> dict:
    """Kill one trainer or one pserver of a running sync job; what each survivor reports."""
    cfg = pserver_config(a.trainers[0], a.pservers[0], True, "dense", a)
    cfg["steps"], cfg["kill_at"] = 1000, 3  # runs until the kill ends it
    victim = {"trainer": 5 % cfg["trainers"], "pserver": 2 % len(cfg["pservers"])}[a.victim]
    killed: dict[str, Any] = {}

    def on_poll(procs: list, out: str) -> None:
        if not killed and _read(out, "killnow") is not None:
            p = procs[victim if a.victim == "pserver" else len(cfg["pservers"]) + victim]
            os.kill(p.pid, signal.SIGKILL)
            killed["at"] = time.time()

    recs, _ = run_pserver_job(cfg, a.timeout, on_poll)
    name = (f"trainer(s) [{victim}]" if a.victim == "trainer" else cfg["pservers"][victim])
    survivors = []
    for role, key in (("pserver", "pservers"), ("trainer", "trainers")):
        for i, r in enumerate(recs[key]):
            if role == a.victim and i == victim:
                continue
            err = (r or {}).get("error", "")
            survivors.append({"role": role, "id": i, "names_victim": name in err,
                              "after_s": round(r["error_at"] - killed["at"], 2)
                              if err and killed else None, "error": err[:300]})
    codes = recs["exit_codes"]
    return {"victim": f"{a.victim} {victim}", "named_by": sum(s["names_victim"] for s in
                                                               survivors),
            "survivors": len(survivors),
            "max_after_s": max((s["after_s"] or 0) for s in survivors),
            "left_running_at_timeout": sum(c is None for c in codes),
            "deadline_s": cfg["deadline_s"], "details": survivors}


# --------------------------------------------------------------------------------- main


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("what", choices=["pserver", "collective", "faults"])
    p.add_argument("--trainers", type=int, nargs="+", default=None)
    p.add_argument("--pservers", type=int, nargs="+", default=[1, 2, 4])
    p.add_argument("--modes", nargs="+", default=["sync", "async"])
    p.add_argument("--kinds", nargs="+", default=["dense", "sparse"])
    p.add_argument("--fused", nargs="+", default=["on", "off"])
    p.add_argument("--victim", choices=["trainer", "pserver"], default="trainer")
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--runs", type=int, default=1)
    p.add_argument("--compute-ms", type=float, default=100.0)
    p.add_argument("--div", type=int, default=16, help="VGG16's channels divided by this")
    p.add_argument("--deadline", type=float, default=30.0, help="FLAGS_rpc_deadline, s")
    p.add_argument("--timeout", type=float, default=300.0, help="per job, s")
    p.add_argument("--link", default="", help="bits/s,latency_s per process (pserver mode)")
    p.add_argument("--shared", action="store_true",
                   help="collective, fused runs: the all-reduce as the ParallelExecutor issues it "
                   "(checked by its data), so through the trainers' shared memory")
    p.add_argument("--out", default="", help="append the JSON records to this file")
    a = p.parse_args()
    if a.link:
        os.environ["PARAFLUID_BENCH_LINK"] = a.link  # read by the forked processes
    rows: list[dict] = []

    def keep(row: dict) -> None:
        rows.append(row)
        if a.out:  # NOTE: as they come, so that an interrupted sweep keeps its records
            with open(a.out, "a") as f:
                f.write(json.dumps(row) + "\n")

    if a.what == "faults":
        a.trainers, a.pservers = a.trainers or [16], a.pservers if a.pservers != [1, 2, 4] \
            else [4]
        res = run_faults(a)
        print(json.dumps(res, indent=1))
        keep({"mode": "faults", **res})
    for run in range(a.runs if a.what != "faults" else 0):
        if a.what == "pserver":
            for kind in a.kinds:
                for mode in a.modes:
                    for n_ps in a.pservers:
                        for t in a.trainers or [1, 2, 4, 8, 16]:
                            cfg = pserver_config(t, n_ps, mode == "sync", kind, a)
                            row = summarize_pserver(cfg, run_pserver_job(cfg, a.timeout)[0])
                            keep({**row, "run": run, "link": a.link})
                            _print(row)
        else:
            for fused in a.fused:
                for r in a.trainers or [1, 2, 4, 8]:
                    row = run_collective(r, fused == "on", a)
                    keep({**row, "run": run})
                    _print(row)
    return 0


def _print(row: dict) -> None:
    sync = "" if "sync" not in row else "sync" if row["sync"] else "async"
    head = (f"{row['mode']:10s} {sync:5s}"
            f" {row.get('kind', 'fused' if row.get('fused') else 'unfused'):7s}"
            f"{' shm' if row.get('shared') else '    '} "
            f"T={row['trainers']:<2d} P={row.get('pservers', '-')!s:2s}")
    if not row["ok"]:
        print(f"{head} FAILED: {row.get('errors')}", flush=True)
        return
    print(f"{head} step {row['step_ms']:8.1f} ms  trainer cpu {row['trainer_cpu_ms']:7.1f} ms"
          f"  pserver cpu {row.get('pserver_cpu_ms', 0):7.1f} ms  "
          f"bytes/trainer {row['trainer_bytes'] / 1e6:6.2f} MB", flush=True)


if __name__ == "__main__":
    sys.exit(main())
