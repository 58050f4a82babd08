"""A save killed (SIGKILL) halfway into a folder that holds a committed checkpoint leaves
that checkpoint loadable with its values, in every mode: Executor, ParallelExecutor,
collective (fleet), the imperative mode, and pserver mode (killed while a pserver, the
trainer, or the marker is being written)."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import parafluid as fluid
from parafluid.testing import ps_job
from parafluid.testing.warm_popen import WarmPopen

HERE = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(os.path.dirname(HERE))
WORKER = os.path.join(HERE, "killed_save_worker.py")

pytestmark = pytest.mark.slow


def _killed_save(tmp_path, *args: str) -> tuple[str, str]:
    """Run the worker (first save, copy, second save killed); (checkpoint, copy) folders."""
    ckpt, ref = str(tmp_path / "ckpt"), str(tmp_path / "ref")
    env = dict(os.environ, PYTHONPATH=REPO_ROOT, PARAFLUID_CHECKPOINT_ROOT=str(tmp_path),
               FLAGS_rpc_deadline="60000")
    child = WarmPopen([sys.executable, WORKER, args[0], ckpt, ref, *args[1:]], env=env,
                      cwd=str(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                      text=True)
    try:
        _, err = child.communicate(timeout=100)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == -9, err  # killed at the chosen write, not ended otherwise
    assert os.path.isdir(ref), err
    return ckpt, ref


def _static_program():
    from killed_save_worker import static_model

    with fluid.unique_name.guard():
        main, startup, loss = static_model()
        with fluid.program_guard(main, startup):
            fluid.optimizer.Momentum(0.05, 0.9).minimize(loss)
    return main, startup


def _loaded(folder: str, program, startup) -> dict[str, np.ndarray]:
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    fluid.io.load_persistables(exe, folder, program, scope=scope)
    return {n: np.array(scope.find_var(n).get_tensor()) for n, v in
            program.global_block().vars.items() if v.persistable and scope.find_var(n)
            is not None and scope.find_var(n).value is not None}


def _assert_same(got: dict, want: dict) -> None:
    assert sorted(got) == sorted(want) and want
    for name in want:
        np.testing.assert_array_equal(np.asarray(got[name]), np.asarray(want[name]),
                                      err_msg=name)


@pytest.fixture(autouse=True)
def _worker_importable(monkeypatch):
    monkeypatch.syspath_prepend(HERE)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("mode", ["executor", "parallel", "collective"])
def test_a_static_save_killed_midway_keeps_the_previous_checkpoint(tmp_path, mode):
    ckpt, ref = _killed_save(tmp_path, mode)
    main, startup = _static_program()
    _assert_same(_loaded(ckpt, main, startup), _loaded(ref, main, startup))


@pytest.mark.timeout(120)
def test_fluid_save_killed_midway_keeps_the_previous_pair_of_files(tmp_path):
    """Before: the new .pdparams replaced the old one before .pdopt was written, and the
    folder loaded new parameters with the previous optimizer state."""
    ckpt, ref = _killed_save(tmp_path, "fluid_save")
    main, startup = _static_program()
    values = []
    for folder in (ckpt, ref):
        exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
        exe.run(startup, scope=scope)
        with fluid.scope_guard(scope):
            fluid.load(main, os.path.join(folder, "model"), exe)
        values.append({n: np.array(scope.find_var(n).get_tensor()) for n, v in
                       main.global_block().vars.items() if v.persistable and
                       scope.find_var(n) is not None and scope.find_var(n).value is not None})
    _assert_same(*values)


def test_fluid_load_refuses_parameters_and_state_of_two_saves(tmp_path):
    from killed_save_worker import batch

    main, startup = _static_program()
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    with fluid.scope_guard(scope):
        exe.run(startup)
        fluid.save(main, str(tmp_path / "a" / "model"))
        exe.run(main, feed=batch())
        fluid.save(main, str(tmp_path / "b" / "model"))
        fluid.load(main, str(tmp_path / "a" / "model"), exe)  # one save: loads
        os.replace(tmp_path / "b" / "model.pdopt", tmp_path / "a" / "model.pdopt")
        with pytest.raises(ValueError, match="written by two different saves"):
            fluid.load(main, str(tmp_path / "a" / "model"), exe)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("mode", ["dygraph", "dygraph_persistables"])
def test_an_imperative_save_killed_midway_keeps_the_previous_one(tmp_path, mode):
    ckpt, ref = _killed_save(tmp_path, mode)
    if mode == "dygraph":
        got, want = (fluid.dygraph.load_dygraph(os.path.join(d, "model"))[0]
                     for d in (ckpt, ref))
    else:
        got, want = (fluid.dygraph.load_persistables(d)[0] for d in (ckpt, ref))
    _assert_same(got, want)


@pytest.mark.timeout(150)
@pytest.mark.parametrize("target", ["pserver_1", "__variables__", "__checkpoint__"])
def test_a_pserver_mode_save_killed_midway_keeps_the_previous_checkpoint(tmp_path, target):
    """Before: the save removed the marker first, and the folder loaded nothing."""
    ckpt, ref = _killed_save(tmp_path, "pserver", target)
    eps = "127.0.0.1:1,127.0.0.1:2"
    programs = []
    for ep in eps.split(","):
        main, startup, _ = ps_job.build("momentum")
        t = fluid.DistributeTranspiler(ps_job._config("round_robin", 100, True))
        t.transpile(0, program=main, startup_program=startup, pservers=eps, trainers=2)
        programs.append(t.get_pserver_programs(ep))
    for prog, pstartup in programs:  # every pserver's state of step 2, as committed
        _assert_same(_loaded(ckpt, prog, pstartup), _loaded(ref, prog, pstartup))
    for name in ("__variables__.safetensors", "pserver_0.safetensors", "pserver_1.safetensors"):
        assert fluid.io.check_checkpoint_file(ckpt, name) == 2
    # the trainer's file too (its startup program would pull from the pservers: read it)
    got, want = (fluid.io.read_tensors(fluid.io.checked_checkpoint_file(
        d, "__variables__.safetensors")[1])[0] for d in (ckpt, ref))
    _assert_same({k: v.numpy() for k, v in got.items()}, {k: v.numpy() for k, v in want.items()})
