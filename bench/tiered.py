"""Tiered compilation: ``parafluid train --compile`` against the interpreted run, whole runs
and step time against wall time, cold and warm compile cache (not a test: it prints numbers).

Case ``run``: rounds of fresh processes, side by side in each round: ``parafluid train``
(interpreted), ``parafluid train --compile`` with an empty Inductor cache (cold) and with the
cache a previous ``--compile`` run left (warm); with ``--before DIR``, also ``--compile`` of
another checkout (the synchronous compile it had). Printed: the medians of each side's whole
process wall time and of the training time the command reports ("... s in all"), and the
medians of the per-round ratios to the interpreted run.

Case ``curve``: the digits classifier trained for ``--seconds`` of wall time in a fresh
process per side (interpreted, tiered cold, tiered warm); each step's time is logged against
the wall time since the process started training (``--nice``: the compile worker's
niceness, 19 by default as in a real run; 0 shows what a machine with an idle core sees on a
loaded one). Writes the points as JSON, an SVG plot
(``--svg``) and a Chrome trace of the tiered cold start (``--trace``, one event per step and
the compile worker's job) with its SVG rendering (``--trace-svg``).

    python bench/tiered.py --case run --rounds 5
    python bench/tiered.py --case curve --seconds 120 --svg docs/tiered_curves.svg \\
        --trace /tmp/tiered_trace.json --trace-svg docs/tiered_trace.svg
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_CHILD = r"""
import json, sys, time, threading
import numpy as np, torch
import parafluid as fluid
from parafluid.digits import TrainConfig, build_model, load_data
from parafluid.engine import tiered
compile_, seconds, trace = sys.argv[1] == "1", float(sys.argv[2]), sys.argv[3]
torch.set_num_threads(1)
x, y, _, _ = load_data()
cfg = TrainConfig(seed=1)
net = build_model(cfg)
scope, exe = fluid.Scope(), fluid.Executor(fluid.CPUPlace())
exe.run(net["startup"], scope=scope)
program = net["main"]
if compile_:
    bs = fluid.BuildStrategy()
    bs.enable_compile = bs.compile_in_background = True
    program = fluid.CompiledProgram(net["main"], build_strategy=bs)
fetch = [net["loss"], net["logits"]]
rng = np.random.RandomState(1)
points, events, t0 = [], [], time.perf_counter()
jobs = []
orig_submit = tiered.submit
def submit(job, done):
    jobs.append(job)
    orig_submit(job, done)
tiered.submit = submit
while time.perf_counter() - t0 < seconds:
    order = rng.permutation(len(x))
    for i in range(0, len(order), cfg.batch_size):
        idx = order[i:i + cfg.batch_size]
        s = time.perf_counter()
        exe.run(program, feed={"img": x[idx], "label": y[idx]}, fetch_list=fetch, scope=scope)
        e = time.perf_counter()
        state = "interpreted"
        if compile_:
            tier = next(iter(program._tiers.values()))
            state = tier.state
        points.append((e - t0, (e - s) * 1e3, state))
now = time.perf_counter_ns()
for job in jobs:
    if job.start_ns:
        job.end_ns = job.end_ns or now  # (still compiling when the run ended)
        events.append({"name": f"compile {job.what} (worker process, AOTInductor)",
                       "ph": "X", "pid": 1, "tid": 2, "ts": (job.start_ns / 1e3) - t0 * 1e6,
                       "dur": (job.end_ns - job.start_ns) / 1e3})
tiered.cancel_jobs()
json.dump({"points": points, "events": events}, open(trace, "w"))
"""


def _cli(args: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(process wall seconds, the training seconds the command reports); the checkout in
    ``env["PYTHONPATH"]`` runs (from its root: ``-m`` looks in the working folder first)."""
    t = time.perf_counter()
    res = subprocess.run([sys.executable, "-m", "parafluid", "train", "--seed", "1",
                          "--threads", "1", *args], env=env, capture_output=True, text=True,
                         check=True, cwd=env["PYTHONPATH"])
    wall = time.perf_counter() - t
    m = re.search(r"\(([\d.]+) s in all\)", res.stdout)
    return wall, float(m.group(1)) if m else float("nan")


