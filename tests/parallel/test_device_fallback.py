"""``BuildStrategy.fall_back_to_one_device``: the ParallelExecutor measures steps on all its
devices and on one, goes on with the faster, and trains exactly as the single-device
Executor on the full batch either way.

The choice depends on measured times; the tests drive it with a clock of their own (a step
on N devices "takes" ``many`` seconds, one on one device ``one``), so that both outcomes
are checked on any machine.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from dp_models import cnn, mlp, mlp_feeds

import parafluid as fluid
from parafluid.parallel import device_fallback
from parafluid.testing.data_parallel import run_single

pytestmark = pytest.mark.timeout(120)

STEPS = 2 * (device_fallback.WARM_STEPS + device_fallback.TIMED_STEPS) + 6


class FakeClock:
    """Advances by ``many`` seconds during a step on N devices, ``one`` on one device."""

    def __init__(self, fallback: device_fallback.OneDeviceFallback, many: float,
                 one: float) -> None:
        self.t = 0.0
        run_many, run_one = fallback._many_step, fallback._one_step

        def many_step(*args):
            self.t += many
            return run_many(*args)

        def one_step(*args):
            self.t += one
            return run_one(*args)

        fallback._many_step, fallback._one_step = many_step, one_step

    def __call__(self) -> float:
        return self.t


def _strategy(**fields: object) -> fluid.BuildStrategy:
    bs = fluid.BuildStrategy()
    bs.fall_back_to_one_device = True
    for name, value in fields.items():
        setattr(bs, name, value)
    return bs


def _train(build, feeds, many: float, one: float, monkeypatch, ndev: int = 2,
           **fields: object):
    main, startup, loss = build()
    scope = fluid.Scope()
    fluid.Executor(fluid.CPUPlace()).run(startup, scope=scope)
    pe = fluid.ParallelExecutor(False, loss_name=loss.name, main_program=main,
                                build_strategy=_strategy(**fields), scope=scope,
                                places=fluid.cpu_places(ndev))
    assert pe._fallback is not None
    monkeypatch.setattr(device_fallback, "_clock", FakeClock(pe._fallback, many, one))
    losses = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for feed in feeds:
            losses.append(pe.run([loss.name], feed=feed)[0])
    params = {p.name: np.array(scope.find_var(p.name).get_tensor())
              for p in main.global_block().all_parameters()}
    return pe, losses, params, [str(w.message) for w in caught]


def _feeds():
    return mlp_feeds(steps=STEPS, batch=8)


def test_one_device_faster_goes_on_with_one_and_trains_as_the_full_batch(monkeypatch):
    single = run_single(mlp(), _feeds())
    pe, losses, params, said = _train(mlp(), _feeds(), many=2e-3, one=1e-3,
                                      monkeypatch=monkeypatch)
    assert pe.devices_in_use == 1 and pe.device_count == 2
    note = [m for m in said if "running on 1 device instead of 2" in m]
    assert len(note) == 1, said
    assert "2.00 ms on 2 devices and 1.00 ms on 1" in note[0]
    # the N-device steps fetch one loss per device; the one-device steps one loss
    assert losses[0].shape == (2,) and losses[-1].shape == (1,)
    for mine, ref in zip(losses, single.losses):
        np.testing.assert_allclose(np.mean(mine), np.mean(ref), rtol=1e-5, atol=1e-6)
    for name, value in single.params.items():
        np.testing.assert_allclose(params[name], value, rtol=1e-5, atol=1e-6, err_msg=name)


def test_all_devices_faster_stays_on_them_with_their_copies_refreshed(monkeypatch):
    single = run_single(mlp(), _feeds())
    pe, losses, params, said = _train(mlp(), _feeds(), many=1e-3, one=2e-3,
                                      monkeypatch=monkeypatch)
    assert pe.devices_in_use == 2 and pe._fallback.decided
    assert not [m for m in said if "running on 1 device" in m]
    assert losses[-1].shape == (2,)
    for name, value in single.params.items():
        np.testing.assert_allclose(params[name], value, rtol=1e-5, atol=1e-6, err_msg=name)
    # device 1 trained on again after device 0's steps alone: it got device 0's values first
    assert pe.check_replicas() > 0


def test_per_device_feeds_run_on_every_device_and_decide_nothing(monkeypatch):
    pe, losses, _, _ = _train(mlp(), [[f, f] for f in mlp_feeds(steps=3, batch=4)],
                              many=2e-3, one=1e-3, monkeypatch=monkeypatch)
    assert pe.devices_in_use == 2 and not pe._fallback.decided
    assert all(loss.shape == (2,) for loss in losses)


def test_without_a_loss_name_it_says_so():
    main, startup, loss = mlp()()
    fluid.Executor(fluid.CPUPlace()).run(startup, scope=fluid.Scope())
    with pytest.warns(UserWarning, match="loss_name is not set"):
        fluid.ParallelExecutor(False, main_program=main, build_strategy=_strategy(),
                               scope=fluid.Scope(), places=fluid.cpu_places(2))


def test_close_closes_the_one_device_executor(monkeypatch):
    pe, _, _, _ = _train(mlp(), _feeds(), many=2e-3, one=1e-3, monkeypatch=monkeypatch)
    one = pe._fallback.one_pe
    pe.close()
    with pytest.raises(RuntimeError, match="after close"):
        one.run([], feed=_feeds()[0])


def _net_with_test_program():
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 7
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = fluid.layers.data(name="x", shape=[8], dtype="float32")
        y = fluid.layers.data(name="y", shape=[1], dtype="float32")
        pred = fluid.layers.fc(input=fluid.layers.fc(input=x, size=16, act="relu"), size=1)
        loss = fluid.layers.mean(fluid.layers.square_error_cost(pred, y))
        test = main.clone(for_test=True)
        fluid.optimizer.SGD(learning_rate=0.1).minimize(loss)
    return main, startup, test, loss, pred


def test_replicas_and_a_sharing_executor_see_device_0s_values_after_it_ran_alone(
        monkeypatch):
    main, startup, test, loss, pred = _net_with_test_program()
    scope = fluid.Scope()
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup, scope=scope)
    pe = fluid.ParallelExecutor(False, loss_name=loss.name, main_program=main,
                                build_strategy=_strategy(), scope=scope,
                                places=fluid.cpu_places(2))
    monkeypatch.setattr(device_fallback, "_clock", FakeClock(pe._fallback, 2e-3, 1e-3))
    tester = fluid.ParallelExecutor(False, main_program=test, share_vars_from=pe, scope=scope,
                                    places=fluid.cpu_places(2))
    feeds = _feeds()
    probe = feeds[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for feed in feeds:
            pe.run([loss.name], feed=feed)
            # the tester (device 1 included) reads the parameters device 0 holds now
            got, = tester.run([pred.name], feed=probe)
            want, = exe.run(test, feed=probe, fetch_list=[pred.name], scope=scope)
            np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    assert pe.devices_in_use == 1
    assert pe.check_replicas() == 0  # device 0 alone: nothing stale reported as a split


def _until_decided(pe, loss, feeds):
    """Run ``feeds`` until the fallback made its choice; return the feeds left."""
    feeds = list(feeds)
    while not pe._fallback.decided:
        pe.run([loss.name], feed=feeds.pop(0))
    return feeds


def test_a_list_of_feeds_per_device_runs_on_every_device_after_the_switch(monkeypatch):
    pe, _, _, _ = _train(mlp(), _feeds(), many=2e-3, one=1e-3, monkeypatch=monkeypatch)
    assert pe.devices_in_use == 1
    main_loss = pe._loss_name
    half = mlp_feeds(steps=1, batch=4)[0]
    got, = pe.run([main_loss], feed=[half, half])
    assert got.shape == (2,)
    assert pe.check_replicas() > 0  # the devices copied device 0's values before the step
    got, = pe.run([main_loss], feed=_feeds()[0])  # and a whole batch goes to device 0 again
    assert got.shape == (1,)


def _regression(center: bool = False, mean_of_sum: bool = False):
    """x[8] -> fc(1), squared error: ``center`` takes the batch's mean out of every row (each
    shard would take out its own), ``mean_of_sum`` makes the loss a mean of the batch's sum
    (N devices would train with 1/N of its gradient)."""
    def build():
        main, startup = fluid.Program(), fluid.Program()
        main.random_seed = startup.random_seed = 7
        with fluid.program_guard(main, startup):
            x = fluid.layers.data(name="x", shape=[8], dtype="float32")
            y = fluid.layers.data(name="y", shape=[1], dtype="float32")
            if center:
                x = fluid.layers.elementwise_sub(x, fluid.layers.reduce_mean(x, dim=0))
            cost = fluid.layers.square_error_cost(fluid.layers.fc(input=x, size=1), y)
            if mean_of_sum:
                cost = fluid.layers.reduce_sum(cost)
            cost = fluid.layers.mean(cost)
            fluid.optimizer.SGD(learning_rate=0.01).minimize(cost)
        return main, startup, cost
    return build


@pytest.mark.parametrize("build,fields,why", [
    (mlp(loss="sum"), {}, "is made by reduce_sum, not mean"),
    (cnn(sync_bn=False), {}, "batch_norm keeps statistics per device"),
    (mlp(), {"gradient_scale_strategy": fluid.BuildStrategy.GradientScaleStrategy.One},
     "gradient scale strategy is not CoeffNumDevice"),
    (mlp(optimizer=lambda: fluid.optimizer.Momentum(learning_rate=0.1, momentum=0.9)),
     {"reduce_strategy": fluid.BuildStrategy.ReduceStrategy.Reduce},
     "ReduceStrategy.Reduce keeps the optimizer state of a parameter on its owner device"),
    (_regression(mean_of_sum=True), {},
     "the loss is a mean of 'reduce_sum_0.tmp_0', which is not one row per example"),
    (_regression(center=True), {},
     "reduce_mean makes 'reduce_mean_0.tmp_0' out of the whole batch"),
], ids=["sum_loss", "batch_norm", "scale_one", "reduce", "mean_of_a_sum",
      "batch_mean_inside"])
def test_a_step_one_device_would_change_keeps_every_device_and_says_why(build, fields, why):
    with fluid.unique_name.guard():
        main, startup, loss = build()
    scope = fluid.Scope()
    fluid.Executor(fluid.CPUPlace()).run(startup, scope=scope)
    with pytest.warns(UserWarning, match="fall_back_to_one_device has no effect: .*" + why):
        pe = fluid.ParallelExecutor(False, loss_name=loss.name, main_program=main,
                                    build_strategy=_strategy(**fields), scope=scope,
                                    places=fluid.cpu_places(2))
    assert pe._fallback is None and pe.devices_in_use == 2


def test_sharing_the_device_scopes_of_an_executor_of_another_scope(monkeypatch):
    # the executor sharing trains in its source's scope, whatever scope it was given
    feeds = _feeds()
    single = run_single(mlp(), feeds[:1] + feeds)
    with fluid.unique_name.guard():
        main, startup, loss = mlp()()
    scope = fluid.Scope()
    fluid.Executor(fluid.CPUPlace()).run(startup, scope=scope)
    src = fluid.ParallelExecutor(False, loss_name=loss.name, main_program=main, scope=scope,
                                 places=fluid.cpu_places(2))
    src.run([loss.name], feed=feeds[0])
    pe = fluid.ParallelExecutor(False, loss_name=loss.name, main_program=main,
                                share_vars_from=src, build_strategy=_strategy(),
                                scope=fluid.Scope(), places=fluid.cpu_places(2))
    monkeypatch.setattr(device_fallback, "_clock", FakeClock(pe._fallback, 2e-3, 1e-3))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for feed in feeds:
            pe.run([loss.name], feed=feed)
    assert pe.devices_in_use == 1
    for name, value in single.params.items():
        np.testing.assert_allclose(np.array(scope.find_var(name).get_tensor()), value,
                                   rtol=1e-5, atol=1e-6, err_msg=name)


def test_a_dropped_executor_is_freed_without_the_cycle_collector(monkeypatch):
    import gc
    import weakref

    pe, _, _, _ = _train(mlp(), _feeds(), many=2e-3, one=1e-3, monkeypatch=monkeypatch)
    monkeypatch.setattr(device_fallback, "_clock", lambda: 0.0)
    fallback = pe._fallback
    fallback.__dict__.pop("_many_step"), fallback.__dict__.pop("_one_step")  # (the clock's)
    refs = [weakref.ref(pe), weakref.ref(fallback.one_pe)]
    del pe, fallback
    gc.disable()
    try:
        assert [r() for r in refs] == [None, None]
    finally:
        gc.enable()


def test_a_step_refused_before_it_ran_leaves_no_false_split(monkeypatch):
    with fluid.unique_name.guard():
        main, startup, loss = mlp()()
    scope = fluid.Scope()
    fluid.Executor(fluid.CPUPlace()).run(startup, scope=scope)
    pe = fluid.ParallelExecutor(False, loss_name=loss.name, main_program=main,
                                build_strategy=_strategy(), scope=scope,
                                places=fluid.cpu_places(2))
    monkeypatch.setattr(device_fallback, "_clock", FakeClock(pe._fallback, 1e-3, 2e-3))
    feeds = _until_decided(pe, loss, _feeds())
    assert pe.devices_in_use == 2  # and device 0 ran the last steps alone
    bad = dict(feeds[0], y=feeds[0]["y"][:5])
    with pytest.raises(ValueError, match="same batch size"):
        pe.run([loss.name], feed=bad)
    pe.check_replicas()  # device 1 copies device 0's values before its next step
    pe.run([loss.name], feed=feeds[1])
    assert pe.check_replicas() > 0


def test_the_one_device_executor_says_nothing_of_fields_set_for_several(monkeypatch):
    _, _, _, said = _train(mlp(), _feeds(), many=2e-3, one=1e-3, monkeypatch=monkeypatch,
                           fuse_all_reduce_ops=True)
    assert not [m for m in said if "single device" in m], said


def test_compile_jobs_of_other_programs_do_not_hold_up_the_choice(monkeypatch):
    # (a CompiledProgram elsewhere in the process compiling in the background)
    monkeypatch.setattr(device_fallback.tiered, "jobs_idle", lambda timeout=None: False)
    pe, _, _, _ = _train(mlp(), _feeds(), many=2e-3, one=1e-3, monkeypatch=monkeypatch)
    assert pe.devices_in_use == 1


def test_the_graph_files_asked_for_stay_those_of_the_n_devices(monkeypatch, tmp_path):
    prefix = str(tmp_path / "g")
    pe, _, _, _ = _train(mlp(), _feeds(), many=2e-3, one=1e-3, monkeypatch=monkeypatch,
                         debug_graphviz_path=prefix)
    assert pe.devices_in_use == 1
    # (the one-device executor does not write its graph over them)
    assert "(device 1)" in (tmp_path / "g_multi_devices.dot").read_text()


def test_a_program_reading_from_a_reader_is_refused():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = fluid.layers.data(name="x", shape=[8], dtype="float32")
        y = fluid.layers.data(name="y", shape=[1], dtype="float32")
        fluid.io.DataLoader.from_generator(feed_list=[x, y], capacity=4, iterable=False)
        loss = fluid.layers.mean(fluid.layers.square_error_cost(fluid.layers.fc(x, 1), y))
        fluid.optimizer.SGD(0.1).minimize(loss)
    scope = fluid.Scope()
    fluid.Executor(fluid.CPUPlace()).run(startup, scope=scope)
    with pytest.warns(UserWarning, match="no effect: the program reads its batches from a "
                                         "reader"):
        pe = fluid.ParallelExecutor(False, loss_name=loss.name, main_program=main,
                                    build_strategy=_strategy(), scope=scope,
                                    places=fluid.cpu_places(2))
    assert pe._fallback is None
