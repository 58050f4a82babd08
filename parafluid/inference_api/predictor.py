"""Fluid's inference API (``fluid.core.AnalysisConfig``, ``create_paddle_predictor``, ...).

A predictor loads a model written by ``fluid.io.save_inference_model`` into a scope of its
own and runs the same program the Executor runs (``load_inference_model`` + ``Executor``);
there is no separate inference engine. Two ways to call it, as in Fluid 1.6:

- ``predictor.run([PaddleTensor, ...]) -> [PaddleTensor, ...]``: inputs in the order of the
  model's feed targets (or by ``PaddleTensor.name`` with
  ``config.switch_specify_input_names(True)``), outputs in the order of its fetch targets;
- zero-copy: ``predictor.get_input_tensor(name).copy_from_cpu(array)``,
  ``predictor.zero_copy_run()``, ``predictor.get_output_tensor(name).copy_to_cpu()``.

Numpy arrays go in without a copy (a C-contiguous array becomes the fed tensor's memory;
``PaddleTensor(array, copy=False)`` keeps the caller's array) and each output array is the
one copy the run makes of its result.

The configs are in ``config.py``: settings for engines parafluid does
not have (GPU memory pools, IR optimization passes, MKLDNN, TensorRT, Anakin, nGraph,
profiling, glog) are accepted, remembered and read back, and change nothing.
``enable_use_gpu`` runs the model on that GPU when torch sees one, else on the CPU with a
warning (as Fluid built without CUDA did).

Example::

    config = fluid.core.AnalysisConfig("model_dir")
    config.disable_gpu()
    predictor = fluid.core.create_paddle_predictor(config)
    out, = predictor.run([fluid.core.PaddleTensor(x)])
    print(out.as_ndarray())
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from enum import IntEnum
from typing import Any

import numpy as np
import torch

from ..dtypes import convert_dtype
from ..scope import LoDTensor, Scope, ScopeVariable
from .config import AnalysisConfig, NativeConfig

__all__ = ["AnalysisConfig", "NativeConfig", "PaddleTensor", "PaddleBuf", "PaddleDType",
           "PaddlePlace", "ZeroCopyTensor", "AnalysisPredictor", "NativePaddlePredictor",
           "PaddlePredictor", "create_paddle_predictor"]


class PaddleDType(IntEnum):
    """The element types of the inference API."""

    FLOAT32 = 0
    INT64 = 1
    INT32 = 2
    UINT8 = 3


class PaddlePlace(IntEnum):
    """Where a zero-copy tensor lives (``ZeroCopyTensor.place()``)."""

    UNK = -1
    CPU = 0
    GPU = 1


_NP_OF = {PaddleDType.FLOAT32: np.float32, PaddleDType.INT64: np.int64,
          PaddleDType.INT32: np.int32, PaddleDType.UINT8: np.uint8}
_DTYPE_OF = {"float32": PaddleDType.FLOAT32, "int64": PaddleDType.INT64,
             "int32": PaddleDType.INT32, "uint8": PaddleDType.UINT8}


def _paddle_dtype(dtype: Any, where: str) -> PaddleDType:
    try:
        name = convert_dtype(dtype)
    except TypeError:
        name = None
    if name not in _DTYPE_OF:
        raise TypeError(f"{where}: the inference API takes float32, int64, int32 or uint8 "
                        f"data, got {dtype}; convert with .astype('float32') (or 'int64')")
    return _DTYPE_OF[name]


class PaddleBuf:
    """A flat buffer of numbers (``PaddleTensor.data``).

    ``PaddleBuf(n)``: ``n`` zero bytes; ``PaddleBuf(list_of_floats)``: float32 values;
    ``PaddleBuf(ndarray)``: the array's values, flattened (a view when possible).
    """

    def __init__(self, data: Any = 0) -> None:
        self._array = _as_flat(data, "PaddleBuf")

    @property
    def array(self) -> np.ndarray:
        """The values as a flat numpy array (no copy)."""
        return self._array

    def resize(self, length: int) -> None:
        """Make the buffer ``length`` bytes (new bytes are zero; old values are kept)."""
        raw = np.zeros(int(length), np.uint8)
        old = self._array.view(np.uint8)
        n = min(len(old), len(raw))
        raw[:n] = old[:n]
        self._array = raw.view(self._array.dtype) if length % self._array.itemsize == 0 else raw

    def reset(self, data: Any) -> None:
        """Replace the values."""
        self._array = _as_flat(data, "PaddleBuf.reset")

    def empty(self) -> bool:
        return self._array.size == 0

    def length(self) -> int:
        """The size in bytes."""
        return int(self._array.nbytes)

    def float_data(self) -> list[float]:
        return self._array.astype(np.float32).tolist()

    def int64_data(self) -> list[int]:
        return self._array.astype(np.int64).tolist()

    def int32_data(self) -> list[int]:
        return self._array.astype(np.int32).tolist()

    def tolist(self, dtype: str = "float32") -> list[Any]:
        return self._array.astype(dtype).tolist()

    def __repr__(self) -> str:
        return f"PaddleBuf({self._array.size} x {self._array.dtype})"


def _as_flat(data: Any, where: str) -> np.ndarray:
    if isinstance(data, (int, np.integer)) and not isinstance(data, bool):
        if data < 0:
            raise ValueError(f"{where}: a length must be >= 0, got {data}")
        return np.zeros(int(data), np.uint8)
    if isinstance(data, np.ndarray):
        _paddle_dtype(data.dtype, where)
        return data.reshape(-1)
    if isinstance(data, (list, tuple)):
        return np.asarray(data, dtype=np.float32).reshape(-1)  # Fluid's list overload: floats
    raise TypeError(f"{where}: expected a length, a list of floats or a numpy array, got "
                    f"{type(data).__name__}")


class PaddleTensor:
    """A named input or output of ``predictor.run``.

    Args:
        data: a numpy array (float32, int64, int32 or uint8), or None for an empty tensor to
            fill through ``name`` / ``shape`` / ``dtype`` / ``data`` / ``lod``.
        name: the feed target it is for (read with ``switch_specify_input_names(True)``).
        lod: sequence offsets per level (``[[0, 2, 5]]``: two sequences of 2 and 3 rows).
        copy: copy ``data`` (True, as in Fluid); False keeps the caller's array.

    Example::

        t = fluid.core.PaddleTensor(np.ones([2, 4], "float32"))
        t.as_ndarray().shape      # (2, 4)
    """

    def __init__(self, data: np.ndarray | None = None, name: str = "",
                 lod: Sequence[Sequence[int]] | None = None, copy: bool = True) -> None:
        self.name = name
        self.lod: list[list[int]] = [list(level) for level in lod] if lod else []
        if data is None:
            self.shape: list[int] = []
            self.dtype = PaddleDType.FLOAT32
            self.data = PaddleBuf(0)
            return
        if not isinstance(data, np.ndarray):
            raise TypeError(f"PaddleTensor: data must be a numpy array, got "
                            f"{type(data).__name__}")
        self.dtype = _paddle_dtype(data.dtype, "PaddleTensor")
        self.shape = list(data.shape)
        arr = np.array(data, order="C", copy=True) if copy else np.ascontiguousarray(data)
        self.data = PaddleBuf(arr)

    def as_ndarray(self) -> np.ndarray:
        """The values as a numpy array of ``shape`` (a view of ``data``)."""
        arr = self.data.array
        want = _NP_OF[PaddleDType(self.dtype)]
        if arr.dtype != want:
            if arr.nbytes % np.dtype(want).itemsize:
                raise ValueError(f"PaddleTensor {self.name!r}: its buffer of {arr.nbytes} "
                                 f"bytes does not hold {np.dtype(want).name} values")
            arr = arr.view(want) if arr.dtype == np.uint8 else arr.astype(want)
        shape = [int(d) for d in self.shape]
        if int(np.prod(shape)) != arr.size:
            raise ValueError(f"PaddleTensor {self.name!r}: shape {shape} needs "
                             f"{int(np.prod(shape))} values, the buffer holds {arr.size}")
        return arr.reshape(shape)

    def __repr__(self) -> str:
        return (f"PaddleTensor(name={self.name!r}, shape={self.shape}, "
                f"dtype={PaddleDType(self.dtype).name}, lod={self.lod})")


# ---------------------------------------------------------------------- predictors


class ZeroCopyTensor:
    """An input or output of a predictor, filled and read without ``PaddleTensor``s."""

    def __init__(self, name: str, predictor: AnalysisPredictor, is_input: bool) -> None:
        self._name = name
        self._predictor = predictor
        self._is_input = is_input
        self._shape: list[int] | None = None
        self._lod: list[list[int]] = []

    def name(self) -> str:
        return self._name

    def reshape(self, shape: Sequence[int]) -> None:
        """Declare the input's shape (checked against the array ``copy_from_cpu`` gets)."""
        if not self._is_input:
            raise RuntimeError(f"ZeroCopyTensor {self._name!r}: reshape() is for inputs; an "
                               "output's shape comes from the run")
        self._shape = [int(d) for d in shape]

    def copy_from_cpu(self, data: np.ndarray) -> None:
        """Set the input's values (kept as the fed tensor's memory when C-contiguous)."""
        if not self._is_input:
            raise RuntimeError(f"ZeroCopyTensor {self._name!r} is an output; use "
                               "copy_to_cpu()")
        if not isinstance(data, np.ndarray):
            raise TypeError(f"ZeroCopyTensor {self._name!r}: copy_from_cpu takes a numpy "
                            f"array, got {type(data).__name__}")
        _paddle_dtype(data.dtype, f"ZeroCopyTensor {self._name!r}")
        if self._shape is not None and int(np.prod(self._shape)) == data.size:
            data = data.reshape(self._shape)
        self._predictor._inputs[self._name] = (np.ascontiguousarray(data), self._lod)

    def copy_to_cpu(self) -> np.ndarray:
        """The output's values after ``zero_copy_run`` (the input's, for an input)."""
        store = self._predictor._inputs if self._is_input else self._predictor._outputs
        if self._name not in store:
            what = "copy_from_cpu()" if self._is_input else "zero_copy_run()"
            raise RuntimeError(f"ZeroCopyTensor {self._name!r} has no value yet; call {what} "
                               "first")
        return store[self._name][0]

    def set_lod(self, lod: Sequence[Sequence[int]]) -> None:
        self._lod = [list(level) for level in lod]
        if self._name in self._predictor._inputs:
            self._predictor._inputs[self._name] = (self._predictor._inputs[self._name][0],
                                                   self._lod)

    def lod(self) -> list[list[int]]:
        store = self._predictor._inputs if self._is_input else self._predictor._outputs
        return store[self._name][1] if self._name in store else self._lod

    def shape(self) -> list[int]:
        store = self._predictor._inputs if self._is_input else self._predictor._outputs
        if self._name in store:
            return list(store[self._name][0].shape)
        return list(self._shape or [])

    def type(self) -> PaddleDType:
        store = self._predictor._inputs if self._is_input else self._predictor._outputs
        if self._name in store:
            return _paddle_dtype(store[self._name][0].dtype, self._name)
        var = self._predictor._program.global_block()._find_var_recursive(self._name)
        return _paddle_dtype(var.dtype, self._name)

    def place(self) -> PaddlePlace:
        return PaddlePlace.CPU


