"""fluid.distributed.env(), the transpiler's nccl2 mode and the gen_nccl_id op (one process)."""

from __future__ import annotations

import pytest
import torch
from dist_helpers import endpoints

import parafluid as fluid
from parafluid.distributed.collective import get_collective
from parafluid.distributed.env import env
from parafluid.ops.collective_init import trainer_endpoints
from parafluid.verifier import verify


def test_env_from_torchrun_variables():
    e = env({"RANK": "1", "WORLD_SIZE": "3", "LOCAL_RANK": "1", "MASTER_ADDR": "10.1.2.3",
             "MASTER_PORT": "29500"})
    assert (e.trainer_id, e.trainers, e.trainers_num, e.local_rank, e.source) == \
        (1, 3, 3, 1, "torchrun")
    assert e.trainer_endpoints == ["10.1.2.3:29501", "10.1.2.3:29502", "10.1.2.3:29503"]
    assert e.current_endpoint == "10.1.2.3:29502"


def test_env_from_paddle_variables():
    e = env({"PADDLE_TRAINER_ID": "1", "PADDLE_TRAINERS_NUM": "2",
             "PADDLE_TRAINER_ENDPOINTS": "10.0.0.1:6170,10.0.0.2:6170",
             "PADDLE_CURRENT_ENDPOINT": "10.0.0.2:6170"})
    assert (e.trainer_id, e.trainers, e.current_endpoint, e.training_role, e.source) == \
        (1, 2, "10.0.0.2:6170", "TRAINER", "paddle")
    assert env({}).trainers == 1 and env({}).source == "default"


@pytest.mark.parametrize("environ, message", [
    ({"RANK": "0"}, "RANK is set but WORLD_SIZE is not"),
    ({"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "h"}, "MASTER_PORT is not"),
    ({"RANK": "2", "WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "1"},
     "RANK=2 must be < WORLD_SIZE=2"),
    ({"PADDLE_TRAINER_ID": "0", "PADDLE_TRAINERS_NUM": "3",
      "PADDLE_TRAINER_ENDPOINTS": "a:1,b:2"}, "PADDLE_TRAINERS_NUM=3 but PADDLE_TRAINER_ENDPOINTS "
                                              "lists 2"),
    ({"PADDLE_TRAINER_ID": "1", "PADDLE_TRAINERS_NUM": "2", "PADDLE_TRAINER_ENDPOINTS": "a:1,b:2",
      "PADDLE_CURRENT_ENDPOINT": "a:1"}, "must be entry 1"),
    ({"PADDLE_TRAINER_ID": "x"}, "PADDLE_TRAINER_ID must be an integer"),
    ({"PADDLE_TRAINER_ID": "1", "PADDLE_TRAINERS_NUM": "2", "PADDLE_TRAINER_ENDPOINTS": "a:1,b:2",
      "RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "a", "MASTER_PORT": "5"},
     "Fluid's and torchrun's variables are set and disagree"),
])
def test_env_rejects_inconsistent_settings(environ, message):
    with pytest.raises(ValueError, match=message):
        env(environ)


def _nccl2(trainer_id: int, trainers: str, current: str, **kw) -> fluid.DistributeTranspiler:
    config = fluid.DistributeTranspilerConfig()
    config.mode = "nccl2"
    t = fluid.DistributeTranspiler(config=config)
    t.transpile(trainer_id, trainers=trainers, current_endpoint=current, **kw)
    return t


def test_nccl2_mode_appends_gen_nccl_id_to_the_startup_program():
    x = fluid.layers.data(name="x", shape=[3], dtype="float32")
    fluid.layers.fc(input=x, size=2)
    startup, main = fluid.default_startup_program(), fluid.default_main_program()
    before_main = str(main)
    before = str(startup).splitlines()
    _nccl2(1, "127.0.0.1:6170,127.0.0.1:6171,127.0.0.1:6172", "127.0.0.1:6171")
    after = str(startup).splitlines()
    assert after[:len(before)] == before
    assert after[len(before):] == [
        "  {} = gen_nccl_id() {endpoint='127.0.0.1:6171', "
        "endpoint_list=['127.0.0.1:6170', '127.0.0.1:6172'], "
        "hierarchical_allreduce_inter_nranks=0, nccl_comm_num=1, trainer_id=1, "
        "use_hierarchical_allreduce=False}"]
    assert str(main) == before_main  # the executor inserts the all-reduces, not the transpiler
    assert (main.meta.num_trainers, main.meta.trainer_id) == (3, 1)
    assert main._trainers_endpoints == ["127.0.0.1:6170", "127.0.0.1:6171", "127.0.0.1:6172"]
    assert trainer_endpoints(startup.global_block().ops[-1].attrs) == main._trainers_endpoints
    verify(startup)


def test_documented_workers_spelling_and_errors():
    # the nccl2 example of Fluid's DistributeTranspiler reference passes ``workers=``
    t = _nccl2(0, 1, "127.0.0.1:6170", workers="127.0.0.1:6170,127.0.0.1:6171")
    assert t.trainer_num == 2
    with pytest.raises(ValueError, match="must be entry 0"):
        _nccl2(0, "127.0.0.1:6170,127.0.0.1:6171", "127.0.0.1:6171")
    with pytest.raises(ValueError, match="trainer_id must be in 0..1"):
        _nccl2(2, "127.0.0.1:6170,127.0.0.1:6171", "127.0.0.1:6171")
    with pytest.raises(ValueError, match="no parameter gradients; call optimizer.minimize"):
        fluid.DistributeTranspiler().transpile(0, program=fluid.Program(),
                                               pservers="127.0.0.1:6174", trainers=2)
    config = fluid.DistributeTranspilerConfig()
    with pytest.raises(ValueError, match="mode must be one of"):
        config.mode = "ring"
    with pytest.raises(TypeError, match="min_block_size must be int"):
        config.min_block_size = "big"
    with pytest.raises(AttributeError, match="no field 'slice_var'"):
        config.slice_var = True
    # as Fluid's: runtime-split sends only in asynchronous mode, and not back to sync
    with pytest.raises(ValueError, match="make ensure config.sync_mode is false at first"):
        config.runtime_split_send_recv = True
    config.sync_mode = False
    config.runtime_split_send_recv = True
    with pytest.raises(ValueError, match="config.runtime_split_send_recv is false at first"):
        config.sync_mode = True
    assert config.sync_mode is False


@pytest.mark.timeout(30)
def test_gen_nccl_id_runs_the_rendezvous_and_registers_the_communicator(monkeypatch):
    monkeypatch.setenv("CPU_NUM", "2")
    ep = endpoints(1)
    _nccl2(0, ep, ep)
    fluid.Executor(fluid.CPUPlace()).run(fluid.default_startup_program())
    comm = get_collective([ep], 0)
    try:
        assert comm is not None and (comm.nranks, comm.rank_offset, comm.num_trainers) == (2, 0, 1)
        a, b = comm.all_reduce([torch.ones(2), torch.full((2,), 2.0)])
        assert a.tolist() == b.tolist() == [3.0, 3.0]
        comm.check_consistent("anything", "x")  # one trainer: nothing to compare
    finally:
        comm.close()
    assert get_collective([ep], 0) is None
