"""Which all-reduces the data-parallel passes write: fused groups of gradients or one each.

``BuildStrategy.fuse_all_reduce_ops`` unset reads True (Fluid 1.6's getter) and fuses across
processes and in compiled steps, not between the devices of one process in an interpreted
step; set, it is obeyed. ``FLAGS_fuse_parameter_memory_size`` / ``_groups_size`` size the
groups as Fluid's coalescing does: a layer's gradients stay together.
"""

from __future__ import annotations

from typing import Any

import pytest

import parafluid as fluid
from parafluid import core, unique_name
from parafluid.parallel.strategy import build_pipeline


def _mlp(widths: tuple[int, ...] = (8, 8, 8, 1)) -> tuple[Any, Any]:
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), unique_name.guard():
        h = fluid.layers.data(name="x", shape=[4], dtype="float32")
        y = fluid.layers.data(name="y", shape=[1], dtype="float32")
        for i, w in enumerate(widths):
            h = fluid.layers.fc(input=h, size=w, act="relu" if i < len(widths) - 1 else None)
        loss = fluid.layers.mean(fluid.layers.square_error_cost(input=h, label=y))
        fluid.optimizer.SGD(learning_rate=0.1).minimize(loss)
    return main, loss


def _collectives(bs: Any, in_process: bool, **kw: Any) -> list[tuple[str, list[str]]]:
    main, loss = _mlp(**kw)
    out = build_pipeline(bs, 2, loss.name, in_process=in_process)(main)
    return [(op.type, op.input("X")) for op in out.global_block().ops
            if op.type.startswith("c_allreduce")]


def _grads_in_backward_order(**kw: Any) -> list[str]:
    main, _ = _mlp(**kw)
    seen: list[str] = []
    for op in main.global_block().ops:
        for name in op.output_arg_names:
            if name.endswith("@GRAD") and name[:-5] in {
                    p.name for p in main.global_block().all_parameters()} and name not in seen:
                seen.append(name)
    return seen


@pytest.fixture
def flags() -> Any:
    """Set fuse flags for one test; the defaults come back after it."""
    names = ("FLAGS_fuse_parameter_memory_size", "FLAGS_fuse_parameter_groups_size")
    before = {n: core.globals()[n] for n in names}
    yield core.globals()
    for n, v in before.items():
        core.globals()[n] = v


def test_unset_reads_true_and_fuses_across_processes_into_one_group() -> None:
    bs = fluid.BuildStrategy()
    assert bs.fuse_all_reduce_ops is True
    ops = _collectives(bs, in_process=False)
    assert [t for t, _ in ops] == ["c_allreduce_coalesced"]
    assert ops[0][1] == _grads_in_backward_order()  # every gradient, as the backward makes them


def test_unset_between_devices_of_one_process_sums_each_gradient() -> None:
    ops = _collectives(fluid.BuildStrategy(), in_process=True)
    assert [t for t, _ in ops] == ["c_allreduce_sum"] * 8
    bs = fluid.BuildStrategy()
    bs.enable_compile = True  # a compiled step fuses: each all-reduce would split it
    assert [t for t, _ in _collectives(bs, in_process=True)] == ["c_allreduce_coalesced"]


@pytest.mark.parametrize("in_process", [False, True])
def test_set_is_obeyed_everywhere(in_process: bool) -> None:
    off, on = fluid.BuildStrategy(), fluid.BuildStrategy()
    off.fuse_all_reduce_ops, on.fuse_all_reduce_ops = False, True
    assert [t for t, _ in _collectives(off, in_process)] == ["c_allreduce_sum"] * 8
    assert [t for t, _ in _collectives(on, in_process)] == ["c_allreduce_coalesced"]


def test_memory_size_flag_closes_groups_and_keeps_a_layers_gradients_together(flags) -> None:
    widths = (8, 8, 8, 1)  # grads, last layer first: 8+1 | 64+8 | 64+8 | 32+8 floats
    flags["FLAGS_fuse_parameter_memory_size"] = 200 * 4 / (1 << 20)  # 200 floats
    groups = [x for _, x in _collectives(fluid.BuildStrategy(), False, widths=widths)]
    order = _grads_in_backward_order(widths=widths)
    assert groups == [order]  # 9 + 72 + 72 + 40 = 193 floats < 200: one group
    flags["FLAGS_fuse_parameter_memory_size"] = 100 * 4 / (1 << 20)  # 9 + 72 + 72 >= 100
    groups = [x for _, x in _collectives(fluid.BuildStrategy(), False, widths=widths)]
    assert [len(g) for g in groups] == [6, 2] and sum(groups, []) == order
    flags["FLAGS_fuse_parameter_memory_size"] = 1e-9  # every layer closes its group
    groups = [x for _, x in _collectives(fluid.BuildStrategy(), False, widths=widths)]
    assert [len(g) for g in groups] == [2, 2, 2, 2] and sum(groups, []) == order
    for g in groups:  # no layer split across two groups
        layers = [name.split(".")[0] for name in g]
        assert all(layers.count(n) == 2 for n in layers)


