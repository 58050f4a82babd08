"""Pruning and save/load_inference_model."""

from __future__ import annotations

import hashlib
import json
import os

import numpy as np
import pytest

import parafluid as fluid
from parafluid import io as fio
from parafluid.passes.prune import prune

from .conftest import Model


def _op_types(program: fluid.Program) -> list[str]:
    return [op.type for op in program.global_block().ops]


def test_prune_keeps_only_the_forward_path_and_leaves_the_input_alone(model: Model) -> None:
    before = str(model.main)
    pruned = prune(model.main, [model.pred], ["x"])
    assert str(model.main) == before
    assert _op_types(pruned) == ["mul", "elementwise_add", "mul", "elementwise_add"]
    names = set(pruned.global_block().vars)
    assert "y" not in names and not any("@GRAD" in n for n in names)
    assert not any(n.startswith("learning_rate") for n in names)
    pruned.verify()

    x = model.xs
    full, = model.exe.run(model.main.clone(for_test=True), feed={"x": x, "y": model.ys},
                          fetch_list=[model.pred.name], scope=model.scope)
    only, = model.exe.run(pruned, feed={"x": x}, fetch_list=[model.pred.name], scope=model.scope)
    np.testing.assert_array_equal(full, only)


def test_prune_stops_at_a_fed_intermediate(model: Model) -> None:
    hidden = model.main.global_block().ops[1].output("Out")[0]  # fc_0's output
    pruned = prune(model.main, [model.pred], [hidden])
    assert _op_types(pruned) == ["mul", "elementwise_add"]
    assert "x" not in pruned.global_block().vars


def test_prune_names_a_variable_that_nothing_provides(model: Model) -> None:
    with pytest.raises(ValueError, match=r"'y' is needed by op elementwise_sub .* add it to the "
                                         r"feeds"):
        prune(model.main, [model.loss], ["x"])
    with pytest.raises(ValueError, match="target 'nope' is not a variable"):
        prune(model.main, ["nope"], ["x"])


def test_inference_model_round_trip_gives_identical_predictions(model: Model,
                                                                tmp_path: str) -> None:
    expected, = model.exe.run(prune(model.main, [model.pred], ["x"]), feed={"x": model.xs},
                              fetch_list=[model.pred], scope=model.scope)
    before = str(model.main)
    targets = fluid.io.save_inference_model(str(tmp_path), ["x"], [model.pred], model.exe,
                                            model.main, scope=model.scope)
    # Fluid 1.6 saves each target behind a scale op named save_infer_model/scale_<i>
    assert targets == ["save_infer_model/scale_0"]
    assert str(model.main) == before, "the caller's program must not change"
    assert sorted(os.listdir(tmp_path)) == [fio.MODEL_FILENAME, fio.DEFAULT_FILENAME]
    saved = sorted(fio.read_tensors(os.path.join(tmp_path, fio.DEFAULT_FILENAME))[0])
    assert saved == ["fc_0.b_0", "fc_0.w_0", "fc_1.b_0", "fc_1.w_0"]  # no optimizer state

    scope = fluid.Scope()
    exe = fluid.Executor(fluid.CPUPlace())
    program, feeds, fetches = fluid.io.load_inference_model(str(tmp_path), exe, scope=scope)
    assert feeds == ["x"] and [v.name for v in fetches] == ["save_infer_model/scale_0"]
    pruned_ops = [str(op) for op in prune(model.main, [model.pred], ["x"]).global_block().ops]
    saved_ops = [str(op) for op in program.global_block().ops]
    assert saved_ops[:-1] == pruned_ops
    assert saved_ops[-1] == (f"{{Out=[save_infer_model/scale_0]}} = scale(X=[{model.pred.name}]) "
                             "{bias=0.0, bias_after_scale=True, scale=1.0}")
    got, = exe.run(program, feed={"x": model.xs}, fetch_list=fetches, scope=scope)
    np.testing.assert_array_equal(got, expected)


def test_custom_file_names_and_program_only(model: Model, tmp_path: str) -> None:
    fluid.io.save_inference_model(str(tmp_path), "x", model.pred, model.exe, model.main,
                                  model_filename="model", params_filename="params",
                                  scope=model.scope)
    assert sorted(os.listdir(tmp_path)) == ["model", "params"]
    scope = fluid.Scope()
    program, _, fetches = fluid.io.load_inference_model(
        str(tmp_path), model.exe, model_filename="model", params_filename="params", scope=scope)
    got, = model.exe.run(program, feed={"x": model.xs}, fetch_list=fetches, scope=scope)
    want, = model.exe.run(program, feed={"x": model.xs}, fetch_list=fetches, scope=model.scope)
    np.testing.assert_array_equal(got, want)

    only = tmp_path / "only"
    fluid.io.save_inference_model(str(only), ["x"], [model.pred], model.exe, model.main,
                                  program_only=True, scope=model.scope)
    assert os.listdir(only) == [fio.MODEL_FILENAME]


