"""DistributeTranspiler pserver mode: the programs it writes, and training that equals one process.

The training tests run 2 pservers and 2 trainers as threads of this process (each with its
own programs, scope and Executor, talking over ZeroMQ on 127.0.0.1): the whole RPC path runs,
without the cost of four interpreters. tests/distributed/test_pserver_procs_mode.py runs
real processes.
"""

from __future__ import annotations

import json
import re
import shutil
import threading

import numpy as np
import pytest
from dist_helpers import endpoints, run_threads

import parafluid as fluid
from parafluid.testing import ps_job

pytestmark = pytest.mark.slow

STEPS = 5


@pytest.fixture(autouse=True)
def _short_deadline(monkeypatch):
    # a failing thread must not leave the others waiting for the default 180 s
    monkeypatch.setenv("FLAGS_rpc_deadline", "15000")


def _job(optimizer, *, split_method="round_robin", lr_decay=False, l2=0.0, steps=(STEPS, STEPS),
         sync=True, min_block_size=100, first_step=0, checkpoint_at=None, ckpt=None,
         load_dir=None, embedding="", trainer_kw=None, join_s=60):
    """Run 2 pservers + len(steps) trainers as threads; return the trainers' results."""
    eps = endpoints(2)
    trainers = len(steps)
    kw = dict(optimizer=optimizer, lr_decay=lr_decay, l2=l2, split_method=split_method,
              min_block_size=min_block_size, sync=sync, embedding=embedding)
    trainer_kw = dict(first_step=first_step, checkpoint_at=checkpoint_at, checkpoint_dir=ckpt,
                      **(trainer_kw or {}))
    calls = [(ps_job.run_pserver, (ep, eps, trainers), dict(load_dir=load_dir, **kw))
             for ep in eps.split(",")]
    calls += [(ps_job.run_trainer, (t, eps, trainers, steps[t]), dict(**trainer_kw, **kw))
              for t in range(trainers)]
    return run_threads(calls, join_s)


def _check_equal_to_one_process(results, optimizer, steps=(STEPS, STEPS), **kw):
    init = results[0]["initial"]
    for t in results:  # the startup program pulled the pservers' values: all start equal
        for p in ps_job.PARAMS:
            np.testing.assert_array_equal(results[t]["initial"][p], init[p])
    ref = ps_job.reference(init, steps, optimizer, **kw)
    for s in range(max(steps)):
        live = [t for t in results if steps[t] > s]
        got = np.mean([results[t]["losses"][s] for t in live])
        assert abs(got - ref["losses"][s]) < 1e-5 * max(1.0, abs(ref["losses"][s])), \
            (s, got, ref["losses"][s])
    for t in results:
        for p in ps_job.PARAMS:
            np.testing.assert_allclose(results[t]["final"][p], ref["final"][p], rtol=0,
                                       atol=1e-5, err_msg=f"trainer {t} {p}")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("optimizer,split_method,lr_decay,l2", [
    ("sgd", "round_robin", False, 0.0),
    ("momentum", "hash_name", False, 0.0),
    ("adam", "round_robin", True, 0.01),
    ("adagrad", "hash_name", True, 0.0),
    # the other elementwise rules run per block of a sliced parameter too, as Fluid's
    ("decayed_adagrad", "round_robin", False, 0.0),
    ("ftrl", "hash_name", False, 0.0),
    ("adamax", "round_robin", False, 0.0),
    ("adadelta", "hash_name", False, 0.0),
])
def test_sync_2x2_equals_one_process(optimizer, split_method, lr_decay, l2):
    results = _job(optimizer, split_method=split_method, lr_decay=lr_decay, l2=l2)
    _check_equal_to_one_process(results, optimizer, lr_decay=lr_decay, l2=l2)


