"""Fluid 1.6 code written as Fluid's users and unit tests wrote it, at the edges of the
newest surfaces (the imperative mode, fleet, contrib, Dataset training) and of what they
share with programs: integer arithmetic through `scale`, Variable slicing, tensor arrays in
the imperative mode, feeds, checkpoints, role makers, and the errors for misuse."""

from __future__ import annotations

import os

import numpy as np
import pytest

import parafluid as fluid


def test_scalar_arithmetic_on_an_integer_variable_keeps_its_dtype_as_fluids_scale():
    # Fluid's scale kernel casts `scale` and `bias` to the tensor's type (static_cast, which
    # truncates): `i + 1` of an int64 counter is int64, as its variable declares. As Fluid
    # 1.6's operators, a division is an elementwise_div (integer division, truncating as
    # C++'s), and a number that is not an integer is refused
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        i = fluid.layers.fill_constant([1], "int64", 4)
        m = fluid.layers.fill_constant([1], "int64", -7)
        outs = [i + 1, i * 3, 1 - i, -i, i * 2.0, i / 2, i / 3.0, m / 2]
        with pytest.raises(ValueError, match=r"elementwise_mul: .* is int64 but the number "
                                             r"2.5 is not an integer"):
            i * 2.5
    assert [o.dtype for o in outs] == ["int64"] * 8
    assert [op.type for op in main.global_block().ops].count("elementwise_div") == 3
    exe = fluid.Executor(fluid.CPUPlace())
    got = exe.run(main, fetch_list=outs)
    assert [g.dtype for g in got] == [np.int64] * 8
    assert [int(g[0]) for g in got] == [5, 12, -3, -4, 8, 2, 1, -3]
    with fluid.dygraph.guard():
        k = fluid.dygraph.to_variable(np.array([3, 7], "int32"))
        j = k + 1
        assert j.dtype == "int32" and j.numpy().tolist() == [4, 8]
        x = fluid.dygraph.to_variable(np.array([3.0], "float32"))
        assert (x / 2).numpy().tolist() == [1.5]       # floats are untouched


def test_tensor_arrays_in_the_imperative_mode_write_read_and_differentiate():
    with fluid.dygraph.guard():
        i = fluid.layers.fill_constant([1], "int64", 0)
        x = fluid.dygraph.to_variable(np.array([1.0, 2.0], "float32"))
        x.stop_gradient = False
        arr = fluid.layers.create_array("float32")
        assert "lod_tensor_array" in repr(arr)
        fluid.layers.array_write(x, i, array=arr)
        fluid.layers.array_write(x * 3, i + 1, array=arr)
        assert fluid.layers.array_length(arr).numpy().tolist() == [2]
        assert fluid.layers.array_read(arr, i + 1).numpy().tolist() == [3.0, 6.0]
        joined, _ = fluid.layers.tensor_array_to_tensor(arr, axis=0)
        assert joined.numpy().tolist() == [1.0, 2.0, 3.0, 6.0]
        loss = fluid.layers.reduce_sum(fluid.layers.array_read(arr, i + 1))
        loss.backward()
        assert x.gradient().tolist() == [3.0, 3.0]
        assert str(arr).endswith("of 2 items")
        with pytest.raises(TypeError, match="tensor array of 2 items.*array_read"):
            arr.numpy()


def test_ctr_metric_bundle_takes_the_int_label_its_fluid_docstring_shows():
    # Fluid 1.6's own example: label = fluid.layers.data(..., dtype="int32")
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        data = fluid.layers.data(name="data", shape=[3], dtype="float32")
        label = fluid.layers.data(name="label", shape=[1], dtype="int32")
        predict = fluid.layers.sigmoid(fluid.layers.fc(input=data, size=1))
        bundle = fluid.contrib.layers.ctr_metric_bundle(input=predict, label=label)
    rng = np.random.RandomState(3)
    feed = {"data": rng.rand(5, 3).astype("float32"),
            "label": np.array([[1], [0], [1], [1], [0]], "int32")}
    exe = fluid.Executor(fluid.CPUPlace())
    with fluid.scope_guard(fluid.Scope()):
        exe.run(startup)
        *sums, pred = exe.run(main, feed=feed, fetch_list=[*bundle, predict])
    lv = feed["label"].astype("float32")
    want = [np.sum((pred - lv) ** 2), np.sum(np.abs(pred - lv)), pred.sum(),
            np.sum(1 / (1 + np.exp(-pred))), lv.sum(), 5.0]
    np.testing.assert_allclose([float(s) for s in sums], want, rtol=1e-5)


