"""Tensor layers: constants, assignment, global variables."""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import unique_name
from ..dtypes import VarType, convert_dtype
from ..framework import Variable
from ..initializer import Constant
from ..layer_helper import LayerHelper
from ..ops.tensor import assign_value_attrs
from .attr_tensors import int_list_arg

__all__ = ["uniform_random", "gaussian_random", "fill_constant", "assign", "create_global_var",
           "create_tensor", "zeros", "ones",
           "cast", "concat", "split", "reshape", "transpose", "squeeze", "unsqueeze", "expand",
           "one_hot", "argmax", "argmin", "topk", "reduce_sum", "reduce_mean", "reduce_max",
           "reduce_min", "reduce_prod", "fill_constant_batch_size_like"]


class ShapeArgumentError(ValueError, AssertionError):
    """A ``shape`` argument a layer refuses where Fluid 1.6's layer asserts (an empty
    ``fill_constant`` shape, a ``reshape`` shape with two -1s, ...): a ValueError, and the
    AssertionError Fluid's callers catch."""


def fill_constant(shape: Any, dtype: Any, value: float, force_cpu: bool = False,
                  out: Variable | None = None) -> Variable:
    """A tensor of ``shape`` filled with ``value``; ``shape`` is ints, ints and one-element
    int32 Variables, or one int32 Variable (read at run time, as Fluid 1.6)."""
    helper = LayerHelper("fill_constant")
    dtype = convert_dtype(dtype)
    if dtype not in ("bool", "float16", "float32", "float64", "int32", "int64"):
        raise TypeError("fill_constant: dtype must be bool, float16, float32, float64, int32 "
                        f"or int64, got {dtype}")
    if not isinstance(shape, (list, tuple, Variable)):
        raise TypeError("fill_constant: shape must be a list, a tuple or a Variable, got "
                        f"{type(shape).__name__}")
    if isinstance(shape, (list, tuple)) and not shape:
        raise ShapeArgumentError("fill_constant: shape must not be empty (give [1] for one "
                                 "value)")
    for i, dim in enumerate([shape] if isinstance(shape, Variable) else shape):
        if isinstance(dim, Variable) and convert_dtype(dim.dtype) not in ("int32", "int64"):
            where = "shape" if dim is shape else f"shape[{i}]"
            raise TypeError(f"fill_constant: a Variable {where} must be int32 or int64, got "
                            f"{convert_dtype(dim.dtype)} ({dim.name!r})")
    if out is None:
        out = helper.create_variable_for_type_inference(dtype)
    elif out.dtype is not None and convert_dtype(out.dtype) != dtype:
        raise TypeError(f"fill_constant: dtype {dtype} differs from the dtype of out "
                        f"{out.name!r} ({convert_dtype(out.dtype)})")
    attr, inputs = int_list_arg(helper, "fill_constant", "shape", shape, "ShapeTensor",
                                "ShapeTensorList")
    attrs = {"dtype": dtype, "value": float(value), "force_cpu": force_cpu}
    if attr is not None:
        attrs["shape"] = attr
    helper.append_op("fill_constant", inputs=inputs, outputs={"Out": [out]}, attrs=attrs)
    out.stop_gradient = True
    return out


def zeros(shape: list[int], dtype: Any, force_cpu: bool = False) -> Variable:
    return fill_constant(shape, dtype, 0.0, force_cpu)


def ones(shape: list[int], dtype: Any, force_cpu: bool = False) -> Variable:
    return fill_constant(shape, dtype, 1.0, force_cpu)


