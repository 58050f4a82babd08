"""fluid.io save/load of variables: round trips, predicates, mismatches, corruption, atomicity."""

from __future__ import annotations

import json
import os
import pickle

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

import parafluid as fluid
from parafluid import atomic_write
from parafluid import io as fio

from .conftest import Model


def _file_names(path: str) -> list[str]:
    tensors, _ = fio.read_tensors(path)
    return sorted(tensors)


def test_params_round_trip_into_a_fresh_scope(model: Model, tmp_path: str) -> None:
    saved = model.params()
    path = fluid.io.save_params(model.exe, str(tmp_path), model.main, scope=model.scope)
    assert os.path.basename(path) == fio.DEFAULT_FILENAME
    assert _file_names(path) == sorted(saved)

    other = Model(seed=7)  # different initial values, same names
    assert not np.allclose(other.params()["fc_0.w_0"], saved["fc_0.w_0"])
    fluid.io.load_params(other.exe, str(tmp_path), other.main, scope=other.scope)
    for name, value in saved.items():
        np.testing.assert_array_equal(other.value(name), value)


def test_persistables_include_optimizer_state_and_resume_exactly(model: Model,
                                                                 tmp_path: str) -> None:
    # Change the learning rate in the scope: only a checkpoint that holds the optimizer's
    # state (not just the parameters) can resume this run exactly.
    lr_name = next(v.name for v in model.main.list_vars()
                   if v.persistable and v.name.startswith("learning_rate"))
    model.scope.find_var(lr_name).get_tensor().set(np.array([0.2], "float32"))
    fluid.io.save_persistables(model.exe, str(tmp_path), model.main, scope=model.scope)
    names = _file_names(os.path.join(tmp_path, fio.DEFAULT_FILENAME))
    assert lr_name in names and "fc_0.w_0" in names

    resumed = Model(seed=7)
    fluid.io.load_persistables(resumed.exe, str(tmp_path), resumed.main, scope=resumed.scope)
    np.testing.assert_array_equal(resumed.value(lr_name), np.array([0.2], "float32"))
    for _ in range(2):
        assert resumed.step() == model.step()
    for name, value in model.params().items():
        np.testing.assert_array_equal(resumed.value(name), value)


def test_params_file_has_no_optimizer_state(model: Model, tmp_path: str) -> None:
    path = fluid.io.save_params(model.exe, str(tmp_path), model.main, scope=model.scope)
    assert not any(n.startswith("learning_rate") for n in _file_names(path))


def test_predicate_and_vars_select_what_is_saved_and_loaded(model: Model, tmp_path: str) -> None:
    path = fluid.io.save_vars(model.exe, str(tmp_path), model.main, scope=model.scope,
                              predicate=lambda v: v.persistable and v.name.startswith("fc_1"),
                              filename="fc1.safetensors")
    assert os.path.basename(path) == "fc1.safetensors"
    assert _file_names(path) == ["fc_1.b_0", "fc_1.w_0"]

    other = Model(seed=7)
    before = {n: other.value(n) for n in ("fc_0.w_0", "fc_1.b_0")}
    fluid.io.load_vars(other.exe, str(tmp_path), other.main, vars=["fc_1.w_0"],
                       filename="fc1.safetensors", scope=other.scope)
    np.testing.assert_array_equal(other.value("fc_1.w_0"), model.value("fc_1.w_0"))
    for name, value in before.items():  # not selected: untouched
        np.testing.assert_array_equal(other.value(name), value)


def test_save_without_vars_or_predicate_is_an_error(model: Model, tmp_path: str) -> None:
    with pytest.raises(ValueError, match="vars= or predicate="):
        fluid.io.save_vars(model.exe, str(tmp_path), model.main, scope=model.scope)


def test_saving_an_uninitialized_variable_says_to_run_startup(tmp_path: str) -> None:
    m = Model()
    empty = fluid.Scope()
    with pytest.raises(ValueError, match="run the startup program"):
        fluid.io.save_params(m.exe, str(tmp_path), m.main, scope=empty)