@pytest.mark.timeout(300)
def test_compiled_trainers_equal_one_process(monkeypatch):
    """Trainers run their program as compiled segments (BuildStrategy.enable_compile): the
    send/recv ops and barriers stay between the segments."""
    monkeypatch.setenv("FLAGS_rpc_deadline", "240000")  # a cold compile takes a while
    results = _job("momentum", trainer_kw={"compile": True}, join_s=240)
    _check_equal_to_one_process(results, "momentum")


def test_gradient_clipping_by_value_runs_per_block_and_equals_one_process(monkeypatch):
    real = ps_job.build
    monkeypatch.setattr(ps_job, "build", lambda *a, **k: real(*a, **k, clip=0.02))
    results = _job("momentum")
    init = results[0]["initial"]
    ref = ps_job.reference(init, (STEPS, STEPS), "momentum")
    for t in (0, 1):
        for p in ps_job.PARAMS:
            np.testing.assert_allclose(results[t]["final"][p], ref["final"][p], atol=1e-5)
    # the clip matters here: without it the parameters end elsewhere
    monkeypatch.setattr(ps_job, "build", real)
    free = ps_job.reference(init, (STEPS, STEPS), "momentum")
    assert max(np.abs(np.subtract(free["final"][p], ref["final"][p])).max()
               for p in ps_job.PARAMS) > 1e-3


@pytest.mark.timeout(120)
def test_uneven_data_the_pserver_averages_over_the_trainers_still_training():
    steps = (6, 3)
    results = _job("momentum", steps=steps)
    assert [len(results[t]["losses"]) for t in (0, 1)] == [6, 3]
    ref = ps_job.reference(results[0]["initial"], steps, "momentum")
    for p in ps_job.PARAMS:
        np.testing.assert_allclose(results[0]["final"][p], ref["final"][p], atol=1e-5)


@pytest.mark.timeout(120)
def test_async_mode_converges_near_sync():
    sync = _job("sgd", steps=(30, 30))
    sync_loss = ps_job.evaluate(sync[0]["final"])
    results = _job("sgd", sync=False, steps=(30, 30))
    # the loss of predicting 0 everywhere: what a model that learned nothing scores
    zero = ps_job.evaluate({p: np.zeros_like(v) for p, v in results[0]["initial"].items()})
    assert sync_loss < 0.5 * zero
    for t in (0, 1):
        assert np.isfinite(results[t]["losses"]).all()
        after = ps_job.evaluate(results[t]["final"])
        # stale gradients cost a little, not convergence (held-out loss, same data)
        assert after < 0.5 * zero and after < 1.5 * sync_loss + 0.02, \
            (t, zero, after, sync_loss)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_distributed_lookup_table_equals_a_local_embedding(optimizer):
    results = _job(optimizer, embedding="distributed", split_method="hash_name")
    ref = ps_job.reference(results[0]["initial"], (STEPS, STEPS), optimizer,
                           embedding="local")
    for s in range(STEPS):
        got = np.mean([results[t]["losses"][s] for t in (0, 1)])
        assert abs(got - ref["losses"][s]) < 1e-5 * max(1.0, abs(ref["losses"][s])), \
            (s, got, ref["losses"][s])
    for t in (0, 1):
        for p in (*ps_job.PARAMS, "emb"):
            np.testing.assert_allclose(results[t]["final"][p], ref["final"][p], atol=1e-5,
                                       err_msg=f"trainer {t} {p}")


@pytest.mark.timeout(120)
def test_sparse_embedding_not_distributed_is_pulled_whole_and_updated_by_rows():
    # the table (50 x 8 = 400 elements, min_block_size 100) is cut in two row blocks; the
    # trainers receive it whole, and send row-sparse gradients cut by those rows
    results = _job("sgd", embedding="local", split_method="round_robin")
    ref = ps_job.reference(results[0]["initial"], (STEPS, STEPS), "sgd", embedding="local")
    for t in (0, 1):
        for p in (*ps_job.PARAMS, "emb"):
            np.testing.assert_allclose(results[t]["final"][p], ref["final"][p], atol=1e-5,
                                       err_msg=f"trainer {t} {p}")


