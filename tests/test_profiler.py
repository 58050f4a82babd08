"""fluid.profiler: the per-op table counts the ops run, the Chrome trace has one event per op
run on per-device tracks, communication is marked, and the timeline tool merges traces."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import parafluid as fluid
import parafluid.profiler as profiler
from parafluid.engine.runtime import op_hooks_active
from parafluid.testing.warm_popen import WarmPopen
from parafluid.timeline import main as timeline_main
from parafluid.timeline import merge_traces

pytestmark = pytest.mark.timeout(120)


def _model() -> tuple[fluid.Program, fluid.Program, Any]:
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 3
    with fluid.program_guard(main, startup):
        x = fluid.layers.data(name="x", shape=[4], dtype="float32")
        y = fluid.layers.data(name="y", shape=[1], dtype="float32")
        h = fluid.layers.fc(input=x, size=8, act="relu")
        loss = fluid.layers.mean(fluid.layers.square_error_cost(fluid.layers.fc(h, 1), y))
        fluid.optimizer.SGD(0.1).minimize(loss)
    return main, startup, loss


def _feed() -> dict[str, np.ndarray]:
    rng = np.random.RandomState(0)
    return {"x": rng.rand(8, 4).astype("float32"), "y": rng.rand(8, 1).astype("float32")}


def _events(path: Path) -> tuple[list[dict], list[dict]]:
    trace = json.loads(path.read_text())
    evs = trace["traceEvents"]
    return [e for e in evs if e["ph"] == "X"], [e for e in evs if e["ph"] == "M"]


def test_table_counts_and_trace_events_equal_the_ops_run(tmp_path, capsys) -> None:
    main, startup, loss = _model()
    exe = fluid.Executor()
    exe.run(startup)
    runs = 3
    path = tmp_path / "exe.json"
    with profiler.profiler("CPU", sorted_key="calls", profile_path=str(path)):
        assert op_hooks_active()
        for _ in range(runs):
            exe.run(main, feed=_feed(), fetch_list=[loss])
    assert not op_hooks_active(), "profiling off: no hook left on the hot path"
    want = Counter(op.type for op in main.global_block().ops for _ in range(runs))
    out = capsys.readouterr().out
    rows = {m[0]: int(m[1]) for m in re.findall(r"^(\w+)\s+(\d+)\s+[\d.]+\s+[\d.]+", out,
                                                 re.M)}
    assert rows == dict(want)
    calls = [int(m) for m in re.findall(r"^\w+\s+(\d+)\s+[\d.]", out, re.M)]
    assert calls == sorted(calls, reverse=True), "sorted by calls"
    assert "Profiling Report" in out and "Sorted by calls, descending" in out
    ops, meta = _events(path)
    assert Counter(e["name"] for e in ops) == want  # one event per op run
    assert {e["pid"] for e in ops} == {1}  # the Executor's one device: "rank 0 device 0"
    assert {m["args"]["name"] for m in meta if m["name"] == "process_name"} == {
        "rank 0 device 0"}
    assert all(e["dur"] >= 0 and e["ts"] >= 0 for e in ops)
    index = {e["args"]["op_index"] for e in ops}
    assert index == set(range(len(main.global_block().ops)))


def test_data_parallel_trace_has_a_track_per_device_and_marks_communication(
        tmp_path, monkeypatch) -> None:
    main, startup, loss = _model()
    exe = fluid.Executor()
    exe.run(startup)
    bs = fluid.BuildStrategy()
    compiled = fluid.CompiledProgram(main).with_data_parallel(
        loss_name=loss.name, build_strategy=bs, places=fluid.cpu_places(2))
    exe.run(compiled, feed=_feed(), fetch_list=[loss])  # built before profiling
    path = tmp_path / "pe.json"
    profiler.start_profiler("All")
    exe.run(compiled, feed=_feed(), fetch_list=[loss])
    profiler.stop_profiler("total", str(path))
    ops, meta = _events(path)
    nops = len(main.global_block().ops)
    local = [e for e in ops if e["cat"] == "compute"]
    comm = [e for e in ops if e["cat"] == "communication"]
    assert Counter(e["pid"] for e in local) == {1: nops + 1, 2: nops + 1}  # + the loss scale
    ngrads = sum(1 for p in main.global_block().all_parameters())
    assert [e["name"] for e in comm] == ["c_allreduce_sum"] * ngrads
    assert {e["pid"] for e in comm} == {0}
    names = {m["pid"]: m["args"]["name"] for m in meta if m["name"] == "process_name"}
    assert names == {0: "rank 0 collectives (all devices)", 1: "rank 0 device 0",
                     2: "rank 0 device 1"}
    lanes = {(m["pid"], m["tid"]) for m in meta if m["name"] == "thread_name"}
    assert {(e["pid"], e["tid"]) for e in ops} == lanes  # every lane is named


def test_sort_keys_reset_and_argument_errors(capsys) -> None:
    main, startup, loss = _model()
    exe = fluid.Executor()
    exe.run(startup)
    profiler.start_profiler("CPU")
    exe.run(main, feed=_feed(), fetch_list=[loss])
    profiler.reset_profiler()
    exe.run(main, feed=_feed(), fetch_list=[loss])
    profiler.stop_profiler("min", profile_path="")
    out = capsys.readouterr().out
    rows = re.findall(r"^(\w+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)", out, re.M)
    one_run = Counter(op.type for op in main.global_block().ops)
    assert {r[0]: int(r[1]) for r in rows} == dict(one_run), "reset dropped the first run"
    mins = [float(r[3]) for r in rows]
    assert mins == sorted(mins)
    with pytest.raises(ValueError, match="sorted_key must be None or one of calls, total, max, "
                                         "min, ave, got 'time'"):
        with profiler.profiler("CPU", sorted_key="time"):
            pass
    assert not op_hooks_active()
    with pytest.raises(ValueError, match="state must be one of CPU, GPU, All, got 'TPU'"):
        profiler.start_profiler("TPU")


def test_op_table_arithmetic() -> None:
    from parafluid.engine.runtime import OpRecord

    recs = [OpRecord("mul", 0, 0, 0, 2_000_000), OpRecord("mul", 0, 0, 0, 4_000_000),
            OpRecord("relu", 1, 0, 0, 6_000_000)]
    rows = {r.name: r for r in profiler.op_table(recs, "total")}
    assert rows["mul"] == profiler.OpStat("mul", 2, 6.0, 2.0, 4.0, 3.0, 0.5)
    assert rows["relu"].ratio == 0.5 and rows["relu"].calls == 1
    assert [r.name for r in profiler.op_table(recs, "max")] == ["relu", "mul"]
    assert [r.name for r in profiler.op_table(recs)] == ["mul", "relu"]  # first-run order


def test_cuda_profiler_says_it_does_nothing_on_cpu(capsys) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    ran = []
    with profiler.cuda_profiler("/tmp/cuda_profile.txt", "csv"):
        ran.append(1)
    assert ran == [1]
    assert "torch sees no CUDA device" in capsys.readouterr().err


def _trace(tmp_path: Path, name: str, start_epoch_ns: int, device: int) -> Path:
    from parafluid.engine.runtime import OpRecord

    recs = [OpRecord("mul", 0, device, 1_000, 3_000), OpRecord("send", 1, device, 4_000, 9_000)]
    path = tmp_path / name
    path.write_text(json.dumps(profiler.chrome_trace(recs, 0, start_epoch_ns, rank=0)))
    return path


def test_timeline_merges_two_files_on_one_clock(tmp_path, capsys) -> None:
    a = _trace(tmp_path, "r0.json", 10_000_000, 0)
    b = _trace(tmp_path, "r1.json", 10_500_000, 0)  # started 500 us later
    out = tmp_path / "merged.json"
    code = timeline_main(["--profile_path", f"trainer0={a},trainer1={b}",
                          "--timeline_path", str(out)])
    assert code == 0 and "4 events from 2 file(s)" in capsys.readouterr().out
    merged = json.loads(out.read_text())
    ops = [e for e in merged["traceEvents"] if e["ph"] == "X"]
    assert [(e["pid"], e["ts"], e["args"]["trace"]) for e in ops] == [
        (1, 1.0, "trainer0"), (1, 4.0, "trainer0"),
        (1001, 501.0, "trainer1"), (1001, 504.0, "trainer1")]
    assert [e["cat"] for e in ops] == ["compute", "communication"] * 2
    names = {e["pid"]: e["args"]["name"] for e in merged["traceEvents"]
             if e.get("name") == "process_name"}
    assert names == {1: "trainer0 device 0", 1001: "trainer1 device 0"}


def test_timeline_errors_name_the_file(tmp_path, capsys) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    assert timeline_main(["--profile_path", str(bad)]) == 2
    assert f"{str(bad)!r} has no 'traceEvents' list" in capsys.readouterr().err
    assert timeline_main(["--profile_path", str(tmp_path / "none.json")]) == 2
    assert "does not exist" in capsys.readouterr().err
    with pytest.raises(ValueError, match="no traces to merge"):
        merge_traces([])


def _run_warm(cmd: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    """``subprocess.run(cmd, capture_output=True, text=True)``, forked from a warm
    interpreter (a fresh one would spend seconds importing torch)."""
    p = WarmPopen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = p.communicate(timeout=90)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    return subprocess.CompletedProcess(cmd, p.returncode, out, err)


def test_timeline_runs_as_a_module(tmp_path) -> None:
    a = _trace(tmp_path, "r0.json", 1, 1)
    out = tmp_path / "m.json"
    env = dict(os.environ, PYTHONPATH=str(Path(fluid.__file__).parents[1]))
    proc = _run_warm([sys.executable, "-m", "parafluid.timeline", "--profile_path", str(a),
                      "--timeline_path", str(out)], env)
    assert proc.returncode == 0, proc.stderr
    assert len([e for e in json.loads(out.read_text())["traceEvents"] if e["ph"] == "X"]) == 2


def test_cli_train_profile_writes_a_timeline(tmp_path, capsys) -> None:
    pytest.importorskip("sklearn.datasets")
    from parafluid.cli import main

    path = tmp_path / "train.json"
    code = main(["train", "--epochs", "1", "--hidden", "16", "--seed", "2", "--output",
                 str(tmp_path / "model"), "--profile", str(path)])
    out = capsys.readouterr().out
    assert code == 0 and "Profiling Report" in out and f"timeline written to {path}" in out
    ops, _ = _events(path)
    counts = Counter(e["name"] for e in ops)
    # per training step: 4 parameters (2 fc layers) -> 4 adam ops, 2 mul_grad ops
    assert counts["adam"] > 0 and counts["adam"] == 2 * counts["mul_grad"]


def test_timeline_draws_a_picture(tmp_path) -> None:
    import xml.etree.ElementTree as ET

    a = _trace(tmp_path, "r0.json", 1, 0)
    svg = tmp_path / "t.svg"
    assert timeline_main(["--profile_path", str(a), "--timeline_path", str(tmp_path / "m.json"),
                          "--svg", str(svg)]) == 0
    root = ET.parse(svg).getroot()
    rects = root.findall("{http://www.w3.org/2000/svg}rect")[1:]  # after the background
    assert [r.get("fill") for r in rects] == ["#4e79a7", "#e15759"]  # mul, then send


_RANK_JOB = """
import numpy as np, parafluid as fluid, parafluid.profiler as profiler
x = fluid.layers.data(name="x", shape=[4], dtype="float32")
loss = fluid.layers.mean(fluid.layers.fc(x, 2))
fluid.optimizer.SGD(0.1).minimize(loss)
exe = fluid.Executor()
exe.run(fluid.default_startup_program())
with profiler.profiler("CPU", profile_path={path!r}):
    for _ in range(2):
        exe.run(feed={{"x": np.ones((3, 4), "float32")}}, fetch_list=[loss])