class AnalysisPredictor:
    """Runs a saved inference model (what ``create_paddle_predictor`` returns)."""

    def __init__(self, config: AnalysisConfig | NativeConfig, _share: Any = None) -> None:
        from ..executor import Executor
        from ..place import CPUPlace, CUDAPlace

        self._config = config
        use_gpu = config.use_gpu() if isinstance(config, AnalysisConfig) else config.use_gpu
        device_id = config.gpu_device_id() if isinstance(config, AnalysisConfig) \
            else config.device
        if use_gpu and not torch.cuda.is_available():
            warnings.warn("create_paddle_predictor: the config asks for a GPU but torch sees "
                          "none; running on the CPU", RuntimeWarning, stacklevel=3)
            use_gpu = False
        self._exe = Executor(CUDAPlace(device_id) if use_gpu else CPUPlace())
        if _share is not None:
            self._scope, self._program, self._feeds, self._fetches = _share
        else:
            self._scope = Scope()
            self._program, self._feeds, self._fetches = _load(config, self._exe, self._scope)
        self._inputs: dict[str, tuple[np.ndarray, list[list[int]]]] = {}
        self._outputs: dict[str, tuple[np.ndarray, list[list[int]]]] = {}

    # ---- the PaddleTensor API
    def run(self, inputs: Sequence[PaddleTensor], batch_size: int = -1) -> list[PaddleTensor]:
        """Run the model on ``inputs`` (one per feed target); return one PaddleTensor per
        fetch target."""
        if not isinstance(inputs, (list, tuple)) or \
                not all(isinstance(t, PaddleTensor) for t in inputs):
            raise TypeError("predictor.run: inputs must be a list of PaddleTensor, got "
                            f"{inputs!r}")
        if len(inputs) != len(self._feeds):
            raise ValueError(f"predictor.run: the model takes {len(self._feeds)} inputs "
                             f"({', '.join(self._feeds)}), got {len(inputs)}")
        feed: dict[str, Any] = {}
        by_name = self._specify_input_name()
        for i, t in enumerate(inputs):
            name = t.name if by_name else self._feeds[i]
            if name not in self._feeds:
                raise ValueError(f"predictor.run: input {i} is named {name!r}, which is not "
                                 f"a feed target of the model ({', '.join(self._feeds)})")
            feed[name] = _fed(t.as_ndarray(), t.lod)
        return [PaddleTensor(arr, name=name, lod=lod, copy=False)
                for name, (arr, lod) in zip(self._fetches, self._execute(feed))]

    # ---- the zero-copy API
    def get_input_names(self) -> list[str]:
        return list(self._feeds)

    def get_output_names(self) -> list[str]:
        return list(self._fetches)

    def get_input_tensor(self, name: str) -> ZeroCopyTensor:
        if name not in self._feeds:
            raise ValueError(f"get_input_tensor: {name!r} is not an input of the model; its "
                             f"inputs are {self._feeds}")
        return ZeroCopyTensor(name, self, is_input=True)

    def get_output_tensor(self, name: str) -> ZeroCopyTensor:
        if name not in self._fetches:
            raise ValueError(f"get_output_tensor: {name!r} is not an output of the model; its "
                             f"outputs are {self._fetches}")
        return ZeroCopyTensor(name, self, is_input=False)

    def get_input_tensor_shape(self) -> dict[str, list[int]]:
        block = self._program.global_block()
        return {n: list(block._find_var_recursive(n).shape) for n in self._feeds}

    def zero_copy_run(self) -> None:
        """Run the model on the inputs set with ``copy_from_cpu``."""
        missing = [n for n in self._feeds if n not in self._inputs]
        if missing:
            raise RuntimeError(f"zero_copy_run: no value for input(s) {missing}; call "
                               "get_input_tensor(name).copy_from_cpu(array) for each")
        feed = {n: _fed(*self._inputs[n]) for n in self._feeds}
        self._outputs = dict(zip(self._fetches, self._execute(feed)))

    def clone(self) -> AnalysisPredictor:
        """A predictor sharing this one's loaded parameters (one per thread)."""
        return type(self)(self._config, _share=(self._scope, self._program, self._feeds,
                                                self._fetches))

    def program(self) -> Any:
        """The loaded inference program."""
        return self._program

    # ---- internals
    def _specify_input_name(self) -> bool:
        c = self._config
        return c.specify_input_name() if isinstance(c, AnalysisConfig) else c.specify_input_name

    def _execute(self, feed: dict[str, Any]) -> list[tuple[np.ndarray, list[list[int]]]]:
        outs = self._exe.run(self._program, feed=feed, fetch_list=list(self._fetches),
                             scope=self._scope, return_numpy=False)
        results = []
        for o in outs:  # LoDTensors holding the run's own copies: viewed, not copied again
            value = o.value.detach()
            results.append((value.cpu().numpy() if value.device.type != "cpu" else
                            value.numpy(), o.lod()))
        return results


