"""Pserver mode: a trainer's sends travel while its backward pass goes on.

``send`` starts its messages on the client pool's send thread and returns
(``FLAGS_rpc_overlap_send``, default on); the send barrier waits for them. The training
tests run 2 pservers and the trainers as threads of this process (parafluid.testing.ps_job),
against the one-process oracle, with the overlap on and off; the pool's own tests use a
pserver that is not there.
"""

from __future__ import annotations

import socket
import threading
import time

import numpy as np
import pytest
import torch
from dist_helpers import endpoints, run_threads

import parafluid as fluid
from parafluid.distributed import wire
from parafluid.distributed.ps_client import ClientPool, PServerClient
from parafluid.distributed.rpc import RPCTimeoutError
from parafluid.engine.runtime import add_op_hook, remove_op_hook
from parafluid.flags import flags_guard, set_flag
from parafluid.testing import ps_job
from parafluid.testing.contention import scaled

STEPS = 4


@pytest.fixture(autouse=True)
def _env(monkeypatch):
    # a failing thread must not leave the others waiting for the default 180 s
    monkeypatch.setenv("FLAGS_rpc_deadline", "15000")
    monkeypatch.delenv(wire.SECRET_ENV, raising=False)


def _free_endpoint() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


def test_a_failed_send_is_raised_by_the_next_call_naming_the_pserver_and_later_sends_stay_home(
        monkeypatch):
    dead = _free_endpoint()
    tried = []
    real = PServerClient.send
    monkeypatch.setattr(PServerClient, "send",
                        lambda self, name, value: (tried.append(name), real(self, name, value)))
    pool = ClientPool(trainer_id=1, deadline_s=0.3)
    try:
        t0 = time.monotonic()
        pool.send_async(["w@GRAD"], [dead], [torch.ones(2)], tag="['w@GRAD'] to the dead one")
        assert time.monotonic() - t0 < scaled(0.2)  # started, not waited for
        pool.send_async(["b@GRAD"], [dead], [torch.ones(2)])
        assert pool.sends_in_flight == 2
        with pytest.raises(RPCTimeoutError, match=f"send of 'w@GRAD' to pserver {dead}") as e:
            pool.send_barrier([dead])
        assert "raised by the send of ['w@GRAD'] to the dead one" in "".join(e.value.__notes__)
        assert time.monotonic() - t0 < 2 * (0.3 + scaled(1.5))
        assert tried == ["w@GRAD"]  # the send after the failed one never left the trainer
        assert pool.sends_in_flight == 0
    finally:
        pool.close()


def _job(trainers: int, optimizer: str = "sgd") -> dict[int, dict]:
    eps = endpoints(2)
    kw = dict(optimizer=optimizer)
    calls = [(ps_job.run_pserver, (ep, eps, trainers), kw) for ep in eps.split(",")]
    calls += [(ps_job.run_trainer, (t, eps, trainers, STEPS), kw) for t in range(trainers)]
    return run_threads(calls, 60)


def _check_equal_to_one_process(results: dict[int, dict], optimizer: str) -> None:
    init = results[0]["initial"]
    ref = ps_job.reference(init, (STEPS,) * len(results), optimizer)
    for s in range(STEPS):
        got = np.mean([r["losses"][s] for r in results.values()])
        assert abs(got - ref["losses"][s]) < 1e-5 * max(1.0, abs(ref["losses"][s])), s
    for t, r in results.items():
        for p in ps_job.PARAMS:
            np.testing.assert_allclose(r["final"][p], ref["final"][p], rtol=0, atol=1e-5,
                                       err_msg=f"trainer {t} {p}")


@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_sync_2x2_equals_one_process_overlap_on_and_off_bitwise_alike(optimizer):
    runs = {}
    for on in (True, False):
        with flags_guard():
            set_flag("FLAGS_rpc_overlap_send", on)
            runs[on] = _job(2, optimizer)
        _check_equal_to_one_process(runs[on], optimizer)
    for t in (0, 1):
        assert runs[True][t]["losses"] == runs[False][t]["losses"]
        for p in ps_job.PARAMS:
            np.testing.assert_array_equal(runs[True][t]["final"][p], runs[False][t]["final"][p])


