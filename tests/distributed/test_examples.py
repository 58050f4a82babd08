"""The README's distributed example, Fluid's documented DistributeTranspiler example in nccl2
mode and the model-parallel example run under the launcher."""

from __future__ import annotations

import os
import re

import pytest
from dist_helpers import child_env, run_child

pytestmark = [pytest.mark.slow, pytest.mark.timeout(150)]


def _launch(script: str) -> str:
    env = child_env(CPU_NUM="1", FLAGS_rpc_deadline="30000")
    proc = run_child(["-m", "parafluid.distributed.launch", "--nproc_per_node", "2", script],
                     env, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def test_readme_distributed_example() -> None:
    out = _launch(os.path.join("examples", "train_distributed.py"))
    losses = [float(v) for v in re.findall(r"trainer \d of 2: loss ([\d.]+)", out)]
    assert len(losses) == 2 and all(v < 0.01 for v in losses), out


def test_distribute_transpiler_nccl2_example() -> None:
    out = _launch(os.path.join("examples", "nccl2_linear_regression.py"))
    weights = re.findall(r"\[rank (\d)\] trainer \d: loss [\d.]+, weights\[:3\] (\[.*\])", out)
    assert len(weights) == 2, out
    assert weights[0][1] == weights[1][1], "both trainers hold trainer 0's start + the same steps"


@pytest.mark.parametrize("hybrid", [False, True])
def test_model_parallel_example(hybrid: bool) -> None:
    env = child_env(CPU_NUM="2", FLAGS_rpc_deadline="30000")
    args = ["--hybrid"] if hybrid else []
    proc = run_child(["-m", "parafluid.distributed.launch", "--nproc_per_node", "2",
                      os.path.join("examples", "model_parallel.py"), *args], env, timeout=120)
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    first, last = (float(v) for v in re.findall(r"\[rank 1\] worker 1: step \d+ loss ([\d.]+)",
                                                out))
    assert last < first / 10, out
    assert "worker 0 of 2: done" in out and "worker 1 of 2: done" in out, out


@pytest.mark.parametrize("script, command", [
    ("train_distributed.py", "CPU_NUM=1 python -m parafluid.distributed.launch "
                             "--nproc_per_node 2 examples/train_distributed.py"),
    ("model_parallel.py", "python -m parafluid.distributed.launch --nproc_per_node 2 "
                          "examples/model_parallel.py"),
    ("nccl2_linear_regression.py", "python -m parafluid.distributed.launch --nproc_per_node 2 "
                                   "examples/nccl2_linear_regression.py"),
    ("pserver_linear_regression.py", "python -m parafluid.distributed.launch --server_num 2 "
                                     "--worker_num 2 examples/pserver_linear_regression.py"),
])
def test_an_example_run_without_the_launcher_gives_the_command_that_starts_it(script, command):
    env = child_env()
    assert not any(k.startswith("PADDLE_") or k in ("RANK", "WORLD_SIZE") for k in env)
    proc = run_child([os.path.join("examples", script)], env, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "start it with the launcher" in proc.stderr or "start them all with the launcher" \
        in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].strip() == command, proc.stderr
    assert "Traceback" not in proc.stderr
