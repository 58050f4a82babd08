"""The parameter-server loop with trainer threads on 127.0.0.1: sync and async semantics,
uneven data, dead trainers, dead servers, start order, prefetch and checkpoint notices."""

import json
import os
import socket
import threading
import time

import pytest
import torch

from parafluid.distributed import wire
from parafluid.distributed.ps_client import ClientPool, PServerClient
from parafluid.distributed.pserver import ParameterServer, PServerError
from parafluid.distributed.rpc import RPCError, RPCTimeoutError
from parafluid.scope import SelectedRows
from parafluid.testing.contention import scaled

LR = 0.5


@pytest.fixture(autouse=True)
def _no_env_secret(monkeypatch):
    monkeypatch.delenv(wire.SECRET_ENV, raising=False)


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Job:
    """A pserver holding ``w`` (and an embedding table) served on a thread."""

    def __init__(self, fan_in=2, sync_mode=True, deadline_s=5.0, endpoint="127.0.0.1:0",
                 start=True, checkpoint_root="/tmp", **kw):
        self.params = {"w": torch.zeros(3, dtype=torch.float64),
                       "emb": torch.arange(20.0).reshape(10, 2)}
        self.calls = []  # what optimize saw: {name: [trainer-ordered grads]}
        self.saved = []
        self.ps = ParameterServer(endpoint, fan_in, sync_mode, optimize=self.optimize,
                                  get=self.params.__getitem__, prefetch=self.prefetch,
                                  save=self.save, deadline_s=deadline_s,
                                  poll_interval_s=0.02, checkpoint_root=checkpoint_root, **kw)
        self.endpoint = self.ps.endpoint
        self.error = None
        self.thread = threading.Thread(target=self._serve, daemon=True)
        if start:
            self.thread.start()

    def optimize(self, grads):
        self.calls.append({k: [g.clone() if isinstance(g, torch.Tensor) else g for g in v]
                           for k, v in grads.items()})
        for name, blocks in grads.items():
            if name == "emb":
                for sr in blocks:
                    self.params["emb"].index_add_(0, sr.rows, -LR * sr.value / len(blocks))
            else:
                self.params[name] -= LR * torch.stack(blocks).mean(0)

    def save(self, dirname, step):
        self.saved.append((dirname, step))
        return json.dumps({"file": "ps.safetensors", "step": step, "bytes": 0, "sha256": "-"})

    def prefetch(self, table, rows):
        return self.params[table][rows]

    def _serve(self):
        try:
            self.ps.serve(handle_sigterm=False)
        except PServerError as e:
            self.error = e

    def join(self, timeout=10):
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "serve() did not return"
        return self


def _run_trainers(fns):
    errors = {}

    def wrap(i, fn):
        try:
            fn()
        except Exception as e:  # noqa: BLE001 - reported to the test below
            errors[i] = e
    ts = [threading.Thread(target=wrap, args=(i, fn)) for i, fn in enumerate(fns)]
    [t.start() for t in ts]
    [t.join(20) for t in ts]
    assert not any(t.is_alive() for t in ts), "a trainer thread hung"
    return errors


def _grad(t, s):
    return torch.tensor([t + 1.0, 10.0 * s, -(t + s)], dtype=torch.float64)


def _sync_trainer(ep, t, steps, seen, delay=0.0, pull_first=True):
    def run():
        c = PServerClient(ep, t, deadline_s=5)
        if pull_first:
            c.recv("w")
            c.fetch_barrier()
        for s in range(steps):
            time.sleep(delay)
            c.send(f"w.trainer_{t}" if t % 2 else "w", _grad(t, s))
            c.send_barrier()
            seen.setdefault(t, []).append(c.recv("w").clone())
            c.fetch_barrier()
        c.complete()
        c.close()
    return run


def _expected_after(steps_per_trainer):
    w, out = torch.zeros(3, dtype=torch.float64), []
    for s in range(max(steps_per_trainer)):
        live = [t for t, n in enumerate(steps_per_trainer) if s < n]
        w = w - LR * torch.stack([_grad(t, s) for t in live]).mean(0)
        out.append(w.clone())
    return out


def test_sync_two_trainers_average_and_everyone_reads_the_updated_value():
    job = Job()
    seen = {}
    # trainer 1 is slower: trainer 0's read waits (held) for the step's optimization
    errors = _run_trainers([_sync_trainer(job.endpoint, 0, 4, seen),
                            _sync_trainer(job.endpoint, 1, 4, seen, delay=0.05)])
    job.join()
    assert not errors and job.error is None
    expected = _expected_after([4, 4])
    for t in (0, 1):
        assert all(torch.allclose(a, b) for a, b in zip(seen[t], expected)), (t, seen[t])
    assert job.ps.step == 4 and len(job.calls) == 4
    # every step's optimize got both gradients, in trainer-id order, ".trainer_1" stripped
    for s, call in enumerate(job.calls):
        assert list(call) == ["w"]
        assert all(torch.equal(g, _grad(t, s)) for t, g in enumerate(call["w"]))


