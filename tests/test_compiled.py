"""Compiled execution: segments of a program run as torch.compile'd functions of the ops'
own kernels and compute what the interpreter computes.

Only tiny programs are compiled here (Inductor on 2 cores takes seconds per segment).
"""

from __future__ import annotations

import logging

import numpy as np
import pytest

import parafluid as fluid
from parafluid.ops.registry import register_op, same_as
from parafluid.passes.compile_regions import SEGMENT_OP, compile_regions, why_not_compilable

STEPS = 5


def _train(build, feeds, compiled: bool, steps: int = STEPS, fetch_extra=()):
    main, startup = fluid.Program(), fluid.Program()
    startup.random_seed = 11
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        loss = build()
    scope = fluid.Scope()
    exe = fluid.Executor(fluid.CPUPlace())
    fetch = [loss.name, *fetch_extra]
    with fluid.scope_guard(scope):
        exe.run(startup)
        prog = compile_regions(main, keep=fetch) if compiled else main
        losses = [exe.run(prog, feed=feeds(i), fetch_list=fetch)[0] for i in range(steps)]
        params = {p.name: np.array(scope.find_var(p.name).value)
                  for p in main.all_parameters()}
    return np.array(losses), params, prog


def _assert_same(build, feeds, atol=1e-5, **kw):
    ref_l, ref_p, _ = _train(build, feeds, False, **kw)
    got_l, got_p, prog = _train(build, feeds, True, **kw)
    np.testing.assert_allclose(got_l, ref_l, atol=atol, rtol=0)
    assert ref_p.keys() == got_p.keys()
    for name in ref_p:
        np.testing.assert_allclose(got_p[name], ref_p[name], atol=atol, rtol=0, err_msg=name)
    return prog


def _segments(prog):
    return [op for op in prog.global_block().ops if op.type == SEGMENT_OP]


def _mlp_feeds(batch=8):
    rng = np.random.RandomState(0)
    xs = rng.rand(STEPS + 2, batch, 6).astype("float32")
    ys = rng.randint(0, 3, (STEPS + 2, batch, 1)).astype("int64")
    return lambda i: {"x": xs[i], "y": ys[i]}


def _mlp(optimizer=lambda: fluid.optimizer.Adam(0.01)):
    def build():
        x = fluid.layers.data(name="x", shape=[6], dtype="float32")
        y = fluid.layers.data(name="y", shape=[1], dtype="int64")
        h = fluid.layers.fc(x, 8, act="relu")
        p = fluid.layers.fc(h, 3, act="softmax")
        loss = fluid.layers.mean(fluid.layers.cross_entropy(p, y))
        optimizer().minimize(loss)
        return loss
    return build


def test_mlp_compiled_equals_interpreted_and_prints_its_segments():
    prog = _assert_same(_mlp(), _mlp_feeds())
    segs = _segments(prog)
    # forward, backward and the updates form one segment: one compiled call per step
    assert len(segs) == 1 and segs[0].attr("commit") is True
    text = str(prog)
    assert "compiled_segment(X=[x, fc_0.w_0" in text
    inner = [op.type for op in segs[0].attr("sub_block").ops]
    assert inner[:3] == ["mul", "elementwise_add", "relu"] and "mul_grad" in inner
    assert inner[-12:-8] == ["adam"] * 4 and set(inner[-8:]) == {"scale"}
    # only what is needed after the segment leaves it: the loss and the new persistables,
    # no activation of the forward pass and no gradient
    outs = set(segs[0].output("Out"))
    assert "fc_0.tmp_2" not in outs and "fc_0.w_0@GRAD" not in outs
    assert {"mean_0.tmp_0", "fc_0.w_0", "fc_0.w_0_moment1_0", "fc_1.b_0_beta2_pow_acc_0"} <= outs
    prog.verify()
    # without fusing, the updates are a segment of their own, updating in place
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()), fluid.unique_name.guard():
        loss = _mlp()()
    segs = _segments(compile_regions(main, keep=[loss.name], fuse_updates=False))
    assert len(segs) == 2 and not segs[0].attr("commit") and not segs[1].attr("commit")
    assert {op.type for op in segs[1].attr("sub_block").ops} == {"adam", "scale"}
    assert set(segs[0].output("Out")) == {"mean_0.tmp_0", "fc_0.w_0@GRAD", "fc_0.b_0@GRAD",
                                          "fc_1.w_0@GRAD", "fc_1.b_0@GRAD"}


