"""fluid.contrib's distributed lookup table helpers over a real pserver-mode checkpoint:
2 pservers and 2 trainers (threads of this process, over ZeroMQ on 127.0.0.1) train with a
distributed embedding table and save; the helpers turn that into a local program and back
into a pserver's state."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from dist_helpers import endpoints, run_threads

import parafluid as fluid
from parafluid.contrib import (
    convert_dist_to_sparse_program,
    load_persistables_for_increment,
    load_persistables_for_inference,
)
from parafluid.testing import ps_job

pytestmark = pytest.mark.slow

STEPS = 3


@pytest.fixture
def job(tmp_path, monkeypatch):
    """Train STEPS steps with the distributed table; trainer 0 saves after the last."""
    monkeypatch.setenv("FLAGS_rpc_deadline", "15000")
    monkeypatch.setenv("PARAFLUID_CHECKPOINT_ROOT", str(tmp_path))
    ckpt = str(tmp_path / "ckpt")
    eps = endpoints(2)
    kw = dict(optimizer="sgd", embedding="distributed", split_method="hash_name")
    calls = [(ps_job.run_pserver, (ep, eps, 2), kw) for ep in eps.split(",")]
    calls += [(ps_job.run_trainer, (t, eps, 2, STEPS),
               dict(checkpoint_at=STEPS, checkpoint_dir=ckpt, **kw)) for t in range(2)]
    results = run_threads(calls)
    return ckpt, eps, results[0]["final"]


def _transpiler(eps):
    main, startup, loss = ps_job.build("sgd", embedding="distributed")
    t = fluid.DistributeTranspiler(ps_job._config("hash_name", 100, True))
    t.transpile(0, program=main, startup_program=startup, pservers=eps, trainers=2)
    return t, main, loss


@pytest.mark.timeout(120)
def test_a_distributed_table_checkpoint_loads_into_a_local_sparse_program(job):
    ckpt, eps, final = job
    _, trainer, loss = _transpiler(eps)
    local = convert_dist_to_sparse_program(trainer)
    types = [op.type for op in local.global_block().ops]
    assert "distributed_lookup_table" not in types and "distributed_lookup_table_grad" not in types
    lookup = next(op for op in local.global_block().ops if op.type == "lookup_table")
    assert lookup.input("W") == ["emb"] and lookup.attr("is_sparse")
    assert not lookup.attr("is_distributed")
    emb = local.global_block().var("emb")
    assert emb.persistable and tuple(emb.shape) == (ps_job.VOCAB, ps_job.EMB)
    assert local._distributed_lookup_table is None

    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    assert load_persistables_for_inference(ckpt, exe, local, "emb", scope=scope) is local
    for p in (*ps_job.PARAMS, "emb"):
        np.testing.assert_allclose(np.array(scope.find_var(p).get_tensor()), final[p],
                                   atol=1e-6, err_msg=p)
    # the converted program computes what the untranspiled model computes with these values
    # (its forward part: what a test clone keeps, less the trainer's RPC with the pservers)
    test = local.clone(for_test=True)
    rpc = fluid.framework.OpRole.RPC | fluid.framework.OpRole.Dist
    test.global_block().ops = [op for op in test.global_block().ops
                               if not op.attr("op_role") & rpc]
    ref_main, ref_startup, ref_loss = ps_job.build("sgd", embedding="local")
    ref_scope = fluid.Scope()
    exe.run(ref_startup, scope=ref_scope)
    for p in (*ps_job.PARAMS, "emb"):
        ref_scope.find_var(p).get_tensor().set(np.array(final[p], dtype="float32"))
    x, y = next(ps_job.batches(1, 2, seed=3))
    ids = ps_job.ids_of(1, 2)[0]
    feed = {"x": x, "y": y, "ids": ids}
    got, = exe.run(test, feed=feed, fetch_list=[loss.name], scope=scope)
    want, = exe.run(ref_main.clone(for_test=True), feed=feed, fetch_list=[ref_loss.name],
                    scope=ref_scope)
    np.testing.assert_allclose(got, want, rtol=1e-5)

    with pytest.raises(ValueError, match="has no variable 'nope'"):
        load_persistables_for_inference(ckpt, exe, local, "nope", scope=scope)


@pytest.mark.timeout(120)
def test_a_pserver_loads_its_blocks_and_a_table_shard_for_increment(job, tmp_path):
    ckpt, eps, final = job
    t, _, _ = _transpiler(eps)
    ep0 = eps.split(",")[0]
    prog, pstartup = t.get_pserver_programs(ep0)
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(pstartup, scope=scope)
    shard = np.full((ps_job.VOCAB // 2, ps_job.EMB), 0.25, dtype="float32")
    table_file = str(tmp_path / "emb_shard.safetensors")
    # the pserver holds its shard under the table's own name, as Fluid's
    fluid.io.write_tensors(table_file, {"emb": torch.from_numpy(shard)})
    load_persistables_for_increment(ckpt, exe, prog, "emb", table_file, scope=scope)
    np.testing.assert_array_equal(np.array(scope.find_var("emb").get_tensor()), shard)
    # the pserver's other blocks come from the checkpoint: they equal the trained values
    checked = 0
    for name in prog.global_block().vars:
        base, _, block = name.partition(".block")
        if base not in ps_job.PARAMS:
            continue
        want = np.array(final[base])
        if block:  # whole rows, block i of two
            rows = -(-want.shape[0] // 2)
            want = want[int(block) * rows:(int(block) + 1) * rows]
        np.testing.assert_allclose(np.array(scope.find_var(name).get_tensor()), want,
                                   atol=1e-6, err_msg=name)
        checked += 1
    assert checked >= 1
    # the version of pserver 0's file that the committed checkpoint names
    _, pserver_file = fluid.io.checked_checkpoint_file(ckpt, "pserver_0.safetensors")
    load_persistables_for_increment(ckpt, exe, prog, "emb", pserver_file, scope=scope)
    np.testing.assert_allclose(np.array(scope.find_var("emb").get_tensor()),
                               np.array(final["emb"])[: ps_job.VOCAB // 2], atol=1e-6)
    with pytest.raises(ValueError, match="has no variable 'emb.block1'"):
        load_persistables_for_increment(ckpt, exe, prog, "emb.block1", table_file, scope=scope)
    fluid.io.write_tensors(table_file, {"other": torch.from_numpy(shard)})
    with pytest.raises(ValueError, match=r"holds \['other'\], not 'emb'"):
        load_persistables_for_increment(ckpt, exe, prog, "emb", table_file, scope=scope)
