"""ProcessGroupCommunicator across real processes (2 trainers x 1 or 2 CPU devices).

The children (collective_worker.py) compute each global device's input from its rank, so the
expected results are recomputed here, in one process.
"""

from __future__ import annotations

import os
import subprocess
import time

import numpy as np
import pytest
import torch
from collective_worker import inputs, sparse_inputs
from dist_helpers import HERE, child_env, endpoints, load, load_json, reap, run_workers, start

from parafluid.distributed.rendezvous import RendezvousError, rendezvous
from parafluid.testing.contention import scaled

pytestmark = pytest.mark.slow


@pytest.mark.timeout(90)
@pytest.mark.parametrize("trainers, ndev, runs", [(2, 1, 1), (2, 2, 2), (3, 1, 2)])
def test_dense_all_reduce_reduce_broadcast(tmp_path, trainers, ndev, runs):
    nranks = trainers * ndev
    last = trainers - 1  # the trainer owning the last global device
    xs = [inputs(r, 3).numpy() for r in range(nranks)]
    total = np.sum(np.stack(xs).astype(np.float64), axis=0)
    bits = []
    for run in range(runs):
        out = tmp_path / f"run{run}"
        out.mkdir()
        status = run_workers("dense", ndev, str(out), seed=3, trainers=trainers)
        assert [s["nranks"] for s in status] == [nranks] * trainers
        assert [s["rank_offset"] for s in status] == [t * ndev for t in range(trainers)]
        assert not any("error" in s for s in status), status
        first = load(str(out), "allreduce_d0_t0")
        np.testing.assert_allclose(first, total, rtol=1e-5, atol=1e-5)
        for t in range(trainers):
            for i in range(ndev):  # every device of every trainer: the same bits
                assert load(str(out), f"allreduce_d{i}_t{t}").tobytes() == first.tobytes()
        # reduce to the last global device, then to device 0: only their owners get a value
        assert [s["reduce_is_none"] for s in status] == [t != last for t in range(trainers)]
        np.testing.assert_allclose(load(str(out), f"reduce_t{last}"), total, rtol=1e-5,
                                   atol=1e-5)
        np.testing.assert_allclose(load(str(out), "reduce0_t0"), total, rtol=1e-5, atol=1e-5)
        assert sorted(p.name for p in out.glob("reduce*")) == \
            sorted({"reduce0_t0.npy", f"reduce_t{last}.npy"})
        # broadcast from the last global device: every device of every trainer, own copies
        want = inputs(nranks - 1, 3).numpy() * 2
        for t in range(trainers):
            for i in range(ndev):
                np.testing.assert_array_equal(load(str(out), f"bcast_d{i}_t{t}"), want)
            assert status[t]["bcast_distinct"]
        bits.append(first.tobytes())
    assert len(set(bits)) == 1, "two runs of the same job differ"


@pytest.mark.timeout(60)
def test_sparse_all_reduce_concatenates_rows_in_rank_order(tmp_path):
    status = run_workers("sparse", 2, str(tmp_path))
    assert not any("error" in s for s in status), status
    parts = [sparse_inputs(r) for r in range(4)]
    rows = torch.cat([p.rows for p in parts]).numpy()
    value = torch.cat([p.value for p in parts]).numpy()
    for t in (0, 1):
        np.testing.assert_array_equal(load(str(tmp_path), f"rows_t{t}"), rows)
        np.testing.assert_array_equal(load(str(tmp_path), f"value_t{t}"), value)
        assert status[t]["height"] == 50
    # broadcast of a SelectedRows from trainer 0's device 0
    src = sparse_inputs(7)
    np.testing.assert_array_equal(load(str(tmp_path), "brows_t1"), src.rows.numpy())
    np.testing.assert_array_equal(load(str(tmp_path), "bvalue_t1"), src.value.numpy())


@pytest.mark.timeout(60)
def test_check_consistent_names_the_differing_trainer(tmp_path):
    status = run_workers("mismatch", 1, str(tmp_path))
    for s in status:  # the first check agrees; the second differs on trainer 1
        assert s["error"].startswith("ValueError: parameters differs across trainers")
        assert "trainer 1 (127.0.0.1:" in s["error"]
        assert "'fc_0.w_0 [4, 3]' vs 'fc_0.w_0 [4, 4]'" in s["error"]


