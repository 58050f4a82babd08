"""Op table: save / save_combine / load_combine (parafluid's variables file, never pickle)
and fetch; and programs holding Fluid's feed/fetch ops, which the Executor checks against
the run's feed dict and fetch list as Fluid's does, then runs by name."""

import atexit
import os
import shutil
import tempfile

import numpy as np
import pytest
import torch

import parafluid as fluid
from parafluid.dtypes import VarType
from parafluid.ops import get_op_def
from parafluid.serialization import program_from_dict, program_to_dict
from parafluid.tensor_file import read_tensors, write_tensors
from parafluid.testing import OpCase, check_forward, check_op, rand, run_op

DIR = tempfile.mkdtemp(prefix="parafluid-io-ops-")
atexit.register(shutil.rmtree, DIR, True)
A, B = rand(3, 4, seed=1), rand(2, seed=2)
LOAD_PATH = os.path.join(DIR, "combined")
write_tensors(LOAD_PATH, {"out_out_0": torch.from_numpy(A), "out_out_1": torch.from_numpy(B),
                          "other": torch.zeros(1)})


def saved(path, want, fp16=False):
    def check(got, attrs):
        tensors, _ = read_tensors(path)
        assert sorted(tensors) == sorted(want)
        for name, value in want.items():
            t = tensors[name]
            assert t.dtype == (torch.float16 if fp16 else torch.float64)
            np.testing.assert_allclose(t.double().numpy(), value, rtol=1e-3 if fp16 else 0)
    return check


