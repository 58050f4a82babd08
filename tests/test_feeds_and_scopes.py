"""Feeds that are checked, and nothing leaked.

Both executors raise the same clear error for a feed left out, for feeds that disagree on
the batch size or hold an empty batch, and for values that are not arrays of numbers; a
dropped or closed ParallelExecutor (or CompiledProgram) frees its device scopes.
"""

from __future__ import annotations

import gc
import warnings
import weakref
from typing import Any

import numpy as np
import pytest
import torch

import parafluid as fluid

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(autouse=True)
def two_cpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CPU_NUM", "2")


def regression(hidden: int = 4) -> dict[str, Any]:
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 3
    with fluid.program_guard(main, startup):
        x = fluid.layers.data(name="x", shape=[3], dtype="float32")
        y = fluid.layers.data(name="y", shape=[1], dtype="float32")
        h = fluid.layers.fc(input=x, size=hidden, act="relu")
        pred = fluid.layers.fc(input=h, size=1)
        loss = fluid.layers.mean(fluid.layers.square(fluid.layers.elementwise_sub(pred, y)))
        fluid.optimizer.Adam(0.01).minimize(loss)
    return {"main": main, "startup": startup, "loss": loss}


def data(rows: int, label_rows: int | None = None) -> dict[str, np.ndarray]:
    rng = np.random.RandomState(rows)
    return {"x": rng.rand(rows, 3).astype("float32"),
            "y": rng.rand(rows if label_rows is None else label_rows, 1).astype("float32")}


def executors(m: dict[str, Any]) -> tuple[Any, Any]:
    """(run(feed) with the Executor, run(feed) with a ParallelExecutor), both trained once."""
    scope = fluid.Scope()
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(m["startup"], scope=scope)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pe = fluid.ParallelExecutor(False, loss_name=m["loss"].name, main_program=m["main"],
                                    scope=scope)

    def run_exe(feed: Any) -> Any:
        return exe.run(m["main"], feed=feed, fetch_list=[m["loss"]], scope=scope)

    def run_pe(feed: Any) -> Any:
        return pe.run([m["loss"]], feed=feed)

    run_exe(data(8))
    run_pe(data(8))
    return run_exe, run_pe


def message(run: Any, feed: Any) -> str:
    with pytest.raises((ValueError, TypeError, RuntimeError)) as info:
        run(feed)
    return str(info.value)


# ------------------------------------------------------------------ feeds left out


@pytest.mark.parametrize("feed", [{"x": data(8)["x"]}, {}, None])
def test_a_feed_left_out_is_the_same_error_in_both_executors(feed: Any) -> None:
    run_exe, run_pe = executors(regression())
    want = message(run_exe, feed)
    assert "was not fed" in want
    # the ParallelExecutor used to train on the previous batch kept in its device scopes
    assert message(run_pe, feed) == want


