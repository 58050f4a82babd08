"""Fluid 1.6's fleet API (``fluid.incubate.fleet``): the role makers, and the example script
in both modes under the launcher, equal to one process on the whole batch."""

from __future__ import annotations

import importlib.util
import os

import numpy as np
import pytest
from dist_helpers import ROOT, child_env, run_child

import parafluid as fluid
from parafluid.compat import NotProvidedError
from parafluid.incubate.fleet.base import role_maker
from parafluid.incubate.fleet.base.fleet_base import Fleet, Mode
from parafluid.incubate.fleet.collective import DistributedStrategy
from parafluid.incubate.fleet.collective import fleet as collective_fleet
from parafluid.incubate.fleet.parameter_server.distribute_transpiler import fleet as ps_fleet

EXAMPLE = os.path.join(ROOT, "examples", "fleet_train.py")
STEPS = 6


def _example():
    spec = importlib.util.spec_from_file_location("fleet_train", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _clear_env(monkeypatch):
    for k in list(os.environ):
        if k.startswith("PADDLE_") or k in ("TRAINING_ROLE", "POD_IP", "RANK", "WORLD_SIZE"):
            monkeypatch.delenv(k)


def test_paddle_cloud_role_maker_reads_the_launchers_variables(monkeypatch):
    _clear_env(monkeypatch)
    common = {"PADDLE_PSERVER_ENDPOINTS": "127.0.0.1:7001,127.0.0.1:7002",
              "PADDLE_TRAINERS_NUM": "3",
              "PADDLE_TRAINER_ENDPOINTS": "127.0.0.1:7101,127.0.0.1:7102,127.0.0.1:7103"}
    for k, v in common.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("PADDLE_TRAINING_ROLE", "PSERVER")
    monkeypatch.setenv("PADDLE_CURRENT_ENDPOINT", "127.0.0.1:7002")
    server = role_maker.PaddleCloudRoleMaker()
    assert server.is_server() and not server.is_worker() and server.server_index() == 1
    assert server.get_pserver_endpoints() == ["127.0.0.1:7001", "127.0.0.1:7002"]
    assert server.worker_num() == 3
    monkeypatch.setenv("PADDLE_TRAINING_ROLE", "TRAINER")
    monkeypatch.setenv("PADDLE_TRAINER_ID", "2")
    monkeypatch.setenv("PADDLE_CURRENT_ENDPOINT", "127.0.0.1:7103")
    worker = role_maker.PaddleCloudRoleMaker()
    assert worker.is_worker() and worker.worker_index() == 2 and not worker.is_first_worker()
    coll = role_maker.PaddleCloudRoleMaker(is_collective=True)
    assert coll.get_trainer_endpoints() == common["PADDLE_TRAINER_ENDPOINTS"].split(",")
    assert coll.worker_num() == 3 and coll.worker_index() == 2
    assert "role: worker, current_id: 2" in coll.to_string()


def test_paddle_cloud_role_maker_reads_fluids_pserver_ips_and_port(monkeypatch):
    _clear_env(monkeypatch)
    monkeypatch.setenv("PADDLE_PSERVERS", "10.0.0.1,10.0.0.2")
    monkeypatch.setenv("PADDLE_PORT", "6174")
    monkeypatch.setenv("PADDLE_TRAINERS_NUM", "2")
    monkeypatch.setenv("PADDLE_TRAINER_ID", "1")
    monkeypatch.setenv("PADDLE_TRAINING_ROLE", "TRAINER")
    rm = role_maker.PaddleCloudRoleMaker()
    assert rm.get_pserver_endpoints() == ["10.0.0.1:6174", "10.0.0.2:6174"]
    assert rm.worker_index() == 1 and rm.worker_num() == 2
    monkeypatch.setenv("PADDLE_PORT", "1,2,3")
    with pytest.raises(ValueError, match="PADDLE_PORT lists 3 ports for 2 PADDLE_PSERVERS"):
        role_maker.PaddleCloudRoleMaker().generate_role()


@pytest.mark.parametrize("value", ["pserver", "Trainer", "WORKER", None])
def test_paddle_cloud_role_maker_refuses_a_role_that_is_not_trainer_or_pserver(monkeypatch,
                                                                               value):
    """Lower case, another word, or nothing: a pserver-mode process is not quietly a
    trainer."""
    _clear_env(monkeypatch)
    monkeypatch.setenv("PADDLE_PSERVER_ENDPOINTS", "127.0.0.1:7001")
    monkeypatch.setenv("PADDLE_TRAINERS_NUM", "1")
    if value is not None:
        monkeypatch.setenv("TRAINING_ROLE", value)
        match = f"TRAINING_ROLE must be TRAINER or PSERVER \\(upper case\\), got '{value}'"
    else:
        match = r"PADDLE_TRAINING_ROLE \(or TRAINING_ROLE\) is not set"
    with pytest.raises(ValueError, match=match):
        role_maker.PaddleCloudRoleMaker().generate_role()
    # a collective job's processes are all trainers: no role variable is needed there
    _clear_env(monkeypatch)
    monkeypatch.setenv("PADDLE_TRAINER_ENDPOINTS", "127.0.0.1:7101")
    monkeypatch.setenv("PADDLE_TRAINERS_NUM", "1")
    monkeypatch.setenv("PADDLE_TRAINER_ID", "0")
    coll = role_maker.PaddleCloudRoleMaker(is_collective=True)
    coll.generate_role()
    assert coll.is_worker()


def test_paddle_cloud_role_maker_refuses_pserver_lists_that_disagree(monkeypatch):
    # the role maker reads the job through distributed/env.py: two pserver lists that
    # disagree are refused, not settled by taking the first
    _clear_env(monkeypatch)
    monkeypatch.setenv("PADDLE_TRAINING_ROLE", "TRAINER")
    monkeypatch.setenv("PADDLE_PSERVER_ENDPOINTS", "127.0.0.1:7001,127.0.0.1:7002")
    monkeypatch.setenv("PADDLE_PSERVERS_IP_PORT_LIST", "127.0.0.1:7001")
    with pytest.raises(ValueError, match="PADDLE_PSERVER_ENDPOINTS=.* and "
                                         "PADDLE_PSERVERS_IP_PORT_LIST=.* disagree"):
        role_maker.PaddleCloudRoleMaker().generate_role()
    monkeypatch.delenv("PADDLE_PSERVERS_IP_PORT_LIST")
    monkeypatch.setenv("PADDLE_PSERVERS", "10.0.0.1")
    with pytest.raises(ValueError, match="PADDLE_PSERVERS with PADDLE_PORT=10.0.0.1:6174 and "
                                         "PADDLE_PSERVER_ENDPOINTS=.* disagree"):
        role_maker.PaddleCloudRoleMaker().generate_role()
    with pytest.raises(ValueError, match="disagree"):
        fluid.distributed.env()
    monkeypatch.setenv("PADDLE_PSERVERS", "127.0.0.1,127.0.0.1")
    monkeypatch.setenv("PADDLE_PORT", "7001,7002")
    rm = role_maker.PaddleCloudRoleMaker()  # the same list twice is one list
    assert rm.get_pserver_endpoints() == ["127.0.0.1:7001", "127.0.0.1:7002"]
    assert fluid.distributed.env().pserver_endpoints == rm.get_pserver_endpoints()


def test_role_makers_refuse_bad_settings_by_name(monkeypatch):
    _clear_env(monkeypatch)
    with pytest.raises(ValueError, match="no pserver endpoints.*launch --server_num"):
        role_maker.PaddleCloudRoleMaker().generate_role()
    with pytest.raises(ValueError, match="PADDLE_TRAINER_ENDPOINTS is not set"):
        role_maker.PaddleCloudRoleMaker(is_collective=True).generate_role()
    with pytest.raises(ValueError, match="server current_id 2 is not an index of the 2"):
        role_maker.UserDefinedRoleMaker(current_id=2, role=role_maker.Role.SERVER,
                                        worker_num=2,
                                        server_endpoints=["127.0.0.1:1", "127.0.0.1:2"])
    with pytest.raises(ValueError, match="server_endpoints"):
        role_maker.UserDefinedRoleMaker(worker_num=1, server_endpoints="127.0.0.1:1")
    with pytest.raises(ValueError, match="current_id must be an index of the 1"):
        role_maker.UserDefinedCollectiveRoleMaker(current_id=1,
                                                  worker_endpoints=["127.0.0.1:1"])
    with pytest.raises(NotImplementedError, match="needs MPI"):
        role_maker.MPISymetricRoleMaker()


def test_user_defined_roles_and_split_files():
    f = Fleet(Mode.TRANSPILER)
    with pytest.raises(RuntimeError, match="call fleet.init"):
        f.worker_index()
    f.init(role_maker.UserDefinedRoleMaker(current_id=1, role=role_maker.Role.WORKER,
                                           worker_num=2,
                                           server_endpoints=["127.0.0.1:1", "127.0.0.1:2"]))
    assert f.is_worker() and f.worker_index() == 1 and f.server_num() == 2
    assert f.server_endpoints(to_string=True) == "127.0.0.1:1,127.0.0.1:2"
    assert f.split_files(["a", "b", "c", "d", "e"]) == ["d", "e"]
    c = Fleet(Mode.COLLECTIVE)
    c.init(role_maker.UserDefinedCollectiveRoleMaker(
        current_id=0, worker_endpoints=["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"]))
    assert c.is_first_worker() and c.worker_num() == 3
    assert c.split_files(["a", "b"]) == ["a"]
    with pytest.raises(ValueError, match="role_maker must be a RoleMakerBase"):
        c.init(role_maker="worker")


def test_the_transpiler_fleet_makes_the_role_s_programs():
    eps = ["127.0.0.1:6170", "127.0.0.1:6171"]
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        loss, _ = _example().network()
        ps_fleet.init(role_maker.UserDefinedRoleMaker(current_id=1, role=role_maker.Role.SERVER,
                                                      worker_num=2, server_endpoints=eps))
        with pytest.raises(ValueError, match="must be a DistributeTranspilerConfig"):
            ps_fleet.distributed_optimizer(fluid.optimizer.SGD(0.1), strategy={})
        opt = ps_fleet.distributed_optimizer(fluid.optimizer.SGD(0.1))
        opt.minimize(loss)
    server_ops = [op.type for op in ps_fleet.main_program.global_block().ops]
    assert server_ops == ["listen_and_serv"]
    with pytest.raises(ValueError, match="this process is a server"):
        ps_fleet.init_worker()
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        loss, _ = _example().network()
        ps_fleet.init(role_maker.UserDefinedRoleMaker(current_id=0, worker_num=2,
                                                      server_endpoints=eps))
        strategy = fluid.DistributeTranspilerConfig()
        strategy.wait_port = False  # no pserver runs: only the programs are built
        ps_fleet.distributed_optimizer(fluid.optimizer.SGD(0.1), strategy).minimize(loss)
    trainer_ops = [op.type for op in ps_fleet.main_program.global_block().ops]
    assert "send" in trainer_ops and "recv" in trainer_ops and "sgd" not in trainer_ops
    assert ps_fleet.main_program._is_distributed and ps_fleet.startup_program is startup


def test_the_collective_fleet_refuses_what_it_does_not_provide():
    collective_fleet.init(role_maker.UserDefinedCollectiveRoleMaker(
        current_id=0, worker_endpoints=["127.0.0.1:6170", "127.0.0.1:6171"]))
    s = DistributedStrategy()
    s.use_local_sgd = True
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        loss, _ = _example().network()
        with pytest.raises(NotImplementedError, match="use_local_sgd=True is not provided"):
            collective_fleet.distributed_optimizer(fluid.optimizer.SGD(0.1), s).minimize(loss)
    with pytest.raises(ValueError, match="must be a DistributedStrategy"):
        collective_fleet.distributed_optimizer(fluid.optimizer.SGD(0.1),
                                               fluid.BuildStrategy())
    with pytest.raises(TypeError, match="exec_strategy must be an ExecutionStrategy"):
        s.exec_strategy = 4


def test_pslib_is_a_stand_in():
    from parafluid.incubate.fleet.parameter_server.pslib import fleet

    with pytest.raises(NotProvidedError, match="PSLib"):
        fleet.init()


def _one_process(out: str, workers: int) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """The parameters one process reaches on the whole batch, and its predictions for the
    first batch's rows."""
    ex = _example()
    main, startup = fluid.Program(), fluid.Program()
    scope = fluid.Scope()
    with fluid.program_guard(main, startup), fluid.scope_guard(scope), \
            fluid.unique_name.guard():
        loss, pred = ex.network()
        test_program = main.clone(for_test=True)
        fluid.optimizer.Momentum(learning_rate=0.1, momentum=0.9).minimize(loss)
        exe = fluid.Executor(fluid.CPUPlace())
        exe.run(startup)
        params = [p.name for p in main.global_block().all_parameters()]
        for p in params:
            scope.find_var(p).get_tensor().set(
                np.load(os.path.join(out, f"{p}.initial.npy")), fluid.CPUPlace())
        batches = ex.batches(STEPS, workers)
        for x, y in batches:
            exe.run(main, feed={"x": x, "y": y}, fetch_list=[loss.name])
        predicted, = exe.run(test_program, feed={"x": batches[0][0], "y": batches[0][1]},
                             fetch_list=[pred.name])
        return {p: np.array(scope.find_var(p).get_tensor()) for p in params}, predicted


@pytest.mark.slow
@pytest.mark.timeout(150)
@pytest.mark.parametrize("mode", ["pserver", "collective"])
def test_the_fleet_example_equals_one_process_on_the_whole_batch(mode, tmp_path):
    out = str(tmp_path / "out")
    launch = ["--server_num", "2", "--worker_num", "2"] if mode == "pserver" else \
        ["--nproc_per_node", "2"]
    extra = ["--collective"] if mode == "collective" else []
    env = child_env(CPU_NUM="1", FLAGS_rpc_deadline="30000",
                    PARAFLUID_CHECKPOINT_ROOT=str(tmp_path))
    proc = run_child(["-m", "parafluid.distributed.launch", *launch, EXAMPLE, *extra,
                      "--steps", str(STEPS), "--out", out], env, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "worker 0 of 2" in proc.stdout and "worker 1 of 2" in proc.stdout, proc.stdout
    want, predicted = _one_process(out, workers=2)
    for p, v in want.items():
        got = np.load(os.path.join(out, f"{p}.final.npy"))
        assert not np.allclose(got, np.load(os.path.join(out, f"{p}.initial.npy"))), p
        np.testing.assert_allclose(got, v, rtol=0, atol=1e-5, err_msg=p)
    losses = np.load(os.path.join(out, "losses.npy"))
    assert losses[-1] < losses[0]
    # fleet.save_inference_model: the program as written with the trained parameters
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    with fluid.scope_guard(scope):
        program, feeds, targets = fluid.io.load_inference_model(os.path.join(out, "infer"), exe)
        assert feeds == ["x"]
        got, = exe.run(program, feed={"x": _example().batches(STEPS, 2)[0][0]},
                       fetch_list=targets)
    np.testing.assert_allclose(got, predicted, rtol=0, atol=1e-5)
    # fleet.save_persistables: a checkpoint of the job, the parameters as trained
    ckpt = os.path.join(out, "ckpt")
    if mode == "pserver":  # the pservers wrote their blocks: a pserver starts from them
        assert os.path.exists(os.path.join(ckpt, "__checkpoint__.json")), os.listdir(ckpt)
        _pserver_starts_from(ckpt, want)
    else:
        main, startup = fluid.Program(), fluid.Program()
        with fluid.program_guard(main, startup), fluid.scope_guard(scope), \
                fluid.unique_name.guard():
            _example().network()
            fluid.io.load_persistables(exe, ckpt, main)
            for p, v in want.items():
                np.testing.assert_allclose(np.array(scope.find_var(p).get_tensor()), v,
                                           rtol=0, atol=1e-5, err_msg=p)


def _pserver_starts_from(ckpt: str, want: dict[str, np.ndarray]) -> None:
    """``fleet.init_server(model_dir=ckpt)`` as pserver 0 of a job like the example's: every
    parameter block it then holds is rows of the trained parameter."""
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        loss, _ = _example().network()
        ps_fleet.init(role_maker.UserDefinedRoleMaker(
            current_id=0, role=role_maker.Role.SERVER, worker_num=2,
            server_endpoints=["127.0.0.1:6170", "127.0.0.1:6171"]))
        ps_fleet.distributed_optimizer(
            fluid.optimizer.Momentum(learning_rate=0.1, momentum=0.9)).minimize(loss)
    scope = fluid.Scope()
    with fluid.scope_guard(scope):
        ps_fleet.init_server(model_dir=ckpt)
    held = 0
    for var in ps_fleet.main_program.list_vars():
        name = var.name.split(".block")[0]
        if name not in want or not var.persistable:
            continue
        block = np.array(scope.find_var(var.name).get_tensor()).reshape(-1, *want[name].shape[1:])
        rows = len(block)
        assert any(np.allclose(block, want[name][i:i + rows], rtol=0, atol=1e-5)
                   for i in range(len(want[name]) - rows + 1)), var.name
        held += 1
    assert held, "pserver 0 holds no parameter block"


def test_the_example_started_alone_says_how_to_start_it():
    env = child_env()
    proc = run_child([EXAMPLE], env, timeout=60)
    assert proc.returncode == 2
    assert "python -m parafluid.distributed.launch --server_num 2" in proc.stderr
