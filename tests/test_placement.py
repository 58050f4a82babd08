"""Operator placement in one process: place_guard / device_guard record places on ops,
backward and optimizer ops follow them, the transfer pass inserts copies, and a program
placed on two CPU devices computes what the unplaced program computes."""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np
import pytest
import torch

import parafluid as fluid
from parafluid.ops.registry import register_op, same_as
from parafluid.passes.place_transfers import insert_place_transfers
from parafluid.placement import (
    GRAMMAR,
    device_name,
    is_placed,
    parse_device,
    parse_node,
    parse_place,
    place_of,
    torch_device,
)
from parafluid.testing import OpCase, check_op, rand

STAGE0, STAGE1 = "/node:worker/cpu:0", "/node:worker/cpu:1"


def _mlp(stage0: str | None = None, stage1: str | None = None, opt_place: str | None = None,
         seed: int = 7, slow: bool = False
         ) -> tuple[fluid.Program, fluid.Program, fluid.Variable]:
    """A 2-stage MLP regression; each stage optionally inside a place_guard."""
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = seed

    def guard(place: str | None):
        return fluid.place_guard(place) if place else _null()

    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = fluid.layers.data(name="x", shape=[6], dtype="float32")
        y = fluid.layers.data(name="y", shape=[1], dtype="float32")
        with guard(stage0):
            h = fluid.layers.fc(input=x, size=16, act="tanh")
            h = fluid.layers.fc(input=h, size=16, act="relu")
            h = _slow(h) if slow else h
        with guard(stage1):
            h = fluid.layers.fc(input=h, size=8, act="tanh")
            h = _slow(h) if slow else h
            pred = fluid.layers.fc(input=h, size=1)
            loss = fluid.layers.mean(fluid.layers.square_error_cost(input=pred, label=y))
        with guard(opt_place):
            fluid.optimizer.Momentum(learning_rate=0.05, momentum=0.9).minimize(loss)
    return main, startup, loss


def _slow_kernel(ins: dict, attrs: dict, ctx: Any) -> dict:
    time.sleep(0.004)  # a stage that takes a while, so that overlap shows in the timings
    return {"Out": ins["X"]}


register_op("placement_test_slow", inputs=("X",), outputs=("Out",), infer_shape=same_as("X"),
            kernel=_slow_kernel,
            grad=lambda op, no_grad, ctx: [{"type": "placement_test_slow",
                                       "inputs": {"X": [op.output("Out")[0] + "@GRAD"]},
                                       "outputs": {"Out": [op.input("X")[0] + "@GRAD"]},
                                       "attrs": {}}])


def _slow(x: fluid.Variable) -> fluid.Variable:
    block = fluid.default_main_program().global_block()
    out = block.create_var(name=fluid.unique_name.generate("slow"), shape=x.shape,
                           dtype=x.dtype)
    block.append_op("placement_test_slow", inputs={"X": [x]}, outputs={"Out": [out]})
    return out


class _null:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def _batches(steps: int) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(3)
    out = []
    for _ in range(steps):
        x = rng.standard_normal((12, 6)).astype("float32")
        out.append({"x": x, "y": (x.sum(1, keepdims=True) * 0.3).astype("float32")})
    return out


def _train(main: fluid.Program, startup: fluid.Program, loss: fluid.Variable, steps: int = 6
           ) -> tuple[list[float], dict[str, np.ndarray]]:
    scope = fluid.Scope()
    exe = fluid.Executor(fluid.CPUPlace())
    with fluid.scope_guard(scope):
        exe.run(startup)
        losses = [float(exe.run(main, feed=b, fetch_list=[loss])[0][0])
                  for b in _batches(steps)]
    params = {p.name: scope.find_var(p.name).value.numpy().copy()
              for p in main.all_parameters()}
    exe.close()
    return losses, params


# ------------------------------------------------------------------ the guards


def test_ops_record_their_place_and_guards_nest() -> None:
    x = fluid.layers.data(name="x", shape=[4], dtype="float32")
    with fluid.place_guard("/node:worker/cpu:0"):
        a = fluid.layers.relu(x)
        with fluid.device_guard("cpu:1"):  # replaces the device, keeps the node
            b = fluid.layers.relu(a)
        with fluid.place_guard("/node:ps/cpu"):
            c = fluid.layers.relu(b)
    d = fluid.layers.relu(c)
    ops = {op.output("Out")[0]: op for op in fluid.default_main_program().global_block().ops}
    assert place_of(ops[a.name]) == "/node:worker/cpu:0"
    assert place_of(ops[b.name]) == "/node:worker/cpu:1"
    assert place_of(ops[c.name]) == "/node:ps/cpu"
    assert place_of(ops[d.name]) == "" and "op_device" not in ops[d.name].attrs
    text = str(fluid.default_main_program())
    assert "op_device='cpu:1', op_node='worker'" in text
    with fluid.device_guard("gpu:2"):
        e = fluid.layers.relu(d)
    assert fluid.default_main_program().global_block().ops[-1].attrs["op_device"] == "gpu:2"
    assert "op_node" not in fluid.default_main_program().global_block().ops[-1].attrs
    assert e is not None


