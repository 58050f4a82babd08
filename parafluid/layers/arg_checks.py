"""The argument checks of Fluid 1.6's layer functions, applied where users call them.

Fluid's layers refuse, when the program is built, an input that is not a ``Variable``
and a Variable of a dtype the layer does not take, with a ``TypeError``; a few also check
the Python type of an attribute (``squeeze``'s ``axes`` must be a list). This table says
which, layer by layer, as Fluid 1.6's ``layers`` source checks them.

``apply(namespace)`` wraps the listed functions of ``fluid.layers`` (the package's own
names, and the modules named as Fluid's: ``fluid.layers.tensor.concat``): a user's call
is checked; parafluid's layers calling each other from modules of their own are not
(they build with dtypes Fluid's C++ side accepts, such as a bool ``reshape`` in a mask).

Example::

    fluid.layers.reshape(np.ones(3), [3])    # TypeError: reshape: x must be a Variable, ...
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from .. import framework, unique_name
from ..dtypes import convert_dtype
from ..variable import Variable

__all__ = ["LAYER_CHECKS", "ATTR_TYPES", "ATTR_VALUES", "DTYPE_ARGS", "DYGRAPH_ARRAYS", "apply",
           "checked"]

_F = ("float16", "float32", "float64")
_FI = _F + ("int32", "int64")
_EW = _FI  # the elementwise family

# layer -> {argument: dtypes allowed (None: any dtype)}; "name[]" is a Variable or a list of
# Variables, each checked; "name?" may also be None
LAYER_CHECKS: dict[str, dict[str, tuple[str, ...] | None]] = {
    "accuracy": {"input": _F},
    "batch_norm": {"input": _F},
    "cast": {"x": ("bool", "float16", "float32", "float64", "int32", "int64", "uint8")},
    "concat": {"input[]": _FI},
    "conv2d": {"input": _F},
    "conv2d_transpose": {"input": None},
    "conv3d_transpose": {"input": None},
    "cross_entropy": {"input": _F},
    "deformable_conv": {"input": None, "offset": None},
    "dropout": {"x": _F},
    "embedding": {"input": ("int64",)},
    "expand": {"x": ("bool", "float32", "float64", "int32", "int64")},
    "fc": {"input[]": _F},
    "matmul": {"x": _F, "y": _F},
    "mean": {"x": _F},
    "mul": {"x": _F, "y": _F},
    "nce": {"input": ("float32", "float64"), "label": ("int64",)},
    "reduce_mean": {"input": ("float32", "float64", "int32", "int64")},
    "reduce_sum": {"input": ("float32", "float64", "int32", "int64")},
    "reshape": {"x": _FI, "actual_shape?": None},
    "softmax": {"input": _F},
    "squeeze": {"input": ("float32", "float64", "int8", "int32", "int64")},
    "transpose": {"x": _FI},
    "yolo_box": {"x": None, "img_size": None},
    "yolov3_loss": {"x": None, "gt_box": None, "gt_label": None, "gt_score?": None},
    **{f"elementwise_{k}": {"x": _EW, "y": _EW}
       for k in ("add", "sub", "mul", "div", "max", "min", "pow", "mod", "floordiv")},
}

# layer -> {argument: Python types allowed}
ATTR_TYPES: dict[str, dict[str, tuple[type, ...]]] = {
    "reshape": {"shape": (list, tuple, Variable)},
    "squeeze": {"axes": (list,)},
    "transpose": {"perm": (list,)},
    "pixel_shuffle": {"upscale_factor": (int,)},
    "shuffle_channel": {"group": (int,)},
    "temporal_shift": {"seg_num": (int,)},
    "similarity_focus": {"axis": (int,), "indexes": (list,)},
    "psroi_pool": {"output_channels": (int,), "spatial_scale": (float,),
                   "pooled_height": (int,), "pooled_width": (int,)},
    "prroi_pool": {"spatial_scale": (float,), "pooled_height": (int,), "pooled_width": (int,)},
    "yolo_box": {"anchors": (list, tuple), "class_num": (int,), "conf_thresh": (float,)},
    "yolov3_loss": {"anchors": (list, tuple), "anchor_mask": (list, tuple),
                    "class_num": (int,), "ignore_thresh": (float,)},
}


# layer -> {argument naming a dtype: the dtypes allowed}
DTYPE_ARGS: dict[str, dict[str, tuple[str, ...]]] = {
    "embedding": {"dtype": _F},
}

# layer -> {argument: Python types allowed}, refused with a ValueError as Fluid's layers do
ATTR_VALUES: dict[str, dict[str, tuple[type, ...]]] = {
    name: {"use_cudnn": (bool,)}
    for name in ("conv2d", "conv3d", "pool2d", "pool3d", "conv2d_transpose", "conv3d_transpose")
}


# layer -> the arguments that, in the imperative mode, may be numpy arrays: Fluid 1.6's
# elementwise layers make them imperative variables (``to_variable``) before the checks
DYGRAPH_ARRAYS: dict[str, tuple[str, ...]] = {
    f"elementwise_{k}": ("x", "y")
    for k in ("add", "sub", "mul", "div", "max", "min", "pow", "mod", "floordiv")
}


def _imperative(value: np.ndarray) -> Variable:
    """What ``fluid.dygraph.to_variable`` makes of a numpy array: an imperative variable
    holding a copy, needing no gradient."""
    tracer = framework._dygraph_tracer()
    tensor = torch.from_numpy(np.array(value, order="C", copy=True)).to(tracer.device)
    return framework.default_main_program().current_block().create_var(
        name=unique_name.generate("generated_var"), value=tensor, stop_gradient=True)


def _check_variable(layer: str, arg: str, value: Any, dtypes: tuple[str, ...] | None) -> None:
    if not isinstance(value, Variable):
        raise TypeError(f"{layer}: {arg} must be a Variable, got {type(value).__name__}")
    if dtypes is not None and value.dtype is not None:
        got = convert_dtype(value.dtype)
        if got not in dtypes:
            raise TypeError(f"{layer}: {arg} must be of dtype {', '.join(dtypes)}; "
                            f"{value.name!r} is {got}")


def _checker(layer: str, fn: Callable[..., Any]) -> Callable[[inspect.BoundArguments], None]:
    variables = LAYER_CHECKS.get(layer, {})
    attrs = ATTR_TYPES.get(layer, {})
    values = ATTR_VALUES.get(layer, {})
    dtype_args = DTYPE_ARGS.get(layer, {})

    def check(bound: inspect.BoundArguments) -> None:
        args = bound.arguments
        for spec, dtypes in variables.items():
            name = spec.rstrip("[]?")
            if name not in args:
                continue
            value = args[name]
            if spec.endswith("?") and value is None:
                continue
            if spec.endswith("[]") and isinstance(value, (list, tuple)):
                for i, v in enumerate(value):
                    _check_variable(layer, f"{name}[{i}]", v, dtypes)
            else:
                _check_variable(layer, name, value, dtypes)
        for name, types in attrs.items():
            if name in args and not isinstance(args[name], types):
                allowed = " or ".join(t.__name__ for t in types)
                raise TypeError(f"{layer}: {name} must be a {allowed}, got "
                                f"{type(args[name]).__name__}: {args[name]!r}")
        for name, dtypes in dtype_args.items():
            if name in args and convert_dtype(args[name]) not in dtypes:
                raise TypeError(f"{layer}: {name} must be one of {', '.join(dtypes)}, got "
                                f"{convert_dtype(args[name])}")
        for name, types in values.items():
            if name in args and not isinstance(args[name], types):
                raise ValueError(f"{layer}: {name} must be True or False, got "
                                 f"{args[name]!r}")
    return check


def _wrap(layer: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    signature = inspect.signature(fn)
    check = _checker(layer, fn)
    arrays = DYGRAPH_ARRAYS.get(layer, ())

    @functools.wraps(fn)
    def checked(*args: Any, **kwargs: Any) -> Any:
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError:
            return fn(*args, **kwargs)  # the function's own error for a wrong call
        if arrays and framework.in_dygraph_mode():
            given = bound.arguments
            converted = [name for name in arrays if isinstance(given.get(name), np.ndarray)]
            if converted:
                for name in converted:
                    given[name] = _imperative(given[name])
                check(bound)
                return fn(*bound.args, **bound.kwargs)
        check(bound)
        return fn(*args, **kwargs)

    checked.__wrapped_checks__ = True  # type: ignore[attr-defined]
    return checked


def apply(namespace: dict[str, Any], modules: tuple[Any, ...] = ()) -> None:
    """Wrap the checked layers of ``namespace`` (the package's globals) in their checks;
    ``modules`` (those named as Fluid's layer modules, ``fluid.layers.tensor``) get the
    same checked function where they hold the layer, so both paths are one object."""
    for layer in sorted(set(LAYER_CHECKS) | set(ATTR_TYPES) | set(ATTR_VALUES) | set(DTYPE_ARGS)):
        fn = namespace.get(layer)
        if callable(fn) and not getattr(fn, "__wrapped_checks__", False):
            namespace[layer] = _wrap(layer, fn)
            for module in modules:
                # NOTE: the module's own names: getattr would go through its __getattr__,
                # whose error for a missing name looks up close matches (a quarter second
                # of every import of parafluid, for names the module never holds)
                if vars(module).get(layer) is fn:
                    setattr(module, layer, namespace[layer])


def checked(layer: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorate a layer defined outside ``fluid.layers`` (``fluid.embedding``) with the
    checks of ``layer``."""
    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        return _wrap(layer, fn)
    return wrap