def assign(input: Variable | np.ndarray, output: Variable | None = None) -> Variable:
    """Copy a variable (or a numpy array, as a constant) into ``output``.

    As Fluid 1.6: a Variable of float32, float64, int32, int64 or bool; an array of float32
    or int32 (its values go into the program as an ``assign_value`` op, at most 2**20 of
    them). Anything else raises ``TypeError``.
    """
    helper = LayerHelper("assign")
    if isinstance(input, Variable):
        dtype = convert_dtype(input.dtype)
        if dtype not in ("float32", "float64", "int32", "int64", "bool"):
            raise TypeError("assign: a Variable input must be float32, float64, int32, int64 "
                            f"or bool, got {dtype} ({input.name!r})")
        if output is None:
            output = helper.create_variable_for_type_inference(input.dtype)
        helper.append_op("assign", inputs={"X": [input]}, outputs={"Out": [output]})
        return output
    if not isinstance(input, np.ndarray):
        raise TypeError("assign: input must be a Variable or a numpy.ndarray, got "
                        f"{type(input).__name__}")
    dtype = convert_dtype(input.dtype)
    if dtype not in ("float32", "int32"):
        raise TypeError("assign: a numpy.ndarray input must be float32 or int32 (its values "
                        f"are stored in the program), got {dtype}")
    if input.size > 1024 * 1024:
        raise ValueError(f"assign: the array has {input.size} elements, more than 1048576 "
                         "to store in a program; save it to a file and load it with a "
                         "load op instead")
    if output is None:
        output = helper.create_variable_for_type_inference(dtype)
    elif output.dtype is not None and convert_dtype(output.dtype) != dtype:
        # Fluid writes the array's own type into the output whatever it was declared as
        # (the fetched value has the array's dtype): the declaration follows the value
        output.dtype = dtype
    helper.append_op("assign_value", outputs={"Out": [output]},
                     attrs={"shape": list(input.shape), "dtype": dtype,
                            **assign_value_attrs(input, dtype)})
    return output


def create_tensor(dtype: Any, name: str | None = None, persistable: bool = False) -> Variable:
    helper = LayerHelper("create_tensor", name=name)
    return helper.create_variable(name=helper.name, dtype=dtype, persistable=persistable)


def create_global_var(shape: list[int], value: float, dtype: Any, persistable: bool = False,
                      force_cpu: bool = False, name: str | None = None) -> Variable:
    """A variable in the global block initialized to ``value`` by the startup program."""
    helper = LayerHelper("global_var", name=name)
    var = helper.create_global_variable(name=name or unique_name.generate("global_var"),
                                        shape=list(shape), dtype=dtype, persistable=persistable,
                                        stop_gradient=True)
    helper.set_variable_initializer(var, Constant(float(value), force_cpu))
    return var


# ----------------------------------------------------------------------------- manipulation


def _check_var(layer: str, arg: str, x: Any) -> None:
    if not isinstance(x, Variable):
        raise TypeError(f"{layer}: {arg} must be a Variable, got {type(x).__name__}")


def _one_op(op_type: str, x: Variable, attrs: dict[str, Any], name: str | None = None,
            dtype: Any = None, arg: str = "x", inputs: dict[str, Any] | None = None,
            act: str | None = None) -> Variable:
    """Append ``op_type`` reading ``X`` (plus ``inputs``), then ``act``; return the result."""
    _check_var(op_type, arg, x)
    helper = LayerHelper(op_type, name=name, act=act)
    out = helper.create_variable_for_type_inference(dtype or x.dtype)
    helper.append_op(op_type, inputs={"X": [x], **(inputs or {})}, outputs={"Out": [out]},
                     attrs=attrs)
    return helper.append_activation(out)


def _int_list(layer: str, arg: str, value: Any) -> list[int]:
    if isinstance(value, int):
        return [value]
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, int) for v in value):
        raise TypeError(f"{layer}: {arg} must be an int or a list of ints, got {value!r}")
    return list(value)


def cast(x: Variable, dtype: Any) -> Variable:
    """Convert ``x`` to ``dtype``; the gradient (between float types) is cast back.

    Example::

        label_f = fluid.layers.cast(label, "float32")
    """
    _check_var("cast", "x", x)
    out_dtype = convert_dtype(dtype)
    return _one_op("cast", x, {"in_dtype": x.dtype, "out_dtype": out_dtype}, dtype=out_dtype)


def concat(input: list[Variable], axis: int = 0, name: str | None = None) -> Variable:
    """Join variables along ``axis``; all other dimensions must agree.

    Example::

        both = fluid.layers.concat([a, b], axis=1)
    """
    if isinstance(input, Variable):
        input = [input]
    if not isinstance(input, (list, tuple)) or not input:
        raise TypeError(f"concat: input must be a non-empty list of Variables, got {input!r}")
    for i, v in enumerate(input):
        _check_var("concat", f"input[{i}]", v)
    helper = LayerHelper("concat", name=name)
    out = helper.create_variable_for_type_inference(input[0].dtype)
    helper.append_op("concat", inputs={"X": list(input)}, outputs={"Out": [out]},
                     attrs={"axis": int(axis)})
    return out