def test_executor_takes_a_feed_list_of_one_dict_as_fluids_does():
    # a loader over places yields one feed dict per place; Fluid's Executor takes the list
    # of one, and refuses more ("Not compiled with data parallel")
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data("x", shape=[2])
        y = fluid.layers.reduce_sum(x * 2)
    exe = fluid.Executor(fluid.CPUPlace())
    ones = np.ones([3, 2], "float32")
    assert exe.run(main, feed=[{"x": ones}], fetch_list=[y])[0].tolist() == [12.0]
    assert exe.run(main, feed=({"x": ones},), fetch_list=[y])[0].tolist() == [12.0]
    with pytest.raises(TypeError, match="2 feed dicts.*one per device.*CompiledProgram"):
        exe.run(main, feed=[{"x": ones}, {"x": ones}], fetch_list=[y])
    with pytest.raises(TypeError, match="feed must be a dict"):
        exe.run(main, feed=[ones], fetch_list=[y])


def test_dataset_set_use_var_names_what_it_wants_when_given_names():
    dataset = fluid.DatasetFactory().create_dataset("QueueDataset")
    with pytest.raises(TypeError, match="list of data Variables.*'slot1'"):
        dataset.set_use_var(["slot1"])
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        var = fluid.layers.data(name="slot1", shape=[1], dtype="int64", lod_level=1)
    with pytest.raises(TypeError, match="list of data Variables"):
        dataset.set_use_var(var)
    dataset.set_use_var([var])
    assert 'name: "slot1"' in dataset.desc()


def test_a_layers_helper_appends_the_activation_it_is_given():
    # Fluid 1.6's imperative unit tests build cells from raw ops through self._helper
    class Cell(fluid.dygraph.Layer):
        def forward(self, x):
            hidden = self.create_variable(dtype="float32")
            self._helper.append_op(type="scale", inputs={"X": x}, outputs={"Out": hidden},
                                   attrs={"scale": 2.0})
            return self._helper.append_activation(hidden, act="tanh")

    data = np.array([[0.1, -0.3]], "float32")
    with fluid.dygraph.guard():
        x = fluid.dygraph.to_variable(data)
        x.stop_gradient = False
        out = Cell("cell")(x)
        loss = fluid.layers.reduce_sum(out)
        loss.backward()
        np.testing.assert_allclose(out.numpy(), np.tanh(2 * data), rtol=1e-6)
        np.testing.assert_allclose(x.gradient(), 2 * (1 - np.tanh(2 * data) ** 2), rtol=1e-5)
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        helper = fluid.layer_helper.LayerHelper("fc", act="relu")
        y = fluid.layers.data("y", shape=[2])
        helper.append_activation(y)
        helper.append_activation(y, act="sigmoid")
    assert [op.type for op in main.global_block().ops] == ["relu", "sigmoid"]


def test_paddle_cloud_role_maker_names_the_variable_it_read(monkeypatch):
    from parafluid.incubate.fleet.base import role_maker
    for k in list(os.environ):
        if k.startswith("PADDLE_") or k in ("TRAINING_ROLE", "POD_IP"):
            monkeypatch.delenv(k)
    # Fluid 1.6's PaddleCloud variables for a pserver
    monkeypatch.setenv("TRAINING_ROLE", "PSERVER")
    monkeypatch.setenv("PADDLE_PSERVERS_IP_PORT_LIST", "127.0.0.1:6170,127.0.0.1:6171")
    monkeypatch.setenv("PADDLE_TRAINERS_NUM", "2")
    monkeypatch.setenv("POD_IP", "127.0.0.1")
    monkeypatch.setenv("PADDLE_PORT", "6171")
    rm = role_maker.PaddleCloudRoleMaker()
    rm.generate_role()
    assert rm.is_server() and rm.server_index() == 1 and rm.worker_num() == 2
    monkeypatch.setenv("PADDLE_PSERVERS_IP_PORT_LIST", "127.0.0.1")
    with pytest.raises(ValueError, match="^PADDLE_PSERVERS_IP_PORT_LIST must look like"):
        role_maker.PaddleCloudRoleMaker().generate_role()
    monkeypatch.setenv("TRAINING_ROLE", "WORKER")
    with pytest.raises(ValueError, match="TRAINING_ROLE must be TRAINER or PSERVER.*'WORKER'"):
        role_maker.PaddleCloudRoleMaker().generate_role()
    monkeypatch.setenv("PADDLE_TRAINING_ROLE", "X")
    with pytest.raises(ValueError, match="PADDLE_TRAINING_ROLE must be TRAINER"):
        role_maker.PaddleCloudRoleMaker().generate_role()