def test_uneven_data_the_finished_trainer_leaves_the_fan_in():
    job = Job()
    seen = {}
    errors = _run_trainers([_sync_trainer(job.endpoint, 0, 6, seen),
                            _sync_trainer(job.endpoint, 1, 3, seen)])
    job.join()
    assert not errors and job.error is None
    expected = _expected_after([6, 3])
    assert torch.allclose(seen[0][-1], expected[-1]) and torch.allclose(seen[1][-1], expected[2])
    assert [len(c["w"]) for c in job.calls] == [2, 2, 2, 1, 1, 1]
    assert job.ps.completed == {0, 1} and not job.ps.live


def test_async_applies_each_gradient_as_it_arrives():
    job = Job(sync_mode=False)

    def trainer(t):
        def run():
            c = PServerClient(job.endpoint, t, deadline_s=5)
            for s in range(5):
                c.send("w", _grad(t, s))
                c.recv("w")
            c.complete()
        return run
    errors = _run_trainers([trainer(0), trainer(1)])
    job.join()
    assert not errors and job.error is None
    assert job.ps.step == 10 and all(len(c["w"]) == 1 for c in job.calls)
    # SGD on one gradient at a time: w = -lr * (sum of all gradients), in any arrival order
    total = sum(_grad(t, s) for t in (0, 1) for s in range(5))
    assert torch.allclose(job.params["w"], -LR * total)


def test_a_trainer_that_never_comes_is_named_at_the_barrier():
    job = Job(deadline_s=0.6)
    c = PServerClient(job.endpoint, 0, deadline_s=5)
    c.send("w", _grad(0, 0))
    c.send_barrier()
    t0 = time.monotonic()
    with pytest.raises(RPCError, match=r"send barrier of trainer\(s\) \[1\]"):
        c.recv("w")  # held for the optimization, then answered with the server's error
    assert time.monotonic() - t0 < 0.6 + scaled(2.4)
    job.join()
    assert isinstance(job.error, PServerError)
    assert "trainer(s) [1]" in str(job.error) and "FLAGS_rpc_deadline" in str(job.error)
    assert "trainer(s) [1] never connected" in str(job.error)
    c.close()


def test_the_first_steps_clock_starts_at_the_first_message_not_at_the_start():
    """Trainers that take longer than the deadline to reach their first step (reading
    data) train: the first barrier's clock starts when the first trainer speaks."""
    job = Job(deadline_s=0.6)
    time.sleep(1.5)  # longer than the deadline: before, the pserver had failed the job
    seen = {}
    errors = _run_trainers([_sync_trainer(job.endpoint, t, 2, seen) for t in (0, 1)])
    assert not errors, errors
    job.join()
    assert job.error is None, job.error
    assert job.ps.step == 2


def test_trainers_that_never_connect_are_named_at_the_first_contact_bound():
    job = Job(deadline_s=0.3, first_contact_s=1.0)
    t0 = time.monotonic()
    job.join(timeout=30)
    assert 1.0 <= time.monotonic() - t0 < 20
    assert "no trainer sent a message within" in str(job.error)
    assert "trainer(s) [0, 1] never connected" in str(job.error), job.error


def test_a_trainer_that_vanishes_mid_step_is_named_at_the_fetch_barrier():
    job = Job(deadline_s=0.6)
    c0, c1 = PServerClient(job.endpoint, 0, 5), PServerClient(job.endpoint, 1, 5)
    for t, c in enumerate((c0, c1)):
        c.send("w", _grad(t, 0))
        c.send_barrier()
    c0.recv("w")
    c1.recv("w")
    c0.fetch_barrier()  # trainer 1 dies before its fetch barrier
    job.join()
    assert "fetch barrier of trainer(s) [1]" in str(job.error)
    assert "step 1" in str(job.error)
    c0.close()
    c1.close()


