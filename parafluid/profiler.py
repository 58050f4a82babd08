"""Fluid's ``fluid.profiler``: time every op, print a per-op table, write a Chrome trace.

The profiler is an op hook (``parafluid.engine.runtime.add_op_hook``): while it is on, the
executors run their timed task graphs (``Plan.graph_for_run``) and every op of every run,
on every device and thread, reports an ``OpRecord``. Off, no hook is registered and the
executors run the plain tasks: nothing is added per op.

- ``start_profiler(state)`` / ``stop_profiler(sorted_key, profile_path)`` /
  ``reset_profiler()`` and the ``profiler(state, sorted_key, profile_path)`` context manager,
  as in Fluid 1.x. At the stop, a table per op type (calls, total, min, max, average, ratio)
  is printed, sorted by ``sorted_key`` ("calls", "total", "max", "ave": descending; "min":
  ascending; None: first-run order), and a Chrome trace is written to ``profile_path``
  (JSON; open it in chrome://tracing or https://ui.perfetto.dev).
- In the trace, each device of each process is one track ("rank 0 device 1"; collectives
  over all devices get their own), with one lane per thread; communication ops (all-reduce,
  reduce, broadcast, send, recv, barriers) are in category ``communication``, the others in
  ``compute``. A ``{rank}`` in ``profile_path`` becomes the rank, so that every process of a
  job writes its own file. Timestamps are microseconds since the profiler started;
  ``otherData`` keeps
  the wall-clock time of that start (``start_epoch_ns``) and the rank
  (``PADDLE_TRAINER_ID``), which ``python -m parafluid.timeline`` uses to merge the files of
  several processes on one clock.
- ``cuda_profiler(output_file)``: drives the CUDA profiler (nvprof/nsys) around a region
  when torch sees a GPU; on a CPU-only machine it says so and profiles nothing.

Example::

    import parafluid.profiler as profiler
    with profiler.profiler("CPU", sorted_key="total", profile_path="/tmp/profile.json"):
        for _ in range(10):
            exe.run(main, feed=feed, fetch_list=[loss])
    # prints the table; python -m parafluid.timeline --profile_path /tmp/profile.json ...
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from .engine.runtime import OpRecord, add_op_hook, remove_op_hook, set_op_detail
from .ops.registry import get_op_def, has_op

__all__ = ["profiler", "start_profiler", "stop_profiler", "reset_profiler", "cuda_profiler",
           "OpStat", "op_table", "chrome_trace", "is_comm_op", "SORT_KEYS"]

STATES = ("CPU", "GPU", "All")
SORT_KEYS = ("calls", "total", "max", "min", "ave")
DEFAULT_PROFILE_PATH = "/tmp/profile"


def is_comm_op(op_type: str) -> bool:
    """Whether the trace shows ``op_type`` as communication: its registration row says
    ``comm=True`` (collectives, RPC, barriers, copies between devices); "<type> in flight"
    (an all-reduce started without waiting, until it completes) is communication too."""
    op_type = op_type.removesuffix(" in flight")
    return has_op(op_type) and get_op_def(op_type).comm


@dataclass(frozen=True)
class OpStat:
    """One row of the profiler table: an op type's calls and times (milliseconds)."""

    name: str
    calls: int
    total: float
    min: float
    max: float
    ave: float
    ratio: float  # share of the total time of all ops


class _Recording:
    """The op records taken between start_profiler and stop_profiler."""

    def __init__(self, state: str) -> None:
        self.state = state
        self.records: list[OpRecord] = []
        self.thread_names: dict[int, str] = {}
        self.lock = threading.Lock()
        self.start_ns = time.perf_counter_ns()
        self.start_epoch_ns = time.time_ns()

    def hook(self, record: OpRecord) -> None:
        # NOTE: list.append is atomic under the GIL; the thread name is looked up once per
        # thread, on that thread (the hook runs where the op ran)
        self.records.append(record)
        if record.thread not in self.thread_names:
            with self.lock:
                self.thread_names[record.thread] = threading.current_thread().name

    def reset(self) -> None:
        with self.lock:
            self.records = []
            self.start_ns = time.perf_counter_ns()
            self.start_epoch_ns = time.time_ns()


_RECORDING: _Recording | None = None