def test_dygraph_load_persistables_returns_params_and_optimizer_state(tmp_path):
    # Fluid 1.6's unit test and tutorials: restore, _ = fluid.dygraph.load_persistables(d)
    class Net(fluid.dygraph.Layer):
        def __init__(self, name_scope):
            super().__init__(name_scope)
            self.w = self.create_parameter(None, [3, 1], "float32")

        def forward(self, x):
            return fluid.layers.matmul(x, self.w)

    with fluid.dygraph.guard():
        net = Net("net")
        opt = fluid.optimizer.Adam(learning_rate=0.1)
        loss = fluid.layers.reduce_mean(net(fluid.dygraph.to_variable(np.ones([2, 3],
                                                                              "float32"))))
        loss.backward()
        opt.minimize(loss)
        fluid.dygraph.save_persistables(net.state_dict(), str(tmp_path / "save_dir"),
                                        optimizers=opt)
        restore, opt_state = fluid.dygraph.load_persistables(str(tmp_path / "save_dir"))
        assert sorted(restore) == ["net/Net_0.w_0"]
        assert sorted(opt_state) == sorted(opt.state_dict())
        np.testing.assert_array_equal(restore["net/Net_0.w_0"].numpy(), net.w.numpy())
        net.load_dict(restore)
        with pytest.raises(IOError, match="not_exist_dir"):
            fluid.dygraph.load_persistables(str(tmp_path / "not_exist_dir"))


def test_a_second_backward_through_freed_ops_says_so():
    with fluid.dygraph.guard():
        x = fluid.dygraph.to_variable(np.array([1.0, 2.0], "float32"))
        x.stop_gradient = False
        loss = fluid.layers.reduce_sum(x * x)
        loss.backward()
        with pytest.raises(ValueError, match="freed by an earlier backward"):
            loss.backward()
        loss = fluid.layers.reduce_sum(x * x)     # the forward pass again: fine
        loss.backward()
        assert x.gradient().tolist() == [4.0, 8.0]
        # nothing to differentiate: as Fluid 1.6's engine, backward() does nothing
        fluid.layers.reduce_sum(fluid.dygraph.to_variable(np.ones([2], "float32"))).backward()
        assert x.gradient().tolist() == [4.0, 8.0]


def test_grad_clip_by_value_with_only_a_max_clips_symmetrically_as_fluids():
    from parafluid.dygraph_grad_clip import GradClipByValue

    clip = GradClipByValue(None, 2.0)
    assert (clip.min_value, clip.max_value) == (-2.0, 2.0)
    assert str(clip) == "ClipByValue, min = -2.000000, max=2.000000"
    with pytest.raises(ValueError, match="max_value must be positive"):
        GradClipByValue(min_value=None, max_value=-1.0)
    with fluid.dygraph.guard():
        w = fluid.dygraph.Layer("m").create_parameter(
            None, [3], "float32", default_initializer=fluid.initializer.Constant(0.0))
        x = fluid.dygraph.to_variable(np.array([10.0, -10.0, 1.0], "float32"))
        loss = fluid.layers.reduce_sum(w * x)
        loss.backward()
        fluid.optimizer.SGD(learning_rate=1.0).minimize(loss, grad_clip=clip)
        assert w.numpy().tolist() == [-2.0, 2.0, -1.0]