CASES = [
    OpCase("save", {"X": A}, attrs={"file_path": os.path.join(DIR, "one")}, outputs=[],
           check=saved(os.path.join(DIR, "one"), {"x_0": A}), id="save"),
    OpCase("save", {"X": A}, attrs={"file_path": os.path.join(DIR, "one16"),
                                    "save_as_fp16": True}, outputs=[],
           check=saved(os.path.join(DIR, "one16"), {"x_0": A}, fp16=True), id="save-fp16"),
    OpCase("save_combine", {"X": [A, B]}, attrs={"file_path": os.path.join(DIR, "two")},
           outputs=[], check=saved(os.path.join(DIR, "two"), {"x_0": A, "x_1": B}),
           id="save_combine"),
    OpCase("load_combine", {}, attrs={"file_path": LOAD_PATH}, out_counts={"Out": 2},
           ref=lambda attrs: {"Out": [A, B]}, id="load_combine"),
    OpCase("load_combine", {}, attrs={"file_path": LOAD_PATH, "load_as_fp16": True},
           out_counts={"Out": 1}, ref=lambda attrs: {"Out": [A.astype("float16")]},
           atol=1e-3, rtol=1e-3, id="load_combine-fp16"),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_op(case):
    if case.op == "load_combine":  # as in Fluid, the shapes come from the file at run time
        check_forward(case)
        return
    check_op(case)


def test_feed_and_fetch_kernels_read_and_write_a_holder_column():
    x = torch.ones(2)
    out = get_op_def("feed").kernel({"X": [torch.zeros(1), x]}, {"col": 1}, None)["Out"]
    assert out is x
    holder = get_op_def("fetch").kernel({"X": x}, {"col": 1}, None)["Out"]
    assert holder[1] is x
    with pytest.raises(ValueError, match="no column 2"):
        get_op_def("feed").kernel({"X": [x]}, {"col": 2}, None)


def test_save_refuses_to_overwrite_when_told_not_to():
    path = os.path.join(DIR, "keep")
    run_op(OpCase("save", {"X": A}, attrs={"file_path": path}))
    with pytest.raises(RuntimeError, match="exists and overwrite=False"):
        run_op(OpCase("save", {"X": B}, attrs={"file_path": path, "overwrite": False}))


def test_load_combine_names_the_missing_variables():
    with pytest.raises(RuntimeError, match=r"holds no variables \['out_out_2'\]"):
        run_op(OpCase("load_combine", {}, attrs={"file_path": LOAD_PATH},
                      out_counts={"Out": 3}))


def test_save_combine_then_load_combine_round_trip_in_programs():
    path = os.path.join(DIR, "round")
    main, scope = fluid.Program(), fluid.Scope()
    block = main.global_block()
    w = block.create_var(name="w", shape=[3, 4], dtype="float64", persistable=True)
    b = block.create_var(name="b", shape=[2], dtype="float64", persistable=True)
    block.append_op("save_combine", inputs={"X": [w, b]}, attrs={"file_path": path})
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(main, feed={"w": A, "b": B}, scope=scope)
    load = fluid.Program()
    lb = load.global_block()
    outs = [lb.create_var(name=n, shape=s, dtype="float64", persistable=True)
            for n, s in (("w", [3, 4]), ("b", [2]))]
    lb.append_op("load_combine", outputs={"Out": outs}, attrs={"file_path": path})
    got = exe.run(load, fetch_list=["w", "b"], scope=fluid.Scope())
    np.testing.assert_array_equal(got[0], A)
    np.testing.assert_array_equal(got[1], B)


# ---------------------------------------------------------------- feed/fetch ops


def fluid_style_program():
    """y = relu(x) + z, with feed and fetch ops the way Fluid's io writes them."""
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        x = fluid.layers.data("x", [3], dtype="float64")
        z = fluid.layers.data("z", [3], dtype="float64")
        y = fluid.layers.elementwise_add(fluid.layers.relu(x), z)
    block = main.global_block()
    feed = block.create_var(name="feed", type=VarType.FEED_MINIBATCH, persistable=True)
    fetch = block.create_var(name="fetch", type=VarType.FETCH_LIST, persistable=True)
    for col, name in enumerate(["x", "z"]):
        block._prepend_op("feed", inputs={"X": [feed]}, outputs={"Out": [name]},
                          attrs={"col": col})
    block.append_op("fetch", inputs={"X": [y]}, outputs={"Out": [fetch]}, attrs={"col": 0})
    return main, y.name


def test_executor_runs_a_program_holding_feed_and_fetch_ops():
    main, y = fluid_style_program()
    main.verify()
    x, z = rand(2, 3, seed=3), rand(2, 3, seed=4)
    exe = fluid.Executor(fluid.CPUPlace())
    for program in (main, program_from_dict(program_to_dict(main))):
        out, = exe.run(program, feed={"x": x, "z": z}, fetch_list=[y], scope=fluid.Scope())
        np.testing.assert_array_equal(out, np.maximum(x, 0) + z)
    # the ops stay in the user's program
    assert [op.type for op in main.global_block().ops].count("feed") == 2


def test_feed_and_fetch_ops_are_checked_against_the_run():
    main, y = fluid_style_program()
    exe = fluid.Executor(fluid.CPUPlace())
    x = rand(2, 3, seed=3)
    with pytest.raises(ValueError, match=r"feed op \(col 1\) writes 'z', which the feed dict "
                                         "does not have"):
        exe.run(main, feed={"x": x}, fetch_list=[y], scope=fluid.Scope())
    with pytest.raises(ValueError, match="fetch op .* reads .* which fetch_list does not have"):
        exe.run(main, feed={"x": x, "z": x}, fetch_list=["x"], scope=fluid.Scope())
    with pytest.raises(ValueError, match=r"fetch ops do not match fetch_list: \['x'\]"):
        exe.run(main, feed={"x": x, "z": x}, fetch_list=[y, "x"], scope=fluid.Scope())


def test_a_compiled_program_holding_feed_and_fetch_ops_runs_data_parallel(monkeypatch):
    monkeypatch.setenv("CPU_NUM", "2")
    main, y = fluid_style_program()
    x, z = rand(4, 3, seed=5), rand(4, 3, seed=6)
    exe = fluid.Executor(fluid.CPUPlace())
    compiled = fluid.CompiledProgram(main).with_data_parallel(places=fluid.cpu_places(2))
    out, = exe.run(compiled, feed={"x": x, "z": z}, fetch_list=[y], scope=fluid.Scope())
    np.testing.assert_array_equal(out, np.maximum(x, 0) + z)
    with pytest.raises(ValueError, match="which the feed dict does not have"):
        exe.run(fluid.CompiledProgram(main).with_data_parallel(places=fluid.cpu_places(2)),
                feed={"x": x}, fetch_list=[y], scope=fluid.Scope())