@pytest.mark.parametrize("sync_mode", [True, False], ids=["sync", "async"])
def test_a_trainer_whose_connection_closes_without_completing_is_named_in_seconds(
        sync_mode, tmp_path):
    """Its process died (the connection closes, no complete): with a 30 s deadline the
    pserver fails within a few seconds naming it and its address, saves its emergency
    checkpoint, and the other trainer's request (held, in sync mode) gets that error."""
    saved = []
    job = Job(deadline_s=30, sync_mode=sync_mode, linger_s=30, checkpoint_root=str(tmp_path),
              emergency_save=lambda d, step: saved.append((d, step)))
    c0, c1 = PServerClient(job.endpoint, 0, 30), PServerClient(job.endpoint, 1, 30)
    c1.recv("w")
    c1.fetch_barrier()
    c0.send("w", _grad(0, 0))
    c0.send_barrier()
    t0 = time.monotonic()
    c1.close()  # trainer 1's process ends: its socket closes without a complete
    with pytest.raises(RPCError, match=r"trainer\(s\) \[1\] closed the connection without "
                       r"completing \(trainer 1 from 127\.0\.0\.1:\d+\)") as info:
        while time.monotonic() - t0 < 10:  # sync: the first read is held until the failure
            c0.recv("w")
            time.sleep(0.1)
    assert time.monotonic() - t0 < scaled(5), info.value
    assert "emergency checkpoint" in str(info.value)
    assert saved == [(str(tmp_path / "__emergency__" / job.ps.job / f"step_{job.ps.step}"),
                      job.ps.step)]
    job.join()  # every trainer still alive was told: no linger
    assert "trainer(s) [1]" in str(job.error)
    c0.close()


def test_a_trainer_that_completes_then_closes_is_not_taken_for_dead():
    job = Job(deadline_s=30)
    c0, c1 = PServerClient(job.endpoint, 0, 30), PServerClient(job.endpoint, 1, 30)
    c1.recv("w")
    c1.complete()
    c1.close()
    time.sleep(1.5)  # past the grace of a lost connection
    for s in range(2):
        c0.send("w", _grad(0, s))
        c0.send_barrier()
        c0.recv("w")
        c0.fetch_barrier()
    c0.complete()
    job.join()
    assert job.error is None and job.ps.step == 2


def test_two_send_barriers_in_one_step_are_refused():
    job = Job(deadline_s=5)
    c0, c1 = PServerClient(job.endpoint, 0, 5), PServerClient(job.endpoint, 1, 5)
    c0.send_barrier()
    c0.step = 0  # the same barrier again
    with pytest.raises(RPCError, match="trainer 0 sent two send barriers in step 0"):
        c0.send_barrier()
    c0.step = 1
    c1.send_barrier()  # the step goes on: optimize with no gradients, then the fetch phase
    c0.fetch_barrier()
    c1.fetch_barrier()
    c0.complete()
    c1.complete()
    job.join()
    assert job.error is None and job.ps.step == 1 and job.calls == [{}]


def test_dead_server_every_call_errors_within_the_deadline_naming_it():
    ep = f"127.0.0.1:{_free_port()}"
    c = PServerClient(ep, 1, deadline_s=0.3)
    for call, what in [(lambda: c.send("fc_0.w_0@GRAD", torch.ones(2)), "send of 'fc_0.w_0@GRAD'"),
                       (lambda: c.recv("fc_0.w_0"), "get of 'fc_0.w_0'"),
                       (c.send_barrier, "send_barrier"),
                       (c.complete, "complete")]:
        t0 = time.monotonic()
        with pytest.raises(RPCTimeoutError, match=f"{what} to pserver {ep} \\(trainer 1\\)"):
            call()
        assert time.monotonic() - t0 < 0.3 + scaled(1.2)
    c.close()


def test_trainers_started_before_the_server():
    ep = f"127.0.0.1:{_free_port()}"
    seen = {}
    trainers = [_sync_trainer(ep, t, 3, seen) for t in (0, 1)]
    holder = {}

    def late_server():
        time.sleep(0.5)
        holder["job"] = Job(endpoint=ep)
    errors = _run_trainers([*trainers, late_server])
    holder["job"].join()
    assert not errors and holder["job"].error is None
    assert torch.allclose(seen[0][-1], _expected_after([3, 3])[-1])


def test_prefetch_sparse_gradients_and_checkpoint_notice():
    job = Job(fan_in=1)
    c = PServerClient(job.endpoint, 0, deadline_s=5)
    assert c.prefetch("emb", [3, 0]).tolist() == [[6.0, 7.0], [0.0, 1.0]]
    c.send("emb", SelectedRows(torch.tensor([3, 3]), torch.ones(2, 2), 10))
    c.send_barrier()
    assert c.prefetch("emb", [3]).tolist() == [[5.0, 6.0]]  # held until the update, then read
    c.fetch_barrier()
    assert c.checkpoint_notify("/tmp/ckpt dir")["step"] == 1
    with pytest.raises(RPCError, match="has no variable 'nope'"):
        c.recv("nope")
    c.complete()
    job.join()
    assert job.saved == [("/tmp/ckpt dir", 1)] and job.error is None


