"""Layers that draw random numbers shaped by another variable:
``uniform_random_batch_size_like``, ``gaussian_random_batch_size_like``, ``sampling_id`` and
``random_crop`` (ops in ``parafluid/ops/random.py``)."""

from __future__ import annotations

from typing import Any

from ..framework import Variable
from ..layer_helper import LayerHelper
from .common import append_one, check_var, check_vars

__all__ = ["uniform_random_batch_size_like", "gaussian_random_batch_size_like", "sampling_id",
           "random_crop"]


def _random_like(op_type: str, input: Variable, shape: list[int], dtype: Any,
                 input_dim_idx: int, output_dim_idx: int, seed: int,
                 extra: dict[str, float]) -> Variable:
    from ..dtypes import convert_dtype

    check_var(op_type, "input", input)
    dtype = convert_dtype(dtype)
    return append_one(op_type, {"Input": [input]},
                   {"shape": [int(s) for s in shape], "dtype": dtype,
                    "input_dim_idx": int(input_dim_idx), "output_dim_idx": int(output_dim_idx),
                    "seed": int(seed), **extra}, dtype, stop_gradient=True)


def uniform_random_batch_size_like(input: Variable, shape: list[int], dtype: Any = "float32",
                                   input_dim_idx: int = 0, output_dim_idx: int = 0,
                                   min: float = -1.0, max: float = 1.0,
                                   seed: int = 0) -> Variable:
    """Uniform ``[min, max)`` noise of ``shape``, dim ``output_dim_idx`` taken from
    ``input``'s dim ``input_dim_idx`` at run time (the batch size)."""
    return _random_like("uniform_random_batch_size_like", input, shape, dtype, input_dim_idx,
                        output_dim_idx, seed, {"min": float(min), "max": float(max)})


def gaussian_random_batch_size_like(input: Variable, shape: list[int], input_dim_idx: int = 0,
                                    output_dim_idx: int = 0, mean: float = 0.0,
                                    std: float = 1.0, seed: int = 0,
                                    dtype: Any = "float32") -> Variable:
    """Normal(mean, std) noise of ``shape`` with the batch dim taken from ``input``.

    Example::

        z = fluid.layers.gaussian_random_batch_size_like(img, shape=[-1, 100])
    """
    return _random_like("gaussian_random_batch_size_like", input, shape, dtype, input_dim_idx,
                        output_dim_idx, seed, {"mean": float(mean), "std": float(std)})


def sampling_id(x: Variable, min: float = 0.0, max: float = 1.0, seed: int = 0,
                dtype: Any = "float32") -> Variable:
    """Sample one class id per row of probabilities ``x [N, K]``: int64 ``[N]``.

    ``dtype`` is accepted for compatibility; the ids are int64 (what Fluid's kernel writes).
    """
    check_var("sampling_id", "x", x)
    return append_one("sampling_id", {"X": [x]},
                   {"min": float(min), "max": float(max), "seed": int(seed)}, "int64",
                   stop_gradient=True)


def random_crop(x: Variable, shape: list[int], seed: Any = None) -> Variable:
    """A random crop of size ``shape`` from the trailing dims of each instance of ``x``
    (data augmentation); no gradient. ``seed`` is an int (default: drawn from numpy) or an
    int64 Variable; the seed variable advances on every run.

    Example::

        patch = fluid.layers.random_crop(img, shape=[3, 24, 24])   # img [N, 3, 32, 32]
    """
    import numpy as np

    from .. import unique_name
    from ..initializer import Constant

    check_vars("random_crop", x=x)
    helper = LayerHelper("random_crop")
    if seed is None:
        seed = int(np.random.randint(-65536, 65536))
    attrs: dict[str, Any] = {"shape": [int(s) for s in shape]}
    if isinstance(seed, int):
        attrs["startup_seed"] = seed
        seed_var = helper.create_global_variable(
            name=unique_name.generate("random_crop_seed"), shape=[1], dtype="int64",
            persistable=True)
        seed_var.stop_gradient = True
        helper.set_variable_initializer(seed_var, Constant(float(seed)))
    elif isinstance(seed, Variable):
        seed_var = seed
    else:
        raise TypeError(f"random_crop: seed must be an int or a Variable, "
                        f"got {type(seed).__name__}")
    out = helper.create_variable_for_type_inference(x.dtype, stop_gradient=True)
    helper.append_op("random_crop", inputs={"X": [x], "Seed": [seed_var]},
                     outputs={"Out": [out], "SeedOut": [seed_var]}, attrs=attrs)
    return out
