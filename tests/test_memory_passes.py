"""memory_optimize / release_memory: liveness on hand-built programs, the rewritten programs,
bitwise-equal training, and a real drop of the peak memory of a run."""

from __future__ import annotations

import hashlib
import os
import warnings
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np
import pytest
import torch
from golden_training import BATCH, MODELS, THREADS, _data

import parafluid as fluid
from parafluid.executor import compile_program
from parafluid.passes.liveness import block_liveness
from parafluid.passes.release_memory import EAGER_DELETE_FLAG, eager_deletion_enabled

pytestmark = pytest.mark.timeout(120)


# ---------------------------------------------------------------------- hand-built programs


def _var(block: Any, name: str, shape: list[int] | None = None, dtype: str = "float32",
         **kw: Any) -> Any:
    return block.create_var(name=name, shape=shape or [-1, 4], dtype=dtype, **kw)


def _chain(n: int, shape: list[int] | None = None) -> tuple[Any, list[str]]:
    """x -> t1 -> ... -> tn, each ``scale`` by 2; tn is read by nobody (the result)."""
    prog = fluid.Program()
    block = prog.global_block()
    _var(block, "x", shape, is_data=True)
    names = [f"t{i}" for i in range(1, n + 1)]
    prev = "x"
    for name in names:
        _var(block, name, shape)
        block.append_op("scale", inputs={"X": [prev]}, outputs={"Out": [name]},
                        attrs={"scale": 2.0})
        prev = name
    return prog, names


def _diamond() -> fluid.Program:
    """a = x*2, b = x*3, c = a + b, d = c*2, e = d*2 (e: the result)."""
    prog = fluid.Program()
    block = prog.global_block()
    _var(block, "x", is_data=True)
    for name in "abcde":
        _var(block, name)
    block.append_op("scale", inputs={"X": ["x"]}, outputs={"Out": ["a"]}, attrs={"scale": 2.0})
    block.append_op("scale", inputs={"X": ["x"]}, outputs={"Out": ["b"]}, attrs={"scale": 3.0})
    block.append_op("elementwise_add", inputs={"X": ["a"], "Y": ["b"]}, outputs={"Out": ["c"]})
    block.append_op("scale", inputs={"X": ["c"]}, outputs={"Out": ["d"]}, attrs={"scale": 2.0})
    block.append_op("scale", inputs={"X": ["d"]}, outputs={"Out": ["e"]}, attrs={"scale": 2.0})
    return prog


def _run(prog: fluid.Program, fetch: list[str], x: np.ndarray | None = None) -> list[np.ndarray]:
    x = np.arange(8, dtype="float32").reshape(2, 4) if x is None else x
    return fluid.Executor().run(prog, feed={"x": x}, fetch_list=fetch, scope=fluid.Scope())


def _op_lines(prog: fluid.Program) -> list[str]:
    return [str(op) for op in prog.global_block().ops]


def test_liveness_of_a_diamond() -> None:
    live = block_liveness(_diamond().global_block())
    assert live.live_in[0] == {"x"} and live.live_out[0] == {"x", "a"}
    assert live.live_out[1] == {"a", "b"}  # x dies at b, its last reader
    assert [live.dies_at(i) for i in range(5)] == [set(), {"x"}, {"a", "b"}, {"c"}, {"d"}]
    assert live.live_out[4] == set()  # e is never read


def test_liveness_iterates_to_a_fixed_point_with_redefinitions() -> None:
    prog, _ = _chain(2)
    block = prog.global_block()
    # t1 is written again after its first life: live_in must not carry it across the write
    block.append_op("scale", inputs={"X": ["t2"]}, outputs={"Out": ["t1"]}, attrs={"scale": 1.0})
    block.append_op("scale", inputs={"X": ["t1"]}, outputs={"Out": ["t2"]}, attrs={"scale": 1.0})
    live = block_liveness(block)
    assert live.live_in == [{"x"}, {"t1"}, {"t2"}, {"t1"}]
    assert live.live_out == [{"t1"}, {"t2"}, {"t1"}, set()]


