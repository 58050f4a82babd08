"""DGCMomentumOptimizer: momentum before the ramp-up, deep gradient compression after it, on
one device and on two (each device's top-k values gathered into the gradient)."""

from __future__ import annotations

import numpy as np
import pytest
from dgc_models import LR, MU, D, dgc, feeds, linear

import parafluid as fluid
from parafluid.passes.grad_aggregation import AggregationOptions, aggregate_gradients
from parafluid.testing.data_parallel import run_parallel, run_single


def initial_params(build):
    main, startup, _ = build()
    scope = fluid.Scope()
    fluid.Executor(fluid.CPUPlace()).run(startup, scope=scope)
    return {n: np.array(scope.find_var(n).get_tensor(), dtype="float64") for n in ("w", "b")}


def dgc_reference(w, b, batches, workers, begin, rampup_step, sparsity, nesterov=False,
                  l2=0.0, clip=None):
    """NumPy DGC of ``workers`` workers, each on its slice of every batch (loss gradient
    scaled by 1/workers as on the dense path): momentum (U as velocity) before ``begin``;
    then per worker U = m*U + g, V += U, top-k of |V| sent and masked in U and V; the sum of
    what every worker sent is the gradient of plain SGD. L2 decay on the summed gradient."""
    w, b = w.copy(), b.copy()
    u = [np.zeros_like(w) for _ in range(workers)]
    v = [np.zeros_like(w) for _ in range(workers)]
    ub = np.zeros_like(b)
    for step, f in enumerate(batches):
        xs = np.split(f["x"].astype("float64"), workers)
        zs = np.split(f["z"].astype("float64"), workers)
        gw = [xd.T @ zd / (xd.shape[0] * D) / workers for xd, zd in zip(xs, zs)]
        gb = sum(zd.sum(0) / (zd.shape[0] * D) / workers for zd in zs) + l2 * b
        ub = MU * ub + gb
        b -= LR * (gb + MU * ub if nesterov else ub)
        if step < begin:
            g = sum(gw) + l2 * w
            u = [MU * ud + g for ud in u]
            w -= LR * (g + MU * u[0] if nesterov else u[0])
            continue
        idx = int(step * len(sparsity) / rampup_step)  # Fluid 1.6: the global step
        s = 0.999 if idx >= len(sparsity) else sparsity[idx]
        k = max(1, int(w.size * (1 - s)))
        sent = np.zeros(w.size)
        for d in range(workers):
            g = gw[d]
            if clip is not None:
                g = g * clip / max(np.sqrt(np.sum(g * g)), clip)
            if nesterov:
                u[d] = MU * (u[d] + g)
                v[d] = v[d] + u[d] + g
            else:
                u[d] = MU * u[d] + g
                v[d] = v[d] + u[d]
            idx = np.argsort(-np.abs(v[d].ravel()))[:k]
            np.add.at(sent, idx, v[d].ravel()[idx])
            u[d].ravel()[idx] = 0.0
            v[d].ravel()[idx] = 0.0
        w -= LR * (sent.reshape(w.shape) + l2 * w)
    return {"w": w, "b": b}


def test_before_rampup_it_is_momentum_exactly():
    batches = feeds(4)
    got = run_single(linear(dgc(begin=10, use_nesterov=True)), batches)
    want = run_single(linear(lambda: fluid.optimizer.Momentum(LR, MU, use_nesterov=True)),
                      batches)
    for name in ("w", "b"):
        assert np.array_equal(got.params[name], want.params[name]), name
    for a, b in zip(got.losses, want.losses):
        assert np.array_equal(a, b)


@pytest.mark.parametrize("nesterov", [False, True])
def test_one_device_after_rampup_equals_numpy_dgc(nesterov):
    build = linear(dgc(begin=2, use_nesterov=nesterov))
    batches = feeds(7)
    got = run_single(build, batches)
    want = dgc_reference(**initial_params(build), batches=batches, workers=1, begin=2,
                         rampup_step=2, sparsity=(0.9, 0.99), nesterov=nesterov)
    for name in ("w", "b"):
        np.testing.assert_allclose(got.params[name], want[name], rtol=0, atol=2e-6,
                                   err_msg=name)
    # compression changed the result: plain momentum ends elsewhere
    mom = run_single(linear(lambda: fluid.optimizer.Momentum(LR, MU, use_nesterov=nesterov)),
                     batches)
    assert np.abs(mom.params["w"] - got.params["w"]).max() > 1e-3


