"""Build passes: fuse_elewise_add_act (structure and numbers)."""

from __future__ import annotations

import numpy as np
import pytest
from dp_models import mlp, mlp_feeds

import parafluid as fluid
from parafluid import unique_name
from parafluid.passes.fuse_elewise_add_act import fuse_elewise_add_act
from parafluid.testing.data_parallel import assert_same_training, run_parallel, run_single


def types(program: fluid.Program) -> list[str]:
    return [op.type for op in program.global_block().ops]


@pytest.mark.parametrize("act", ["relu", "sigmoid", "tanh"])
def test_fuse_add_act_structure(act: str) -> None:
    with unique_name.guard():
        main, _, _ = mlp(act=act)()
    before = types(main)
    fused = fuse_elewise_add_act(main)
    after = types(fused)
    assert types(main) == before, "the input program is not modified"
    assert after.count("fused_elemwise_activation") == 2  # the two fc layers with act
    assert after.count("fused_elemwise_activation_grad") == 2
    assert act not in after and act + "_grad" not in after
    assert after.count("elementwise_add") == before.count("elementwise_add") - 2
    assert len(after) == len(before) - 4
    fused.verify()
    grad_ops = [op for op in fused.global_block().ops
                if op.type == "fused_elemwise_activation_grad"]
    assert all(op.attrs["op_role_var"] and op.output("Y@GRAD") for op in grad_ops), \
        "the fused gradient op still produces the bias gradient and says so"


def test_fused_program_computes_bitwise_the_same() -> None:
    feeds = mlp_feeds(steps=3)

    def train(transform: bool) -> tuple[list, dict]:
        with unique_name.guard():
            main, startup, loss = mlp(act="sigmoid")()
        program = fuse_elewise_add_act(main) if transform else main
        scope, exe = fluid.Scope(), fluid.Executor()
        exe.run(startup, scope=scope)
        losses = [exe.run(program, feed=f, fetch_list=[loss], scope=scope)[0] for f in feeds]
        return losses, {p.name: np.array(scope.find_var(p.name).get_tensor())
                        for p in main.global_block().all_parameters()}

    (l0, p0), (l1, p1) = train(False), train(True)
    for a, b in zip(l0, l1):
        assert np.array_equal(a, b)
    for name in p0:
        assert np.array_equal(p0[name], p1[name]), name


def test_pre_activation_with_another_reader_is_not_fused() -> None:
    x = fluid.layers.data(name="x", shape=[3], dtype="float32")
    t = fluid.layers.elementwise_add(x, x)
    r = fluid.layers.relu(t)
    both = fluid.layers.elementwise_mul(r, t)
    fused = fuse_elewise_add_act(fluid.default_main_program())
    assert "fused_elemwise_activation" not in types(fused)
    del both


def test_parallel_executor_with_fused_ops_matches_single_device() -> None:
    bs = fluid.BuildStrategy()
    bs.fuse_elewise_add_act_ops = True
    single = run_single(mlp(), mlp_feeds())
    got = run_parallel(mlp(), mlp_feeds(), 2, bs)
    assert_same_training(single, got, atol=1e-5)
    graph = got.extra["executor"]._graph()[1]
    assert graph.count("fused_elemwise_activation") == 4  # 2 per device


@pytest.mark.parametrize("act,fn", [("relu", lambda v: np.maximum(v, 0)),
                                    ("sigmoid", lambda v: 1 / (1 + np.exp(-v))),
                                    ("tanh", np.tanh)])
def test_fused_op_table(act: str, fn: object) -> None:
    from parafluid.testing import OpCase, check_op, rand

    x, y = rand(2, 3, 4, seed=3), rand(3, seed=4)
    check_op(OpCase("fused_elemwise_activation", {"X": x, "Y": y},
                    attrs={"functor_list": [act, "elementwise_add"], "axis": 1},
                    ref=lambda X, Y: {"Out": fn(X + Y.reshape(1, 3, 1)),
                                      "IntermediateOut": X + Y.reshape(1, 3, 1)},
                    grad=["X", "Y"]))


def test_sync_batch_norm_pass_structure_and_single_device_numbers() -> None:
    from dp_models import cnn, cnn_feeds

    from parafluid.passes.sync_batch_norm import sync_batch_norm

    with unique_name.guard():
        main, startup, loss = cnn()()
    synced = sync_batch_norm(main)
    t = types(synced)
    assert "batch_norm" not in t and "batch_norm_grad" not in t
    assert t.count("c_allreduce_sum") == 2  # forward statistics, backward sums
    for a, b in (("sync_batch_norm_stats", "c_allreduce_sum"),
                 ("c_allreduce_sum", "sync_batch_norm"),
                 ("sync_batch_norm_grad_stats", "c_allreduce_sum"),
                 ("c_allreduce_sum", "sync_batch_norm_grad")):
        assert any(x == a and y == b for x, y in zip(t, t[1:])), (a, b)
    synced.verify()
    test_program = sync_batch_norm(main.clone(for_test=True))
    assert "batch_norm" in types(test_program), "inference batch_norm is left alone"

    # one device: the all-reduces are the identity, the numbers are batch_norm's
    def train(program: fluid.Program) -> list:
        scope, exe = fluid.Scope(), fluid.Executor()
        exe.run(startup, scope=scope)
        return [exe.run(program, feed=f, fetch_list=[loss], scope=scope)[0]
                for f in cnn_feeds(steps=3)]

    for a, b in zip(train(main), train(synced)):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-6)
