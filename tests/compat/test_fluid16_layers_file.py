"""What the programs of Fluid 1.6's layer tests (``test_layers.py``) rely on: dygraph layers'
``weight`` / ``bias`` (None without a bias), elementwise layers taking numpy arrays in the
imperative mode, ``set_value`` and ``detach`` as Fluid's, ``eye``'s argument checks, the
static-only ``nn.SequenceConv`` / ``nn.RowConv``, ``framework._dygraph_place_guard``, and
the LoD level ``lod_reset`` gives."""

from __future__ import annotations

import numpy as np
import pytest

import parafluid as fluid
from parafluid.dygraph import base, nn


def _run(fetch, feed):
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(fluid.default_startup_program())
    return exe.run(fluid.default_main_program(), feed=feed, fetch_list=fetch,
                   return_numpy=False)


def _fresh():
    """A fresh program pair, scope and names, seeded as Fluid's layer tests seed them."""
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 111
    return fluid.program_guard(main, startup), fluid.scope_guard(fluid.Scope()), \
        fluid.unique_name.guard()


def test_conv2d_without_bias_has_bias_none_and_weights_can_be_shared():
    images = np.ones([2, 3, 5, 5], "float32")
    with fluid.dygraph.guard():
        conv = nn.Conv2D("conv2d", num_filters=3, filter_size=[2, 2], bias_attr=False)
        conv(base.to_variable(images))
        assert conv._bias_param is None and conv.bias is None
        assert list(conv.weight.shape) == [3, 3, 2, 2]
        a = nn.Conv2D("a", num_filters=3, filter_size=[2, 2])
        b = nn.Conv2D("b", num_filters=3, filter_size=[2, 2])
        a(base.to_variable(images))
        b(base.to_variable(images))
        b.weight.set_value(a.weight.numpy())
        b.bias.set_value(a.bias)
        np.testing.assert_array_equal(a(base.to_variable(images)).numpy(),
                                      b(base.to_variable(images)).numpy())
        b.weight, b.bias = a.weight, a.bias
        assert b.weight is a.weight and b.bias is a.bias


def test_a_layer_not_called_yet_has_no_bias_attribute():
    with fluid.dygraph.guard():
        conv = nn.Conv2D("conv2d", num_filters=3, filter_size=[2, 2], bias_attr=False)
        with pytest.raises(AttributeError):
            conv.bias  # noqa: B018  (made on the first call, as Fluid's _build_once)


def test_layer_norm_without_scale_and_shift_has_neither_attribute():
    with fluid.dygraph.guard():
        ln = nn.LayerNorm("ln", scale=False, shift=False)
        ln(base.to_variable(np.ones([3, 4], "float32")))
        assert not hasattr(ln, "_scale_w") and not hasattr(ln, "_bias_w")


def test_elementwise_layers_take_numpy_arrays_in_the_imperative_mode():
    n, n2 = np.ones([3, 3], "float32"), np.full([3, 3], 2.0, "float32")
    with fluid.dygraph.guard():
        ret = fluid.layers.elementwise_add(n, n2)
        ret = fluid.layers.elementwise_pow(ret, n2)
        ret = fluid.layers.elementwise_sub(ret, n)
        np.testing.assert_allclose(ret.numpy(), np.full([3, 3], 8.0))
        np.testing.assert_array_equal(fluid.layers.elementwise_min(n, n2).numpy(), n)
        np.testing.assert_array_equal(fluid.layers.elementwise_max(n, n2).numpy(), n2)
        mixed = fluid.layers.elementwise_mul(base.to_variable(n2), n2)
        np.testing.assert_array_equal(mixed.numpy(), n2 * n2)
    # static mode keeps the check: an array is not a Variable there
    with pytest.raises(TypeError, match="elementwise_add: x must be a Variable, got ndarray"):
        fluid.layers.elementwise_add(n, n2)


def test_set_value_of_another_shape_or_dtype_raises_fluids_assertion_error():
    with fluid.dygraph.guard():
        fc = nn.FC("fc", 4)
        fc(base.to_variable(np.ones([3, 8], "float32")))
        with pytest.raises(AssertionError, match=r"has shape \[8, 4\], the value has shape"):
            fc.weight.set_value(np.ones([4, 4], "float32"))
        with pytest.raises(ValueError):
            fc.weight.set_value(np.ones([4, 4], "float32"))
        with pytest.raises(AssertionError, match="has dtype float32"):
            fc.weight.set_value(np.ones([8, 4], "float64"))


def test_detach_is_a_copy_that_an_optimizer_step_leaves_alone():
    inp = np.ones([3, 8], "float32")
    with fluid.dygraph.guard():
        fc = nn.FC("fc", 4)
        loss = fluid.layers.reduce_mean(fc(base.to_variable(inp)))
        before = fc.weight.numpy().copy()
        detached = fc.weight.detach()
        assert detached.stop_gradient
        loss.backward()
        fluid.optimizer.SGD(learning_rate=0.1).minimize(loss)
        assert not np.array_equal(fc.weight.numpy(), before)
        np.testing.assert_array_equal(detached.numpy(), before)


@pytest.mark.parametrize("kwargs", [
    {"num_rows": 3.1}, {"num_rows": -1}, {"num_rows": 3, "num_columns": 2.2},
    {"num_rows": 3, "batch_shape": 2}, {"num_rows": 3, "batch_shape": [-1]},
], ids=str)
def test_eye_refuses_what_fluids_refuses_with_type_error(kwargs):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), pytest.raises(TypeError, match="eye: "):
        fluid.layers.eye(**kwargs)
    assert not main.global_block().ops