def test_local_clip_and_l2_decay_follow_fluids_order():
    kw = {"local_grad_clip_norm": 0.004, "num_trainers": 1,
          "regularization": fluid.regularizer.L2Decay(0.01)}
    build = linear(dgc(begin=1, **kw))
    batches = feeds(4)
    got = run_single(build, batches)
    want = dgc_reference(**initial_params(build), batches=batches, workers=1, begin=1,
                         rampup_step=2, sparsity=(0.9, 0.99), l2=0.01, clip=0.004)
    for name in ("w", "b"):
        np.testing.assert_allclose(got.params[name], want[name], rtol=0, atol=2e-6,
                                   err_msg=name)


@pytest.mark.parametrize("nesterov", [False, True])
def test_two_devices_equal_numpy_dgc_of_two_workers(nesterov):
    build = linear(dgc(begin=2, use_nesterov=nesterov,
                       regularization=fluid.regularizer.L2Decay(0.01)))
    batches = feeds(6, seed=1)
    got = run_parallel(build, batches, ndev=2)
    want = dgc_reference(**initial_params(build), batches=batches, workers=2, begin=2,
                         rampup_step=2, sparsity=(0.9, 0.99), nesterov=nesterov, l2=0.01)
    for d, params in enumerate(got.device_params):
        for name in ("w", "b"):
            np.testing.assert_allclose(params[name], want[name], rtol=0, atol=2e-6,
                                       err_msg=f"{name} on device {d}")
    # two workers choose their own top-k: one worker on the whole batch ends elsewhere
    one = dgc_reference(**initial_params(build), batches=batches, workers=1, begin=2,
                        rampup_step=2, sparsity=(0.9, 0.99), nesterov=nesterov, l2=0.01)
    assert np.abs(one["w"] - want["w"]).max() > 1e-4


def test_program_structure_and_aggregation():
    main, _, loss = linear(dgc(begin=2))()
    text = str(main)
    types = [op.type for op in main.global_block().ops]
    assert types[0] == "increment"
    assert types.count("dgc") == types.count("c_dgc_allreduce") == 1
    assert types.count("dgc_momentum") == 1 and types.count("momentum") == 1
    assert "Grad_out=[w@GRAD]} = dgc(" in text
    dp = aggregate_gradients(main, AggregationOptions(loss_name=loss.name, nranks=2))
    dp.verify()
    reduced = [op.input("X")[0] for op in dp.global_block().ops if op.type == "c_allreduce_sum"]
    assert reduced == ["b@GRAD"]  # w@GRAD is all-reduced by c_dgc_allreduce alone
    with pytest.raises(ValueError, match="ReduceStrategy.AllReduce"):
        aggregate_gradients(main, AggregationOptions(loss_name=loss.name, nranks=2,
                                                     reduce=True))


def test_small_or_sparse_parameters_get_plain_momentum():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        ids = fluid.layers.data(name="ids", shape=[1], dtype="int64")
        emb = fluid.layers.embedding(ids, size=[20000, 4], is_sparse=True)
        x = fluid.layers.data(name="x", shape=[16], dtype="float32")
        h = fluid.layers.fc(x, size=16)
        loss = fluid.layers.mean(fluid.layers.reduce_sum(emb) + fluid.layers.reduce_sum(h))
        dgc(begin=0)().minimize(loss)
    types = [op.type for op in main.global_block().ops]
    assert "dgc" not in types and "dgc_momentum" not in types
    assert types.count("momentum") == 3


@pytest.mark.parametrize("kwargs, error, match", [
    ({"sparsity": [0.9, 1.0]}, ValueError, r"sparsity must be in \[0, 1\).*1\.0"),
    ({"sparsity": []}, TypeError, "non-empty list"),
    ({"sparsity": 0.99}, TypeError, "non-empty list"),
    ({"rampup_step": 0}, ValueError, "rampup_step must be >= 1, got 0"),
    ({"rampup_begin_step": -1}, ValueError, "rampup_begin_step must be an integer >= 0"),
    ({"momentum": "0.9"}, TypeError, "momentum must be a number"),
    ({"local_grad_clip_norm": 1.0}, ValueError, "needs num_trainers"),
    ({"local_grad_clip_norm": -1.0, "num_trainers": 2}, ValueError, "must be > 0"),
])
def test_bad_arguments_are_clear_errors(kwargs, error, match):
    args = {"learning_rate": 0.1, "momentum": 0.9, "rampup_begin_step": 0, **kwargs}
    with pytest.raises(error, match=match):
        fluid.optimizer.DGCMomentum(**args)