def test_fleet_save_functions_check_their_arguments_as_fluids():
    # Fluid 1.6's test_fleet_api_input: a str executor and a CompiledProgram are refused
    from parafluid.incubate.fleet.base import role_maker
    from parafluid.incubate.fleet.collective import fleet as collective_fleet
    from parafluid.incubate.fleet.parameter_server.distribute_transpiler import fleet

    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        image = fluid.layers.data(name="image", shape=[13], dtype="float32")
        avg_cost = fluid.layers.mean(fluid.layers.fc(image, 1))
    fleet.init(role_maker.UserDefinedRoleMaker(
        current_id=0, role=role_maker.Role.SERVER, worker_num=2,
        server_endpoints=["127.0.0.1:36011", "127.0.0.1:36012"]))
    exe = fluid.Executor(fluid.CPUPlace())
    compiled = fluid.CompiledProgram(main)
    for f in (fleet, collective_fleet):
        with pytest.raises(TypeError, match="executor must be a fluid.Executor, got str"):
            f.save_inference_model(dirname="/nonexistent/", feeded_var_names=["image"],
                                   target_vars=[avg_cost], executor="executor")
        with pytest.raises(TypeError, match="CompiledProgram is not allowed"):
            f.save_inference_model(dirname="/nonexistent/", feeded_var_names=["image"],
                                   target_vars=[avg_cost], executor=exe,
                                   main_program=compiled)
        with pytest.raises(TypeError, match="executor must be a fluid.Executor"):
            f.save_persistables(executor="executor", dirname="/nonexistent/")
        with pytest.raises(TypeError, match="CompiledProgram is not allowed"):
            f.save_persistables(executor=exe, dirname="/nonexistent/", main_program=compiled)


def test_compressor_config_names_a_bad_epoch(tmp_path):
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        x = fluid.layers.data("x", shape=[4])
        loss = fluid.layers.mean(fluid.layers.fc(x, 3))
    comp = fluid.contrib.Compressor(fluid.CPUPlace(), fluid.Scope(), main,
                                    train_fetch_list=[("loss", loss.name)])
    path = tmp_path / "compress.yaml"
    for bad in ("x", "-1", "1.5"):
        path.write_text(f"version: 1.0\ncompressor:\n  epoch: {bad}\n")
        with pytest.raises(ValueError, match="compressor epoch must be an integer >= 0"):
            comp.config(str(path))
    path.write_text("version: 1.0\ncompressor:\n  epoch: 2\n  eval_epoch: 1\n")
    comp.config(str(path))
    assert (comp.epoch, comp.eval_epoch) == (2, 1)


def test_variable_slicing_and_astype_as_fluid_16():
    a = np.arange(24, dtype="float32").reshape(2, 3, 4)
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        x = fluid.layers.data("x", shape=[3, 4])
        outs = [x[0], x[:, 1:3], x[:, ::2], x[..., -1], x[:, :, ::-1], x[1:], x[:, -1],
                x.astype("int64")]
        with pytest.raises(IndexError, match="index 3 is out of range for axis 1 of size 3"):
            x[:, 3]
        # a step over an axis of unknown size: a strided_slice op, as Fluid's
        outs.append(x[::2])
        assert main.global_block().ops[-1].type == "strided_slice"
        with pytest.raises(TypeError, match="not iterable when the program is built"):
            list(x)
    got = fluid.Executor(fluid.CPUPlace()).run(main, feed={"x": a}, fetch_list=outs)
    # an int index drops its axis, as Fluid 1.6's slice with decrease_axis
    want = [a[0], a[:, 1:3], a[:, ::2], a[..., -1], a[:, :, ::-1], a[1:], a[:, -1],
            a.astype("int64"), a[::2]]
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)
    with fluid.dygraph.guard():
        v = fluid.dygraph.to_variable(a)
        v.stop_gradient = False
        part = v[:, 1:3, ::2]
        np.testing.assert_array_equal(part.numpy(), a[:, 1:3, ::2])
        fluid.layers.reduce_sum(part).backward()
        grad = np.zeros_like(a)
        grad[:, 1:3, ::2] = 1
        np.testing.assert_array_equal(v.gradient(), grad)
        assert [r.shape for r in v] == [(3, 4), (3, 4)]
        assert v.astype("float64").dtype == "float64"


