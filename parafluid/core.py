"""``fluid.core``: the names of Fluid's C++ core module that Python programs use.

Real Fluid programs write ``from paddle.fluid import core`` (or ``fluid.core.X``) for places,
tensors, device counts and a few global switches; those work here, with
``EOFException`` (the end of a reader's epoch) and the inference API (``AnalysisConfig``,
``NativeConfig``, ``create_paddle_predictor``, ``PaddleTensor``, ...: ``parafluid.inference_api``).

Example::

    import parafluid.core as core
    place = core.CUDAPlace(0) if core.is_compiled_with_cuda() else core.CPUPlace()
    n = core.get_cuda_device_count()
"""

from __future__ import annotations

from typing import Any

import torch

from . import framework
from .backward import get_grad_op_desc
from .compat import missing_attribute
from .dataio.legacy_reader import LoDTensorBlockingQueue
from .dtypes import VarType
from .engine.runtime import EnforceNotMet
from .flags import FLAGS, flag, known_flags, set_flag
from .framework import ProgramDesc
from .inference_api.predictor import (
    AnalysisConfig,
    AnalysisPredictor,
    NativeConfig,
    NativePaddlePredictor,
    PaddleBuf,
    PaddleDType,
    PaddlePlace,
    PaddlePredictor,
    PaddleTensor,
    ZeroCopyTensor,
    create_paddle_predictor,
)
from .ops.reader import EOFException
from .place import CPUPlace, CUDAPinnedPlace, CUDAPlace, Place, is_compiled_with_cuda
from .program_desc import AttrType
from .scope import (
    LodRankTable,
    LoDTensor,
    LoDTensorArray,
    Scope,
    SelectedRows,
    get_fetch_variable,
    set_feed_variable,
)

__all__ = ["CPUPlace", "CUDAPlace", "CUDAPinnedPlace", "LoDTensor", "LoDTensorArray",
           "LodRankTable", "Scope", "SelectedRows", "ProgramDesc", "AttrType", "Layer",
           "EOFException",
           "EnforceNotMet",
           "VarDesc", "get_cuda_device_count", "is_compiled_with_cuda", "globals",
           "_set_eager_deletion_mode", "op_support_gpu", "init_devices", "get_grad_op_desc",
           "kEmptyVarName", "kTempVarName", "kGradVarSuffix", "grad_var_suffix", "kZeroVarSuffix",
           "kControlDepVarName", "set_feed_variable", "get_fetch_variable", "Place"]
__all__ += ["LoDTensorBlockingQueue", "AnalysisConfig", "NativeConfig",
            "create_paddle_predictor", "PaddleTensor", "PaddleBuf", "PaddleDType",
            "PaddlePlace", "ZeroCopyTensor", "AnalysisPredictor", "NativePaddlePredictor",
            "PaddlePredictor"]


class VarDesc:
    """``core.VarDesc.VarType.FP32`` and friends."""

    VarType = VarType


class Layer:
    """Fluid's ``core.Layer``, the base its imperative layers' C++ side gave them:
    ``forward`` of the base computes nothing (an empty list of outputs)."""

    def forward(self, inputs: list[Any]) -> list[Any]:
        return []


def get_cuda_device_count() -> int:
    """The number of GPUs torch can see (0 without CUDA)."""
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


class _Globals:
    """Dict-like view of Fluid's flags (``core.globals()["FLAGS_x"] = v``): the store the
    runtime reads (``parafluid.flags``)."""

    def __getitem__(self, key: str) -> Any:
        return flag(key)

    def __setitem__(self, key: str, value: Any) -> None:
        set_flag(key, value)

    def __contains__(self, key: object) -> bool:
        return key in FLAGS

    def keys(self) -> list[str]:
        return known_flags()

    def get(self, key: str, default: Any = None) -> Any:
        return flag(key) if key in FLAGS else default


def globals() -> _Globals:  # noqa: A001  (Fluid's name)
    """Fluid's global flags, as the runtime reads them: setting ``FLAGS_rpc_deadline``,
    ``FLAGS_check_nan_inf``, ``FLAGS_eager_delete_tensor_gb`` or ``FLAGS_selected_gpus``
    here takes effect as the environment variable does; the other flags are accepted and
    change nothing (see ``parafluid.flags``).

    Example::

        fluid.core.globals()["FLAGS_rpc_deadline"] = 5000   # ms
    """
    return _Globals()


def _set_eager_deletion_mode(threshold_gb: float, fraction: float, fast: bool) -> None:
    """Fluid's switch of eager deletion: a negative ``threshold_gb`` turns it off; otherwise
    the executors free a temporary after its last use whatever the threshold (the fraction
    and the fast mode are recorded and change nothing)."""
    set_flag("FLAGS_eager_delete_tensor_gb", float(threshold_gb))
    set_flag("FLAGS_memory_fraction_of_eager_deletion", float(fraction))
    set_flag("FLAGS_fast_eager_deletion_mode", bool(fast))


def op_support_gpu(op_type: str) -> bool:
    """Whether ``op_type`` can run on a GPU here: every registered op can (its kernel is torch
    code) when torch sees one; without a GPU none, as Fluid built without CUDA."""
    from .ops.registry import has_op

    return is_compiled_with_cuda() and has_op(op_type)


def kEmptyVarName() -> str:  # noqa: N802  (Fluid's names)
    return framework.EMPTY_VAR_NAME


def kTempVarName() -> str:  # noqa: N802
    return framework.TEMP_VAR_NAME


def kGradVarSuffix() -> str:  # noqa: N802
    return framework.GRAD_VAR_SUFFIX


def grad_var_suffix() -> str:
    """``"@GRAD"``: what names a variable's gradient (Fluid's ``core.grad_var_suffix()``)."""
    return framework.GRAD_VAR_SUFFIX


def kZeroVarSuffix() -> str:  # noqa: N802
    return framework.ZERO_VAR_SUFFIX


def kControlDepVarName() -> str:  # noqa: N802
    return framework.CONTROL_DEP_VAR_PREFIX


def init_devices(*args: Any, **kwargs: Any) -> None:
    """Accepted: torch initializes devices on first use."""


def __getattr__(name: str) -> Any:
    return missing_attribute("core", name, __all__)