def test_distributed_lookup_table_programs():
    main, startup, _ = ps_job.build("sgd", embedding="distributed")
    t = fluid.DistributeTranspiler(ps_job._config("round_robin", 100, True))
    t.transpile(0, program=main, startup_program=startup,
                pservers="127.0.0.1:6174,127.0.0.1:6175", trainers=2)
    types = [op.type for op in main.global_block().ops]
    assert "lookup_table" not in types and "lookup_table_grad" not in types
    assert "distributed_lookup_table" in types and "split_selected_rows" in types
    assert not main.global_block().var("emb").persistable  # the trainer never holds it
    recv_outs = [n for op in main.global_block().ops if op.type == "recv"
                 for n in op.output("Out")]
    assert not any(n.startswith("emb") for n in recv_outs)
    assert not any("emb" in op.output_arg_names for op in startup.global_block().ops)
    for ep in ("127.0.0.1:6174", "127.0.0.1:6175"):
        prog, pstartup = t.get_pserver_programs(ep)
        prog.verify()
        shard = "emb"  # each pserver holds its rows under the table's own name, as Fluid's
        assert prog.global_block().var(shard).shape == (25, ps_job.EMB)
        # the table's initializer cannot be resized: the whole value is made, then split
        split = next(op for op in pstartup.global_block().ops if op.type == "split")
        assert shard in split.output("Out")


@pytest.mark.timeout(120)
def test_checkpoint_then_restart_from_it_reaches_the_same_parameters(tmp_path, monkeypatch):
    monkeypatch.setenv("PARAFLUID_CHECKPOINT_ROOT", str(tmp_path))
    ckpt = str(tmp_path / "ckpt")
    kw = dict(lr_decay=True, split_method="hash_name")
    # two saves into one folder: the second's files replace the first's after its commit
    full = _job("adam", steps=(6, 6), checkpoint_at=(2, 3), ckpt=ckpt, **kw)
    marker = json.loads((tmp_path / "ckpt" / "__checkpoint__.json").read_text())
    assert marker["step"] == 3 and sorted(marker["files"]) == [
        "__variables__.safetensors", "pserver_0.safetensors", "pserver_1.safetensors"]
    # each file is the version the marker names, and nothing else is in the folder
    versions = {name: entry["path"] for name, entry in marker["files"].items()}
    for name, version in versions.items():
        stem = name[:-len(".safetensors")]
        assert re.fullmatch(re.escape(stem) + r"\.step3-[0-9a-f]{8}\.safetensors", version)
    files = sorted(p.name for p in (tmp_path / "ckpt").iterdir())
    assert files == sorted(["__checkpoint__.json", *versions.values()])
    # the trainer's file holds what the trainer computes: the parameters of step 3, not the
    # optimizer state (which it never updates in pserver mode; the pservers hold it)
    tensors, meta = fluid.io.read_tensors(
        str(tmp_path / "ckpt" / versions["__variables__.safetensors"]))
    assert sorted(tensors) == sorted(ps_job.PARAMS) and meta["parafluid.step"] == "3"
    main, startup, _ = ps_job.build("adam", **{"lr_decay": True})
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    with pytest.raises(ValueError, match="moment"):  # not loadable as the model's whole state
        fluid.io.load_persistables(exe, ckpt, main, scope=scope)
    fluid.io.load_params(exe, ckpt, main, scope=scope)
    # new pservers load their blocks (parameters, moments, beta powers, LR counter); the
    # trainers pull the parameters at startup and run steps 3..5 again
    resumed = _job("adam", steps=(6, 6), first_step=3, load_dir=ckpt, **kw)
    for t in (0, 1):
        assert resumed[t]["losses"] == pytest.approx(full[t]["losses"][3:], abs=1e-6)
        for p in ps_job.PARAMS:
            np.testing.assert_allclose(resumed[t]["final"][p], full[t]["final"][p], atol=1e-6)


class _Killed(BaseException):
    """Trainer 0 killed while it saves."""