def split(input: Variable, num_or_sections: int | list[int], dim: int = -1,
          name: str | None = None) -> list[Variable]:
    """Split ``input`` along ``dim`` into ``num`` equal pieces or pieces of given sizes.

    A list of sizes may hold one -1, inferred from the rest.

    Example::

        a, b = fluid.layers.split(x, num_or_sections=2, dim=1)
        head, tail = fluid.layers.split(x, num_or_sections=[1, -1], dim=0)
    """
    _check_var("split", "input", input)
    if isinstance(num_or_sections, int):
        if num_or_sections < 1:
            raise ValueError(f"split: num_or_sections must be positive, got {num_or_sections}")
        count, attrs = num_or_sections, {"num": num_or_sections, "sections": []}
    else:
        sections = _int_list("split", "num_or_sections", num_or_sections)
        count, attrs = len(sections), {"num": 0, "sections": sections}
    helper = LayerHelper("split", name=name)
    outs = [helper.create_variable_for_type_inference(input.dtype) for _ in range(count)]
    helper.append_op("split", inputs={"X": [input]}, outputs={"Out": outs},
                     attrs={"axis": int(dim), **attrs})
    return outs


def _with_xshape(op_type: str, helper_name: str, x: Variable, attrs: dict[str, Any],
                 name: str | None, inputs: dict[str, Any] | None = None,
                 act: str | None = None, helper: LayerHelper | None = None) -> Variable:
    """Append one of Fluid's ``*2`` shape ops: ``Out`` plus ``XShape`` (X's shape for the
    gradient op), both named by the layer's helper as in Fluid."""
    helper = helper or LayerHelper(helper_name, name=name, act=act)
    out = helper.create_variable_for_type_inference(x.dtype)
    x_shape = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op(op_type, inputs={"X": [x], **(inputs or {})},
                     outputs={"Out": [out], "XShape": [x_shape]}, attrs=attrs)
    return helper.append_activation(out)


def _check_reshape_dims(x: Variable, dims: list) -> None:
    """Fluid's rules for the ints of a reshape ``shape``: at most one -1, a 0 (copy the
    input's dim) only where the input has that dim, nothing else negative."""
    unknown = None
    for i, d in enumerate(dims):
        if isinstance(d, Variable):
            continue
        if d == -1:
            if unknown is not None:
                raise ShapeArgumentError(f"reshape: only one dimension of shape may be -1, got "
                                        f"-1 at {unknown} and {i} in {dims}")
            unknown = i
        elif d == 0 and i >= len(x.shape):
            raise ShapeArgumentError(f"reshape: shape[{i}] = 0 copies the input's dim {i}, but "
                                    f"the input has {len(x.shape)} dims (shape {dims})")
        elif d < -1:
            raise ShapeArgumentError(f"reshape: shape[{i}] = {d} is negative; only one -1 (the "
                                    f"inferred dim) may be, got {dims}")


def reshape(x: Variable, shape: Any, actual_shape: Variable | None = None,
            act: str | None = None, inplace: bool = False, name: str | None = None) -> Variable:
    """Give ``x`` a new shape: 0 copies the dim at that index, one -1 is inferred.

    Appends ``reshape2`` (Out and XShape), as Fluid 1.6.

    Args:
        x: input variable.
        shape: target shape, e.g. ``[0, -1]`` flattens all but the first dim; entries may be
            int32 ``[1]`` variables (the ``ShapeTensor`` input), or ``shape`` a 1-D int32
            variable (the ``Shape`` input), read at run time.
        actual_shape: an int variable holding the target shape at run time (overrides a
            list of ints).
        act: activation appended after the reshape.
        inplace: accepted for compatibility; parafluid always writes a new variable (buffer
            reuse is the memory optimizer's job).

    Example::

        flat = fluid.layers.reshape(x, shape=[0, -1])
    """
    _check_var("reshape", "x", x)
    helper_name = "reshape2"
    helper = LayerHelper(helper_name, name=name, act=act)
    inputs: dict[str, Any] = {}
    attrs: dict[str, Any] = {}
    if isinstance(shape, Variable):
        shape.stop_gradient = True
        inputs["Shape"] = [shape]
    else:
        if not isinstance(shape, (list, tuple)) or not shape:
            raise TypeError(f"reshape: shape must be a non-empty list or tuple (of ints or "
                            f"int32 variables) or a variable, got {shape!r}")
        dims = [d if isinstance(d, Variable) else _int_list("reshape", "shape", d)[0]
                for d in shape]
        _check_reshape_dims(x, dims)
        attrs["shape"] = [-1 if isinstance(d, Variable) else d for d in dims]
        if any(isinstance(d, Variable) for d in dims):
            tensors = []
            for d in dims:
                if isinstance(d, Variable):
                    d.stop_gradient = True
                    tensors.append(d)
                else:
                    tmp = helper.create_variable_for_type_inference("int32")
                    tensors.append(fill_constant([1], "int32", d, force_cpu=True, out=tmp))
            inputs["ShapeTensor"] = tensors
        elif actual_shape is not None:
            _check_var("reshape", "actual_shape", actual_shape)
            actual_shape.stop_gradient = True
            inputs["Shape"] = [actual_shape]
    return _with_xshape("reshape2", helper_name, x, attrs, name, inputs, act, helper)


