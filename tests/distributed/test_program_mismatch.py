"""Trainers of a collective job that run different programs stop at the first step with the
first line where their programs differ (not a hash)."""

from __future__ import annotations

import re

import pytest
from dist_helpers import child_env, run_child

pytestmark = pytest.mark.slow


_MISMATCH_SCRIPT = """
import numpy as np
import parafluid as fluid

job = fluid.distributed.env()
x = fluid.layers.data(name="x", shape=[4], dtype="float32")
h = fluid.layers.fc(input=x, size=3 + job.trainer_id)   # trainer 1 builds another program
loss = fluid.layers.mean(fluid.layers.fc(input=h, size=1))
fluid.optimizer.SGD(learning_rate=0.1).minimize(loss)
config = fluid.DistributeTranspilerConfig()
config.mode = "nccl2"
fluid.DistributeTranspiler(config=config).transpile(
    job.trainer_id, trainers=",".join(job.trainer_endpoints),
    current_endpoint=job.current_endpoint)
exe = fluid.Executor(fluid.CPUPlace())
exe.run(fluid.default_startup_program())
pe = fluid.ParallelExecutor(use_cuda=False, loss_name=loss.name,
                            num_trainers=job.trainers, trainer_id=job.trainer_id)
pe.run(fetch_list=[loss.name], feed={"x": np.ones((2, 4), "float32")})
"""


@pytest.mark.timeout(120)
def test_trainers_running_different_programs_are_told_the_first_differing_line(tmp_path):
    script = tmp_path / "mismatch.py"
    script.write_text(_MISMATCH_SCRIPT)
    env = child_env(CPU_NUM="1", FLAGS_rpc_deadline="30000")
    proc = run_child(["-m", "parafluid.distributed.launch", "--nproc_per_node", "2",
                      str(script)], env, timeout=100)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert "program differs across trainers" in out, out
    first = re.search(r"trainer 1 \(127\.0\.0\.1:\d+.*\) differs from trainer 0 \(.*\): "
                      r"line \d+: '(.*?)' vs '(.*?)'", out)
    assert first, out
    assert first.groups() == ("param fc_0.b_0 [3] float32", "param fc_0.b_0 [4] float32"), out
