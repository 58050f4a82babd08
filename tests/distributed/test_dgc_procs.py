"""Deep gradient compression across processes: a two-trainer nccl2 job under the launcher
(each trainer's top-k values gathered by the process group) equals the two-device run in
one process, which tests/test_dgc.py checks against a NumPy DGC of two workers."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from dist_helpers import HERE, child_env, load_json, reap, start

sys.path.insert(0, os.path.dirname(HERE))

from dgc_models import dgc, feeds, linear  # noqa: E402

import parafluid as fluid  # noqa: E402
from parafluid.testing.data_parallel import run_parallel  # noqa: E402

pytestmark = [pytest.mark.slow]
STEPS = 6


@pytest.mark.timeout(120)
def test_two_trainers_under_the_launcher_equal_two_devices_in_one_process(tmp_path):
    env = child_env(FLAGS_rpc_deadline="30000", CPU_NUM="1")
    p = start(["-m", "parafluid.distributed.launch", "--nproc_per_node", "2",
               os.path.join(HERE, "dgc_worker.py"), str(tmp_path), str(STEPS)],
              env, cwd=os.getcwd(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
              start_new_session=True)
    try:
        out, err = p.communicate(timeout=100)
    finally:
        reap([p])
    for t in range(2):
        status = load_json(str(tmp_path / f"status_t{t}.json"))
        assert status.get("ok"), f"trainer {t}: {status.get('traceback', status)}\n{out}\n{err}"
    assert p.returncode == 0, (out, err)
    build = linear(dgc(begin=2, use_nesterov=True,
                       regularization=fluid.regularizer.L2Decay(0.01)))
    want = run_parallel(build, feeds(STEPS, seed=1), ndev=2)
    for t in range(2):
        for name in ("w", "b"):
            got = np.load(tmp_path / f"t{t}_{name}.npy", allow_pickle=False)
            np.testing.assert_allclose(got, want.params[name], rtol=0, atol=1e-6,
                                       err_msg=f"{name} on trainer {t}")
