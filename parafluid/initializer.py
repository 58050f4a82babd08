"""Initializers: each appends one op to the startup program that fills a parameter.

Example::

    attr = fluid.ParamAttr(initializer=fluid.initializer.Xavier(uniform=False))
    y = fluid.layers.fc(input=x, size=64, param_attr=attr)

``seed=0`` takes the startup program's ``random_seed`` (set it for reproducible runs).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from typing import Any

import numpy as np

from . import unique_name
from .dtypes import convert_dtype
from .ops.tensor import assign_value_attrs

__all__ = ["Initializer", "Constant", "Uniform", "Normal", "TruncatedNormal", "Xavier", "MSRA",
           "Bilinear", "BilinearInitializer",
           "NumpyArrayInitializer", "ConstantInitializer", "UniformInitializer",
           "NormalInitializer", "TruncatedNormalInitializer", "XavierInitializer",
           "MSRAInitializer", "init_on_cpu", "force_init_on_cpu"]

_force_init_on_cpu = False


def force_init_on_cpu() -> bool:
    """True inside ``init_on_cpu()``."""
    return _force_init_on_cpu


@contextlib.contextmanager
def init_on_cpu() -> Iterator[None]:
    """Constants created inside the block are filled on the CPU (``force_cpu``), as Fluid's
    learning-rate schedules ask for their counters.

    Example::

        with fluid.initializer.init_on_cpu():
            step = fluid.layers.create_global_var([1], 0.0, "float32", persistable=True)
    """
    global _force_init_on_cpu
    old, _force_init_on_cpu = _force_init_on_cpu, True
    try:
        yield
    finally:
        _force_init_on_cpu = old


class Initializer:
    """Base class: ``init(var, block)`` puts the filling op first in ``block`` (a startup
    block), as Fluid's initializers do: a startup program lists the initializers of the
    variables created last first."""

    def __call__(self, var: Any, block: Any) -> Any:
        raise NotImplementedError  # abstract

    @staticmethod
    def _fill(block: Any, op_type: str, var: Any, attrs: dict[str, Any]) -> Any:
        """Prepend the filling op; a float16 variable is filled as Fluid's initializers do:
        a float32 temporary, then a ``cast`` appended to the block."""
        if convert_dtype(var.dtype) != "float16":
            return block._prepend_op(op_type, outputs={"Out": [var]},
                                     attrs={**attrs, "dtype": var.dtype})
        tmp = block.create_var(name=unique_name.generate(f"{op_type}.{var.name}.tmp"),
                               shape=var.shape, dtype="float32", persistable=False)
        op = block._prepend_op(op_type, outputs={"Out": [tmp]},
                               attrs={**attrs, "dtype": "float32"})
        block.append_op(type="cast", inputs={"X": [tmp]}, outputs={"Out": [var]},
                        attrs={"in_dtype": "float32", "out_dtype": "float16"})
        return op

    @staticmethod
    def _seed(seed: int, block: Any) -> int:
        return seed if seed else block.program.random_seed

    @staticmethod
    def _fans(var: Any) -> tuple[int, int]:
        shape = var.shape
        if not shape:
            return 1, 1
        if len(shape) == 1:
            return shape[0], shape[0]
        if len(shape) == 2:
            return shape[0], shape[1]
        receptive = int(np.prod(shape[2:]))
        return shape[1] * receptive, shape[0] * receptive


class Constant(Initializer):
    def __init__(self, value: float = 0.0, force_cpu: bool = False) -> None:
        self.value = value
        self.force_cpu = force_cpu

    def __call__(self, var: Any, block: Any) -> Any:
        return self._fill(block, "fill_constant", var,
                          {"shape": list(var.shape), "value": float(self.value),
                           "force_cpu": self.force_cpu or _force_init_on_cpu})


class Uniform(Initializer):
    """Uniform in ``[low, high)``; with ``diag_num > 0`` the flat elements ``0, diag_step + 1,
    2 * (diag_step + 1), ...`` (``diag_num`` of them; the diagonal when ``diag_step`` is the
    row width) are set to ``diag_val``, as Fluid's initializer does."""

    def __init__(self, low: float = -1.0, high: float = 1.0, seed: int = 0, diag_num: int = 0,
                 diag_step: int = 0, diag_val: float = 1.0) -> None:
        if low >= high:
            raise ValueError(f"Uniform: low ({low}) must be < high ({high})")
        if diag_num < 0 or diag_step < 0:
            raise ValueError(f"Uniform: diag_num ({diag_num}) and diag_step ({diag_step}) "
                             "must be >= 0")
        self.low, self.high, self.seed = low, high, seed
        self.diag_num, self.diag_step, self.diag_val = diag_num, diag_step, diag_val

    def __call__(self, var: Any, block: Any) -> Any:
        attrs = {"shape": list(var.shape), "min": float(self.low),
                 "max": float(self.high), "seed": self._seed(self.seed, block)}
        if self.diag_num:
            numel = int(np.prod(var.shape))
            if (self.diag_num - 1) * (self.diag_step + 1) >= numel:
                raise ValueError(f"Uniform: diag_num {self.diag_num} with diag_step "
                                 f"{self.diag_step} reaches past the {numel} elements of "
                                 f"{var.name}")
            attrs.update(diag_num=int(self.diag_num), diag_step=int(self.diag_step),
                         diag_val=float(self.diag_val))
        return self._fill(block, "uniform_random", var, attrs)


