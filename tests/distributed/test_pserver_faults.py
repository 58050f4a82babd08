"""Pserver-mode faults across processes (2 pservers x 2 trainers, parafluid.testing.ps_job):
every survivor names the real culprit, a trainer whose script just ends counts as done, a
trainer that fails ends the job at the deadline and the pservers' emergency checkpoint
restarts it where it stopped; and a randomized fault test.

Bounds (D = FLAGS_rpc_deadline): a surviving trainer exits within D plus one ping per
pserver after the fault; a surviving pserver within 2 D plus its pings.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
from dist_helpers import ROOT, child_env, endpoints, reap

from parafluid.testing import ps_job
from parafluid.testing.contention import scaled
from parafluid.testing.warm_popen import WarmPopen

pytestmark = pytest.mark.slow

D_MS = 4000
D = D_MS / 1000
# survivors' bound after the fault, beyond 2 D: pings, the emergency save, the exit of a
# Python process on a loaded 2-core machine
SLACK_S = 10


def _job(role, *args, env):
    cmd = [sys.executable, "-m", "parafluid.testing.ps_job", role, *map(str, args)]
    return WarmPopen(cmd, env=env, cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


class _Lines:
    """A child's stdout JSON lines, read by a thread (the test waits on them)."""

    def __init__(self, proc):
        self.items, self._cv = [], threading.Condition()
        threading.Thread(target=self._read, args=(proc,), daemon=True).start()

    def _read(self, proc):
        for line in proc.stdout:
            if line.startswith("{"):
                with self._cv:
                    self.items.append(json.loads(line))
                    self._cv.notify_all()
        with self._cv:
            self.items.append(None)  # end of output
            self._cv.notify_all()

    def wait(self, pred, timeout):
        end = time.monotonic() + timeout
        with self._cv:
            while True:
                for item in self.items:
                    if item is not None and pred(item):
                        return item
                if None in self.items:
                    return None
                left = end - time.monotonic()
                if left <= 0:
                    return None
                self._cv.wait(left)


def _job_emergency_dir(root):
    """``root/__emergency__/<job>``: the one job's folder of emergency checkpoints."""
    jobs = os.listdir(os.path.join(root, "__emergency__"))
    assert len(jobs) == 1, jobs
    return os.path.join(root, "__emergency__", jobs[0])


def _blamed(err):
    """The endpoints an error names as the likely cause."""
    found = set()
    for m in re.finditer(r"pserver ((?:[\d.]+:\d+(?: \([^)]*\))?(?:, )?)+) of this job does "
                         r"not answer a ping", err):
        found |= set(re.findall(r"[\d.]+:\d+", re.sub(r"\([^)]*\)", "", m.group(1))))
    return found


class Job:
    """A 2 x 2 job whose children are killed by pid in ``close()`` (SIGSTOPped ones too)."""

    def __init__(self, tmp_path, steps, trainer_args=((), ()), step_delay=0.0,
                 checkpoint_every=0, deadline_ms=D_MS, **env):
        self.eps = endpoints(2).split(",")
        self.root = str(tmp_path)
        self.env = child_env(FLAGS_rpc_deadline=str(deadline_ms),
                             PARAFLUID_CHECKPOINT_ROOT=self.root, **env)
        common = ["--pservers", ",".join(self.eps), "--trainers", 2]
        self.servers = [_job("pserver", *common, "--endpoint", ep, env=self.env)
                        for ep in self.eps]
        self.trainers = []
        for t in (0, 1):
            extra = ["--steps", steps, "--progress", "--step-delay", step_delay]
            if t == 0 and checkpoint_every:
                extra += ["--checkpoint-every", checkpoint_every,
                          "--checkpoint-dir", os.path.join(self.root, "ckpt")]
            self.trainers.append(_job("trainer", *common, "--trainer-id", t, *extra,
                                      *trainer_args[t], env=self.env))
        self.lines = [_Lines(p) for p in self.trainers]
        self.stderr: dict[int, str] = {}

    @property
    def procs(self):
        return self.servers + self.trainers

    def wait_step(self, t, step, timeout=90):
        item = self.lines[t].wait(lambda d: d.get("step", -1) >= step, timeout)
        assert item is not None, f"trainer {t} did not reach step {step}: " + \
            self.finish(self.trainers[t], 5)[1]
        return item

    def initial(self):
        return self.lines[0].wait(lambda d: "initial" in d, 60)["initial"]

    def finish(self, proc, timeout):
        """(returncode, stderr, seconds it took) of a child; kills it past ``timeout``."""
        start = time.monotonic()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        took = time.monotonic() - start
        err = proc.stderr.read()
        return proc.returncode, err, took

    def close(self):
        for p in self.procs:
            if p.poll() is None:
                try:
                    p.send_signal(signal.SIGCONT)
                except ProcessLookupError:
                    pass
        reap(self.procs)
        for p in self.procs:
            for f in (p.stdout, p.stderr):
                f.close()