def test_cnn_with_batch_norm_and_seeded_dropout():
    rng = np.random.RandomState(1)
    imgs = rng.rand(STEPS, 4, 1, 6, 6).astype("float32")
    labels = rng.randint(0, 3, (STEPS, 4, 1)).astype("int64")

    def build():
        img = fluid.layers.data(name="img", shape=[1, 6, 6], dtype="float32")
        label = fluid.layers.data(name="label", shape=[1], dtype="int64")
        c = fluid.layers.conv2d(img, num_filters=2, filter_size=3, act=None)
        c = fluid.layers.batch_norm(c, act="relu")
        c = fluid.layers.pool2d(c, pool_size=2, pool_stride=2)
        c = fluid.layers.dropout(c, dropout_prob=0.3, seed=5)
        p = fluid.layers.fc(c, 3, act="softmax")
        loss = fluid.layers.mean(fluid.layers.cross_entropy(p, label))
        fluid.optimizer.Momentum(0.05, momentum=0.9).minimize(loss)
        return loss

    prog = _assert_same(build, lambda i: {"img": imgs[i], "label": labels[i]})
    block = prog.global_block()
    # the seeded dropout stays interpreted (the same masks), its neighbours compile
    assert "dropout" in [op.type for op in block.ops]
    assert len(_segments(prog)) >= 3


def test_sparse_embedding_stays_interpreted_around_compiled_neighbours():
    rng = np.random.RandomState(2)
    ids = rng.randint(0, 10, (STEPS, 6, 1)).astype("int64")
    ys = rng.rand(STEPS, 6, 1).astype("float32")

    def build():
        w = fluid.layers.data(name="w", shape=[1], dtype="int64")
        y = fluid.layers.data(name="y", shape=[1], dtype="float32")
        emb = fluid.layers.embedding(w, size=[10, 4], is_sparse=True)
        pred = fluid.layers.fc(fluid.layers.tanh(emb), 1)
        loss = fluid.layers.mean(fluid.layers.square_error_cost(pred, y))
        fluid.optimizer.SGD(0.1).minimize(loss)
        return loss

    prog = _assert_same(build, lambda i: {"w": ids[i], "y": ys[i]})
    types = [op.type for op in prog.global_block().ops]
    assert "lookup_table" in types and "lookup_table_grad" in types
    assert _segments(prog)


def test_while_loop_stays_interpreted_and_its_neighbours_compile():
    xs = np.random.RandomState(3).rand(STEPS, 4, 3).astype("float32")

    def build():
        x = fluid.layers.data(name="x", shape=[3], dtype="float32")
        h = fluid.layers.fc(x, 3, act="tanh")
        h = fluid.layers.scale(h, scale=2.0)
        i = fluid.layers.fill_constant(shape=[1], dtype="int64", value=0)
        n = fluid.layers.fill_constant(shape=[1], dtype="int64", value=3)
        acc = fluid.layers.fill_constant(shape=[1], dtype="float32", value=0.0)
        cond = fluid.layers.less_than(i, n)
        loop = fluid.layers.While(cond)
        with loop.block():
            s = fluid.layers.reduce_sum(h)
            fluid.layers.assign(fluid.layers.elementwise_add(acc, s), acc)
            fluid.layers.increment(i, in_place=True)
            fluid.layers.less_than(i, n, cond=cond)
        out = fluid.layers.scale(fluid.layers.elementwise_mul(acc, acc), scale=0.5)
        return fluid.layers.mean(out)

    prog = _assert_same(build, lambda i: {"x": xs[i]})
    types = [op.type for op in prog.global_block().ops]
    assert "while" in types and SEGMENT_OP in types


