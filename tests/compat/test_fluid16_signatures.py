"""Parameters of Fluid 1.6's signatures that parafluid now takes in Fluid's order and with
Fluid's defaults (the walk in test_fluid16_api.py checks every name's signature; these check
what the parameters do)."""

from __future__ import annotations

import numpy as np
import pytest

import parafluid as fluid


def _exe() -> fluid.Executor:
    return fluid.Executor(fluid.CPUPlace())


@pytest.mark.parametrize("resize, fmt, shape, out", [
    ("resize_bilinear", "NHWC", [3, 4, 2], [6, 8]),
    ("resize_nearest", "NHWC", [3, 4, 2], [6, 8]),
    ("resize_trilinear", "NDHWC", [2, 3, 4, 2], [4, 6, 8]),
])
def test_resize_takes_channels_last_data_format(resize, fmt, shape, out):
    rng = np.random.RandomState(0)
    x_np = rng.rand(2, *shape).astype("float32")
    rank = len(shape) + 1
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        x = fluid.data(name="x", shape=[None, *shape], dtype="float32")
        last = getattr(fluid.layers, resize)(x, out_shape=out, data_format=fmt)
        first_in = fluid.data(name="xc", shape=[None, shape[-1], *shape[:-1]], dtype="float32")
        first = getattr(fluid.layers, resize)(first_in, out_shape=out)
    assert list(last.shape) == [-1, *out, shape[-1]]
    to_first = [0, rank - 1] + list(range(1, rank - 1))
    got_last, got_first = _exe().run(
        main, feed={"x": x_np, "xc": x_np.transpose(to_first)}, fetch_list=[last, first])
    np.testing.assert_allclose(got_last, got_first.transpose([0] + list(range(2, rank)) + [1]),
                               rtol=1e-6)


def test_image_resize_rejects_an_unknown_data_format():
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        x = fluid.data(name="x", shape=[None, 2, 4, 4], dtype="float32")
        with pytest.raises(ValueError, match="data_format must be"):
            fluid.layers.image_resize(x, out_shape=[8, 8], data_format="HWC")


def test_a_fetch_handler_that_is_not_one_is_refused():
    with pytest.raises(TypeError, match="handler must be a FetchHandler, got object"):
        _exe().train_from_dataset(fluid.Program(), None, fetch_handler=object())
    with pytest.raises(TypeError, match="handler must be a FetchHandler, got object"):
        _exe().infer_from_dataset(fluid.Program(), None, fetch_handler=object())


def test_compare_layers_take_cond_third_and_logical_not_out_second():
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        a = fluid.data(name="a", shape=[3], dtype="float32")
        b = fluid.data(name="b", shape=[3], dtype="float32")
        cond = fluid.layers.create_tensor(dtype="bool")
        same = fluid.layers.equal(a, b, cond)  # Fluid's (x, y, cond)
        lt = fluid.layers.less_than(a, b, None, fluid.layers.create_tensor(dtype="bool"))
        out = fluid.layers.create_tensor(dtype="bool")
        flipped = fluid.layers.logical_not(same, out)  # Fluid's (x, out, name)
    assert same is cond and flipped is out
    got = _exe().run(main, feed={"a": np.array([1, 2, 3], "float32"),
                                 "b": np.array([1, 5, 0], "float32")},
                     fetch_list=[same, lt, flipped])
    np.testing.assert_array_equal(got[0], [True, False, False])
    np.testing.assert_array_equal(got[1], [False, True, False])
    np.testing.assert_array_equal(got[2], [False, True, True])


def test_variable_takes_fluids_parameter_order_and_none_defaults():
    block = fluid.Program().global_block()
    v = fluid.Variable(block, fluid.core.VarDesc.VarType.LOD_TENSOR, "v", [2, 3], "float32")
    assert (v.name, list(v.shape), v.dtype) == ("v", [2, 3], "float32")
    assert v.lod_level == 0 and v.persistable is False
    clipped = fluid.Variable(block, name="w", shape=[1], dtype="float32",
                             error_clip=fluid.clip.ErrorClipByValue(max=1.0), capacity=4)
    assert isinstance(clipped.error_clip, fluid.clip.ErrorClipByValue)


def test_batch_norm_statistics_take_part_in_model_averaging_by_default():
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        x = fluid.data(name="x", shape=[None, 3], dtype="float32")
        fluid.layers.batch_norm(x, moving_mean_name="mm", moving_variance_name="mv")
        fluid.layers.batch_norm(x, moving_mean_name="m2", moving_variance_name="v2",
                                do_model_average_for_mean_and_var=False)
        block = fluid.default_main_program().global_block()
        assert block.var("mm").do_model_average is True
        assert block.var("mv").do_model_average is True
        assert block.var("m2").do_model_average is False


def test_memory_optimize_leaves_parameter_gradients_alone_by_default():
    from parafluid.passes.memory_optimize import memory_optimize, protected_names

    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.data(name="x", shape=[None, 4], dtype="float32")
        h = fluid.layers.fc(x, 4, act="relu", bias_attr=False)
        loss = fluid.layers.mean(fluid.layers.fc(h, 4, bias_attr=False))
        fluid.optimizer.SGD(0.1).minimize(loss)
    grads = {p.name + "@GRAD" for p in main.all_parameters()}
    assert not grads & protected_names(main, None, False, "test")
    memory_optimize(main)  # Fluid's default skip_grads=True protects them
    written = {n for op in main.global_block().ops for n in op.output_arg_names}
    assert grads <= written


def test_generator_loader_takes_use_double_buffer_third():
    from parafluid.reader import GeneratorLoader

    with fluid.program_guard(fluid.Program(), fluid.Program()):
        x = fluid.data(name="x", shape=[None, 2], dtype="float32")
        loader = GeneratorLoader([x], 4, False, True, True)
    assert loader is not None
    with pytest.raises(TypeError, match="feed_list"):
        GeneratorLoader()


def test_dygraph_nce_takes_the_sample_weight_at_construction():
    from parafluid.dygraph import NCE

    rng = np.random.RandomState(0)
    feats = rng.rand(4, 3).astype("float32")
    labels = np.array([[0], [1], [2], [3]], "int64")
    with fluid.dygraph.guard():
        weight = fluid.dygraph.to_variable(np.array([[1.0], [0.0], [2.0], [0.5]], "float32"))
        attr = fluid.ParamAttr(initializer=fluid.initializer.Constant(0.1))
        nce = NCE("nce", num_total_classes=5, sample_weight=weight, param_attr=attr,
                  num_neg_samples=2, seed=3)
        plain = NCE("nce", num_total_classes=5, param_attr=attr, num_neg_samples=2, seed=3)
        x, y = fluid.dygraph.to_variable(feats), fluid.dygraph.to_variable(labels)
        weighted, unweighted = nce(x, y).numpy(), plain(x, y).numpy()
    np.testing.assert_allclose(weighted, unweighted * [[1.0], [0.0], [2.0], [0.5]], rtol=1e-5)


def test_tracer_trace_op_takes_fluids_argument_order():
    with fluid.dygraph.guard():
        x = fluid.dygraph.to_variable(np.array([1.0, 2.0], "float32"))
        out = fluid.default_main_program().current_block().create_var(name="o",
                                                                      dtype="float32")
        tracer = fluid.framework._dygraph_tracer()
        tracer.trace_op("scale", {"X": [x]}, {"Out": [out]}, {"scale": 3.0}, False)
        np.testing.assert_allclose(out.numpy(), [3.0, 6.0])