def run_case(rounds: int, before: str | None) -> None:
    out = tempfile.mkdtemp()
    warm_cache = tempfile.mkdtemp()
    base = dict(os.environ, PYTHONPATH=ROOT)
    # fill the warm cache once, as a previous run of the command would
    _cli(["--compile", "-o", out], dict(base, TORCHINDUCTOR_CACHE_DIR=warm_cache))
    sides: dict[str, list[tuple[float, float]]] = {}
    for r in range(rounds):
        plan = [("interpreted", [], None, ROOT), ("--compile, cold cache", ["--compile"], "cold",
                                                   ROOT),
                ("--compile, warm cache", ["--compile"], warm_cache, ROOT)]
        if before:
            plan.append(("before: --compile, cold cache", ["--compile"], "cold", before))
        for name, extra, cache, root in plan[r % len(plan):] + plan[:r % len(plan)]:
            with tempfile.TemporaryDirectory() as cold:
                env = dict(base, PYTHONPATH=root,
                           TORCHINDUCTOR_CACHE_DIR=cold if cache in (None, "cold") else cache)
                sides.setdefault(name, []).append(_cli([*extra, "-o", out], env))
    print(f"== parafluid train (digits, 20 epochs), {rounds} rounds of fresh processes; "
          f"load average {os.getloadavg()[0]:.1f} ==")
    ref = sides["interpreted"]
    print(f"{'':34} {'process wall':>13} {'training':>10} {'wall ratio':>11} "
          f"{'training ratio':>15}")
    for name, vals in sides.items():
        walls, trains = [v[0] for v in vals], [v[1] for v in vals]
        rw = statistics.median(a[0] / b[0] for a, b in zip(vals, ref))
        rt = statistics.median(a[1] / b[1] for a, b in zip(vals, ref))
        print(f"{name:34} {statistics.median(walls):11.2f} s {statistics.median(trains):8.2f} s "
              f"{rw:10.3f}x {rt:14.3f}x   (walls {', '.join(f'{w:.1f}' for w in walls)})")


def curve_case(seconds: float, out_json: str, svg: str | None, trace: str | None,
               trace_svg: str | None, nice: int) -> None:
    warm_cache = tempfile.mkdtemp()
    base = dict(os.environ, PYTHONPATH=ROOT, PARAFLUID_TIERED_NICE=str(nice))
    results = {}
    # (the cold run fills the cache the warm run then finds)
    for name, compile_, cache in (("interpreted", "0", None),
                                  ("tiered, cold cache", "1", warm_cache),
                                  ("tiered, warm cache", "1", warm_cache)):
        with tempfile.TemporaryDirectory() as cold, tempfile.NamedTemporaryFile() as f:
            env = dict(base, TORCHINDUCTOR_CACHE_DIR=cache or cold)
            subprocess.run([sys.executable, "-c", _CHILD, compile_, str(seconds), f.name],
                           env=env, check=True)
            results[name] = json.load(open(f.name))
    with open(out_json, "w") as f:
        json.dump(results, f)
    for name, res in results.items():
        pts = res["points"]
        first = next((p[0] for p in pts if p[2] == "compiled"), None)
        before = [p[1] for p in pts if p[2] != "compiled"]
        after = [p[1] for p in pts if p[2] == "compiled"]
        print(f"{name:22} {len(pts):6d} steps in {seconds:.0f} s; median step "
              f"{statistics.median(before):.3f} ms interpreted"
              + (f", {statistics.median(after):.3f} ms compiled after the switch at "
                 f"{first:.1f} s" if after else ", never switched"))
    if svg:
        _plot_curves(results, svg)
    if trace:
        res = results["tiered, cold cache"]
        events = list(res["events"])
        for t, ms, state in res["points"]:
            events.append({"name": f"step ({state})", "ph": "X", "pid": 1, "tid": 1,
                           "ts": t * 1e6 - ms * 1e3, "dur": ms * 1e3})
        with open(trace, "w") as f:
            json.dump({"traceEvents": events}, f)
        if trace_svg:
            _plot_trace(events, trace_svg)


# ---------------------------------------------------------------------- pictures (SVG)

_COLORS = {"interpreted": "#1f77b4", "tiered, cold cache": "#d62728",
           "tiered, warm cache": "#2ca02c"}


