"""Randomized faults in the collective (nccl2), imperative (DataParallel), model-parallel
(node split) modes, and in a fleet job under the launcher.

Each run starts a small job and, at a random step, kills one process (SIGKILL), stops it
(SIGSTOP) or makes it end early (a normal exit in the middle of training; a fleet pserver:
SIGTERM). The others must exit within the bound, naming the culprit (its trainer or worker
id and endpoint); nothing is left running; in the imperative mode the survivor keeps the
parameters of every step it completed, in the fleet job every surviving pserver's
emergency checkpoint holds every step the trainers completed. (The pserver mode's
randomized test without the launcher, with restarts from checkpoints, is in
test_pserver_faults.py.)

2 runs per mode; PARAFLUID_FAULT_RUNS=20 asks for more (PARAFLUID_FAULT_SEED picks the draw;
the seed is printed first).
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
SLACK_S = 10  # the pserver mode: pings, the emergency save, a process exit under load


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


class _Launched:
    """A launcher's job: its roles' JSON lines (``[trainer 1] {...}``) read by a thread."""

    def __init__(self, proc):
        self.proc, self.pids, self.steps, self.lines = proc, {}, {}, []
        self.err: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=lambda: self.err.extend(proc.stderr), daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append(line)
            if "] {" not in line:
                continue
            name, _, raw = line.partition("] ")
            item = json.loads(raw)
            if "pid" in item:
                self.pids[name[1:]] = (item["pid"], item["endpoint"])
            elif "step" in item:
                self.steps[name[1:]] = item["step"]

    def wait(self, pred, what, timeout=90):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if pred(self):
                return
            if self.proc.poll() is not None:
                raise AssertionError(f"the launcher exited ({self.proc.returncode}) before "
                                     f"{what}: {''.join(self.lines[-20:])}{''.join(self.err)}")
            time.sleep(0.02)
        raise AssertionError(f"no {what} within {timeout} s")


def _fleet_loads(script, eps, index, folder):
    """Pserver ``index``'s emergency checkpoint in ``folder`` starts a pserver of the job."""
    import parafluid as fluid
    from parafluid.incubate.fleet.base import role_maker
    from parafluid.incubate.fleet.parameter_server.distribute_transpiler import fleet

    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        script.build(role_maker.UserDefinedRoleMaker(
            current_id=index, role=role_maker.Role.SERVER, worker_num=2,
            server_endpoints=eps))
    with fluid.scope_guard(fluid.Scope()):
        fleet.init_server(model_dir=folder)


@pytest.mark.timeout(3600)
def test_fleet_random_faults_under_the_launcher(tmp_path):
    """A pserver or trainer of a fleet job (2 x 2, under ``parafluid.distributed.launch``)
    killed, stopped or exiting early (a pserver by SIGTERM) at a random step: the launcher
    ends the job within the pserver mode's bound naming the culprit, no role is left
    running, and every surviving pserver's emergency checkpoint holds every step the
    trainers completed and starts a pserver."""
    sys.path.insert(0, HERE)
    import fleet_fault_script as script

    seed, draws = _draws()
    rng = random.Random(seed + 1)
    d = D_MS / 1000
    for i, (who, how, at) in enumerate(draws):
        role = rng.choice(["pserver", "trainer"])
        what = f"fleet run {i} (seed {seed}): {role} {who} {how} at step {at}"
        root = tmp_path / f"run{i}"
        root.mkdir()
        env = child_env(FLAGS_rpc_deadline=str(D_MS), CPU_NUM="1",
                        PARAFLUID_CHECKPOINT_ROOT=str(root))
        if role == "trainer" and how == "exit":
            env.update(EXIT_AT=str(at), EXIT_WHO=str(who))
        proc = WarmPopen(
            [sys.executable, "-m", "parafluid.distributed.launch", "--server_num", "2",
             "--worker_num", "2", "--grace_period", "3",
             os.path.join(HERE, "fleet_fault_script.py")],
            env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            start_new_session=True)
        job = _Launched(proc)
        culprit = f"{role} {who}"
        try:
            job.wait(lambda j: len(j.pids) == 4, "every role's pid")
            pid, ep = job.pids[culprit]
            if not (role == "trainer" and how == "exit"):
                watch = "trainer 0" if role == "pserver" or who == 1 else "trainer 1"
                job.wait(lambda j, w=watch, a=at: j.steps.get(w, -1) >= a,
                         f"step {at} of {watch}")
                os.kill(pid, {"kill": signal.SIGKILL, "stop": signal.SIGSTOP,
                              "exit": signal.SIGTERM}[how])
            faulted = time.monotonic()
            proc.wait(2 * d + 30 + scaled(20))
            took = time.monotonic() - faulted
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
            for p, _ in job.pids.values():  # the launcher's roles, by pid
                try:
                    os.kill(p, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        time.sleep(0.5)  # the reader threads see the end of the output
        out = "".join(job.lines) + "".join(job.err)
        left = [p for p, _ in job.pids.values() if _alive(p)]
        assert not left, (what, left, out[-3000:])
        if role == "trainer" and how == "exit":  # its data ran out: the job goes on
            assert proc.returncode == 0, (what, out[-3000:])
            assert job.steps.get(f"trainer {1 - who}") == script.STEPS - 1, (what, job.steps)
            print(f"{what}: ok, the other trainer finished", flush=True)
            continue
        assert proc.returncode != 0, (what, out[-3000:])
        # the launcher names a role that died; every role that failed by itself (its
        # traceback) names the culprit: a pserver by its endpoint, a trainer by its id
        summary = "".join(job.err)
        token = ep if role == "pserver" else f"trainer(s) [{who}]"
        failed = [name for name in job.pids if name != culprit and
                  "Traceback" in _output_of(job, name)]
        assert failed or f"{culprit} (pid {pid}) was killed" in summary, (what, summary)
        for name in failed:
            assert token in _output_of(job, name), (what, name, token, _output_of(job, name))
        assert took < 2 * d + scaled(SLACK_S), (what, took, summary[-3000:])
        done = max(job.steps.values(), default=-1) + 1
        emergency = os.path.join(root, "__emergency__")
        jobs = os.listdir(emergency)
        assert len(jobs) == 1, (what, jobs)
        eps = [job.pids[f"pserver {k}"][1] for k in (0, 1)]
        for k in (0, 1):
            if role == "pserver" and k == who and how != "exit":
                continue  # a pserver killed or stopped saves nothing; one stopped by SIGTERM does
            saved = sorted((int(s[5:]), s) for s in os.listdir(os.path.join(emergency, jobs[0]))
                           if os.path.isdir(os.path.join(emergency, jobs[0], s, f"pserver_{k}")))
            assert saved, (what, k, out[-3000:])
            step, folder = saved[-1]
            assert step >= done, (what, k, step, done)
            _fleet_loads(script, eps, k, os.path.join(emergency, jobs[0], folder, f"pserver_{k}"))
        print(f"{what}: ok in {took:.1f} s, checkpoints at step >= {done}", flush=True)


def _output_of(job, name):
    return "".join(line for line in job.lines if line.startswith(f"[{name}] "))


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0] != "Z"
    except (FileNotFoundError, ProcessLookupError):  # (reaped between the open and the read)
        return False
