"""Model parallelism across processes: a program placed on /node:worker:<i> split by node.

The oracle is the unplaced program trained in one process (``node_job.reference``)."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import torch
from dist_helpers import ROOT, child_env, endpoints, reap

import parafluid as fluid
from parafluid.distributed.node_mailbox import LOG_BURST
from parafluid.distributed.wire import Kind
from parafluid.testing import node_job
from parafluid.testing.warm_popen import WarmPopen
from parafluid.transpiler.node_split import NodeSplit

STEPS = 5


def _split(trainer_id, eps="127.0.0.1:7000,127.0.0.1:7001", placed="nodes"):
    main, startup, loss = node_job.build(placed)
    t = fluid.DistributeTranspiler()
    t.transpile(trainer_id, program=main, startup_program=startup, trainers=eps)
    return t, t.get_trainer_program(wait_port=False), startup, loss


def test_each_worker_gets_its_stage_and_only_activations_cross():
    origin, _, _ = node_job.build("nodes")
    _, w0, s0, loss = _split(0)
    _, w1, s1, _ = _split(1)
    ops0 = [op.type for op in w0.global_block().ops]
    ops1 = [op.type for op in w1.global_block().ops]
    # every op of the original runs on exactly one worker (all are placed on one)
    original = [op.type for op in origin.global_block().ops]
    assert sorted(original) == sorted(t for t in ops0 + ops1 if not t.startswith("node_"))
    sends0 = [op.input("X")[0] for op in w0.global_block().ops if op.type == "node_send"]
    recvs0 = [op.output("Out")[0] for op in w0.global_block().ops if op.type == "node_recv"]
    sends1 = [op.input("X")[0] for op in w1.global_block().ops if op.type == "node_send"]
    recvs1 = [op.output("Out")[0] for op in w1.global_block().ops if op.type == "node_recv"]
    assert (sends0, recvs1) == (["fc_0.tmp_2"], ["fc_0.tmp_2"])              # activation
    assert (sends1, recvs0) == (["fc_0.tmp_2@GRAD"], ["fc_0.tmp_2@GRAD"])    # its gradient
    # the send follows the producer, the receive precedes the first reader
    assert ops0[ops0.index("node_send") - 1] == "tanh"
    assert ops0[ops0.index("node_recv") + 1] == "tanh_grad"
    assert ops1[0] == "node_recv" and ops1[1] == "mul"
    assert "node_recv() {endpoint='127.0.0.1:7001', op_device='cpu', op_node='worker:1', " \
           "peer=0, peer_endpoint='127.0.0.1:7000', replicas=1, worker_id=1}" in str(w1)
    # the loss lives on worker 1 only; each worker updates its own parameters only
    assert not any(loss.name in op.output_arg_names for op in w0.global_block().ops)
    upd0 = {op.input("Param")[0] for op in w0.global_block().ops if op.type == "sgd"}
    upd1 = {op.input("Param")[0] for op in w1.global_block().ops if op.type == "sgd"}
    assert (upd0, upd1) == ({"fc_0.w_0", "fc_0.b_0"}, {"fc_1.w_0", "fc_1.b_0"})
    # startup: own parameters; the other stage's default-generator draw goes to a temporary
    init0 = [n for op in s0.global_block().ops for n in op.output_arg_names]
    init1 = [n for op in s1.global_block().ops for n in op.output_arg_names]
    # (initializers come last-created first, as Fluid prepends them)
    assert init0 == ["learning_rate_0", "fc_1.w_0@UNUSED", "fc_0.b_0", "fc_0.w_0"]
    assert init1 == ["learning_rate_0", "fc_1.b_0", "fc_1.w_0"]
    w0.verify()
    w1.verify()


def test_unnumbered_ops_run_on_every_worker_and_values_they_need_cross():
    main, startup, loss = node_job.build("")  # nothing placed ...
    with fluid.program_guard(main, startup):  # ... but one op on worker 1
        with fluid.place_guard("/node:worker:1/cpu"):
            extra = fluid.layers.scale(loss, scale=2.0)
        fluid.layers.scale(extra, scale=0.5)  # unplaced: every worker, reads worker 1's
    split = NodeSplit(main.clone(), startup.clone(), 0, "127.0.0.1:1,127.0.0.1:2")
    assert split.crossings() == [(extra.name, 1, 0)]


def _shared_weights_model(placed):
    """x -> fc (weight "shared") on worker 0 -> fc (the same weight) on worker 1 -> fc."""
    import contextlib

    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 3  # per-op generators: threads do not race
    guard = fluid.place_guard if placed else (lambda p: contextlib.nullcontext())
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = fluid.layers.data(name="x", shape=[8], dtype="float32")
        y = fluid.layers.data(name="y", shape=[1], dtype="float32")
        shared = fluid.ParamAttr(name="shared")
        with guard("/node:worker:0/cpu"):
            h = fluid.layers.fc(x, size=8, act="tanh", param_attr=shared)
        with guard("/node:worker:1/cpu"):
            h = fluid.layers.fc(h, size=8, act="tanh", param_attr=shared)
            loss = fluid.layers.mean(fluid.layers.square_error_cost(fluid.layers.fc(h, 1), y))
        fluid.optimizer.SGD(0.1).minimize(loss)
    return main, startup, loss


@pytest.mark.timeout(60)
def test_a_weight_shared_by_two_workers_crosses_from_its_updater_and_equals_unplaced():
    import threading

    from parafluid.distributed.launch import free_ports

    rng = np.random.default_rng(0)
    data = [{"x": rng.standard_normal((8, 8)).astype("float32"),
             "y": rng.standard_normal((8, 1)).astype("float32")} for _ in range(5)]
    main, startup, loss = _shared_weights_model(False)
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    ref = [float(exe.run(main, feed=d, fetch_list=[loss], scope=scope)[0][0]) for d in data]
    ref_w = np.array(scope.find_var("shared").get_tensor())
    eps = ",".join(f"127.0.0.1:{p}" for p in free_ports(2))
    jobs = []
    for w in (0, 1):
        main, startup, loss = _shared_weights_model(True)
        split = NodeSplit(main, startup, w, eps)
        split.build()
        jobs.append((main, startup, loss))
    # the weight crosses at the start of a step from worker 0, which updates it; worker 1's
    # part of its gradient crosses back to be summed there
    assert ("shared", 0, 1) in split.crossings()
    assert ("shared@GRAD@RENAME@0", 1, 0) in split.crossings()
    results, errors = {}, []

    def run(w):
        try:
            prog, start, lo = jobs[w]
            ex, sc = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
            ex.run(start, scope=sc)
            out = [ex.run(prog, feed=d, fetch_list=[lo] if w == 1 else [], scope=sc)
                   for d in data]
            results[w] = (out, np.array(sc.find_var("shared").get_tensor()))
        except Exception as e:  # noqa: BLE001 (reported below)
            errors.append(e)

    threads = [threading.Thread(target=run, args=(w,)) for w in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(50)
    assert not errors, errors
    np.testing.assert_allclose([float(o[0][0]) for o in results[1][0]], ref, atol=1e-6)
    np.testing.assert_allclose(results[0][1], ref_w, atol=1e-6)


def test_worker_id_beyond_trainers_is_refused_at_transpile_naming_op_and_place():
    main, startup, _ = node_job.build("nodes")
    with pytest.raises(ValueError, match=r"op #\d+ mul \(created at .*\), placed on "
                                         r"'/node:worker:1/cpu': worker id 1 does not exist; "
                                         r"transpile\(trainers=...\) gives 1 worker"):
        fluid.DistributeTranspiler().transpile(0, program=main, startup_program=startup,
                                               trainers="127.0.0.1:7000")


def test_trainers_must_be_endpoints_for_numbered_workers():
    main, startup, _ = node_job.build("nodes")
    with pytest.raises(TypeError, match="every worker's 'ip:port'"):
        fluid.DistributeTranspiler().transpile(0, program=main, startup_program=startup,
                                               trainers=2)


def test_hybrid_split_gives_each_worker_a_data_parallel_program_over_its_range():
    _, w0, s0, _ = _split(0, placed="hybrid")
    assert w0.meta.data_parallel_devices == ["cpu:0", "cpu:1"]
    comm = [op for op in w0.global_block().ops if op.type.startswith("node_")]
    assert [(op.type, op.attrs["replicas"]) for op in comm] == [("node_send", 2),
                                                                ("node_recv", 2)]
    # no place left: an ordinary program for CompiledProgram.with_data_parallel
    assert not any(op.attrs.get("op_device") or op.attrs.get("op_node")
                   for op in w0.global_block().ops + s0.global_block().ops)


def test_hybrid_stage_run_on_one_device_is_refused_naming_the_range():
    _, w0, s0, _ = _split(0, placed="hybrid")
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.Scope()
    exe.run(s0, scope=scope)
    with pytest.raises(Exception, match=r"node_send of 'fc_0.tmp_2': this worker's program is "
                                        r"placed on a device range of 2 device\(s\) .* but "
                                        r"runs on 1; run it with fluid.CompiledProgram"):
        exe.run(w0, feed=node_job.batch(0), scope=scope)


def test_a_range_mixed_with_other_devices_in_one_worker_is_refused():
    main, startup, _ = node_job.build("hybrid")
    relu = next(op for op in main.global_block().ops if op.type == "tanh")
    relu.attrs["op_device"] = "cpu:0"
    with pytest.raises(ValueError, match=r"worker 0 runs op #0 mul .* and op #2 tanh .*; a "
                                         r"device range \(data parallelism\) must hold all"):
        fluid.DistributeTranspiler().transpile(0, program=main, startup_program=startup,
                                               trainers="127.0.0.1:7000,127.0.0.1:7001")


def test_stages_with_different_replica_counts_are_refused():
    main, startup, _ = node_job.build("hybrid")
    for op in main.global_block().ops:
        if op.attrs.get("op_node") == "worker:1":
            op.attrs["op_device"] = "cpu"
    with pytest.raises(ValueError, match=r"as many data-parallel devices .*; got worker 0: 2, "
                                         r"worker 1: 1"):
        fluid.DistributeTranspiler().transpile(0, program=main, startup_program=startup,
                                               trainers="127.0.0.1:7000,127.0.0.1:7001")


def test_mailbox_errors_name_the_peer_and_the_variable():
    from parafluid.distributed.launch import free_ports
    from parafluid.distributed.node_mailbox import Mailbox, NodeTransferError, client

    box = Mailbox("127.0.0.1:0", worker_id=1)
    box.expect("h", 0, "127.0.0.1:9", shape=(-1,), dtype=torch.float32)
    try:
        with pytest.raises(NodeTransferError, match=r"worker 1 \(127.0.0.1:\d+\): waited 0.3 s "
                                                    r"for 'h' from worker 0 at 127.0.0.1:9"):
            box.take("h", 0, "127.0.0.1:9", deadline_s=0.3)
        client(box.endpoint, 0).send("h", np.ones(2, "float32"), 1, deadline_s=5)
        assert box.take("h", 0, "127.0.0.1:9", deadline_s=5).tolist() == [1.0, 1.0]
    finally:
        box.stop()
    nobody = f"127.0.0.1:{free_ports(1)[0]}"
    with pytest.raises(NodeTransferError, match=rf"worker 0: sending 'h' to worker 1 at "
                                                rf"{nobody} failed after 0.3 s"):
        client(nobody, 0).send("h", np.ones(2, "float32"), 1, deadline_s=0.3)


def _forger(endpoint, worker_id=0):
    from parafluid.distributed.rpc import RPCClient

    return RPCClient(endpoint, deadline_s=5, trainer_id=worker_id)


def test_mailbox_refuses_unexpected_duplicate_out_of_order_and_misshaped_values(caplog):
    from parafluid.distributed.node_mailbox import LOG_BURST, Mailbox, NodeTransferError, client
    from parafluid.distributed.rpc import RPCError
    from parafluid.distributed.wire import Kind

    box = Mailbox("127.0.0.1:0", worker_id=1)
    box.expect("h", 0, "127.0.0.1:9", shape=(-1, 4), dtype=torch.float32)
    nan = torch.full((2, 4), float("nan"))
    forger = _forger(box.endpoint)
    try:
        for name, value, seq, why in [
                ("h", nan, 2, r"'h' #2 from worker 0: out of order \(the next one is #1\)"),
                ("h", torch.full((2, 5), float("nan")), 1, r"expected float32 \[-1, 4\], got "
                 r"float32 \[2, 5\]"),
                ("h", nan.double(), 1, r"expected float32 \[-1, 4\], got float64"),
                ("h", nan[0], 1, r"got float32 \[4\]"),
                ("h", nan, 0, r"a duplicate")]:
            with pytest.raises(RPCError, match=why):
                forger.call(Kind.SEND, name, value, seq=seq)
        with pytest.raises(RPCError, match=r"worker 1 does not expect it \(it expects 'h' from "
                                           r"worker 0\)"):
            forger.call(Kind.SEND, "other", nan, deadline_s=1, seq=1)
        with pytest.raises(RPCError, match="does not expect"):  # another sender's identity
            _forger(box.endpoint, 5).call(Kind.SEND, "h", nan, seq=1)
        assert box.pending() == {}
        ones = torch.ones(3, 4)
        client(box.endpoint, 0).send("h", ones, 1, deadline_s=5)
        client(box.endpoint, 0).send("h", 2 * ones, 1, deadline_s=5)
        with pytest.raises(RPCError, match=r"a duplicate \(value #2 of it was stored already; "
                                           r"the next one is #3\)"):
            forger.call(Kind.SEND, "h", nan, seq=2)
        assert box.take("h", 0, "127.0.0.1:9", deadline_s=5).tolist() == ones.tolist()
        assert box.take("h", 0, "127.0.0.1:9", deadline_s=5).tolist() == (2 * ones).tolist()
        assert box.pending() == {} and box.refused == 8
        # a forged value that wins the race makes the true sender fail, not train on it
        forger.call(Kind.SEND, "h", nan, seq=3)
        with pytest.raises(NodeTransferError, match=r"sending 'h' to worker 1 at .* a "
                                                    r"duplicate .*another process sends as "
                                                    r"worker 0"):
            client(box.endpoint, 0).send("h", ones, 1, deadline_s=5)
        # the log: at most LOG_BURST lines, whoever the senders claim to be
        caplog.clear()
        with caplog.at_level("WARNING", logger="parafluid.distributed.node_mailbox"):
            for i in range(3 * LOG_BURST):
                with pytest.raises(RPCError):
                    _forger(box.endpoint, 100 + i).call(Kind.SEND, "h", nan, seq=9)
        refusals = [r for r in caplog.records if "refused a value" in r.getMessage()]
        assert 0 < len(refusals) <= LOG_BURST
        assert "'h' #9 from worker 10" in refusals[0].getMessage()
        assert box.refused == 9 + 3 * LOG_BURST
    finally:
        forger.close()
        box.stop()


def test_with_a_secret_a_mailbox_takes_no_message_from_a_process_without_it(monkeypatch):
    """With the job's secret, a mailbox's connections need it at the handshake: a process
    with another secret or none cannot get a value (nor a malformed message) in, the
    refusal is counted, and the workers' values still cross."""
    import zmq

    from parafluid.distributed import wire
    from parafluid.distributed.node_mailbox import Mailbox, client
    from parafluid.distributed.rpc import RPCClient, RPCError, RPCTimeoutError

    monkeypatch.setenv(wire.SECRET_ENV, "job secret")
    box = Mailbox("127.0.0.1:0", worker_id=1)
    box.expect("h", 0, "127.0.0.1:9", shape=(-1,), dtype=torch.float32)
    ctx = zmq.Context()
    try:
        with RPCClient(box.endpoint, 5, secret="another", trainer_id=0) as forger, \
                pytest.raises(RPCError, match="handshake") as info:
            forger.call(Kind.SEND, "h", torch.full((2,), float("nan")), seq=1)
        assert not isinstance(info.value, RPCTimeoutError)
        raw = ctx.socket(zmq.DEALER)  # no credentials at all
        raw.setsockopt(zmq.LINGER, 0)
        # NOTE: once the server has refused the handshake ZeroMQ drops the connection, and a
        # blocking send would wait forever for another one: a send that cannot even be
        # queued is a message that did not get in either
        raw.setsockopt(zmq.SNDTIMEO, 1000)
        raw.connect(f"tcp://{box.endpoint}")
        for frames in (wire.encode(Kind.SEND, "h", torch.full((2,), float("nan")),
                                   trainer_id=0, seq=1, secret=b"job secret"), [b"garbage"]):
            with contextlib.suppress(zmq.Again):
                raw.send_multipart(frames)
        assert not raw.poll(300)
        assert box.pending() == {} and box.refused == 0
        assert box._server.refused_handshakes >= 2 and box._server.rejected == 0
        client(box.endpoint, 0).send("h", np.ones(2, "float32"), 1, deadline_s=5)
        assert box.take("h", 0, "127.0.0.1:9", deadline_s=5).tolist() == [1.0, 1.0]
    finally:
        ctx.destroy(linger=0)
        box.stop()


