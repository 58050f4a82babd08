"""fluid.dygraph.Layer in both modes; saving and loading the imperative state."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

import parafluid as fluid
from parafluid import dygraph

RNG = np.random.RandomState(3)
XB = RNG.randn(6, 4).astype("float32")
YB = RNG.randn(6, 1).astype("float32")


class Linear(dygraph.Layer):
    def __init__(self, name_scope, size_in, size_out):
        super().__init__(name_scope)
        self.w = self.create_parameter(None, [size_in, size_out], "float32")
        self.b = self.create_parameter(None, [size_out], "float32", is_bias=True)

    def forward(self, x):
        return fluid.layers.elementwise_add(fluid.layers.matmul(x, self.w), self.b)


class Regressor(dygraph.Layer):
    def __init__(self, name_scope):
        super().__init__(name_scope)
        self.hidden = Linear(self.full_name(), 4, 5)
        self.out = Linear(self.full_name(), 5, 1)

    def forward(self, x):
        return self.out(fluid.layers.relu(self.hidden(x)))


def _loss(model, x, y):
    return fluid.layers.mean(fluid.layers.square_error_cost(model(x), y))


def test_layer_registers_parameters_and_sublayers():
    with dygraph.guard():
        model = Regressor("reg")
        assert model.full_name() == "reg/Regressor_0"
        assert [type(s).__name__ for s in model.sublayers()] == ["Linear", "Linear"]
        names = [p.name for p in model.parameters()]
        assert names == ["reg/Regressor_0/Linear_0.w_0", "reg/Regressor_0/Linear_0.b_0",
                         "reg/Regressor_0/Linear_1.w_0", "reg/Regressor_0/Linear_1.b_0"]
        assert list(model.state_dict()) == names
        assert model.parameters(include_sublayers=False) == []
        model.extra = model.create_parameter(None, [2], "float32")
        assert model.parameters(include_sublayers=False) == [model.extra]
        with pytest.raises(TypeError, match="is a parameter: assign a Parameter or None"):
            model.extra = 3
        del model.extra
        assert model.parameters(include_sublayers=False) == []
        with pytest.raises(NotImplementedError, match="must define forward"):
            dygraph.Layer("bare")(1)
        with pytest.raises(TypeError, match="add_sublayer.*expected a Layer, got int"):
            model.add_sublayer("s", 1)
        extra2 = model.add_parameter("extra2", model.create_parameter(None, [3], "float32"))
        assert model.extra2 is extra2
        assert model.parameters(include_sublayers=False) == [extra2]
        with pytest.raises(TypeError, match="add_parameter.*expected a Parameter, got int"):
            model.add_parameter("bad", 1)
        var = model.create_variable(name="state", dtype="float32")
        assert var.name == "reg/Regressor_0.state"
        assert dygraph.Layer().full_name() == "layer_0"


def test_layer_in_static_mode_builds_a_program_the_executor_trains():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data("x", shape=[4])
        y = fluid.layers.data("y", shape=[1])
        model = Regressor("reg")
        loss = _loss(model, x, y)
        fluid.optimizer.SGD(learning_rate=0.1).minimize(loss)
    assert sorted(p.name for p in main.all_parameters()) == \
        sorted(model.state_dict())
    assert {op.type for op in startup.global_block().ops} >= {"uniform_random",
                                                             "fill_constant"}
    exe = fluid.Executor(fluid.CPUPlace())
    with fluid.scope_guard(fluid.Scope()):
        exe.run(startup)
        losses = [exe.run(main, feed={"x": XB, "y": YB}, fetch_list=[loss])[0].item()
                  for _ in range(20)]
        # set_dict in static mode writes the values into the scope
        model.set_dict({p.name: np.zeros(p.shape, "float32") for p in model.parameters()})
        zero = exe.run(main, feed={"x": XB, "y": YB}, fetch_list=[loss])[0].item()
    assert losses[-1] < losses[0] * 0.8
    np.testing.assert_allclose(zero, np.mean(YB ** 2), rtol=1e-5)


def _train(model, opt, steps):
    losses = []
    for _ in range(steps):
        loss = _loss(model, dygraph.to_variable(XB), dygraph.to_variable(YB))
        loss.backward()
        opt.minimize(loss)
        model.clear_gradients()
        losses.append(loss.numpy().item())
    return losses


def test_save_dygraph_load_dygraph_round_trip(tmp_path):
    path = str(tmp_path / "ckpt" / "reg")
    with dygraph.guard():
        model = Regressor("reg")
        opt = fluid.optimizer.Adam(learning_rate=dygraph.ExponentialDecay(0.05, 2, 0.5))
        _train(model, opt, 3)
        dygraph.save_dygraph(model.state_dict(), path)
        dygraph.save_dygraph(opt.state_dict(), path)
        go_on = _train(model, opt, 3)  # what the saved state continues with
    assert sorted(os.listdir(tmp_path / "ckpt")) == ["reg.pdopt", "reg.pdparams"]
    with open(tmp_path / "ckpt" / "reg.pdparams", "rb") as f:
        header_len = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(header_len))
    assert header["__metadata__"]["parafluid.dygraph"] == "params"  # safetensors, no pickle
    params, opt_state = dygraph.load_dygraph(path)
    # Fluid's key and form: "global_step", int32 [1]; loaded values answer as Fluid's
    assert opt_state["global_step"].numpy().tolist() == [3]  # 3 steps trained before
    assert opt_state["global_step"].dtype == np.int32
    name = next(iter(params))
    np.testing.assert_array_equal(np.array(params[name].value().get_tensor()), params[name])
    with dygraph.guard():
        model = Regressor("reg")  # fresh random values
        opt = fluid.optimizer.Adam(learning_rate=dygraph.ExponentialDecay(0.05, 2, 0.5))
        model.set_dict(params)
        opt.load(opt_state)
        resumed = _train(model, opt, 3)
    np.testing.assert_allclose(resumed, go_on, rtol=1e-6)


def test_save_persistables_load_persistables_round_trip(tmp_path):
    with dygraph.guard():
        model = Regressor("reg")
        opt = fluid.optimizer.Momentum(learning_rate=0.05, momentum=0.9)
        _train(model, opt, 2)
        dygraph.save_persistables(model.state_dict(), str(tmp_path), optimizers=opt)
        go_on = _train(model, opt, 2)
    with dygraph.guard():
        state, opt_state = dygraph.load_persistables(str(tmp_path))
        assert all(isinstance(v, fluid.framework.Variable) for v in state.values())
        assert sorted(state) == sorted(p.name for p in model.parameters())
        model = Regressor("reg")
        opt = fluid.optimizer.Momentum(learning_rate=0.05, momentum=0.9)
        model.load_dict(state)
        opt.load(opt_state)
        resumed = _train(model, opt, 2)
    np.testing.assert_allclose(resumed, go_on, rtol=1e-6)


def test_loading_refuses_what_does_not_fit(tmp_path):
    path = str(tmp_path / "m")
    with dygraph.guard():
        model = Regressor("reg")
        dygraph.save_dygraph(model.state_dict(), path)
        other = Linear("other", 4, 5)
        with pytest.raises(RuntimeError,
                           match="parameter 'other/Linear_0.w_0' is not in the state"):
            other.load_dict(dygraph.load_dygraph(path)[0])
        w = model.hidden.w
        with pytest.raises(ValueError, match=r"has shape \[4, 5\], the value has shape \[5\]"):
            w.set_value(np.zeros([5], "float32"))
        with pytest.raises(TypeError, match="has dtype float32, the value has dtype float64"):
            w.set_value(np.zeros([4, 5]))
        with pytest.raises(ValueError, match="state_dict is empty"):
            dygraph.save_dygraph({}, path)
    with open(path + ".pdparams", "r+b") as f:  # a damaged file is refused before use
        f.seek(-3, os.SEEK_END)
        f.write(b"\x00\x01\x02")
    with pytest.raises(ValueError, match="crc|CRC|checksum|corrupt"):
        dygraph.load_dygraph(path)
    with pytest.raises(FileNotFoundError, match="neither .*nothing.pdparams"):
        dygraph.load_dygraph(str(tmp_path / "nothing"))


class Lazy(dygraph.Layer):
    """Creates its parameter on the first call (from the input's width)."""

    def __init__(self, name_scope):
        super().__init__(name_scope)
        self.w = None

    def _build_once(self, x):
        self.w = self.create_parameter(None, [x.shape[1], 1], "float32")

    def forward(self, x):
        return fluid.layers.matmul(x, self.w)


def test_load_dict_before_build_once_gives_the_values_to_later_parameters():
    with dygraph.guard():
        model = Lazy("lazy")
        assert model.parameters() == []
        model.load_dict({"lazy/Lazy_0.w_0": np.full([4, 1], 0.5, "float32")})
        out = model(dygraph.to_variable(XB))
        np.testing.assert_allclose(out.numpy(), XB.sum(1, keepdims=True) * 0.5, rtol=1e-5)
        assert [p.name for p in model.parameters()] == ["lazy/Lazy_0.w_0"]