def test_a_new_batch_size_does_not_recompile(caplog):
    from torch._dynamo.utils import counters

    sizes = [8, 8, 5, 3, 8]
    rng = np.random.RandomState(4)
    xs = [rng.rand(n, 6).astype("float32") for n in sizes]
    ys = [rng.randint(0, 3, (n, 1)).astype("int64") for n in sizes]
    feeds = lambda i: {"x": xs[i], "y": ys[i]}  # noqa: E731
    graphs = counters["stats"]["unique_graphs"]
    with caplog.at_level(logging.WARNING, logger="parafluid.compile"):
        prog = _assert_same(_mlp(lambda: fluid.optimizer.SGD(0.1)), feeds)
    # x and y are -1 first in the IR: the segment is compiled with a dynamic batch
    # dimension from its first call, so batches 5 and 3 reuse the code compiled for 8
    assert len(_segments(prog)) == 1
    assert counters["stats"]["unique_graphs"] - graphs == 1
    recompiles = [r for r in caplog.records if "recompiles" in r.getMessage()]
    assert not recompiles, [r.getMessage() for r in recompiles]


def _untraceable(ins, attrs, ctx):
    import torch

    if torch.compiler.is_compiling():
        raise NotImplementedError("this kernel talks to a device driver")
    return {"Out": ins["X"] * 3.0}


register_op("test_untraceable_triple", inputs=("X",), outputs=("Out",),
            infer_shape=same_as("X"), kernel=_untraceable)


def test_an_op_that_cannot_compile_falls_back_with_one_warning_naming_it(caplog):
    xs = np.random.RandomState(5).rand(STEPS, 4, 3).astype("float32")

    def build():
        x = fluid.layers.data(name="x", shape=[3], dtype="float32")
        h = fluid.layers.fc(x, 3)
        helper = fluid.layer_helper.LayerHelper("test_untraceable_triple")
        t = helper.create_variable_for_type_inference("float32")
        helper.append_op(type="test_untraceable_triple", inputs={"X": [h]},
                         outputs={"Out": [t]})
        loss = fluid.layers.mean(fluid.layers.square(t))
        fluid.optimizer.SGD(0.1).minimize(loss)
        return loss

    with caplog.at_level(logging.WARNING, logger="parafluid.compile"):
        _assert_same(build, lambda i: {"x": xs[i]})
    falls = [r.getMessage() for r in caplog.records if "falls back" in r.getMessage()]
    assert len(falls) == 1, falls
    assert "op test_untraceable_triple (created at" in falls[0] and "cannot compile" in falls[0]


def test_declared_and_detected_reasons_keep_ops_out_of_segments():
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        x = fluid.layers.data(name="x", shape=[3], dtype="float32")
        d = fluid.layers.dropout(x, dropout_prob=0.5, seed=3)
        fluid.layers.Print(d)
    block = main.global_block()
    reasons = {op.type: why_not_compilable(op, block) for op in block.ops}
    assert "random" in reasons["dropout"]
    assert "side effect" in reasons["print"]


def test_an_op_error_inside_a_segment_names_the_op():
    def build():
        x = fluid.layers.data(name="x", shape=[6], dtype="float32")
        y = fluid.layers.data(name="y", shape=[1], dtype="int64")
        p = fluid.layers.fc(fluid.layers.fc(x, 4, act="relu"), 3, act="softmax")
        return fluid.layers.mean(fluid.layers.cross_entropy(p, y))

    feeds = _mlp_feeds()
    good = feeds(0)
    bad = {"x": good["x"], "y": np.full_like(good["y"], 7)}
    _train(build, lambda i: good, True, steps=1)
    with pytest.raises(fluid.OpRunError, match="cross_entropy.*label 7 is out of range"):
        _train(build, lambda i: bad, True, steps=1)


