"""Tensor creation and manipulation ops: fills, assign, range / linspace / eye / diag, cast,
concat / split, reshape, transpose, squeeze / unsqueeze, expand / expand_as, reverse,
one_hot, shape and size. The random fills are in ``random.py``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from ..dtypes import FLOAT_DTYPES, convert_dtype, to_torch
from ..lod import get_lod
from .attr_inputs import given, int_list, list_meta
from .common import axis_in_range, numel
from .registry import GRAD, GradContext, Meta, register_op, same_as


def _shape_attr_meta(attrs: dict, ins: dict | None = None, op: str = "") -> dict:
    """Out's meta from the ``shape`` attribute, or from the ``ShapeTensor`` /
    ``ShapeTensorList`` inputs that override it (their values: -1, known at run time)."""
    shape = attrs["shape"] if ins is None else \
        list_meta(ins, attrs, "shape", "ShapeTensor", "ShapeTensorList", tensor_first=True)
    if shape is None:
        raise ValueError(f"{op}: the length of ShapeTensor (the output's rank) must be known "
                         "when the program is built")
    return {"Out": Meta(tuple(shape), convert_dtype(attrs["dtype"]))}


def run_shape(op: str, ins: dict, attrs: dict) -> tuple[int, ...]:
    """The output shape at run time: ``ShapeTensor``, else ``ShapeTensorList``, else
    ``shape`` (Fluid's order)."""
    shape = tuple(int_list(op, ins, attrs, "shape", "ShapeTensor", "ShapeTensorList",
                           tensor_first=True))
    if any(d < 0 for d in shape):
        raise ValueError(f"{op}: the output shape must be fully known at run time, got "
                         f"{list(shape)}")
    return shape


def _fill_constant(ins: dict, attrs: dict, ctx: Any) -> dict:
    return {"Out": torch.full(run_shape("fill_constant", ins, attrs), attrs["value"],
                              dtype=to_torch(convert_dtype(attrs["dtype"])), device=ctx.device)}


register_op("fill_constant", inputs=("ShapeTensor?", "ShapeTensorList[]?"), outputs=("Out",),
            attrs={"shape": [1], "value": 0.0, "dtype": "float32", "force_cpu": False},
            infer_shape=lambda ins, attrs: _shape_attr_meta(attrs, ins, "fill_constant"),
            kernel=_fill_constant)

def _fill_zeros_like(ins: dict, attrs: dict, ctx: Any) -> dict:
    from ..scope import SelectedRows, TensorArray

    x = ins["X"]
    # the zero of a tensor array (a gradient nothing produced): slots never written
    if isinstance(x, list):
        return {"Out": TensorArray()}
    if isinstance(x, SelectedRows):  # the same rows, zero values
        return {"Out": SelectedRows(x.rows, torch.zeros_like(x.value), x.height)}
    return {"Out": torch.zeros_like(x)}


register_op("fill_zeros_like", inputs=("X",), outputs=("Out",), infer_shape=same_as("X"),
            kernel=_fill_zeros_like)

register_op("fill_any_like", inputs=("X",), outputs=("Out",), attrs={"value": 0.0},
            infer_shape=same_as("X"),
            kernel=lambda ins, attrs, ctx: {"Out": torch.full_like(ins["X"], attrs["value"])})


def _assign(ins: dict, attrs: dict, ctx: Any) -> dict:
    x = ins["X"]
    # NOTE: a copy, so that an in-place update of one never changes the other.
    return {"Out": x.clone() if isinstance(x, torch.Tensor) else x}


register_op("assign", inputs=("X",), outputs=("Out",), infer_shape=same_as("X"), kernel=_assign,
            grad=lambda op, no_grad, ctx: [] if op.input("X")[0] in no_grad else [
                {"type": "assign", "inputs": {"X": [op.output("Out")[0] + "@GRAD"]},
                 "outputs": {"Out": [op.input("X")[0] + "@GRAD"]}, "attrs": {}}],
            share_lod=("X", "Out"))


_VALUE_ATTRS = {"float32": "fp32_values", "int32": "int32_values"}


def assign_value_attrs(values: Any, dtype: str) -> dict[str, list]:
    """The attribute that carries an ``assign_value`` op's values, as Fluid's op names it:
    ``fp32_values`` for float32, ``int32_values`` for int32; other dtypes (parafluid's
    initializers write them) go in ``values``."""
    flat = np.asarray(values).reshape(-1)
    name = _VALUE_ATTRS.get(convert_dtype(dtype), "values")
    if name == "int32_values":
        return {name: [int(v) for v in flat]}
    return {name: flat.tolist()}


def _assign_value(ins: dict, attrs: dict, ctx: Any) -> dict:
    dtype = convert_dtype(attrs["dtype"])
    shape = tuple(int(d) for d in attrs["shape"])
    values = attrs.get(_VALUE_ATTRS.get(dtype, "values")) or attrs["values"]
    if len(values) != int(np.prod(shape, dtype=np.int64)):
        raise ValueError(f"assign_value: {len(values)} values for shape {list(shape)} of "
                         f"{int(np.prod(shape, dtype=np.int64))} elements")
    return {"Out": torch.tensor(values, dtype=to_torch(dtype),
                                device=ctx.device).reshape(shape)}


register_op("assign_value", outputs=("Out",),
            attrs={"shape": [1], "dtype": "float32", "fp32_values": [], "int32_values": [],
                   "values": []},
            infer_shape=lambda ins, attrs: _shape_attr_meta(attrs), kernel=_assign_value)


def _fake_init(ins: dict, attrs: dict, ctx: Any) -> dict:
    """A tensor of ``shape`` given memory but no meaningful values (zeros here): Fluid's
    pserver declares a table so, which its lookups then fill."""
    return {"Out": torch.zeros(tuple(int(d) for d in attrs["shape"]), device=ctx.device)}


register_op("fake_init", outputs=("Out",), attrs={"shape": []},
            infer_shape=lambda ins, attrs: {"Out": Meta(tuple(attrs["shape"]), "float32")},
            kernel=_fake_init)


# ----------------------------------------------------------------------------- cast


def _cast_shape(ins: dict, attrs: dict) -> dict:
    x = ins["X"]
    return {"Out": Meta(x.shape, convert_dtype(attrs["out_dtype"]), x.type)}


def _cast_grad(op: Any, no_grad: set, ctx: GradContext) -> list[dict]:
    """The gradient of a cast is the cast back, between float types only."""
    x = op.input("X")[0]
    var = op.block._find_var_recursive(x)
    x_dtype = convert_dtype(var.dtype if var is not None and var.dtype else op.attr("in_dtype"))
    out_dtype = convert_dtype(op.attr("out_dtype"))
    if x in no_grad or x_dtype not in FLOAT_DTYPES or out_dtype not in FLOAT_DTYPES:
        return []
    return [{"type": "cast", "inputs": {"X": [op.output("Out")[0] + GRAD]},
             "outputs": {"Out": [x + GRAD]},
             "attrs": {"in_dtype": out_dtype, "out_dtype": x_dtype}}]


def _cast(ins: dict, attrs: dict, ctx: Any) -> dict:
    # NOTE: copy=True: a same-dtype .to() returns X itself, and an in-place update of X
    # (an optimizer step on a parameter) would then show through Out.
    return {"Out": ins["X"].to(to_torch(convert_dtype(attrs["out_dtype"])), copy=True)}


register_op("cast", inputs=("X",), outputs=("Out",),
            attrs={"in_dtype": "float32", "out_dtype": "float32"},
            infer_shape=_cast_shape, kernel=_cast, grad=_cast_grad, share_lod=("X", "Out"))


# ----------------------------------------------------------------------------- concat / split


def _axis(op: str, axis: int, ndim: int) -> int:
    if not -ndim <= axis < ndim:
        raise ValueError(f"{op}: axis {axis} is out of range for inputs of rank {ndim} "
                         f"(valid: {-ndim}..{ndim - 1})")
    return axis % ndim


def _concat_shape(ins: dict, attrs: dict) -> dict:
    metas = ins["X"]
    first = metas[0]
    axis = _axis("concat", attrs["axis"], len(first.shape))
    shape = list(first.shape)
    for m in metas[1:]:
        if len(m.shape) != len(shape) or any(
                i != axis and a != b and a != -1 and b != -1
                for i, (a, b) in enumerate(zip(shape, m.shape))):
            raise ValueError(f"concat: inputs must match except on axis {axis}, got shapes "
                             f"{[list(x.shape) for x in metas]}")
        if m.dtype != first.dtype:
            raise ValueError(f"concat: inputs have different dtypes "
                             f"{[x.dtype for x in metas]}")
        shape = [a if a != -1 else b for a, b in zip(shape, m.shape)]
    sizes = [m.shape[axis] for m in metas]
    shape[axis] = -1 if -1 in sizes else sum(sizes)
    return {"Out": Meta(tuple(shape), first.dtype)}


def _concat(ins: dict, attrs: dict, ctx: Any) -> dict:
    xs = ins["X"]
    return {"Out": torch.cat(xs, dim=_axis("concat", attrs["axis"], xs[0].dim()))}


def _concat_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    xs, d = ins["X"], ins["Out@GRAD"]
    axis = _axis("concat", attrs["axis"], d.dim())
    parts = torch.split(d, [x.shape[axis] for x in xs], dim=axis)
    return {"X@GRAD": [p.contiguous() for p in parts]}


register_op("concat", inputs=("X[]",), outputs=("Out",), attrs={"axis": 0},
            infer_shape=_concat_shape, kernel=_concat, grad_kernel=_concat_grad,
            grad_uses=("X",), share_lod=("X", "Out"))


def _split_sizes(dim: int, attrs: dict) -> list[int]:
    """Sizes of the pieces along the split axis (-1 where ``dim`` is unknown)."""
    num, sections = attrs["num"], list(attrs["sections"])
    if num > 0 and sections:
        raise ValueError(f"split: give num ({num}) or sections ({sections}), not both")
    if num > 0:
        if dim == -1:
            return [-1] * num
        if dim % num:
            raise ValueError(f"split: dimension {dim} does not divide into num={num} pieces")
        return [dim // num] * num
    if not sections:
        raise ValueError("split: one of num > 0 or sections must be given")
    if sections.count(-1) > 1 or any(s < -1 or s == 0 for s in sections):
        raise ValueError(f"split: sections must be positive with at most one -1, "
                         f"got {sections}")
    if dim == -1:
        return sections
    known = sum(s for s in sections if s != -1)
    if -1 in sections:
        if known >= dim:
            raise ValueError(f"split: sections {sections} leave nothing for -1 of "
                             f"dimension {dim}")
        sections[sections.index(-1)] = dim - known
    elif known != dim:
        raise ValueError(f"split: sections {sections} sum to {known}, not to the "
                         f"dimension {dim}")
    return sections


def _split_shape(ins: dict, attrs: dict) -> dict:
    x = ins["X"]
    axis = _axis("split", attrs["axis"], len(x.shape))
    metas = []
    for size in _split_sizes(x.shape[axis], attrs):
        shape = list(x.shape)
        shape[axis] = size
        metas.append(Meta(tuple(shape), x.dtype))
    return {"Out": metas}


def _split(ins: dict, attrs: dict, ctx: Any) -> dict:
    x = ins["X"]
    axis = _axis("split", attrs["axis"], x.dim())
    parts = torch.split(x, _split_sizes(x.shape[axis], attrs), dim=axis)
    # NOTE: copies, so that an in-place update of X never shows through the pieces.
    return {"Out": [p.clone(memory_format=torch.contiguous_format) for p in parts]}


def _split_grad(op: Any, no_grad: set, ctx: GradContext) -> list[dict]:
    """The gradient of a split is the concat of the pieces' gradients (zeros where absent)."""
    x = op.input("X")[0]
    if x in no_grad:
        return []
    return [{"type": "concat", "inputs": {"X": [n + GRAD for n in op.output("Out")]},
             "outputs": {"Out": [x + GRAD]}, "attrs": {"axis": op.attr("axis")}}]


register_op("split", inputs=("X",), outputs=("Out[]",),
            attrs={"axis": 0, "num": 0, "sections": []},
            infer_shape=_split_shape, kernel=_split, grad=_split_grad)


def _rows(attrs: dict) -> dict:
    return {**attrs, "axis": 0}


def _split_byref_grad(op: Any, no_grad: set, ctx: GradContext) -> list[dict]:
    x = op.input("X")[0]
    if x in no_grad:
        return []
    return [{"type": "concat", "inputs": {"X": [n + GRAD for n in op.output("Out")]},
             "outputs": {"Out": [x + GRAD]}, "attrs": {"axis": 0}}]


# Fluid's split along the rows (what the pserver transpiler cuts a gradient into blocks with)
register_op("split_byref", inputs=("X",), outputs=("Out[]",),
            attrs={"num": 0, "sections": []},
            infer_shape=lambda ins, attrs: _split_shape(ins, _rows(attrs)),
            kernel=lambda ins, attrs, ctx: _split(ins, _rows(attrs), ctx),
            grad=_split_byref_grad)


# ----------------------------------------------------------------------------- reshape


def _reshape_target(x_shape: Sequence[int], shape: Sequence[int]) -> tuple[int, ...]:
    """Fluid's rule: 0 copies the dim of X at the same index, one -1 is inferred.

    ``x_shape`` may hold -1 (unknown) dims; the result then holds -1 where it cannot be known.
    """
    shape = [int(s) for s in shape]
    if not shape:
        raise ValueError("reshape: shape must not be empty")
    if shape.count(-1) > 1 or any(s < -1 for s in shape):
        raise ValueError(f"reshape: shape may hold positive sizes, 0 (copy) and at most one "
                         f"-1 (infer), got {shape}")
    copied = {i for i, s in enumerate(shape) if s == 0}
    if copied and max(copied) >= len(x_shape):
        raise ValueError(f"reshape: shape {shape} copies dim {max(copied)} (0) but X has "
                         f"rank {len(x_shape)}")
    out = [x_shape[i] if s == 0 else s for i, s in enumerate(shape)]
    rest_x = [d for i, d in enumerate(x_shape) if i not in copied]
    infer = shape.index(-1) if -1 in shape else None
    rest_out = [d for i, d in enumerate(out) if i not in copied and i != infer]
    if -1 in rest_x:
        return tuple(out)
    total, part = numel(rest_x), numel(rest_out)
    besides = " besides the copied (0) dims" if copied else ""
    if infer is not None:
        if part == 0 or total % part:
            raise ValueError(f"reshape: cannot reshape X {list(x_shape)} to {shape}: "
                             f"{total} elements{besides} do not divide by {part}")
        out[infer] = total // part
    elif total != part:
        raise ValueError(f"reshape: cannot reshape X {list(x_shape)} ({total} elements"
                         f"{besides}) to {shape} ({part} elements{besides})")
    return tuple(out)


def _reshape_shape(ins: dict, attrs: dict) -> dict:
    x, shape_in = ins["X"], ins["Shape"]
    if ins.get("ShapeTensor"):  # one [1] tensor per dim: only the rank is known now
        return {"Out": Meta((-1,) * len(ins["ShapeTensor"]), x.dtype)}
    if shape_in is not None:
        # The target is a run-time value; only its rank may be known now.
        rank = shape_in.shape[0] if shape_in.shape and shape_in.shape[0] != -1 else \
            len(attrs["shape"])
        if rank <= 0:
            raise ValueError("reshape: the rank of the Shape input is unknown; also give the "
                             "shape attr")
        return {"Out": Meta((-1,) * rank, x.dtype)}
    return {"Out": Meta(_reshape_target(x.shape, attrs["shape"]), x.dtype)}


def _reshape(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, shape_in = ins["X"], ins["Shape"]
    shape = attrs["shape"] if shape_in is None else shape_in.reshape(-1).tolist()
    if ins.get("ShapeTensor"):  # Fluid's order: ShapeTensor, then Shape, then the attr
        shape = [int(t.reshape(-1)[0]) for t in ins["ShapeTensor"]]
    # NOTE: a copy, not a view: an in-place update of X must not show through Out.
    return {"Out": x.reshape(_reshape_target(tuple(x.shape), shape)).clone()}


def _reshape_back(ins: dict, attrs: dict, ctx: Any) -> dict:
    return {"X@GRAD": ins["Out@GRAD"].reshape(ins["X"].shape)}


register_op("reshape", inputs=("X", "Shape?", "ShapeTensor[]?"), outputs=("Out",),
            attrs={"shape": []}, infer_shape=_reshape_shape, kernel=_reshape,
            grad_kernel=_reshape_back, grad_uses=("X",), no_grad_inputs=("Shape", "ShapeTensor"))


# ----------------------------------------------------------------------------- transpose


def _check_perm(perm: Sequence[int], ndim: int) -> list[int]:
    perm = list(perm)
    if sorted(p % ndim if -ndim <= p < ndim else p for p in perm) != list(range(ndim)):
        raise ValueError(f"transpose: axis {perm} is not a permutation of the {ndim} dims "
                         f"of X")
    return [p % ndim for p in perm]


def _transpose_shape(ins: dict, attrs: dict) -> dict:
    x = ins["X"]
    perm = _check_perm(attrs["axis"], len(x.shape))
    return {"Out": Meta(tuple(x.shape[p] for p in perm), x.dtype)}


def _transpose(ins: dict, attrs: dict, ctx: Any) -> dict:
    x = ins["X"]
    perm = _check_perm(attrs["axis"], x.dim())
    return {"Out": x.permute(perm).clone(memory_format=torch.contiguous_format)}


def _transpose_grad(op: Any, no_grad: set, ctx: GradContext) -> list[dict]:
    """The gradient of a transpose is the transpose by the inverse permutation."""
    x = op.input("X")[0]
    if x in no_grad:
        return []
    perm = op.attr("axis")
    inverse = [0] * len(perm)
    for i, p in enumerate(perm):
        inverse[p % len(perm)] = i
    return [{"type": "transpose", "inputs": {"X": [op.output("Out")[0] + GRAD]},
             "outputs": {"Out": [x + GRAD]}, "attrs": {"axis": inverse}}]


register_op("transpose", inputs=("X",), outputs=("Out",), attrs={"axis": []},
            infer_shape=_transpose_shape, kernel=_transpose, grad=_transpose_grad)


# ----------------------------------------------------------------------------- squeeze / unsqueeze


def _squeezed(shape: Sequence[int], axes: Sequence[int]) -> tuple[int, ...]:
    ndim = len(shape)
    if not axes:
        return tuple(d for d in shape if d != 1)
    drop = set()
    for a in axes:
        if not -ndim <= a < ndim:
            raise ValueError(f"squeeze: axis {a} is out of range for X of rank {ndim}")
        if shape[a] not in (1, -1):
            raise ValueError(f"squeeze: dim {a} of X {list(shape)} has size {shape[a]}, not 1")
        drop.add(a % ndim)
    return tuple(d for i, d in enumerate(shape) if i not in drop)


def _unsqueezed(shape: Sequence[int], axes: Sequence[int]) -> tuple[int, ...]:
    out = list(shape)
    for a in axes:  # NOTE: sequential, as Fluid: each axis counts in the growing shape
        rank = len(out) + 1
        if not -rank <= a < rank:
            raise ValueError(f"unsqueeze: axis {a} is out of range for an output of rank "
                             f"{rank}")
        out.insert(a % rank, 1)
    return tuple(out)


def _register_reshape_like(name: str, rule: Any) -> None:
    register_op(name, inputs=("X",), outputs=("Out",), attrs={"axes": []},
                infer_shape=lambda ins, attrs: {
                    "Out": Meta(rule(ins["X"].shape, attrs["axes"]), ins["X"].dtype)},
                kernel=lambda ins, attrs, ctx: {
                    "Out": ins["X"].reshape(rule(tuple(ins["X"].shape), attrs["axes"])).clone()},
                grad_kernel=_reshape_back, grad_uses=("X",))


_register_reshape_like("squeeze", _squeezed)
_register_reshape_like("unsqueeze", _unsqueezed)


# ----------------------------------------------------------------------------- expand


_EXPAND_TIMES = ("expand_times", "ExpandTimes", "expand_times_tensor")


def _expand_times(ins: dict, attrs: dict) -> list[int]:
    return int_list("expand", ins, attrs, *_EXPAND_TIMES, tensor_first=True)


def _expand_shape(ins: dict, attrs: dict) -> dict:
    x = ins["X"]
    times = list_meta(ins, attrs, *_EXPAND_TIMES, tensor_first=True)
    if times is None or ins.get("ExpandTimes") is not None or \
            (not times and given(ins, "expand_times_tensor")):
        times = [-1] * len(x.shape)  # one count per dim, known at run time (Fluid's rule)
    if len(times) != len(x.shape) or any(t < 1 and t != -1 for t in times):
        raise ValueError(f"expand: expand_times {times} must hold one positive count per "
                         f"dim of X {list(x.shape)}")
    return {"Out": Meta(tuple(-1 if -1 in (d, t) else d * t for d, t in zip(x.shape, times)),
                        x.dtype)}


def _expand(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, times = ins["X"], _expand_times(ins, attrs)
    if len(times) != x.dim() or any(t < 1 for t in times):
        raise ValueError(f"expand: expand_times {times} must hold one positive count per "
                         f"dim of X {list(x.shape)}")
    return {"Out": x.repeat(*times)}


def _expand_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, d = ins["X"], ins["Out@GRAD"]
    tiled = []
    for t, n in zip(_expand_times(ins, attrs), x.shape):
        tiled += [t, n]
    summed = d.reshape(tiled).sum(dim=list(range(0, len(tiled), 2)))
    return {"X@GRAD": summed.reshape(x.shape)}


register_op("expand", inputs=("X", "ExpandTimes?", "expand_times_tensor[]?"),
            outputs=("Out",), attrs={"expand_times": []},
            infer_shape=_expand_shape, kernel=_expand, grad_kernel=_expand_grad,
            grad_uses=("X", "ExpandTimes", "expand_times_tensor"),
            no_grad_inputs=("ExpandTimes", "expand_times_tensor"),
            grad_infer_shape=lambda ins, attrs: {"X@GRAD": ins["X"]})


# ----------------------------------------------------------------------------- batch-size-like


def _batch_like_shape(op: str, in_shape: Sequence[int], attrs: dict) -> tuple[int, ...]:
    shape = list(attrs["shape"])
    i, o = attrs["input_dim_idx"], attrs["output_dim_idx"]
    if not 0 <= i < len(in_shape) or not 0 <= o < len(shape):
        raise ValueError(f"{op}: input_dim_idx={i} must index Input {list(in_shape)} and "
                         f"output_dim_idx={o} must index shape {shape}")
    shape[o] = in_shape[i]
    return tuple(shape)


def _fill_batch_like(ins: dict, attrs: dict, ctx: Any) -> dict:
    shape = list(_batch_like_shape("fill_constant_batch_size_like", tuple(ins["Input"].shape),
                                   attrs))
    lod = get_lod(ins["Input"])
    if lod and attrs["input_dim_idx"] == 0:
        # as Fluid: the batch of a LoD input is its number of sequences, not of rows
        shape[attrs["output_dim_idx"]] = len(lod[-1]) - 1
    return {"Out": torch.full(shape, attrs["value"], dtype=to_torch(convert_dtype(attrs["dtype"])),
                              device=ctx.device)}


register_op("fill_constant_batch_size_like", inputs=("Input",), outputs=("Out",),
            attrs={"shape": [1], "value": 0.0, "dtype": "float32", "input_dim_idx": 0,
                   "output_dim_idx": 0, "force_cpu": False},
            infer_shape=lambda ins, attrs: {"Out": Meta(
                _batch_like_shape("fill_constant_batch_size_like", ins["Input"].shape, attrs),
                convert_dtype(attrs["dtype"]))},
            kernel=_fill_batch_like)


# ----------------------------------------------------------------------------- shape

register_op("shape", inputs=("Input",), outputs=("Out",),
            infer_shape=lambda ins, attrs: {"Out": Meta((len(ins["Input"].shape),), "int32")},
            kernel=lambda ins, attrs, ctx: {"Out": torch.tensor(
                list(ins["Input"].shape), dtype=torch.int32, device=ins["Input"].device)})


# ----------------------------------------------------------------------------- size

register_op("size", inputs=("Input",), outputs=("Out",),
            infer_shape=lambda ins, attrs: {"Out": Meta((1,), "int64")},
            kernel=lambda ins, attrs, ctx: {"Out": torch.tensor(
                [ins["Input"].numel()], dtype=torch.int64, device=ins["Input"].device)})


# ----------------------------------------------------------------------------- expand_as

def _expand_as_times(op: str, x_shape: Any, t_shape: Any) -> list[int]:
    if len(x_shape) != len(t_shape):
        raise ValueError(f"{op}: X {list(x_shape)} and target_tensor {list(t_shape)} must "
                         "have the same rank")
    times = []
    for a, b in zip(x_shape, t_shape):
        if a == -1 or b == -1:
            times.append(-1)
        elif a <= 0 or b % a:
            raise ValueError(f"{op}: target_tensor {list(t_shape)} is not a whole number of "
                             f"copies of X {list(x_shape)}")
        else:
            times.append(b // a)
    return times


def _expand_as_shape(ins: dict, attrs: dict) -> dict:
    x, t = ins["X"], ins["target_tensor"]
    _expand_as_times("expand_as", x.shape, t.shape)
    return {"Out": Meta(tuple(t.shape), x.dtype)}


def _expand_as_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    """Sum the copies: view the gradient as ``[times_0, x_0, times_1, x_1, ...]``."""
    x, dout = ins["X"], ins["Out@GRAD"]
    times = _expand_as_times("expand_as", tuple(x.shape), tuple(dout.shape))
    view = [v for t, d in zip(times, x.shape) for v in (t, d)]
    return {"X@GRAD": dout.reshape(view).sum(dim=tuple(range(0, 2 * x.dim(), 2)))}


register_op("expand_as", inputs=("X", "target_tensor"), outputs=("Out",),
            infer_shape=_expand_as_shape,
            kernel=lambda ins, attrs, ctx: {"Out": ins["X"].repeat(_expand_as_times(
                "expand_as", tuple(ins["X"].shape), tuple(ins["target_tensor"].shape)))},
            grad_kernel=_expand_as_grad, grad_uses=("X",), no_grad_inputs=("target_tensor",))


# ----------------------------------------------------------------------------- reverse


def _reverse_axes(attrs: dict, ndim: int) -> list[int]:
    axes = attrs["axis"] if isinstance(attrs["axis"], (list, tuple)) else [attrs["axis"]]
    if not axes:
        raise ValueError("reverse: axis must name at least one dimension")
    return [axis_in_range("reverse", int(a), ndim) for a in axes]


def _reverse_shape(ins: dict, attrs: dict) -> dict:
    _reverse_axes(attrs, len(ins["X"].shape))
    return {"Out": ins["X"]}


register_op("reverse", inputs=("X",), outputs=("Out",), attrs={"axis": [0]},
            infer_shape=_reverse_shape,
            kernel=lambda ins, attrs, ctx: {
                "Out": ins["X"].flip(_reverse_axes(attrs, ins["X"].dim()))},
            grad_kernel=lambda ins, attrs, ctx: {
                "X@GRAD": ins["Out@GRAD"].flip(_reverse_axes(attrs, ins["Out@GRAD"].dim()))},
            grad_uses=(), grad_infer_shape=same_as("Out@GRAD", "X@GRAD"))


# ----------------------------------------------------------------------------- range, linspace


def _scalar(op: str, slot: str, t: torch.Tensor) -> float:
    if t.numel() != 1:
        raise ValueError(f"{op}: {slot} must hold one value, got shape {list(t.shape)}")
    return t.reshape(-1)[0].item()


def _range(ins: dict, attrs: dict, ctx: Any) -> dict:
    start, end, step = (_scalar("range", s, ins[s]) for s in ("Start", "End", "Step"))
    if step == 0:
        raise ValueError("range: Step must not be 0")
    return {"Out": torch.arange(start, end, step, dtype=ins["Start"].dtype,
                                device=ins["Start"].device)}


register_op("range", inputs=("Start", "End", "Step"), outputs=("Out",),
            infer_shape=lambda ins, attrs: {"Out": Meta((-1,), ins["Start"].dtype)},
            kernel=_range)


def _linspace(ins: dict, attrs: dict, ctx: Any) -> dict:
    start, stop = _scalar("linspace", "Start", ins["Start"]), _scalar("linspace", "Stop",
                                                                     ins["Stop"])
    num = int(_scalar("linspace", "Num", ins["Num"]))
    if num < 1:
        raise ValueError(f"linspace: Num must be at least 1, got {num}")
    dtype = to_torch(convert_dtype(attrs["dtype"]))
    return {"Out": torch.linspace(start, stop, num, dtype=torch.float64,
                                  device=ins["Start"].device).to(dtype)}


register_op("linspace", inputs=("Start", "Stop", "Num"), outputs=("Out",),
            attrs={"dtype": "float32"},
            infer_shape=lambda ins, attrs: {"Out": Meta((-1,), convert_dtype(attrs["dtype"]))},
            kernel=_linspace)


# ----------------------------------------------------------------------------- eye, diag


def _eye_shape(ins: dict, attrs: dict) -> dict:
    rows, cols = int(attrs["num_rows"]), int(attrs["num_columns"])
    cols = rows if cols < 0 else cols
    if rows < 0:
        raise ValueError(f"eye: num_rows must be >= 0, got {rows}")
    return {"Out": Meta((rows, cols), convert_dtype(attrs["dtype"]))}


def _eye(ins: dict, attrs: dict, ctx: Any) -> dict:
    rows, cols = int(attrs["num_rows"]), int(attrs["num_columns"])
    return {"Out": torch.eye(rows, rows if cols < 0 else cols,
                             dtype=to_torch(convert_dtype(attrs["dtype"])), device=ctx.device)}


register_op("eye", outputs=("Out",), attrs={"num_rows": 1, "num_columns": -1,
                                            "dtype": "float32"},
            infer_shape=_eye_shape, kernel=_eye)


def _diag_shape(ins: dict, attrs: dict) -> dict:
    d = ins["Diagonal"]
    if len(d.shape) != 1:
        raise ValueError(f"diag: Diagonal must be 1-D, got shape {list(d.shape)}")
    return {"Out": Meta((d.shape[0], d.shape[0]), d.dtype)}


register_op("diag", inputs=("Diagonal",), outputs=("Out",), infer_shape=_diag_shape,
            kernel=lambda ins, attrs, ctx: {"Out": torch.diag(ins["Diagonal"])})