def _fault(proc, how):
    proc.send_signal({"kill": signal.SIGKILL, "stop": signal.SIGSTOP,
                      "crash": signal.SIGSEGV, "exit": signal.SIGTERM}[how])


def _check_pserver_culprit(job, dead, how, faulted_at):
    """Every survivor exits non-zero within the bound, naming pserver ``dead`` alone."""
    dead_ep = job.eps[dead]
    survivors = [p for i, p in enumerate(job.servers) if i != dead] + job.trainers
    for p in survivors:
        rc, err, _ = job.finish(p, 2 * D + SLACK_S + 20)
        took = time.monotonic() - faulted_at
        role = "pserver" if p in job.servers else "trainer"
        assert rc != 0, f"{role} exited 0 after pserver {dead_ep} was {how}: {err[-2000:]}"
        assert _blamed(err) == {dead_ep}, f"{role} must blame {dead_ep} alone: {err[-3000:]}"
        bound = (2 * D if role == "pserver" else D) + scaled(SLACK_S)
        assert took < bound, f"{role} took {took:.1f} s (bound {bound:.0f} s): {err[-2000:]}"


@pytest.mark.timeout(180)
@pytest.mark.parametrize("how", ["kill", "stop", "crash"])
def test_a_pserver_that_dies_hangs_or_crashes_is_named_by_every_survivor(tmp_path, how):
    """Every deadline equal (the usual setting): the healthy pserver gives up first, yet
    no survivor names it; each names the pserver that was killed, stopped or crashed."""
    job = Job(tmp_path, steps=100000)
    try:
        job.wait_step(0, 2)
        _fault(job.servers[1], how)
        _check_pserver_culprit(job, 1, how, time.monotonic())
        # the healthy pserver saved its state before it exited
        assert os.listdir(os.path.join(job.root, "__emergency__"))
    finally:
        job.close()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("how", ["kill", "crash"])
def test_a_trainer_killed_or_crashed_is_named_by_every_survivor_in_seconds(tmp_path, how):
    """FLAGS_rpc_deadline 30 s: trainer 1 SIGKILLed (with the job's secret: PLAIN
    handshakes) or crashing (SIGSEGV, no secret) mid-training; its connections close without
    a completion, so both pservers and trainer 0 exit within 10 s naming trainer 1, and
    both pservers save their emergency checkpoint."""
    env = {"PARAFLUID_RPC_SECRET": "job-secret"} if how == "kill" else {}
    job = Job(tmp_path, steps=100000, step_delay=0.05, deadline_ms=30000, **env)
    try:
        job.wait_step(1, 2)
        _fault(job.trainers[1], how)
        faulted = time.monotonic()
        for p in job.servers + job.trainers[:1]:
            rc, err, _ = job.finish(p, 40)
            took = time.monotonic() - faulted
            role = "pserver" if p in job.servers else "trainer 0"
            assert rc != 0 and re.search(r"trainer\(s\) \[1\] closed the connection without "
                                         r"completing \(trainer 1 from 127\.0\.0\.1:\d+\)",
                                         err), f"{role}: {err[-3000:]}"
            assert not _blamed(err), err[-3000:]
            assert took < min(scaled(10), 28), f"{role} took {took:.1f} s: {err[-2000:]}"
        # NOTE: killed mid-step, trainer 1 may have passed its send barrier with one pserver
        # only: each saves the step it is at
        emergency = _job_emergency_dir(job.root)
        saved = [p for d in os.listdir(emergency) for p in os.listdir(os.path.join(emergency, d))]
        assert sorted(saved) == ["pserver_0", "pserver_1"], saved
    finally:
        job.close()


