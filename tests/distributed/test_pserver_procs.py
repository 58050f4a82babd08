"""The pserver loop across processes (parafluid.testing.ps_toy): exits, faults, start order."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from parafluid.testing.contention import scaled
from parafluid.testing.ps_toy import expected_w
from parafluid.testing.warm_popen import WarmPopen

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Procs:
    """Children of one test, killed by pid in ``close()`` whatever happened."""

    def __init__(self):
        self.procs = []
        self.env = dict(os.environ, PYTHONPATH=str(ROOT))
        self.env.pop("PARAFLUID_RPC_SECRET", None)

    def start(self, *args):
        p = WarmPopen([sys.executable, "-m", "parafluid.testing.ps_toy", *map(str, args)],
                             env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, cwd=ROOT)
        self.procs.append(p)
        return p

    def close(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
            p.wait(10)


def _finish(p, timeout=30):
    out, err = p.communicate(timeout=timeout)
    last = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    return p.returncode, (last[-1] if last else None), err


@pytest.mark.timeout(90)
def test_uneven_trainers_started_before_the_pserver_all_exit_0():
    ep = f"127.0.0.1:{_free_port()}"
    procs = Procs()
    try:
        t0 = procs.start("trainer", "--endpoint", ep, "--trainer-id", 0, "--steps", 6,
                         "--deadline", 30)
        t1 = procs.start("trainer", "--endpoint", ep, "--trainer-id", 1, "--steps", 3,
                         "--deadline", 30)
        time.sleep(1.0)  # the trainers are up (or starting) before the pserver
        ps = procs.start("pserver", "--endpoint", ep, "--trainers", 2, "--deadline", 30)
        results = {name: _finish(p) for name, p in (("t0", t0), ("t1", t1), ("ps", ps))}
        for name, (rc, _, err) in results.items():
            assert rc == 0, f"{name} exited {rc}: {err}"
        w = expected_w([6, 3])
        assert results["ps"][1]["steps"] == 6
        assert results["ps"][1]["w"] == pytest.approx([w] * 4)
        assert results["t0"][1]["w"] == pytest.approx([w] * 4)
        assert results["t1"][1]["w"] == pytest.approx([expected_w([3, 3])] * 4)
    finally:
        procs.close()


@pytest.mark.timeout(90)
def test_a_dead_trainer_is_named_and_every_process_ends():
    ep = f"127.0.0.1:{_free_port()}"
    procs = Procs()
    try:
        ps = procs.start("pserver", "--endpoint", ep, "--trainers", 2, "--deadline", 3)
        t0 = procs.start("trainer", "--endpoint", ep, "--trainer-id", 0, "--steps", 5,
                         "--deadline", 10)
        t1 = procs.start("trainer", "--endpoint", ep, "--trainer-id", 1, "--steps", 5,
                         "--deadline", 10, "--vanish-after", 2)
        rc, _, err = _finish(ps)
        assert rc == 1 and "trainer(s) [1]" in err and "send barrier" in err, err
        assert _finish(t1)[0] == 0  # it left without a word
        rc0, _, err0 = _finish(t0)
        assert rc0 == 1 and f"pserver {ep}" in err0 and "trainer(s) [1]" in err0, err0
    finally:
        procs.close()


@pytest.mark.timeout(90)
def test_a_killed_pserver_is_named_by_every_trainer_within_the_deadline():
    ep = f"127.0.0.1:{_free_port()}"
    procs = Procs()
    try:
        ps = procs.start("pserver", "--endpoint", ep, "--trainers", 2, "--deadline", 30)
        assert "listening" in ps.stdout.readline()
        ts = [procs.start("trainer", "--endpoint", ep, "--trainer-id", t, "--steps", 1000,
                          "--deadline", 2, "--step-sleep", 0.05) for t in (0, 1)]
        line = ts[0].stdout.readline()  # one step done: everyone is connected
        assert '"step": 0' in line, line
        ps.kill()
        t_kill = time.monotonic()
        for p in ts:
            rc, _, err = _finish(p)
            assert rc == 1 and f"pserver {ep}" in err and "no reply within 2.0 s" in err, err
        assert time.monotonic() - t_kill < 2 + scaled(8)
    finally:
        procs.close()


@pytest.mark.timeout(60)
def test_sigterm_ends_a_pserver_cleanly():
    ep = f"127.0.0.1:{_free_port()}"
    procs = Procs()
    try:
        ps = procs.start("pserver", "--endpoint", ep, "--trainers", 2, "--deadline", 30)
        assert "listening" in ps.stdout.readline()
        ps.send_signal(signal.SIGTERM)
        rc, last, err = _finish(ps, timeout=10)
        assert rc == 0, err
        assert last["stopped_by"] == "SIGTERM" and last["steps"] == 0
    finally:
        procs.close()