def transpose(x: Variable, perm: list[int], name: str | None = None) -> Variable:
    """Permute the dimensions of ``x``: output dim i is input dim ``perm[i]`` (appends
    ``transpose2``, as Fluid 1.6).

    Example::

        xt = fluid.layers.transpose(x, perm=[1, 0])
    """
    _check_var("transpose", "x", x)
    perm = _int_list("transpose", "perm", perm)
    if x.shape is not None and len(perm) != len(x.shape):
        raise ValueError(f"transpose: perm {perm} has {len(perm)} entries but x "
                         f"{list(x.shape)} has rank {len(x.shape)}")
    return _with_xshape("transpose2", "transpose", x, {"axis": perm}, name)


def squeeze(input: Variable, axes: list[int], name: str | None = None) -> Variable:
    """Remove the size-1 dimensions listed in ``axes`` (all of them if ``axes`` is empty;
    appends ``squeeze2``, as Fluid 1.6).

    Example::

        y = fluid.layers.squeeze(x, axes=[1])    # [N, 1, 5] -> [N, 5]
    """
    _check_var("squeeze", "input", input)
    return _with_xshape("squeeze2", "squeeze", input,
                        {"axes": _int_list("squeeze", "axes", axes)}, name)


def unsqueeze(input: Variable, axes: list[int], name: str | None = None) -> Variable:
    """Insert size-1 dimensions at ``axes`` (each counted in the growing shape; appends
    ``unsqueeze2``, as Fluid 1.6).

    Example::

        y = fluid.layers.unsqueeze(x, axes=[1])  # [N, 5] -> [N, 1, 5]
    """
    _check_var("unsqueeze", "input", input)
    return _with_xshape("unsqueeze2", "unsqueeze", input,
                        {"axes": _int_list("unsqueeze", "axes", axes)}, name)


def expand(x: Variable, expand_times: Any, name: str | None = None) -> Variable:
    """Tile ``x``: dimension i is repeated ``expand_times[i]`` times; ``expand_times`` is
    ints, ints and one-element int32 Variables, or one int32 Variable (as Fluid 1.6).

    Example::

        y = fluid.layers.expand(x, expand_times=[1, 3])  # [N, 2] -> [N, 6]
    """
    if isinstance(expand_times, int):
        expand_times = [expand_times]
    if isinstance(x, Variable) and convert_dtype(x.dtype) == "bool" and x.stop_gradient:
        # Fluid 1.6's layer refuses to expand a bool variable whose stop_gradient is set
        raise ValueError(f"expand: a bool input must have stop_gradient=False, as Fluid's "
                         f"layer requires; {x.name!r} has stop_gradient=True")
    attr, inputs = int_list_arg(LayerHelper("expand", name=name), "expand", "expand_times",
                                expand_times, "ExpandTimes", "expand_times_tensor")
    return _one_op("expand", x, {} if attr is None else {"expand_times": attr}, name,
                   inputs=inputs)


def _one_hot_layer(op_type: str, input: Variable, depth: int | Variable,
                   allow_out_of_range: bool) -> Variable:
    """Append ``op_type`` (one_hot / one_hot_v2); a Variable ``depth`` is read at run time
    through the op's ``depth_tensor`` input, as in Fluid 1.6."""
    attrs: dict[str, Any] = {"dtype": "float32", "allow_out_of_range": bool(allow_out_of_range)}
    inputs: dict[str, Any] = {}
    if isinstance(depth, Variable):
        depth.stop_gradient = True
        inputs["depth_tensor"] = [depth]
    else:
        attrs["depth"] = int(depth)
    out = _one_op(op_type, input, attrs, dtype="float32", arg="input", inputs=inputs)
    out.stop_gradient = True
    return out


