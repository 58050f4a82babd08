"""Layers reject what Fluid 1.6's layers reject: a non-Variable where Fluid checks
``isinstance(x, Variable)`` (or a shape that is not a list, tuple or Variable) raises
TypeError, before any op is appended.

The table is every such check in Fluid 1.6's python/paddle/fluid/layers/*.py (``if not
isinstance(<parameter>, Variable): raise TypeError(...)``, and the elementwise / matmul input
checks), with arguments that are otherwise valid.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import parafluid as fluid

NOT_A_VARIABLE = np.ones([2, 4], "float32")


def _x(shape=(4,), dtype="float32", lod_level=0, name="x"):
    return fluid.layers.data(name=name, shape=list(shape), dtype=dtype, lod_level=lod_level)


# layer, the parameter Fluid checks, a function giving the other (valid) arguments
CHECKS: list[tuple[str, str, Any]] = [
    ("is_empty", "cond", lambda: {"x": _x()}),
    ("yolov3_loss", "x", lambda: dict(gt_box=_x([3, 4], name="b"),
                                      gt_label=_x([3], "int32", name="l"),
                                      anchors=[10, 13, 16, 30], anchor_mask=[0, 1],
                                      class_num=2, ignore_thresh=0.7, downsample_ratio=32)),
    ("yolov3_loss", "gt_box", lambda: dict(x=_x([14, 4, 4]), gt_label=_x([3], "int32", name="l"),
                                           anchors=[10, 13, 16, 30], anchor_mask=[0, 1],
                                           class_num=2, ignore_thresh=0.7,
                                           downsample_ratio=32)),
    ("yolov3_loss", "gt_label", lambda: dict(x=_x([14, 4, 4]), gt_box=_x([3, 4], name="b"),
                                             anchors=[10, 13, 16, 30], anchor_mask=[0, 1],
                                             class_num=2, ignore_thresh=0.7,
                                             downsample_ratio=32)),
    ("yolo_box", "x", lambda: dict(img_size=_x([2], "int32", name="s"), anchors=[10, 13, 16, 30],
                                   class_num=2, conf_thresh=0.01, downsample_ratio=32)),
    ("yolo_box", "img_size", lambda: dict(x=_x([14, 4, 4]), anchors=[10, 13, 16, 30],
                                          class_num=2, conf_thresh=0.01, downsample_ratio=32)),
    ("accuracy", "input", lambda: {"label": _x([1], "int64", name="l")}),
    ("fc", "input", lambda: {"size": 3}),
    ("embedding", "input", lambda: {"size": [10, 3]}),
    ("dropout", "x", lambda: {"dropout_prob": 0.5}),
    ("cross_entropy", "input", lambda: {"label": _x([1], "int64", name="l")}),
    ("softmax", "input", lambda: {}),
    ("conv2d", "input", lambda: {"num_filters": 2, "filter_size": 3}),
    ("batch_norm", "input", lambda: {}),
    ("conv2d_transpose", "input", lambda: {"num_filters": 2, "filter_size": 3}),
    ("conv3d_transpose", "input", lambda: {"num_filters": 2, "filter_size": 3}),
    ("reduce_sum", "input", lambda: {}),
    ("reduce_mean", "input", lambda: {}),
    ("nce", "input", lambda: {"label": _x([1], "int64", name="l"), "num_total_classes": 5}),
    ("nce", "label", lambda: {"input": _x(), "num_total_classes": 5}),
    ("transpose", "x", lambda: {"perm": [1, 0]}),
    ("reshape", "x", lambda: {"shape": [-1, 2]}),
    ("squeeze", "input", lambda: {"axes": [0]}),
    ("elu", "x", lambda: {}),
    ("expand", "x", lambda: {"expand_times": [1, 2]}),
    ("mean", "x", lambda: {}),
    ("mul", "x", lambda: {"y": _x([4, 3], name="y", lod_level=0)}),
    ("mul", "y", lambda: {"x": _x()}),
    ("matmul", "x", lambda: {"y": _x([4, 3], name="y")}),
    ("matmul", "y", lambda: {"x": _x()}),
    ("sign", "x", lambda: {}),
    ("deformable_conv", "input", lambda: dict(offset=_x([18, 4, 4], name="o"),
                                              mask=_x([9, 4, 4], name="m"), num_filters=2,
                                              filter_size=3)),
    ("deformable_conv", "offset", lambda: dict(input=_x([1, 4, 4]), mask=_x([9, 4, 4], name="m"),
                                               num_filters=2, filter_size=3)),
    ("cast", "x", lambda: {"dtype": "float64"}),
] + [(f"elementwise_{k}", slot, (lambda slot=slot: {("y" if slot == "x" else "x"): _x()}))
     for k in ("add", "sub", "mul", "div", "max", "min", "pow", "mod", "floordiv")
     for slot in ("x", "y")]

# parameters Fluid requires to be a list, tuple or Variable (a shape)
SHAPE_CHECKS: list[Any] = [
    pytest.param("reshape", "shape", lambda: {"x": _x()}, id="reshape-shape"),
    pytest.param("uniform_random", "shape", lambda: {}, id="uniform_random-shape"),
    pytest.param("fill_constant", "shape", lambda: {"dtype": "float32", "value": 1.0},
                 id="fill_constant-shape"),
]

# sign converts a numpy array itself, as Fluid's does; it rejects other values
NOT_A_VARIABLE_FOR = {"sign": "x"}


@pytest.mark.parametrize("layer, param, others", CHECKS,
                         ids=[f"{layer}-{param}" for layer, param, _ in CHECKS])
def test_a_non_variable_argument_is_a_type_error(layer, param, others):
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        kwargs = others()
        before = len(main.global_block().ops)
        bad = "not a variable" if NOT_A_VARIABLE_FOR.get(layer) == param else NOT_A_VARIABLE
        with pytest.raises(TypeError):
            getattr(fluid.layers, layer)(**{param: bad}, **kwargs)
        assert len(main.global_block().ops) == before


@pytest.mark.parametrize("layer, param, others", SHAPE_CHECKS)
def test_a_shape_that_is_not_a_list_tuple_or_variable_is_a_type_error(layer, param, others):
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        kwargs = others()
        with pytest.raises(TypeError):
            getattr(fluid.layers, layer)(**{param: 5}, **kwargs)


def test_sign_takes_a_numpy_array_as_fluid_does():
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        out = fluid.layers.sign(np.array([-2.0, 0.0, 3.0], "float32"))
        got, = fluid.Executor(fluid.CPUPlace()).run(fluid.default_main_program(),
                                                    fetch_list=[out])
    np.testing.assert_array_equal(got, [-1.0, 0.0, 1.0])
