"""Op table: c_allreduce_max/min/prod, c_allgather, c_reducescatter, c_sync_*_stream and
Fluid's older allreduce/broadcast: the identity on a single rank (plain Executor), and over
the in-process communicator of three devices against numpy; then in a data-parallel run on
two CPU devices, whose per-device values the collective combines."""

from types import SimpleNamespace

import numpy as np
import pytest
import torch

import parafluid as fluid
from parafluid.ops import get_op_def
from parafluid.parallel.comm import LocalCommunicator
from parafluid.testing import OpCase, check_op, rand

X = rand(4, 3, seed=1)


def identity(X):
    return {"Out": X}  # X: the list of one value


CASES = [
    OpCase(op, {"X": [X]}, attrs=attrs, ref=identity, out_counts={"Out": 1},
           id=f"{op}-one-rank")
    for op, attrs in (("c_allreduce_max", {}), ("c_allreduce_min", {}),
                      ("c_allreduce_prod", {}), ("c_allgather", {"nranks": 1}),
                      ("c_reducescatter", {"nranks": 1}), ("c_sync_calc_stream", {}),
                      ("c_sync_comm_stream", {}), ("allreduce", {"reduce_type": 2}),
                      ("broadcast", {"root": 0}))
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_op(case):
    check_op(case)


VALUES = [rand(4, 3, seed=s) for s in (2, 3, 4)]


def run3(op, **attrs):
    """The kernel over three devices of one process (the in-process communicator)."""
    ctx = SimpleNamespace(communicator=LocalCommunicator([torch.device("cpu")] * 3), op=None)
    opdef = get_op_def(op)
    full = {**opdef.attrs, **attrs}
    outs = opdef.kernel({"X": [torch.from_numpy(v) for v in VALUES]}, full, ctx)["Out"]
    assert len(outs) == 3
    return [o.numpy() for o in outs]


@pytest.mark.parametrize("op,want", [
    ("c_allreduce_max", np.maximum.reduce(VALUES)),
    ("c_allreduce_min", np.minimum.reduce(VALUES)),
    ("c_allreduce_prod", VALUES[0] * VALUES[1] * VALUES[2]),
])
def test_allreduce_kinds_over_three_devices(op, want):
    for out in run3(op):
        np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("reduce_type,want", [
    (0, VALUES[0] + VALUES[1] + VALUES[2]), (1, VALUES[0] * VALUES[1] * VALUES[2]),
    (2, np.maximum.reduce(VALUES)), (3, np.minimum.reduce(VALUES))])
def test_old_allreduce_reduce_types(reduce_type, want):
    for out in run3("allreduce", reduce_type=reduce_type):
        np.testing.assert_allclose(out, want, rtol=1e-15, atol=0)


def test_allgather_concatenates_in_rank_order():
    for out in run3("c_allgather", nranks=3):
        np.testing.assert_array_equal(out, np.concatenate(VALUES))


def test_reducescatter_gives_each_rank_its_part_of_the_sum():
    # 4 rows do not split in 3: use 6-row values
    global VALUES
    saved, VALUES = VALUES, [rand(6, 2, seed=s) for s in (5, 6, 7)]
    try:
        total = VALUES[0] + VALUES[1] + VALUES[2]
        for rank, out in enumerate(run3("c_reducescatter", nranks=3)):
            np.testing.assert_allclose(out, total[2 * rank:2 * rank + 2], rtol=1e-15)
    finally:
        VALUES = saved


def test_old_broadcast_sends_the_root_value_everywhere():
    for out in run3("broadcast", root=1):
        np.testing.assert_array_equal(out, VALUES[1])


def test_allgather_nranks_must_match_the_run():
    with pytest.raises(ValueError, match="nranks=2 but the run has 3"):
        run3("c_allgather", nranks=2)


def test_allreduce_max_in_a_data_parallel_run(monkeypatch):
    monkeypatch.setenv("CPU_NUM", "2")
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data("x", [3], dtype="float64")
        y = fluid.layers.scale(x, 1.0)
        main.global_block().append_op("c_allreduce_max", inputs={"X": [y]},
                                      outputs={"Out": [y]})
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    compiled = fluid.CompiledProgram(main).with_data_parallel(places=fluid.cpu_places(2))
    batch = rand(4, 3, seed=8)
    out, = exe.run(compiled, feed={"x": batch}, fetch_list=[y], scope=fluid.Scope())
    # each device holds two rows; the max over the devices lands on both
    top = np.maximum(batch[:2], batch[2:])
    np.testing.assert_array_equal(out, np.concatenate([top, top]))