def test_memory_optimize_reuses_along_a_chain() -> None:
    prog, names = _chain(5)
    want = _run(prog, ["t5"])[0]
    fluid.memory_optimize(prog)
    prog.verify()
    assert _op_lines(prog) == [
        "{Out=[t1]} = scale(X=[x]) {bias=0.0, bias_after_scale=True, scale=2.0}",
        "{Out=[t2]} = scale(X=[t1]) {bias=0.0, bias_after_scale=True, scale=2.0}",
        "{Out=[t1]} = scale(X=[t2]) {bias=0.0, bias_after_scale=True, scale=2.0}",
        "{Out=[t2]} = scale(X=[t1]) {bias=0.0, bias_after_scale=True, scale=2.0}",
        "{Out=[t5]} = scale(X=[t2]) {bias=0.0, bias_after_scale=True, scale=2.0}",
    ]
    assert not prog.global_block().has_var("t3") and not prog.global_block().has_var("t4")
    assert prog.meta.memory_reuse == {"t1": [("t3", 2)], "t2": [("t4", 3)]}
    np.testing.assert_array_equal(_run(prog, ["t5"])[0], want)


def test_memory_optimize_on_a_diamond_waits_for_both_branches(capsys) -> None:
    prog = _diamond()
    want = _run(prog, ["e"])[0]
    fluid.memory_optimize(prog, print_log=True)
    ops = prog.global_block().ops
    assert ops[2].output("Out") == ["c"]  # a and b are both alive while c is computed
    assert ops[3].output("Out") == ["a"] and ops[4].input("X") == ["a"]  # d takes a's buffer
    assert "op #3 scale: d [-1, 4] float32 reuses a [-1, 4]" in capsys.readouterr().out
    np.testing.assert_array_equal(_run(prog, ["e"])[0], want)


def test_fetch_targets_persistables_feeds_and_skip_set_are_left_alone() -> None:
    prog, names = _chain(5)
    block = prog.global_block()
    block.vars["t2"].persistable = True
    fluid.memory_optimize(prog, skip_opt_set={"t1"})
    assert prog.meta.memory_reuse == {}  # t1 skipped, t2 persistable, x fed, t5 the result
    assert _op_lines(prog)[4].startswith("{Out=[t5]}")
    assert fluid.Executor().run(prog, feed={"x": np.ones((1, 4), "float32")},
                                fetch_list=["t2"], scope=fluid.Scope())[0].tolist() == [[4.0] * 4]


def test_fetching_a_reused_or_renamed_variable_says_what_to_do() -> None:
    prog, _ = _chain(5)
    fluid.memory_optimize(prog)
    with pytest.raises(ValueError, match=r"fetch target 't1': memory_optimize let 't3' \(op #2\)"
                                         r" reuse its buffer.*skip_opt_set=\{'t1'\}"):
        _run(prog, ["t1"])
    with pytest.raises(ValueError, match=r"fetch target 't4' is not a variable of the program "
                                         r"any more: memory_optimize renamed it to 't2'"):
        _run(prog, ["t4"])
    compiled = fluid.CompiledProgram(prog).with_data_parallel(places=fluid.cpu_places(2))
    with pytest.raises(ValueError, match="fetch target 't1': memory_optimize let 't3'"):
        fluid.Executor().run(compiled, feed={"x": np.ones((2, 4), "float32")},
                             fetch_list=["t1"], scope=fluid.Scope())