def test_protocol_errors_are_answered_and_the_server_goes_on():
    job = Job(fan_in=2)
    early = PServerClient(job.endpoint, 1, 5)
    with pytest.raises(RPCError, match="trainer 1 never connected to this pserver"):
        early.complete()  # a COMPLETE before any other request: a stranger's
    early.recv("w")
    early.complete()
    early.complete()  # idempotent
    with pytest.raises(RPCError, match="trainer 1 already completed"):
        early.send_barrier()
    with pytest.raises(RPCError, match=r"trainer id 5 is not in 0..1"):
        PServerClient(job.endpoint, 5, 5).send_barrier()
    c = PServerClient(job.endpoint, 0, 5)
    c.send("w", _grad(0, 0))
    with pytest.raises(RPCError, match="sent 'w' twice in step 0"):
        c.send("w", _grad(0, 0))
    c.send_barrier()
    with pytest.raises(RPCError, match="send barrier before its fetch barrier of step 0"):
        c.send_barrier()
    assert torch.allclose(c.recv("w"), -LR * _grad(0, 0))
    c.fetch_barrier()
    c.complete()
    job.join()
    assert job.error is None and job.ps.step == 1


def test_pool_completes_every_endpoint():
    jobs = [Job(fan_in=1), Job(fan_in=1)]
    pool = ClientPool(trainer_id=0, deadline_s=5)
    for j in jobs:
        pool.get(j.endpoint).send("w", _grad(0, 0))
    pool.send_barrier([j.endpoint for j in jobs])
    assert all(torch.allclose(pool.get(j.endpoint).recv("w"), -LR * _grad(0, 0)) for j in jobs)
    pool.fetch_barrier([j.endpoint for j in jobs])
    pool.complete()
    for j in jobs:
        j.join()
        assert j.error is None and j.ps.step == 1


def test_emergency_checkpoints_of_two_jobs_at_the_same_step_stay_apart(tmp_path, monkeypatch):
    from parafluid.distributed.pserver import emergency_checkpoint_dir, emergency_job_key

    eps = ["127.0.0.1:7001", "127.0.0.1:7002"]
    monkeypatch.delenv("PARAFLUID_JOB_ID", raising=False)
    # without a job name: every pserver of the job agrees on one key, another job differs
    assert emergency_job_key(eps) == emergency_job_key(eps[::-1])
    assert emergency_job_key(eps) != emergency_job_key(["127.0.0.1:7003"])
    paths = set()
    for job in ("job-a", "job-b", "../../escape"):
        monkeypatch.setenv("PARAFLUID_JOB_ID", job)
        paths.add(emergency_checkpoint_dir(str(tmp_path), 3, emergency_job_key(eps)))
    assert len(paths) == 3
    for p in paths:  # a job name cannot lead outside the root
        assert os.path.realpath(p).startswith(str(tmp_path / "__emergency__") + os.sep), p


def test_a_pserver_no_trainer_ever_reached_ends_at_the_first_contact_bound():
    """Started alone (by hand, no launcher): it fails the job at the first-contact bound and
    ends then, without lingering for trainers it has no connection to (before: it lingered
    ``linger_s`` more, here 60 s)."""
    job = Job(deadline_s=0.3, first_contact_s=1.0, linger_s=60)
    t0 = time.monotonic()
    job.join(timeout=min(30, 1.0 + scaled(10)))
    assert time.monotonic() - t0 >= 1.0
    assert "trainer(s) [0, 1] never connected" in str(job.error), job.error


def test_after_failing_a_pserver_waits_only_for_trainers_it_can_still_tell():
    """Trainer 0 spoke and keeps its connection open; trainer 1 never came. The failure
    (trainer 1 missing at the barrier) is held for trainer 0 until it asks or its connection
    closes: then the pserver ends at once, not ``linger_s`` (60 s) after the failure."""
    job = Job(deadline_s=0.6, linger_s=60)
    c0 = PServerClient(job.endpoint, 0, deadline_s=5)
    c0.send("w", _grad(0, 0))
    c0.send_barrier()
    deadline = time.monotonic() + scaled(20)
    while job.ps._error is None and time.monotonic() < deadline:  # the barrier's failure
        time.sleep(0.05)
    assert job.ps._error is not None
    time.sleep(0.3)
    assert job.thread.is_alive()  # lingering: trainer 0 has not heard it yet
    c0.close()  # its process ends: nothing left to tell
    job.join(timeout=min(30, scaled(10)))
    assert "trainer(s) [1] never connected" in str(job.error), job.error
