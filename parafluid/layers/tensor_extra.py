"""More tensor layers of Fluid 1.6: spectral_norm, crop_tensor, shard_index,
merge_selected_rows, get_tensor_from_selected_rows, py_func."""

from __future__ import annotations

from typing import Any

from ..framework import Variable
from ..layer_helper import LayerHelper
from .attr_tensors import int_list_arg

__all__ = ["spectral_norm", "crop_tensor", "shard_index", "merge_selected_rows",
           "get_tensor_from_selected_rows", "py_func", "random_crop"]


def _check(layer: str, **args: Any) -> None:
    for arg, v in args.items():
        if not isinstance(v, Variable):
            raise TypeError(f"{layer}: {arg} must be a Variable, got {type(v).__name__}")


def _append(op_type: str, inputs: dict[str, Any], attrs: dict[str, Any], dtype: Any,
            name: str | None = None, stop_gradient: bool = False) -> Variable:
    helper = LayerHelper(op_type, name=name)
    out = helper.create_variable_for_type_inference(dtype, stop_gradient=stop_gradient)
    helper.append_op(op_type, inputs=inputs, outputs={"Out": [out]}, attrs=attrs)
    return out


def spectral_norm(weight: Variable, dim: int = 0, power_iters: int = 1, eps: float = 1e-12,
                  name: str | None = None) -> Variable:
    """``weight / sigma``, sigma its largest singular value (``weight`` seen as a matrix with
    ``dim`` first) estimated by ``power_iters`` power iterations from stored vectors ``U``,
    ``V`` (non-trainable parameters drawn from Normal(0, 1); as in Fluid 1.6 the op does not
    update them).

    Example::

        w = fluid.layers.data(name="w", shape=[8, 36], dtype="float32",
                              append_batch_size=False)
        w_sn = fluid.layers.spectral_norm(w, dim=0, power_iters=2)
    """
    from ..initializer import Normal
    from ..param_attr import ParamAttr

    _check("spectral_norm", weight=weight)
    shape = list(weight.shape or ())
    if len(shape) < 2 or not 0 <= dim < len(shape) or min(shape) <= 0:
        raise ValueError(f"spectral_norm: weight {weight.name!r} must be a known shape of "
                         f"rank >= 2 and dim must index it, got {shape} and dim={dim}")
    h = shape[dim]
    w = 1
    for i, d in enumerate(shape):
        if i != dim:
            w *= d
    helper = LayerHelper("spectral_norm", name=name)
    vectors = []
    for size in (h, w):
        vec = helper.create_parameter(ParamAttr(trainable=False), [size], weight.dtype,
                                      default_initializer=Normal(0.0, 1.0, 0))
        vec.stop_gradient = True
        vectors.append(vec)
    u, v = vectors
    return _append("spectral_norm", {"Weight": [weight], "U": [u], "V": [v]},
                   {"dim": int(dim), "power_iters": int(power_iters), "eps": float(eps)},
                   weight.dtype, name)


def crop_tensor(x: Variable, shape: Any = None, offsets: Any = None,
                name: str | None = None) -> Variable:
    """Crop ``x`` to ``shape`` at ``offsets`` (default 0): each is ints (``-1`` in ``shape``
    keeps the rest of a dim), ints and one-element int32 Variables (op inputs
    ``ShapeTensor`` / ``OffsetsTensor``), or one int32 Variable (``Shape`` / ``Offsets``)."""
    _check("crop_tensor", x=x)
    rank = len(x.shape or ())
    helper = LayerHelper("crop_tensor")
    inputs: dict[str, Any] = {"X": [x]}
    attrs: dict[str, Any] = {}
    if shape is None:
        raise ValueError("crop_tensor: shape must be given (ints or int32 Variables)")
    attr, extra = int_list_arg(helper, "crop_tensor", "shape", shape, "Shape", "ShapeTensor")
    inputs.update(extra)
    if attr is not None:
        attrs["shape"] = attr
    attr, extra = int_list_arg(helper, "crop_tensor", "offsets",
                               [0] * rank if offsets is None else offsets, "Offsets",
                               "OffsetsTensor")
    inputs.update(extra)
    if attr is not None:
        attrs["offsets"] = attr
    return _append("crop_tensor", inputs, attrs, x.dtype, name)