@pytest.mark.parametrize("bad", ["/node:foo/cpu", "cpu:1", "/node:worker/tpu:0",
                                 "/node:worker/gpu:3-1", "/node:worker:x/cpu", "/node:worker/"])
def test_a_malformed_place_fails_at_the_call_quoting_it_and_the_grammar(bad: str) -> None:
    with pytest.raises(ValueError) as info:
        fluid.place_guard(bad)  # no `with`: the call itself checks
    assert repr(bad) in str(info.value) and GRAMMAR in str(info.value)


def test_a_malformed_device_fails_at_the_call() -> None:
    with pytest.raises(ValueError, match="malformed device 'tpu:0'"):
        fluid.device_guard("tpu:0")
    with pytest.raises(TypeError, match="device must be a str"):
        fluid.device_guard(1)  # type: ignore[arg-type]


def test_parse_place_ranges_and_ids() -> None:
    p = parse_place("/node:worker:1/gpu:0-3")
    assert (p.node, p.device, p.device_ids) == ("worker:1", "gpu:0-3", (0, 1, 2, 3))
    assert str(parse_place("/node:ps/cpu")) == "/node:ps/cpu"
    p = parse_place("/node:worker:0/cpu:0-1")
    assert (p.node_name, p.node_id, p.device, p.device_ids) == ("worker", 0, "cpu:0-1", (0, 1))


@pytest.mark.parametrize("text, device, ids", [
    ("cpu", "cpu", (0,)), ("cpu:1", "cpu:1", (1,)), ("gpu", "gpu", (0,)), ("gpu:0", "gpu:0", (0,)),
    ("gpu:2-5", "gpu:2-5", (2, 3, 4, 5)), ("cpu:3-3", "cpu:3", (3,)), (" gpu:1 ", "gpu:1", (1,)),
    ("cuda", "gpu", (0,)), ("cuda:1", "gpu:1", (1,)),
    (torch.device("cpu"), "cpu", (0,)), (torch.device("cuda", 3), "gpu:3", (3,)),
])
def test_one_device_parser_reads_every_form(text: Any, device: str, ids: tuple) -> None:
    dev = parse_device(text)
    assert (dev.node, dev.device, dev.device_ids) == (None, device, ids)


def test_device_names_and_torch_devices_come_from_the_one_parser() -> None:
    assert [device_name(d) for d in ("cpu", "cpu:2", "gpu", "cuda:1", torch.device("cpu"))] \
        == ["cpu:0", "cpu:2", "gpu:0", "gpu:1", "cpu:0"]
    assert torch_device("cpu") == torch.device("cpu")
    assert torch_device("cpu:1") == torch.device("cpu", 1)
    assert torch_device("cpu:1", storage=True) == torch.device("cpu")
    with pytest.raises(ValueError, match="op_device 'cpu:0-1' is a device range.*'cpu:0'"):
        torch_device("cpu:0-1", "op_device")
    with pytest.raises(ValueError, match="device 'gpu:0-3' is a device range"):
        device_name("gpu:0-3")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="op_device is 'gpu:0' but torch sees no CUDA"):
            torch_device("gpu:0", "op_device")


@pytest.mark.parametrize("bad", ["tpu", "gpu:", "gpu:x", "cpu:1-0", "gpu:-1", "/node:ps/cpu",
                                 "GPU:0", ""])