def test_nan_check_names_the_first_op_that_made_the_nan(monkeypatch):
    monkeypatch.setenv("FLAGS_check_nan_inf", "1")

    def build():
        x = fluid.layers.data(name="x", shape=[3], dtype="float32")
        h = fluid.layers.fc(x, 3)
        lg = fluid.layers.log(fluid.layers.scale(h, scale=1.0, bias=-100.0))
        loss = fluid.layers.mean(fluid.layers.exp(lg))
        fluid.optimizer.SGD(0.1).minimize(loss)
        return loss

    xs = np.random.RandomState(6).rand(2, 4, 3).astype("float32")
    with pytest.raises(fluid.OpRunError) as info:
        _train(build, lambda i: {"x": xs[i]}, True, steps=1)
    msg = str(info.value)
    # the segment's outputs hold the NaN; re-run op by op, the first op that made it is named
    assert "op #3 log (X=[scale_0.tmp_0])" in msg and "FloatingPointError" in msg
    assert "log_0.tmp_0" in msg


def test_a_failing_segment_applies_no_update():
    def build():
        x = fluid.layers.data(name="x", shape=[6], dtype="float32")
        y = fluid.layers.data(name="y", shape=[1], dtype="int64")
        p = fluid.layers.fc(x, 3, act="softmax")
        loss = fluid.layers.mean(fluid.layers.cross_entropy(p, y))
        fluid.optimizer.Adam(0.1).minimize(loss)
        return loss

    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        loss = build()
    prog = compile_regions(main, keep=[loss.name])
    feeds = _mlp_feeds()
    scope = fluid.Scope()
    exe = fluid.Executor(fluid.CPUPlace())
    with fluid.scope_guard(scope):
        exe.run(startup)
        exe.run(prog, feed=feeds(0), fetch_list=[loss])
        before = {v.name: np.array(scope.find_var(v.name).value)
                  for v in main.list_vars() if v.persistable}
        bad = dict(feeds(1), y=np.full((8, 1), 9, "int64"))
        with pytest.raises(fluid.OpRunError) as info:
            exe.run(prog, feed=bad, fetch_list=[loss])
        # forward, backward and updates are one call that commits only when it returned:
        # the step is undone whole, with no "partly applied" warning
        assert "partly applied" not in "".join(getattr(info.value, "__notes__", []))
        # a NaN found in the segment's outputs: its new values are never committed
        with pytest.raises(fluid.OpRunError, match="FloatingPointError"):
            fluid.Executor(fluid.CPUPlace(), check_nan_inf=True).run(
                prog, feed=dict(feeds(2), x=np.full((8, 6), np.inf, "float32")),
                fetch_list=[loss])
        for name, value in before.items():
            np.testing.assert_array_equal(np.array(scope.find_var(name).value), value,
                                          err_msg=name)


def _tiered_run(wait: bool):
    """Train the MLP with tiered compilation; ``wait``: let the worker finish after the first
    step (the segment switches over at the second)."""
    from parafluid.engine import tiered
    from parafluid.engine.compiled_functions import background_idle, compile_stats

    feeds = _mlp_feeds()
    main, startup = fluid.Program(), fluid.Program()
    startup.random_seed = 11
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        loss = _mlp()()
    bs = fluid.BuildStrategy()
    bs.enable_compile = bs.compile_in_background = True
    prog = fluid.CompiledProgram(main, build_strategy=bs)
    scope, exe = fluid.Scope(), fluid.Executor(fluid.CPUPlace())
    switched = compile_stats["tiered"]
    try:
        with fluid.scope_guard(scope):
            exe.run(startup)
            got = [exe.run(prog, feed=feeds(0), fetch_list=[loss])[0]]
            if wait:
                assert background_idle(timeout=900), "the compile worker did not finish"
            got += [exe.run(prog, feed=feeds(i), fetch_list=[loss])[0] for i in range(1, STEPS)]
            params = {p.name: np.array(scope.find_var(p.name).value)
                      for p in main.all_parameters()}
    finally:
        tiered.cancel_jobs()  # (kills the worker of a run that did not wait for it)
    assert "tiered=True" in str(prog._segments_for([loss.name]))
    return np.array(got), params, compile_stats["tiered"] - switched