@pytest.mark.parametrize("copy", ["clone", "saved and loaded"])
def test_a_copy_of_an_optimized_program_keeps_the_fetch_checks(copy: str) -> None:
    prog, _ = _chain(5)
    fluid.memory_optimize(prog)
    same = prog.clone() if copy == "clone" else \
        fluid.Program.parse_from_string(prog.serialize_to_string())
    assert same.meta.memory_reuse == {"t1": [("t3", 2)], "t2": [("t4", 3)]}
    with pytest.raises(ValueError, match=r"fetch target 't1': memory_optimize let 't3' \(op #2\)"
                                         r" reuse its buffer"):
        _run(same, ["t1"])
    with pytest.raises(ValueError, match=r"fetch target 't4' is not a variable of the program "
                                         r"any more: memory_optimize renamed it to 't2'"):
        _run(same, ["t4"])
    np.testing.assert_array_equal(_run(same, ["t5"])[0], _run(prog, ["t5"])[0])


def test_level_1_reuses_a_larger_buffer_of_the_same_pattern_and_dtype_must_match() -> None:
    def program() -> fluid.Program:
        prog = fluid.Program()
        block = prog.global_block()
        _var(block, "x", [-1, 8], is_data=True)
        _var(block, "big", [-1, 8])
        _var(block, "mid", [-1, 8])
        _var(block, "small", [-1, 4])
        _var(block, "idx", [-1, 4], dtype="int64")
        _var(block, "out", [-1, 4])
        block.append_op("scale", inputs={"X": ["x"]}, outputs={"Out": ["big"]})
        block.append_op("scale", inputs={"X": ["big"]}, outputs={"Out": ["mid"]})
        _var(block, "rest", [-1, 4])
        block.append_op("split", inputs={"X": ["mid"]}, outputs={"Out": ["small", "rest"]},
                        attrs={"axis": 1, "num": 2})
        block.append_op("cast", inputs={"X": ["small"]}, outputs={"Out": ["idx"]},
                        attrs={"in_dtype": "float32", "out_dtype": "int64"})
        block.append_op("cast", inputs={"X": ["idx"]}, outputs={"Out": ["out"]},
                        attrs={"in_dtype": "int64", "out_dtype": "float32"})
        return prog

    x = np.arange(16, dtype="float32").reshape(2, 8)
    want = _run(program(), ["out"], x)[0]
    level0 = program()
    fluid.memory_optimize(level0, level=0)
    assert level0.meta.memory_reuse == {}  # [-1, 4] never equals [-1, 8]; int64 != float32
    level1 = program()
    fluid.memory_optimize(level1, level=1)
    assert level1.meta.memory_reuse == {"big": [("small", 2)]}
    np.testing.assert_array_equal(_run(level1, ["out"], x)[0], want)


def test_skip_grads_and_argument_errors() -> None:
    main, startup, loss = _mlp_program()
    params = {p.name + "@GRAD" for p in main.all_parameters()}
    fluid.memory_optimize(main, skip_grads=True)
    # Fluid's rule: the parameter gradients stay; other gradients may still be renamed
    touched = {x for pairs in main.meta.memory_reuse.values() for x, _ in pairs} | \
        set(main.meta.memory_reuse)
    assert touched and not touched & params
    assert main._is_mem_optimized
    with pytest.raises(ValueError, match="level must be 0 .* or 1 .*got 2"):
        fluid.memory_optimize(main, level=2)
    with pytest.raises(TypeError, match="input_program must be a Program, got str"):
        fluid.release_memory("main")
    with pytest.raises(TypeError, match="skip_opt_set must be a set of variable names"):
        fluid.memory_optimize(main, skip_opt_set="loss")


def test_sub_blocks_are_left_alone_with_a_warning() -> None:
    prog, _ = _chain(4)
    sub = prog._create_block()
    prog._rollback()
    sub.append_op("scale", inputs={"X": ["t1"]}, outputs={"Out": ["t2"]})
    with pytest.warns(UserWarning, match="1 sub-block.*left alone.*2 variables"):
        fluid.memory_optimize(prog)
    assert prog.meta.memory_reuse == {}  # t3 could take t1's buffer but t1 is used inside