def test_selecting_temporaries_says_they_are_not_persistable(model: Model,
                                                             tmp_path: str) -> None:
    # Fluid's own save_vars example (predicate on the name alone) picks the fc temporaries.
    with pytest.raises(ValueError, match="not persistable") as err:
        fluid.io.save_vars(model.exe, str(tmp_path), model.main, scope=model.scope,
                           predicate=lambda v: v.name.startswith("fc_0"))
    message = str(err.value)
    assert "'fc_0.tmp_0'" in message and "fluid.io.is_persistable(v) and" in message
    assert "'fc_0.w_0'" not in message  # it has a value
    assert "startup" not in message  # running the startup program would not help
    assert not os.listdir(tmp_path)


def test_scope_guard_sets_the_default_scope(model: Model, tmp_path: str) -> None:
    with fluid.scope_guard(model.scope):
        fluid.io.save_params(model.exe, str(tmp_path), model.main)
    other = Model(seed=7)
    with fluid.scope_guard(other.scope):
        fluid.io.load_params(other.exe, str(tmp_path), other.main)
    np.testing.assert_array_equal(other.value("fc_1.w_0"), model.value("fc_1.w_0"))


# ---------------------------------------------------------------------- mismatches


def test_shape_mismatch_lists_every_mismatched_variable(model: Model, tmp_path: str) -> None:
    fluid.io.save_params(model.exe, str(tmp_path), model.main, scope=model.scope)
    wider = Model(hidden=5)
    before = wider.params()
    with pytest.raises(ValueError) as err:
        fluid.io.load_params(wider.exe, str(tmp_path), wider.main, scope=wider.scope)
    msg = str(err.value)
    assert "fc_0.w_0: the file has float32[4, 8], the program expects float32[4, 5]" in msg
    assert "fc_0.b_0" in msg and "fc_1.w_0" in msg
    assert "fc_1.b_0" not in msg  # same shape [3]: not a mismatch
    for name, value in before.items():  # nothing was loaded
        np.testing.assert_array_equal(wider.value(name), value)


def test_dtype_mismatch_is_reported(model: Model, tmp_path: str) -> None:
    fluid.io.save_params(model.exe, str(tmp_path), model.main, scope=model.scope)
    double = Model(dtype="float64")
    with pytest.raises(ValueError, match=r"fc_0\.w_0: the file has float32\[4, 8\], the "
                                         r"program expects float64\[4, 8\]"):
        fluid.io.load_params(double.exe, str(tmp_path), double.main, scope=double.scope)


@pytest.mark.parametrize("dtype", [torch.uint16, torch.complex64])
def test_a_dtype_parafluid_lacks_is_reported_as_a_mismatch(model: Model, tmp_path: str,
                                                           dtype: torch.dtype) -> None:
    # Written by another tool that follows the format: safetensors with a manifest.
    path = os.path.join(tmp_path, fio.DEFAULT_FILENAME)
    values = {p.name: torch.from_numpy(v) for p, v in zip(model.main.all_parameters(),
                                                          model.params().values())}
    values["fc_0.w_0"] = values["fc_0.w_0"].to(dtype)
    manifest = {"format": fio.VARS_FORMAT, "vars": [
        {"name": n, "shape": list(t.shape), "dtype": str(t.dtype).removeprefix("torch."),
         "crc32": fio._crc(t)} for n, t in values.items()]}
    save_file(values, path, metadata={"parafluid": json.dumps(manifest)})
    name = str(dtype).replace("torch.", "")
    with pytest.raises(ValueError, match=rf"fc_0\.w_0: the file has {name}\[4, 8\], the "
                                         r"program expects float32\[4, 8\]") as err:
        fluid.io.load_params(model.exe, str(tmp_path), model.main, scope=model.scope)
    assert path in str(err.value)


