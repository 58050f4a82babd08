"""ExecutionStrategy / BuildStrategy fields, checks and warnings; the communicator and ops."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import parafluid as fluid
from parafluid.parallel.comm import LocalCommunicator
from parafluid.parallel.strategy import strategy_warnings
from parafluid.scope import SelectedRows

RS = fluid.BuildStrategy.ReduceStrategy
GS = fluid.BuildStrategy.GradientScaleStrategy


def test_defaults_match_fluid_1_6() -> None:
    es, bs = fluid.ExecutionStrategy(), fluid.BuildStrategy()
    assert (es.num_threads, es.num_iteration_per_drop_scope, es.num_iteration_per_run,
            es.allow_op_delay, es.use_experimental_executor) == (0, 100, 1, False, False)
    assert bs.reduce_strategy == RS.AllReduce
    assert bs.gradient_scale_strategy == GS.CoeffNumDevice
    # (Fluid 1.6's getters read True for the fuse options it leaves to the framework)
    assert bs.fuse_all_reduce_ops and bs.fuse_all_optimizer_ops and bs.fuse_broadcast_ops
    assert not (bs.fuse_elewise_add_act_ops or bs.sync_batch_norm
                or bs.memory_optimize or bs.enable_inplace or bs.enable_sequential_execution)
    assert (bs.num_trainers, bs.trainer_id, bs.trainers_endpoints, bs.debug_graphviz_path) == \
        (1, 0, [], "")


def test_fields_are_type_checked() -> None:
    es, bs = fluid.ExecutionStrategy(), fluid.BuildStrategy()
    with pytest.raises(TypeError, match="num_threads must be an int"):
        es.num_threads = 2.5
    with pytest.raises(ValueError, match="num_iteration_per_drop_scope must be >= 1"):
        es.num_iteration_per_drop_scope = 0
    assert es.num_iteration_per_drop_scope == 100, "a rejected value is not kept"
    with pytest.raises(TypeError, match="reduce_strategy must be one of "
                                        "BuildStrategy.ReduceStrategy.AllReduce"):
        bs.reduce_strategy = "Reduce"
    with pytest.raises(TypeError, match="GradientScaleStrategy"):
        bs.gradient_scale_strategy = RS.Reduce
    with pytest.raises(AttributeError, match="has no field 'fuse_everything'"):
        bs.fuse_everything = True
    with pytest.raises(TypeError, match="debug_graphviz_path must be a str"):
        bs.debug_graphviz_path = 3
    bs.memory_optimize = True
    bs.memory_optimize = None  # Fluid 1.6's "undecided" (off here)
    assert bs.memory_optimize is None
    with pytest.raises(TypeError, match="memory_optimize must be None, False or True"):
        bs.memory_optimize = 1
    with pytest.raises(TypeError, match="mkldnn_enabled_op_types must be a set of str"):
        bs.mkldnn_enabled_op_types = "conv2d"
    bs.mkldnn_enabled_op_types = ["conv2d", "pool2d"]
    assert bs.mkldnn_enabled_op_types == {"conv2d", "pool2d"}
    with pytest.raises(ValueError, match="nccl_comm_num must be >= 1, got 0"):
        bs.nccl_comm_num = 0
    with pytest.raises(TypeError, match="use_thread_barrier must be a bool"):
        es.use_thread_barrier = "yes"


# every property of Fluid 1.6's pybind BuildStrategy / ExecutionStrategy, with its default
FLUID_16_BUILD = {
    "reduce_strategy": RS.AllReduce, "gradient_scale_strategy": GS.CoeffNumDevice,
    "debug_graphviz_path": "", "enable_sequential_execution": False,
    "remove_unnecessary_lock": True, "num_trainers": 1, "trainers_endpoints": [],
    "trainer_id": 0, "nccl_comm_num": 1, "use_hierarchical_allreduce": False,
    "hierarchical_allreduce_inter_nranks": 0, "fuse_elewise_add_act_ops": False,
    "fuse_relu_depthwise_conv": False, "fuse_broadcast_ops": True,
    "fuse_all_optimizer_ops": True, "sync_batch_norm": False, "memory_optimize": None,
    "is_distribution": False, "async_mode": False, "enable_inplace": False,
    "fuse_all_reduce_ops": True, "enable_backward_optimizer_op_deps": False,
    "cache_runtime_context": False, "mkldnn_enabled_op_types": set(),
}
FLUID_16_EXEC = {
    "num_threads": 0, "use_cuda": True, "allow_op_delay": False,
    "num_iteration_per_drop_scope": 100, "num_iteration_per_run": 1, "_dry_run": False,
    "use_experimental_executor": False, "use_thread_barrier": False,
}


def _other(value):
    if isinstance(value, bool):
        return not value
    if isinstance(value, (RS, GS)):
        return type(value)(1)
    if isinstance(value, int):
        return value + 1
    if isinstance(value, str):
        return "graph"
    if value is None:
        return True
    return type(value)(["a"])


@pytest.mark.parametrize("cls, fields", [(fluid.BuildStrategy, FLUID_16_BUILD),
                                         (fluid.ExecutionStrategy, FLUID_16_EXEC)])
def test_every_fluid_1_6_field_is_settable_with_fluid_defaults(cls, fields) -> None:
    strategy = cls()
    for name, default in fields.items():
        assert getattr(strategy, name) == default, name
        setattr(strategy, name, _other(default))
        assert getattr(strategy, name) == _other(default), name
        setattr(strategy, name, default)
    with pytest.raises(TypeError, match=r"must be (a bool|None, False or True|an int)"):
        setattr(strategy, next(n for n, v in fields.items() if isinstance(v, bool)), "on")


def test_fluid_only_flags_that_change_nothing_warn() -> None:
    bs, es = fluid.BuildStrategy(), fluid.ExecutionStrategy()
    bs.async_mode = bs.is_distribution = True
    es._dry_run = True
    bs.cache_runtime_context = True   # a pure performance knob: silently accepted
    bs.nccl_comm_num = 2
    text = " ".join(strategy_warnings(bs, es, 2, True))
    assert "async_mode has no effect" in text and "is_distribution has no effect" in text
    assert "_dry_run has no effect" in text
    assert "cache_runtime_context" not in text and "nccl_comm_num" not in text


def test_warnings_for_fields_that_cannot_apply() -> None:
    bs, es = fluid.BuildStrategy(), fluid.ExecutionStrategy()
    assert strategy_warnings(bs, es, 2, True) == []
    bs.fuse_all_reduce_ops = True
    assert strategy_warnings(bs, es, 2, True) == []
    assert "single device" in strategy_warnings(bs, es, 1, True)[0]
    bs.reduce_strategy = RS.Reduce
    text = " ".join(strategy_warnings(bs, es, 2, True))
    assert "fuse_all_reduce_ops has no effect in Reduce mode" in text
    assert "no parameter gradients" in " ".join(strategy_warnings(bs, es, 2, False))
    es.allow_op_delay = True
    assert any("allow_op_delay" in w for w in strategy_warnings(bs, es, 2, True))


def test_communicator_sums_in_device_order_without_densifying() -> None:
    comm = LocalCommunicator([torch.device("cpu")] * 3)
    xs = [torch.tensor([1e8, 1.0]), torch.tensor([-1e8, 1.0]), torch.tensor([1.0, 1.0])]
    out = comm.all_reduce(xs)
    assert [o.tolist() for o in out] == [[1.0, 3.0]] * 3  # ((x0 + x1) + x2), in float32
    sparse = [SelectedRows(torch.tensor([d, 5]), torch.full((2, 2), float(d)), 8)
              for d in range(3)]
    red = comm.reduce(sparse, root=1)
    assert isinstance(red, SelectedRows)
    assert red.rows.tolist() == [0, 5, 1, 5, 2, 5] and red.value.shape == (6, 2)
    copies = comm.broadcast(torch.ones(2), root=2)
    assert copies[2].data_ptr() != copies[0].data_ptr() != copies[1].data_ptr()
    with pytest.raises(ValueError, match="one value per device"):
        comm.all_reduce(xs[:2])
    with pytest.raises(TypeError, match="sparse"):
        comm.reduce([sparse[0], torch.ones(8, 2), sparse[2]], root=0)


def test_collective_ops_are_identity_in_a_single_device_program() -> None:
    x = fluid.layers.data(name="x", shape=[3], dtype="float32")
    block = fluid.default_main_program().global_block()
    out = block.create_var(name="summed", dtype="float32")
    block.append_op("c_allreduce_sum", inputs={"X": [x]}, outputs={"Out": [out]})
    assert out.shape == x.shape
    got, = fluid.Executor().run(feed={"x": np.ones([2, 3], "float32")}, fetch_list=[out])
    np.testing.assert_array_equal(got, np.ones([2, 3]))