def start_profiler(state: str, tracer_option: str = "Default") -> None:
    """Start timing every op that runs (``state``: "CPU", "GPU" or "All"; they time the same
    ops here: a GPU op's time is its launch, add a device sync to time the kernel).
    ``tracer_option``: "Default" times a compiled segment as one event (named with its ops);
    "OpDetail" and "AllOpDetail" run segments op by op so that every op gets its own time."""
    global _RECORDING
    if state not in STATES:
        raise ValueError(f"start_profiler: state must be one of {', '.join(STATES)}, got "
                         f"{state!r}")
    if _RECORDING is not None:
        return  # already on, as Fluid: a second start is ignored
    if tracer_option not in ("Default", "OpDetail", "AllOpDetail"):
        raise ValueError(f"start_profiler: tracer_option must be 'Default', 'OpDetail' or "
                         f"'AllOpDetail', got {tracer_option!r}")
    _RECORDING = _Recording(state)
    set_op_detail(tracer_option != "Default")
    add_op_hook(_RECORDING.hook)


def stop_profiler(sorted_key: str | None = None, profile_path: str = DEFAULT_PROFILE_PATH
                  ) -> None:
    """Stop timing, print the per-op table and write the Chrome trace to ``profile_path``."""
    global _RECORDING
    _check_sorted_key(sorted_key)
    recording = _RECORDING
    if recording is None:
        return
    remove_op_hook(recording.hook)
    set_op_detail(False)
    _RECORDING = None
    print(format_table(op_table(recording.records, sorted_key), recording.state, sorted_key))
    if profile_path:
        write_trace(recording, profile_path)


def reset_profiler() -> None:
    """Forget the ops timed so far (recording goes on)."""
    if _RECORDING is not None:
        _RECORDING.reset()


@contextlib.contextmanager
def profiler(state: str, sorted_key: str | None = None,
             profile_path: str = DEFAULT_PROFILE_PATH, tracer_option: str = "Default"
             ) -> Iterator[None]:
    """Profile the ops run inside the ``with`` block; see the module docstring.

    Example::

        with fluid.profiler.profiler("CPU", "total", "/tmp/profile.json"):
            exe.run(main, feed=feed, fetch_list=[loss])
    """
    _check_sorted_key(sorted_key)
    start_profiler(state, tracer_option)
    try:
        yield
    finally:
        stop_profiler(sorted_key, profile_path)


@contextlib.contextmanager
def cuda_profiler(output_file: str, output_mode: str | None = None,
                  config: list[str] | None = None) -> Iterator[None]:
    """Run the block under the CUDA profiler (nvprof / Nsight: start/stop markers).

    On a machine where torch sees no CUDA device this prints that nothing is profiled and
    runs the block as is; use ``profiler("CPU")`` for the op table and timeline.
    """
    import torch

    if output_mode not in (None, "kvp", "csv"):
        raise ValueError(f"cuda_profiler: output_mode must be 'kvp' or 'csv', got "
                         f"{output_mode!r}")
    if not torch.cuda.is_available():
        print("cuda_profiler: torch sees no CUDA device on this machine, so there is nothing "
              f"for the CUDA profiler to record and {output_file!r} is not written; use "
              "fluid.profiler.profiler('CPU') for the per-op table and timeline",
              file=sys.stderr)
        yield
        return
    # NOTE: the output file and mode belong to the external profiler's command line (nvprof
    # -o / nsys -o); the process can only mark the region to capture.
    with torch.cuda.profiler.profile():
        yield
    torch.cuda.synchronize()


# ---------------------------------------------------------------------- the table


def op_table(records: list[OpRecord], sorted_key: str | None = None) -> list[OpStat]:
    """Aggregate op records by op type into table rows, sorted by ``sorted_key``."""
    _check_sorted_key(sorted_key)
    acc: dict[str, list[int]] = {}  # name -> [calls, total, min, max] in ns
    for r in records:
        d = r.end_ns - r.start_ns
        a = acc.get(r.op_type)
        if a is None:
            acc[r.op_type] = [1, d, d, d]
        else:
            a[0] += 1
            a[1] += d
            a[2] = min(a[2], d)
            a[3] = max(a[3], d)
    grand = sum(a[1] for a in acc.values()) or 1
    rows = [OpStat(name, a[0], a[1] / 1e6, a[2] / 1e6, a[3] / 1e6, a[1] / a[0] / 1e6,
                   a[1] / grand) for name, a in acc.items()]
    if sorted_key == "min":
        rows.sort(key=lambda s: s.min)
    elif sorted_key is not None:
        rows.sort(key=lambda s: getattr(s, sorted_key), reverse=True)
    return rows