print(len(fluid.default_main_program().global_block().ops))
"""


def test_one_file_per_rank_merged_on_one_clock(tmp_path) -> None:
    """Two real processes (one after the other): after the merge, every op of the second
    lies after every op of the first, which only the wall-clock alignment can give."""
    pattern = str(tmp_path / "profile.rank{rank}.json")
    env = dict(os.environ, PYTHONPATH=str(Path(fluid.__file__).parents[1]))
    nops = []
    job = tmp_path / "rank_job.py"
    job.write_text(_RANK_JOB.format(path=pattern))
    for rank in (0, 1):
        proc = _run_warm([sys.executable, str(job)], dict(env, PADDLE_TRAINER_ID=str(rank)))
        assert proc.returncode == 0, proc.stderr
        nops.append(int(proc.stdout.strip().splitlines()[-1]))
    files = [tmp_path / f"profile.rank{r}.json" for r in (0, 1)]
    assert all(f.exists() for f in files)
    out = tmp_path / "timeline.json"
    assert timeline_main(["--profile_path", ",".join(map(str, files)),
                          "--timeline_path", str(out)]) == 0
    ops = [e for e in json.loads(out.read_text())["traceEvents"] if e["ph"] == "X"]
    first = [e for e in ops if e["args"]["trace"] == "rank 0"]
    second = [e for e in ops if e["args"]["trace"] == "rank 1"]
    assert len(first) == len(second) == 2 * nops[0]
    assert {e["pid"] for e in first} == {1} and {e["pid"] for e in second} == {1001}
    assert {e["args"]["rank"] for e in second} == {1}
    assert min(e["ts"] for e in second) > max(e["ts"] + e["dur"] for e in first)