def _check_tiered(wait: bool) -> int:
    ref, ref_p, _ = _train(_mlp(), _mlp_feeds(), False, steps=STEPS)
    got, params, switched = _tiered_run(wait)
    np.testing.assert_allclose(got, ref, atol=1e-5, rtol=0)
    for name in ref_p:
        np.testing.assert_allclose(params[name], ref_p[name], atol=1e-5, rtol=0, err_msg=name)
    return switched


def test_tiered_compilation_starts_at_once_interpreted_with_the_same_numbers():
    # the steps run interpreted while a worker process compiles (killed here, unfinished)
    assert _check_tiered(wait=False) == 0


@pytest.mark.slow
def test_tiered_compilation_switches_over_when_the_worker_is_done(monkeypatch):
    # the worker compiles ahead of time (torch.export + AOTInductor) in its own process;
    # the step after it finished loads the package, checks it and switches over
    # NOTE: at its usual lowest priority a busy machine (a parallel test run) would starve it
    monkeypatch.setenv("PARAFLUID_TIERED_NICE", "0")
    assert _check_tiered(wait=True) == 1


@pytest.mark.parametrize("option", ["Default", "OpDetail"])
def test_profiler_times_a_segment_as_one_event_or_each_op_on_request(option, tmp_path):
    from parafluid import profiler

    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        loss = _mlp(lambda: fluid.optimizer.SGD(0.1))()
    prog = compile_regions(main, keep=[loss.name])
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    feeds = _mlp_feeds()
    exe.run(prog, feed=feeds(0), fetch_list=[loss])
    profiler.start_profiler("CPU", option)
    try:
        exe.run(prog, feed=feeds(1), fetch_list=[loss])
        records = list(profiler._RECORDING.records)
    finally:
        profiler.stop_profiler(profile_path=str(tmp_path / "trace.json"))
    names = [r.op_type for r in records]
    if option == "Default":
        assert any(n.startswith("compiled_segment 0 (") and "mul, elementwise_add, relu" in n
                   for n in names), names
        assert "mul" not in names
    else:
        assert "mul" in names and "mul_grad" in names and "sgd" in names
        assert not any(n.startswith("compiled_segment") for n in names)


# ------------------------------------------------------------------ the switch: BuildStrategy


@pytest.fixture
def compiled_without_fallback():
    """The test's segments compiled, and none fell back to the interpreter."""
    from parafluid.engine.compiled_functions import compile_stats

    before = dict(compile_stats)
    yield
    assert compile_stats["fallbacks"] == before["fallbacks"]
    assert compile_stats["compiled"] > before["compiled"]


def _strategy(**fields):
    bs = fluid.BuildStrategy()
    bs.enable_compile = True
    for k, v in fields.items():
        setattr(bs, k, v)
    return bs


def _mlp_program(optimizer=lambda: fluid.optimizer.Momentum(0.05, momentum=0.9)):
    main, startup = fluid.Program(), fluid.Program()
    startup.random_seed = 11  # as _train's
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        loss = _mlp(optimizer)()
    return main, startup, loss


