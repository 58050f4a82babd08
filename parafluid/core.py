"""``fluid.core``: the names of Fluid's C++ core module that Python programs use.

Real Fluid programs write ``from paddle.fluid import core`` (or ``fluid.core.X``) for places,
tensors, device counts and a few global switches; those work here, with
``EOFException`` (the end of a reader's epoch) and the inference API (``AnalysisConfig``,
``NativeConfig``, ``create_paddle_predictor``, ``PaddleTensor``, ...: ``parafluid.predictor``).

Example::

    import parafluid.core as core
    place = core.CUDAPlace(0) if core.is_compiled_with_cuda() else core.CPUPlace()
    n = core.get_cuda_device_count()
"""

from __future__ import annotations

from typing import Any

import torch

from .compat import missing_attribute
from .dtypes import VarType
from .legacy_reader import LoDTensorBlockingQueue
from .ops.reader import EOFException
from .place import CPUPlace, CUDAPinnedPlace, CUDAPlace, is_compiled_with_cuda
from .predictor import (
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
from .scope import LoDTensor, Scope, SelectedRows

__all__ = ["CPUPlace", "CUDAPlace", "CUDAPinnedPlace", "LoDTensor", "Scope", "SelectedRows",
           "VarDesc", "get_cuda_device_count", "is_compiled_with_cuda", "globals",
           "_set_eager_deletion_mode", "op_support_gpu", "init_devices", "EOFException"]
__all__ += ["LoDTensorBlockingQueue", "AnalysisConfig", "NativeConfig",
            "create_paddle_predictor", "PaddleTensor", "PaddleBuf", "PaddleDType",
            "PaddlePlace", "ZeroCopyTensor", "AnalysisPredictor", "NativePaddlePredictor",
            "PaddlePredictor"]


class VarDesc:
    """``core.VarDesc.VarType.FP32`` and friends."""

    VarType = VarType


def get_cuda_device_count() -> int:
    """The number of GPUs torch can see (0 without CUDA)."""
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


# Fluid's gflags that Python code reads or sets through core.globals(); the ones that change
# nothing here are accepted and kept so that scripts which set them run.
_FLAGS: dict[str, Any] = {
    "FLAGS_eager_delete_tensor_gb": 0.0,
    "FLAGS_fast_eager_deletion_mode": True,
    "FLAGS_memory_fraction_of_eager_deletion": 1.0,
    "FLAGS_fraction_of_gpu_memory_to_use": 0.92,
    "FLAGS_allocator_strategy": "auto_growth",
    "FLAGS_cudnn_deterministic": False,
    "FLAGS_benchmark": False,
    "FLAGS_use_mkldnn": False,
    "FLAGS_check_nan_inf": False,
    "FLAGS_cpu_deterministic": False,
}


class _Globals:
    """Dict-like view of the flags (``core.globals()["FLAGS_x"] = v``)."""

    def __getitem__(self, key: str) -> Any:
        if key not in _FLAGS:
            raise KeyError(f"core.globals(): unknown flag {key!r}; known: {sorted(_FLAGS)}")
        return _FLAGS[key]

    def __setitem__(self, key: str, value: Any) -> None:
        if key not in _FLAGS:
            raise KeyError(f"core.globals(): unknown flag {key!r}; known: {sorted(_FLAGS)}")
        _FLAGS[key] = value

    def __contains__(self, key: object) -> bool:
        return key in _FLAGS

    def keys(self) -> list[str]:
        return list(_FLAGS)

    def get(self, key: str, default: Any = None) -> Any:
        return _FLAGS.get(key, default)


def globals() -> _Globals:  # noqa: A001  (Fluid's name)
    """Fluid's global flags; setting one that has no effect here is accepted."""
    return _Globals()


def _set_eager_deletion_mode(threshold_gb: float, fraction: float, fast: bool) -> None:
    """Accepted for compatibility: parafluid's executors always free a temporary after its
    last use (Fluid's eager deletion with threshold 0)."""
    _FLAGS["FLAGS_eager_delete_tensor_gb"] = float(threshold_gb)
    _FLAGS["FLAGS_memory_fraction_of_eager_deletion"] = float(fraction)
    _FLAGS["FLAGS_fast_eager_deletion_mode"] = bool(fast)


def op_support_gpu(op_type: str) -> bool:
    """Every registered op runs on a GPU (its kernel is torch code)."""
    from .ops.registry import has_op

    return has_op(op_type)


def init_devices(*args: Any, **kwargs: Any) -> None:
    """Accepted: torch initializes devices on first use."""


def __getattr__(name: str) -> Any:
    return missing_attribute("core", name, __all__)
