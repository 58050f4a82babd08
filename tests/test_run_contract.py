"""The contracts of the one run path: passes, side effects, the RunContext, op hooks."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pytest
import torch

import parafluid as fluid
from parafluid.engine.runtime import OpRecord, add_op_hook, remove_op_hook
from parafluid.framework import OpRole
from parafluid.ops.registry import register_op, same_as
from parafluid.parallel.strategy import build_pipeline
from parafluid.passes import PassPipeline
from parafluid.passes.prune import eliminate_dead_code, prune

# ------------------------------------------------------------------ test-only ops

SENT: list[float] = []


def _record_send(ins: dict, attrs: dict, ctx: Any) -> dict:
    SENT.append(float(ins["X"].sum()))
    return {}


register_op("contract_test_send", inputs=("X",), outputs=(), kernel=_record_send,
            infer_shape=lambda ins, attrs: {}, side_effect=True)


def _run_sub_block(ins: dict, attrs: dict, ctx: Any) -> dict:
    out, = ctx.run_block(attrs["sub_block"].idx, feed={"sub_in": ins["X"]},
                         fetch=[attrs["fetch"]])
    return {"Out": out}


register_op("contract_test_run_block", inputs=("X",), outputs=("Out",),
            attrs={"sub_block": None, "fetch": ""}, infer_shape=same_as("X"),
            kernel=_run_sub_block)

DEVICES: list[torch.device] = []


def _note_device(ins: dict, attrs: dict, ctx: Any) -> dict:
    DEVICES.append(ctx.device)
    return {"Out": ins["X"] * 1.0}


register_op("contract_test_device", inputs=("X",), outputs=("Out",),
            infer_shape=same_as("X"), kernel=_note_device)


def _read_scope(ins: dict, attrs: dict, ctx: Any) -> dict:
    # what the scope holds for the persistable *now*, in the middle of the run
    return {"Out": ctx.scope.find_var(attrs["name"]).value.clone()}


register_op("contract_test_read_scope", inputs=("X",), outputs=("Out",), attrs={"name": ""},
            infer_shape=lambda ins, attrs: {"Out": ins["X"]}, kernel=_read_scope)

EVENT = threading.Event()


def _wait_for_peer(ins: dict, attrs: dict, ctx: Any) -> dict:
    if not EVENT.wait(timeout=ctx.deadline_s):
        raise TimeoutError(f"no message from peer 127.0.0.1:1 within {ctx.deadline_s} s")
    return {"Out": ins["X"] * 1.0}


register_op("contract_test_blocking_recv", inputs=("X",), outputs=("Out",),
            infer_shape=same_as("X"), kernel=_wait_for_peer, side_effect=True)


def _append(op_type: str, x: Any, attrs: dict | None = None, out: bool = True) -> Any:
    helper = fluid.layer_helper.LayerHelper(op_type)
    y = helper.create_variable_for_type_inference(x.dtype) if out else None
    helper.append_op(op_type, inputs={"X": [x]}, outputs={"Out": [y]} if out else {},
                     attrs=attrs or {})
    return y


def _regression() -> tuple[Any, Any, Any]:
    x = fluid.layers.data(name="x", shape=[4], dtype="float32")
    y = fluid.layers.data(name="y", shape=[1], dtype="float32")
    h = fluid.layers.fc(input=x, size=8, act="relu")
    pred = fluid.layers.fc(input=h, size=1)
    loss = fluid.layers.mean(fluid.layers.square_error_cost(input=pred, label=y))
    fluid.optimizer.SGD(learning_rate=0.1).minimize(loss)
    return x, pred, loss


# ------------------------------------------------------------------ aggregation as a pass


def test_data_parallel_program_shows_the_all_reduces_and_the_loss_scale(monkeypatch) -> None:
    monkeypatch.setenv("CPU_NUM", "2")
    _, _, loss = _regression()
    main = fluid.default_main_program()
    pe = fluid.ParallelExecutor(use_cuda=False, main_program=main, loss_name=loss.name)
    text = str(pe.program)
    params = [p.name for p in main.global_block().all_parameters()]
    for p in params:
        assert f"{{Out=[{p}@GRAD]}} = c_allreduce_sum(X=[{p}@GRAD])" in text
    assert f"{{Out=[{loss.name}@GRAD]}} = scale(X=[{loss.name}@GRAD])" in text
    assert "scale=0.5" in text
    assert "c_allreduce_sum" not in str(main), "the caller's program is not modified"
    # each all-reduce comes right after the op producing its gradient, before any update
    ops = pe.program.global_block().ops
    types = [op.type for op in ops]
    assert max(i for i, t in enumerate(types) if t == "c_allreduce_sum") < types.index("sgd")


def test_reduce_mode_program_marks_owners_and_broadcasts() -> None:
    _, _, loss = _regression()
    bs = fluid.BuildStrategy()
    bs.reduce_strategy = fluid.BuildStrategy.ReduceStrategy.Reduce
    program = build_pipeline(bs, 2, loss.name)(fluid.default_main_program())
    ops = program.global_block().ops
    sgds = [op for op in ops if op.type == "sgd"]
    assert sgds and all(op.attrs["owner_device"] in (0, 1) for op in sgds)
    assert {op.attrs["owner_device"] for op in sgds} == {0, 1}, "balanced over 2 devices"
    for op in sgds:
        param = op.input("Param")[0]
        bcast = [o for o in ops if o.type == "c_broadcast" and o.input("X") == [param]]
        assert len(bcast) == 1 and bcast[0].attrs["root"] == op.attrs["owner_device"]
        assert bcast[0].attrs["op_role"] == OpRole.Optimize


def test_pipeline_is_printable_and_dumps_after_each_pass(tmp_path, monkeypatch) -> None:
    _, _, loss = _regression()
    bs = fluid.BuildStrategy()
    bs.fuse_elewise_add_act_ops = True
    pipe = build_pipeline(bs, 2, loss.name, in_process=True)  # (unfused: one sum per gradient)
    assert str(pipe) == "fuse_elewise_add_act -> grad_aggregation"
    monkeypatch.setenv("PARAFLUID_DUMP_PASSES", str(tmp_path))
    pipe(fluid.default_main_program())
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == ["00_input.txt", "01_fuse_elewise_add_act.txt", "02_grad_aggregation.txt"]
    assert "c_allreduce_sum" in (tmp_path / "02_grad_aggregation.txt").read_text()
    assert "c_allreduce_sum" not in (tmp_path / "01_fuse_elewise_add_act.txt").read_text()
    with pytest.raises(TypeError, match="must be a \\(name, function\\) pair"):
        PassPipeline([("x", 3)])


# ------------------------------------------------------------------ side effects


def test_prune_and_dead_code_elimination_keep_side_effect_ops() -> None:
    x = fluid.layers.data(name="x", shape=[3], dtype="float32")
    a = fluid.layers.scale(x, scale=2.0)
    _append("contract_test_send", a, out=False)     # its result is used by nobody
    unused = fluid.layers.scale(x, scale=5.0)        # dead: nothing reads it
    b = fluid.layers.scale(x, scale=3.0)
    main = fluid.default_main_program()
    pruned = prune(main, targets=[b], feeds=[x])
    assert [op.type for op in pruned.global_block().ops] == \
        ["scale", "contract_test_send", "scale"]
    lean = eliminate_dead_code(main, keep=[b])
    types = [op.type for op in lean.global_block().ops]
    assert types == ["scale", "contract_test_send", "scale"]
    assert all(unused.name not in op.output_arg_names for op in lean.global_block().ops)
    SENT.clear()
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(pruned, feed={"x": np.ones([2, 3], "float32")}, fetch_list=[b])
    assert SENT == [12.0], "the pruned program still sends (2 * ones(2, 3)).sum()"


def test_side_effect_ops_keep_their_order_in_the_parallel_graph(monkeypatch) -> None:
    from parafluid.engine.graph import build_graph

    x = fluid.layers.data(name="x", shape=[3], dtype="float32")
    a = fluid.layers.scale(x, scale=2.0)
    b = fluid.layers.scale(x, scale=3.0)
    _append("contract_test_send", b, out=False)
    _append("contract_test_send", a, out=False)  # no data dependency on the first send
    g = build_graph(fluid.default_main_program(), 2)
    sends = [n for n in g.nodes if n.type == "contract_test_send"]
    for d in (0, 1):
        first, second = [n for n in sends if n.device == d]
        assert first.index in second.deps


# ------------------------------------------------------------------ the run context


def test_a_kernel_runs_a_sub_block_through_the_context() -> None:
    x = fluid.layers.data(name="x", shape=[3], dtype="float32")
    main = fluid.default_main_program()
    w = fluid.layers.create_global_var(shape=[3], value=2.0, dtype="float32",
                                       persistable=True, name="w")
    sub = main._create_block()
    sub_in = sub.create_var(name="sub_in", shape=[-1, 3], dtype="float32")
    prod = sub.create_var(name="prod", shape=[-1, 3], dtype="float32")
    sub.append_op("elementwise_mul", inputs={"X": [sub_in], "Y": [w]}, outputs={"Out": [prod]})
    main._rollback()
    out = _append("contract_test_run_block", x, {"sub_block": sub, "fetch": "prod"})
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(fluid.default_startup_program())
    xs = np.arange(6, dtype="float32").reshape(2, 3)
    for _ in range(2):  # the sub-block's plan is cached and reused
        got, = exe.run(main, feed={"x": xs}, fetch_list=[out])
        np.testing.assert_array_equal(got, xs * 2.0)


def test_one_op_is_bound_on_its_own_device() -> None:
    x = fluid.layers.data(name="x", shape=[3], dtype="float32")
    a = _append("contract_test_device", x)
    b = _append("contract_test_device", a, {"op_device": "cpu:1"})
    c = _append("contract_test_device", b)
    DEVICES.clear()
    exe = fluid.Executor(fluid.CPUPlace())
    got, = exe.run(feed={"x": np.ones([2, 3], "float32")}, fetch_list=[c])
    np.testing.assert_array_equal(got, np.ones([2, 3]))
    assert DEVICES == [torch.device("cpu"), torch.device("cpu", 1), torch.device("cpu")]
    assert "op_device='cpu:1'" in str(fluid.default_main_program())
    _append("contract_test_device", c, {"op_device": "tpu:0"})
    with pytest.raises(ValueError, match="op_device must be 'cpu', 'cpu:N'.*got 'tpu:0'"):
        exe.run(feed={"x": np.ones([2, 3], "float32")}, fetch_list=[c])


def test_persistables_reach_the_scope_as_soon_as_an_op_writes_them() -> None:
    x = fluid.layers.data(name="x", shape=[3], dtype="float32")
    total = fluid.layers.create_global_var(shape=[1], value=0.0, dtype="float32",
                                           persistable=True, name="total")
    fluid.layers.assign(fluid.layers.reduce_sum(x), output=total)  # a new tensor, not in place
    seen = _append("contract_test_read_scope", x, {"name": "total"})
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(fluid.default_startup_program())
    got, = exe.run(feed={"x": np.full([2, 3], 2.0, "float32")}, fetch_list=[seen])
    np.testing.assert_array_equal(got, [12.0])  # the later op saw the value in the scope


@pytest.mark.parametrize("how", ["env", "core.globals"])
def test_a_blocking_op_gives_up_at_the_deadline_and_the_executor_stays_usable(
        monkeypatch, how: str) -> None:
    if how == "env":
        monkeypatch.setenv("FLAGS_rpc_deadline", "200")
    else:
        monkeypatch.delenv("FLAGS_rpc_deadline", raising=False)
        fluid.core.globals()["FLAGS_rpc_deadline"] = 200
    x = fluid.layers.data(name="x", shape=[3], dtype="float32")
    out = _append("contract_test_blocking_recv", x)
    exe = fluid.Executor(fluid.CPUPlace())
    feed = {"x": np.ones([1, 3], "float32")}
    EVENT.clear()
    with pytest.raises(fluid.OpRunError, match="no message from peer 127.0.0.1:1 within 0.2 s"):
        exe.run(feed=feed, fetch_list=[out])
    EVENT.set()
    got, = exe.run(feed=feed, fetch_list=[out])
    np.testing.assert_array_equal(got, feed["x"])


# ------------------------------------------------------------------ op hooks


@pytest.mark.parametrize("devices", [1, 2])
def test_op_hooks_see_every_op_of_both_executors(devices: int, monkeypatch) -> None:
    monkeypatch.setenv("CPU_NUM", str(devices))
    _, _, loss = _regression()
    main = fluid.default_main_program()
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(fluid.default_startup_program())
    feed = {"x": np.ones([4, 4], "float32"), "y": np.zeros([4, 1], "float32")}
    target = main if devices == 1 else fluid.CompiledProgram(main).with_data_parallel(
        loss_name=loss.name)
    exe.run(target, feed=feed, fetch_list=[loss])  # compiled before the hook exists
    records: list[OpRecord] = []
    add_op_hook(records.append)
    try:
        exe.run(target, feed=feed, fetch_list=[loss])
    finally:
        remove_op_hook(records.append)
    nops = len(main.global_block().ops)
    local = [r for r in records if r.device != -1]
    assert len(local) == (nops if devices == 1 else devices * (nops + 1))  # + the scale
    assert all(r.end_ns >= r.start_ns for r in records)
    assert {r.op_type for r in records} >= {"mul", "sgd", "mean_grad"}
    assert (devices == 2) == any(r.op_type == "c_allreduce_sum" for r in records)
    records.clear()
    exe.run(target, feed=feed, fetch_list=[loss])
    assert records == [], "a removed hook sees nothing"
