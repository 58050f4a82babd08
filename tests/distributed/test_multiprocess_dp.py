"""nccl2 mode end to end: N trainer processes train like one process on the full batch."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest
from dist_helpers import HERE, child_env, endpoints, load_json, reap, start

sys.path.insert(0, os.path.join(os.path.dirname(HERE), "parallel"))

from dp_worker import MODELS  # noqa: E402

from parafluid.testing.data_parallel import run_single  # noqa: E402

pytestmark = [pytest.mark.slow]

CASES = ["mlp/allreduce", "mlp/reduce", "mlp/allreduce-fused", "cnn/allreduce",
         "embedding/allreduce", "embedding/reduce"]
# compiled segments on every device of every trainer (BuildStrategy.enable_compile)
COMPILED_CASES = ["mlp/allreduce-compiled", "mlp/reduce-compiled"]


def _run_job(tmp: str, cpu_num: int, cases: list[str], trainers: int = 2,
             **env_extra: str) -> list[dict]:
    eps = endpoints(trainers)
    env = child_env(**{"CPU_NUM": str(cpu_num), "FLAGS_rpc_deadline": "30000", **env_extra})
    worker = os.path.join(HERE, "dp_worker.py")
    procs = []
    try:
        for t in range(trainers):
            procs.append(start([worker, eps, str(t), tmp, ",".join(cases)], env))
        for p in procs:
            p.wait(timeout=150)
    finally:
        reap(procs)
    paths = [os.path.join(tmp, f"status_t{t}.json") for t in range(trainers)]
    return [load_json(p) if os.path.exists(p) else {} for p in paths]


def _load(tmp: str, case: str, trainer: int, name: str) -> np.ndarray:
    tag = case.replace("/", "_")
    return np.load(os.path.join(tmp, f"{tag}_t{trainer}_{name}.npy"), allow_pickle=False)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("cpu_num, cases", [(1, CASES), (2, CASES), (1, COMPILED_CASES)],
                         ids=["cpu1", "cpu2", "cpu1-compiled"])
def test_two_trainers_train_like_one_process_on_the_full_batch(tmp_path, cpu_num,
                                                               cases) -> None:
    statuses = _run_job(str(tmp_path), cpu_num, cases)
    for t, st in enumerate(statuses):
        assert st.get("ok"), f"trainer {t}: {st.get('traceback', st)}"
    for case in cases:
        model = case.split("/")[0]
        build, feeds_of = MODELS[model]
        single = run_single(build, feeds_of())
        for t in range(2):
            for name, want in single.params.items():
                np.testing.assert_allclose(_load(str(tmp_path), case, t, name), want,
                                           rtol=1e-5, atol=1e-5, err_msg=f"{case} {name}")
        # every device's loss is its shard's mean: their mean is the full batch's loss
        losses = np.concatenate([_load(str(tmp_path), case, t, "losses") for t in range(2)],
                                axis=1)
        np.testing.assert_allclose(losses.mean(axis=1),
                                   np.array([v.mean() for v in single.losses]),
                                   rtol=1e-5, atol=1e-5, err_msg=case)
        for name in single.params:  # the trainers hold the same bits
            np.testing.assert_array_equal(_load(str(tmp_path), case, 0, name),
                                          _load(str(tmp_path), case, 1, name))


@pytest.mark.timeout(180)
def test_the_same_job_twice_gives_the_same_bits(tmp_path) -> None:
    cases = ["mlp/allreduce", "embedding/reduce"]
    runs = []
    for k in range(2):
        out = tmp_path / f"run{k}"
        out.mkdir()
        statuses = _run_job(str(out), 2, cases)
        assert all(st.get("ok") for st in statuses), statuses
        runs.append(out)
    files = sorted(p.name for p in runs[0].iterdir() if p.suffix == ".npy")
    assert len(files) > 2 * len(cases)
    for name in files:
        np.testing.assert_array_equal(np.load(runs[0] / name), np.load(runs[1] / name),
                                      err_msg=name)


@pytest.mark.timeout(120)
def test_a_trainer_that_dies_mid_training_is_named_by_the_other(tmp_path) -> None:
    import time

    start_time = time.monotonic()
    statuses = _run_job(str(tmp_path), 1, ["mlp/allreduce"], DIE_AT_STEP="2",
                        FLAGS_rpc_deadline="8000")
    took = time.monotonic() - start_time
    assert statuses[1] == {}, "trainer 1 died without writing its status"
    err = statuses[0].get("error", "")
    assert not statuses[0].get("ok") and "OpRunError" in err, statuses[0]
    assert "c_allreduce_sum" in err and "step 3" in err and "trainer 1" in err, err
    assert took < 60, f"the survivor took {took:.0f} s to give up"