def test_not_for_deployment_saves_the_whole_program(model: Model, tmp_path: str) -> None:
    fluid.io.save_inference_model(str(tmp_path), ["x"], [model.pred], model.exe, model.main,
                                  export_for_deployment=False, scope=model.scope)
    data = (tmp_path / (fio.MODEL_FILENAME + ".main_program")).read_bytes()
    program, feeds, _ = fio.decode_model(data)
    assert "sgd" in _op_types(program) and feeds == ["x"]


def test_params_from_another_save_are_detected(model: Model, tmp_path: str) -> None:
    fluid.io.save_inference_model(str(tmp_path), ["x"], [model.pred], model.exe, model.main,
                                  scope=model.scope)
    other = tmp_path / "other"
    hidden = model.main.global_block().var("fc_0.tmp_1")
    fluid.io.save_inference_model(str(other), ["x"], [model.pred, hidden], model.exe,
                                  model.main, scope=model.scope)
    os.replace(other / fio.MODEL_FILENAME, tmp_path / fio.MODEL_FILENAME)  # a mixed pair
    with pytest.raises(ValueError, match="saved with a different model"):
        fluid.io.load_inference_model(str(tmp_path), model.exe, scope=fluid.Scope())


def test_params_file_names_the_model_it_belongs_to(model: Model, tmp_path: str) -> None:
    fluid.io.save_inference_model(str(tmp_path), ["x"], [model.pred], model.exe, model.main,
                                  scope=model.scope)
    _, meta = fio.read_tensors(os.path.join(tmp_path, fio.DEFAULT_FILENAME))
    digest = hashlib.sha256((tmp_path / fio.MODEL_FILENAME).read_bytes()).hexdigest()
    assert meta["program_sha256"] == digest


def test_corrupt_model_file_is_a_clear_error(model: Model, tmp_path: str) -> None:
    fluid.io.save_inference_model(str(tmp_path), ["x"], [model.pred], model.exe, model.main,
                                  scope=model.scope)
    path = tmp_path / fio.MODEL_FILENAME
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match="corrupt or truncated model file") as err:
        fluid.io.load_inference_model(str(tmp_path), model.exe, scope=fluid.Scope())
    assert str(path) in str(err.value)
    path.write_bytes(b"\x80\x04not a model")
    with pytest.raises(ValueError, match="not a parafluid model file"):
        fluid.io.load_inference_model(str(tmp_path), model.exe, scope=fluid.Scope())


def test_bad_arguments_are_type_errors(model: Model, tmp_path: str) -> None:
    with pytest.raises(TypeError, match="feeded_var_names"):
        fluid.io.save_inference_model(str(tmp_path), [model.x], [model.pred], model.exe,
                                      model.main, scope=model.scope)
    with pytest.raises(TypeError, match="target_vars"):
        fluid.io.save_inference_model(str(tmp_path), ["x"], ["pred"], model.exe, model.main,
                                      scope=model.scope)


@pytest.mark.parametrize("damage", ["ops not a list", "var not a dict", "attrs not a dict"])
def test_well_formed_json_with_a_wrong_structure_is_a_corrupt_model(model: Model, tmp_path: str,
                                                                    damage: str) -> None:
    fluid.io.save_inference_model(str(tmp_path), ["x"], [model.pred], model.exe, model.main,
                                  scope=model.scope)
    path = tmp_path / fio.MODEL_FILENAME
    data = path.read_bytes()
    magic, _, body = data.partition(b"\n")  # the header line, then the JSON document
    doc = json.loads(body)
    block = doc["blocks"][0]
    if damage == "ops not a list":
        block["ops"][0] = 5
    elif damage == "var not a dict":
        block["vars"][0] = [1]
    else:
        block["ops"][0]["attrs"] = []
    path.write_bytes(magic + b"\n" + json.dumps(doc).encode())
    with pytest.raises(ValueError, match="corrupt or truncated model file") as err:
        fluid.io.load_inference_model(str(tmp_path), model.exe, scope=fluid.Scope())
    assert str(path) in str(err.value)
