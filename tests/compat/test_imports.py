"""Fluid 1.6 import spellings, and helpful errors for what parafluid does not provide."""

import importlib

import numpy as np
import pytest

import parafluid as fluid
from parafluid.compat import NOT_PROVIDED, NotProvided, NotProvidedError


@pytest.mark.parametrize("statement", [
    "from parafluid import compiler",
    "from parafluid.compiler import CompiledProgram, BuildStrategy, ExecutionStrategy",
    "import parafluid.core as core",
    "from parafluid import core",
    "from parafluid.core import CPUPlace, CUDAPlace, LoDTensor, Scope",
    "from parafluid.layers.io import data",
    "from parafluid.layers import device",
    "from parafluid.initializer import init_on_cpu",
    "from parafluid import nets, metrics",
    "from parafluid.optimizer import DecayedAdagrad, Adamax, Ftrl, Lamb, AdamaxOptimizer",
    "from parafluid import create_lod_tensor, create_random_int_lodtensor",
    "from parafluid import dygraph",
    "from parafluid.layers import lstm",  # imports; fails on use (below)
])
def test_spelling_imports(statement):
    exec(statement, {})  # noqa: S102


def test_compiler_and_core_are_the_real_objects():
    from parafluid import compiler, core

    assert compiler.CompiledProgram is fluid.CompiledProgram
    assert core.CPUPlace is fluid.CPUPlace and core.LoDTensor is fluid.LoDTensor
    assert importlib.import_module("parafluid.core") is fluid.core
    assert core.VarDesc.VarType.FP32 == "float32"
    assert core.is_compiled_with_cuda() == fluid.is_compiled_with_cuda()
    assert isinstance(core.get_cuda_device_count(), int)
    # as Fluid's: True only where a GPU can run it
    assert core.op_support_gpu("mul") == core.is_compiled_with_cuda()
    assert not core.op_support_gpu("no_such_op")


def test_core_flags_are_dict_like_and_reject_unknown_names():
    from parafluid import core

    core._set_eager_deletion_mode(0.0, 1.0, True)
    flags = core.globals()
    assert flags["FLAGS_eager_delete_tensor_gb"] == 0.0
    flags["FLAGS_benchmark"] = True
    assert core.globals()["FLAGS_benchmark"] is True
    flags["FLAGS_benchmark"] = False
    with pytest.raises(KeyError, match="unknown flag 'FLAGS_nope'"):
        flags["FLAGS_nope"] = 1


def test_fluid_data_keeps_the_full_shape():
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        img = fluid.data(name="img", shape=[None, 1, 28, 28], dtype="float32")
        words = fluid.data(name="words", shape=[None], dtype="int64", lod_level=1)
        fixed = fluid.layers.io.data(name="fixed", shape=[3])
    assert img.shape == (-1, 1, 28, 28) and img.is_data and img.stop_gradient
    assert words.shape == (-1,) and words.lod_level == 1
    assert fixed.shape == (-1, 3)  # layers.data still prepends the batch dimension
    with pytest.raises(TypeError, match="shape must be a list"):
        fluid.data(name="bad", shape=3)


def test_init_on_cpu_forces_constants_to_cpu():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        with fluid.initializer.init_on_cpu():
            assert fluid.initializer.force_init_on_cpu()
            fluid.layers.create_global_var([1], 0.0, "float32", persistable=True, name="step")
        fluid.layers.create_global_var([1], 0.0, "float32", persistable=True, name="other")
    assert not fluid.initializer.force_init_on_cpu()
    forced = {op.outputs["Out"][0]: op.attrs["force_cpu"] for op in startup.global_block().ops}
    assert forced == {"step": True, "other": False}


def test_layers_device_get_places():
    """As Fluid 1.6: a PLACE_LIST variable, filled by the get_places op when the program
    runs (the program runs; its op lists the places)."""
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        places = fluid.layers.device.get_places(2, "CPU")
    assert places.type == fluid.core.VarDesc.VarType.PLACE_LIST
    fluid.Executor(fluid.CPUPlace()).run(main)
    with pytest.raises(ValueError, match="'CPU', 'CUDA' or 'AUTO'"):
        fluid.layers.device.get_places(1, "TPU")


def test_create_lod_tensor_and_random_int_lodtensor():
    t = fluid.create_lod_tensor(np.arange(10, dtype="float32").reshape(5, 2), [[2, 3]],
                                fluid.CPUPlace())
    assert t.lod() == [[0, 2, 5]] and t.recursive_sequence_lengths() == [[2, 3]]
    words = fluid.create_lod_tensor([[1, 2], [3, 4, 5]], [[2, 3]], fluid.CPUPlace())
    assert np.array(words).tolist() == [[1], [2], [3], [4], [5]]
    assert np.array(words).dtype == np.int64
    two_level = fluid.create_lod_tensor(np.zeros((5, 1)), [[1, 2], [2, 1, 2]], None)
    assert two_level.lod() == [[0, 1, 3], [0, 2, 3, 5]]
    r = fluid.create_random_int_lodtensor([[2, 3]], [1], fluid.CPUPlace(), low=0, high=9)
    arr = np.array(r)
    assert arr.shape == (5, 1) and arr.dtype == np.int64 and 0 <= arr.min() <= arr.max() <= 9
    with pytest.raises(ValueError, match="ends at 4 but must cover the 5 rows"):
        fluid.create_lod_tensor(np.zeros((5, 1)), [[1, 3]], None)
    with pytest.raises(ValueError, match="lengths \\[2, 3\\]"):
        fluid.create_lod_tensor([[1, 2], [3, 4, 5]], [[3, 2]], None)


@pytest.mark.parametrize("key", sorted(NOT_PROVIDED))
def test_not_provided_names_fail_on_use_with_what_to_do(key):
    where, name = key.split(".", 1)
    module = {"fluid": fluid, "core": fluid.core, "layers": fluid.layers, "io": fluid.io,
              "optimizer": fluid.optimizer, "metrics": fluid.metrics, "clip": fluid.clip,
              "Executor": fluid.Executor, "CompiledProgram": fluid.CompiledProgram,
              "contrib": fluid.contrib, "dygraph": fluid.dygraph,
              "dygraph_grad_clip": fluid.dygraph_grad_clip,
              "pslib": fluid.incubate.fleet.parameter_server.pslib,
              "transpiler": fluid.transpiler, "op": fluid.op}[where]
    obj = module
    for part in name.split("."):  # transpiler.collective.GradAllReduce
        obj = getattr(obj, part)  # no error yet: scripts import these at the top
    assert isinstance(obj, NotProvided), \
        f"{key} is provided now: remove its NOT_PROVIDED entry in parafluid/compat.py"
    instead = NOT_PROVIDED[key][1]
    with pytest.raises(NotProvidedError, match="is not part of parafluid") as info:
        obj()
    assert instead in str(info.value) and "docs/fluid_compat.md" in str(info.value)
    with pytest.raises(NotProvidedError):
        obj.anything  # noqa: B018
    with pytest.raises(NotProvidedError):
        with obj:
            pass


def test_unknown_name_is_an_attribute_error_with_suggestions():
    with pytest.raises(AttributeError, match="did you mean.*Executor.*docs/fluid_compat.md"):
        fluid.Executer  # noqa: B018
    with pytest.raises(AttributeError, match="layers.sequence_pol is not provided.*"
                                             "sequence_pool"):
        fluid.layers.sequence_pol  # noqa: B018
    assert not hasattr(fluid, "definitely_not_a_fluid_name")