def test_release_memory_deletes_after_the_last_use_once() -> None:
    prog = _diamond()
    fluid.release_memory(prog)
    prog.verify()
    types = [op.type for op in prog.global_block().ops]
    assert types == ["scale", "scale", "elementwise_add", "delete_var", "scale", "delete_var",
                     "scale", "delete_var"]
    ops = prog.global_block().ops
    assert [op.input("X") for op in ops if op.type == "delete_var"] == [["a", "b"], ["c"], ["d"]]
    before = _op_lines(prog)
    fluid.release_memory(prog)
    assert _op_lines(prog) == before, "a second run adds nothing"
    np.testing.assert_array_equal(_run(prog, ["e"])[0], _run(_diamond(), ["e"])[0])


def test_delete_var_drops_values_even_without_eager_deletion(monkeypatch) -> None:
    prog = _diamond()
    fluid.release_memory(prog, skip_opt_set={"c"})
    monkeypatch.setenv(EAGER_DELETE_FLAG, "-1")
    assert not eager_deletion_enabled()
    plan = compile_program(prog, ["x"], ["e"], "cpu")
    # only the delete_vars' inputs are released, by their last reader in program order (the
    # Executor runs one op at a time): node 3 deletes a and b, node 6 deletes d
    assert [op.type for op in prog.global_block().ops][3::3] == ["delete_var", "delete_var"]
    assert plan.releases == {3: ["a", "b"], 6: ["d"]}
    monkeypatch.setenv(EAGER_DELETE_FLAG, "0")
    eager = compile_program(prog, ["x"], ["e"], "cpu")
    assert sorted(n for names in eager.releases.values() for n in names) == \
        ["a", "b", "c", "d", "x"]
    monkeypatch.setenv(EAGER_DELETE_FLAG, "lots")
    with pytest.raises(ValueError, match="FLAGS_eager_delete_tensor_gb must be a number"):
        eager_deletion_enabled()


@pytest.mark.parametrize("how", ["core.globals", "_set_eager_deletion_mode"])
def test_eager_deletion_turned_off_through_core_as_through_the_environment(
        monkeypatch, how: str) -> None:
    monkeypatch.delenv(EAGER_DELETE_FLAG, raising=False)
    prog = _diamond()
    eager = compile_program(prog, ["x"], ["e"], "cpu")
    assert eager.releases
    if how == "core.globals":
        fluid.core.globals()[EAGER_DELETE_FLAG] = -1.0
    else:
        fluid.core._set_eager_deletion_mode(-1.0, 1.0, True)
    assert not eager_deletion_enabled()
    assert compile_program(prog, ["x"], ["e"], "cpu").releases == {}
    fluid.core.globals()[EAGER_DELETE_FLAG] = 0.0
    assert compile_program(prog, ["x"], ["e"], "cpu").releases == eager.releases
    with pytest.raises(ValueError, match="FLAGS_eager_delete_tensor_gb must be a number"):
        fluid.core.globals()[EAGER_DELETE_FLAG] = "lots"


# ---------------------------------------------------------------------- training


def _mlp_program() -> tuple[fluid.Program, fluid.Program, Any]:
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 11
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        _, _, loss = MODELS["mlp"]()
    return main, startup, loss


