"""parafluid: Fluid 1.x static graphs on PyTorch tensors.

Write ``import parafluid as fluid`` and Fluid 1.x code runs unchanged::

    import numpy as np
    import parafluid as fluid

    x = fluid.layers.data(name="x", shape=[13], dtype="float32")
    y = fluid.layers.data(name="y", shape=[1], dtype="float32")
    cost = fluid.layers.square_error_cost(input=fluid.layers.fc(input=x, size=1), label=y)
    avg_cost = fluid.layers.mean(cost)
    fluid.optimizer.SGD(learning_rate=0.01).minimize(avg_cost)

    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(fluid.default_startup_program())
"""

# ruff: noqa: I001  (public re-exports grouped by topic, not sorted)
from __future__ import annotations

from . import _malloc  # noqa: F401  (process-wide allocator settings; see _malloc.py)

from . import (  # noqa: F401
    backward,
    clip,
    initializer,
    layers,
    ops,  # noqa: F401  (registers every op type)
    optimizer,
    regularizer,
    unique_name,
)
from .backward import append_backward, gradients
from .dtypes import VarType
from .executor import Executor
from .framework import (  # noqa: F401
    convert_np_dtype_to_dtype_,
    require_version,
    Operator,
    OpRole,
    Parameter,
    Program,
    Variable,
    default_main_program,
    default_startup_program,
    in_dygraph_mode,
    name_scope,
    program_guard,
)
from .parallel import BuildStrategy, CompiledProgram, ExecutionStrategy, ParallelExecutor
from .param_attr import ParamAttr, WeightNormParamAttr
from .placement import device_guard, place_guard
from .place import (
    CPUPlace,
    CUDAPinnedPlace,
    CUDAPlace,
    cpu_places,
    cuda_pinned_places,
    cuda_places,
    is_compiled_with_cuda,
)
from .engine.runtime import OpRunError
from .scope import LoDTensor, LoDTensorArray, Scope, global_scope, scope_guard
from . import io  # noqa: F401  (fluid.io: checkpoints, inference models, data loading)
from . import compiler, core, lod, metrics, nets  # noqa: F401  (Fluid 1.6 spellings)
from .data_layer import data, embedding, one_hot
from . import input  # noqa: F401, A004  (fluid.input: one_hot, embedding)
from .lod import create_lod_tensor, create_random_int_lodtensor
from .dataio.data_feeder import DataFeeder
from .dataio.dataloader import DataLoader
from .dataio.reader import batch
from . import distributed  # noqa: F401  (fluid.distributed.env())
from . import transpiler  # noqa: F401  (fluid.transpiler)
from .transpiler import DistributeTranspiler, DistributeTranspilerConfig
from .transpiler import memory_optimize, release_memory
from . import profiler  # noqa: F401  (fluid.profiler)
from . import install_check, log_helper, reader  # noqa: F401  (Fluid 1.6 module paths)
from .io import load, save
from .dataio.data_feed_desc import DataFeedDesc
from .dataio.dataset import DatasetFactory, InMemoryDataset, QueueDataset
from . import data_feed_desc, data_feeder, dataset  # noqa: F401  (Fluid 1.6 module paths)
from .version import __version__  # noqa: F401  (parafluid.__version__)
from . import contrib, dygraph, dygraph_grad_clip, incubate  # noqa: F401  (Fluid 1.6)
from . import average, evaluator  # noqa: F401  (Fluid 1.6 module paths)
from . import op  # noqa: F401  (fluid.op.Operator)
from . import trainer_factory  # noqa: F401  (fluid.trainer_factory.FetchHandlerMonitor)
# Fluid 1.6 star-imports the imperative layers at the top (fluid.Layer, fluid.FC, ...)
# without listing them in its __all__.
from .dygraph.layers import Layer  # noqa: F401
from .dygraph.checkpoint import load_dygraph, save_dygraph  # noqa: F401
from .dygraph.nn import (  # noqa: F401
    FC, BatchNorm, BilinearTensorProduct, Conv2D, Conv2DTranspose, Conv3D, Conv3DTranspose,
    Embedding, GroupNorm, GRUUnit, LayerNorm, NCE, Pool2D, PRelu, SpectralNorm, TreeConv,
)

Tensor = LoDTensor  # Fluid 1.6's other name for a LoDTensor

__all__ = [
    "Program", "Operator", "Parameter", "Variable", "program_guard", "default_main_program",
    "default_startup_program", "name_scope", "in_dygraph_mode", "OpRole",
    "Executor", "Scope", "global_scope", "scope_guard", "LoDTensor", "OpRunError",
    "CPUPlace", "CUDAPlace", "CUDAPinnedPlace", "cpu_places", "cuda_places",
    "is_compiled_with_cuda", "ParamAttr", "VarType", "append_backward", "gradients",
    "layers", "optimizer", "initializer", "regularizer", "clip", "backward", "unique_name",
    "ParallelExecutor", "CompiledProgram", "ExecutionStrategy", "BuildStrategy",
    "io", "DataFeeder", "DataLoader", "batch",
    "distributed", "transpiler", "DistributeTranspiler", "DistributeTranspilerConfig",
    "memory_optimize", "release_memory", "profiler", "place_guard", "device_guard",
    "compiler", "core", "metrics", "nets", "data", "embedding", "create_lod_tensor",
    "create_random_int_lodtensor", "cuda_pinned_places", "LoDTensorArray", "one_hot", "save",
    "load", "install_check", "log_helper", "reader", "WeightNormParamAttr", "contrib",
    "dygraph", "dygraph_grad_clip", "incubate", "DataFeedDesc", "DatasetFactory",
    "InMemoryDataset", "QueueDataset", "dataset", "Tensor", "require_version", "average",
    "evaluator", "input",
]


def __getattr__(name: str) -> object:
    # NOTE: Fluid names parafluid leaves out (the inference package, RecordIO)
    # import fine and fail on use with a NotProvidedError saying what to use instead.
    from .compat import missing_attribute

    return missing_attribute("fluid", name, __all__)
