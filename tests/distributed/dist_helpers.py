"""Starting and reaping the child processes of the multi-process tests (127.0.0.1 only)."""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Sequence

import numpy as np

from parafluid.distributed.launch import free_ports
from parafluid.testing.warm_popen import WarmPopen, warm_server_env

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HERE = os.path.dirname(os.path.abspath(__file__))
# NOTE: one a test process (pytest-xdist runs several at once): emergency checkpoints of two
# jobs never land in the same directory
CHECKPOINT_ROOT = os.path.join(tempfile.gettempdir(), "parafluid_test_checkpoints-" +
                               os.environ.get("PYTEST_XDIST_WORKER", "main"))


def endpoints(n: int) -> str:
    """``n`` endpoints on 127.0.0.1 whose ports were found by binding port 0 and that no
    other test process was given in the last minutes.

    A port found by binding port 0 is released before the test's server binds it, and the
    system may hand the same port to another pytest-xdist worker in between (then a trainer
    of one test talks to the pserver of another). So each port is also claimed in a
    directory the test processes share (a file created exclusively); a port claimed by
    another process within ``_CLAIM_S`` seconds is not taken."""
    ports: list[int] = []
    for _ in range(100):  # (each round draws other ports; a claim is rarely refused)
        if len(ports) == n:
            break
        for port in free_ports(n - len(ports)):
            if port not in ports and _claim(port):
                ports.append(port)
    else:
        ports += free_ports(n - len(ports))
    return ",".join(f"127.0.0.1:{p}" for p in ports)


_CLAIMS = os.path.join(tempfile.gettempdir(), "parafluid_test_ports")
_CLAIM_S = 300.0


def _claim(port: int) -> bool:
    """Claim ``port`` for this process; False when another one claimed it recently."""
    os.makedirs(_CLAIMS, exist_ok=True)
    path = os.path.join(_CLAIMS, str(port))
    for _ in range(2):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            try:
                age = time.time() - os.stat(path).st_mtime
                with open(path) as f:
                    owner = f.read().strip()
            except (OSError, ValueError):
                continue
            if owner == str(os.getpid()):
                return True  # ours (an earlier test of this process: its servers are gone)
            if age < _CLAIM_S:
                return False
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)  # an old claim: take it over
            continue
        with os.fdopen(fd, "w") as f:
            f.write(str(os.getpid()))
        _MINE.append(path)
        return True
    return False


_MINE: list[str] = []  # this process's claims, removed when it exits


@atexit.register
def _drop_claims() -> None:
    for path in _MINE:
        with contextlib.suppress(OSError):
            os.unlink(path)


def child_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PADDLE_", "FLAGS_")) and k not in ("RANK", "WORLD_SIZE")}
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    # NOTE: a pserver that fails saves an emergency checkpoint under its checkpoint root
    # (default: the working directory, here the repository)
    env.setdefault("PARAFLUID_CHECKPOINT_ROOT", CHECKPOINT_ROOT)
    # NOTE: a launcher started with this environment forks its processes from this test
    # process's warm server too (docs/testing.md)
    env.update(warm_server_env())
    env.update(extra)
    return env


def start(args: Sequence[str], env: dict[str, str], **kw) -> subprocess.Popen:
    """``python ARGS`` in the repository, forked warm (``-c CODE`` runs CODE from a file)."""
    if args and args[0] == "-c":
        args = [_code_file(args[1]), *args[2:]]
    kw.setdefault("cwd", ROOT)
    return WarmPopen([sys.executable, *args], env=env, **kw)


def run_child(args: Sequence[str], env: dict[str, str], timeout: float,
              **kw) -> subprocess.CompletedProcess:
    """``subprocess.run([python, *ARGS], capture_output=True, text=True)``, forked warm."""
    p = start(args, env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)
    try:
        out, err = p.communicate(timeout=timeout)
    finally:
        reap([p])
    return subprocess.CompletedProcess(p.args, p.returncode, out, err)


_CODE_DIR = tempfile.mkdtemp(prefix="parafluid-test-code-")
atexit.register(shutil.rmtree, _CODE_DIR, True)


def _code_file(code: str) -> str:
    """A script holding ``code`` (``python -c`` starts cold; a script can start warm)."""
    path = os.path.join(_CODE_DIR, f"code_{hashlib.sha256(code.encode()).hexdigest()[:16]}.py")
    if not os.path.exists(path):
        with open(path + ".tmp", "w") as f:
            f.write(code)
        os.replace(path + ".tmp", path)
    return path


def reap(procs: Sequence[subprocess.Popen]) -> None:
    """Kill (by pid) every child still running; call in a ``finally``."""
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL) if _own_group(p) else p.kill()
            except ProcessLookupError:
                pass
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass


def _own_group(p: subprocess.Popen) -> bool:
    try:
        return os.getpgid(p.pid) == p.pid
    except ProcessLookupError:
        return False


def run_workers(scenario: str, ndev: int, out: str, *, seed: int = 0, deadline_s: float = 20,
                trainers: int = 2, timeout: float = 60) -> list[dict]:
    """Run ``collective_worker.py SCENARIO`` as ``trainers`` processes; their JSON statuses."""
    eps = endpoints(trainers)
    env = child_env(TEST_DEADLINE_S=str(deadline_s))
    worker = os.path.join(HERE, "collective_worker.py")
    procs = []
    try:
        for t in range(trainers):
            procs.append(start([worker, scenario, eps, str(t), str(ndev), out, str(seed)], env))
        for p in procs:
            p.wait(timeout=timeout)
    finally:
        reap(procs)
    paths = [os.path.join(out, f"status_t{t}.json") for t in range(trainers)]
    return [load_json(p) if os.path.exists(p) else {} for p in paths]


def load_json(path: str) -> dict:
    with open(path) as f:
        return json.load(f)


def load(out: str, name: str) -> np.ndarray:
    return np.load(os.path.join(out, name + ".npy"), allow_pickle=False)


def report_status(out: str, trainer_id: int, work: Callable[[], None]) -> None:
    """Run a worker's ``work()`` and write ``status_t<trainer_id>.json`` in ``out`` (ok, or
    the error and its traceback) whatever happens; an error is re-raised after."""
    status: dict = {"ok": False}
    try:
        work()
        status["ok"] = True
    except BaseException as e:  # noqa: BLE001 (reported to the test, then re-raised)
        status["error"] = f"{type(e).__name__}: {e}"
        status["traceback"] = traceback.format_exc()
        raise
    finally:
        with open(os.path.join(out, f"status_t{trainer_id}.json"), "w") as f:
            json.dump(status, f)


def run_threads(calls: Sequence[tuple], join_s: float = 60) -> dict[int, dict]:
    """Run each ``(fn, args, kwargs)`` on a thread of its own (pservers and trainers of
    ``parafluid.testing.ps_job``); return the results by ``trainer_id``. Re-raises the first
    error; fails when a thread is still running after ``join_s``."""
    results: dict[int, dict] = {}
    errors: list[BaseException] = []

    def guarded(fn, args, kwargs):
        def run():
            try:
                out = fn(*args, **kwargs)
                if out is not None:
                    results[out["trainer_id"]] = out
            except BaseException as e:  # noqa: BLE001  (reported by the test thread)
                errors.append(e)
        return threading.Thread(target=run, daemon=True)

    threads = [guarded(fn, args, kwargs) for fn, args, kwargs in calls]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=join_s)
    if errors:
        raise errors[0]
    assert not any(th.is_alive() for th in threads), "a pserver or trainer thread hangs"
    return results
