"""The collective mode when something goes wrong: failed steps, dead trainers, strangers.

A failed step ends the job on every trainer (never silently apart); collectives are compared
on every step; a trainer that dies before or during the first step is named within seconds;
the rendezvous is bounded, outlives its readers, binds its address, and refuses other jobs,
other secrets and a trainer id taken twice.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import threading
import time

import pytest
from dist_helpers import HERE, child_env, endpoints, load_json, reap, start

from parafluid.distributed.rendezvous import RendezvousError, rendezvous
from parafluid.testing.contention import scaled

pytestmark = pytest.mark.slow


def _run(scenario: str, tmp: str, deadline_ms: int = 30000) -> list[dict]:
    eps = endpoints(2)
    env = child_env(FLAGS_rpc_deadline=str(deadline_ms))
    worker = os.path.join(HERE, "fault_worker.py")
    procs = []
    try:
        procs = [start([worker, scenario, eps, str(t), tmp], env) for t in (0, 1)]
        for p in procs:
            p.wait(timeout=90)
    finally:
        reap(procs)
    paths = [os.path.join(tmp, f"status_t{t}.json") for t in (0, 1)]
    return [load_json(p) if os.path.exists(p) else {} for p in paths]


@pytest.mark.timeout(120)
def test_a_failed_step_ends_the_job_on_every_trainer(tmp_path):
    t0, t1 = _run("nan", str(tmp_path))
    # trainer 0's step 3 failed (NaN), it caught the error and tried to go on
    assert len(t0["caught"]) == 1 and "NaN" in t0["caught"][0], t0
    # its next step is refused: the job cannot go on
    assert "CollectiveError" in t0["error"] and "cannot be used again" in t0["error"], t0
    assert "trainer 0 (127.0.0.1:" in t0["error"] and "step 3 failed" in t0["error"], t0
    # trainer 1 waited in step 3's collectives: it fails at once, naming trainer 0 and why
    assert "CollectiveError" in t1["error"] and "(trainer 1, step 3)" in t1["error"], t1
    assert "trainer 0 (127.0.0.1:" in t1["error"] and "gave up: step 3 failed on trainer 0: " \
        "OpRunError" in t1["error"] and "holds 16 NaN" in t1["error"], t1
    assert t1["end"] - t1["start"] < 20, "trainer 1 waited for the deadline"


@pytest.mark.timeout(120)
def test_collectives_are_compared_after_the_first_step(tmp_path):
    statuses = _run("swap", str(tmp_path))
    for s in statuses:  # both trainers, at step 2: the same size, other variables
        assert "CollectiveMismatchError" in s["error"] or "ValueError" in s["error"], s
        assert "the trainers issue different collectives" in s["error"], s
        # program A's gradient (fc_0..fc_2) against program B's (fc_3..fc_5)
        names = set(re.findall(r"all_reduce of (fc_\d)\.", s["error"]))
        assert len(names) == 2 and {int(n[-1]) // 3 for n in names} == {0, 1}, s


@pytest.mark.timeout(120)
@pytest.mark.parametrize("scenario, clause", [
    ("crash_before", "stopped responding"),
    ("crash_in_setup", "stopped responding"),
    ("error_before", "has closed its communicator"),
    ("crash_during", "stopped responding"),
])
def test_a_trainer_gone_before_or_during_the_first_step_is_named_in_seconds(
        tmp_path, scenario, clause):
    t0, t1 = _run(scenario, str(tmp_path))
    if scenario == "error_before":
        assert t1["error"] == "RuntimeError: the data of trainer 1 cannot be read", t1
    else:
        assert t1 == {}, "trainer 1 was killed before writing its status"
    err = t0["error"]
    # trainer 1 may die while trainer 0 still sets up the process group, or at its check
    assert "CollectiveError" in err, t0
    assert "check_consistent" in err or "setting up the process group" in err, t0
    if scenario == "crash_in_setup":
        assert "setting up the process group" in err, t0
    assert "trainer 1 (127.0.0.1:" in err and clause in err, t0
    took = t0["end"] - t0["start"]
    # NOTE: seconds, not the deadline, on a quiet machine or a busy one
    assert took < min(scaled(6), 25), \
        f"trainer 0 took {took:.1f} s (deadline 30 s) to name trainer 1"


@pytest.mark.timeout(30)
def test_rendezvous_with_a_port_that_accepts_and_never_answers(monkeypatch):
    monkeypatch.setenv("FLAGS_rpc_deadline", "2000")
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        silent.settimeout(0.1)
        while not stop.is_set():
            try:
                held.append(silent.accept()[0])
            except OSError:
                pass
    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    eps = [f"127.0.0.1:{silent.getsockname()[1]}", endpoints(1)]
    start_t = time.monotonic()
    try:
        with pytest.raises(RendezvousError) as info:
            rendezvous(eps, 1, 1, "gloo")
        took = time.monotonic() - start_t
    finally:
        stop.set()
        thread.join()
        for c in held:
            c.close()
        silent.close()
    assert took < 2 + scaled(2), f"the rendezvous took {took:.1f} s with a 2 s deadline"
    msg = str(info.value)
    assert f"trainer 0's port {eps[0]} accepts connections but the rendezvous store there " \
           "did not answer within 2 s" in msg, msg


_REPORT = ("import sys, time\n"
           "from parafluid.distributed import rendezvous as r\n"
           "{patch}"
           "try:\n"
           "    rdv = r.rendezvous(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), 'gloo', 20)\n"
           "    print('joined', flush=True)\n"
           "    time.sleep(float(sys.argv[4]))\n"
           "except Exception as e:\n"
           "    print(type(e).__name__ + ': ' + str(e), flush=True)\n")

# trainer 1 reads the announcements slowly: trainer 0, whose verdict is the same, must not
# leave (taking the store with it) before trainer 1 has read them
_SLOW_READER = ("_decode = r._decode\n"
                "def slow(raw, who):\n"
                "    time.sleep(1.0)\n"
                "    return _decode(raw, who)\n"
                "r._decode = slow if sys.argv[2] == '1' else _decode\n")


@pytest.mark.timeout(60)
def test_the_rendezvous_host_outlives_the_readers_of_its_verdict():
    eps = endpoints(2)
    code = _REPORT.format(patch=_SLOW_READER)
    procs = [start(["-c", code, eps, str(t), str(t + 1), "0"], child_env(),
                   stdout=subprocess.PIPE, text=True) for t in (0, 1)]
    try:
        outs = [p.communicate(timeout=40)[0] for p in procs]
    finally:
        reap(procs)
    for o in outs:
        assert "RendezvousError: rendezvous: the trainers disagree" in o and \
            "same CPU_NUM" in o, outs


@pytest.mark.timeout(30)
def test_the_rendezvous_store_listens_on_the_endpoint_address_only():
    ep = endpoints(1)
    port = int(ep.rsplit(":", 1)[1])
    rdv = rendezvous([ep], 0, 1, "gloo", 5)
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.2", port), timeout=2).close()
    finally:
        rdv.close()


@pytest.mark.timeout(60)
def test_the_rendezvous_refuses_a_trainer_id_taken_twice():
    eps = endpoints(2)
    code = _REPORT.format(patch="")
    # two processes claim trainer id 1; trainer 0 waits for both to have tried
    ids = (0, 1, 1)
    procs = [start(["-c", code, eps, str(t), "1", "3"], child_env(), stdout=subprocess.PIPE,
                   text=True) for t in ids]
    try:
        outs = [p.communicate(timeout=40)[0] for p in procs]
    finally:
        reap(procs)
    assert outs[0].strip() == "joined", outs
    taken = [o for o in outs[1:] if "trainer id 1 is taken" in o]
    assert len(taken) == 1 and "another process of this job already joined as trainer 1" in \
        taken[0], outs
    assert sum(o.strip() == "joined" for o in outs[1:]) == 1, outs


@pytest.mark.timeout(300)
def test_the_rendezvous_refuses_other_jobs_and_other_secrets():
    eps = endpoints(2)
    # NOTE: the joiners wait for the host's start (an interpreter importing torch)
    wait_s = scaled(10)
    host_code = ("import sys\n"
                 "from parafluid.distributed.rendezvous import rendezvous\n"
                 f"rdv = rendezvous(sys.argv[1], 0, 1, 'gloo', {3 * wait_s:.1f})\n"
                 "print('joined', [r['endpoint'] for r in rdv.records], flush=True)\n")
    host = start(["-c", host_code, eps], child_env(PARAFLUID_RPC_SECRET="s3cret",
                                                   PARAFLUID_JOB_ID="job-a"),
                 stdout=subprocess.PIPE, text=True)
    try:
        def join(**kw) -> str:
            with pytest.raises(RendezvousError) as info:
                rendezvous(eps, 1, 1, "gloo", wait_s, **kw)
            return str(info.value)

        msg = join(secret="s3cret", job_id="job-b")
        assert "belongs to job 'job-b' (PARAFLUID_JOB_ID) but the store at" in msg and \
            "hosts job 'job-a'" in msg, msg
        msg = join(secret="other", job_id="job-a")
        assert "does not hold this trainer's secret (PARAFLUID_RPC_SECRET differs)" in msg, msg
        msg = join(secret=None, job_id="job-a")
        assert "trainer 0 has a secret (PARAFLUID_RPC_SECRET) and trainer 1 " in msg, msg
        # none of them disturbed the job: its own trainer 1 joins
        rdv = rendezvous(eps, 1, 1, "gloo", wait_s, secret="s3cret", job_id="job-a")
        rdv.close()
        out = host.communicate(timeout=3 * wait_s)[0]
    finally:
        reap([host])
    assert out.startswith("joined"), out
