"""Operator placement in one process: place_guard / device_guard record places on ops,
backward and optimizer ops follow them, the transfer pass inserts copies, and a program
placed on two CPU devices computes what the unplaced program computes."""

from __future__ import annotations

import numpy as np
import pytest

import parafluid as fluid
from parafluid.placement import GRAMMAR, is_placed, parse_place, place_of

STAGE0, STAGE1 = "/node:worker/cpu:0", "/node:worker/cpu:1"


def _mlp(stage0: str | None = None, stage1: str | None = None, opt_place: str | None = None,
         seed: int = 7) -> tuple[fluid.Program, fluid.Program, fluid.Variable]:
    """A 2-stage MLP regression; each stage optionally inside a place_guard."""
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = seed

    def guard(place: str | None):
        return fluid.place_guard(place) if place else _null()

    with fluid.program_guard(main, startup):
        x = fluid.layers.data(name="x", shape=[6], dtype="float32")
        y = fluid.layers.data(name="y", shape=[1], dtype="float32")
        with guard(stage0):
            h = fluid.layers.fc(input=x, size=16, act="tanh")
            h = fluid.layers.fc(input=h, size=16, act="relu")
        with guard(stage1):
            h = fluid.layers.fc(input=h, size=8, act="tanh")
            pred = fluid.layers.fc(input=h, size=1)
            loss = fluid.layers.mean(fluid.layers.square_error_cost(input=pred, label=y))
        with guard(opt_place):
            fluid.optimizer.Momentum(learning_rate=0.05, momentum=0.9).minimize(loss)
    return main, startup, loss


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
    params = {p.name: np.array(scope.find_var(p.name).value) for p in main.all_parameters()}
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