@pytest.mark.timeout(60)
def test_collectives_of_different_shapes_raise_on_every_trainer(tmp_path):
    status = run_workers("size", 2, str(tmp_path))
    for s in status:  # and neither process aborted: both wrote their status
        assert s["error"].startswith("CollectiveMismatchError: all_reduce (collective #2): the "
                                     "trainers issue different collectives"), s
        assert "trainer 0 (127.0.0.1:" in s["error"] and "ranks 0-1): all_reduce " \
            "torch.float32 [10]; trainer 1 (" in s["error"] and "[11]" in s["error"]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("victim", [1, 0])
def test_killed_peer_is_named_within_the_deadline(tmp_path, victim):
    status = run_workers("kill" if victim == 1 else "kill0", 1, str(tmp_path), deadline_s=4,
                         timeout=30)
    assert status[victim] == {}  # it was killed before writing its status
    s = status[1 - victim]
    assert s["error"].startswith("CollectiveError: all_reduce (collective #2) failed")
    if victim == 1:
        assert "trainer 1 (127.0.0.1:" in s["error"] and "stopped responding" in s["error"]
    else:  # trainer 0 also hosted the store
        assert "trainer 0 (127.0.0.1:" in s["error"] and "hosts the rendezvous store, cannot " \
            "be reached: it has probably died" in s["error"]
    assert s["end"] - s["start"] < 4


@pytest.mark.timeout(60)
def test_stuck_peer_is_named_within_the_deadline(tmp_path):
    eps = endpoints(2)
    env = child_env(TEST_DEADLINE_S="3")
    worker = os.path.join(HERE, "collective_worker.py")
    procs = [start([worker, "stuck", eps, str(t), "1", str(tmp_path)], env) for t in (0, 1)]
    try:
        procs[0].wait(timeout=30)
    finally:
        reap(procs)  # trainer 1 sleeps for twice the deadline: kill it
    s = load_json(str(tmp_path / "status_t0.json"))
    assert s["error"].startswith("CollectiveError: all_reduce (collective #2) failed")
    assert "trainer 1 (127.0.0.1:" in s["error"]
    assert "alive but has not reached this collective (it entered 1)" in s["error"]
    assert s["end"] - s["start"] < 3 + scaled(0.5)  # the deadline, plus slack


@pytest.mark.timeout(30)
def test_rendezvous_lists_the_trainers_that_never_joined(monkeypatch):
    monkeypatch.setenv("FLAGS_rpc_deadline", "1000")
    eps = endpoints(3).split(",")
    start_t = time.monotonic()
    with pytest.raises(RendezvousError) as info:
        rendezvous(eps, 0, 1, "gloo")
    assert time.monotonic() - start_t < 1 + scaled(2)
    msg = str(info.value)
    assert f"2 of 3 trainers never joined: {eps[1]} (trainer 1), {eps[2]} (trainer 2)" in msg


@pytest.mark.timeout(30)
def test_rendezvous_without_trainer_0_names_it(monkeypatch):
    monkeypatch.setenv("FLAGS_rpc_deadline", "1000")
    eps = endpoints(2).split(",")
    with pytest.raises(RendezvousError, match=f"could not reach trainer 0 at {eps[0]}"):
        rendezvous(eps, 1, 1, "gloo")


@pytest.mark.timeout(60)
def test_rendezvous_rejects_a_different_cpu_num(tmp_path):
    eps = endpoints(2)
    code = ("import sys; from parafluid.distributed.rendezvous import rendezvous\n"
            "try:\n    rendezvous(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), 'gloo', 20)\n"
            "except Exception as e:\n    print(e)\n")
    procs = [start(["-c", code, eps, str(t), str(t + 1)], child_env(), stdout=subprocess.PIPE,
                   text=True) for t in (0, 1)]
    try:
        outs = [p.communicate(timeout=40)[0] for p in procs]
    finally:
        reap(procs)
    for o in outs:
        assert "the trainers disagree" in o and "same CPU_NUM" in o, o
        assert ("runs 2 local devices, trainer 0 runs 1" in o) or \
            ("runs 1 local devices, trainer 1 runs 2" in o), o