@pytest.mark.timeout(120)
def test_a_trainer_whose_script_ends_without_close_counts_as_done(tmp_path):
    """Uneven data (the book's fit-a-line stops early, without exe.close()): the other
    trainer goes on alone and the job equals one process on the rows trained."""
    job = Job(tmp_path, steps=6, trainer_args=((), ("--steps", 3, "--no-close")))
    try:
        outs = [job.finish(p, 60) for p in job.procs]
        for rc, err, _ in outs:
            assert rc == 0, err[-3000:]
        result = job.lines[0].wait(lambda d: "final" in d, 5)
        ref = ps_job.reference(result["initial"], (6, 3))
        for name in ps_job.PARAMS:
            np.testing.assert_allclose(result["final"][name], ref["final"][name], atol=1e-5)
    finally:
        job.close()


def _restart_params(eps, load_dirs, steps):
    """The parameters a trainer pulls from pservers restarted from ``load_dirs``."""
    threads = [threading.Thread(target=ps_job.run_pserver,
                                args=(ep, ",".join(eps), 1), kwargs={"load_dir": d})
               for ep, d in zip(eps, load_dirs)]
    for th in threads:
        th.start()
    try:
        out = ps_job.run_trainer(0, ",".join(eps), 1, steps, first_step=steps)
    finally:
        for th in threads:
            th.join(30)
    return out["final"]


@pytest.mark.timeout(180)
def test_a_failing_trainer_ends_the_job_named_and_the_emergency_checkpoint_restarts_it(
        tmp_path, monkeypatch):
    """A trainer that raises (no completion): both pservers stop at their deadline naming
    it, save an emergency checkpoint each, and pservers restarted from those hold the
    parameters one process has after the steps that ran."""
    job = Job(tmp_path, steps=100000, trainer_args=((), ("--raise-at", 3)))
    try:
        initial = job.initial()
        job.wait_step(1, 2)
        start = time.monotonic()
        for p in job.servers + job.trainers[:1]:
            rc, err, _ = job.finish(p, 2 * D + SLACK_S + 20)
            assert rc != 0 and "trainer(s) [1]" in err, err[-3000:]
            assert not _blamed(err), err[-3000:]
        assert time.monotonic() - start < 2 * D + scaled(SLACK_S)
        rc, err, _ = job.finish(job.trainers[1], 5)
        assert rc != 0 and "the data of step 3 cannot be read" in err
    finally:
        job.close()
    emergency = _job_emergency_dir(job.root)
    assert os.listdir(emergency) == ["step_3"], os.listdir(emergency)
    dirs = [os.path.join(emergency, "step_3", f"pserver_{i}") for i in (0, 1)]
    monkeypatch.setenv("FLAGS_rpc_deadline", "30000")
    monkeypatch.setenv("PARAFLUID_CHECKPOINT_ROOT", str(tmp_path))
    got = _restart_params(endpoints(2).split(","), dirs, 3)
    ref = ps_job.reference(initial, (3, 3))
    for name in ps_job.PARAMS:
        np.testing.assert_allclose(got[name], ref["final"][name], atol=1e-5)