def test_a_malformed_device_names_the_attr_the_forms_and_the_value(bad: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_device(bad, "op_device")
    assert repr(bad) in str(info.value)
    assert "op_device must be 'cpu', 'cpu:N', 'gpu', 'gpu:N' or a range" in str(info.value) \
        or "the device range 1-0 is empty" in str(info.value)
    with pytest.raises(TypeError, match="op_device must be a str like 'gpu:0', got int: 3"):
        parse_device(3, "op_device")


def test_one_node_parser() -> None:
    assert [parse_node(n) for n in ("worker", "worker:1", "ps", "ps:0")] == \
        [("worker", None), ("worker", 1), ("ps", None), ("ps", 0)]
    for bad in ("trainer:0", "worker:x", "worker:"):
        with pytest.raises(ValueError, match=f"malformed node {bad!r}: op_node must be"):
            parse_node(bad)


def test_the_runtime_and_the_transfer_pass_read_op_device_alike() -> None:
    # the pass and the runtime take "cuda:N" as torch's spelling of "gpu:N", and both
    # refuse the same malformed values with the same words
    for spec in ("cuda:0", "gpu:0"):
        assert parse_device(spec).device == "gpu:0"
    y = _relu_at(device="cpu:0")
    y.block.ops[-1].attrs["op_device"] = "cpu:x"
    exe = fluid.Executor(fluid.CPUPlace())
    with pytest.raises(ValueError, match="op #0 relu .*op_device must be 'cpu', 'cpu:N'.*"
                                         "got 'cpu:x'"):
        exe.run(feed={"x": np.ones([2, 3], "float32")}, fetch_list=[y])


def test_backward_ops_take_their_forward_op_place_and_updates_the_guard_around_minimize(
        ) -> None:
    main, _, _ = _mlp(STAGE0, STAGE1, opt_place="/node:worker/cpu:1")
    ops = main.global_block().ops
    for op in ops:
        if op.type == "mul_grad":
            fwd = next(f for f in ops if f.type == "mul"
                       and f.output("Out")[0] + "@GRAD" == op.input("Out@GRAD")[0])
            assert place_of(op) == place_of(fwd)
        if op.type == "momentum":  # the guard around minimize wins over the gradient's place
            assert place_of(op) == "/node:worker/cpu:1"
    assert {place_of(op) for op in ops if op.type == "mul_grad"} == {STAGE0, STAGE1}
    seed = next(op for op in ops if op.type == "fill_constant")
    assert place_of(seed) == STAGE1  # the loss gradient starts where the loss is


def test_without_a_guard_around_minimize_an_update_runs_where_its_gradient_is_made() -> None:
    main, _, _ = _mlp(STAGE0, STAGE1)
    ops = main.global_block().ops
    for op in ops:
        if op.type == "momentum":
            grad = op.input("Grad")[0]
            writer = [o for o in ops if grad in o.output_arg_names and o is not op][-1]
            assert place_of(op) == place_of(writer) != ""


def test_places_survive_clone_and_serialization() -> None:
    main, _, _ = _mlp(STAGE0, STAGE1)
    again = fluid.Program.parse_from_string(main.serialize_to_string())
    assert str(again) == str(main) == str(main.clone())
    assert is_placed(again)
    test_prog = main.clone(for_test=True)
    assert all(place_of(op) in (STAGE0, STAGE1) for op in test_prog.global_block().ops)


def test_an_unplaced_program_records_no_place() -> None:
    main, startup, _ = _mlp()
    assert not is_placed(main) and not is_placed(startup)
    assert "op_device" not in str(main) and "op_node" not in str(main)


# ------------------------------------------------------------------ the transfer pass


def _op_lines(program: fluid.Program) -> list[str]:
    return [str(op) for op in program.global_block().ops]


def test_the_pass_copies_each_crossing_value_once_and_leaves_the_input_alone() -> None:
    main, _, _ = _mlp(STAGE0, STAGE1)
    before = str(main)
    placed = insert_place_transfers(main)
    assert str(main) == before, "the caller's program is not modified"
    placed.verify()
    lines = _op_lines(placed)
    copies = [line for line in lines if " = memcpy(" in line]
    # the activation and the label go to stage 1, the activation's gradient comes back,
    # the learning rate (held on cpu:0, where feeds and unplaced values are) goes to cpu:1
    assert copies == [
        "{Out=[fc_1.tmp_2@cpu:1]} = memcpy(X=[fc_1.tmp_2]) "
        "{op_device='cpu:1', op_node='worker', src_device='cpu:0'}",
        "{Out=[y@cpu:1]} = memcpy(X=[y]) {op_device='cpu:1', op_node='worker', "
        "src_device='cpu:0'}",
        "{Out=[fc_1.tmp_2@GRAD@cpu:0]} = memcpy(X=[fc_1.tmp_2@GRAD]) "
        "{op_device='cpu:0', op_node='worker', src_device='cpu:1'}",
        "{Out=[learning_rate_0@cpu:1]} = memcpy(X=[learning_rate_0]) "
        "{op_device='cpu:1', op_node='worker', src_device='cpu:0'}"]
    # one copy, several readers: the forward mul and its mul_grad both read the copy
    readers = [line for line in lines if "X=[fc_1.tmp_2@cpu:1]" in line]
    assert [r.split(" = ")[1].split("(")[0] for r in readers] == ["mul", "mul_grad"]
    assert sum("LearningRate=[learning_rate_0@cpu:1]" in line for line in lines) == 4


def test_the_ops_only_picture_boxes_each_place_and_marks_the_copies() -> None:
    from parafluid.parallel.graphviz import program_to_dot

    placed = insert_place_transfers(_mlp(STAGE0, STAGE1)[0])
    dot = program_to_dot(placed, ops_only=True)
    ops = placed.global_block().ops
    clusters = [line for line in dot.splitlines() if "subgraph cluster_" in line]
    assert [c.split('label="')[1].split('"')[0] for c in clusters] == ["cpu:0", "cpu:1"]
    for i, op in enumerate(ops):  # each op in the box of its place, copies in orange
        box = clusters[0] if op.attrs["op_device"] == "cpu:0" else clusters[1]
        assert f" op{i};" in box or f" op{i} " in box
        node = next(line for line in dot.splitlines() if line.startswith(f"  op{i} ["))
        assert ('"#f6b26b"' in node) == (op.type == "memcpy"), node
    # the activation crosses: relu (stage 0) -> its copy -> stage 1's mul, edges labelled
    copy = next(i for i, op in enumerate(ops) if op.output("Out") == ["fc_1.tmp_2@cpu:1"])
    assert f'-> op{copy} [label="fc_1.tmp_2"' in dot
    assert "ellipse" not in dot  # ops only


def test_a_program_on_one_device_or_unplaced_comes_back_as_is() -> None:
    main, startup, _ = _mlp()
    assert insert_place_transfers(main) is main
    one, _, _ = _mlp(STAGE1, STAGE1, opt_place=STAGE1)
    placed = insert_place_transfers(one, default_device="cpu:1")
    assert placed is one
    # fed on cpu:0 (the executor's device) and read on cpu:1: the feeds are copied
    moved = insert_place_transfers(one)
    assert [line.split(" = ")[0] for line in _op_lines(moved) if "memcpy" in line] == [
        "{Out=[x@cpu:1]}", "{Out=[y@cpu:1]}", "{Out=[learning_rate_0@cpu:1]}"]


def test_a_parameter_updated_on_one_device_and_read_on_another_is_copied_every_step() -> None:
    main, startup, loss = _mlp(STAGE0, STAGE1, opt_place=STAGE0)  # all updates on cpu:0
    lines = _op_lines(insert_place_transfers(main))
    first_mul_1 = next(i for i, line in enumerate(lines) if "Y=[fc_2.w_0@cpu:1]" in line)
    assert "memcpy(X=[fc_2.w_0])" in lines[first_mul_1 - 1]
    update = next(i for i, line in enumerate(lines) if "ParamOut=[fc_2.w_0]" in line)
    assert "op_device='cpu:0'" in lines[update] and update > first_mul_1
    ref_losses, ref_params = _train(*_mlp())
    losses, params = _train(main, startup, loss)
    np.testing.assert_allclose(losses, ref_losses, rtol=0, atol=1e-5)
    for name, value in ref_params.items():
        np.testing.assert_allclose(params[name], value, rtol=0, atol=1e-5, err_msg=name)


def test_release_memory_on_a_placed_program_frees_values_where_they_are() -> None:
    main, startup, loss = _mlp(STAGE0, STAGE1)
    fluid.release_memory(main)
    placed = insert_place_transfers(main)
    types = [op.type for op in placed.global_block().ops]
    assert types.count("memcpy") == 4 and types.count("delete_var") > 4
    freed = {n for op in placed.global_block().ops if op.type == "delete_var"
             for n in op.input("X")}
    assert "fc_1.tmp_2@cpu:1" not in freed and "fc_2.tmp_1" in freed
    ref_losses, _ = _train(*_mlp())
    losses, _ = _train(main, startup, loss)
    assert losses == ref_losses


@pytest.mark.parametrize("case", [
    OpCase("memcpy", {"X": rand(3, 2)}, attrs={"op_device": "cpu:1", "src_device": "cpu:0"},
           ref=lambda X: {"Out": X}, grad=["X"]),
], ids=str)
def test_memcpy_in_the_op_table(case: OpCase) -> None:
    check_op(case)  # forward, inferred shape, and the gradient (a copy back) vs differences


def test_memcpy_gradient_is_a_copy_back() -> None:
    x = fluid.layers.data(name="x", shape=[3], dtype="float32")
    x.stop_gradient = False
    block = fluid.default_main_program().global_block()
    moved = block.create_var(name="x@cpu:1", shape=[-1, 3], dtype="float32")
    block.append_op("memcpy", inputs={"X": [x]}, outputs={"Out": [moved]},
                    attrs={"op_device": "cpu:1", "src_device": "cpu:0"})
    with fluid.device_guard("cpu:1"):
        loss = fluid.layers.reduce_sum(fluid.layers.scale(moved, scale=3.0))
    grads = fluid.gradients([loss], [x])
    back = [op for op in block.ops if op.type == "memcpy" and op.input("X") == ["x@cpu:1@GRAD"]]
    assert back and back[0].attrs["op_device"] == "cpu:0"
    assert back[0].attrs["src_device"] == "cpu:1"
    exe = fluid.Executor(fluid.CPUPlace())
    got, = exe.run(feed={"x": np.ones([2, 3], "float32")}, fetch_list=[grads[0]])
    np.testing.assert_array_equal(got, np.full([2, 3], 3.0, "float32"))


# ------------------------------------------------------------------ running placed programs


def test_two_stages_on_two_cpu_devices_train_as_the_unplaced_program() -> None:
    ref_losses, ref_params = _train(*_mlp(), steps=6)
    main, startup, loss = _mlp(STAGE0, STAGE1)
    losses, params = _train(main, startup, loss, steps=6)
    np.testing.assert_allclose(losses, ref_losses, rtol=0, atol=1e-5)
    for name, value in ref_params.items():
        np.testing.assert_allclose(params[name], value, rtol=0, atol=1e-5, err_msg=name)
    # NOTE: at these sizes torch splits no kernel over threads, so the numbers are the same
    # bits however many threads each device lane has
    assert losses == ref_losses
    assert all(np.array_equal(params[n], v) for n, v in ref_params.items())


def test_the_executor_runs_a_placed_program_on_one_worker_per_device() -> None:
    main, startup, loss = _mlp(STAGE0, STAGE1)
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    exe.run(main, feed=_batches(1)[0], fetch_list=[loss])
    plan = next(iter(p for p in exe._cache.values() if p.graph.count("memcpy")))
    assert plan.lanes == 2 and plan.graph.count("memcpy") == 4
    assert exe._scheduler_for(plan).num_threads == 2
    exe.close()


# Two ops on two devices, with no data flow between them, must be running at the same time
# to pass the barrier; ops of one device must never overlap.
_BARRIER = threading.Barrier(2, timeout=10)
_ACTIVE: dict[str, int] = {}
_OVERLAP: list[str] = []
_LOCK = threading.Lock()


def _meet(ins: dict, attrs: dict, ctx: Any) -> dict:
    dev = str(ctx.device)
    with _LOCK:
        _ACTIVE[dev] = _ACTIVE.get(dev, 0) + 1
        if _ACTIVE[dev] > 1:
            _OVERLAP.append(dev)
    try:
        if attrs["meet"]:
            _BARRIER.wait()
        time.sleep(0.01)
    finally:
        with _LOCK:
            _ACTIVE[dev] -= 1
    return {"Out": ins["X"] + 1.0}


register_op("placement_test_meet", inputs=("X",), outputs=("Out",), attrs={"meet": False},
            infer_shape=same_as("X"), kernel=_meet)


def _meet_op(x: fluid.Variable, meet: bool) -> fluid.Variable:
    block = fluid.default_main_program().global_block()
    out = block.create_var(name=fluid.unique_name.generate("meet"), shape=x.shape,
                           dtype=x.dtype)
    block.append_op("placement_test_meet", inputs={"X": [x]}, outputs={"Out": [out]},
                    attrs={"meet": meet})
    return out


def test_ops_on_different_devices_run_concurrently_and_one_device_runs_one_op_at_a_time(
        ) -> None:
    x = fluid.layers.data(name="x", shape=[3], dtype="float32")
    with fluid.place_guard(STAGE0):
        a = _meet_op(_meet_op(x, False), True)
        a2 = _meet_op(x, False)  # independent of a's chain, same device: waits its turn
    with fluid.place_guard(STAGE1):
        b = _meet_op(_meet_op(x, False), True)
    with fluid.place_guard(STAGE0):
        out = fluid.layers.sums([a, a2, b])
    exe = fluid.Executor(fluid.CPUPlace())
    _OVERLAP.clear()
    for _ in range(3):
        got, = exe.run(feed={"x": np.zeros([2, 3], "float32")}, fetch_list=[out])
        np.testing.assert_array_equal(got, np.full([2, 3], 5.0))
    assert _OVERLAP == [], "two ops of one device ran at the same time"
    exe.close()


# ------------------------------------------------------------------ errors


def _relu_at(place: str | None = None, device: str | None = None) -> fluid.Variable:
    x = fluid.layers.data(name="x", shape=[3], dtype="float32")
    if place is not None:
        with fluid.place_guard(place):
            return fluid.layers.relu(x)
    with fluid.device_guard(device):
        return fluid.layers.relu(x)


@pytest.mark.parametrize("place, message", [
    ("/node:worker/cpu:4096", "device id 4096 does not exist; this process has \\d+ cpu"),
    ("/node:worker:1/cpu:0", "this process runs /node:worker:0 \\(and /node:worker\\) only"),
    ("/node:ps/cpu", "this process runs /node:worker:0"),
    ("/node:worker/cpu:0-1", "a device range means data parallelism"),
])
def test_places_this_process_cannot_run_are_errors_naming_the_op_and_its_place(
        place: str, message: str) -> None:
    y = _relu_at(place)
    exe = fluid.Executor(fluid.CPUPlace())
    with pytest.raises(ValueError, match=message) as info:
        exe.run(feed={"x": np.ones([2, 3], "float32")}, fetch_list=[y])
    assert f"op #0 relu (created at {__file__}" in str(info.value)
    assert f"placed on {place!r}" in str(info.value)


def test_gpu_on_a_machine_without_one_is_an_error_naming_the_op() -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    y = _relu_at(device="gpu:0")
    exe = fluid.Executor(fluid.CPUPlace())
    with pytest.raises(ValueError, match="op #0 relu .*placed on 'gpu:0': torch sees no GPU"):
        exe.run(feed={"x": np.ones([2, 3], "float32")}, fetch_list=[y])


# ------------------------------------------------------------------ ParallelExecutor, micro-batches


def _train_compiled(main: fluid.Program, startup: fluid.Program, loss: fluid.Variable,
                    steps: int = 6, num_microbatches: int = 1
                    ) -> tuple[list[float], dict[str, np.ndarray], fluid.Program]:
    bs = fluid.BuildStrategy()
    bs.num_microbatches = num_microbatches
    compiled = fluid.CompiledProgram(main, build_strategy=bs)
    scope = fluid.Scope()
    exe = fluid.Executor(fluid.CPUPlace())
    with fluid.scope_guard(scope):
        exe.run(startup)
        losses = [float(np.asarray(exe.run(compiled, feed=b, fetch_list=[loss])[0]).ravel()[0])
                  for b in _batches(steps)]
    params = {p.name: scope.find_var(p.name).value.numpy().copy()
              for p in main.all_parameters()}
    return losses, params, compiled._executor.program


def test_the_parallel_executor_on_one_place_runs_a_placed_program_as_the_executor() -> None:
    ref_losses, ref_params = _train(*_mlp())
    losses, params, program = _train_compiled(*_mlp(STAGE0, STAGE1))
    assert [op.type for op in program.global_block().ops].count("memcpy") == 4
    np.testing.assert_allclose(losses, ref_losses, rtol=0, atol=1e-5)
    for name, value in ref_params.items():
        np.testing.assert_allclose(params[name], value, rtol=0, atol=1e-5, err_msg=name)


def test_a_placed_program_on_several_data_parallel_devices_is_refused() -> None:
    main, _, loss = _mlp(STAGE0, STAGE1)
    with pytest.raises(ValueError, match="hybrid parallelism.*not supported in one process"):
        fluid.ParallelExecutor(use_cuda=False, loss_name=loss.name, main_program=main,
                               places=fluid.cpu_places(2))


def test_micro_batches_split_forward_and_backward_and_average_the_gradients() -> None:
    from parafluid.passes.microbatch import split_microbatches

    main, _, loss = _mlp(STAGE0, STAGE1)
    assert split_microbatches(main, 1, [loss.name]) is main
    mb = split_microbatches(main, 4, [loss.name])
    mb.verify()
    types = [op.type for op in mb.global_block().ops]
    assert types[:2] == ["split", "split"] and types.count("mul") == 4 * 4
    assert types.count("mul_grad") == 4 * 4 and types.count("momentum") == 8
    lines = _op_lines(mb)
    assert "{Out=[x@MB0, x@MB1, x@MB2, x@MB3]} = split(X=[x]) {axis=0, num=4, sections=[]}" \
        in lines
    # GPipe order: every forward op of every micro-batch comes before the first backward op
    last_fwd = max(i for i, t in enumerate(types) if t == "mean")
    assert last_fwd < types.index("mean_grad")
    # a bias gradient is added to a running sum as each micro-batch's backward ends, on its
    # stage, left to right as one sum op adds (the same bits), then scaled by 1/k
    merged = [(i, line) for i, line in enumerate(lines) if "fc_0.b_0@GRAD" in line
              and line.startswith(("{Out=[fc_0.b_0@GRAD", "{Out=[fc_0.b_0@GRAD]}"))
              and (" = sum(" in line or " = scale(" in line)]
    place = "{op_device='cpu:0', op_node='worker'}"
    assert [line for _, line in merged] == [
        f"{{Out=[fc_0.b_0@GRAD@ACC1]}} = sum(X=[fc_0.b_0@GRAD@MB0, fc_0.b_0@GRAD@MB1]) {place}",
        f"{{Out=[fc_0.b_0@GRAD@ACC2]}} = sum(X=[fc_0.b_0@GRAD@ACC1, fc_0.b_0@GRAD@MB2]) {place}",
        f"{{Out=[fc_0.b_0@GRAD]}} = sum(X=[fc_0.b_0@GRAD@ACC2, fc_0.b_0@GRAD@MB3]) {place}",
        "{Out=[fc_0.b_0@GRAD]} = scale(X=[fc_0.b_0@GRAD]) {bias=0.0, bias_after_scale=True, "
        "op_device='cpu:0', op_node='worker', scale=0.25}"]
    # the first addition comes right after micro-batch 1's backward, before micro-batch 2's
    producers = [i for i, line in enumerate(lines) if "fc_0.b_0@GRAD@MB" in line.split(" = ")[0]]
    assert producers[1] < merged[0][0] < producers[2]
    # a weight gradient is one product over the whole batch, on its stage, after every
    # micro-batch's backward: the micro-batches' output gradients concatenated, the feed as
    # fed (the first layer passes no input gradient on, so its per-micro-batch op is gone)
    weight = [(i, line) for i, line in enumerate(lines)
              if line.split(" = ")[0] == "{Y@GRAD=[fc_0.w_0@GRAD]}"]
    assert [line for _, line in weight] == [
        "{Y@GRAD=[fc_0.w_0@GRAD]} = mul_grad(X=[x], Y=[fc_0.w_0], "
        "Out@GRAD=[fc_0.tmp_0@GRAD@MBALL]) {op_device='cpu:0', op_node='worker', "
        "x_num_col_dims=1, y_num_col_dims=1}"]
    parts = ", ".join(f"fc_0.tmp_0@GRAD@MB{m}" for m in range(4))
    assert f"{{Out=[fc_0.tmp_0@GRAD@MBALL]}} = concat(X=[{parts}]) {{axis=0, " \
        "op_device='cpu:0', op_node='worker'}" in lines
    assert not [line for line in lines if "fc_0.w_0@GRAD@MB" in line]
    last_input_grad = max(i for i, line in enumerate(lines) if "@GRAD@MB3" in line
                          and line.split(" = ")[1].startswith(("mul_grad", "elementwise_add_grad")))
    assert weight[0][0] > last_input_grad
    # an inner layer passes its input gradient on per micro-batch, without its weight's
    inner = [line for line in lines if " = mul_grad(X=[fc_0.tmp_2@" in line]
    assert [line.split(" = ")[0] for line in inner] == [
        *(f"{{X@GRAD=[fc_0.tmp_2@GRAD@MB{m}]}}" for m in range(4)), "{Y@GRAD=[fc_1.w_0@GRAD]}"]


@pytest.mark.parametrize("k", [1, 4])
def test_micro_batched_training_matches_the_unplaced_program(k: int) -> None:
    ref_losses, ref_params = _train(*_mlp())
    losses, params, program = _train_compiled(*_mlp(STAGE0, STAGE1), num_microbatches=k)
    types = [op.type for op in program.global_block().ops]
    assert types.count("mul") == 4 * k and types.count("split") == (2 if k > 1 else 0)
    # per micro-batch: its activation and label cross to stage 1, the activation's
    # gradient comes back; once a step: the learning rate
    assert types.count("memcpy") == 3 * k + 1
    np.testing.assert_allclose(losses, ref_losses, rtol=0, atol=1e-5)
    for name, value in ref_params.items():
        np.testing.assert_allclose(params[name], value, rtol=0, atol=1e-5, err_msg=name)
    if k == 1:  # one micro-batch is the unplaced program, to the bit
        assert losses == ref_losses
        assert all(np.array_equal(params[n], v) for n, v in ref_params.items())


def _stage_overlap_ms(num_microbatches: int) -> tuple[float, list[float]]:
    """Train 3 steps of the slow 2-stage MLP; return the time both devices were busy with
    their slow ops at once (ms, over the 3 steps) and the losses."""
    from parafluid.engine.runtime import add_op_hook, remove_op_hook

    records: list[Any] = []
    hook = records.append
    add_op_hook(hook)
    try:
        losses, _, program = _train_compiled(*_mlp(STAGE0, STAGE1, slow=True), steps=3,
                                             num_microbatches=num_microbatches)
    finally:
        remove_op_hook(hook)
    ops = program.global_block().ops
    busy: dict[str, list[tuple[int, int]]] = {"cpu:0": [], "cpu:1": []}
    for r in records:
        # NOTE: records of the startup program (also run here) have other op types
        if r.op_type == "placement_test_slow":
            assert ops[r.op_index].type == r.op_type
            busy[ops[r.op_index].attrs["op_device"]].append((r.start_ns, r.end_ns))
    both = sum(max(0, min(e0, e1) - max(s0, s1))
               for s0, e0 in busy["cpu:0"] for s1, e1 in busy["cpu:1"])
    return both / 1e6, losses


def test_with_micro_batches_the_two_stages_run_at_the_same_time() -> None:
    serial, ref = _stage_overlap_ms(1)
    overlapped, losses = _stage_overlap_ms(4)
    np.testing.assert_allclose(losses, ref, rtol=0, atol=1e-5)
    assert serial == 0.0, "one batch: stage 1 waits for stage 0 and back"
    # 4 micro-batches x (forward + backward) x 4 ms per stage and step: stages overlap
    assert overlapped > 4.0


def test_persistables_have_a_home_the_executor_puts_them_on_before_a_step() -> None:
    import torch

    from parafluid.engine.lanes import at_home
    from parafluid.passes.place_transfers import persistable_homes

    main, _, _ = _mlp(STAGE0, STAGE1, opt_place=STAGE0)
    homes = persistable_homes(insert_place_transfers(main))
    # updated on cpu:0 (the guard around minimize), whichever stage reads them
    assert homes["fc_3.w_0"] == homes["fc_0.w_0"] == "cpu:0"
    assert homes["learning_rate_0"] == "cpu:0"  # only read: the executor's device
    main, _, _ = _mlp(STAGE0, STAGE1)
    homes = persistable_homes(insert_place_transfers(main))
    assert homes["fc_3.w_0"] == "cpu:1" and homes["fc_0.w_0"] == "cpu:0"
    value = torch.ones(2)
    assert at_home(value, torch.device("cpu")) is value  # CPU devices share torch's CPU


def test_a_product_of_two_parameters_keeps_its_running_sum_under_micro_batches() -> None:
    # mul(P, W) reads no micro-batch's rows: W's gradient is P^T times the sum of the
    # micro-batches' output gradients, which no concatenation of rows gives
    def build() -> tuple[fluid.Program, fluid.Program, fluid.Variable]:
        main, startup = fluid.Program(), fluid.Program()
        main.random_seed = startup.random_seed = 3
        with fluid.program_guard(main, startup), fluid.unique_name.guard():
            x = fluid.layers.data(name="x", shape=[6], dtype="float32")
            y = fluid.layers.data(name="y", shape=[1], dtype="float32")
            p = fluid.layers.create_parameter([1, 6], "float32", name="p")
            w = fluid.layers.create_parameter([6, 6], "float32", name="w")
            shift = fluid.layers.mul(p, w)  # [1, 6], the same for every row
            h = fluid.layers.elementwise_add(fluid.layers.fc(input=x, size=6), shift)
            loss = fluid.layers.mean(fluid.layers.square_error_cost(
                input=fluid.layers.fc(input=h, size=1), label=y))
            fluid.optimizer.SGD(learning_rate=0.05).minimize(loss)
        return main, startup, loss

    ref_losses, ref_params = _train(*build())
    losses, params, program = _train_compiled(*build(), num_microbatches=2)
    lines = _op_lines(program)
    assert [line.split(" = ")[0] for line in lines if " = mul_grad(X=[p]" in line] == \
        ["{X@GRAD=[p@GRAD@MB0], Y@GRAD=[w@GRAD@MB0]}", "{X@GRAD=[p@GRAD@MB1], Y@GRAD=[w@GRAD@MB1]}"]
    np.testing.assert_allclose(losses, ref_losses, rtol=1e-5, atol=1e-6)
    for name, value in ref_params.items():
        np.testing.assert_allclose(params[name], value, rtol=1e-5, atol=1e-6, err_msg=name)