def _plot_curves(results: dict, path: str) -> None:
    w, h, left, bottom = 760, 380, 60, 40
    tmax = max(p[0] for r in results.values() for p in r["points"])
    series = {}
    for name, res in results.items():
        pts = res["points"]
        k = max(1, len(pts) // 300)  # median of each run of k steps
        series[name] = [(statistics.median(p[0] for p in pts[i:i + k]),
                         statistics.median(p[1] for p in pts[i:i + k]))
                        for i in range(0, len(pts), k)]
    ymax = max(v for s in series.values() for _, v in s) * 1.1

    def xy(t: float, v: float) -> str:
        x = left + (w - left - 20) * t / tmax
        return f"{x:.1f},{h - bottom - (h - bottom - 20) * v / ymax:.1f}"

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
             'font-family="sans-serif" font-size="12">',
             f'<rect width="{w}" height="{h}" fill="white"/>',
             f'<line x1="{left}" y1="{h - bottom}" x2="{w - 20}" y2="{h - bottom}" '
             'stroke="black"/>',
             f'<line x1="{left}" y1="20" x2="{left}" y2="{h - bottom}" stroke="black"/>',
             f'<text x="{w / 2}" y="{h - 8}" text-anchor="middle">wall time since training '
             'started (s)</text>',
             f'<text x="14" y="{h / 2}" transform="rotate(-90 14 {h / 2})" '
             'text-anchor="middle">step time (ms)</text>']
    for i in range(6):
        t, v = tmax * i / 5, ymax * i / 5
        x, _ = xy(t, 0).split(",")
        _, y = xy(0, v).split(",")
        parts.append(f'<text x="{x}" y="{h - bottom + 15}" text-anchor="middle">{t:.0f}</text>')
        parts.append(f'<text x="{left - 5}" y="{y}" text-anchor="end">{v:.2f}</text>')
    for j, (name, pts) in enumerate(series.items()):
        color = _COLORS.get(name, "black")
        parts.append(f'<polyline fill="none" stroke="{color}" stroke-width="1.5" points="'
                     + " ".join(xy(t, v) for t, v in pts) + '"/>')
        parts.append(f'<text x="{w - 200}" y="{30 + 16 * j}" fill="{color}">{name}</text>')
    parts.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(parts) + "\n")


def _plot_trace(events: list[dict], path: str) -> None:
    w, row, left = 760, 36, 150
    tmax = max(e["ts"] + e["dur"] for e in events)
    tids = sorted({e["tid"] for e in events})
    names = {1: "main thread: steps", 2: "compile worker"}
    h = 50 + row * len(tids)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
             'font-family="sans-serif" font-size="12">',
             f'<rect width="{w}" height="{h}" fill="white"/>']
    scale = (w - left - 20) / tmax
    for r, tid in enumerate(tids):
        y = 20 + row * r
        parts.append(f'<text x="5" y="{y + row / 2}">{names.get(tid, tid)}</text>')
        last_end = {}
        for e in sorted((e for e in events if e["tid"] == tid), key=lambda e: e["ts"]):
            x0, x1 = left + e["ts"] * scale, left + (e["ts"] + e["dur"]) * scale
            color = ("#2ca02c" if "compiled" in e["name"] else "#1f77b4" if "step" in e["name"]
                     else "#d62728")
            key = color
            if key in last_end and x0 - last_end[key][1] < 0.5:  # merge what a pixel hides
                last_end[key][1] = max(x1, last_end[key][1])
                continue
            if key in last_end:
                a, b = last_end[key]
                parts.append(f'<rect x="{a:.1f}" y="{y + 4}" width="{max(b - a, 0.5):.1f}" '
                             f'height="{row - 8}" fill="{key}"/>')
            last_end[key] = [x0, x1]
        for key, (a, b) in last_end.items():
            parts.append(f'<rect x="{a:.1f}" y="{y + 4}" width="{max(b - a, 0.5):.1f}" '
                         f'height="{row - 8}" fill="{key}"/>')
    y = 20 + row * len(tids) + 15
    for i in range(6):
        t = tmax * i / 5
        parts.append(f'<text x="{left + t * scale:.1f}" y="{y}" text-anchor="middle">'
                     f'{t / 1e6:.0f} s</text>')
    parts.append(f'<text x="{left}" y="{h - 2}" fill="#1f77b4">interpreted steps</text>')
    parts.append(f'<text x="{left + 140}" y="{h - 2}" fill="#d62728">compile job</text>')
    parts.append(f'<text x="{left + 240}" y="{h - 2}" fill="#2ca02c">compiled steps</text>')
    parts.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(parts) + "\n")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--case", choices=("run", "curve"), default="run")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--before", help="another checkout's root: also time its --compile")
    p.add_argument("--seconds", type=float, default=120)
    p.add_argument("--json", default="/tmp/tiered_curves.json")
    p.add_argument("--svg")
    p.add_argument("--trace")
    p.add_argument("--trace-svg")
    p.add_argument("--nice", type=int, default=19,
                   help="the compile worker's niceness (PARAFLUID_TIERED_NICE; 19: default)")
    args = p.parse_args()
    if args.case == "run":
        run_case(args.rounds, args.before)
    else:
        curve_case(args.seconds, args.json, args.svg, args.trace, args.trace_svg, args.nice)


if __name__ == "__main__":
    main()
