"""The ParallelExecutor's all-reduces overlap the devices' backward pass, and switching the
overlap off (``BuildStrategy.overlap_communication = False``) changes when the sums run,
not what they give.

An in-process all-reduce is a node over all devices that runs as soon as every device
produced its gradient; with the overlap off it waits until every device's backward ended.
"""

from __future__ import annotations

import numpy as np
import pytest
from dp_models import cnn, cnn_feeds, mlp, mlp_feeds, threads
from dp_models import strategy as dp_strategy

import parafluid as fluid
from parafluid.engine.runtime import add_op_hook, remove_op_hook
from parafluid.testing.data_parallel import assert_same_training, run_parallel, run_single

pytestmark = [pytest.mark.timeout(120),
              pytest.mark.filterwarnings("ignore:BuildStrategy.fuse_all_reduce_ops has no effect")]

RS = fluid.BuildStrategy.ReduceStrategy
MODES = [(RS.AllReduce, False), (RS.AllReduce, True), (RS.Reduce, False)]
MODE_IDS = ["allreduce", "allreduce-fused", "reduce"]


def strategy(overlap: bool, reduce: RS = RS.AllReduce, fuse: bool = False,
             **fields: object) -> fluid.BuildStrategy:
    return dp_strategy(reduce, fuse, overlap_communication=overlap, **fields)


def _same_bits(a: object, b: object) -> None:
    for x, y in zip(a.losses, b.losses):
        assert np.array_equal(x, y)
    for d, params in enumerate(a.device_params):
        for name, value in params.items():
            assert np.array_equal(value, b.device_params[d][name]), (d, name)


@pytest.mark.parametrize("ndev", [2, 4])
@pytest.mark.parametrize("reduce,fuse", MODES, ids=MODE_IDS)
def test_overlap_off_equals_one_device_and_the_overlap_bitwise(ndev: int, reduce: RS,
                                                                fuse: bool) -> None:
    single = run_single(mlp(), mlp_feeds())
    off = run_parallel(mlp(), mlp_feeds(), ndev, strategy(False, reduce, fuse), threads(ndev))
    assert_same_training(single, off, atol=1e-5)
    on = run_parallel(mlp(), mlp_feeds(), ndev, strategy(True, reduce, fuse), threads(ndev))
    _same_bits(on, off)
    # and independent of the thread count
    _same_bits(off, run_parallel(mlp(), mlp_feeds(), ndev, strategy(False, reduce, fuse),
                                 threads(1)))


@pytest.mark.slow
def test_cnn_with_sync_batch_norm_overlap_off_equals_one_device() -> None:
    # sync_batch_norm's all-reduces are read by the backward itself: never held
    single = run_single(cnn(), cnn_feeds())
    off = run_parallel(cnn(), cnn_feeds(), 2, strategy(False, sync_batch_norm=True), threads(2))
    assert_same_training(single, off, atol=1e-5)
    _same_bits(off, run_parallel(cnn(), cnn_feeds(), 2, strategy(True, sync_batch_norm=True),
                                 threads(2)))


def _trace(overlap: bool, nthreads: int, fuse: bool = False) -> list:
    records: list = []
    add_op_hook(records.append)
    try:
        run_parallel(mlp(), mlp_feeds(steps=1), 2, strategy(overlap, fuse=fuse),
                     threads(nthreads))
    finally:
        remove_op_hook(records.append)
    return records


@pytest.mark.parametrize("nthreads", [1, 2])
def test_the_all_reduces_run_during_the_backward_unless_the_overlap_is_off(
        nthreads: int) -> None:
    for overlap in (True, False):
        records = _trace(overlap, nthreads)
        sums = [r for r in records if r.op_type == "c_allreduce_sum"]
        grads = [r for r in records if r.op_type.endswith("_grad") and r.device >= 0]
        assert len(sums) == 6 and grads  # 3 fc layers: w and b each
        last_grad_end = max(r.end_ns for r in grads)
        if not overlap:
            # every sum waited for every device's backward
            assert all(s.start_ns >= last_grad_end for s in sums), overlap
        elif nthreads == 1:
            # one lane runs program order: a sum right after the gradient of both devices
            assert min(s.start_ns for s in sums) < last_grad_end
