"""Details of Fluid 1.6's io and readers: the warnings of save_inference_model, a reader
batch whose rows hold the declared number of values in another shape, Fluid's helpers
executor._as_lodtensor and GeneratorLoader._check_input_array, and create_var refusing a
second declaration that disagrees with the first."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import parafluid as fluid
from parafluid.executor import _as_lodtensor
from parafluid.reader import GeneratorLoader


def _saved_warnings(build, tmp_path) -> list[str]:
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        feeds, target = build()
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.Scope()
    exe.run(startup, scope=scope)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fluid.io.save_inference_model(str(tmp_path), feeds, [target], exe, main, scope=scope)
    return [str(w.message) for w in caught]


def test_save_inference_model_warns_of_auc_states_and_of_no_variables(tmp_path):
    def with_auc():
        x = fluid.layers.data(name="x", shape=[2], dtype="float32")
        y = fluid.layers.data(name="y", shape=[1], dtype="int64")
        predict = fluid.layers.fc(input=x, size=2, act="softmax")
        fluid.layers.auc(input=predict, label=y)
        return ["x", "y"], fluid.layers.mean(predict)

    def without_vars():
        x = fluid.layers.data(name="x", shape=[-1, 1], dtype="float32",
                              append_batch_size=False)
        return ["x"], x + 1

    assert "please ensure that you have set the auc states to zeros before saving " \
           "inference model" in _saved_warnings(with_auc, tmp_path / "auc")
    got = _saved_warnings(without_vars, tmp_path / "none")
    assert got == ["no variable in your model, please ensure there are any variables in your "
                   "model to save"]


def _run_reader(batch):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        reader = fluid.layers.py_reader(capacity=2, shapes=[(-1, 2), (-1, 1)],
                                        dtypes=["float32", "int64"])
        x, label = fluid.layers.read_file(reader)
    reader.decorate_tensor_provider(lambda: iter([batch]))
    reader.start()
    try:
        return fluid.Executor(fluid.CPUPlace()).run(main, fetch_list=[x, label],
                                                    scope=fluid.Scope())
    finally:
        reader.reset()


def test_a_reader_hands_on_a_batch_whose_rows_hold_the_declared_values():
    xs, labels = np.ones((3, 2), "float32"), np.arange(3, dtype="int64").reshape(3, 1, 1)
    x, label = _run_reader([xs, labels])
    assert label.shape == (3, 1, 1) and label.ravel().tolist() == [0, 1, 2]
    with pytest.raises(Exception, match="should have dimensions = 2"):
        _run_reader([xs, np.zeros((3, 2), "int64")])  # two values a row, not one


def test_as_lodtensor_and_check_input_array_as_fluids():
    t = _as_lodtensor(np.arange(6, dtype="float32").reshape(2, 3), fluid.CPUPlace())
    assert isinstance(t, fluid.LoDTensor) and np.array(t).shape == (2, 3)
    with pytest.raises(RuntimeError, match="hold LoD information"):
        _as_lodtensor([np.zeros(2)], fluid.CPUPlace())
    GeneratorLoader._check_input_array([np.zeros(2), np.ones(2)])
    with pytest.raises(TypeError, match="nested lists with different lengths"):
        GeneratorLoader._check_input_array([np.zeros(2), np.ones(3)])


@pytest.mark.parametrize("again, what", [
    ({"shape": [24, 100]}, "shape"),
    ({"dtype": "float32"}, "data type"),
    ({"lod_level": 1}, "lod_level"),
    ({"type": fluid.core.VarDesc.VarType.SELECTED_ROWS}, "type"),
])
def test_create_var_refuses_a_second_declaration_that_disagrees(again, what):
    block = fluid.Program().global_block()
    w = block.create_var(name="fc.w", shape=[784, 100], dtype="float64", lod_level=0)
    assert block.create_var(name="fc.w") is w
    assert block.create_var(name="fc.w", shape=[784, 100], dtype="float64") is w
    with pytest.raises(ValueError, match=f"Variable fc.w has been created before. the "
                                         f"previous {what} is"):
        block.create_var(name="fc.w", **again)