@pytest.mark.timeout(120)
def test_a_save_killed_between_the_pservers_leaves_the_previous_checkpoint_loadable(
        tmp_path, monkeypatch):
    from parafluid.distributed.ps_client import PServerClient

    monkeypatch.setenv("PARAFLUID_CHECKPOINT_ROOT", str(tmp_path))
    monkeypatch.setenv("FLAGS_rpc_deadline", "3000")  # the others notice the kill quickly
    ckpt, committed = tmp_path / "ckpt", tmp_path / "committed_step_3"
    notify, commit = PServerClient.checkpoint_notify, fluid.io.commit_checkpoint
    calls = []

    def killed_at_the_fourth(self, dirname, keep=""):
        calls.append(self.endpoint)
        if len(calls) == 4:  # the second save (after step 5), between pserver 0 and 1
            raise _Killed
        return notify(self, dirname, keep)

    def commit_and_copy(dirname, step, records):
        commit(dirname, step, records)
        if not committed.exists():  # what the first save committed, to compare with
            shutil.copytree(dirname, committed)
    monkeypatch.setattr(PServerClient, "checkpoint_notify", killed_at_the_fourth)
    monkeypatch.setattr(fluid.io, "commit_checkpoint", commit_and_copy)
    try:
        with pytest.raises(_Killed):
            _job("momentum", steps=(6, 6), checkpoint_at=(3, 5), ckpt=str(ckpt))
    finally:
        # the killed trainers never closed their executors: drop their pools (this process
        # stands for their processes), so that later jobs here start without them
        from parafluid.distributed import ps_registry

        with ps_registry._LOCK:
            pools = [ps_registry._POOLS.pop(t) for t in list(ps_registry._POOLS)]
        for pool in pools:
            pool.close()
    # the files of step 5 that were written lie beside those of step 3, uncommitted
    steps = sorted(fluid.io.read_tensors(str(p))[1]["parafluid.step"] + " " + p.name[:9]
                   for p in ckpt.iterdir() if p.suffix == ".safetensors")
    assert steps == ["3 __variabl", "3 pserver_0", "3 pserver_1", "5 __variabl", "5 pserver_0"]
    eps = endpoints(2)
    programs = []
    for ep in eps.split(","):
        main, startup, _ = ps_job.build("momentum")
        t = fluid.DistributeTranspiler(ps_job._config("round_robin", 100, True))
        t.transpile(0, program=main, startup_program=startup, pservers=eps, trainers=2)
        programs.append(t.get_pserver_programs(ep))
    # before: the marker was removed first, and the folder loaded nothing
    for prog, startup in programs:  # every pserver loads the step-3 state, as committed
        values = []
        for folder in (ckpt, committed):
            exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
            exe.run(startup, scope=scope)
            fluid.io.load_persistables(exe, str(folder), prog, scope=scope)
            values.append({n: np.array(scope.find_var(n).get_tensor())
                           for n, v in prog.global_block().vars.items() if v.persistable
                           and scope.find_var(n) is not None
                           and scope.find_var(n).value is not None})
        assert sorted(values[0]) == sorted(values[1]) and len(values[0]) >= 3
        for n in values[0]:
            np.testing.assert_array_equal(values[0][n], values[1][n], err_msg=n)
    assert fluid.io.check_checkpoint_file(str(ckpt), "pserver_1.safetensors") == 3
    # a marker edited to name the uncommitted step-5 file as step 3's does not load
    step5 = next(p.name for p in ckpt.iterdir() if p.name.startswith("pserver_0.step5-"))
    (ckpt / "__checkpoint__.json").write_text(json.dumps({
        "format": "parafluid.checkpoint/1", "step": 3,
        "files": {"pserver_0.safetensors": {"sha256": "0" * 64, "bytes": 1, "path": step5}}}))
    prog, startup = programs[0]
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    with pytest.raises(ValueError, match="holds step 5, but the checkpoint's marker says step 3"):
        fluid.io.load_persistables(exe, str(ckpt), prog, scope=scope)


