"""Pserver mode across real processes: Fluid's documented DistributeTranspiler example under
the launcher, start order and numbers, a killed pserver named by every trainer, a killed
trainer named by the pserver."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from dist_helpers import ROOT, child_env, endpoints, reap, run_child

from parafluid.testing import ps_job
from parafluid.testing.contention import scaled
from parafluid.testing.warm_popen import WarmPopen

pytestmark = pytest.mark.slow


def _job(role, *args, env):
    cmd = [sys.executable, "-m", "parafluid.testing.ps_job", role, *map(str, args)]
    return WarmPopen(cmd, env=env, cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _last_json(out):
    lines = [json.loads(ln) for ln in out.splitlines() if ln.startswith("{")]
    return lines[-1] if lines else None


@pytest.mark.timeout(150)
def test_distribute_transpiler_pserver_example_under_the_launcher():
    env = child_env(FLAGS_rpc_deadline="30000")
    proc = run_child(["-m", "parafluid.distributed.launch", "--server_num", "2", "--worker_num",
                      "2", os.path.join("examples", "pserver_linear_regression.py")], env,
                     timeout=120)
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    weights = [w for _, w in sorted(
        re.findall(r"\[trainer (\d)\] trainer \d: loss [\d.]+, weights\[:3\] "
                                 r"(\[.*\])", out))]
    assert len(weights) == 2 and weights[0] == weights[1], out  # sync: the same parameters
    assert out.count("trainers done") == 2, out  # both pservers returned by themselves


@pytest.mark.timeout(150)
def test_trainers_first_a_pserver_5s_after_the_others_equal_one_process():
    eps = endpoints(2)
    env = child_env(FLAGS_rpc_deadline="60000")
    common = ["--pservers", eps, "--trainers", 2, "--steps", 5, "--optimizer", "adam",
              "--split-method", "hash_name"]
    procs = []
    try:
        # the trainers first, then pserver 0, and pserver 1 five seconds after the others
        trainers = [_job("trainer", *common, "--trainer-id", t, env=env) for t in (0, 1)]
        procs += trainers
        servers = [_job("pserver", *common, "--endpoint", eps.split(",")[0], env=env)]
        procs += servers
        time.sleep(5)
        servers.append(_job("pserver", *common, "--endpoint", eps.split(",")[1], env=env))
        procs += servers[1:]
        outs = [p.communicate(timeout=120) for p in procs]
    finally:
        reap(procs)
    for p, (_, err) in zip(procs, outs):
        assert p.returncode == 0, err
    results = {r["trainer_id"]: r for r in (_last_json(outs[t][0]) for t in (0, 1))}
    ref = ps_job.reference(results[0]["initial"], (5, 5), "adam")
    for s in range(5):
        got = np.mean([results[t]["losses"][s] for t in (0, 1)])
        assert abs(got - ref["losses"][s]) < 1e-5
    for t in (0, 1):
        for name in ps_job.PARAMS:
            np.testing.assert_allclose(results[t]["final"][name], ref["final"][name], atol=1e-5)


def _exit_times(procs, timeout):
    """When each process exited (monotonic seconds), polling until all have."""
    ended = [None] * len(procs)
    end = time.monotonic() + timeout
    while None in ended and time.monotonic() < end:
        for i, p in enumerate(procs):
            if ended[i] is None and p.poll() is not None:
                ended[i] = time.monotonic()
        time.sleep(0.05)
    assert None not in ended, f"still running after {timeout:.0f} s: {ended}"
    return ended


def _wait_for_step(proc, step, timeout):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        line = proc.stdout.readline()
        if not line and proc.poll() is not None:
            raise AssertionError(f"the trainer exited ({proc.returncode}) before step {step}: "
                                 f"{proc.stderr.read()}")
        if line.startswith("{") and json.loads(line).get("step", -1) >= step:
            return
    raise AssertionError(f"no step {step} within {timeout} s")


@pytest.mark.timeout(150)
def test_killed_pserver_is_named_by_every_trainer_within_the_deadline():
    eps = endpoints(2)
    dead = eps.split(",")[1]
    env = child_env(FLAGS_rpc_deadline="4000")
    # NOTE: the surviving pserver waits longer than the trainers, so that every trainer's
    # first error is its own call to the dead one (not a held read the survivor gives up on)
    server_env = child_env(FLAGS_rpc_deadline="8000")
    common = ["--pservers", eps, "--trainers", 2, "--steps", 100000]
    procs = []
    try:
        servers = [_job("pserver", *common, "--endpoint", ep, env=server_env)
                   for ep in eps.split(",")]
        trainers = [_job("trainer", *common, "--trainer-id", t, "--progress", env=env)
                    for t in (0, 1)]
        procs = servers + trainers
        _wait_for_step(trainers[0], 2, 60)
        servers[1].send_signal(signal.SIGKILL)
        killed_at = time.monotonic()
        for t in trainers:
            _, err = t.communicate(timeout=30)
            assert t.returncode != 0
            assert dead in err, err  # the dead pserver is named (a timeout or a reset)
        # the deadline, plus the process's exit
        assert time.monotonic() - killed_at < 4 + scaled(10)
        # the surviving pserver: its trainers died without completing; it names them
        _, err = servers[0].communicate(timeout=30)
        assert servers[0].returncode != 0
        # which trainers it still waits for depends on where each was when the other
        # pserver died (one may have passed this pserver's barrier already)
        assert re.search(r"trainer\(s\) \[(0|1|0, 1)\]", err), err
    finally:
        reap(procs)


@pytest.mark.timeout(150)
def test_killed_trainer_is_named_by_the_pserver_which_exits_nonzero():
    eps = endpoints(1)
    env = child_env(FLAGS_rpc_deadline="4000")
    common = ["--pservers", eps, "--trainers", 2, "--steps", 100000]
    procs = []
    try:
        server = _job("pserver", *common, "--endpoint", eps, env=env)
        trainers = [_job("trainer", *common, "--trainer-id", t, "--progress", env=env)
                    for t in (0, 1)]
        procs = [server, *trainers]
        _wait_for_step(trainers[1], 2, 60)
        trainers[1].send_signal(signal.SIGKILL)
        _, err = server.communicate(timeout=30)
        assert server.returncode != 0
        assert "trainer(s) [1]" in err, err
        _, err0 = trainers[0].communicate(timeout=30)
        assert trainers[0].returncode != 0  # its held read is answered with the error
        assert eps in err0, err0
    finally:
        reap(procs)


def _train_clis(runs, cwd):
    """``parafluid train`` with each argument list of ``runs``, all at once (they wait on
    each other's processes more than they compute); the stdout of each."""
    env = child_env(FLAGS_rpc_deadline="60000")
    procs = []
    try:
        for args in runs:
            procs.append(WarmPopen([sys.executable, "-m", "parafluid", "train", *map(str, args)],
                                   env=env, cwd=cwd, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True))
        outs = [p.communicate(timeout=240) for p in procs]
    finally:
        reap(procs)
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, out + err
    return [out for out, _ in outs]


def _epoch_numbers(out):
    """Each epoch line's (loss, train accuracy)."""
    return [(float(a), float(b)) for a, b in
            re.findall(r"epoch \d+/\d+  loss ([\d.]+)  train acc ([\d.]+)", out)]


@pytest.mark.timeout(300)
def test_parafluid_train_with_pservers_sync_equals_two_devices_and_async_converges(tmp_path):
    import parafluid as fluid

    common = ["--epochs", "3", "--hidden", "32", "--seed", "4"]
    sync_dir, async_dir, dev_dir = (str(tmp_path / n) for n in ("sync", "async", "devices"))
    sync_out, async_out, dev_out = _train_clis([
        ("--pservers", "2", "--trainers", "2", *common, "-o", sync_dir),
        ("--pservers", "2", "--trainers", "2", "--async", *common, "-o", async_dir),
        ("--devices", "2", *common, "-o", dev_dir)], cwd=ROOT)
    out = sync_out
    assert "trainer 0 of 2 processes with 2 parameter servers (sync)" in out, out
    assert len(re.findall(r"\[trainer 0\] epoch \d/3  loss", out)) == 3, out
    assert "[trainer 1] epoch" not in out and "[pserver" not in out, "trainer 0 reports"
    sync_acc = float(re.search(r"test accuracy ([\d.]+)", out)[1])
    assert "(async)" in async_out
    async_acc = float(re.search(r"test accuracy ([\d.]+)", async_out)[1])
    assert async_acc >= sync_acc - 0.02, (async_acc, sync_acc)
    # trainer 0 prints the job's loss and accuracy (every trainer's images), not its shard's
    np.testing.assert_allclose(_epoch_numbers(sync_out), _epoch_numbers(dev_out), atol=2e-4)
    a = fluid.io.read_tensors(os.path.join(sync_dir, fluid.io.DEFAULT_FILENAME))[0]
    b = fluid.io.read_tensors(os.path.join(dev_dir, fluid.io.DEFAULT_FILENAME))[0]
    assert a.keys() == b.keys()
    for key in a:  # 2 trainers + 2 pservers compute what 1 process x 2 devices computes
        np.testing.assert_allclose(a[key].numpy(), b[key].numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.timeout(200)
def test_pserver_killed_after_a_checkpoint_job_restarted_from_it_ends_as_without_the_crash(
        tmp_path):
    ckpt = str(tmp_path / "ckpt")
    env = child_env(FLAGS_rpc_deadline="4000", PARAFLUID_CHECKPOINT_ROOT=str(tmp_path))
    eps = endpoints(2)
    common = ["--pservers", eps, "--trainers", 2, "--optimizer", "momentum"]
    procs = []
    try:
        servers = [_job("pserver", *common, "--endpoint", ep, env=env) for ep in eps.split(",")]
        trainers = [_job("trainer", *common, "--steps", 100000, "--trainer-id", t,
                         "--progress", "--checkpoint-at", 3, "--checkpoint-dir", ckpt,
                         env=env) for t in (0, 1)]
        procs += servers + trainers
        _wait_for_step(trainers[0], 4, 60)  # the checkpoint after step 3 is written
        servers[1].send_signal(signal.SIGKILL)
        for p in servers[:1] + trainers:
            p.communicate(timeout=30)
            assert p.returncode != 0  # every process ends: nothing hangs
        # restart everything from the checkpoint: steps 3..5 again
        env = child_env(FLAGS_rpc_deadline="30000", PARAFLUID_CHECKPOINT_ROOT=str(tmp_path))
        servers = [_job("pserver", *common, "--endpoint", ep, "--load-dir", ckpt, env=env)
                   for ep in eps.split(",")]
        trainers = [_job("trainer", *common, "--steps", 6, "--first-step", 3,
                         "--trainer-id", t, env=env) for t in (0, 1)]
        procs += servers + trainers
        outs = [p.communicate(timeout=60) for p in servers + trainers]
        for p, (_, err) in zip(servers + trainers, outs):
            assert p.returncode == 0, err
    finally:
        reap(procs)
    resumed = _last_json(outs[2][0])
    # the same job without the crash (its initialization is seeded, so equal in every run)
    ref = ps_job.reference(_uninterrupted_initial(), (6, 6), "momentum")
    for name in ps_job.PARAMS:
        np.testing.assert_allclose(resumed["final"][name], ref["final"][name], atol=1e-5)


def _uninterrupted_initial():
    """The pservers' initial parameters (seeded): what an uninterrupted job starts from."""
    import parafluid as fluid

    eps = "127.0.0.1:1,127.0.0.1:2"
    values = {}
    for ep in eps.split(","):
        main, startup, _ = ps_job.build("momentum")
        t = fluid.DistributeTranspiler(ps_job._config("round_robin", 100, True))
        t.transpile(0, program=main, startup_program=startup, pservers=eps, trainers=2)
        _, pstartup = t.get_pserver_programs(ep)
        scope = fluid.Scope()
        fluid.Executor(fluid.CPUPlace()).run(pstartup, scope=scope)
        for name in pstartup.global_block().vars:
            if name.startswith("fc_") and "_moment" not in name and "velocity" not in name:
                values[name] = np.array(scope.find_var(name).get_tensor())
    out = {}
    for p in ps_job.PARAMS:
        blocks = sorted(n for n in values if n.startswith(p + ".block"))
        out[p] = np.concatenate([values[b] for b in blocks]) if blocks else values[p]
    return out


@pytest.mark.timeout(60)
def test_sigterm_ends_a_serving_pserver_cleanly():
    from parafluid.distributed.rpc import wait_for_server

    eps = endpoints(1)
    procs = []
    try:
        server = _job("pserver", "--pservers", eps, "--trainers", 2, "--endpoint", eps,
                      env=child_env(FLAGS_rpc_deadline="30000"))
        procs.append(server)
        wait_for_server(eps, 30)  # serving: exe.run(pserver_program) is inside listen_and_serv
        server.send_signal(signal.SIGTERM)
        out, err = server.communicate(timeout=15)
    finally:
        reap(procs)
    assert server.returncode == 0, err
    assert _last_json(out) == {"role": "pserver", "endpoint": eps}  # exe.run returned
    assert "stopped by SIGTERM" in err, err


@pytest.mark.timeout(300)
def test_a_pserver_restarted_alone_is_refused_and_every_process_stops():
    eps = endpoints(2)
    restarted_ep = eps.split(",")[1]
    # NOTE: the trainers' held requests must outlive the restarted pserver's start (a Python
    # process importing torch: seconds, more on a busy machine)
    deadline_s = scaled(6)
    env = child_env(FLAGS_rpc_deadline=str(int(deadline_s * 1000)))
    common = ["--pservers", eps, "--trainers", 2, "--optimizer", "momentum"]
    procs = []
    try:
        servers = [_job("pserver", *common, "--endpoint", ep, env=env) for ep in eps.split(",")]
        # a second between steps: the kill and restart come while no request is in flight,
        # so the trainers' next requests wait in their sockets for the restarted pserver
        trainers = [_job("trainer", *common, "--steps", 100000, "--trainer-id", t,
                         "--progress", "--step-delay", 1.0, env=env) for t in (0, 1)]
        procs += servers + trainers
        _wait_for_step(trainers[0], 3, 60)
        servers[1].send_signal(signal.SIGKILL)
        servers[1].wait()
        # before: it served the trainers' next requests from its startup values, and the job
        # went on mixing the steps of its parameters with the other pserver's
        restarted = _job("pserver", *common, "--endpoint", restarted_ep, env=env)
        procs.append(restarted)
        t0 = time.monotonic()
        ended = _exit_times([*trainers, servers[0], restarted], 2 * deadline_s + scaled(30))
        outs = [p.communicate(timeout=10) for p in [*trainers, restarted]]
    finally:
        reap(procs)
    assert max(ended[:2]) - t0 < deadline_s + scaled(14)
    for p, (_, err) in zip(trainers, outs):
        assert p.returncode != 0, err
    assert servers[0].returncode != 0  # its trainers are gone: it stops at the deadline
    # the restarted pserver ends as soon as it has refused a trainer and so failed the job,
    # with that trainer (before: it waited for its trainers until the deadline, then lingered)
    assert restarted.returncode != 0
    assert "restarted alone" in outs[2][1], outs[2][1][-2000:]
    assert ended[3] - min(ended[:2]) < deadline_s / 2, (ended, t0)
    # a trainer whose request reached the restarted pserver names it and both steps (the
    # other may fail first on its held request to the healthy pserver)
    assert any(re.search(rf"pserver {re.escape(restarted_ep)} is at step 0 but trainer \d is "
                         r"at step [1-9]\d*", err) for _, err in outs), outs


@pytest.mark.timeout(60)
def test_a_pserver_started_alone_by_hand_exits_nonzero_at_the_first_contact_bound(tmp_path):
    """No trainer ever comes: it fails the job at 10 x the deadline, saying so, and exits."""
    deadline_s = 0.5
    eps = endpoints(1)
    env = child_env(FLAGS_rpc_deadline=str(int(deadline_s * 1000)),
                    PARAFLUID_CHECKPOINT_ROOT=str(tmp_path))
    procs = []
    try:
        t0 = time.monotonic()
        server = _job("pserver", "--pservers", eps, "--trainers", 2, "--endpoint", eps, env=env)
        procs.append(server)
        _, err = server.communicate(timeout=10 * deadline_s + scaled(30))
        took = time.monotonic() - t0
    finally:
        reap(procs)
    assert server.returncode != 0
    assert re.search(r"no trainer sent a message within [\d.]+ s of the start \(10 x "
                     r"FLAGS_rpc_deadline\): trainer\(s\) \[0, 1\] never connected", err), err
    assert took >= 10 * deadline_s


@pytest.mark.timeout(120)
def test_a_sigstopped_pserver_exits_nonzero_once_continued_after_the_job_failed(tmp_path):
    """A pserver stopped (SIGSTOP) mid-job: every other process exits naming it; continued
    (SIGCONT) after that, it fails the job too and exits, naming its trainers."""
    deadline_s = scaled(2)
    eps = endpoints(2)
    env = child_env(FLAGS_rpc_deadline=str(int(deadline_s * 1000)),
                    PARAFLUID_CHECKPOINT_ROOT=str(tmp_path))
    common = ["--pservers", eps, "--trainers", 2]
    procs = []
    try:
        servers = [_job("pserver", *common, "--endpoint", ep, env=env) for ep in eps.split(",")]
        trainers = [_job("trainer", *common, "--steps", 100000, "--trainer-id", t,
                         "--progress", "--step-delay", 0.2, env=env) for t in (0, 1)]
        procs += servers + trainers
        _wait_for_step(trainers[0], 3, 60)
        servers[1].send_signal(signal.SIGSTOP)
        others = [p.communicate(timeout=deadline_s + scaled(20)) for p in [*trainers, servers[0]]]
        servers[1].send_signal(signal.SIGCONT)
        t0 = time.monotonic()
        _, err = servers[1].communicate(timeout=deadline_s + scaled(20))
        took = time.monotonic() - t0
    finally:
        reap(procs)
    for p, (_, e) in zip([*trainers, servers[0]], others):
        assert p.returncode != 0, e
    assert any(eps.split(",")[1] in e for _, e in others), others
    assert servers[1].returncode != 0
    # it names its trainers: gone (their connections closed) or, when its barrier's clock
    # is seen first, missing past the deadline (those whose barrier of the step it had not
    # received when it was stopped: one trainer's may have arrived)
    assert "PServerError" in err and re.search(r"trainer\(s\) \[(0, 1|0|1)\]", err), \
        err[-2000:]
    assert took < deadline_s + scaled(5), took


@pytest.mark.timeout(240)
def test_wire_fuzzer_against_a_live_job_loses_nothing(tmp_path):
    """Thousands of malformed and forged messages while 2 trainers train, no secret set."""
    import contextlib
    import random
    import threading

    import torch
    import zmq

    from parafluid.distributed.wire import Kind, encode
    from parafluid.testing.wire_fuzz import mutate, seed_messages

    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    env = child_env(FLAGS_rpc_deadline="60000", PARAFLUID_CHECKPOINT_ROOT=str(root))
    env.pop("PARAFLUID_RPC_SECRET", None)
    eps = endpoints(2)
    steps = 30
    common = ["--pservers", eps, "--trainers", 2, "--optimizer", "momentum"]
    procs = []
    ctx = zmq.Context()
    socks = []
    sent = 0
    try:
        servers = [_job("pserver", *common, "--endpoint", ep, env=env) for ep in eps.split(",")]
        trainers = [_job("trainer", *common, "--steps", steps, "--trainer-id", t, "--progress",
                         "--step-delay", 0.15, env=env) for t in (0, 1)]
        procs += servers + trainers
        for t in trainers:  # both trainers speak to both pservers from step 1 on
            _wait_for_step(t, 1, 60)
        outs = [None] * 4  # read in threads: a trainer's last line is long, a pipe is not

        def collect(i, p):
            outs[i] = p.communicate(timeout=200)
        readers = [threading.Thread(target=collect, args=(i, p), daemon=True)
                   for i, p in enumerate(trainers + servers)]
        for r in readers:
            r.start()

        def dealer(ep):
            s = ctx.socket(zmq.DEALER)
            s.setsockopt(zmq.LINGER, 0)
            s.connect(f"tcp://{ep}")
            return s
        socks = [dealer(ep) for ep in eps.split(",") for _ in range(4)]
        rng = random.Random(5)
        seeds = seed_messages()
        g = torch.ones(40)
        forged = [
            lambda t, s: encode(Kind.COMPLETE, trainer_id=t, step=s),
            lambda t, s: encode(Kind.SEND, "nope@GRAD", torch.ones(3), trainer_id=t, step=s),
            lambda t, s: encode(Kind.SEND, f"fc_0.b_0@GRAD.trainer_{t}", g, trainer_id=t,
                                step=s),
            lambda t, s: encode(Kind.SEND_BARRIER, trainer_id=t, step=s),
            lambda t, s: encode(Kind.FETCH_BARRIER, trainer_id=t, step=s),
            lambda t, s: encode(Kind.GET, "fc_0.w_0.block0", trainer_id=t, step=s),
            lambda t, s: encode(Kind.GET, "secret_var", trainer_id=t, step=s),
            lambda t, s: encode(Kind.CHECKPOINT, "", str(outside), trainer_id=t, step=s),
            lambda t, s: encode(Kind.CHECKPOINT, "", "in\0side", trainer_id=t, step=s),
            lambda t, s: encode(Kind.CHECKPOINT, "", "inside", trainer_id=t, step=s),
        ]
        fuzz_start = time.monotonic()
        while readers[0].is_alive() or readers[1].is_alive():
            for _ in range(100):
                sock = rng.choice(socks)
                if rng.random() < 0.5:
                    frames = rng.choice(seeds)
                    for _ in range(rng.randint(1, 3)):
                        frames = mutate(rng, frames)
                else:
                    frames = rng.choice(forged)(rng.choice([0, 1, 1, 2, -1]),
                                                rng.randrange(0, steps + 2))
                if frames:
                    # NOTE: without a pserver to take it (the job ended), a send would block
                    with contextlib.suppress(zmq.Again):
                        sock.send_multipart(frames, zmq.NOBLOCK, copy=False)
                        sent += 1
                with contextlib.suppress(zmq.Again):
                    while True:
                        sock.recv_multipart(zmq.NOBLOCK)
            if rng.random() < 0.2:  # a new connection, with a new identity
                i = rng.randrange(len(socks))
                ep = socks[i].getsockopt_string(zmq.LAST_ENDPOINT)[len("tcp://"):]
                socks[i].close()
                socks[i] = dealer(ep)
            time.sleep(0.001)
        for r in readers:
            r.join(60)
        windows = (time.monotonic() - fuzz_start) // 10 + 2  # the log's 10 s windows
    finally:
        for s in socks:
            s.close()
        ctx.term()
        reap(procs)
    for p, (_, err) in zip(trainers + servers, outs):
        assert p.returncode == 0, err  # 0 jobs lost
    assert sent >= 2000, sent
    assert not outside.exists() and not (root / "inside").exists()
    # refusals are logged, a few lines per 10 s, not one a message: at most 20 and a count per
    # 10 s window from each of the pserver's two logs (its transport's and its loop's)
    for _, err in outs[2:]:
        refusals = [ln for ln in err.splitlines() if "refused" in ln or "rejected" in ln]
        assert 0 < len(refusals) <= 2 * 21 * windows, (len(refusals), windows)
    results = {r["trainer_id"]: r for r in (_last_json(outs[t][0]) for t in (0, 1))}
    ref = ps_job.reference(results[0]["initial"], (steps, steps), "momentum")
    for t in (0, 1):
        for name in ps_job.PARAMS:
            np.testing.assert_allclose(results[t]["final"][name], ref["final"][name], atol=1e-5)