def _train(model: str, transform: Callable[[fluid.Program], None] | None, devices: int,
           build_memory_optimize: bool = False, steps: int = 4) -> tuple[list, str]:
    previous = torch.get_num_threads()
    torch.set_num_threads(THREADS)
    try:
        main, startup = fluid.Program(), fluid.Program()
        main.random_seed = startup.random_seed = 11
        with fluid.unique_name.guard(), fluid.program_guard(main, startup):
            _, _, loss = MODELS[model]()
        if transform is not None:
            transform(main)
        x, y = _data()
        x = x.reshape(-1, 1, 8, 8) if model == "cnn" else x.reshape(-1, 8, 8)
        scope, exe = fluid.Scope(), fluid.Executor(fluid.CPUPlace())
        exe.run(startup, scope=scope)
        target: Any = main
        if devices > 1:
            bs = fluid.BuildStrategy()
            bs.memory_optimize = build_memory_optimize
            target = fluid.CompiledProgram(main).with_data_parallel(
                loss_name=loss.name, build_strategy=bs, places=fluid.cpu_places(devices))
        losses = []
        for step in range(steps):
            sl = slice(step * BATCH, (step + 1) * BATCH)
            out, = exe.run(target, feed={"img": x[sl], "label": y[sl]}, fetch_list=[loss],
                           scope=scope)
            losses.append(np.asarray(out).tolist())
        digest = hashlib.sha256()
        for var in sorted(main.global_block().all_parameters(), key=lambda v: v.name):
            digest.update(np.ascontiguousarray(scope.find_var(var.name).get_tensor()).tobytes())
        return losses, digest.hexdigest()
    finally:
        torch.set_num_threads(previous)


def _both(p: fluid.Program) -> None:
    fluid.memory_optimize(p)
    fluid.release_memory(p)


TRANSFORMS = {"memory_optimize": fluid.memory_optimize, "release_memory": fluid.release_memory,
              "both": _both, "level1": lambda p: fluid.transpiler.memory_optimize(p, level=1)}


@pytest.mark.parametrize("model", ["mlp", "cnn"])
@pytest.mark.parametrize("devices", [1, 2])
def test_training_with_each_pass_is_bitwise_equal(model: str, devices: int,
                                                  monkeypatch) -> None:
    pytest.importorskip("sklearn.datasets")
    want = _train(model, None, devices)
    for name, transform in TRANSFORMS.items():
        assert _train(model, transform, devices) == want, name
    monkeypatch.setenv(EAGER_DELETE_FLAG, "-1")  # the Executor keeps every value: same numbers
    assert _train(model, fluid.memory_optimize, devices, build_memory_optimize=True) == want
    assert _train(model, None, devices, build_memory_optimize=True) == want


def test_the_passes_actually_rewrite_a_training_program() -> None:
    main, _, loss = _mlp_program()
    n_ops = len(main.global_block().ops)
    fluid.memory_optimize(main)
    reuse = main.meta.memory_reuse
    assert sum(len(v) for v in reuse.values()) >= 5
    assert loss.name not in reuse and main.global_block().has_var(loss.name)
    fluid.release_memory(main)
    deletes = [op for op in main.global_block().ops if op.type == "delete_var"]
    assert len(deletes) >= 5 and len(main.global_block().ops) == n_ops + len(deletes)
    main.verify()


# ---------------------------------------------------------------------- peak memory

_BIG = 10 * 1024 * 1024  # float32 elements: 40 MiB, above the mmap threshold (see _malloc.py)


def _peak_rss_of(fn: Callable[[], Any]) -> int:
    """Peak resident bytes added while ``fn`` runs (the kernel's high-water mark, reset first)."""
    def status(key: str) -> int:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
        raise KeyError(key)

    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset VmHWM to the current RSS
    base = status("VmRSS")
    fn()
    return status("VmHWM") - base


@pytest.mark.skipif(not os.access("/proc/self/clear_refs", os.W_OK),
                    reason="needs Linux's resettable peak RSS")