def test_a_full_mailbox_makes_the_sender_wait_until_the_receiver_takes():
    from parafluid.distributed.node_mailbox import Mailbox, NodeTransferError, client

    box = Mailbox("127.0.0.1:0", worker_id=1, max_pending=2)
    box.expect("h", 0, "127.0.0.1:9", shape=(2,), dtype=torch.float32)
    try:
        sender = client(box.endpoint, 0)
        for i in range(2):
            sender.send("h", torch.full((2,), float(i)), 1, deadline_s=5)
        with pytest.raises(NodeTransferError, match="2 values of it wait already"):
            sender.send("h", torch.full((2,), 2.0), 1, deadline_s=0.5)
        assert box.pending() == {(0, "h"): 2}
        taker = threading.Timer(0.3, lambda: box.take("h", 0, "127.0.0.1:9", deadline_s=5))
        taker.start()
        sender.send("h", torch.full((2,), 2.0), 1, deadline_s=5)  # stored once there is room
        taker.join()
        assert [box.take("h", 0, "x", deadline_s=1)[0].item() for _ in range(2)] == [1.0, 2.0]
    finally:
        box.stop()


def _worker(t, eps, env, *extra):
    cmd = [sys.executable, "-m", "parafluid.testing.node_job", "worker", "--trainers", eps,
           "--trainer-id", str(t), "--steps", str(STEPS), *extra]
    return WarmPopen(cmd, env=env, cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _result(out):
    lines = [ln for ln in out.splitlines() if ln.startswith("{")]
    return json.loads(lines[-1]) if lines else None


def _train_pair(*extra, meanwhile=None, errs=None, **env_vars):
    """Both workers trained as processes (killed by pid in the end); their results.

    ``meanwhile(endpoints, done)``: run on a thread while they train, until ``done`` is set.
    ``errs``: a list that gets the workers' stderr."""
    eps = endpoints(2)
    env = child_env(FLAGS_rpc_deadline="30000", **env_vars)
    procs = []
    done = threading.Event()
    side = threading.Thread(target=meanwhile, args=(eps, done), daemon=True) \
        if meanwhile else None
    try:
        procs = [_worker(t, eps, env, *extra) for t in (0, 1)]
        if side:
            side.start()
        outs = [p.communicate(timeout=75) for p in procs]
    finally:
        done.set()
        reap(procs)
        if side:
            side.join(10)
    for p, (_, err) in zip(procs, outs):
        assert p.returncode == 0, err
    if errs is not None:
        errs.extend(err for _, err in outs)
    return tuple(_result(o) for o, _ in outs)


def _assert_equal_to_unplaced(r0, r1, optimizer="sgd"):
    """Stage 1's losses and each stage's parameters equal the unplaced program's."""
    ref = node_job.reference(STEPS, optimizer)
    np.testing.assert_allclose(r1["losses"], ref["losses"], atol=1e-5)
    for r, names in ((r0, ("fc_0.w_0", "fc_0.b_0")), (r1, ("fc_1.w_0", "fc_1.b_0"))):
        for name in names:
            np.testing.assert_allclose(r["params"][name], ref["params"][name], atol=1e-5)


@pytest.mark.slow
@pytest.mark.timeout(90)
@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_two_stages_in_two_processes_equal_the_unplaced_program(optimizer):
    r0, r1 = _train_pair("--optimizer", optimizer)
    _assert_equal_to_unplaced(r0, r1, optimizer)
    assert r0["losses"] == []  # the loss is on stage 1
    # what the transport carried: the activation forward, its gradient backward, once a step
    act = 4 * node_job.BATCH * node_job.HIDDEN
    assert r0["carried"] == {"fc_0.tmp_2": [STEPS, STEPS * act]}
    assert r1["carried"] == {"fc_0.tmp_2@GRAD": [STEPS, STEPS * act]}


def _forge_activations(eps, done):
    """Send worker 1 NaN activations as if from worker 0: misshaped, out of order, late
    duplicates, unknown names; until ``done``."""
    from parafluid.distributed.rpc import RPCClient, RPCError
    from parafluid.distributed.wire import Kind

    shape = (node_job.BATCH, node_job.HIDDEN)
    nan = torch.full(shape, float("nan"))
    forger = RPCClient(eps.split(",")[1], deadline_s=2, trainer_id=0)
    forged = [("fc_0.tmp_2", torch.full((shape[0], shape[1] + 1), float("nan")), 1),
              ("fc_0.tmp_2", nan.double(), 1), ("fc_0.tmp_2", nan, 10_000),
              ("fc_0.tmp_2", nan, 0), ("fc_0.tmp_2@GRAD", nan, 1), ("fc_1.w_0", nan, 1)]
    try:
        while not done.is_set():
            for name, value, seq in forged:
                try:
                    forger.call(Kind.SEND, name, value, seq=seq)
                except RPCError:
                    pass
            time.sleep(0.005)
    finally:
        forger.close()


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_forged_activations_are_refused_and_the_job_equals_the_unplaced_program():
    errs = []
    # NOTE: a pause before each step keeps the job running while the forger connects (on a
    # loaded machine the whole job could otherwise end before a forged value arrives)
    r0, r1 = _train_pair("--step-delay", "0.2", meanwhile=_forge_activations, errs=errs)
    _assert_equal_to_unplaced(r0, r1)
    assert "refused a value from" in errs[1], errs[1]
    assert errs[1].count("refused a value from") <= 2 * LOG_BURST  # rate-limited


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_two_processes_with_four_microbatches_pipeline_and_equal_the_unplaced_program():
    r0, r1 = _train_pair("--microbatches", "4")
    _assert_equal_to_unplaced(r0, r1)
    # each micro-batch's activation crosses on its own (stage 0 goes on with the next)
    quarter = 4 * node_job.BATCH * node_job.HIDDEN // 4
    assert r0["carried"] == {f"fc_0.tmp_2@MB{m}": [STEPS, STEPS * quarter] for m in range(4)}
    assert r1["carried"] == {f"fc_0.tmp_2@GRAD@MB{m}": [STEPS, STEPS * quarter]
                             for m in range(4)}


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_hybrid_two_stages_each_data_parallel_on_two_devices_equal_the_unplaced_program():
    r0, r1 = _train_pair("--placed", "hybrid", CPU_NUM="2")
    _assert_equal_to_unplaced(r0, r1)
    # replica i's half of the activation (and of its gradient) goes to replica i
    half = 4 * node_job.BATCH * node_job.HIDDEN // 2
    assert r0["carried"] == {f"fc_0.tmp_2@replica{i}": [STEPS, STEPS * half] for i in (0, 1)}
    assert r1["carried"] == {f"fc_0.tmp_2@GRAD@replica{i}": [STEPS, STEPS * half]
                             for i in (0, 1)}


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_a_dead_stage_is_named_by_the_other_within_the_deadline():
    eps = endpoints(2)
    env = child_env(FLAGS_rpc_deadline="30000")  # for the start; 4 s once both are up
    procs = []
    try:
        # stage 0 dies when step 2 starts; stage 1 waits for its activation of step 2
        procs = [_worker(0, eps, env, "--die-at-step", "2", "--train-deadline-ms", "4000"),
                 _worker(1, eps, env, "--train-deadline-ms", "4000")]
        start = time.monotonic()
        outs = [p.communicate(timeout=45) for p in procs]
        took = time.monotonic() - start
    finally:
        reap(procs)
    assert procs[0].returncode == 3
    assert procs[1].returncode != 0
    err = outs[1][1]
    ep0 = eps.split(",")[0]
    # stage 1 waits for the activation of step 2 and names stage 0; or, when stage 0 died
    # before its mailbox answered the gradient of step 1, the send of it names stage 0
    assert "NodeTransferError: worker 1" in err, err
    assert f"waited 4.0 s for 'fc_0.tmp_2' from worker 0 at {ep0}; that process died" in err \
        or f"sending 'fc_0.tmp_2@GRAD' to worker 0 at {ep0} failed after 4.0 s: no reply; " \
           "that process died" in err, err
    assert took < 40, took


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_a_missing_receiver_is_named_by_the_sender():
    eps = endpoints(2)
    env = child_env(FLAGS_rpc_deadline="3000")
    procs = []
    try:
        procs = [_worker(0, eps, env)]  # worker 1 never starts
        outs = [p.communicate(timeout=45) for p in procs]
    finally:
        reap(procs)
    assert procs[0].returncode != 0
    assert f"worker 0: worker 1 at {eps.split(',')[1]} did not answer within 3.0 s" \
        in outs[0][1], outs[0][1]
