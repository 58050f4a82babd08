"""Tensor layers of Fluid 1.6: shape, rank, sum, where, scatter, unstack, multiplex,
elementwise_mod / floordiv, reduce_all / reduce_any, clip_by_norm, the batch-size-like
random fills and sampling_id."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..framework import Variable
from ..layer_helper import LayerHelper

__all__ = ["shape", "rank", "sum", "where", "scatter", "unstack", "multiplex",
           "elementwise_mod", "elementwise_floordiv", "reduce_all", "reduce_any",
           "clip_by_norm", "uniform_random_batch_size_like", "gaussian_random_batch_size_like",
           "sampling_id", "size", "expand_as", "gather_nd", "scatter_nd_add", "scatter_nd",
           "unique", "unique_with_counts", "mean_iou", "strided_slice", "hash"]


def _check_var(layer: str, arg: str, x: Any) -> None:
    if not isinstance(x, Variable):
        raise TypeError(f"{layer}: {arg} must be a Variable, got {type(x).__name__}")


def _append(op_type: str, inputs: dict[str, Any], attrs: dict[str, Any], dtype: Any,
            name: str | None = None, act: str | None = None,
            stop_gradient: bool = False) -> Variable:
    helper = LayerHelper(op_type, name=name, act=act)
    out = helper.create_variable_for_type_inference(dtype, stop_gradient=stop_gradient)
    helper.append_op(op_type, inputs=inputs, outputs={"Out": [out]}, attrs=attrs)
    return helper.append_activation(out)


def shape(input: Variable) -> Variable:
    """The shape of ``input`` at run time, an int32 tensor of ``rank`` values.

    Example::

        batch = fluid.layers.slice(fluid.layers.shape(x), axes=[0], starts=[0], ends=[1])
    """
    _check_var("shape", "input", input)
    return _append("shape", {"Input": [input]}, {}, "int32", stop_gradient=True)


def rank(input: Variable) -> Variable:
    """The number of dims of ``input`` as an int32 tensor ``[1]`` (known at build time)."""
    from .tensor import assign

    _check_var("rank", "input", input)
    return assign(np.array([len(input.shape or ())], dtype="int32"))


def sum(x: Variable | list[Variable]) -> Variable:
    """Elementwise sum of a list of same-shape variables (one variable is returned copied).

    Example::

        total = fluid.layers.sum([loss_a, loss_b, loss_c])
    """
    xs = [x] if isinstance(x, Variable) else list(x)
    for i, v in enumerate(xs):
        _check_var("sum", f"x[{i}]", v)
    return _append("sum", {"X": xs}, {}, xs[0].dtype)


def where(condition: Variable) -> Variable:
    """Indices of the true elements of a bool tensor: int64 ``[count, rank]`` (Fluid 1.6's
    ``where``; no gradient).

    Example::

        idx = fluid.layers.where(fluid.layers.greater_than(x, y))
    """
    _check_var("where", "condition", condition)
    return _append("where", {"Condition": [condition]}, {}, "int64", stop_gradient=True)


def scatter(input: Variable, index: Variable, updates: Variable, name: str | None = None,
            overwrite: bool = True) -> Variable:
    """A copy of ``input`` whose rows ``index[i]`` are ``updates[i]`` (``overwrite=False``:
    the indexed rows become the sum of their updates).

    Example::

        out = fluid.layers.scatter(x, index=ids, updates=rows)
    """
    for arg, v in (("input", input), ("index", index), ("updates", updates)):
        _check_var("scatter", arg, v)
    return _append("scatter", {"X": [input], "Ids": [index], "Updates": [updates]},
                   {"overwrite": bool(overwrite)}, input.dtype, name)


def unstack(x: Variable, axis: int = 0, num: int | None = None) -> list[Variable]:
    """Split ``x`` along ``axis`` into ``num`` tensors with that dim removed.

    Example::

        rows = fluid.layers.unstack(x, axis=1)   # x: [N, 3, D] -> three [N, D]
    """
    _check_var("unstack", "x", x)
    shape = list(x.shape or ())
    if not -len(shape) <= axis < len(shape):
        raise ValueError(f"unstack: axis {axis} is out of range for {x.name!r} of shape {shape}")
    if num is None:
        num = shape[axis]
        if num <= 0:
            raise ValueError(f"unstack: dim {axis} of {x.name!r} {shape} is unknown; pass num")
    helper = LayerHelper("unstack")
    outs = [helper.create_variable_for_type_inference(x.dtype) for _ in range(num)]
    helper.append_op("unstack", inputs={"X": [x]}, outputs={"Y": outs},
                     attrs={"axis": int(axis), "num": int(num)})
    return outs


def multiplex(inputs: list[Variable], index: Variable) -> Variable:
    """Row ``i`` of the result is row ``i`` of ``inputs[index[i]]`` (``index``: int32
    ``[N, 1]``).

    Example::

        out = fluid.layers.multiplex(inputs=[x1, x2], index=choice)
    """
    if not isinstance(inputs, (list, tuple)) or len(inputs) < 2:
        raise ValueError("multiplex: inputs must be a list of at least 2 Variables")
    _check_var("multiplex", "index", index)
    return _append("multiplex", {"X": list(inputs), "Ids": [index]}, {}, inputs[0].dtype)


def _int_elementwise(op_type: str) -> Any:
    def layer(x: Variable, y: Variable, axis: int = -1, act: str | None = None,
              name: str | None = None) -> Variable:
        _check_var(op_type, "x", x)
        _check_var(op_type, "y", y)
        return _append(op_type, {"X": [x], "Y": [y]}, {"axis": axis}, x.dtype, name, act)
    layer.__name__ = op_type
    layer.__doc__ = (f"``{op_type}(x, y, axis=-1)`` with Fluid's broadcasting; C semantics "
                     "as Fluid 1.6 (remainder takes the sign of x, quotient truncated toward "
                     "zero); no gradient.")
    return layer


elementwise_mod = _int_elementwise("elementwise_mod")
elementwise_floordiv = _int_elementwise("elementwise_floordiv")


def _bool_reduce(op_type: str) -> Any:
    def layer(input: Variable, dim: int | list[int] | None = None, keep_dim: bool = False,
              name: str | None = None) -> Variable:
        _check_var(op_type, "input", input)
        dims = [0] if dim is None else ([dim] if isinstance(dim, int) else list(dim))
        return _append(op_type, {"X": [input]},
                       {"dim": dims, "keep_dim": keep_dim, "reduce_all": dim is None},
                       "bool", name, stop_gradient=True)
    layer.__name__ = op_type
    layer.__doc__ = (f"``{op_type}(input, dim=None, keep_dim=False)`` over a bool tensor; "
                     "``dim=None`` reduces every dim to shape [1].")
    return layer


reduce_all = _bool_reduce("reduce_all")
reduce_any = _bool_reduce("reduce_any")


def clip_by_norm(x: Variable, max_norm: float, name: str | None = None) -> Variable:
    """``x * max_norm / max(||x||_2, max_norm)``: rescale ``x`` when its L2 norm is above
    ``max_norm`` (no gradient, as in Fluid)."""
    _check_var("clip_by_norm", "x", x)
    return _append("clip_by_norm", {"X": [x]}, {"max_norm": float(max_norm)}, x.dtype, name)


def _random_like(op_type: str, input: Variable, shape: list[int], dtype: Any,
                 input_dim_idx: int, output_dim_idx: int, seed: int,
                 extra: dict[str, float]) -> Variable:
    from ..dtypes import convert_dtype

    _check_var(op_type, "input", input)
    dtype = convert_dtype(dtype)
    return _append(op_type, {"Input": [input]},
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
    _check_var("sampling_id", "x", x)
    return _append("sampling_id", {"X": [x]},
                   {"min": float(min), "max": float(max), "seed": int(seed)}, "int64",
                   stop_gradient=True)


def size(input: Variable) -> Variable:
    """The number of elements of ``input`` at run time, int64 ``[1]``."""
    _check_var("size", "input", input)
    return _append("size", {"Input": [input]}, {}, "int64", stop_gradient=True)


def expand_as(x: Variable, target_tensor: Variable, name: str | None = None) -> Variable:
    """Tile ``x`` to the shape of ``target_tensor`` (each dim a whole number of copies)."""
    _check_var("expand_as", "x", x)
    _check_var("expand_as", "target_tensor", target_tensor)
    return _append("expand_as", {"X": [x], "target_tensor": [target_tensor]}, {}, x.dtype,
                   name)


def gather_nd(input: Variable, index: Variable, name: str | None = None) -> Variable:
    """``out[i...] = input[index[i..., 0], ..., index[i..., k-1]]``: shape
    ``index.shape[:-1] + input.shape[k:]``.

    Example::

        picked = fluid.layers.gather_nd(x, index)   # x [3, 4, 5], index [2, 2] -> [2, 5]
    """
    _check_var("gather_nd", "input", input)
    _check_var("gather_nd", "index", index)
    return _append("gather_nd", {"X": [input], "Index": [index]}, {}, input.dtype, name)


def scatter_nd_add(ref: Variable, index: Variable, updates: Variable,
                   name: str | None = None) -> Variable:
    """A copy of ``ref`` with ``updates`` added at the ``index`` positions (``gather_nd``'s
    indexing; repeated positions add up)."""
    for arg, v in (("ref", ref), ("index", index), ("updates", updates)):
        _check_var("scatter_nd_add", arg, v)
    return _append("scatter_nd_add", {"X": [ref], "Index": [index], "Updates": [updates]}, {},
                   ref.dtype, name)


def scatter_nd(index: Variable, updates: Variable, shape: list[int],
               name: str | None = None) -> Variable:
    """``scatter_nd_add`` into zeros of ``shape`` (as Fluid composes it)."""
    from .tensor import fill_constant

    zeros = fill_constant([int(s) for s in shape], updates.dtype, 0.0)
    return scatter_nd_add(zeros, index, updates, name)


def _unique(op_type: str, x: Variable, dtype: Any) -> list[Variable]:
    from ..dtypes import convert_dtype

    _check_var(op_type, "x", x)
    dtype = convert_dtype(dtype)
    if dtype not in ("int32", "int64"):
        raise TypeError(f"{op_type}: dtype must be int32 or int64, got {dtype}")
    helper = LayerHelper(op_type)
    slots = ["Out", "Index"] + (["Count"] if op_type == "unique_with_counts" else [])
    outs = [helper.create_variable_for_type_inference(x.dtype if s == "Out" else dtype,
                                                      stop_gradient=True) for s in slots]
    helper.append_op(op_type, inputs={"X": [x]},
                     outputs={s: [v] for s, v in zip(slots, outs)}, attrs={"dtype": dtype})
    return outs


def unique(x: Variable, dtype: Any = "int32") -> tuple[Variable, Variable]:
    """The distinct values of a 1-D ``x`` in order of first occurrence, and for every element
    the position of its value among them: ``(out, index)``.

    Example::

        out, index = fluid.layers.unique(ids)   # [2, 3, 3, 1] -> [2, 3, 1], [0, 1, 1, 2]
    """
    out, index = _unique("unique", x, dtype)
    return out, index


def unique_with_counts(x: Variable, dtype: Any = "int32") -> tuple[Variable, Variable, Variable]:
    """``unique`` plus how often each distinct value occurs: ``(out, index, count)``."""
    out, index, count = _unique("unique_with_counts", x, dtype)
    return out, index, count


def mean_iou(input: Variable, label: Variable,
             num_classes: int) -> tuple[Variable, Variable, Variable]:
    """Mean intersection-over-union of predicted and true class ids (segmentation metric):
    ``(mean_iou [1], wrong [num_classes], correct [num_classes])``."""
    _check_var("mean_iou", "input", input)
    _check_var("mean_iou", "label", label)
    helper = LayerHelper("mean_iou")
    miou = helper.create_variable_for_type_inference("float32", stop_gradient=True)
    wrong = helper.create_variable_for_type_inference("int32", stop_gradient=True)
    correct = helper.create_variable_for_type_inference("int32", stop_gradient=True)
    helper.append_op("mean_iou", inputs={"Predictions": [input], "Labels": [label]},
                     outputs={"OutMeanIou": [miou], "OutWrong": [wrong],
                              "OutCorrect": [correct]},
                     attrs={"num_classes": int(num_classes)})
    return miou, wrong, correct


def strided_slice(input: Variable, axes: list[int], starts: list[int], ends: list[int],
                  strides: list[int]) -> Variable:
    """``input[start:end:stride]`` along each of ``axes`` (Python's slice rules: negative
    bounds count from the end, bounds clamp, a negative stride walks backwards).

    Example::

        rev = fluid.layers.strided_slice(x, axes=[1], starts=[-1], ends=[-1000], strides=[-1])
    """
    _check_var("strided_slice", "input", input)
    return _append("strided_slice", {"Input": [input]},
                   {"axes": [int(a) for a in axes], "starts": [int(s) for s in starts],
                    "ends": [int(e) for e in ends], "strides": [int(s) for s in strides],
                    "infer_flags": [1] * len(axes)}, input.dtype)


def hash(input: Variable, hash_size: int, num_hash: int = 1,
         name: str | None = None) -> Variable:
    """Hash each int32 or int64 row (last dimension) of ``input [..., k]`` with ``num_hash``
    seeds into ``[0, hash_size)``: int64 ``[..., num_hash, 1]`` (XXH64, as Fluid; e.g. feature
    hashing of n-grams).

    Example::

        bucket = fluid.layers.hash(ngram_ids, hash_size=100000, num_hash=2)
    """
    _check_var("hash", "input", input)
    return _append("hash", {"X": [input]}, {"num_hash": int(num_hash), "mod_by": int(hash_size)},
                   "int64", name, stop_gradient=True)