def _last_checkpoint(root):
    """(k, folder) of the last committed checkpoint under ``root/ckpt`` (None if none)."""
    base = os.path.join(root, "ckpt")
    done = [int(d[5:]) for d in os.listdir(base) if d.startswith("step_") and
            os.path.exists(os.path.join(base, d, "__checkpoint__.json"))] \
        if os.path.isdir(base) else []
    return (max(done), os.path.join(base, f"step_{max(done)}")) if done else None


def _one_random_fault(tmp_path, rng):
    role = rng.choice(["pserver", "trainer"])
    who = rng.randrange(2)
    how = rng.choice(["kill", "stop", "exit"])
    at = rng.randint(1, 4)
    steps = 8
    trainer_args = [(), ()]
    if role == "trainer" and how == "exit":  # its data ran out: the script just ends
        trainer_args[who] = ("--steps", at, "--no-close")
    job = Job(tmp_path, steps=steps, trainer_args=trainer_args, step_delay=0.2,
              checkpoint_every=2)
    what = f"{role} {who} {how} at step {at}"
    try:
        initial = job.initial()
        if role == "trainer" and how == "exit":
            outs = [job.finish(p, 90) for p in job.procs]
            assert all(rc == 0 for rc, _, _ in outs), (what, [e[-1500:] for _, e, _ in outs])
            result = job.lines[1 - who].wait(lambda d: "final" in d, 5)
            ref = ps_job.reference(initial, [steps if t != who else at for t in (0, 1)])
            for name in ps_job.PARAMS:
                np.testing.assert_allclose(result["final"][name], ref["final"][name],
                                           atol=1e-5, err_msg=what)
            return what
        job.wait_step(0 if who == 1 or role == "pserver" else 1, at)
        if role == "pserver":
            _fault(job.servers[who], how)
            _check_pserver_culprit(job, who, how, time.monotonic())
        else:
            _fault(job.trainers[who], how)
            faulted = time.monotonic()
            for p in job.servers + [job.trainers[1 - who]]:
                rc, err, _ = job.finish(p, 2 * D + SLACK_S + 20)
                assert rc != 0 and f"trainer(s) [{who}]" in err, (what, err[-3000:])
                assert not _blamed(err), (what, err[-3000:])
            assert time.monotonic() - faulted < 2 * D + scaled(SLACK_S), what
    finally:
        job.close()
    last = _last_checkpoint(job.root)
    if last is not None:
        k, folder = last
        got = _restart_params(endpoints(2).split(","), [folder, folder], k)
        ref = ps_job.reference(initial, (k, k))
        for name in ps_job.PARAMS:
            np.testing.assert_allclose(got[name], ref["final"][name], atol=1e-5,
                                       err_msg=f"{what}: restart from step {k}")
    return what


@pytest.mark.timeout(3600)
def test_random_faults_every_survivor_names_the_culprit_and_checkpoints_restart(
        tmp_path, monkeypatch):
    """A pserver or trainer killed (SIGKILL), stopped (SIGSTOP) or exiting early (a
    pserver: SIGTERM; a trainer: its script ends without exe.close()) at a random step of
    a 2 x 2 job with FLAGS_rpc_deadline=4000. Every survivor exits within the module's
    bound naming the culprit (a trainer that just ends: every process exits 0); nothing is
    left running; pservers restarted from trainer 0's last committed checkpoint hold the
    parameters one process had after that many steps.

    2 runs; PARAFLUID_FAULT_RUNS=20 asks for more (PARAFLUID_FAULT_SEED picks the draw).
    """
    runs = int(os.environ.get("PARAFLUID_FAULT_RUNS", "2"))
    seed = int(os.environ.get("PARAFLUID_FAULT_SEED", str(random.randrange(1 << 30))))
    rng = random.Random(seed)
    monkeypatch.setenv("FLAGS_rpc_deadline", "30000")  # the restarts, in this process
    monkeypatch.setenv("PARAFLUID_CHECKPOINT_ROOT", str(tmp_path))
    for i in range(runs):
        what = _one_random_fault(tmp_path / f"run{i}", rng)
        print(f"run {i} (seed {seed}): {what}: ok", flush=True)
