"""The programs of Fluid's readers: ``py_reader``, ``create_py_reader_by_data``,
``double_buffer`` and the non-iterable ``DataLoader`` put Fluid's reader ops in the startup
and main programs (create_py_reader; create_double_buffer_reader and read), which
``_inference_optimize`` and ``save_inference_model`` take out again."""

from __future__ import annotations

import numpy as np
import pytest

import parafluid as fluid
from parafluid.dtypes import VarType
from parafluid.ops.reader import ReaderHandle


def _reader_program(**kw):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        reader = fluid.layers.py_reader(capacity=2, shapes=[[-1, 3], [-1, 1]],
                                        dtypes=["float32", "int64"], lod_levels=[0, 0], **kw)
        x, label = fluid.layers.read_file(reader)
        out = fluid.layers.mean(fluid.layers.scale(x, 2.0))
    return main, startup, reader, out


def _types(program: fluid.Program) -> list[str]:
    return [op.type for op in program.global_block().ops]


def test_py_reader_programs_hold_fluids_reader_ops():
    main, startup, reader, _ = _reader_program()
    create = startup.global_block().ops[-1]
    assert create.type == "create_py_reader"
    assert create.input("blocking_queue") == ["lod_tensor_blocking_queue_0"]
    assert create.output("Out") == ["create_py_reader_0"]
    assert (create.attr("shape_concat"), create.attr("ranks"), create.attr("lod_levels")) == \
        ([-1, 3, -1, 1], [2, 2], [0, 0])
    assert _types(main) == ["create_double_buffer_reader", "read", "scale", "mean"]
    buffer, read = main.global_block().ops[:2]
    assert buffer.input("UnderlyingReader") == ["create_py_reader_0"]
    assert buffer.output("Out") == read.input("Reader") == ["double_buffer_0"]
    for name, persistable in (("create_py_reader_0", True), ("double_buffer_0", False)):
        var = main.global_block().var(name)
        assert var.type == VarType.READER and var.persistable is persistable
        desc = main.desc.block(0).var(name)
        assert desc.shapes() == [[-1, 3], [-1, 1]] and desc.dtypes() == ["float32", "int64"]
    main.verify()
    startup.verify()


def test_inference_optimize_drops_the_reader_ops_and_variables_as_fluid():
    main, _, _, _ = _reader_program()
    pruned = main._inference_optimize()
    assert _types(pruned) == ["scale", "mean"]
    assert not [v for v in pruned.global_block().vars.values() if v.type == VarType.READER]
    assert _types(main._inference_optimize(prune_read_op=False)) == _types(main)


@pytest.mark.parametrize("how, want", [
    ("single", ["read"]),
    ("decorated", ["create_double_buffer_reader", "read"]),
    ("named", ["create_double_buffer_reader", "read"]),
])
def test_double_buffering_and_names_follow_fluid(how, want):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        kw = {"name": "train"} if how == "named" else {"use_double_buffer": False}
        reader = fluid.layers.py_reader(capacity=2, shapes=[[-1, 3]], dtypes=["float32"],
                                        **kw)
        if how == "decorated":
            reader = fluid.layers.double_buffer(reader, place=fluid.CPUPlace())
        fluid.layers.read_file(reader)
    assert _types(main) == want
    if how == "named":
        assert startup.global_block().ops[-1].input("blocking_queue") == ["train_queue"]
        assert main.global_block().ops[0].input("UnderlyingReader") == ["train_reader"]
        assert main.global_block().ops[1].input("Reader") == ["train_double_buffer"]
    if how == "decorated":
        assert main.global_block().ops[0].attr("place") == "CPUPLACE"


def test_non_iterable_data_loader_programs_hold_fluids_reader_ops():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        x = fluid.layers.data(name="x", shape=[3], dtype="float32")
        fluid.layers.mean(x)
        fluid.io.DataLoader.from_generator(feed_list=[x], capacity=2, iterable=False,
                                           use_double_buffer=False)
    assert _types(startup) == ["create_py_reader"]
    assert _types(main) == ["read", "mean"]
    assert main.global_block().ops[0].input("Reader") == ["create_py_reader_0"]


def test_a_main_program_reads_with_or_without_its_startup_program_run_in_the_scope():
    main, startup, reader, out = _reader_program()
    batch = [np.arange(6, dtype="float32").reshape(2, 3), np.zeros((2, 1), "int64")]
    reader.decorate_tensor_provider(lambda: iter([batch, batch]))
    exe = fluid.Executor(fluid.CPUPlace())
    with_startup, without = fluid.Scope(), fluid.Scope()
    exe.run(startup, scope=with_startup)
    # the startup program's reader variable names the reader; the main program's ops
    # find it by their attrs either way
    handle = with_startup.find_var("create_py_reader_0").value
    assert handle == ReaderHandle(reader.reader_id, reader.name)
    reader.start()
    got = [exe.run(main, fetch_list=[out], scope=scope)[0] for scope in (with_startup, without)]
    reader.reset()
    np.testing.assert_allclose(got[0], [5.0])
    np.testing.assert_allclose(got[1], [5.0])


def test_reader_variables_are_not_saved_with_the_persistables(tmp_path):
    main, startup, reader, out = _reader_program()
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.Scope()
    exe.run(startup, scope=scope)
    for block in (main.global_block(), startup.global_block()):
        readers = [v for v in block.vars.values() if v.type in (VarType.READER, VarType.RAW)]
        assert readers and not any(fluid.io.is_persistable(v) for v in readers)
    fluid.io.save_persistables(exe, str(tmp_path), main, scope=scope)  # nothing to save


def test_read_refuses_to_drop_the_end_of_data_exception():
    main, _, reader, out = _reader_program()
    read = next(op for op in main.global_block().ops if op.type == "read")
    read._set_attr("throw_eof_exp", False)
    reader.decorate_tensor_provider(lambda: iter([]))
    reader.start()
    try:
        with pytest.raises(Exception, match="throw_eof_exp must be True"):
            fluid.Executor(fluid.CPUPlace()).run(main, fetch_list=[out], scope=fluid.Scope())
    finally:
        reader.reset()
