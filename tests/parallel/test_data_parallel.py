"""N devices give the losses and parameters of one device on the full batch (the spec)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from dp_models import (
    cnn,
    cnn_feeds,
    embedding_feeds,
    embedding_model,
    mlp,
    mlp_feeds,
    strategy,
    threads,
)

import parafluid as fluid
from parafluid.testing.data_parallel import assert_same_training, run_parallel, run_single

pytestmark = [pytest.mark.timeout(120),
              pytest.mark.filterwarnings("ignore:BuildStrategy.fuse_all_reduce_ops has no effect")]

RS = fluid.BuildStrategy.ReduceStrategy
GS = fluid.BuildStrategy.GradientScaleStrategy
# Reduce + fused is a warned no-op (nothing to fuse): it must still train correctly.
MODES = [(RS.AllReduce, False), (RS.AllReduce, True), (RS.Reduce, False), (RS.Reduce, True)]
MODE_IDS = ["allreduce", "allreduce-fused", "reduce", "reduce-fused"]


@pytest.fixture(scope="module")
def mlp_single() -> object:
    return run_single(mlp(), mlp_feeds())


@pytest.mark.parametrize("ndev", [2, 4])
@pytest.mark.parametrize("reduce,fuse", MODES, ids=MODE_IDS)
def test_mlp_matches_single_device(mlp_single: object, ndev: int, reduce: RS,
                                   fuse: bool) -> None:
    got = run_parallel(mlp(), mlp_feeds(), ndev, strategy(reduce, fuse), threads(ndev))
    assert_same_training(mlp_single, got, atol=1e-5)


@pytest.mark.parametrize("scale", [GS.One, GS.Customized])
@pytest.mark.parametrize("reduce", [RS.AllReduce, RS.Reduce])
def test_sum_loss_with_one_or_customized_scale(scale: GS, reduce: RS) -> None:
    ndev = 2
    build = mlp(loss="sum", lr=0.02)
    feeds = mlp_feeds()
    single = run_single(build, feeds)
    if scale == GS.Customized:
        # The user feeds the loss gradient: one value per device (split along dim 0).
        loss_grad = build()[2].name + "@GRAD"
        feeds = [dict(f, **{loss_grad: np.ones([ndev], "float32")}) for f in feeds]
    got = run_parallel(build, feeds, ndev, strategy(reduce, gradient_scale_strategy=scale))
    assert_same_training(single, got, atol=1e-4, reduce="sum")


def test_coeff_num_device_on_sum_loss_is_a_mean() -> None:
    """CoeffNumDevice scales by 1/n: on a sum loss it trains on the mean of device sums."""
    build = mlp(loss="sum", lr=0.02)
    one = run_parallel(build, mlp_feeds(steps=1), 2, strategy(gradient_scale_strategy=GS.One))
    coeff = run_parallel(build, mlp_feeds(steps=1), 2, strategy())
    single = run_single(build, mlp_feeds(steps=1))
    init = run_single(build, [])
    for name, p0 in init.params.items():
        step_one = one.params[name] - p0
        np.testing.assert_allclose(step_one, single.params[name] - p0, atol=1e-6)
        np.testing.assert_allclose(coeff.params[name] - p0, step_one / 2, atol=1e-6)


@pytest.mark.parametrize("reduce,fuse", MODES, ids=MODE_IDS)
def test_results_are_bitwise_reproducible_and_thread_independent(reduce: RS,
                                                                 fuse: bool) -> None:
    runs = [run_parallel(mlp(), mlp_feeds(steps=3), 4, strategy(reduce, fuse), threads(n))
            for n in (1, 4, 4)]
    for other in runs[1:]:
        for a, b in zip(runs[0].losses, other.losses):
            assert np.array_equal(a, b)
        for d in range(4):
            for name, value in runs[0].device_params[d].items():
                assert np.array_equal(value, other.device_params[d][name]), name


def test_fused_all_reduce_is_bitwise_equal_to_unfused() -> None:
    plain = run_parallel(mlp(), mlp_feeds(steps=3), 2, strategy(fuse=False))
    fused = run_parallel(mlp(), mlp_feeds(steps=3), 2, strategy(fuse=True))
    for name, value in plain.params.items():
        assert np.array_equal(value, fused.params[name]), name


def test_adam_in_reduce_mode_matches_single_device() -> None:
    """Optimizer state (moments, beta powers) lives on the owner device only."""
    build = mlp(optimizer=lambda: fluid.optimizer.Adam(learning_rate=0.01))
    single = run_single(build, mlp_feeds())
    for reduce in (RS.AllReduce, RS.Reduce):
        got = run_parallel(build, mlp_feeds(), 2, strategy(reduce))
        assert_same_training(single, got, atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("ndev", [2, 4])
@pytest.mark.parametrize("reduce,fuse", MODES, ids=MODE_IDS)
def test_cnn_with_sync_batch_norm_matches_single_device(ndev: int, reduce: RS,
                                                        fuse: bool) -> None:
    single = run_single(cnn(), cnn_feeds())
    got = run_parallel(cnn(), cnn_feeds(), ndev, strategy(reduce, fuse, sync_batch_norm=True))
    assert_same_training(single, got, atol=1e-5)


def test_cnn_without_sync_batch_norm_differs() -> None:
    """Per-device batch statistics are not the full batch's: the equality needs sync_bn."""
    single = run_single(cnn(), cnn_feeds(steps=2))
    got = run_parallel(cnn(), cnn_feeds(steps=2), 2, strategy())
    assert abs(got.losses[1].mean() - single.losses[1][0]) > 1e-4


