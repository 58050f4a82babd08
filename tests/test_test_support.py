"""The suite's own machinery: children forked from a warm interpreter, and deadlines stretched
by the measured load."""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
import time

import pytest

from parafluid.testing import contention
from parafluid.testing.warm_popen import WarmPopen, warm_eligible, warm_server_env

CHILD = """\
import atexit, os, sys, threading, time
print("argv", sys.argv[1:], "cwd", os.getcwd(), "X", os.environ.get("X"), flush=True)
print("on stderr", file=sys.stderr, flush=True)
what = sys.argv[1]
if what == "sleep":
    time.sleep(60)
elif what == "thread":
    threading.Thread(target=lambda: (time.sleep(0.3), print("thread done", flush=True))).start()
elif what == "raise":
    atexit.register(lambda: print("last", type(sys.last_value).__name__, flush=True))
    raise RuntimeError("boom")
elif what == "torch":
    import torch
    print("sum", float(torch.arange(4.0).sum()), flush=True)
sys.exit(int(sys.argv[2]) if len(sys.argv) > 2 else 0)
"""


@pytest.fixture(scope="module")
def script(tmp_path_factory):
    path = tmp_path_factory.mktemp("warm") / "child.py"
    path.write_text(CHILD)
    return str(path)


def test_a_warm_child_gets_its_argv_env_cwd_streams_and_exit_code(script, tmp_path):
    p = WarmPopen([sys.executable, script, "exit", "3"], env={**os.environ, "X": "1"},
                  cwd=str(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p._warm
    out, err = p.communicate(timeout=60)
    assert out == f"argv ['exit', '3'] cwd {tmp_path} X 1\n" and err == "on stderr\n"
    assert p.returncode == 3


def test_a_warm_child_runs_torch_joins_its_threads_and_reports_uncaught_errors(script):
    outs = {}
    for what in ("torch", "thread", "raise"):
        p = WarmPopen([sys.executable, script, what], stdout=subprocess.PIPE,
                      stderr=subprocess.STDOUT, text=True)
        outs[what] = (p.communicate(timeout=60)[0], p.returncode)
    assert "sum 6.0" in outs["torch"][0] and outs["torch"][1] == 0
    assert outs["thread"][0].endswith("thread done\n") and outs["thread"][1] == 0
    out, rc = outs["raise"]
    # as a fresh interpreter: the traceback, sys.last_value for the atexit functions, code 1
    assert "RuntimeError: boom" in out and "last RuntimeError" in out and rc == 1, out


def test_a_warm_child_is_waited_for_stopped_and_killed_by_pid_and_group(script):
    p = WarmPopen([sys.executable, script, "sleep"], stdout=subprocess.PIPE, text=True,
                  start_new_session=True)
    try:
        assert p.stdout.readline().startswith("argv ['sleep']")
        with pytest.raises(subprocess.TimeoutExpired):
            p.wait(timeout=0.2)
        os.kill(p.pid, signal.SIGSTOP)
        assert p.poll() is None  # stopped, not ended
        assert os.getpgid(p.pid) == p.pid  # setsid: leads its own group
        os.killpg(p.pid, signal.SIGKILL)
        assert p.wait(timeout=30) == -signal.SIGKILL
    finally:
        p.kill()
        p.stdout.close()


def test_other_commands_and_other_start_up_settings_start_cold(script):
    env = dict(os.environ)
    assert warm_eligible([sys.executable, script], {"env": env})
    assert warm_eligible([sys.executable, "-m", "json.tool"], {})
    assert not warm_eligible([sys.executable, "-c", "pass"], {})
    assert not warm_eligible([sys.executable, "-u", script], {})
    assert not warm_eligible(["/bin/true"], {})
    assert not warm_eligible([sys.executable, script], {"shell": True})
    for name, value in [("PYTHONHASHSEED", "7"), ("OMP_NUM_THREADS", "3"),
                        ("PARAFLUID_TUNE_MALLOC", "0"), ("PYTHONPATH", "/elsewhere")]:
        assert not warm_eligible([sys.executable, script], {"env": {**env, name: value}}), name
    # read when a process group is made or a function compiled, not at start (torch.compile
    # sets TORCHINDUCTOR_CACHE_DIR in the test process): a child may differ there, still warm
    for name, value in [("TORCH_NCCL_ASYNC_ERROR_HANDLING", "0"),
                        ("TORCHINDUCTOR_CACHE_DIR", "/tmp/elsewhere")]:
        assert warm_eligible([sys.executable, script], {"env": {**env, name: value}}), name
    p = WarmPopen([sys.executable, "-c", "import sys; sys.exit(5)"])
    assert not p._warm and p.wait(timeout=60) == 5


ASKER = """\
import subprocess, sys, time
from parafluid.distributed.warm_popen import WarmPopen, _Server
p = WarmPopen([sys.executable, sys.argv[1], "sleep"], stdout=subprocess.DEVNULL)
print(p._warm, _Server.get().proc is None, p.pid, flush=True)
time.sleep(60)
"""


def _parent_of(pid):
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().split(") ")[1].split()[1])


@pytest.mark.slow
def test_a_child_given_the_server_forks_from_it_and_what_it_started_dies_with_it(script,
                                                                                  tmp_path):
    asker_py = tmp_path / "asker.py"
    asker_py.write_text(ASKER)
    env = {**os.environ, **warm_server_env()}
    asker = WarmPopen([sys.executable, str(asker_py), script], env=env, stdout=subprocess.PIPE,
                      text=True)
    try:
        warm, shared, pid = asker.stdout.readline().split()
        # forked by this process's server (the asker started none of its own)
        assert warm == "True" and shared == "True"
        assert _parent_of(int(pid)) == _parent_of(asker.pid) != asker.pid
        asker.kill()
        assert asker.wait(timeout=30) == -signal.SIGKILL
        end = time.monotonic() + 30
        while time.monotonic() < end and _alive(int(pid)):
            time.sleep(0.05)
        assert not _alive(int(pid)), "a child outlived the process that asked for it"
    finally:
        asker.kill()
        asker.stdout.close()


def test_a_warm_child_finds_the_modules_of_the_folders_its_pythonpath_adds(tmp_path):
    (tmp_path / "extra_module.py").write_text("import sys\nprint('extra', sys.argv[1:])\n")
    ours = os.environ.get("PYTHONPATH", "")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (root, ours, str(tmp_path))
                                                       if p)}
    p = WarmPopen([sys.executable, "-m", "extra_module", "a"], env=env, stdout=subprocess.PIPE,
                  text=True)
    assert p._warm
    assert p.communicate(timeout=60)[0] == "extra ['a']\n" and p.returncode == 0
    # a folder before the server's own could shadow what it imported: cold
    env["PYTHONPATH"] = os.pathsep.join((str(tmp_path), env["PYTHONPATH"]))
    assert not warm_eligible([sys.executable, "-m", "extra_module"], {"env": env})


