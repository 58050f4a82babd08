"""The collective mode in every combination the README promises, against one process.

processes {1, 2} x CPU_NUM {1, 2} x {AllReduce, Reduce} x fused all-reduce {on, off} x
(two processes, AllReduce) all-reduces overlapping the backward pass {on, off} x
{dense MLP, sparse embedding} x {Momentum, Adam}, each case run several times: the
parameters of every trainer match the single-process Executor on the full batch, and the
repetitions give the same bits. Optimizers with state matter here: in Reduce mode each device
reads the state of the parameters it owns only, and the owners differ from trainer to trainer.
"""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest
from dist_helpers import HERE, child_env, endpoints, load_json, reap, start

sys.path.insert(0, os.path.join(os.path.dirname(HERE), "parallel"))

from dp_worker import MODELS  # noqa: E402

import parafluid as fluid  # noqa: E402
from parafluid.testing.data_parallel import run_parallel, run_single  # noqa: E402

pytestmark = [pytest.mark.slow]

MODES = ["allreduce", "reduce", "allreduce-fused", "reduce-fused"]
# across processes the all-reduces overlap the backward pass by default: the same bits without
TWO_PROCESS_MODES = MODES + ["allreduce-nooverlap", "allreduce-fused-nooverlap"]
MODEL_NAMES = [f"{m}+{o}" for m in ("mlp", "embedding") for o in ("momentum", "adam")]
REPEATS = 3
TOL = dict(rtol=1e-5, atol=1e-5)

_ORACLE: dict[str, dict[str, np.ndarray]] = {}


def _oracle(model: str) -> dict[str, np.ndarray]:
    if model not in _ORACLE:
        build, feeds_of = MODELS[model]
        _ORACLE[model] = run_single(build, feeds_of()).params
    return _ORACLE[model]


def _strategy(mode: str) -> fluid.BuildStrategy:
    bs = fluid.BuildStrategy()
    if mode.startswith("reduce"):
        bs.reduce_strategy = fluid.BuildStrategy.ReduceStrategy.Reduce
    bs.fuse_all_reduce_ops = mode.endswith("fused")
    return bs


@pytest.mark.timeout(120)
@pytest.mark.filterwarnings("ignore:BuildStrategy.fuse_all_reduce_ops has no effect")
@pytest.mark.filterwarnings("ignore:BuildStrategy.reduce_strategy=Reduce has no effect")
@pytest.mark.parametrize("cpu_num", [1, 2])
def test_one_process_matrix(cpu_num) -> None:
    for model in MODEL_NAMES:
        build, feeds_of = MODELS[model]
        want = _oracle(model)
        for mode in MODES:
            bits = set()
            for _ in range(REPEATS):
                got = run_parallel(build, feeds_of(), cpu_num, build_strategy=_strategy(mode))
                for d, params in enumerate(got.device_params):
                    for name, value in want.items():
                        np.testing.assert_allclose(params[name], value, **TOL,
                                                   err_msg=f"{model}/{mode} device {d} {name}")
                bits.add(b"".join(got.params[n].tobytes() for n in sorted(want)))
            assert len(bits) == 1, f"{model}/{mode}: repetitions differ"


@pytest.mark.timeout(180)
@pytest.mark.parametrize("cpu_num", [1, 2])
def test_two_process_matrix(tmp_path, cpu_num) -> None:
    cases = [f"{m}/{mode}@{k}" for k in range(REPEATS) for m in MODEL_NAMES
             for mode in TWO_PROCESS_MODES]
    eps = endpoints(2)
    env = child_env(CPU_NUM=str(cpu_num), FLAGS_rpc_deadline="30000")
    worker = os.path.join(HERE, "dp_worker.py")
    procs = []
    try:
        procs = [start([worker, eps, str(t), str(tmp_path), ",".join(cases)], env)
                 for t in range(2)]
        for p in procs:
            p.wait(timeout=150)
    finally:
        reap(procs)
    for t in range(2):
        status = load_json(str(tmp_path / f"status_t{t}.json"))
        assert status.get("ok"), f"trainer {t}: {status.get('traceback', status)}"

    def load(case: str, trainer: int, name: str) -> np.ndarray:
        tag = case.replace("/", "_").replace("@", "_")
        return np.load(tmp_path / f"{tag}_t{trainer}_{name}.npy", allow_pickle=False)

    for model in MODEL_NAMES:
        want = _oracle(model)
        for mode in TWO_PROCESS_MODES:
            # overlapping the all-reduces with the backward pass changes no bit
            first = f"{model}/{mode.replace('-nooverlap', '')}@0"
            for k in range(REPEATS):
                case = f"{model}/{mode}@{k}"
                for name, value in want.items():
                    for t in range(2):
                        np.testing.assert_allclose(load(case, t, name), value, **TOL,
                                                   err_msg=f"{case} trainer {t} {name}")
                        # every trainer, every repetition: the same bits
                        np.testing.assert_array_equal(load(case, t, name), load(first, 0, name),
                                                      err_msg=f"{case} trainer {t} {name}")