def one_hot(input: Variable, depth: int | Variable, allow_out_of_range: bool = False) -> Variable:
    """One-hot float32 rows of int labels shaped ``[..., 1]``: the result is ``[..., depth]``
    (op ``one_hot``). ``depth`` is an int or a one-element int Variable.

    Example::

        label = fluid.layers.data(name="label", shape=[1], dtype="int64")
        onehot = fluid.layers.one_hot(label, depth=10)   # [-1, 10]
    """
    return _one_hot_layer("one_hot", input, depth, allow_out_of_range)


def _arg(op_type: str, x: Variable, axis: int) -> Variable:
    out = _one_op(op_type, x, {"axis": int(axis)}, dtype="int64")
    out.stop_gradient = True
    return out


def argmax(x: Variable, axis: int = 0) -> Variable:
    """Index (int64) of the largest element along ``axis``; that dimension is removed.

    Example::

        pred = fluid.layers.argmax(prob, axis=1)
    """
    return _arg("arg_max", x, axis)


def argmin(x: Variable, axis: int = 0) -> Variable:
    """Index (int64) of the smallest element along ``axis``; that dimension is removed.

    Example::

        idx = fluid.layers.argmin(dist, axis=1)
    """
    return _arg("arg_min", x, axis)


def topk(input: Variable, k: int | Variable,
         name: str | None = None) -> tuple[Variable, Variable]:
    """The ``k`` largest values along the last dimension and their int64 indices; ``k`` an
    int or a one-element int32 Variable (op input ``K``, read at run time).

    Example::

        values, indices = fluid.layers.topk(prob, k=5)
    """
    _check_var("topk", "input", input)
    inputs: dict[str, Any] = {"X": [input]}
    attrs: dict[str, Any] = {}
    if isinstance(k, Variable):
        k.stop_gradient = True
        inputs["K"] = [k]
    elif isinstance(k, int) and not isinstance(k, bool):
        attrs["k"] = k
    else:
        raise TypeError(f"topk: k must be an int or a Variable, got {type(k).__name__}")
    helper = LayerHelper("top_k", name=name)
    values = helper.create_variable_for_type_inference(input.dtype)
    indices = helper.create_variable_for_type_inference("int64", stop_gradient=True)
    helper.append_op("top_k", inputs=inputs,
                     outputs={"Out": [values], "Indices": [indices]}, attrs=attrs)
    return values, indices


def _reduce(op_type: str) -> Any:
    def layer(input: Variable, dim: int | list[int] | None = None, keep_dim: bool = False,
              name: str | None = None) -> Variable:
        _check_var(op_type, "input", input)
        dims = [] if dim is None else _int_list(op_type, "dim", dim)
        reduce_all = not dims or (input.shape is not None and len(dims) == len(input.shape))
        return _one_op(op_type, input, {"dim": dims or [0], "keep_dim": bool(keep_dim),
                                        "reduce_all": reduce_all}, name, arg="input")
    what = op_type.split("_")[1]
    layer.__name__ = layer.__qualname__ = op_type
    layer.__doc__ = (f"The {what} over ``dim`` (an int or a list; None: every dimension).\n\n"
                     "Without ``keep_dim`` the reduced dimensions are removed; reducing all of "
                     "them gives shape [1].\n\n"
                     f"Example::\n\n    s = fluid.layers.{op_type}(x, dim=1)\n")
    return layer


reduce_sum = _reduce("reduce_sum")
reduce_mean = _reduce("reduce_mean")
reduce_max = _reduce("reduce_max")
reduce_min = _reduce("reduce_min")
reduce_prod = _reduce("reduce_prod")


def fill_constant_batch_size_like(input: Variable, shape: list[int], dtype: Any, value: float,
                                  input_dim_idx: int = 0, output_dim_idx: int = 0,
                                  force_cpu: bool = False) -> Variable:
    """A constant tensor of ``shape`` whose dim ``output_dim_idx`` is taken at run time from
    dim ``input_dim_idx`` of ``input`` (typically the batch size).

    Example::

        zeros = fluid.layers.fill_constant_batch_size_like(x, shape=[-1, 16],
                                                           dtype="float32", value=0.0)
    """
    _check_var("fill_constant_batch_size_like", "input", input)
    helper = LayerHelper("fill_constant_batch_size_like")
    out = helper.create_variable_for_type_inference(convert_dtype(dtype))
    helper.append_op("fill_constant_batch_size_like", inputs={"Input": [input]},
                     outputs={"Out": [out]},
                     attrs={"shape": _int_list("fill_constant_batch_size_like", "shape", shape),
                            "dtype": convert_dtype(dtype), "value": float(value),
                            "input_dim_idx": int(input_dim_idx),
                            "output_dim_idx": int(output_dim_idx),
                            "force_cpu": bool(force_cpu)})
    out.stop_gradient = True
    return out