def _start_child_then_die(script, queue):
    p = WarmPopen([sys.executable, script, "sleep"], stdout=subprocess.DEVNULL)
    queue.put(p.pid)
    time.sleep(60)


@pytest.mark.slow
def test_warm_children_do_not_outlive_the_process_that_started_them(script):
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    owner = ctx.Process(target=_start_child_then_die, args=(script, queue), daemon=True)
    owner.start()
    try:
        child = queue.get(timeout=120)
    finally:
        owner.kill()
        owner.join(30)
    end = time.monotonic() + 30
    while time.monotonic() < end and _alive(child):
        time.sleep(0.05)
    assert not _alive(child), f"child {child} outlived the process that started it"


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0] != "Z"
    except (FileNotFoundError, ProcessLookupError):  # (reaped between the open and the read)
        return False


def _burn(seconds):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


def test_a_quiet_bound_is_stretched_by_the_measured_load():
    with pytest.raises(ValueError, match="positive"):
        contention.scaled(0)
    base = contention.slowdown()
    assert 1.0 <= base <= contention.MAX_SLOWDOWN
    assert contention.scaled(2) >= 2 and int(contention.scaled_ms(1000)) >= 1000
    burners = [multiprocessing.get_context("fork").Process(target=_burn, args=(3,))
               for _ in range(3 * (os.cpu_count() or 1))]
    for b in burners:
        b.start()
    try:
        time.sleep(0.5)
        busy = contention.slowdown()
    finally:
        for b in burners:
            b.kill()
            b.join()
    assert busy > 1.3, (base, busy)