def test_compiled_program_with_enable_compile_runs_segments_on_one_device(
        compiled_without_fallback):
    feeds = _mlp_feeds()
    ref_l, ref_p, _ = _train(_mlp(), feeds, False)
    main, startup, loss = _mlp_program(lambda: fluid.optimizer.Adam(0.01))
    compiled = fluid.CompiledProgram(main, build_strategy=_strategy())
    scope = fluid.Scope()
    exe = fluid.Executor(fluid.CPUPlace())
    with fluid.scope_guard(scope):
        exe.run(startup)
        losses = [exe.run(compiled, feed=feeds(i), fetch_list=[loss])[0] for i in range(STEPS)]
    np.testing.assert_allclose(np.array(losses).reshape(-1), ref_l.reshape(-1), atol=1e-5)
    for name, value in ref_p.items():
        np.testing.assert_allclose(np.array(scope.find_var(name).value), value, atol=1e-5)
    # one device, nothing else asked: the executor's own plan runs the segmented program
    assert compiled._executor is None
    program, = compiled._segmented.values()
    assert SEGMENT_OP in [op.type for op in program.global_block().ops]


@pytest.mark.parametrize("reduce", [False, True], ids=["allreduce", "reduce"])
def test_parallel_executor_on_two_devices_compiles_each_devices_part(
        reduce, compiled_without_fallback):
    from parafluid.testing.data_parallel import assert_same_training, run_parallel, run_single

    rng = np.random.RandomState(7)
    feeds = [{"x": rng.rand(8, 6).astype("float32"),
              "y": rng.randint(0, 3, (8, 1)).astype("int64")} for _ in range(STEPS)]
    single = run_single(_mlp_program, feeds)
    bs = _strategy()
    if reduce:
        bs.reduce_strategy = fluid.BuildStrategy.ReduceStrategy.Reduce
    parallel = run_parallel(_mlp_program, feeds, ndev=2, build_strategy=bs)
    assert_same_training(single, parallel, atol=1e-5)
    program = parallel.extra["executor"].program
    types = [op.type for op in program.global_block().ops]
    assert SEGMENT_OP in types
    # the collectives stay between the segments
    comm = "c_reduce_sum" if reduce else "c_allreduce_coalesced"
    assert comm in types
    if not reduce:
        # in one process the all-reduces are one, after the backward: each device's step is
        # two compiled calls, not one more per gradient
        assert types == [SEGMENT_OP, "c_allreduce_coalesced", SEGMENT_OP]
    assert all(comm not in [o.type for o in op.attr("sub_block").ops]
               for op in program.global_block().ops if op.type == SEGMENT_OP)