def uniform_random(shape: Any, dtype: Any = "float32", min: float = -1.0,
                   max: float = 1.0, seed: int = 0) -> Variable:
    """A tensor of ``shape`` drawn uniformly from [min, max) on each run (seed 0: random);
    ``shape`` is ints, ints and one-element int32 Variables, or one int32 Variable.

    Example::

        noise = fluid.layers.uniform_random([4, 8], min=-0.1, max=0.1, seed=1)
    """
    if not isinstance(shape, (list, tuple, Variable)):
        raise TypeError(f"uniform_random: shape must be a list, tuple or Variable, got "
                        f"{type(shape).__name__}: {shape!r}")
    if convert_dtype(dtype) not in ("float32", "float64"):
        raise TypeError(f"uniform_random: dtype must be float32 or float64, got "
                        f"{convert_dtype(dtype)}")
    helper = LayerHelper("uniform_random")
    out = helper.create_variable_for_type_inference(dtype, stop_gradient=True)
    attr, inputs = int_list_arg(helper, "uniform_random", "shape",
                                [shape] if isinstance(shape, int) else shape,
                                "ShapeTensor", "ShapeTensorList")
    attrs = {"dtype": convert_dtype(dtype), "min": float(min), "max": float(max),
             "seed": int(seed)}
    if attr is not None:
        attrs["shape"] = attr
    helper.append_op("uniform_random", inputs=inputs, outputs={"Out": [out]}, attrs=attrs)
    return out


def gaussian_random(shape: list[int], mean: float = 0.0, std: float = 1.0, seed: int = 0,
                    dtype: Any = "float32") -> Variable:
    """A tensor of ``shape`` drawn from Normal(mean, std) on each run (seed 0: random).

    Example::

        noise = fluid.layers.gaussian_random([4, 8], std=0.01)
    """
    helper = LayerHelper("gaussian_random")
    out = helper.create_variable_for_type_inference(dtype, stop_gradient=True)
    helper.append_op("gaussian_random", outputs={"Out": [out]},
                     attrs={"shape": _int_list("gaussian_random", "shape", shape),
                            "dtype": convert_dtype(dtype), "mean": float(mean),
                            "std": float(std), "seed": int(seed)})
    return out



def tensor_array_to_tensor(input: Variable, axis: int = 1, name: str | None = None,
                           use_stack: bool = False) -> tuple[Variable, Variable]:
    """The items of a tensor array concatenated along ``axis`` (``use_stack``: stacked along
    a new axis ``axis``), and each item's size along it (int32, one per item; 1 each when
    stacked). The gradient is cut back into an array of the items' shapes.

    Example::

        arr = fluid.layers.create_array("float32")
        fluid.layers.array_write(x0, i0, array=arr)
        fluid.layers.array_write(x1, i1, array=arr)
        joined, sizes = fluid.layers.tensor_array_to_tensor(arr, axis=1)
    """
    if not isinstance(input, Variable) or input.type != VarType.LOD_TENSOR_ARRAY:
        raise TypeError(f"tensor_array_to_tensor: input must be a tensor array Variable "
                        f"(create_array / array_write), got {input!r}")
    helper = LayerHelper("tensor_array_to_tensor", name=name)
    out = helper.create_variable_for_type_inference(input.dtype)
    index = helper.create_variable_for_type_inference("int32", stop_gradient=True)
    helper.append_op("tensor_array_to_tensor", inputs={"X": [input]},
                     outputs={"Out": [out], "OutIndex": [index]},
                     attrs={"axis": int(axis), "use_stack": bool(use_stack)})
    return out, index


__all__ += ["tensor_array_to_tensor"]

def __getattr__(name: str) -> object:
    # Fluid 1.6 spells the layers it defined here as fluid.layers.tensor.<name>
    from .fluid_paths import resolve

    return resolve("tensor", name)
