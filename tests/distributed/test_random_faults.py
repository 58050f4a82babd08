"""Randomized faults in the collective (nccl2) and model-parallel (node split) modes.

Each run starts a 2-process job and, at a random step, kills one process (SIGKILL), stops
it (SIGSTOP) or makes its script end early (a normal exit in the middle of training). The
other process must exit non-zero within the bound, naming the culprit (its trainer or
worker id and endpoint); nothing is left running. (The pserver mode's randomized test,
with restarts from checkpoints, is in test_pserver_faults.py.)

2 runs per mode; PARAFLUID_FAULT_RUNS=20 asks for more (PARAFLUID_FAULT_SEED picks the draw).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
from dist_helpers import HERE, ROOT, child_env, endpoints, load_json, reap

from parafluid.testing.contention import scaled
from parafluid.testing.warm_popen import WarmPopen

pytestmark = pytest.mark.slow

D_MS = 4000
BOUND_S = 15  # after the fault: the peer finds a dead, stopped or departed peer in seconds


def _draws():
    runs = int(os.environ.get("PARAFLUID_FAULT_RUNS", "2"))
    seed = int(os.environ.get("PARAFLUID_FAULT_SEED", str(random.randrange(1 << 30))))
    rng = random.Random(seed)
    print(f"fault draws: seed {seed} (PARAFLUID_FAULT_SEED={seed} repeats them)", flush=True)
    return seed, [(rng.randrange(2), rng.choice(["kill", "stop", "exit"]), rng.randint(1, 6))
                  for _ in range(runs)]


def _watch_steps(proc, reached):
    """Record each JSON step line of ``proc`` into ``reached`` (a list), from a thread."""
    def read():
        for line in proc.stdout:
            if line.startswith("{"):
                reached.append(json.loads(line).get("step", -1))
    threading.Thread(target=read, daemon=True).start()


def _wait(reached, step, proc, timeout=90):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if reached and reached[-1] >= step:
            return
        if proc.poll() is not None:
            raise AssertionError(f"exited ({proc.returncode}) before step {step}")
        time.sleep(0.02)
    raise AssertionError(f"no step {step} within {timeout} s")


def _fault(procs, who, how, at):
    """Make ``procs[who]`` fail as drawn (``exit``: its script ends by itself; ``kill`` or
    ``stop``: a signal once the other reached step ``at``), wait for the other to exit;
    returns the other and the seconds from the fault until it exited."""
    other = procs[1 - who]
    reached: list[int] = []
    _watch_steps(other, reached)
    if how == "exit":
        procs[who].wait(90)
    else:
        _wait(reached, at, other)
        procs[who].send_signal(signal.SIGKILL if how == "kill" else signal.SIGSTOP)
    faulted = time.monotonic()
    other.wait(BOUND_S + 30)
    return other, time.monotonic() - faulted


def _stop_all(procs):
    for p in procs:
        if p.poll() is None:
            try:
                p.send_signal(signal.SIGCONT)
            except ProcessLookupError:
                pass
    reap(procs)


@pytest.mark.timeout(3600)
def test_collective_random_faults_name_the_culprit(tmp_path):
    seed, draws = _draws()
    for i, (who, how, at) in enumerate(draws):
        what = f"collective run {i} (seed {seed}): trainer {who} {how} at step {at}"
        out = tmp_path / f"run{i}"
        out.mkdir()
        eps = endpoints(2)
        env = child_env(FLAGS_rpc_deadline=str(D_MS), CPU_NUM="1")
        if how == "exit":
            env.update(EXIT_AT=str(at), EXIT_WHO=str(who))
        worker = os.path.join(HERE, "fault_worker.py")
        procs = [WarmPopen([sys.executable, worker, "random", eps, str(t), str(out)],
                                  env=env, cwd=ROOT, stdout=subprocess.PIPE, text=True)
                 for t in (0, 1)]
        try:
            other, took = _fault(procs, who, how, at)
        finally:
            _stop_all(procs)
        status = load_json(os.path.join(out, f"status_t{1 - who}.json"))
        ep = eps.split(",")[who]
        assert other.returncode == 0 and "error" in status, (what, status)
        assert f"trainer {who} ({ep})" in status["error"], (what, status["error"])
        assert took < D_MS / 1000 + scaled(BOUND_S - D_MS / 1000), (what, took, status["error"])
        print(f"{what}: ok in {took:.1f} s", flush=True)


@pytest.mark.timeout(3600)
def test_model_parallel_random_faults_name_the_culprit():
    seed, draws = _draws()
    for i, (who, how, at) in enumerate(draws):
        what = f"node split run {i} (seed {seed}): worker {who} {how} at step {at}"
        eps = endpoints(2)
        # NOTE: a long deadline for the start, the short one once both workers are up
        env = child_env(FLAGS_rpc_deadline="30000")
        procs = []
        for t in (0, 1):
            extra = ["--exit-at-step", str(at)] if how == "exit" and t == who else []
            procs.append(WarmPopen(
                [sys.executable, "-m", "parafluid.testing.node_job", "worker", "--trainers",
                 eps, "--trainer-id", str(t), "--steps", "40", "--progress", "--step-delay",
                 "0.1", "--train-deadline-ms", str(D_MS), *extra],
                env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        try:
            other, took = _fault(procs, who, how, at)
            err = other.stderr.read()
        finally:
            _stop_all(procs)
        ep = eps.split(",")[who]
        assert other.returncode not in (0, None), (what, err[-2000:])
        assert f"worker {who} at {ep}" in err, (what, err[-2000:])
        assert took < D_MS / 1000 + scaled(BOUND_S - D_MS / 1000), (what, took, err[-2000:])
        print(f"{what}: ok in {took:.1f} s", flush=True)


def _imperative_worker():
    """tests/dygraph/imperative_check_worker.py, imported (its one-process run is the
    oracle) and its path."""
    here = os.path.join(ROOT, "tests", "dygraph")
    if here not in sys.path:
        sys.path.insert(0, here)
    import imperative_check_worker

    return imperative_check_worker, os.path.join(here, "imperative_check_worker.py")


@pytest.mark.timeout(3600)
def test_imperative_random_faults_name_the_culprit_and_keep_what_was_trained(tmp_path):
    worker, path = _imperative_worker()
    seed, draws = _draws()
    for i, (who, how, at) in enumerate(draws):
        what = f"imperative run {i} (seed {seed}): trainer {who} {how} at step {at}"
        out = tmp_path / f"run{i}"
        out.mkdir()
        eps = endpoints(2)
        procs = []
        for t in (0, 1):
            env = child_env(FLAGS_rpc_deadline=str(D_MS), CPU_NUM="1", PADDLE_TRAINER_ID=str(t),
                            PADDLE_TRAINERS_NUM="2", PADDLE_TRAINER_ENDPOINTS=eps,
                            PADDLE_CURRENT_ENDPOINT=eps.split(",")[t])
            if how == "exit":
                env.update(EXIT_AT=str(at), EXIT_WHO=str(who))
            procs.append(WarmPopen([sys.executable, path, "random", str(out)], env=env,
                                   cwd=ROOT, stdout=subprocess.PIPE, text=True))
        try:
            other, took = _fault(procs, who, how, at)
            alive = [p.pid for p in procs if p.poll() is None]
        finally:
            _stop_all(procs)
        # only a stopped trainer is still there (the test ends it): nothing else runs
        assert alive == ([procs[who].pid] if how == "stop" else []), (what, alive)
        if how == "exit":
            assert procs[who].returncode == 0, what
        status = load_json(os.path.join(out, f"status_t{1 - who}.json"))
        ep = eps.split(",")[who]
        assert other.returncode == 0 and "error" in status, (what, status)
        assert f"trainer {who} ({ep}" in status["error"], (what, status["error"])
        assert took < D_MS / 1000 + scaled(BOUND_S - D_MS / 1000), (what, took, status["error"])
        # nothing trained is lost: the survivor holds what one process has after the steps
        # it completed (a failed collective leaves the parameters of the step before)
        done = status["steps"]
        assert done >= min(at, 1), (what, done)
        want: dict = {}
        worker.train("ok", want, steps=done)
        for name, value in want["params"].items():
            np.testing.assert_allclose(status["params"][name], value, rtol=1e-5, atol=1e-6,
                                       err_msg=f"{what}: {name} after {done} steps")
        print(f"{what}: ok in {took:.1f} s, {done} steps kept", flush=True)