def _traced_job(on: bool) -> tuple[list, list, list]:
    """One trainer, 2 pservers: the trainer's ops (op hooks) and its sends' messages, each
    as (name, start_ns, end_ns), and when its send-barrier messages began."""
    ops, sends, barriers = [], [], []
    lock = threading.Lock()
    real, real_barrier = PServerClient.send, PServerClient.send_barrier

    def timed_send(self, name, value):
        t0 = time.perf_counter_ns()
        try:
            # NOTE: a slow link (20 ms a message): a loopback send is so quick that a
            # backward op might by chance never start while one is on its way
            time.sleep(0.02)
            return real(self, name, value)
        finally:
            with lock:
                sends.append((name, t0, time.perf_counter_ns()))

    def timed_barrier(self):
        with lock:
            barriers.append(time.perf_counter_ns())
        return real_barrier(self)

    def hook(rec):
        with lock:
            ops.append((rec.op_type, rec.start_ns, rec.end_ns))

    PServerClient.send, PServerClient.send_barrier = timed_send, timed_barrier
    add_op_hook(hook)
    try:
        with flags_guard():
            set_flag("FLAGS_rpc_overlap_send", on)
            results = _job(1)
    finally:
        remove_op_hook(hook)
        PServerClient.send, PServerClient.send_barrier = real, real_barrier
    _check_equal_to_one_process(results, "sgd")
    return ops, sends, sorted(barriers)


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_the_sends_overlap_the_backward_and_end_before_the_send_barrier():
    for on in (True, False):
        ops, sends, barriers = _traced_job(on)
        grads = [o for o in ops if o[0].endswith("_grad")]
        assert len(sends) >= 4 * STEPS and grads
        # a backward op started while a gradient was on its way, from its send op's start to
        # the end of its messages: only with the overlap on. NOTE: from the send op, not from
        # the message's start: a backward of microseconds may end before the send thread
        # starts the first message. The send thread sends in the order of the send ops, the
        # blocks of one send op at once: the k-th group of messages is the k-th send op's.
        send_ops = sorted(o[1] for o in ops if o[0] == "send")
        groups: list[list] = []
        for name, start, end in sorted(sends, key=lambda m: m[1]):
            base = name.split(".block")[0]
            if groups and groups[-1][0] == base:
                groups[-1][2] = max(groups[-1][2], end)
            else:
                groups.append([base, start, end])
        assert len(groups) == len(send_ops) >= STEPS, (len(groups), len(send_ops))
        during = [(g[0], group[0]) for g in grads for op_start, group in zip(send_ops, groups)
                  if op_start < g[1] < group[2]]
        assert bool(during) == on, (on, during[:3])
        # every send ended before the next send-barrier message began (one per pserver)
        assert len(barriers) == 2 * STEPS
        for name, start, end in sends:
            nxt = min((b for b in barriers if b > start), default=None)
            assert nxt is not None and end <= nxt, (on, name)


def test_a_failed_step_waits_for_the_sends_it_started_and_notes_a_failed_one(monkeypatch):
    from parafluid.distributed.ps_registry import client_pool, complete

    monkeypatch.setenv("FLAGS_rpc_deadline", "300")
    dead = _free_endpoint()
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data(name="x", shape=[2], dtype="float32")
        ids = fluid.layers.data(name="ids", shape=[1], dtype="int64")
        y = fluid.layers.scale(x, scale=2.0)
        main.global_block().append_op("send", inputs={"X": [y]},
                                      attrs={"epmap": [dead], "trainer_id": 7})
        fluid.layers.gather(y, ids)  # fails when it runs: row 5 of 1
    exe = fluid.Executor(fluid.CPUPlace())
    pool = client_pool(7)
    try:
        with pytest.raises(Exception) as e:
            exe.run(main, feed={"x": np.ones((1, 2), "float32"),
                                "ids": np.array([[5]], "int64")})
        assert "gather" in str(e.value)  # the step's own error, first
        notes = "".join(getattr(e.value, "__notes__", []))
        assert f"a send this step started failed too: send of '{y.name}' to pserver {dead}" \
            in notes, notes
        assert pool.sends_in_flight == 0  # nothing of the failed step is left on its way
    finally:
        pool.close()
        complete([7])  # (no client left to tell: only drops the pool from the registry)