class Normal(Initializer):
    op_type = "gaussian_random"

    def __init__(self, loc: float = 0.0, scale: float = 1.0, seed: int = 0) -> None:
        self.loc, self.scale, self.seed = loc, scale, seed

    def __call__(self, var: Any, block: Any) -> Any:
        return self._fill(block, self.op_type, var,
                          {"shape": list(var.shape), "mean": float(self.loc),
                           "std": float(self.scale), "seed": self._seed(self.seed, block)})


class TruncatedNormal(Normal):
    """Normal(loc, scale) with values beyond two scales redrawn."""

    op_type = "truncated_gaussian_random"


class Xavier(Initializer):
    """Glorot: uniform in ±sqrt(6/(fan_in+fan_out)) or normal with std sqrt(2/(fan_in+fan_out))."""

    def __init__(self, uniform: bool = True, fan_in: int | None = None,
                 fan_out: int | None = None, seed: int = 0) -> None:
        self.uniform, self.fan_in, self.fan_out, self.seed = uniform, fan_in, fan_out, seed

    def __call__(self, var: Any, block: Any) -> Any:
        f_in, f_out = self._fans(var)
        f_in = self.fan_in if self.fan_in is not None else f_in
        f_out = self.fan_out if self.fan_out is not None else f_out
        if self.uniform:
            limit = math.sqrt(6.0 / (f_in + f_out))
            return Uniform(-limit, limit, self.seed)(var, block)
        return Normal(0.0, math.sqrt(2.0 / (f_in + f_out)), self.seed)(var, block)


class MSRA(Initializer):
    """He/Kaiming: uniform in ±sqrt(6/fan_in) or normal with std sqrt(2/fan_in)."""

    def __init__(self, uniform: bool = True, fan_in: int | None = None, seed: int = 0) -> None:
        self.uniform, self.fan_in, self.seed = uniform, fan_in, seed

    def __call__(self, var: Any, block: Any) -> Any:
        f_in = self.fan_in if self.fan_in is not None else self._fans(var)[0]
        if self.uniform:
            limit = math.sqrt(6.0 / f_in)
            return Uniform(-limit, limit, self.seed)(var, block)
        return Normal(0.0, math.sqrt(2.0 / f_in), self.seed)(var, block)


class NumpyArrayInitializer(Initializer):
    """Fill with a given array (stored in the program as an ``assign_value`` op)."""

    def __init__(self, value: np.ndarray) -> None:
        self.value = np.asarray(value)

    def __call__(self, var: Any, block: Any) -> Any:
        if tuple(self.value.shape) != tuple(var.shape):
            raise ValueError(f"NumpyArrayInitializer: array shape {list(self.value.shape)} does "
                             f"not match {var.name} shape {list(var.shape)}")
        # as Fluid's: a float16 variable is assigned float32 values, then cast
        dtype = "float32" if convert_dtype(var.dtype) == "float16" else convert_dtype(var.dtype)
        attrs = {"shape": list(var.shape),
                 **assign_value_attrs(self.value.astype(dtype), dtype)}
        return self._fill(block, "assign_value", var, attrs)


class Bilinear(Initializer):
    """The bilinear-interpolation kernel for a ``conv2d_transpose`` filter ``[C, M, K, K]``
    that upsamples by ``K / 2``: every ``K x K`` slice holds the same tent weights."""

    def __call__(self, var: Any, block: Any) -> Any:
        shape = list(var.shape or ())
        if len(shape) != 4 or shape[2] != shape[3]:
            raise ValueError(f"Bilinear: {var.name} must be 4-D [C, M, K, K] with square "
                             f"kernels, got shape {shape}")
        size = shape[3]
        f = math.ceil(size / 2.0)
        c = (2 * f - 1 - f % 2) / (2.0 * f)
        tent = 1 - np.abs(np.arange(size) / f - c)
        kernel = np.outer(tent, tent)  # rows: y, columns: x
        return NumpyArrayInitializer(np.broadcast_to(kernel, shape))(var, block)


ConstantInitializer = Constant
BilinearInitializer = Bilinear
UniformInitializer = Uniform
NormalInitializer = Normal
TruncatedNormalInitializer = TruncatedNormal
XavierInitializer = Xavier
MSRAInitializer = MSRA
