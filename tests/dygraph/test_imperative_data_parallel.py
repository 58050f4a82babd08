"""fluid.dygraph.prepare_context / DataParallel: one process is the identity; two processes
under the launcher train as the single-process Executor on the whole batch."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import parafluid as fluid
from parafluid.testing.warm_popen import WarmPopen, warm_server_env

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

import imperative_dp_worker  # noqa: E402


def _static_oracle():
    """The same MLP as a Program, the Executor on the whole batch."""
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = fluid.layers.data("x", shape=[4])
        y = fluid.layers.data("y", shape=[1])
        model = imperative_dp_worker.MLP("mlp")
        loss = model(x, y)
        fluid.optimizer.SGD(learning_rate=imperative_dp_worker.LR).minimize(loss)
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.Scope()
    with fluid.scope_guard(scope):
        exe.run(startup)
        losses = [exe.run(main, feed={"x": xb, "y": yb}, fetch_list=[loss])[0].item()
                  for xb, yb in zip(imperative_dp_worker.XS, imperative_dp_worker.YS)]
        params = {p.name: np.array(scope.find_var(p.name).get_tensor())
                  for p in main.all_parameters()}
    return losses, params


def _child_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PADDLE_", "FLAGS_")) and k not in ("RANK", "WORLD_SIZE")}
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    env.update(FLAGS_rpc_deadline="20000", CPU_NUM="1")
    return env


def test_one_process_is_the_identity(tmp_path):
    imperative_dp_worker.train(str(tmp_path))  # no launcher: one trainer, no communicator
    with open(tmp_path / "trainer_0.json") as f:
        got = json.load(f)
    losses, params = _static_oracle()
    assert got["nranks"] == 1
    np.testing.assert_allclose(got["losses"], losses, rtol=1e-5)
    for name, value in params.items():
        np.testing.assert_allclose(got["params"][name], value, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_two_processes_train_as_one_on_the_whole_batch(tmp_path):
    proc = WarmPopen(
        [sys.executable, "-m", "parafluid.distributed.launch", "--nproc_per_node", "2",
         os.path.join(HERE, "imperative_dp_worker.py"), str(tmp_path)],
        env={**_child_env(), **warm_server_env()}, cwd=ROOT, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=100)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)  # the launcher and the trainers it started
            proc.wait(timeout=10)
    assert proc.returncode == 0, (out, err)
    runs = []
    for rank in (0, 1):
        with open(tmp_path / f"trainer_{rank}.json") as f:
            runs.append(json.load(f))
    losses, params = _static_oracle()
    # each trainer's loss is its half's mean over 2: together, the whole batch's mean
    np.testing.assert_allclose(np.add(runs[0]["losses"], runs[1]["losses"]), losses,
                               rtol=1e-5)
    for run in runs:
        assert run["nranks"] == 2
        for name, value in params.items():
            np.testing.assert_allclose(run["params"][name], value, rtol=1e-5, atol=1e-6,
                                       err_msg=f"trainer {run['rank']} {name}")
