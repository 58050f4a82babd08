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

Open the result in chrome://tracing or https://ui.perfetto.dev.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

__all__ = ["merge_traces", "load_trace", "main"]

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
    args = parser.parse_args(argv)
    try:
        names, paths = _parse_paths(args.profile_path)
        merged = merge_traces([load_trace(p) for p in paths], names)
    except ValueError as e:
        print(e, file=sys.stderr)
        return 2
    with open(args.timeline_path, "w") as f:
        json.dump(merged, f)
    n = sum(1 for e in merged["traceEvents"] if e.get("ph") == "X")
    print(f"timeline: {n} events from {len(paths)} file(s) -> {args.timeline_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