def shard_index(input: Variable, index_num: int, nshards: int, shard_id: int,
                ignore_value: int = -1) -> Variable:
    """Ids of shard ``shard_id`` (of ``nshards`` equal ranges over ``index_num``) become their
    offset in the shard; other ids become ``ignore_value``."""
    _check("shard_index", input=input)
    return _append("shard_index", {"X": [input]},
                   {"index_num": int(index_num), "nshards": int(nshards),
                    "shard_id": int(shard_id), "ignore_value": int(ignore_value)},
                   input.dtype, stop_gradient=True)


def merge_selected_rows(x: Variable, name: str | None = None) -> Variable:
    """A SelectedRows with each row once (repeated rows summed), e.g. of a sparse gradient."""
    _check("merge_selected_rows", x=x)
    return _append("merge_selected_rows", {"X": [x]}, {}, x.dtype, name, stop_gradient=True)


def get_tensor_from_selected_rows(x: Variable, name: str | None = None) -> Variable:
    """The value rows of a SelectedRows as a dense tensor ``[len(rows), ...]``."""
    _check("get_tensor_from_selected_rows", x=x)
    return _append("get_tensor_from_selected_rows", {"X": [x]}, {}, x.dtype, name,
                   stop_gradient=True)


def py_func(func: Any, x: Any, out: Any, backward_func: Any = None,
            skip_vars_in_backward_input: Any = None) -> Any:
    """Run ``func`` (Python) as an op: it gets the ``x`` variables as LoDTensors and returns
    one numpy array (or LoDTensor) per ``out`` variable, which the caller creates with its
    shape and dtype (``out=None``: no outputs, e.g. a debug print).

    ``backward_func`` gets the inputs, the outputs and the outputs' gradients (minus the
    variables in ``skip_vars_in_backward_input``) and returns one gradient per input.
    The functions stay in this process; the op holds their ids, as in Fluid.

    Example::

        def tanh(x):
            return np.tanh(np.array(x))

        def tanh_grad(y, dy):
            return np.array(dy) * (1 - np.square(np.array(y)))

        out = main.global_block().create_var(name="y", shape=[-1, 4], dtype="float32")
        fluid.layers.py_func(tanh, x, out, backward_func=tanh_grad,
                             skip_vars_in_backward_input=x)
    """
    from ..ops.py_func import register_callable

    xs = [] if x is None else ([x] if isinstance(x, Variable) else list(x))
    outs = [] if out is None else ([out] if isinstance(out, Variable) else list(out))
    for i, v in enumerate(xs + outs):
        _check("py_func", **{f"x[{i}]" if i < len(xs) else f"out[{i - len(xs)}]": v})
    for v in outs:
        if v.shape is None or v.dtype is None:
            raise ValueError(f"py_func: output {v.name!r} needs a shape and a dtype; create it "
                             "with block.create_var(name=..., shape=..., dtype=...)")
    skip = skip_vars_in_backward_input
    skip = [] if skip is None else ([skip] if isinstance(skip, Variable) else list(skip))
    skip_names = [v.name if isinstance(v, Variable) else str(v) for v in skip]
    known = {v.name for v in xs + outs}
    for n in skip_names:
        if n not in known:
            raise ValueError(f"py_func: skip_vars_in_backward_input names {n!r}, which is "
                             "neither an input nor an output")
    helper = LayerHelper("py_func")
    helper.append_op("py_func", inputs={"X": xs}, outputs={"Out": outs},
                     attrs={"forward_callable_id": register_callable(func),
                            "backward_callable_id": (register_callable(backward_func)
                                                     if backward_func is not None else -1),
                            "backward_skip_vars": skip_names})
    return out


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

    _check("random_crop", x=x)
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