def test_placed_two_stage_program_with_four_micro_batches_compiles_per_stage(
        compiled_without_fallback):
    rng = np.random.default_rng(3)
    batches = []
    for _ in range(STEPS):
        x = rng.standard_normal((12, 6)).astype("float32")
        batches.append({"x": x, "y": (x.sum(1, keepdims=True) * 0.3).astype("float32")})

    def build(placed):
        main, startup = fluid.Program(), fluid.Program()
        main.random_seed = startup.random_seed = 7
        with fluid.program_guard(main, startup), fluid.unique_name.guard():
            x = fluid.layers.data(name="x", shape=[6], dtype="float32")
            y = fluid.layers.data(name="y", shape=[1], dtype="float32")
            with fluid.place_guard("/node:worker/cpu:0") if placed else _null():
                h = fluid.layers.fc(input=x, size=8, act="tanh")
            with fluid.place_guard("/node:worker/cpu:1") if placed else _null():
                pred = fluid.layers.fc(input=h, size=1)
                loss = fluid.layers.mean(fluid.layers.square_error_cost(input=pred, label=y))
            fluid.optimizer.SGD(0.1).minimize(loss)
        return main, startup, loss

    def train(placed, bs):
        main, startup, loss = build(placed)
        scope = fluid.Scope()
        exe = fluid.Executor(fluid.CPUPlace())
        prog = fluid.CompiledProgram(main, build_strategy=bs) if bs else main
        with fluid.scope_guard(scope):
            exe.run(startup)
            losses = [float(np.asarray(exe.run(prog, feed=b, fetch_list=[loss])[0]).ravel()[0])
                      for b in batches]
        params = {p.name: np.array(scope.find_var(p.name).value) for p in main.all_parameters()}
        return losses, params, (prog._executor.program if bs else None)

    ref_l, ref_p, _ = train(False, None)
    got_l, got_p, program = train(True, _strategy(num_microbatches=4))
    np.testing.assert_allclose(got_l, ref_l, atol=1e-5)
    for name, value in ref_p.items():
        np.testing.assert_allclose(got_p[name], value, atol=1e-5, err_msg=name)
    segs = [op for op in program.global_block().ops if op.type == SEGMENT_OP]
    assert {op.attrs.get("op_device") for op in segs} >= {"cpu:0", "cpu:1"}
    assert "memcpy" in [op.type for op in program.global_block().ops]


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_compiled_data_parallel_training_is_bitwise_the_same_for_any_num_threads():
    from parafluid.testing.data_parallel import run_parallel

    rng = np.random.RandomState(8)
    feeds = [{"x": rng.rand(8, 6).astype("float32"),
              "y": rng.randint(0, 3, (8, 1)).astype("int64")} for _ in range(3)]
    runs = []
    for threads in (1, 2):
        es = fluid.ExecutionStrategy()
        es.num_threads = threads
        runs.append(run_parallel(_mlp_program, feeds, ndev=2, build_strategy=_strategy(),
                                 exec_strategy=es))
    for a, b in zip(runs[0].losses, runs[1].losses):
        np.testing.assert_array_equal(a, b)
    for name, value in runs[0].params.items():
        np.testing.assert_array_equal(runs[1].params[name], value, err_msg=name)


def test_debug_lists_every_op_left_out_and_why(monkeypatch, caplog):
    monkeypatch.setenv("PARAFLUID_DEBUG", "1")
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        x = fluid.layers.data(name="x", shape=[3], dtype="float32")
        h = fluid.layers.dropout(fluid.layers.relu(x), dropout_prob=0.5, seed=3)
        fluid.layers.scale(fluid.layers.relu(h), scale=2.0)
    with caplog.at_level(logging.WARNING, logger="parafluid.compile"):
        compile_regions(main, keep=[])
    left = [r.getMessage() for r in caplog.records if "stays interpreted" in r.getMessage()]
    assert len(left) == 1 and "op #1 dropout" in left[0] and "random" in left[0]


def test_a_segment_given_lod_runs_op_by_op_and_its_outputs_keep_the_lod(caplog):
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        x = fluid.layers.data(name="x", shape=[3], dtype="float32", lod_level=1)
        h = fluid.layers.relu(fluid.layers.scale(x, scale=2.0, bias=-1.0))
        pooled = fluid.layers.sequence_pool(h, pool_type="sum")
    prog = compile_regions(main, keep=[h.name, pooled.name])
    assert _segments(prog)
    values = np.random.RandomState(9).rand(5, 3).astype("float32")
    feed = {"x": fluid.create_lod_tensor(values, [[2, 3]], fluid.CPUPlace())}
    exe = fluid.Executor(fluid.CPUPlace())
    with caplog.at_level(logging.WARNING, logger="parafluid.compile"):
        got_h, got_pool = exe.run(prog, feed=feed, fetch_list=[h, pooled], return_numpy=False)
    ref_h, ref_pool = exe.run(main, feed=feed, fetch_list=[h, pooled], return_numpy=False)
    assert got_h.lod() == ref_h.lod() == [[0, 2, 5]]
    np.testing.assert_allclose(np.array(got_h), np.array(ref_h), atol=1e-6)
    np.testing.assert_allclose(np.array(got_pool), np.array(ref_pool), atol=1e-6)
    assert any("carries a LoD" in r.getMessage() for r in caplog.records)