@pytest.mark.parametrize("ndev", [2, 4])
@pytest.mark.parametrize("reduce,fuse", MODES, ids=MODE_IDS)
def test_sparse_embedding_matches_single_device(ndev: int, reduce: RS, fuse: bool) -> None:
    single = run_single(embedding_model(), embedding_feeds())
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no densifying fallback, no ignored field
        warnings.filterwarnings("ignore", "BuildStrategy.fuse_all_reduce_ops has no effect")
        got = run_parallel(embedding_model(), embedding_feeds(), ndev, strategy(reduce, fuse))
    assert_same_training(single, got, atol=1e-5)
    graph = got.extra["executor"]._graph()[1]
    sparse = [n for n in graph.nodes if n.type == "c_reduce_sum"
              and n.inputs["X"][0][1] == "embedding_0.w_0@GRAD"]
    assert len(sparse) == 1, "the sparse gradient is reduced once (never all-reduced dense)"
    dense = {RS.Reduce: (0, 0), RS.AllReduce: (0, 1) if fuse else (2, 0)}[reduce]  # fc w, b
    assert (graph.count("c_allreduce_sum"), graph.count("c_allreduce_coalesced")) == dense


def _regularized(clip: object) -> object:
    return mlp(optimizer=lambda: fluid.optimizer.Momentum(
        learning_rate=0.05, momentum=0.9, grad_clip=clip,
        regularization=fluid.regularizer.L2Decay(1e-3)))


@pytest.mark.parametrize("reduce", [RS.AllReduce, RS.Reduce])
def test_momentum_regularization_and_clip_by_norm(reduce: RS) -> None:
    build = _regularized(fluid.clip.GradientClipByNorm(clip_norm=0.5))
    single = run_single(build, mlp_feeds())
    got = run_parallel(build, mlp_feeds(), 2, strategy(reduce))
    assert_same_training(single, got, atol=1e-5)


def test_clip_by_global_norm_all_reduce_and_reduce() -> None:
    build = _regularized(fluid.clip.GradientClipByGlobalNorm(clip_norm=0.5))
    single = run_single(build, mlp_feeds())
    got = run_parallel(build, mlp_feeds(), 2, strategy(RS.AllReduce))
    assert_same_training(single, got, atol=1e-5)
    # Reduce mode sums each gradient on its own owner: no device sees every gradient.
    with pytest.raises(ValueError, match="ReduceStrategy.Reduce cannot place op .* "
                                         "need ReduceStrategy.AllReduce"):
        run_parallel(build, mlp_feeds(), 2, strategy(RS.Reduce))


@pytest.mark.skipif(not fluid.is_compiled_with_cuda(), reason="needs a GPU")
def test_gpu_devices_match_single_device() -> None:
    import torch

    ngpu = torch.cuda.device_count()
    places = [fluid.CUDAPlace(i) for i in range(ngpu)] if ngpu > 1 else [fluid.CUDAPlace(0)] * 2
    main, startup, loss = mlp()()
    scope = fluid.Scope()
    exe = fluid.Executor(fluid.CUDAPlace(0))
    exe.run(startup, scope=scope)
    pe = fluid.ParallelExecutor(True, loss_name=loss.name, main_program=main, scope=scope,
                                places=places)
    single = run_single(mlp(), mlp_feeds())
    losses = [pe.run([loss.name], feed=f)[0] for f in mlp_feeds()]
    for a, b in zip(single.losses, losses):
        np.testing.assert_allclose(b.mean(), a.reshape(()), atol=1e-5)
