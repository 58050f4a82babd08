"""The configs of Fluid's inference API: ``AnalysisConfig`` and ``NativeConfig``.

They say where a saved model is (a directory, or a program file and a parameters file) and
how to run it. Only the model files, ``enable_use_gpu`` / ``disable_gpu`` and
``switch_specify_input_names`` change what a predictor (``predictor.py``) does;
the settings for engines parafluid does not have are kept, read back, and do nothing.

Example::

    config = fluid.core.AnalysisConfig("model_dir")
    config.switch_ir_optim(True)      # accepted, no effect
    config.ir_optim()                 # True
"""

from __future__ import annotations

from enum import IntEnum
from typing import Any

__all__ = ["AnalysisConfig", "NativeConfig"]

class AnalysisConfig:
    """Where the model is and how to run it (Fluid's ``AnalysisConfig``).

    ``AnalysisConfig(model_dir)`` for a model saved with the default file names,
    ``AnalysisConfig(prog_file, params_file)`` for ``model_filename`` / ``params_filename``.
    Only the model files, ``enable_use_gpu`` / ``disable_gpu`` and
    ``switch_specify_input_names`` change what the predictor does; the other settings are
    kept and read back, and do nothing.
    """

    class Precision(IntEnum):
        Float32 = 0
        Int8 = 1
        Half = 2

    def __init__(self, model_dir_or_prog_file: str | None = None,
                 params_file: str | None = None) -> None:
        self._model_dir = ""
        self._prog_file = ""
        self._params_file = ""
        if model_dir_or_prog_file is not None:
            self.set_model(model_dir_or_prog_file, params_file)
        self._use_gpu = False
        self._device_id = 0
        self._memory_pool_mb = 100
        self._ir_optim = True
        self._ir_debug = False
        self._use_feed_fetch_ops = True
        self._specify_input_name = False
        self._cpu_threads = 1
        self._mkldnn = False
        self._tensorrt = False
        self._ngraph = False
        self._anakin = False
        self._memory_optim = False
        self._profile = False
        self._glog_info = True
        self._deleted_passes: list[str] = []

    # ---- the model
    def set_model(self, model_dir_or_prog_file: str, params_file: str | None = None) -> None:
        """``set_model(model_dir)`` or ``set_model(prog_file, params_file)``."""
        if params_file is None:
            self._model_dir, self._prog_file, self._params_file = model_dir_or_prog_file, "", ""
        else:
            self._model_dir = ""
            self._prog_file, self._params_file = model_dir_or_prog_file, params_file

    def set_prog_file(self, path: str) -> None:
        self._prog_file = path

    def set_params_file(self, path: str) -> None:
        self._params_file = path

    def model_dir(self) -> str:
        return self._model_dir

    def prog_file(self) -> str:
        return self._prog_file

    def params_file(self) -> str:
        return self._params_file

    def model_from_memory(self) -> bool:
        return False

    # ---- devices
    def enable_use_gpu(self, memory_pool_init_size_mb: int, device_id: int = 0) -> None:
        """Run on GPU ``device_id`` (the CPU, with a warning, when torch sees no GPU); the
        memory pool size is kept and does nothing (torch's caching allocator is used)."""
        self._use_gpu, self._memory_pool_mb, self._device_id = \
            True, int(memory_pool_init_size_mb), int(device_id)

    def disable_gpu(self) -> None:
        self._use_gpu = False

    def use_gpu(self) -> bool:
        return self._use_gpu

    def gpu_device_id(self) -> int:
        return self._device_id

    def memory_pool_init_size_mb(self) -> int:
        return self._memory_pool_mb

    def fraction_of_gpu_memory_for_pool(self) -> float:
        return 0.0

    # ---- inputs and outputs
    def switch_use_feed_fetch_ops(self, x: bool = True) -> None:
        """Kept for Fluid code: both ``run`` and the zero-copy calls work either way."""
        self._use_feed_fetch_ops = bool(x)

    def use_feed_fetch_ops_enabled(self) -> bool:
        return self._use_feed_fetch_ops

    def switch_specify_input_names(self, x: bool = True) -> None:
        """``run`` matches its inputs to the feed targets by ``PaddleTensor.name`` (else by
        position)."""
        self._specify_input_name = bool(x)

    def specify_input_name(self) -> bool:
        return self._specify_input_name

    # ---- settings that do nothing here
    def switch_ir_optim(self, x: bool = True) -> None:
        self._ir_optim = bool(x)

    def ir_optim(self) -> bool:
        return self._ir_optim

    def switch_ir_debug(self, x: bool = True) -> None:
        self._ir_debug = bool(x)

    def enable_mkldnn(self) -> None:
        self._mkldnn = True

    def mkldnn_enabled(self) -> bool:
        return self._mkldnn

    def set_mkldnn_cache_capacity(self, capacity: int = 0) -> None:
        pass

    def set_mkldnn_op(self, op_list: Any) -> None:
        pass

    def enable_quantizer(self) -> None:
        pass

    def set_cpu_math_library_num_threads(self, n: int) -> None:
        self._cpu_threads = int(n)

    def cpu_math_library_num_threads(self) -> int:
        return self._cpu_threads

    def enable_tensorrt_engine(self, workspace_size: int = 1 << 20, max_batch_size: int = 1,
                               min_subgraph_size: int = 3, precision_mode: Any = None,
                               use_static: bool = False, use_calib_mode: bool = True) -> None:
        self._tensorrt = True

    def tensorrt_engine_enabled(self) -> bool:
        return self._tensorrt

    def enable_ngraph(self) -> None:
        self._ngraph = True

    def ngraph_enabled(self) -> bool:
        return self._ngraph

    def enable_anakin_engine(self, *args: Any, **kwargs: Any) -> None:
        self._anakin = True

    def anakin_engine_enabled(self) -> bool:
        return self._anakin

    def enable_memory_optim(self) -> None:
        self._memory_optim = True

    def enable_memory_optim_enabled(self) -> bool:
        return self._memory_optim

    def enable_profile(self) -> None:
        self._profile = True

    def profile_enabled(self) -> bool:
        return self._profile

    def disable_glog_info(self) -> None:
        self._glog_info = False

    def glog_info_disabled(self) -> bool:
        return not self._glog_info

    def delete_pass(self, name: str) -> None:
        self._deleted_passes.append(name)

    def to_native_config(self) -> NativeConfig:
        native = NativeConfig()
        native.model_dir, native.prog_file, native.param_file = \
            self._model_dir, self._prog_file, self._params_file
        native.use_gpu, native.device = self._use_gpu, self._device_id
        native.specify_input_name = self._specify_input_name
        return native

    def _files(self) -> tuple[str, str | None, str | None]:
        if self._prog_file or self._params_file:
            return "", self._prog_file or None, self._params_file or None
        return self._model_dir, None, None


class NativeConfig:
    """Fluid's ``NativeConfig``: the same predictor, configured by attributes (``model_dir``
    or ``prog_file`` + ``param_file``, ``use_gpu``, ``device``, ``specify_input_name``;
    ``fraction_of_gpu_memory`` is kept and does nothing)."""

    def __init__(self) -> None:
        self.model_dir = ""
        self.prog_file = ""
        self.param_file = ""
        self.use_gpu = False
        self.device = 0
        self.fraction_of_gpu_memory = -1.0
        self.specify_input_name = False
        self._cpu_threads = 1

    def set_cpu_math_library_num_threads(self, n: int) -> None:
        self._cpu_threads = int(n)

    def cpu_math_library_num_threads(self) -> int:
        return self._cpu_threads

    def _files(self) -> tuple[str, str | None, str | None]:
        if self.prog_file or self.param_file:
            return "", self.prog_file or None, self.param_file or None
        return self.model_dir, None, None
