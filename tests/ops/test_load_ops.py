"""The load op (layers.load): a variable's value read from a file fluid.io.save_vars or
fluid.save wrote, checked against the file's manifest, never unpickled."""

import os

import numpy as np
import pytest

import parafluid as fluid


def _trained(tmp_path):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data(name="x", shape=[3], dtype="float32")
        fluid.layers.fc(input=x, size=2, param_attr=fluid.ParamAttr(name="w"),
                        bias_attr=fluid.ParamAttr(name="b"))
    scope = fluid.Scope()
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup, scope=scope)
    w = np.asarray(scope.find_var("w").get_tensor()).copy()
    b = np.asarray(scope.find_var("b").get_tensor()).copy()
    with fluid.scope_guard(scope):
        fluid.io.save_params(exe, str(tmp_path / "ckpt"), main)
        fluid.save(main, str(tmp_path / "model"))
    return w, b


def _load_program(path, fp16=None):
    prog = fluid.Program()
    with fluid.program_guard(prog, fluid.Program()):
        w = fluid.layers.create_tensor(dtype="float32", name="w", persistable=True)
        b = fluid.layers.create_tensor(dtype="float32", name="b", persistable=True)
        fluid.layers.load(w, path, load_as_fp16=fp16)
        fluid.layers.load(b, path)
    return prog


@pytest.mark.parametrize("file", ["ckpt/__variables__.safetensors", "model.pdparams"])
def test_load_reads_what_save_vars_and_fluid_save_wrote(tmp_path, file):
    w, b = _trained(tmp_path)
    prog = _load_program(str(tmp_path / file))
    assert [op.type for op in prog.global_block().ops] == ["load", "load"]
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.Scope()
    got_w, got_b = exe.run(prog, fetch_list=["w", "b"], scope=scope)
    np.testing.assert_array_equal(got_w, w)
    np.testing.assert_array_equal(got_b, b)
    # persistable outputs land in the scope, where a startup program loads parameters
    np.testing.assert_array_equal(np.asarray(scope.find_var("w").get_tensor()), w)


def test_load_as_fp16_and_a_file_with_one_entry(tmp_path):
    w, _ = _trained(tmp_path)
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        fluid.layers.create_parameter([3, 2], "float32", name="w")
    scope = fluid.Scope()
    exe = fluid.Executor(fluid.CPUPlace())
    with fluid.scope_guard(scope):
        scope.var("w").get_tensor().set(w, fluid.CPUPlace())
        fluid.io.save_vars(exe, str(tmp_path / "one"), main, vars=["w"], filename="only")
    prog = fluid.Program()
    with fluid.program_guard(prog, fluid.Program()):
        other = fluid.layers.create_tensor(dtype="float16", name="renamed")
        fluid.layers.load(other, str(tmp_path / "one" / "only"), load_as_fp16=True)
    got, = fluid.Executor(fluid.CPUPlace()).run(prog, fetch_list=[other], scope=fluid.Scope())
    assert got.dtype == np.float16
    np.testing.assert_array_equal(got, w.astype(np.float16))


def test_load_errors_name_the_variable_and_the_file(tmp_path):
    _trained(tmp_path)
    path = str(tmp_path / "ckpt" / "__variables__.safetensors")
    prog = fluid.Program()
    with fluid.program_guard(prog, fluid.Program()):
        fluid.layers.load(fluid.layers.create_tensor(dtype="float32", name="nope"), path)
    exe = fluid.Executor(fluid.CPUPlace())
    with pytest.raises(Exception, match=r"holds no variable 'nope'; it holds \['b', 'w'\]"):
        exe.run(prog, scope=fluid.Scope())
    with open(path, "r+b") as f:  # damage the last bytes of the data
        f.seek(-2, os.SEEK_END)
        f.write(b"\xff\xfe")
    with pytest.raises(Exception, match=r"fails its checksum|not a valid safetensors"):
        exe.run(_load_program(path), scope=fluid.Scope())
    with pytest.raises(ValueError, match=r"load: file_path must be a non-empty path"):
        fluid.layers.load(fluid.layers.create_tensor(dtype="float32"), "")
