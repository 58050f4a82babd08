"""The launcher: environment, prefixed output, failure propagation, Ctrl-C."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time

import pytest
from dist_helpers import HERE, child_env, free_ports, reap, start

pytestmark = pytest.mark.slow

SCRIPT = os.path.join(HERE, "launch_script.py")
PS_SCRIPT = os.path.join(HERE, "ps_launch_script.py")


def launcher(*args: str, module: str = "parafluid.distributed.launch") -> subprocess.Popen:
    env = child_env(FLAGS_rpc_deadline="20000", CPU_NUM="1")
    env["PYTHONPATH"] += os.pathsep + HERE  # for -m launch_script
    return start(["-m", *module.split(), *args], env, cwd=os.getcwd(),
                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                 start_new_session=True)


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # a zombie of an exited child counts as gone
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1].startswith("Z")
    except (FileNotFoundError, ProcessLookupError):  # reaped since the kill(0)
        return True


@pytest.mark.timeout(60)
def test_two_trainers_prefixed_output_and_environment():
    # through the CLI subcommand, with the script as a module: parafluid launch ... -m ...
    p = launcher("--nproc_per_node", "2", "-m", "launch_script", "ok", module="parafluid launch")
    try:
        out, err = p.communicate(timeout=45)
    finally:
        reap([p])
    assert p.returncode == 0, (out, err)
    lines = out.splitlines()
    for rank in (0, 1):
        assert f"[rank {rank}] sum [3.0, 3.0]" in lines, out
        assert any(re.fullmatch(rf"\[rank {rank}\] pid \d+ trainer {rank} of 2 at "
                                r"127\.0\.0\.1:\d+", ln) for ln in lines), out
    assert all(ln.startswith(("[rank 0] ", "[rank 1] ")) for ln in lines), out


@pytest.mark.timeout(60)
def test_a_failing_rank_stops_the_job_and_is_named(tmp_path):
    p = launcher("--nproc_per_node", "2", "--grace_period", "2", "--log_dir", str(tmp_path),
                 SCRIPT, "fail")
    try:
        out, err = p.communicate(timeout=45)
    finally:
        reap([p])
    assert p.returncode == 1, (out, err)
    assert "launch: rank 1 (pid" in err and "exited with status 1" in err, err
    assert "last error: ValueError: boom on rank 1" in err, err
    assert "launch_script.py" in err.split("last error: ValueError: boom on rank 1", 1)[1], err
    assert "stopped rank 0" in err, err
    log0 = (tmp_path / "workerlog.0").read_text()
    pid0 = int(re.search(r"pid (\d+)", log0).group(1))
    assert gone(pid0)
    assert "Traceback" in (tmp_path / "workerlog.1").read_text()


@pytest.mark.timeout(60)
def test_sigint_stops_every_trainer():
    p = launcher("--nproc_per_node", "2", SCRIPT, "sleep")
    pids: list[int] = []
    try:
        ready = 0
        while ready < 2:
            line = p.stdout.readline()
            assert line, "the launcher ended early: " + p.stderr.read()
            m = re.search(r"pid (\d+)", line)
            if m:
                pids.append(int(m.group(1)))
            ready += line.rstrip().endswith("] ready")
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=30)
    finally:
        reap([p])
    assert p.returncode == 128 + signal.SIGINT, err
    assert "SIGINT received: stopped rank 0, rank 1" in err, err
    deadline = time.monotonic() + 5
    while not all(gone(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(pids) == 2 and all(gone(pid) for pid in pids)


@pytest.mark.timeout(60)
def test_torchrun_style_environment_set_by_hand():
    master_port = free_ports(1)[0] - 1  # trainer 0 hosts the rendezvous at MASTER_PORT + 1
    procs = []
    try:
        for rank in (0, 1):
            env = child_env(RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank),
                            MASTER_ADDR="127.0.0.1", MASTER_PORT=str(master_port),
                            FLAGS_rpc_deadline="20000", CPU_NUM="1")
            procs.append(start([SCRIPT, "ok"], env, stdout=subprocess.PIPE, text=True))
        outs = [p.communicate(timeout=45)[0] for p in procs]
    finally:
        reap(procs)
    for rank, out in enumerate(outs):
        assert procs[rank].returncode == 0, out
        assert f"trainer {rank} of 2 at 127.0.0.1:{master_port + 1 + rank}" in out, out
        assert "sum [3.0, 3.0]" in out, out


def test_plan_sets_fluid_environment_for_several_machines():
    from parafluid.distributed.launch import build_parser, plan

    args = build_parser().parse_args(["--cluster_node_ips", "10.0.0.1,10.0.0.2", "--node_ip",
                                      "10.0.0.2", "--nproc_per_node", "2", "--selected_gpus",
                                      "0,1", "train.py", "--lr", "0.1"])
    procs = plan(args)
    assert [p.rank for p in procs] == [2, 3]
    eps = "10.0.0.1:6170,10.0.0.1:6171,10.0.0.2:6170,10.0.0.2:6171"
    assert procs[1].env == {"PADDLE_TRAINER_ID": "3", "PADDLE_TRAINERS_NUM": "4",
                            "PADDLE_CURRENT_ENDPOINT": "10.0.0.2:6171",
                            "PADDLE_TRAINER_ENDPOINTS": eps, "PADDLE_TRAINING_ROLE": "TRAINER",
                            "PYTHONUNBUFFERED": "1", "FLAGS_selected_gpus": "1"}
    assert procs[0].cmd[-3:] == ["train.py", "--lr", "0.1"]
    with pytest.raises(ValueError, match="--node_ip 10.0.0.3 is not one of"):
        plan(build_parser().parse_args(["--cluster_node_ips", "10.0.0.1", "--node_ip",
                                        "10.0.0.3", "x.py"]))


def test_cli_launch_subcommand_parses_the_same_options():
    from parafluid.cli import build_parser

    args = build_parser().parse_args(["launch", "--nproc_per_node", "3", "-m", "pkg.train",
                                      "--epochs", "1"])
    assert (args.nproc_per_node, args.module, args.training_script) == (3, True, "pkg.train")
    assert args.training_script_args == ["--epochs", "1"]


def test_every_role_of_a_job_gets_the_same_generated_secret(monkeypatch):
    from parafluid.distributed.launch import build_parser, plan

    monkeypatch.delenv("PARAFLUID_RPC_SECRET", raising=False)
    ps_args = ["--server_num", "2", "--worker_num", "2", "train.py"]
    for argv in (ps_args, ["--nproc_per_node", "2", "--selected_gpus", "0,1", "train.py"]):
        procs = plan(build_parser().parse_args(argv))
        secrets = {p.env["PARAFLUID_RPC_SECRET"] for p in procs}
        assert len(secrets) == 1 and re.fullmatch(r"[0-9a-f]{64}", secrets.pop())
    # one per job: another job gets another
    first, again = (plan(build_parser().parse_args(ps_args))[0].env["PARAFLUID_RPC_SECRET"]
                    for _ in range(2))
    assert first != again
    # the launcher's own is handed on (several machines must share one)
    monkeypatch.setenv("PARAFLUID_RPC_SECRET", "shared")
    assert {p.env["PARAFLUID_RPC_SECRET"] for p in plan(build_parser().parse_args(ps_args))} \
        == {"shared"}
    monkeypatch.delenv("PARAFLUID_RPC_SECRET")
    # several machines without one: none can be made up here, and the launcher says so
    args = build_parser().parse_args(["--servers", "10.0.0.1:6174,10.0.0.2:6174", "--workers",
                                      "10.0.0.1:6170,10.0.0.2:6170", "--node_ip", "10.0.0.1",
                                      "train.py"])
    assert all("PARAFLUID_RPC_SECRET" not in p.env for p in plan(args))


@pytest.mark.timeout(120)
def test_a_failing_trainer_under_the_launcher_leaves_every_pservers_emergency_checkpoint(
        tmp_path):
    """The launcher stops the pservers (SIGTERM) as soon as a trainer fails, before they
    could notice its closed connection themselves: each still saves its state of its
    current step into <checkpoint root>/__emergency__ before it exits."""
    root = tmp_path / "root"
    root.mkdir()
    env = child_env(FLAGS_rpc_deadline="20000", CPU_NUM="1",
                    PARAFLUID_CHECKPOINT_ROOT=str(root))
    p = start(["-m", "parafluid.distributed.launch", "--server_num", "2", "--worker_num", "2",
               "--grace_period", "10", "--log_dir", str(tmp_path / "logs"), PS_SCRIPT, "3"],
              env, cwd=os.getcwd(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
              start_new_session=True)
    try:
        out, err = p.communicate(timeout=90)
    finally:
        reap([p])
    assert p.returncode == 1 and "cannot be read" in err, (out, err)
    logs = [f.read_text() for f in sorted((tmp_path / "logs").iterdir())]
    for text in logs:
        assert gone(int(re.search(r"pid (\d+)", text).group(1))), text
    jobs = list((root / "__emergency__").iterdir()) if (root / "__emergency__").exists() else []
    # one folder of this job (named by the launcher), its pservers' states in its step folder
    assert len(jobs) == 1 and jobs[0].name.startswith("job-"), (jobs, err, logs)
    emergency = jobs[0]
    saved = sorted(d.name for step in emergency.iterdir() for d in step.iterdir())
    assert saved == ["pserver_0", "pserver_1"], (saved, err, logs)
    for step in emergency.iterdir():
        for d in step.iterdir():
            assert (d / "__checkpoint__.json").exists(), list(d.iterdir())


def test_the_last_error_of_a_rank_is_its_exception_with_its_traceback():
    from collections import deque
    from types import SimpleNamespace

    from parafluid.distributed.launch import _last_error

    tail = deque(["step 1", "Traceback (most recent call last):",
                  '  File "train.py", line 9, in <module>', "    main()",
                  '  File "train.py", line 5, in main', '    raise ValueError("bad batch")',
                  "ValueError: bad batch", "closing the communicator", "bye"])
    err = _last_error(SimpleNamespace(tail=tail))
    # not its last line ("bye"): the exception, then the traceback it ended
    assert err.splitlines()[0] == "ValueError: bad batch", err
    assert '      File "train.py", line 5, in main' in err.splitlines(), err
    assert _last_error(SimpleNamespace(tail=deque(["a", "RuntimeError: x", "b"]))) == \
        "RuntimeError: x"
    assert _last_error(SimpleNamespace(tail=deque(["only this"]))) == "only this"