def test_programs_print_verify_and_round_trip():
    eps = "127.0.0.1:6174,127.0.0.1:6175"
    main, startup, _ = ps_job.build("adam", lr_decay=True, l2=0.01)
    t = fluid.DistributeTranspiler(ps_job._config("round_robin", 100, True))
    t.transpile(1, program=main, startup_program=startup, pservers=eps, trainers=2)
    text = str(main)
    types = [op.type for op in main.global_block().ops]
    assert "adam" not in types and "increment" not in types and "elementwise_pow" not in types
    assert types.count("send") == 4 and types.count("recv") == 4
    assert types[-3:] == ["recv", "fetch_barrier", "concat"]
    assert types.index("send_barrier") > max(i for i, x in enumerate(types) if x == "send")
    # fc_0.w_0 (20 x 40 = 800 elements, min_block_size 100) is split over both pservers
    assert "split_byref(X=[fc_0.w_0@GRAD]) {num=0, sections=[10, 10]}" in text
    assert "send_varnames=['fc_0.w_0@GRAD.block0.trainer_1', 'fc_0.w_0@GRAD.block1.trainer_1']" \
        in text
    split_send = next(op for op in main.global_block().ops
                      if op.type == "send" and len(op.input("X")) == 2)
    assert sorted(split_send.attr("epmap")) == eps.split(",")  # one block on each pserver
    startup_types = [op.type for op in startup.global_block().ops]
    assert startup_types[-3:] == ["recv", "fetch_barrier", "concat"]

    blocks_of = {}
    for ep in eps.split(","):
        prog, pstartup = t.get_pserver_programs(ep)
        prog.verify()
        assert str(fluid.Program.parse_from_string(prog.serialize_to_string())) == str(prog)
        assert str(fluid.Program.parse_from_string(pstartup.serialize_to_string())) == \
            str(pstartup)
        ls, = prog.global_block().ops
        assert ls.type == "listen_and_serv" and ls.attr("Fanin") == 2 and ls.attr("sync_mode")
        lr_block = prog.block(ls.attr("lr_decay_block_id"))
        assert [op.type for op in lr_block.ops] == ["increment", "cast", "scale", "fill_constant",
                                                    "elementwise_pow", "scale"]
        blocks_of[ep] = [g.split(":")[0] for g in ls.attr("grad_to_block_id")]
        # as Fluid lists them: the LR block first, then one block per parameter block
        assert ls.attr("optimize_blocks")[0].idx == lr_block.idx
        for blk in ls.attr("optimize_blocks")[1:]:
            types = [op.type for op in blk.ops]
            assert types[:2] == ["sum", "scale"] and "adam" in types
            assert blk.ops[1].attr("scale") == 0.5
        # the pserver initializes only its own blocks, resized
        inits = {op.output("Out")[0]: op for op in pstartup.global_block().ops}
        for g in blocks_of[ep]:
            param = g.replace("@GRAD", "")
            assert param in inits
        if "fc_0.w_0@GRAD.block1" in blocks_of[ep]:
            assert inits["fc_0.w_0.block1"].attr("shape") == [10, 40]
            assert inits["fc_0.w_0_moment1_0.block1"].attr("shape") == [10, 40]
            assert "fc_0.w_0_beta1_pow_acc_0.block1" in inits
    # every block lives on exactly one pserver
    all_blocks = sorted(blocks_of[eps.split(",")[0]] + blocks_of[eps.split(",")[1]])
    assert all_blocks == sorted(["fc_0.w_0@GRAD.block0", "fc_0.w_0@GRAD.block1",
                                 "fc_0.b_0@GRAD", "fc_1.w_0@GRAD", "fc_1.b_0@GRAD"])
    with pytest.raises(ValueError, match="127.0.0.1:9999.*is not one of the pservers"):
        t.get_pserver_program("127.0.0.1:9999")