def test_compiled_program_with_an_empty_feed_raises() -> None:
    m = regression()
    scope = fluid.Scope()
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(m["startup"], scope=scope)
    compiled = fluid.CompiledProgram(m["main"]).with_data_parallel(loss_name=m["loss"].name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exe.run(compiled, feed=data(8), fetch_list=[m["loss"]], scope=scope)
    with pytest.raises(RuntimeError, match="variable 'x' is needed by op #0 mul but was not "
                                           "fed"):
        exe.run(compiled, feed={}, fetch_list=[m["loss"]], scope=scope)


# ------------------------------------------------------------------ batch sizes


@pytest.mark.parametrize("which", ["exe", "pe"])
def test_feeds_sharing_the_batch_must_agree(which: str) -> None:
    run = executors(regression())[which == "pe"]
    msg = message(run, data(8, label_rows=6))
    assert msg == ("feeds 'x' and 'y' must have the same batch size (dim 0 is -1, the batch, in "
                   "the program for both): 'x' has 8 rows, 'y' has 6")


def test_per_device_feeds_sharing_the_batch_must_agree() -> None:
    run_pe = executors(regression())[1]
    with pytest.raises(ValueError, match=r"feeds 'x' and 'y' of feed\[1\] must have the same "
                                         r"batch size.*'x' has 4 rows, 'y' has 3"):
        run_pe([data(4), data(4, label_rows=3)])


@pytest.mark.parametrize("which", ["exe", "pe"])
def test_an_empty_batch_is_an_error(which: str) -> None:
    run = executors(regression())[which == "pe"]
    msg = message(run, data(0))
    assert msg.startswith("feed 'x'") and "the batch is empty (0 rows" in msg
    assert "CPU_NUM=0" not in msg


def test_a_fixed_size_feed_with_no_rows_never_suggests_cpu_num_0() -> None:
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data(name="x", shape=[0, 3], dtype="float32", append_batch_size=False)
        out = fluid.layers.scale(x, 2.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pe = fluid.ParallelExecutor(False, main_program=main, scope=fluid.Scope())
    msg = message(lambda feed: pe.run([out], feed=feed), {"x": np.ones((0, 3), "float32")})
    assert "feed 'x': the batch is empty (0 rows, shape [0, 3])" in msg
    assert "CPU_NUM=0" not in msg
    # a non-empty batch smaller than the device count still names the fix
    main2, startup2 = fluid.Program(), fluid.Program()
    with fluid.program_guard(main2, startup2):
        z = fluid.layers.data(name="z", shape=[3], dtype="float32")
        out2 = fluid.layers.scale(z, 2.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pe2 = fluid.ParallelExecutor(False, main_program=main2, scope=fluid.Scope())
    with pytest.raises(ValueError, match=r"set CPU_NUM=1 or fewer"):
        pe2.run([out2], feed={"z": np.ones((1, 3), "float32")})


# ------------------------------------------------------------------ feed values


@pytest.mark.parametrize("value, actual", [
    ("abc", "got a str: 'abc'"),
    (None, "got a NoneType: None"),
    (b"abc", "got a bytes: b'abc'"),
    ({"a": 1}, "got a dict: {'a': 1}"),
    ([[1.0, 2.0, 3.0], [4.0, 5.0]], "got a ragged nested list"),
    ([[object(), 1.0, 2.0]], "got a list holding non-numbers"),
    (np.array([["a", "b", "c"]]), "got a ndarray: array([['a', 'b', 'c']]"),
    (fluid.Program().global_block().create_var(name="v", shape=[2, 3], dtype="float32"),
     "got the Variable 'v', which is a name in a program, not data"),
])
@pytest.mark.parametrize("which", ["exe", "pe"])
def test_feed_value_errors_name_the_feed_the_expected_and_the_actual(
        value: Any, actual: str, which: str) -> None:
    run = executors(regression())[which == "pe"]
    feed = data(8)
    feed["x"] = value
    msg = message(run, feed)
    assert msg.startswith("feed 'x': expected an array of float32 of shape [-1, 3]"), msg
    assert actual in msg, msg


# ------------------------------------------------------------------ leaks


def _device_copies(pe: Any) -> list[weakref.ref]:
    """Weak references to the tensors devices > 0 hold (their parameter and state copies)."""
    refs = []
    for s in pe._scopes.scopes[1:]:
        for name in s.local_var_names():
            value = s.find_local_var(name).value
            if isinstance(value, torch.Tensor):
                refs.append(weakref.ref(value))
    return refs


def _bytes(refs: list[weakref.ref]) -> int:
    return sum(t.numel() * t.element_size() for t in (r() for r in refs) if t is not None)


def test_dropped_parallel_executors_and_compiled_programs_free_their_device_scopes() -> None:
    m = regression(hidden=64)
    scope = fluid.Scope()
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(m["startup"], scope=scope)
    refs: list[weakref.ref] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for k in range(30):  # 60 executors in all
            pe = fluid.ParallelExecutor(False, loss_name=m["loss"].name,
                                        main_program=m["main"], scope=scope)
            pe.run([m["loss"]], feed=data(8))
            refs += _device_copies(pe)
            compiled = fluid.CompiledProgram(m["main"]).with_data_parallel(
                loss_name=m["loss"].name)
            exe.run(compiled, feed=data(8), fetch_list=[m["loss"]], scope=scope)
            refs += _device_copies(compiled._executor)
            if k == 0:
                per_executor = _bytes(refs) // 2
                assert per_executor > 4 * 64 * 4, "parameters and Adam moments of device 1"
    del pe, compiled
    gc.collect()
    assert scope.kids() == [], f"{len(scope.kids())} child scopes left in the parent scope"
    assert _bytes(refs) == 0, (f"{_bytes(refs)} bytes of device copies still alive "
                               f"({per_executor} per executor)")


def test_close_frees_the_device_scopes_and_leaves_the_source_of_a_sharer() -> None:
    m = regression()
    scope = fluid.Scope()
    fluid.Executor(fluid.CPUPlace()).run(m["startup"], scope=scope)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pe = fluid.ParallelExecutor(False, loss_name=m["loss"].name, main_program=m["main"],
                                    scope=scope)
        pe.run([m["loss"]], feed=data(8))
        test_pe = fluid.ParallelExecutor(False, main_program=m["main"].clone(for_test=True),
                                         share_vars_from=pe, scope=scope)
        test_pe.run([m["loss"]], feed=data(8))
    kids = len(scope.kids())
    test_pe.close()  # the sharer frees its temporaries, not the source's device scopes
    assert len(scope.kids()) == kids - 1  # its local scope of device 0's temporaries
    assert pe._scopes.scopes[1] in scope.kids() and pe.check_replicas() > 0
    pe.run([m["loss"]], feed=data(8))
    refs = _device_copies(pe)
    pe.close()
    del test_pe  # (it uses the source's device scopes while it lives)
    gc.collect()
    assert scope.kids() == [] and _bytes(refs) == 0
    with pytest.raises(RuntimeError, match=r"run\(\) after close\(\)"):
        pe.run([m["loss"]], feed=data(8))
    pe.close()  # idempotent


def test_the_executor_lets_minus_one_dims_differ_when_the_ops_agree() -> None:
    """As Fluid: dim 0 of -1 is not always a batch; a matmul of [-1, 3] by [-1, 4] runs."""
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.data(name="x", shape=[-1, 3], dtype="float32")
        y = fluid.data(name="y", shape=[-1, 4], dtype="float32")
        out = fluid.layers.matmul(x, y)
    xv, yv = np.ones((2, 3), "float32"), np.ones((3, 4), "float32")
    got, = fluid.Executor(fluid.CPUPlace()).run(main, feed={"x": xv, "y": yv}, fetch_list=[out])
    np.testing.assert_array_equal(got, xv @ yv)


def test_a_variable_fed_for_a_variable_the_program_writes_first_is_nothing_to_feed() -> None:
    # Fluid 1.6 takes any object as a fed value; programs feed a variable its own Variable
    # and compute it with assign first (Fluid's test_mse_loss, test_npair_loss_op)
    main, startup = fluid.Program(), fluid.Program()
    value = np.arange(6, dtype="float32").reshape(2, 3)
    with fluid.program_guard(main, startup):
        v = fluid.layers.create_tensor(dtype="float32", name="v")
        fluid.layers.assign(input=value, output=v)
        out = fluid.layers.scale(v, 2.0)
    exe = fluid.Executor(fluid.CPUPlace())
    with pytest.warns(UserWarning, match=r"feed 'v' is the Variable 'v' .* the program writes "
                                         r"it before reading it, so nothing is fed"):
        got, = exe.run(main, feed={"v": v}, fetch_list=[out], scope=fluid.Scope())
    np.testing.assert_array_equal(got, value * 2)