def test_the_peak_memory_of_a_run_drops(monkeypatch) -> None:
    # A chain of 8 ops on 40 MiB tensors: without freeing, all 8 results live to the end.
    monkeypatch.setenv(EAGER_DELETE_FLAG, "-1")
    x = np.ones((1, _BIG), "float32")
    peaks = {}
    for name, transform in (("none", None), ("memory_optimize", fluid.memory_optimize),
                            ("release_memory", fluid.release_memory)):
        prog, _ = _chain(8, [-1, _BIG])
        if transform is not None:
            transform(prog)
        step = partial(fluid.Executor().run, prog, feed={"x": x}, fetch_list=["t8"],
                       scope=fluid.Scope())
        step()  # compile, warm up
        peaks[name] = min(_peak_rss_of(step) for _ in range(2))
    mib = {k: round(v / 2**20) for k, v in peaks.items()}
    assert peaks["none"] >= 7 * _BIG * 4, mib  # the measurement sees the 8 live results
    assert peaks["memory_optimize"] <= 0.5 * peaks["none"], mib
    assert peaks["release_memory"] <= 0.5 * peaks["none"], mib


def test_warnings_do_not_fire_on_a_plain_program() -> None:
    prog, _ = _chain(3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fluid.memory_optimize(prog)
        fluid.release_memory(prog)


def test_the_loss_gradient_keeps_its_name_for_the_data_parallel_scale(capsys) -> None:
    from parafluid.passes.grad_aggregation import loss_grad_op_index

    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data(name="x", shape=[4], dtype="float32")
        m = fluid.layers.mean(fluid.layers.fc(x, 2))
        loss = fluid.layers.scale(m, scale=2.0)  # m ([1]) dies here: scale_grad does not read it
        fluid.optimizer.SGD(0.1).minimize(loss)
    fluid.memory_optimize(main, print_log=True)
    assert "reuses" in capsys.readouterr().out  # the pass did rename things
    assert main.global_block().has_var(loss.name + "@GRAD")
    assert loss_grad_op_index(main, loss.name) is not None


def test_reduce_strategy_training_with_memory_optimize_is_bitwise_equal() -> None:
    pytest.importorskip("sklearn.datasets")

    def run(transform: Callable[[fluid.Program], None] | None) -> tuple[list, str]:
        main, startup, loss = _mlp_program()
        if transform is not None:
            transform(main)
        x, y = _data()
        x = x.reshape(-1, 8, 8)
        scope, exe = fluid.Scope(), fluid.Executor(fluid.CPUPlace())
        exe.run(startup, scope=scope)
        bs = fluid.BuildStrategy()
        bs.reduce_strategy = fluid.BuildStrategy.ReduceStrategy.Reduce
        bs.memory_optimize = True
        target = fluid.CompiledProgram(main).with_data_parallel(
            loss_name=loss.name, build_strategy=bs, places=fluid.cpu_places(2))
        losses = [np.asarray(exe.run(target, feed={"img": x[s:s + BATCH],
                                                   "label": y[s:s + BATCH]},
                                     fetch_list=[loss], scope=scope)[0]).tolist()
                  for s in range(0, 3 * BATCH, BATCH)]
        params = [np.asarray(scope.find_var(p.name).get_tensor()).tobytes()
                  for p in main.global_block().all_parameters()]
        return losses, hashlib.sha256(b"".join(params)).hexdigest()

    assert run(_both) == run(None)


def test_eager_deletion_drops_every_version_but_not_one_its_reader_overwrites() -> None:
    prog = fluid.Program()
    block = prog.global_block()
    _var(block, "x", is_data=True)
    for name in ("t", "u", "out"):
        _var(block, name)
    for src, dst in (("x", "t"), ("t", "u"), ("u", "t"), ("t", "t"), ("t", "out")):
        block.append_op("scale", inputs={"X": [src]}, outputs={"Out": [dst]},
                        attrs={"scale": 2.0})
    plan = compile_program(prog, ["x"], ["out"], "cpu")
    # t's first value goes after op 1 reads it (not at the end, when op 2 writes t again);
    # op 3 reads t and writes it: its reader is its overwriter, nothing to drop there
    assert plan.releases == {0: ["x"], 1: ["t"], 2: ["u"], 4: ["t"]}
    got, = _run(prog, ["out"], np.ones((1, 4), "float32"))
    assert got.tolist() == [[32.0] * 4]