def test_missing_and_unexpected_variables_are_listed(model: Model, tmp_path: str) -> None:
    fluid.io.save_vars(model.exe, str(tmp_path), model.main, vars=["fc_0.w_0", "fc_0.b_0"],
                       scope=model.scope)
    with pytest.raises(ValueError) as err:
        fluid.io.load_params(model.exe, str(tmp_path), model.main, scope=model.scope)
    assert "missing from the file: 'fc_1.b_0', 'fc_1.w_0'" in str(err.value)

    # A file from another model: its names are not in this program.
    renamed = {"other.w": torch.zeros(2), "fc_0.w_0": torch.zeros(4, 8)}
    fio.write_tensors(os.path.join(tmp_path, "x.safetensors"), renamed)
    with pytest.raises(ValueError) as err:
        fluid.io.load_params(model.exe, str(tmp_path), model.main, filename="x.safetensors",
                             scope=model.scope)
    assert "in the file but not in the program: 'other.w'" in str(err.value)
    assert "missing from the file: 'fc_0.b_0', 'fc_1.b_0', 'fc_1.w_0'" in str(err.value)


def test_missing_file_names_the_path_and_what_is_there(model: Model, tmp_path: str) -> None:
    (tmp_path / "other.bin").write_bytes(b"x")
    with pytest.raises(FileNotFoundError, match="other.bin"):
        fluid.io.load_params(model.exe, str(tmp_path), model.main, scope=model.scope)


# ---------------------------------------------------------------------- corruption


def test_truncated_file_is_an_error_and_loads_nothing(model: Model, tmp_path: str) -> None:
    path = fluid.io.save_params(model.exe, str(tmp_path), model.main, scope=model.scope)
    data = open(path, "rb").read()
    other = Model(seed=7)
    before = other.params()
    for cut in (len(data) - 5, 40, 4):
        open(path, "wb").write(data[:cut])
        with pytest.raises(ValueError, match="truncated or corrupt") as err:
            fluid.io.load_params(other.exe, str(tmp_path), other.main, scope=other.scope)
        assert path in str(err.value)
    for name, value in before.items():
        np.testing.assert_array_equal(other.value(name), value)