def test_eye_values_and_its_square_default():
    with fluid.dygraph.guard():
        np.testing.assert_array_equal(fluid.layers.eye(3, 2, batch_shape=[4, 3]).numpy(),
                                      np.broadcast_to(np.eye(3, 2), [4, 3, 3, 2]))
        np.testing.assert_array_equal(fluid.layers.eye(4).numpy(), np.eye(4))
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        fluid.layers.eye(5)
    assert main.global_block().ops[0].attrs["num_columns"] == 5  # as Fluid writes it


def _seq_feed(rows):
    return fluid.create_lod_tensor(rows, [[1] * len(rows)], fluid.CPUPlace())


@pytest.mark.parametrize("kind", ["sequence_conv", "row_conv"])
def test_sequence_conv_and_row_conv_layers_match_their_functions(kind):
    rows = np.arange(15, dtype="float32").reshape([3, 5])
    results = []
    for use_layer in (False, True):
        guards = _fresh()
        with guards[0], guards[1], guards[2]:
            x = fluid.layers.data(name="x", shape=[3, 5], dtype="float32", lod_level=1,
                                  append_batch_size=False)
            if kind == "sequence_conv":
                out = (nn.SequenceConv("seq_conv", num_filters=2, act="sigmoid")(x)
                       if use_layer else fluid.layers.sequence_conv(x, 2, act="sigmoid"))
            else:
                out = (nn.RowConv("row_conv", future_context_size=2)(x) if use_layer
                       else fluid.layers.row_conv(input=x, future_context_size=2))
            results.append(np.array(_run([out], {"x": _seq_feed(rows)})[0]))
    np.testing.assert_array_equal(results[0], results[1])


def test_sequence_layers_are_static_only_and_name_their_weights():
    guards = _fresh()
    with guards[0], guards[1], guards[2]:
        x = fluid.layers.data(name="x", shape=[3, 5], dtype="float32", lod_level=1,
                              append_batch_size=False)
        conv = nn.SequenceConv("seq_conv", num_filters=2, bias_attr=False)
        conv(x)
        assert list(conv.weight.shape) == [15, 2] and conv._filter_param is conv.weight
        assert conv.bias is None
        row = nn.RowConv("row_conv", future_context_size=1)
        row(x)
        assert list(row.weight.shape) == [2, 5]
    with fluid.dygraph.guard():
        with pytest.raises(AssertionError, match="SequenceConv: the imperative mode"):
            nn.SequenceConv("seq_conv", num_filters=2)
        with pytest.raises(ValueError, match="RowConv: the imperative mode"):
            nn.RowConv("row_conv", future_context_size=2)


def test_dygraph_place_guard_puts_new_values_on_its_place():
    from parafluid import framework

    with framework._dygraph_place_guard(place=fluid.CPUPlace()):  # static mode: recorded
        assert isinstance(framework._current_expected_place(), fluid.CPUPlace)
    assert framework._current_expected_place() is None
    with fluid.dygraph.guard(fluid.CPUPlace()):
        tracer = framework._dygraph_tracer()
        with framework._dygraph_place_guard(place=fluid.CPUPlace()):
            label = base.to_variable(np.array([[1], [3]], "int32"))
            one_hot = fluid.layers.one_hot(input=label, depth=4)
            assert str(tracer.device) == "cpu"
        np.testing.assert_array_equal(one_hot.numpy(), np.eye(4)[[1, 3]])


def test_lod_reset_has_the_lod_levels_of_y():
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        x = fluid.layers.data(name="x", shape=[10], dtype="float32")
        y = fluid.layers.data(name="y", shape=[10, 20], dtype="float32", lod_level=2)
        assert fluid.layers.lod_reset(x=x, y=y).lod_level == 2
        offsets = fluid.layers.data(name="offsets", shape=[1], dtype="int64")
        assert fluid.layers.lod_reset(x=x, y=offsets).lod_level == 1
        assert fluid.layers.lod_reset(x=x, target_lod=[1, 2, 3]).lod_level == 1


def test_sequence_softmax_builds_on_any_width_and_runs_on_one_value_per_step():
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        seq = fluid.layers.data(name="seq", shape=[10, 10], dtype="float32", lod_level=1)
        out = fluid.layers.sequence_softmax(fluid.layers.fc(input=seq, size=20))
    assert list(out.shape) == [-1, 20] and out.lod_level == 1


def test_warpctc_padded_form_builds_with_the_shapes_fluids_test_gives():
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        input_length = fluid.layers.data(name="logits_length", shape=[11], dtype="int64")
        label_length = fluid.layers.data(name="labels_length", shape=[12], dtype="int64")
        label = fluid.layers.data(name="label", shape=[12, 1], dtype="int32")
        predict = fluid.layers.data(name="predict", shape=[4, 4, 8], dtype="float32")
        loss = fluid.layers.warpctc(input=predict, label=label, input_length=input_length,
                                    label_length=label_length)
    assert main.global_block().ops[-1].type == "warpctc" and loss.shape[-1] == 1


@pytest.mark.parametrize("bias_attr", [None, False])
def test_fc_of_several_inputs_has_a_weight_each_and_one_bias(bias_attr):
    with fluid.dygraph.guard():
        fc = nn.FC("fc", 4, bias_attr=bias_attr)
        fc([base.to_variable(np.ones([2, 3], "float32")),
            base.to_variable(np.ones([2, 5], "float32"))])
        assert [list(w.shape) for w in fc.weight] == [[3, 4], [5, 4]]
        assert fc._w is fc.weight[0]
        if bias_attr is False:
            assert fc.bias is None and len(fc.parameters()) == 2
        else:
            assert list(fc.bias.shape) == [4] and len(fc.parameters()) == 3