def test_slicing_off_and_one_trainer_keep_names():
    main, startup, _ = ps_job.build("sgd")
    config = ps_job._config("round_robin", 100, True)
    config.slice_var_up = False
    t = fluid.DistributeTranspiler(config)
    t.transpile(0, program=main, startup_program=startup, pservers="127.0.0.1:6174",
                trainers=1)
    types = [op.type for op in main.global_block().ops]
    assert "split_byref" not in types and "split" not in types and "concat" not in types
    assert "send_varnames=['fc_0.w_0@GRAD']" in str(main)
    prog = t.get_pserver_program("127.0.0.1:6174")
    blk = prog.block(1)
    assert [op.type for op in blk.ops] == ["sgd"]  # one trainer: no sum, no scale


def test_global_norm_clipping_is_refused_by_name():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = fluid.layers.data(name="x", shape=[4], dtype="float32")
        loss = fluid.layers.mean(fluid.layers.fc(x, size=2))
        fluid.clip.set_gradient_clip(fluid.clip.GradientClipByGlobalNorm(1.0), program=main)
        fluid.optimizer.SGD(0.1).minimize(loss)
    t = fluid.DistributeTranspiler()
    with pytest.raises(NotImplementedError, match="global norm"):
        t.transpile(0, program=main, startup_program=startup, pservers="127.0.0.1:6174",
                    trainers=2)


@pytest.mark.timeout(60)
def test_a_replicated_trainer_program_is_refused_by_name():
    eps = endpoints(1)
    server = threading.Thread(target=ps_job.run_pserver, args=(eps, eps, 1), daemon=True)
    server.start()
    main, startup, loss = ps_job.build("sgd")
    t = fluid.DistributeTranspiler(ps_job._config("round_robin", 100, True))
    t.transpile(0, program=main, startup_program=startup, pservers=eps, trainers=1)
    prog = t.get_trainer_program()
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.Scope()
    exe.run(startup, scope=scope)
    compiled = fluid.CompiledProgram(prog).with_data_parallel(
        loss_name=loss.name, places=fluid.cpu_places(2))
    x, y = ps_job.data(1, 1)[0]
    with pytest.raises(Exception, match="runs on one device .* replicated over several"):
        exe.run(compiled, feed={"x": x, "y": y}, fetch_list=[loss], scope=scope)
    exe.close()  # the pserver drops the partial step and ends
    server.join(timeout=30)
    assert not server.is_alive()


def _lod_table_program(distributed: bool):
    """Sequences of ids -> a sparse embedding (on the pservers or local) -> the sum of each
    sequence -> fc -> squared error."""
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 5
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        ids = fluid.layers.data(name="ids", shape=[1], dtype="int64", lod_level=1)
        y = fluid.layers.data(name="y", shape=[1], dtype="float32")
        table = np.random.default_rng(3).standard_normal((40, 4)).astype("float32")
        emb = fluid.layers.embedding(
            ids, size=[40, 4], is_sparse=True, is_distributed=distributed,
            param_attr=fluid.ParamAttr(
                name="emb", initializer=fluid.initializer.NumpyArrayInitializer(table)))
        pooled = fluid.layers.sequence_pool(emb, pool_type="sum")
        loss = fluid.layers.mean(fluid.layers.square_error_cost(
            fluid.layers.fc(pooled, size=1), y))
        fluid.optimizer.SGD(0.1).minimize(loss)
    return main, startup, emb, pooled, loss


