"""Merge the profiler traces of several processes into one Chrome timeline (Fluid's
``tools/timeline.py``).

Each process of a multi-process job writes its own trace (``fluid.profiler`` with a
``profile_path`` per rank). Their timestamps count from each process's own profiler start;
every file also records the wall-clock time of that start (``otherData.start_epoch_ns``), so
the merge shifts each file by its start's distance to the earliest one: events of all
processes land on one clock (as exact as the hosts' clocks agree: one host, or NTP). Each
file's tracks are renumbered by its position in the list, so two files that both say rank 0
do not collide.

Usage::

    python -m parafluid.timeline --profile_path /tmp/rank0.json,/tmp/rank1.json \\
        --timeline_path /tmp/timeline.json
    python -m parafluid.timeline --profile_path trainer0=/tmp/r0.json,trainer1=/tmp/r1.json
    python -m parafluid.timeline --profile_path /tmp/p.json --svg /tmp/p.svg \\
        --svg_window 120,126        # also a static picture of 6 ms of it

Open the result in chrome://tracing or https://ui.perfetto.dev.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

__all__ = ["merge_traces", "load_trace", "render_svg", "main"]

_TRACK = 1000  # pid = rank * 1000 + device + 1 (see parafluid.profiler.track_id)


def load_trace(path: str) -> dict[str, Any]:
    """Read one profiler trace; ValueError naming the file if it is not one."""
    try:
        with open(path) as f:
            trace = json.load(f)
    except FileNotFoundError:
        raise ValueError(f"timeline: profile file {path!r} does not exist") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"timeline: {path!r} is not JSON ({e}); pass the files the profiler "
                         "wrote (profile_path)") from None
    if not isinstance(trace, dict) or not isinstance(trace.get("traceEvents"), list):
        raise ValueError(f"timeline: {path!r} has no 'traceEvents' list: not a Chrome trace")
    start = (trace.get("otherData") or {}).get("start_epoch_ns")
    if not isinstance(start, int):
        raise ValueError(f"timeline: {path!r} has no otherData.start_epoch_ns, so its clock "
                         "cannot be aligned with the others; was it written by "
                         "parafluid.profiler?")
    return trace


def merge_traces(traces: Sequence[dict[str, Any]], names: Sequence[str] | None = None
                 ) -> dict[str, Any]:
    """One trace holding every event of ``traces``, aligned on the earliest start.

    ``names[k]`` (default ``"rank k"``) labels the tracks of the k-th trace.
    """
    if not traces:
        raise ValueError("timeline: no traces to merge")
    names = list(names) if names is not None else [f"rank {k}" for k in range(len(traces))]
    if len(names) != len(traces):
        raise ValueError(f"timeline: {len(names)} names for {len(traces)} traces")
    t0 = min(t["otherData"]["start_epoch_ns"] for t in traces)
    events: list[dict[str, Any]] = []
    for k, (trace, name) in enumerate(zip(traces, names)):
        shift_us = (trace["otherData"]["start_epoch_ns"] - t0) / 1e3
        for ev in trace["traceEvents"]:
            ev = dict(ev)
            if "pid" in ev:
                local = ev["pid"] % _TRACK  # device + 1 within the file's rank
                ev["pid"] = k * _TRACK + local
            if ev.get("ph") == "M":
                if ev.get("name") == "process_name":
                    device = ev["pid"] % _TRACK - 1
                    label = "collectives (all devices)" if device < 0 else f"device {device}"
                    ev["args"] = {"name": f"{name} {label}"}
                elif ev.get("name") == "process_sort_index":
                    ev["args"] = {"sort_index": ev["pid"]}
            elif "ts" in ev:
                ev["ts"] = ev["ts"] + shift_us
                ev.setdefault("args", {})["trace"] = name
            events.append(ev)
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"start_epoch_ns": t0, "merged": list(names),
                          "producer": "parafluid.timeline"}}


_COLORS = {"compute": "#4e79a7", "communication": "#e15759"}


def render_svg(trace: dict[str, Any], start_ms: float | None = None,
               end_ms: float | None = None, width: int = 1000) -> str:
    """A static picture (SVG) of the trace's op events between ``start_ms`` and ``end_ms``:
    one row per (track, thread) lane, compute ops blue, communication ops red."""
    evs = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    if not evs:
        raise ValueError("timeline: the trace has no op events to draw")
    lo = min(e["ts"] for e in evs) / 1e3 if start_ms is None else start_ms
    hi = max(e["ts"] + e["dur"] for e in evs) / 1e3 if end_ms is None else end_ms
    if not hi > lo:
        raise ValueError(f"timeline: empty window {lo} .. {hi} ms")
    evs = [e for e in evs if e["ts"] / 1e3 < hi and (e["ts"] + e["dur"]) / 1e3 > lo]
    procs = {e["pid"]: e["args"]["name"] for e in trace["traceEvents"]
             if e.get("ph") == "M" and e.get("name") == "process_name"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in trace["traceEvents"]
               if e.get("ph") == "M" and e.get("name") == "thread_name"}
    lanes = sorted({(e["pid"], e["tid"]) for e in evs})
    label_w, row_h, top = 300, 26, 30
    scale = (width - label_w - 10) / (hi - lo)
    height = top + row_h * len(lanes) + 30
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           'font-family="sans-serif" font-size="11">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="8" y="18" font-size="13">{len(evs)} ops, {hi - lo:.2f} ms '
           '(blue: compute, red: communication)</text>']
    for row, (pid, tid) in enumerate(lanes):
        y = top + row * row_h
        thread = str(threads.get((pid, tid), tid))
        thread = thread if len(thread) <= 16 else "..." + thread[-13:]  # keep the distinct end
        name = f"{procs.get(pid, pid)} / {thread}"
        out.append(f'<text x="8" y="{y + 16}">{_xml(name)}</text>')
        out.append(f'<line x1="{label_w}" y1="{y + row_h - 2}" x2="{width - 10}" '
                   f'y2="{y + row_h - 2}" stroke="#ddd"/>')
    for e in evs:
        row = lanes.index((e["pid"], e["tid"]))
        x0 = label_w + (max(e["ts"] / 1e3, lo) - lo) * scale
        x1 = label_w + (min((e["ts"] + e["dur"]) / 1e3, hi) - lo) * scale
        y = top + row * row_h + 3
        color = _COLORS.get(e.get("cat", ""), "#999")
        out.append(f'<rect x="{x0:.1f}" y="{y}" width="{max(x1 - x0, 0.6):.1f}" '
                   f'height="{row_h - 8}" fill="{color}" stroke="white" stroke-width="0.3">'
                   f'<title>{_xml(e["name"])} {e["dur"]:.1f} us</title></rect>')
        if x1 - x0 > 7 * len(e["name"]):
            out.append(f'<text x="{x0 + 2:.1f}" y="{y + 13}" fill="white">'
                       f'{_xml(e["name"])}</text>')
    axis_y = top + row_h * len(lanes) + 16
    for k in range(6):
        t = lo + (hi - lo) * k / 5
        x = label_w + (t - lo) * scale
        out.append(f'<text x="{x:.1f}" y="{axis_y}" text-anchor="middle">{t:.2f} ms</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _xml(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _parse_paths(spec: str) -> tuple[list[str], list[str]]:
    names, paths = [], []
    for k, item in enumerate(p for p in spec.split(",") if p):
        name, sep, path = item.partition("=")
        if not sep:
            name, path = f"rank {k}", item
        names.append(name)
        paths.append(path)
    if not paths:
        raise ValueError("timeline: --profile_path names no file")
    return names, paths


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m parafluid.timeline",
        description="Merge parafluid profiler traces (one per process) into one Chrome trace.")
    parser.add_argument("--profile_path", required=True,
                        help="comma-separated trace files, optionally name=path")
    parser.add_argument("--timeline_path", default="/tmp/timeline",
                        help="where to write the merged trace (default /tmp/timeline)")
    parser.add_argument("--svg", default=None, metavar="FILE",
                        help="also draw the merged timeline as a static SVG picture")
    parser.add_argument("--svg_window", default=None, metavar="START_MS,END_MS",
                        help="the time window the picture shows (default: all of it)")
    args = parser.parse_args(argv)
    try:
        names, paths = _parse_paths(args.profile_path)
        merged = merge_traces([load_trace(p) for p in paths], names)
        window: tuple[float | None, float | None] = (None, None)
        if args.svg_window:
            a, _, b = args.svg_window.partition(",")
            window = (float(a), float(b))
        svg = render_svg(merged, *window) if args.svg else None
    except ValueError as e:
        print(e, file=sys.stderr)
        return 2
    with open(args.timeline_path, "w") as f:
        json.dump(merged, f)
    n = sum(1 for e in merged["traceEvents"] if e.get("ph") == "X")
    print(f"timeline: {n} events from {len(paths)} file(s) -> {args.timeline_path}")
    if svg is not None:
        with open(args.svg, "w") as f:
            f.write(svg)
        print(f"timeline: picture -> {args.svg}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
