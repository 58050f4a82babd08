import time

import pytest

import parafluid as fluid
from parafluid.distributed.deadline import Deadline, rpc_deadline_seconds


def test_flag_in_ms(monkeypatch):
    monkeypatch.setenv("FLAGS_rpc_deadline", "2500")
    assert rpc_deadline_seconds() == 2.5
    monkeypatch.delenv("FLAGS_rpc_deadline")
    assert rpc_deadline_seconds(7) == 7.0


def test_flag_set_through_core_globals_takes_effect_as_the_environment_does(monkeypatch):
    monkeypatch.delenv("FLAGS_rpc_deadline", raising=False)
    fluid.core.globals()["FLAGS_rpc_deadline"] = 5000
    assert rpc_deadline_seconds() == 5.0 and rpc_deadline_seconds(7) == 5.0
    assert fluid.core.globals()["FLAGS_rpc_deadline"] == 5000
    monkeypatch.setenv("FLAGS_rpc_deadline", "2500")  # written later: the environment wins
    assert rpc_deadline_seconds() == 2.5 and fluid.core.globals()["FLAGS_rpc_deadline"] == 2500


@pytest.mark.parametrize("raw", ["abc", "0", "-5"])
def test_bad_flag_names_it(monkeypatch, raw):
    monkeypatch.setenv("FLAGS_rpc_deadline", raw)
    with pytest.raises(ValueError, match="FLAGS_rpc_deadline"):
        rpc_deadline_seconds()
    with pytest.raises(ValueError, match=f"FLAGS_rpc_deadline must be .*, got {raw!r}"):
        fluid.core.globals()["FLAGS_rpc_deadline"] = raw


def test_deadline_expires():
    dl = Deadline(0.05)
    assert not dl.expired() and 0 < dl.remaining() <= 0.05
    time.sleep(0.06)
    assert dl.expired() and dl.remaining() == 0.0
