"""DataParallel across processes checks that the trainers agree: the same parameters (names,
shapes, dtypes, where they sit) before the first broadcast, the same step on every
collective. A disagreement fails on every trainer, naming the trainer and what differs."""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "distributed"))

import imperative_check_worker as worker  # noqa: E402
from dist_helpers import child_env, endpoints, reap, start  # noqa: E402

pytestmark = pytest.mark.slow

WORKER = os.path.join(HERE, "imperative_check_worker.py")


def job_env(eps: str, rank: int, **extra: str) -> dict[str, str]:
    """The variables the launcher gives trainer ``rank`` of a job on ``eps``."""
    return child_env(PADDLE_TRAINER_ID=str(rank), PADDLE_TRAINERS_NUM="2",
                     PADDLE_TRAINER_ENDPOINTS=eps,
                     PADDLE_CURRENT_ENDPOINT=eps.split(",")[rank], CPU_NUM="1", **extra)


def run_job(scenario: str, out: str, deadline_ms: int = 20000) -> tuple[list[dict], list]:
    eps = endpoints(2)
    procs = []
    try:
        for rank in (0, 1):
            procs.append(start([WORKER, scenario, out],
                               job_env(eps, rank, FLAGS_rpc_deadline=str(deadline_ms))))
        for p in procs:
            p.wait(timeout=90)
    finally:
        reap(procs)
    statuses = []
    for rank in (0, 1):
        path = os.path.join(out, f"status_t{rank}.json")
        with open(path) as f:
            statuses.append(json.load(f))
    return statuses, eps.split(",")


def one_process() -> dict:
    """The oracle: one process on the whole batch (no job in the environment)."""
    result: dict = {}
    worker.train("ok", result)
    return result


def assert_like_one_process(statuses: list[dict]) -> None:
    want = one_process()
    for st in statuses:
        assert st.get("ok"), st
        assert sorted(st["params"]) == sorted(want["params"])
        for name, value in want["params"].items():
            np.testing.assert_allclose(st["params"][name], value, rtol=1e-5, atol=1e-6,
                                       err_msg=f"trainer {st['rank']} {name}")
    np.testing.assert_allclose(np.add(statuses[0]["losses"], statuses[1]["losses"]),
                               want["losses"], rtol=1e-5)


@pytest.mark.timeout(120)
def test_the_same_model_trains_as_one_process_on_the_whole_batch(tmp_path):
    statuses, _ = run_job("ok", str(tmp_path))
    assert_like_one_process(statuses)


@pytest.mark.timeout(120)
def test_a_different_layer_size_is_refused_on_every_trainer(tmp_path):
    statuses, eps = run_job("size", str(tmp_path))
    for st in statuses:
        err = st.get("error", "")
        assert err.startswith("ValueError: DataParallel: the trainers' parameters differ"), st
        assert f"trainer 1 ({eps[1]}, rank 1)" in err, err
        assert "parameter net/Net_0.w_1: shape [4, 6], expected [4, 4] (trainer 0)" in err, err


@pytest.mark.timeout(120)
def test_a_layer_built_on_its_first_call_with_another_size_is_refused(tmp_path):
    statuses, eps = run_job("fc_size", str(tmp_path))
    for st in statuses:
        err = st.get("error", "")
        assert err.startswith("ValueError: DataParallel: the trainers' parameters differ"), st
        assert f"trainer 1 ({eps[1]}, rank 1)" in err, err
        # each parameter of a layer object is checked when its first call makes it
        assert "parameter fc/FC_0.w_0: shape [4, 6], expected [4, 4] (trainer 0)" in err, err
        assert st["steps"] == 0, st


@pytest.mark.timeout(120)
def test_parameters_created_in_another_order_with_generated_names_are_refused(tmp_path):
    # trainer 1's `b` is named net/Net_0.w_0, trainer 0's `a`: pairing them by name (or by
    # position) would start trainer 1's `b` from trainer 0's `a`
    statuses, eps = run_job("order", str(tmp_path))
    for st in statuses:
        err = st.get("error", "")
        assert err.startswith("ValueError: DataParallel: the trainers' parameters differ"), st
        assert f"trainer 1 ({eps[1]}, rank 1)" in err, err
        assert "parameter net/Net_0.w_0: attribute b, expected a (trainer 0)" in err, err


@pytest.mark.timeout(120)
def test_named_parameters_created_in_another_order_are_matched_by_name(tmp_path):
    statuses, _ = run_job("order_named", str(tmp_path))
    for st in statuses:
        assert st.get("ok"), st
    want = one_process()["params"]
    for name, generated in (("net.a", "net/Net_0.w_0"), ("net.b", "net/Net_0.w_1")):
        np.testing.assert_array_equal(statuses[0]["params"][name], statuses[1]["params"][name])
        np.testing.assert_allclose(statuses[1]["params"][name], want[generated], rtol=1e-5,
                                   atol=1e-6, err_msg=name)


@pytest.mark.timeout(120)
def test_a_trainer_that_skips_apply_collective_grads_fails_every_trainer(tmp_path):
    statuses, eps = run_job("skip", str(tmp_path))
    for st in statuses:
        err = st.get("error", "")
        assert err.startswith("CollectiveMismatchError: DataParallel.apply_collective_grads"), st
        # trainer 0 sums step 3's gradients, trainer 1 (which skipped step 3's) step 4's
        assert f"trainer 0 ({eps[0]}, rank 0): all_reduce of gradients" in err, err
        assert "(step 3)" in err and "(step 4)" in err, err
        assert "out of step" in err, err
        # neither went on with the other's gradients
        assert st["steps"] == 2 + (st["rank"] == 1), st
