"""Ops placed on /node:ps run on the parameter servers because of their place (Fluid's
operator placement design).

The oracle is the unplaced program trained in one process (``node_job.reference``)."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from dist_helpers import ROOT, child_env, endpoints, reap

import parafluid as fluid
from parafluid.testing import node_job
from parafluid.testing.warm_popen import WarmPopen

STEPS = 5
SEED = 5  # per-op generators: each pserver's startup draws what the unplaced program does


def _transpile(placed, trainers=1, pservers="127.0.0.1:6001", optimizer="sgd", trainer_id=0):
    main, startup, loss = node_job.build(placed, optimizer, SEED)
    t = fluid.DistributeTranspiler()
    t.transpile(trainer_id, program=main, startup_program=startup, pservers=pservers,
                trainers=trainers)
    return t, main, startup


def _types(block):
    return [op.type for op in block.ops]


def test_updates_placed_on_ps_go_to_listen_and_serv_with_their_place():
    t, main, startup = _transpile("ps", trainers=2, pservers="127.0.0.1:6001,127.0.0.1:6002",
                                  optimizer="adam")
    assert not {"adam", "scale"} & set(_types(main.global_block()))
    assert _types(main.global_block()).count("send") == 4
    # the optimizer state lives on the pservers: the trainer does not initialize it
    assert not any("moment" in n for op in startup.global_block().ops
                   for n in op.output_arg_names)
    updated = set()
    for ep in ("127.0.0.1:6001", "127.0.0.1:6002"):
        prog = t.get_pserver_program(ep)
        assert _types(prog.global_block()) == ["listen_and_serv"]
        for block in prog.blocks[1:]:
            for op in block.ops:
                if op.type == "adam":
                    assert op.attrs["op_node"] == "ps"
                    updated.add(op.input("Param")[0])
        t.get_startup_program(ep).verify()
    assert updated == set(node_job.PARAMS)


def test_the_place_decides_not_the_role():
    # the output layer's updates on /node:ps, the hidden layer's on the worker
    t, main, startup = _transpile("ps1")
    sgd_on_worker = {op.input("Param")[0] for op in main.global_block().ops if op.type == "sgd"}
    assert sgd_on_worker == {"fc_0.w_0", "fc_0.b_0"}
    sent = {op.input("X")[0] for op in main.global_block().ops if op.type == "send"}
    assert sent == {"fc_1.w_0@GRAD", "fc_1.b_0@GRAD"}
    prog = t.get_pserver_program("127.0.0.1:6001")
    on_ps = {op.input("Param")[0] for b in prog.blocks[1:] for op in b.ops if op.type == "sgd"}
    assert on_ps == {"fc_1.w_0", "fc_1.b_0"}


def test_a_forward_op_placed_on_ps_is_refused_naming_it():
    main, startup, loss = node_job.build("ps", "sgd", SEED)
    tanh = next(op for op in main.global_block().ops if op.type == "tanh")
    tanh.attrs["op_node"] = "ps"
    with pytest.raises(ValueError, match=r"op #2 tanh \(created at .*\), placed on "
                                         r"'/node:ps/cpu', is not a parameter update"):
        fluid.DistributeTranspiler().transpile(0, program=main, startup_program=startup,
                                               pservers="127.0.0.1:6001", trainers=1)


def test_updates_left_on_the_workers_of_several_trainers_are_refused():
    with pytest.raises(ValueError, match=r"updates fc_0\.\w+ on '/node:worker/cpu' while other "
                                         r"updates are placed on /node:ps; with 2 trainers"):
        _transpile("ps1", trainers=2)


def _start(role, *args, env):
    cmd = [sys.executable, "-m", "parafluid.testing.node_job", role, "--seed", str(SEED),
           "--steps", str(STEPS), *map(str, args)]
    return WarmPopen(cmd, env=env, cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _result(out):
    lines = [ln for ln in out.splitlines() if ln.startswith("{")]
    return json.loads(lines[-1]) if lines else None


def _run_job(placed, trainers, pservers, optimizer):
    eps = endpoints(pservers)
    env = child_env(FLAGS_rpc_deadline="30000")
    common = ["--placed", placed, "--pservers", eps, "--trainers", trainers,
              "--optimizer", optimizer]
    procs = []
    try:
        procs += [_start("pserver", *common, "--endpoint", ep, env=env)
                  for ep in eps.split(",")]
        procs += [_start("worker", *common, "--trainer-id", t, env=env)
                  for t in range(trainers)]
        outs = [p.communicate(timeout=75) for p in procs]
    finally:
        reap(procs)
    for p, (_, err) in zip(procs, outs):
        assert p.returncode == 0, err
    return [_result(o) for o, _ in outs[pservers:]]


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_placement_design_example_shape_updates_on_two_pservers_equal_the_unplaced_program():
    # forward/backward on 2 workers (half a batch each), Adam's updates on /node:ps
    results = _run_job("ps", 2, 2, "adam")
    ref = node_job.reference(STEPS, "adam", SEED)
    losses = np.mean([r["losses"] for r in results], axis=0)
    np.testing.assert_allclose(losses, ref["losses"], atol=1e-5)
    for r in results:
        for name in node_job.PARAMS:
            np.testing.assert_allclose(r["params"][name], ref["params"][name], atol=1e-5)


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_some_updates_on_ps_others_on_the_worker_equal_the_unplaced_program():
    r, = _run_job("ps1", 1, 1, "sgd")
    ref = node_job.reference(STEPS, "sgd", SEED)
    np.testing.assert_allclose(r["losses"], ref["losses"], atol=1e-5)
    for name in node_job.PARAMS:
        np.testing.assert_allclose(r["params"][name], ref["params"][name], atol=1e-5)
