"""A transpiled program keeps what the transpiler recorded about the job (``program.meta``)
through ``clone`` and through serialization, and a copy behaves as the original (one
process: the checks that read the records, not the jobs)."""

from __future__ import annotations

import numpy as np
import pytest

import parafluid as fluid
from parafluid.passes import executor_pipeline
from parafluid.testing import node_job, ps_job

COPIES = {
    "clone": lambda p: p.clone(),
    "clone for test": lambda p: p.clone(for_test=True),
    "saved and loaded": lambda p: fluid.Program.parse_from_string(p.serialize_to_string()),
}
EPS = "127.0.0.1:6170,127.0.0.1:6171,127.0.0.1:6172"


def _nccl2(trainer_id: int = 1):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data(name="x", shape=[3], dtype="float32")
        loss = fluid.layers.mean(fluid.layers.fc(input=x, size=2))
        fluid.optimizer.SGD(0.1).minimize(loss)
    config = fluid.DistributeTranspilerConfig()
    config.mode = "nccl2"
    fluid.DistributeTranspiler(config=config).transpile(
        trainer_id, program=main, startup_program=startup, trainers=EPS,
        current_endpoint=EPS.split(",")[trainer_id])
    return main, startup, loss


@pytest.mark.parametrize("copy", sorted(COPIES))
def test_an_nccl2_trainer_program_keeps_its_trainers(copy):
    main, startup, loss = _nccl2()
    for original in (main, startup):
        same = COPIES[copy](original)
        assert same.meta == original.meta
        assert (same.meta.num_trainers, same.meta.trainer_id) == (3, 1)
        assert same._trainers_endpoints == EPS.split(",")  # Fluid's name for the list
    # the ParallelExecutor checks the trainers it is given against the program's endpoints
    same = COPIES[copy](main)
    for program in (main, same):
        with pytest.raises(ValueError, match=r"num_trainers=2 but 3 trainer endpoints are "
                                             r"known \(\['127.0.0.1:6170'"):
            fluid.ParallelExecutor(use_cuda=False, loss_name=loss.name, main_program=program,
                                   num_trainers=2, trainer_id=1)


@pytest.mark.parametrize("copy", sorted(COPIES))
def test_a_worker_of_a_program_split_by_node_stays_that_worker(copy):
    main, startup, _ = node_job.build("nodes")
    t = fluid.DistributeTranspiler()
    t.transpile(1, program=main, startup_program=startup,
                trainers="127.0.0.1:7000,127.0.0.1:7001")
    w1 = t.get_trainer_program(wait_port=False)
    same = COPIES[copy](w1)
    assert same.meta.placement_node == ("worker", 1) and same.meta.trainer_id == 1
    assert COPIES[copy](startup).meta.placement_node == ("worker", 1)
    # its ops are placed on /node:worker:1: the executor runs them here as the original does
    # (a copy that forgot the node would be refused as a program of another node)
    want = executor_pipeline()(w1.clone(for_test=copy == "clone for test"))
    assert str(executor_pipeline()(same)) == str(want)


@pytest.mark.parametrize("copy", sorted(COPIES))
def test_a_hybrid_stage_keeps_its_data_parallel_devices(copy):
    main, startup, _ = node_job.build("hybrid")
    t = fluid.DistributeTranspiler()
    t.transpile(0, program=main, startup_program=startup,
                trainers="127.0.0.1:7000,127.0.0.1:7001")
    w0 = t.get_trainer_program(wait_port=False)
    assert COPIES[copy](w0).meta.data_parallel_devices == ["cpu:0", "cpu:1"]


class _Pool:
    """Stands in for the trainer's pserver clients: records the checkpoint requests and
    answers each as a pserver would, with the record of the file it wrote."""

    calls: list = []

    def __init__(self, trainer_id: int) -> None:
        self.trainer_id = trainer_id

    def step(self, endpoints) -> int:
        return 0

    def checkpoint_notify(self, dirname: str, endpoints, keep=None) -> list[dict]:
        _Pool.calls.append((self.trainer_id, list(endpoints)))
        return [{"file": f"pserver_{i}.safetensors", "step": 0, "bytes": 0, "sha256": ""}
                for i, _ in enumerate(endpoints)]


@pytest.mark.parametrize("copy", sorted(COPIES))
def test_a_pserver_trainer_program_still_asks_its_pservers_to_save(copy, tmp_path,
                                                                   monkeypatch):
    import parafluid.distributed.ps_registry as registry

    eps = "127.0.0.1:6174,127.0.0.1:6175"
    main, startup, _ = ps_job.build("sgd")
    t = fluid.DistributeTranspiler(ps_job._config("round_robin", 100, True))
    t.transpile(1, program=main, startup_program=startup, pservers=eps, trainers=2)
    trainer = t.get_trainer_program(wait_port=False)
    same = COPIES[copy](trainer)
    assert same.meta == trainer.meta
    assert (same.meta.trainer_id, same.meta.pserver_endpoints) == (1, eps.split(","))
    for ep in eps.split(","):
        prog, pstartup = t.get_pserver_program(ep), t.get_startup_program(ep)
        assert COPIES[copy](prog).meta == prog.meta
        assert COPIES[copy](pstartup).meta.placement_node == ("ps", eps.split(",").index(ep))

    monkeypatch.setattr(registry, "client_pool", _Pool)
    monkeypatch.setattr(_Pool, "calls", [])
    scope = fluid.Scope()
    for var in trainer.list_vars():
        if var.persistable and var.shape is not None and -1 not in var.shape:
            scope.var(var.name).get_tensor().set(np.zeros(var.shape, var.dtype),
                                                 fluid.CPUPlace())
    exe = fluid.Executor(fluid.CPUPlace())
    fluid.io.save_persistables(exe, str(tmp_path / "a"), trainer, scope=scope)
    fluid.io.save_persistables(exe, str(tmp_path / "b"), same, scope=scope)
    assert _Pool.calls == [(1, eps.split(","))] * 2