@pytest.mark.timeout(60)
def test_distributed_lookup_table_keeps_the_lod_of_its_ids():
    """The looked-up rows carry the ids' LoD, so sequence layers work on them; the
    sequence sums equal the local embedding's."""
    ep = endpoints(1)
    place = fluid.CPUPlace()
    feed = {"ids": fluid.create_lod_tensor(np.array([[1], [7], [7], [30], [2], [39]], "int64"),
                                           [[2, 3, 1]], place),
            "y": np.array([[0.5], [-1.0], [2.0]], "float32")}
    config = ps_job._config("round_robin", 100, True)
    results = {}
    # NOTE: built here, before the threads: program_guard and unique_name are the process's,
    # so two threads building at once could mix their programs (the trainer's is built in
    # its thread: get_trainer_program waits for the pserver's port)
    main, startup, *_ = _lod_table_program(True)
    t = fluid.DistributeTranspiler(config)
    t.transpile(0, program=main, startup_program=startup, pservers=ep, trainers=1)
    prog, pstartup = t.get_pserver_programs(ep)

    def pserver():
        exe, scope = fluid.Executor(place), fluid.Scope()
        exe.run(pstartup, scope=scope)
        exe.run(prog, scope=scope)

    def trainer():
        main, startup, emb, pooled, _ = _lod_table_program(True)
        t = fluid.DistributeTranspiler(config)
        t.transpile(0, program=main, startup_program=startup, pservers=ep, trainers=1)
        prog = t.get_trainer_program()
        assert "distributed_lookup_table" in [op.type for op in prog.global_block().ops]
        exe, scope = fluid.Executor(place), fluid.Scope()
        exe.run(startup, scope=scope)
        results["emb"], results["pooled"] = exe.run(prog, feed=feed, fetch_list=[emb, pooled],
                                                    scope=scope, return_numpy=False)
        exe.close()

    run_threads([(pserver, (), {}), (trainer, (), {})], join_s=45)
    assert results["emb"].recursive_sequence_lengths() == [[2, 3, 1]]
    main, startup, emb, pooled, _ = _lod_table_program(False)
    exe, scope = fluid.Executor(place), fluid.Scope()
    exe.run(startup, scope=scope)
    want_emb, want_pooled = exe.run(main, feed=feed, fetch_list=[emb, pooled], scope=scope)
    np.testing.assert_allclose(np.array(results["emb"]), want_emb, rtol=1e-6)
    np.testing.assert_allclose(np.array(results["pooled"]), want_pooled, rtol=1e-6)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("lr_decay", ps_job.LR_DECAYS)
def test_async_mode_with_every_lr_decay_equals_one_process(lr_decay):
    # gradients reach the pservers last layer first: the LR block must have run before the
    # first of them is applied, and then once per trainer step (one trainer: as in one
    # process, where the schedule advances once per step)
    steps = (STEPS,)
    results = _job("momentum", sync=False, lr_decay=lr_decay, steps=steps)
    _check_equal_to_one_process(results, "momentum", steps=steps, lr_decay=lr_decay)
    ref = ps_job.reference(results[0]["initial"], steps, "momentum", lr_decay=lr_decay)
    const = ps_job.reference(results[0]["initial"], steps, "momentum")
    # the schedule changes the result: a constant LR ends elsewhere
    assert max(np.abs(np.subtract(const["final"][p], ref["final"][p])).max()
               for p in ps_job.PARAMS) > 1e-4, lr_decay


@pytest.mark.timeout(120)
def test_async_mode_with_an_lr_decay_and_two_trainers_trains():
    results = _job("sgd", sync=False, lr_decay="piecewise", steps=(20, 20))
    before = ps_job.evaluate(results[0]["initial"])
    for t in (0, 1):
        assert np.isfinite(results[t]["losses"]).all()
    # NOTE: async trainers never wait for each other: one may pull its last parameters
    # before the pservers applied much (threads of one process take turns), so the job is
    # judged by the trainer that finished with the most updates applied
    after = min(ps_job.evaluate(results[t]["final"]) for t in (0, 1))
    assert after < 0.8 * before, (after, before)


@pytest.mark.timeout(120)
def test_sync_2x2_with_a_piecewise_schedule_equals_one_process():
    # the LR block holds Fluid's Switch: its conditional_blocks run their cloned sub-blocks
    results = _job("momentum", lr_decay="piecewise")
    _check_equal_to_one_process(results, "momentum", lr_decay="piecewise")