DECAYS = {
    "piecewise": lambda L: L.piecewise_decay([2, 3], [0.1, 0.01, 0.001]),
    "natural_exp": lambda L: L.natural_exp_decay(0.1, 1, 0.5, staircase=True),
    "exponential": lambda L: L.exponential_decay(0.1, 2, 0.5),
    "inverse_time": lambda L: L.inverse_time_decay(0.1, 1, 0.5),
    "polynomial": lambda L: L.polynomial_decay(0.1, 3, 0.01),
    "cosine": lambda L: L.cosine_decay(0.1, 2, 3),
    "noam": lambda L: L.noam_decay(8, 2),
}


@pytest.mark.parametrize("name", sorted(DECAYS))
def test_decay_layers_in_the_imperative_mode_decay_as_in_a_program(name):
    # Fluid 1.6: SGDOptimizer(learning_rate=fluid.layers.natural_exp_decay(...)) in a guard
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        lr = DECAYS[name](fluid.layers)
    exe = fluid.Executor(fluid.CPUPlace())
    with fluid.scope_guard(fluid.Scope()):
        exe.run(startup)
        want = [float(exe.run(main, fetch_list=[lr])[0][0]) for _ in range(4)]
    got = []
    with fluid.dygraph.guard():
        w = fluid.dygraph.Layer("m").create_parameter(
            None, [1], "float32", default_initializer=fluid.initializer.Constant(0.0))
        opt = fluid.optimizer.SGD(learning_rate=DECAYS[name](fluid.layers))
        for _ in range(4):
            before = float(w.numpy()[0])
            loss = fluid.layers.reduce_sum(w * 1.0)   # gradient 1: the step is the rate
            loss.backward()
            opt.minimize(loss)
            w.clear_gradient()
            got.append(before - float(w.numpy()[0]))
    np.testing.assert_allclose(got, want, rtol=1e-5)
    assert len(set(np.round(want, 6))) > 1      # the rate does change over the 4 steps


def test_variable_indexes_and_bounds_as_fluid_16():
    a = np.random.RandomState(0).random_sample((3, 4, 5, 6)).astype("float32")
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        x = fluid.data(name="x", shape=[3, 4, 5, 6], dtype="float32")
        minus_1 = fluid.layers.fill_constant([1], "int32", -1)
        minus_3 = fluid.layers.fill_constant([1], "int32", -3)
        one = fluid.layers.fill_constant([1], "int64", 1)
        outs = [x[minus_3:3, 0:100, :, 2:-1], x[minus_1, 0:100, :, 2:minus_1], x[one],
                x[1, 2, 3, 4], x[:, :, ::-1]]
        assert outs[3].shape == (1,)
    got = fluid.Executor(fluid.CPUPlace()).run(main, feed={"x": a}, fetch_list=outs)
    want = [a[-3:3, 0:100, :, 2:-1], a[-1, 0:100, :, 2:-1], a[1], a[1, 2, 3, 4].reshape(1),
            a[:, :, ::-1]]
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def test_an_int32_shape_fed_into_a_float32_layers_data_is_taken_as_fluid_takes_it():
    """layers.data does not check what is fed (Fluid's need_check_feed is False); when an
    op then fails, the feed that did not match is the error."""
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data(name="x", shape=[2, 3], append_batch_size=False)
        times = fluid.layers.data(name="times", shape=[2], append_batch_size=False)  # float32
        out = fluid.layers.expand(x, expand_times=times)
    with fluid.program_guard(other := fluid.Program(), startup):
        y = fluid.layers.data(name="y", shape=[2, 3], append_batch_size=False)
        bad = fluid.layers.fc(y, size=2)
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    xv = np.ones((2, 3), "float32")
    got, = exe.run(main, feed={"x": xv, "times": np.array([2, 1], "int32")}, fetch_list=[out])
    np.testing.assert_array_equal(got, np.ones((4, 3), "float32"))
    with pytest.raises(TypeError, match="must be 'float32', but received 'float64'"):
        exe.run(other, feed={"y": xv.astype("float64")}, fetch_list=[bad])
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        flag = fluid.layers.data(name="flag", shape=[4], dtype="bool")
        with pytest.raises(ValueError, match="a bool input must have stop_gradient=False"):
            fluid.layers.expand(flag, [2, 1])