def format_table(rows: list[OpStat], state: str = "CPU", sorted_key: str | None = None) -> str:
    """The table as Fluid printed it (times in ms)."""
    order = {None: "first run", "min": "min time, ascending"}.get(
        sorted_key, f"{sorted_key}, descending")
    width = max([len("Event")] + [len(r.name) for r in rows]) + 2
    lines = ["", "-" * 25 + ">     Profiling Report     <" + "-" * 25, "",
             f"Place: {state}", "Time unit: ms", f"Sorted by {order}", "",
             f"{'Event':<{width}}{'Calls':>8}{'Total':>12}{'Min.':>12}{'Max.':>12}"
             f"{'Ave.':>12}{'Ratio.':>10}"]
    for r in rows:
        lines.append(f"{r.name:<{width}}{r.calls:>8}{r.total:>12.4f}{r.min:>12.4f}"
                     f"{r.max:>12.4f}{r.ave:>12.4f}{r.ratio:>10.4f}")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------- the trace


def _rank() -> int:
    raw = os.environ.get("PADDLE_TRAINER_ID", "0")
    return int(raw) if raw.isdigit() else 0


def track_id(rank: int, device: int) -> int:
    """The trace ``pid`` of a device's track: 1000 per rank, device + 1 within (0: the
    collectives over all devices)."""
    return rank * 1000 + device + 1


def chrome_trace(records: list[OpRecord], start_ns: int, start_epoch_ns: int,
                 thread_names: dict[int, str] | None = None, rank: int | None = None
                 ) -> dict[str, Any]:
    """The Chrome trace (``traceEvents`` JSON object) of ``records``: one complete ("X")
    event per op run, on the track of its device and the lane of its thread."""
    rank = _rank() if rank is None else rank
    thread_names = thread_names or {}
    lanes: dict[int, int] = {}  # thread ident -> small lane number, in first-seen order
    events: list[dict[str, Any]] = []
    tracks: set[int] = set()
    lanes_used: set[tuple[int, int]] = set()
    for r in records:
        lane = lanes.setdefault(r.thread, len(lanes))
        pid = track_id(rank, r.device)
        tracks.add(r.device)
        lanes_used.add((pid, lane))
        comm = is_comm_op(r.op_type)
        events.append({
            "name": r.op_type, "cat": "communication" if comm else "compute", "ph": "X",
            "pid": pid, "tid": lane, "ts": (r.start_ns - start_ns) / 1e3,
            "dur": (r.end_ns - r.start_ns) / 1e3,
            "args": {"op_index": r.op_index, "device": r.device, "rank": rank}})
    meta: list[dict[str, Any]] = []
    for device in sorted(tracks):
        pid = track_id(rank, device)
        label = (f"rank {rank} collectives (all devices)" if device < 0
                 else f"rank {rank} device {device}")
        meta.append({"name": "process_name", "ph": "M", "pid": pid, "args": {"name": label}})
        meta.append({"name": "process_sort_index", "ph": "M", "pid": pid,
                     "args": {"sort_index": pid}})
    names = {lane: thread_names.get(ident, f"thread {lane}") for ident, lane in lanes.items()}
    for pid, lane in sorted(lanes_used):
        meta.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": lane,
                     "args": {"name": names[lane]}})
    return {"traceEvents": meta + events, "displayTimeUnit": "ms",
            "otherData": {"rank": rank, "start_epoch_ns": start_epoch_ns,
                          "clock": "perf_counter_ns since start_epoch_ns",
                          "producer": "parafluid.profiler"}}


def write_trace(recording: _Recording, path: str) -> None:
    rank = _rank()
    trace = chrome_trace(recording.records, recording.start_ns, recording.start_epoch_ns,
                         recording.thread_names, rank)
    path = path.replace("{rank}", str(rank))  # one file per process of a multi-process job
    parent = os.path.dirname(os.path.abspath(path))
    os.makedirs(parent, exist_ok=True)
    with open(path, "w") as f:
        json.dump(trace, f)


def _check_sorted_key(sorted_key: str | None) -> None:
    if sorted_key is not None and sorted_key not in SORT_KEYS:
        raise ValueError(f"profiler: sorted_key must be None or one of {', '.join(SORT_KEYS)}, "
                         f"got {sorted_key!r}")