def test_groups_size_flag_limits_the_gradients_of_a_group(flags) -> None:
    flags["FLAGS_fuse_parameter_groups_size"] = 2  # closes once it holds more than 2
    groups = [x for _, x in _collectives(fluid.BuildStrategy(), False)]
    assert [len(g) for g in groups] == [4, 4]
    flags["FLAGS_fuse_parameter_groups_size"] = 1  # Fluid's default: no limit
    assert len(_collectives(fluid.BuildStrategy(), False)) == 1


def test_bad_flag_values_name_the_flag(flags) -> None:
    with pytest.raises(ValueError, match="FLAGS_fuse_parameter_groups_size must be an integer"):
        flags["FLAGS_fuse_parameter_groups_size"] = 2.5
    with pytest.raises(ValueError, match="FLAGS_fuse_parameter_memory_size must be a number"):
        flags["FLAGS_fuse_parameter_memory_size"] = "lots"


def test_infinite_memory_size_is_no_size_limit(flags) -> None:
    flags["FLAGS_fuse_parameter_memory_size"] = "inf"  # as an environment's text reads
    assert [len(g) for _, g in _collectives(fluid.BuildStrategy(), False)] == [8]
    flags["FLAGS_fuse_parameter_memory_size"] = 1e300  # huge but finite: the same
    assert [len(g) for _, g in _collectives(fluid.BuildStrategy(), False)] == [8]


def _mixed() -> tuple[Any, Any, Any]:
    """float32 and float64 layers, a row-sparse embedding and a global-norm clip."""
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 5
    with fluid.program_guard(main, startup):
        x = fluid.layers.data(name="x", shape=[6], dtype="float32")
        ids = fluid.layers.data(name="ids", shape=[1], dtype="int64")
        y = fluid.layers.data(name="y", shape=[1], dtype="float32")
        h = fluid.layers.fc(x, 5, act="tanh")
        h = fluid.layers.elementwise_add(h, fluid.layers.embedding(ids, [10, 5], is_sparse=True))
        h = fluid.layers.cast(fluid.layers.fc(fluid.layers.cast(h, "float64"), 5, act="tanh"),
                              "float32")
        loss = fluid.layers.mean(fluid.layers.square_error_cost(fluid.layers.fc(h, 1), y))
        fluid.clip.set_gradient_clip(fluid.clip.GradientClipByGlobalNorm(clip_norm=0.05))
        fluid.optimizer.Momentum(0.1, 0.9).minimize(loss)
    return main, startup, loss


def test_groups_hold_one_dtype_and_no_sparse_gradient_and_train_as_one_device() -> None:
    """Every dense gradient in exactly one group of one dtype, the embedding's row-sparse
    gradient in none (it is reduced and broadcast on its own); clipped training equal to one
    device on the full batch."""
    import numpy as np

    from parafluid.testing.data_parallel import assert_same_training, run_parallel, run_single

    with unique_name.guard():
        main, _, loss = _mixed()
    out = build_pipeline(fluid.BuildStrategy(), 2, loss.name, in_process=False)(main)
    block = out.global_block()
    groups = [op.input("X") for op in block.ops if op.type == "c_allreduce_coalesced"]
    dense = [p.name + "@GRAD" for p in main.global_block().all_parameters()
             if p.name != "embedding_0.w_0"]
    assert sorted(sum(groups, [])) == sorted(dense) and len(groups) == 3
    assert all(len({block.var(g).dtype for g in group}) == 1 for group in groups)
    rng = np.random.RandomState(0)
    feeds = [{"x": rng.randn(8, 6).astype("float32"), "y": rng.randn(8, 1).astype("float32"),
              "ids": rng.randint(0, 10, (8, 1)).astype("int64")} for _ in range(3)]
    bs = fluid.BuildStrategy()
    bs.fuse_all_reduce_ops = True  # the same pass as across processes, in one process
    assert_same_training(run_single(_mixed, feeds), run_parallel(_mixed, feeds, 2, bs))
