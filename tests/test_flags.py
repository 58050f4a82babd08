"""One flag store: ``fluid.core.globals()`` is what the runtime reads; the environment
gives the initial values; the value written last wins; every value is checked."""

from __future__ import annotations

import pytest

import parafluid as fluid
from parafluid.flags import FLAGS, flag, flags_guard, set_flag


def test_every_flag_the_runtime_reads_is_in_core_globals() -> None:
    read = {name for name, spec in FLAGS.items() if spec.read_by}
    assert read == {"FLAGS_rpc_deadline", "FLAGS_check_nan_inf",
                    "FLAGS_eager_delete_tensor_gb", "FLAGS_selected_gpus",
                    "FLAGS_reader_deadline", "FLAGS_rpc_overlap_send", "FLAGS_dygraph_debug",
                    "FLAGS_fuse_parameter_memory_size", "FLAGS_fuse_parameter_groups_size",
                    "FLAGS_collective_shared_memory_mb"}
    assert all(name in fluid.core.globals() for name in read)
    assert set(fluid.core.globals().keys()) == set(FLAGS)


@pytest.mark.parametrize("name, raw, value", [
    ("FLAGS_rpc_deadline", "5000", 5000),
    ("FLAGS_check_nan_inf", "true", True),
    ("FLAGS_eager_delete_tensor_gb", "-1", -1.0),
    ("FLAGS_selected_gpus", "0, 2", "0,2"),
    ("FLAGS_reader_deadline", "1500", 1500),
    ("FLAGS_rpc_overlap_send", "0", False),
    ("FLAGS_fuse_parameter_memory_size", "0.5", 0.5),
    ("FLAGS_fuse_parameter_groups_size", "3", 3),
    ("FLAGS_collective_shared_memory_mb", "0", 0),
])
def test_the_environment_and_core_globals_give_the_same_value(
        monkeypatch: pytest.MonkeyPatch, name: str, raw: str, value: object) -> None:
    monkeypatch.setenv(name, raw)
    assert fluid.core.globals()[name] == value and flag(name) == value
    monkeypatch.delenv(name)
    assert flag(name) == FLAGS[name].default
    fluid.core.globals()[name] = raw
    assert fluid.core.globals()[name] == value and flag(name) == value


def test_the_value_written_last_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLAGS_check_nan_inf", "1")
    fluid.core.globals()["FLAGS_check_nan_inf"] = False
    assert flag("FLAGS_check_nan_inf") is False
    monkeypatch.setenv("FLAGS_check_nan_inf", "yes")
    assert flag("FLAGS_check_nan_inf") is True


def test_bad_values_name_the_flag_and_unknown_flags_list_the_known(
        monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="FLAGS_check_nan_inf must be a bool .*got 'maybe'"):
        fluid.core.globals()["FLAGS_check_nan_inf"] = "maybe"
    monkeypatch.setenv("FLAGS_selected_gpus", "0,x")
    with pytest.raises(ValueError, match="FLAGS_selected_gpus must be GPU ids like '0,1', "
                                         "got '0,x'"):
        flag("FLAGS_selected_gpus")
    for bad in ("-1", "inf"):
        with pytest.raises(ValueError, match="FLAGS_collective_shared_memory_mb must be a "
                                             f"number of MB >= 0 .*got '{bad}'"):
            fluid.core.globals()["FLAGS_collective_shared_memory_mb"] = bad
    # NaN passes no bound: refused, not taken as unset
    for name in ("FLAGS_fuse_parameter_memory_size", "FLAGS_eager_delete_tensor_gb",
                 "FLAGS_rpc_deadline", "FLAGS_collective_shared_memory_mb"):
        with pytest.raises(ValueError, match=f"{name} must be .*got 'nan'"):
            fluid.core.globals()[name] = "nan"
    with pytest.raises(KeyError, match="unknown flag 'FLAGS_nope'.*FLAGS_rpc_deadline"):
        fluid.core.globals()["FLAGS_nope"]


def test_flags_guard_restores_what_was_written_inside(monkeypatch) -> None:
    monkeypatch.delenv("FLAGS_benchmark", raising=False)
    with flags_guard():
        set_flag("FLAGS_benchmark", True)
        assert fluid.core.globals()["FLAGS_benchmark"] is True
    assert fluid.core.globals()["FLAGS_benchmark"] is False