def test_a_failed_device_copy_loads_nothing(model: Model, tmp_path: str, monkeypatch) -> None:
    # On a GPU the copy of the 2nd variable can run out of memory: no variable may change.
    fluid.io.save_params(model.exe, str(tmp_path), model.main, scope=model.scope)
    other = Model(seed=7)
    before = other.params()
    real_to, calls = torch.Tensor.to, []

    def to(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("out of memory")
        return real_to(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "to", to)
    with pytest.raises(RuntimeError, match="out of memory"):
        fluid.io.load_params(other.exe, str(tmp_path), other.main, scope=other.scope)
    monkeypatch.undo()
    for name, value in before.items():
        np.testing.assert_array_equal(other.value(name), value)


def test_flipped_data_byte_fails_the_checksum(model: Model, tmp_path: str) -> None:
    path = fluid.io.save_params(model.exe, str(tmp_path), model.main, scope=model.scope)
    data = bytearray(open(path, "rb").read())
    data[-3] ^= 0xFF
    open(path, "wb").write(bytes(data))
    with pytest.raises(ValueError, match="fails its checksum"):
        fluid.io.load_params(model.exe, str(tmp_path), model.main, scope=model.scope)


@pytest.mark.parametrize("key", [b"shape", b"dtype"])
def test_flipped_manifest_key_is_a_corrupt_file_error(model: Model, tmp_path: str,
                                                      key: bytes) -> None:
    path = fluid.io.save_params(model.exe, str(tmp_path), model.main, scope=model.scope)
    data = open(path, "rb").read()
    assert key in data
    open(path, "wb").write(data.replace(key, key[:-1] + b"_", 1))  # one entry loses its key
    with pytest.raises(ValueError, match="corrupt manifest") as err:
        fluid.io.load_params(model.exe, str(tmp_path), model.main, scope=model.scope)
    assert path in str(err.value)


class _Exploit:
    """Unpickling this would create a marker file: proof that a loader ran pickle."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):  # noqa: ANN204
        return (open, (self.marker, "w"))


def test_pickle_payloads_are_rejected_without_running_them(model: Model, tmp_path: str) -> None:
    marker = str(tmp_path / "pwned")
    payloads = {
        "pickle": pickle.dumps({"fc_0.w_0": _Exploit(marker)}),
        "torch.save": None,
    }
    torch_path = tmp_path / "torch_file"
    torch.save({"fc_0.w_0": torch.zeros(4, 8)}, str(torch_path))
    payloads["torch.save"] = torch_path.read_bytes()
    for kind, payload in payloads.items():
        (tmp_path / fio.DEFAULT_FILENAME).write_bytes(payload)
        with pytest.raises(ValueError, match="not a valid safetensors file"):
            fluid.io.load_params(model.exe, str(tmp_path), model.main, scope=model.scope)
        assert not os.path.exists(marker), kind


def test_loading_never_uses_pickle(model: Model, tmp_path: str, monkeypatch) -> None:
    fluid.io.save_persistables(model.exe, str(tmp_path), model.main, scope=model.scope)
    fluid.io.save_inference_model(str(tmp_path / "m"), ["x"], [model.pred], model.exe,
                                  model.main, scope=model.scope)

    def refuse(*args, **kwargs):
        raise AssertionError("pickle was used")

    monkeypatch.setattr(pickle, "load", refuse)
    monkeypatch.setattr(pickle, "loads", refuse)
    monkeypatch.setattr(pickle, "Unpickler", refuse)
    monkeypatch.setattr(torch, "load", refuse)
    other = Model(seed=7)
    fluid.io.load_persistables(other.exe, str(tmp_path), other.main, scope=other.scope)
    fluid.io.load_inference_model(str(tmp_path / "m"), other.exe, scope=fluid.Scope())
    np.testing.assert_array_equal(other.value("fc_0.w_0"), model.value("fc_0.w_0"))


# ---------------------------------------------------------------------- atomic saves


def test_crash_mid_save_keeps_the_previous_checkpoint(model: Model, tmp_path: str,
                                                      monkeypatch) -> None:
    fluid.io.save_persistables(model.exe, str(tmp_path), model.main, scope=model.scope)
    first = model.params()
    model.step()
    assert not np.array_equal(model.value("fc_0.w_0"), first["fc_0.w_0"])

    real_write = atomic_write._write_file

    def write_then_crash(path: str, data: bytes) -> None:
        real_write(path, data)  # the new checkpoint is fully on disk under its temp name...
        raise OSError("simulated crash before the rename")

    monkeypatch.setattr(atomic_write, "_write_file", write_then_crash)
    with pytest.raises(OSError, match="simulated crash"):
        fluid.io.save_persistables(model.exe, str(tmp_path), model.main, scope=model.scope)
    monkeypatch.undo()

    assert os.listdir(tmp_path) == [fio.DEFAULT_FILENAME]  # no temp file left behind
    other = Model(seed=7)
    fluid.io.load_persistables(other.exe, str(tmp_path), other.main, scope=other.scope)
    for name, value in first.items():
        np.testing.assert_array_equal(other.value(name), value)


def test_crash_at_rename_keeps_the_previous_checkpoint(model: Model, tmp_path: str,
                                                       monkeypatch) -> None:
    fluid.io.save_params(model.exe, str(tmp_path), model.main, scope=model.scope)
    first = model.params()
    model.step()

    def crash(src: str, dst: str) -> None:
        raise OSError("simulated crash at rename")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="simulated crash"):
        fluid.io.save_params(model.exe, str(tmp_path), model.main, scope=model.scope)
    monkeypatch.undo()
    assert os.listdir(tmp_path) == [fio.DEFAULT_FILENAME]
    tensors, _ = fio.read_tensors(os.path.join(tmp_path, fio.DEFAULT_FILENAME))
    np.testing.assert_array_equal(tensors["fc_0.w_0"].numpy(), first["fc_0.w_0"])
