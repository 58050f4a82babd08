"""Imperative variables, backward(), stop_gradient, no_grad, Python control flow, errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import parafluid as fluid
from parafluid import dygraph

X = np.array([[1.0, -2.0, 3.0], [0.5, 4.0, -1.0]], dtype="float32")


def _var(value, needs_grad=True):
    v = dygraph.to_variable(value)
    v.stop_gradient = not needs_grad
    return v


def test_guard_switches_the_mode_and_gives_fresh_names():
    assert not fluid.in_dygraph_mode()
    names = []
    for _ in range(2):
        with dygraph.guard():
            assert fluid.in_dygraph_mode() and dygraph.enabled()
            names.append(fluid.layers.relu(dygraph.to_variable(X)).name)
    assert not fluid.in_dygraph_mode()
    # (as Fluid's: an imperative temporary is named from the one key "tmp")
    assert names[0] == names[1] == "tmp_0"


def test_variable_attributes_and_math_operators():
    with dygraph.guard():
        x = dygraph.to_variable(X, name="x")
        assert (x.name, x.shape, x.dtype) == ("x", (2, 3), "float32")
        assert x.stop_gradient and not x.persistable
        y = (x * 2.0 + 1.0 - x) / 2.0
        np.testing.assert_allclose(y.numpy(), (X * 2 + 1 - X) / 2, rtol=1e-6)
        np.testing.assert_allclose((-x).numpy(), -X)
        np.testing.assert_allclose((x ** x.detach()).numpy()[0, 2], 27.0, rtol=1e-6)
        assert (x > 0.0).numpy().tolist() == (X > 0).tolist()
        # a layer reads the value's shape as it would read a static variable's
        assert fluid.layers.reshape(x, [3, -1]).shape == (3, 2)


def test_gradient_of_a_variable_used_twice_is_the_sum():
    with dygraph.guard():
        x = _var(X)
        y = fluid.layers.reduce_sum(x * x + fluid.layers.tanh(x))
        y.backward()
        np.testing.assert_allclose(x.gradient(), 2 * X + 1 - np.tanh(X) ** 2, rtol=1e-5)
        # a second backward (new graph) accumulates until clear_gradient
        fluid.layers.reduce_sum(x * 3.0).backward()
        np.testing.assert_allclose(x.gradient(), 2 * X + 1 - np.tanh(X) ** 2 + 3, rtol=1e-5)
        x.clear_gradient()
        assert x.gradient() is None


def test_matches_torch_autograd_on_a_small_net():
    w = np.random.RandomState(0).randn(3, 4).astype("float32")
    with dygraph.guard():
        x, wv = _var(X), _var(w)
        h = fluid.layers.matmul(x, wv)
        loss = fluid.layers.mean(fluid.layers.sigmoid(h) * h)
        loss.backward()
        gx, gw = x.gradient(), wv.gradient()
    tx = torch.tensor(X, requires_grad=True)
    tw = torch.tensor(w, requires_grad=True)
    th = tx @ tw
    (torch.sigmoid(th) * th).mean().backward()
    np.testing.assert_allclose(gx, tx.grad.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(gw, tw.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_stop_gradient_blocks_and_outputs_inherit_it():
    with dygraph.guard():
        a, b = _var(X), _var(X, needs_grad=False)
        c = a * b
        assert not c.stop_gradient
        assert (b * b).stop_gradient  # nothing upstream needs a gradient
        fluid.layers.reduce_sum(c).backward()
        np.testing.assert_allclose(a.gradient(), X)
        assert b.gradient() is None
        # stop_gradient set on an intermediate cuts what lies behind it
        a.clear_gradient()
        h = a * 2.0
        h.stop_gradient = True
        out = fluid.layers.reduce_sum(h * a)
        out.backward()
        np.testing.assert_allclose(a.gradient(), 2 * X, rtol=1e-6)


def test_no_grad_as_context_manager_and_decorator():
    @dygraph.no_grad
    def double(v):
        return v * 2.0

    with dygraph.guard():
        x = _var(X)
        with dygraph.no_grad():
            y = x * 3.0
        assert y.stop_gradient and y._node is None
        z = double(x)
        assert z.stop_gradient
        np.testing.assert_allclose(z.numpy(), 2 * X)
        # as Fluid 1.6's engine: nothing to differentiate, so backward() does nothing
        fluid.layers.reduce_sum(z).backward()
        assert x.gradient() is None and z.gradient() is None


def test_python_control_flow_on_numpy_values():
    def run(v):
        with dygraph.guard():
            x = _var(np.full([2, 2], v, "float32"))
            y = x
            for _ in range(3):
                if fluid.layers.reduce_sum(y).numpy()[0] > 0:
                    y = y * 2.0
                else:
                    y = y - 1.0
            fluid.layers.reduce_sum(y).backward()
            return y.numpy(), x.gradient()

    y, g = run(1.0)
    np.testing.assert_allclose(y, np.full([2, 2], 8.0))
    np.testing.assert_allclose(g, np.full([2, 2], 8.0))
    y, g = run(-1.0)
    np.testing.assert_allclose(y, np.full([2, 2], -4.0))
    np.testing.assert_allclose(g, np.ones([2, 2]))


def test_backward_strategy_sort_sum_gradient_gives_the_same_sums():
    grads = []
    for sort in (False, True):
        with dygraph.guard():
            x = _var(X)
            loss = fluid.layers.reduce_sum(x * x + x * 2.0 + fluid.layers.exp(x))
            strategy = dygraph.BackwardStrategy()
            strategy.sort_sum_gradient = sort
            loss.backward(strategy)
            grads.append(x.gradient())
    np.testing.assert_array_equal(grads[0], grads[1])
    np.testing.assert_allclose(grads[0], 2 * X + 2 + np.exp(X), rtol=1e-5)


def test_the_recorded_graph_is_freed_after_backward():
    with dygraph.guard():
        x = _var(X)
        h = fluid.layers.relu(x)
        loss = fluid.layers.mean(h)
        assert loss._node is not None and h._node is not None
        loss.backward()
        assert loss._node is None and h._node is None
        with pytest.raises(ValueError, match="freed by an earlier backward"):
            loss.backward()


def test_tracer_records_parameters_and_modes():
    with dygraph.guard():
        tracer = fluid.framework._dygraph_tracer()
        assert isinstance(tracer, dygraph.Tracer)
        out = fluid.layers.fc(dygraph.to_variable(X), size=2)
        names = [p.name for p in tracer.all_parameters()]
        assert names == ["fc_0.w_0", "fc_0.b_0"]
        tracer.eval_mode()
        d = fluid.layers.dropout(out, dropout_prob=0.5)
        np.testing.assert_allclose(d.numpy(), out.numpy() * 0.5, rtol=1e-6)  # is_test
        assert d.stop_gradient  # eval mode records nothing
        tracer.train_mode()
        assert not fluid.layers.dropout(out, dropout_prob=0.5).stop_gradient


def test_bad_input_names_what_is_wrong():
    static = fluid.Program()
    with fluid.program_guard(static):
        data = fluid.layers.data("data", shape=[3])
    with dygraph.guard():
        with pytest.raises(TypeError, match="numpy dtype object is not a tensor dtype"):
            dygraph.to_variable(np.array(["a", 1], dtype=object))
        with pytest.raises(TypeError, match="must be a numpy.ndarray"):
            dygraph.to_variable([1.0, 2.0])
        x = _var(X)
        y = x * 2.0
        y.backward()  # as Fluid's: the gradient of the sum of y's elements
        np.testing.assert_array_equal(x.gradient(), np.full(X.shape, 2.0, "float32"))
        w = dygraph.to_variable(np.ones([4, 2], "float32"))
        with pytest.raises(ValueError, match="mul|matmul"):
            fluid.layers.matmul(x, w)
        x64 = dygraph.to_variable(X.astype("float64"))
        with pytest.raises(TypeError, match=r"elementwise_add.*input X='generated_var_\d+' is "
                                            r"float32 but Y='generated_var_\d+' is float64"):
            fluid.layers.elementwise_add(x, x64)
        with pytest.raises(TypeError, match="must hold imperative variables .* got Variable"):
            fluid.layers.relu(data)
    with pytest.raises(RuntimeError, match="inside `with fluid.dygraph.guard"):
        dygraph.to_variable(X)


def test_tracer_trace_op_and_trace_var_directly():
    with dygraph.guard():
        tracer = fluid.framework._dygraph_tracer()
        a = _var(X)
        out = fluid.framework.default_main_program().current_block().create_var(
            name="sum_out", dtype="float32")
        tracer.trace_op("elementwise_add", {"X": [a], "Y": [a]}, {"Out": [out]},
                        attrs={"axis": -1})
        np.testing.assert_allclose(out.numpy(), 2 * X)
        fluid.layers.reduce_sum(out).backward()
        np.testing.assert_allclose(a.gradient(), np.full_like(X, 2.0))
        # stop_gradient=True runs the op without recording it
        again = fluid.framework.default_main_program().current_block().create_var(
            name="again", dtype="float32")
        tracer.trace_op("relu", {"X": [a]}, {"Out": [again]}, stop_gradient=True)
        assert again.stop_gradient and again._node is None
        # trace_var: a persistable is found by name by ops given names
        tracer.trace_var("kept", a)
        named = fluid.framework.default_main_program().current_block().create_var(
            name="named", dtype="float32")
        tracer.trace_op("scale", {"X": ["kept"]}, {"Out": [named]}, attrs={"scale": 3.0})
        np.testing.assert_allclose(named.numpy(), 3 * X)
        with pytest.raises(ValueError, match="input X='nowhere' names no variable"):
            tracer.trace_op("scale", {"X": ["nowhere"]}, {"Out": [named]})


def test_layers_given_one_param_attr_name_share_the_parameter_as_in_a_program():
    with dygraph.guard():
        ids = dygraph.to_variable(np.array([[1], [3], [1]], "int64"))
        e1 = fluid.layers.embedding(ids, size=[5, 2], is_sparse=True, param_attr="emb")
        e2 = fluid.layers.embedding(ids, size=[5, 2], is_sparse=True, param_attr="emb")
        params = fluid.framework._dygraph_tracer().all_parameters()
        assert [p.name for p in params] == ["emb"]
        np.testing.assert_array_equal(e1.numpy(), e2.numpy())
        loss = fluid.layers.reduce_sum(e1 * 2.0) + fluid.layers.reduce_sum(e2)
        loss.backward()  # row-sparse gradients of both uses, summed
        expected = np.zeros([5, 2], "float32")
        expected[1], expected[3] = 6.0, 3.0
        np.testing.assert_allclose(params[0].gradient(), expected)
        with pytest.raises(ValueError, match=r"parameter 'emb' was created before with shape "
                                             r"\[5, 2\]"):
            fluid.layers.embedding(ids, size=[6, 2], param_attr="emb")


def test_control_flow_layers_with_sub_blocks_say_to_use_python():
    with dygraph.guard():
        i = fluid.layers.fill_constant([1], "int64", 0)
        n = fluid.layers.fill_constant([1], "int64", 3)
        cond = fluid.layers.less_than(i, n)
        loop = fluid.layers.While(cond)
        with pytest.raises(NotImplementedError, match="sub-blocks .* belong to programs; in the "
                                                      "imperative mode write the loop"):
            with loop.block():
                fluid.layers.increment(i, in_place=True)
        branch = fluid.layers.IfElse(cond)
        with pytest.raises(NotImplementedError, match="sub-blocks"):
            with branch.true_block():
                pass


def test_an_op_overwriting_its_input_starts_the_earlier_values_gradient_afresh():
    with dygraph.guard():
        tracer = fluid.framework._dygraph_tracer()
        x = _var(X)
        y = x * 2.0
        tracer.trace_op("scale", {"X": [y]}, {"Out": [y]}, attrs={"scale": 3.0})  # y = 3 * y
        np.testing.assert_allclose(y.numpy(), 6 * X, rtol=1e-6)
        fluid.layers.reduce_sum(y * x).backward()  # sum(6 x^2)
        np.testing.assert_allclose(x.gradient(), 12 * X, rtol=1e-5)
        np.testing.assert_allclose(y.gradient(), X, rtol=1e-6)  # of y's latest value


def test_a_stop_gradient_input_among_several_in_a_slot_gets_zeros_that_flow_back():
    # as Fluid 1.6's tracer: alone in its slot it cuts the graph; one of concat's X it
    # gets a zero gradient, and the ops behind it run on it (the fc weight's is zeros)
    with dygraph.guard():
        fc = dygraph.FC("fc", size=2)
        a = _var(X)
        h = fc(a)
        h.stop_gradient = True
        c = dygraph.to_variable(np.ones([2, 4], "float32"))
        b = _var(np.ones([2, 3], "float32"))
        fluid.layers.concat([h, b, c], axis=1).backward()
        np.testing.assert_array_equal(fc._w.gradient(), np.zeros([3, 2], "float32"))
        np.testing.assert_array_equal(h.gradient(), np.zeros([2, 2], "float32"))
        np.testing.assert_array_equal(c.gradient(), np.zeros([2, 4], "float32"))
        np.testing.assert_array_equal(a.gradient(), np.zeros_like(X))
        np.testing.assert_array_equal(b.gradient(), np.ones([2, 3], "float32"))
        # alone in mul's Y, it gets nothing and nothing behind it runs
        fc2 = dygraph.FC("fc2", size=3)
        h2 = fc2(_var(X))
        h2.stop_gradient = True
        fluid.layers.mean(fluid.layers.mul(_var(np.ones([2, 2], "float32")), h2)).backward()
        assert h2.gradient() is None and fc2._w.gradient() is None


def test_an_output_nothing_used_gets_a_zero_gradient():
    with dygraph.guard():
        x = _var(X)
        part1, part2 = fluid.layers.split(x * 1.0, num_or_sections=[1, 2], dim=1)
        fluid.layers.reduce_sum(part1).backward()
        np.testing.assert_array_equal(part2.gradient(), np.zeros([2, 2], "float32"))
        np.testing.assert_array_equal(x.gradient(), [[1, 0, 0], [1, 0, 0]])


def test_backward_of_a_stop_gradient_loss_does_nothing():
    with dygraph.guard():
        x = _var(X)
        loss = fluid.layers.reduce_sum(x * 2.0)
        loss.stop_gradient = True
        loss.backward()
        assert x.gradient() is None
        # a loss computed from inputs that need no gradient, or by an op without one
        fluid.layers.mean(fluid.layers.gaussian_random(shape=[2, 3])).backward()
        fluid.layers.reduce_sum(_var(X, needs_grad=False) * 2.0).backward()


def test_fc_takes_numpy_and_embedding_has_its_weight_before_a_call():
    with dygraph.guard():
        fc = dygraph.FC("fc", size=2)
        out = fc(X)
        np.testing.assert_allclose(out.numpy(), X @ fc._w.numpy() + fc._b.numpy(), rtol=1e-6)
        out2 = fc([X])  # a list of inputs too
        np.testing.assert_array_equal(out2.numpy(), out.numpy())
        emb = dygraph.Embedding("emb", size=[5, 2])
        assert list(emb._w.shape) == [5, 2] and emb._w.gradient() is None
        assert [p.name for p in emb.parameters()] == [emb._w.name]
        ids = dygraph.to_variable(np.array([[1], [3]], "int64"))
        np.testing.assert_array_equal(emb(ids).numpy(), emb._w.numpy()[[1, 3]])
        assert [p.name for p in emb.parameters()] == [emb._w.name]


def test_an_op_without_a_gradient_cuts_the_graph_but_its_output_needs_one():
    # Fluid 1.6: the one_hot op has no gradient; its output still needs one (an input did),
    # so mean records and backward runs to it, and nothing flows behind one_hot (the op
    # itself: fluid.layers.one_hot then sets stop_gradient, as Fluid's layer does)
    with dygraph.guard():
        tracer = fluid.framework._dygraph_tracer()
        fc = dygraph.FC("fc", size=1)
        label = fluid.layers.cast(fc(_var(X)) * 0.0, "int64")  # zeros, needing a gradient
        hot = fluid.framework.default_main_program().current_block().create_var(
            name="hot", dtype="float32")
        tracer.trace_op("one_hot", {"X": [label]}, {"Out": [hot]}, attrs={"depth": 4})
        assert not hot.stop_gradient and hot._node is None
        fluid.layers.mean(hot).backward()
        np.testing.assert_allclose(hot.gradient(), np.full([2, 4], 1 / 8, "float32"))
        assert fc._w.gradient() is None