NativePaddlePredictor = AnalysisPredictor
PaddlePredictor = AnalysisPredictor


def _fed(arr: np.ndarray, lod: list[list[int]]) -> Any:
    if not lod:
        return arr
    holder = ScopeVariable("<input>")
    holder.value = torch.from_numpy(np.ascontiguousarray(arr))
    holder.lod = [list(level) for level in lod]
    return LoDTensor(holder)


def _load(config: AnalysisConfig | NativeConfig, exe: Any, scope: Scope
          ) -> tuple[Any, list[str], list[str]]:
    from ..io import MODEL_FILENAME, load_inference_model

    model_dir, prog_file, params_file = config._files()
    if prog_file is None and params_file is None:
        if not model_dir:
            raise ValueError("create_paddle_predictor: the config names no model; give "
                             "AnalysisConfig(model_dir) or AnalysisConfig(prog_file, "
                             "params_file), or set_model(...)")
        if not os.path.isdir(model_dir):
            raise FileNotFoundError(f"create_paddle_predictor: model_dir {model_dir!r} is not a "
                                    "directory; give the directory save_inference_model wrote")
        if not os.path.isfile(os.path.join(model_dir, MODEL_FILENAME)):
            raise FileNotFoundError(
                f"create_paddle_predictor: {model_dir!r} holds no {MODEL_FILENAME} (it holds "
                f"{sorted(os.listdir(model_dir))}); if the model was saved with "
                "model_filename/params_filename, use AnalysisConfig(prog_file, params_file)")
        return _loaded(load_inference_model(model_dir, exe, scope=scope))
    if prog_file is None or params_file is None:
        raise ValueError(f"create_paddle_predictor: give both the program file and the "
                         f"parameters file, got prog_file={prog_file!r}, "
                         f"params_file={params_file!r}")
    for what, path in (("prog_file", prog_file), ("params_file", params_file)):
        if not os.path.isfile(path):
            raise FileNotFoundError(f"create_paddle_predictor: {what} {path!r} is not a file")
    prog_file, params_file = os.path.abspath(prog_file), os.path.abspath(params_file)
    # NOTE: absolute names: os.path.join(dirname, abs) is abs, so the two may differ in dir
    return _loaded(load_inference_model(os.path.dirname(prog_file), exe,
                                        model_filename=prog_file, params_filename=params_file,
                                        scope=scope))


def _loaded(result: list[Any]) -> tuple[Any, list[str], list[str]]:
    program, feeds, fetches = result
    return program, list(feeds), [v.name for v in fetches]


def create_paddle_predictor(config: AnalysisConfig | NativeConfig) -> AnalysisPredictor:
    """A predictor over the model ``config`` names.

    Example::

        predictor = fluid.core.create_paddle_predictor(fluid.core.AnalysisConfig("model"))
    """
    if not isinstance(config, (AnalysisConfig, NativeConfig)):
        raise TypeError(f"create_paddle_predictor: config must be an AnalysisConfig or a "
                        f"NativeConfig, got {type(config).__name__}")
    return AnalysisPredictor(config)
