"""One registration per op type: slots, attr defaults, shape rule, kernel, gradient maker.

Slot names carry two markers: ``"X[]"`` takes a list of variables (duplicable) and
``"Bias?"`` may be absent. A kernel is ``kernel(ins, attrs, ctx) -> {slot: value}`` where
``ins[slot]`` is a tensor (a list for ``[]`` slots, None for an absent ``?`` slot).

Registering ``grad_kernel=`` also registers ``<type>_grad`` whose inputs are the forward
slots the gradient uses (``grad_uses``, default: all) plus ``<Out>@GRAD`` for each output,
and whose outputs are ``<In>@GRAD`` for each differentiable input. Its kernel gets
``ctx.need``: the input slots whose gradient is wanted.

What the engine and the passes know of an op is declared in its row too:

- ``share_lod=("X", ("Out",))``: the outputs take the input's sequence information (LoD) at
  run time, as Fluid's ShareLoD (``bind_op`` does it; see ``parafluid/lod.py``);
- ``inplace=update``: ``update(x, y, attrs)`` computes ``Out`` into ``X``'s own buffer (the
  in-place planner uses it when ``X`` dies at this op); same torch operation as the kernel,
  so the result is bitwise the same;
- ``fresh_output=True``: the kernel's outputs are always newly allocated tensors (never
  views of an input), so a later op may overwrite them in place;
- ``scope_inputs=("Out@GRAD",)`` (``grad_scope_inputs`` for the ``_grad`` op): input slots
  the op looks up in the scope at run time, as Fluid's ``OperatorBase`` ops do: a variable
  its block does not declare is an absent input (the kernel gets None), at build time, in
  the verifier and at run time (``declared_inputs``);
- ``side_effect=True``: talks to the outside (never pruned, never reordered);
  ``comm=True``: moves values between devices or processes (collectives, RPC, barriers,
  copies; the profiler shows them as communication);
- ``handle_inputs=("Reader",)``: the slot names a process-local handle (a reader, its queue)
  that the kernel finds by the op's attrs; a run whose scope holds no value hands None.

Example::

    register_op("relu", inputs=("X",), outputs=("Out",), infer_shape=same_as("X"),
                kernel=lambda ins, attrs, ctx: {"Out": torch.relu(ins["X"])},
                grad_kernel=lambda ins, attrs, ctx: {"X@GRAD": ins["Out@GRAD"] * (ins["Out"] > 0)},
                grad_uses=("Out",))
"""

from __future__ import annotations

import copy
import difflib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from ..dtypes import VarType
from .not_provided import not_provided_message

__all__ = ["Slot", "Meta", "OpDef", "FRAMEWORK_ATTRS", "BACKEND_ATTRS", "register_op",
           "get_op_def", "has_op", "registered_ops", "prepare_op", "slot_problems",
           "listed_attrs", "default_grad_maker", "same_as", "GRAD", "EMPTY", "InplaceUpdate",
           "GradContext", "declared_inputs"]

GRAD = "@GRAD"
EMPTY = "@EMPTY@"


class Meta(NamedTuple):
    """What shape inference knows about a variable: shape (-1 = unknown), dtype, kind."""

    shape: tuple[int, ...]
    dtype: str
    type: str = VarType.LOD_TENSOR


@dataclass(frozen=True)
class Slot:
    name: str
    duplicable: bool = False
    optional: bool = False

    @staticmethod
    def parse(spec: str) -> Slot:
        optional = spec.endswith("?")
        spec = spec.rstrip("?")
        duplicable = spec.endswith("[]")
        return Slot(spec[:-2] if duplicable else spec, duplicable, optional)

    def __str__(self) -> str:
        return self.name + ("[]" if self.duplicable else "") + ("?" if self.optional else "")


InferShape = Callable[[dict[str, Any], dict[str, Any]], dict[str, Any]]
Kernel = Callable[[dict[str, Any], dict[str, Any], Any], dict[str, Any]]


@dataclass(frozen=True)
class GradContext:
    """What the backward pass hands every gradient maker, its third argument.

    ``append_grad_ops(block, targets, seeds, sources, no_grad) -> names of the gradients
    produced`` appends to ``block`` the gradient ops of its ops between ``sources`` and
    ``targets``, starting from the ``seeds`` (op specs writing the targets' gradients): an op
    whose gradient differentiates a sub-block (``while``, ``conditional_block``) builds its
    gradient block with it, so no op module imports the backward pass.
    """

    append_grad_ops: Callable[[Any, list[str], list[dict[str, Any]], set[str], set[str]],
                              set[str]]


# maker(forward op, names whose gradient is not wanted, context) -> gradient op specs
GradMaker = Callable[[Any, set, GradContext], list[dict[str, Any]]]
# update(x, y, attrs): the op's Out computed into x itself (y: the Y input, or None)
InplaceUpdate = Callable[[Any, Any, dict[str, Any]], None]


@dataclass
class OpDef:
    type: str
    inputs: tuple[Slot, ...]
    outputs: tuple[Slot, ...]
    attrs: dict[str, Any]
    infer_shape: InferShape | None
    kernel: Kernel | None
    grad: GradMaker | None = None
    no_grad_inputs: frozenset[str] = frozenset()
    grad_uses: tuple[str, ...] | None = None
    side_effect: bool = False  # talks to the outside: never pruned, never reordered
    # the executors drop the op's inputs once it and their other readers ran (delete_var)
    releases_inputs: bool = False
    # (input slot, output slots): the outputs take the input's LoD at run time (bind_op)
    share_lod: tuple[str, tuple[str, ...]] | None = None
    inplace: InplaceUpdate | None = None  # Out computed into X's buffer (engine/inplace.py)
    fresh_output: bool = False  # the kernel's outputs are always new tensors, never views
    comm: bool = False  # moves values between devices or processes
    # why the op cannot run inside a compiled segment (a host round trip, a value-dependent
    # output shape, ...); None: it can (passes/compile_regions.py also checks side effects, seeds,
    # sub-blocks and row-sparse values itself)
    no_compile: str | None = None
    # input slots naming a process-local handle (a reader, its queue) the kernel finds by its
    # attrs: the executors hand None where the scope holds no value
    handle_inputs: frozenset[str] = frozenset()
    # input slots looked up in the scope at run time: an undeclared variable is absent
    scope_inputs: frozenset[str] = frozenset()
    input_by_name: dict[str, Slot] = field(default_factory=dict)
    output_by_name: dict[str, Slot] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.input_by_name = {s.name: s for s in self.inputs}
        self.output_by_name = {s.name: s for s in self.outputs}


_REGISTRY: dict[str, OpDef] = {}

# NOTE: what Fluid's OpProtoAndCheckerMaker adds to every op type after the op's own
# attributes, with its defaults: the role (Forward, Backward, ...), the (param, grad) pair a
# backward or optimize op is about, the name scope and the Python stack that created the op
FRAMEWORK_ATTRS: dict[str, Any] = {"op_role": 0, "op_role_var": [], "op_namescope": "",
                                   "op_callstack": []}

# Attributes that only pick a backend or a fused kernel of Fluid's (MKL-DNN, cuDNN, int8
# scales): declared where Fluid's op declares them, they change no value parafluid computes
BACKEND_ATTRS = frozenset({
    # kernel choices and MKL-DNN / cuDNN tuning: the same values on every kernel
    "use_mkldnn", "use_cudnn", "use_quantizer", "mkldnn_data_type", "workspace_size_MB",
    "exhaustive_search", "x_data_format", "y_data_format",
    # set only by MKL-DNN fusion and int8 passes, which parafluid does not run
    "fuse_relu", "fuse_brelu", "fuse_brelu_threshold", "fuse_activation", "fuse_alpha",
    "fuse_beta", "fuse_residual_connection", "fuse_relu_before_depthwise_conv",
    "force_fp32_output", "Scale_in", "Scale_out", "Scale_in_eltwise", "Scale_weights",
    "Scale_x", "Scale_y", "scale_x", "scale_y", "scale_out",
    # Fluid's framework flag for its own kernels' run-time shapes
    "@ALL_KERNELS_MUST_COMPUTE_RUNTIME_SHAPE@",
})


def register_op(type: str, inputs: Sequence[str] = (), outputs: Sequence[str] = (),
                attrs: dict[str, Any] | None = None, infer_shape: InferShape | None = None,
                kernel: Kernel | None = None, grad: GradMaker | None = None,
                grad_kernel: Kernel | None = None, grad_uses: Sequence[str] | None = None,
                no_grad_inputs: Sequence[str] = (), grad_infer_shape: InferShape | None = None,
                side_effect: bool = False, releases_inputs: bool = False,
                share_lod: tuple[str, str | Sequence[str]] | None = None,
                inplace: InplaceUpdate | None = None, fresh_output: bool = False,
                comm: bool = False, no_compile: str | None = None,
                handle_inputs: Sequence[str] = (), scope_inputs: Sequence[str] = (),
                grad_scope_inputs: Sequence[str] = ()) -> OpDef:
    """Declare an op type once; see the module docstring for the conventions."""
    if type in _REGISTRY:
        raise ValueError(f"op type {type!r} is registered twice")
    attrs = dict(attrs or {})
    for key, default in FRAMEWORK_ATTRS.items():
        attrs.setdefault(key, copy.deepcopy(default))
    opdef = OpDef(type, tuple(Slot.parse(s) for s in inputs), tuple(Slot.parse(s) for s in outputs),
                  attrs, infer_shape, kernel, grad, frozenset(no_grad_inputs),
                  None if grad_uses is None else tuple(grad_uses), side_effect,
                  releases_inputs, _lod_rule(type, share_lod, inputs, outputs), inplace,
                  fresh_output, comm, no_compile, frozenset(handle_inputs),
                  frozenset(scope_inputs))
    if inplace is not None and (opdef.input_by_name.keys() - {"X", "Y"} or
                                [s.name for s in opdef.outputs] != ["Out"]):
        raise ValueError(f"register_op {type!r}: inplace= needs inputs X (and Y) and the one "
                         f"output Out, got inputs {list(inputs)}, outputs {list(outputs)}")
    if grad_kernel is not None:
        if opdef.grad is None:
            opdef.grad = default_grad_maker
        _register_grad_op(opdef, grad_kernel, grad_infer_shape)
        _REGISTRY[type + "_grad"].scope_inputs = frozenset(grad_scope_inputs)
    _REGISTRY[type] = opdef
    return opdef


def _lod_rule(type: str, rule: tuple[str, str | Sequence[str]] | None, inputs: Sequence[str],
              outputs: Sequence[str]) -> tuple[str, tuple[str, ...]] | None:
    """``share_lod=(src, dsts)`` checked against the op's slots."""
    if rule is None:
        return None
    src, dsts = rule
    dsts = (dsts,) if isinstance(dsts, str) else tuple(dsts)
    ins = {Slot.parse(s).name: Slot.parse(s) for s in inputs}
    outs = {Slot.parse(s).name: Slot.parse(s) for s in outputs}
    bad = [d for d in dsts if d not in outs or outs[d].duplicable]
    if src not in ins or bad or not dsts:
        raise ValueError(f"register_op {type!r}: share_lod=({src!r}, {dsts}) must name an "
                         f"input slot and single-variable output slots; inputs "
                         f"{list(inputs)}, outputs {list(outputs)}")
    return src, dsts


def _register_grad_op(fwd: OpDef, kernel: Kernel, infer: InferShape | None) -> None:
    uses = fwd.grad_uses
    fwd_slots = [s for s in fwd.inputs + fwd.outputs if uses is None or s.name in uses]
    grad_in = [Slot(s.name, s.duplicable, True) for s in fwd_slots]
    grad_in += [Slot(s.name + GRAD, s.duplicable, True) for s in fwd.outputs]
    grad_out = [Slot(s.name + GRAD, s.duplicable, True) for s in fwd.inputs
                if s.name not in fwd.no_grad_inputs]
    gdef = OpDef(fwd.type + "_grad", tuple(grad_in), tuple(grad_out), dict(fwd.attrs),
                 infer or _grads_like_inputs, kernel)
    gdef.no_compile = fwd.no_compile  # what keeps the forward on the host keeps its gradient
    _REGISTRY[gdef.type] = gdef


def _grads_like_inputs(ins: dict[str, Any], attrs: dict[str, Any]) -> dict[str, Any]:
    """Default shape rule of a grad op: ``X@GRAD`` has the meta of ``X``."""
    out = {}
    for slot, meta in ins.items():
        if not slot.endswith(GRAD) and meta is not None:
            out[slot + GRAD] = meta
    return out


def get_op_def(type: str) -> OpDef:
    try:
        return _REGISTRY[type]
    except KeyError:
        refused = not_provided_message(type)
        if refused is not None:
            raise ValueError(refused) from None
        close = difflib.get_close_matches(type, _REGISTRY, n=3)
        # NOTE: Fluid 1.6's words (its programs and tests match them), then close names
        hint = f"; did you mean {', '.join(close)}?" if close else "."
        raise ValueError(f'Operator "{type}" has not been registered{hint}') from None


def has_op(type: str) -> bool:
    return type in _REGISTRY


def registered_ops() -> list[str]:
    return sorted(_REGISTRY)


def listed_attrs(type: str, attrs: dict[str, Any]) -> dict[str, Any]:
    """The attributes a program listing shows, sorted by name: not the framework's
    bookkeeping (``FRAMEWORK_ATTRS``), nor a backend switch (``BACKEND_ATTRS``) holding the
    op type's default."""
    defaults = _REGISTRY[type].attrs if type in _REGISTRY else {}
    return {k: v for k, v in sorted(attrs.items()) if k not in FRAMEWORK_ATTRS and not (
        k in BACKEND_ATTRS and k in defaults and defaults[k] == v)}


def same_as(slot: str, out: str = "Out") -> InferShape:
    """Shape rule: output ``out`` has the meta of input ``slot``."""
    def infer(ins: dict[str, Any], attrs: dict[str, Any]) -> dict[str, Any]:
        return {out: ins[slot]}
    return infer


# --------------------------------------------------------------------------- gradients


def default_grad_maker(op: Any, no_grad: set[str], ctx: GradContext) -> list[dict[str, Any]]:
    """Emit ``<type>_grad`` reading the used forward vars and ``Out@GRAD``, writing ``X@GRAD``.

    Gradients of variables in ``no_grad`` become ``@EMPTY@`` (a slot of only empties is
    dropped); with no gradient to produce, no op is emitted.
    """
    fwd = get_op_def(op.type)
    gdef = get_op_def(op.type + "_grad")
    inputs: dict[str, list[str]] = {}
    for slot in gdef.inputs:
        if slot.name.endswith(GRAD):
            names = op.outputs.get(slot.name[: -len(GRAD)])
            if names:
                inputs[slot.name] = [n + GRAD for n in names]
        elif slot.name in op.inputs or slot.name in op.outputs:
            inputs[slot.name] = list(op.inputs.get(slot.name) or op.outputs[slot.name])
    outputs: dict[str, list[str]] = {}
    for s in fwd.inputs:
        if s.name in fwd.no_grad_inputs or s.name not in op.inputs:
            continue
        names = [EMPTY if n in no_grad else n + GRAD for n in op.inputs[s.name]]
        if any(n != EMPTY for n in names):
            outputs[s.name + GRAD] = names
    if not outputs:
        return []
    attrs = {k: v for k, v in op.attrs.items() if k not in ("op_role", "op_role_var")}
    return [{"type": gdef.type, "inputs": inputs, "outputs": outputs, "attrs": attrs}]


# --------------------------------------------------------------------------- build-time checks


def slot_problems(op: Any, opdef: OpDef) -> list[str]:
    """What is wrong with an op's slots: unknown slots, missing required inputs, several
    variables in a single-variable slot (shared by ``prepare_op`` and the verifier)."""
    problems = []
    for kind, given, slots in (("input", op.inputs, opdef.input_by_name),
                               ("output", op.outputs, opdef.output_by_name)):
        for name in given:
            if name not in slots:
                expected = ", ".join(str(s) for s in slots.values()) or "none"
                problems.append(f"unknown {kind} slot {name!r}; expected {expected}")
        for slot in slots.values():
            names = given.get(slot.name, [])
            if not names and not slot.optional and kind == "input":
                problems.append(f"required input slot {slot.name!r} is missing")
            if len(names) > 1 and not slot.duplicable:
                problems.append(f"{kind} slot {slot.name!r} takes one variable, "
                                f"got {len(names)}: {names}")
    return problems


def prepare_op(op: Any, infer: bool = True) -> None:
    """Check slots, fill attr defaults and infer output metas of a freshly built op."""
    opdef = get_op_def(op.type)
    problems = slot_problems(op, opdef)
    if problems:
        raise ValueError(f"op {op.type!r}: {problems[0]}")
    for key, default in opdef.attrs.items():
        if key not in op.attrs:
            op.attrs[key] = copy.deepcopy(default)
    if infer and opdef.infer_shape is not None:
        apply_infer_shape(op, opdef)


def declared_inputs(op: Any, opdef: OpDef | None = None) -> dict[str, list[str]]:
    """``op.inputs`` without the variables of its ``scope_inputs`` slots that its block does
    not declare (Fluid's scope lookup finds none: the op sees the input absent)."""
    opdef = opdef or get_op_def(op.type)
    if not opdef.scope_inputs:
        return op.inputs
    block = op.block
    out = dict(op.inputs)
    for slot in opdef.scope_inputs:
        names = out.get(slot)
        if names:
            out[slot] = [n for n in names
                         if n == EMPTY or block._find_var_recursive(n) is not None]
    return out


def input_metas(op: Any, opdef: OpDef, block: Any) -> dict[str, Any] | None:
    """Metas of an op's inputs, or None if some input's shape or dtype is not known yet."""
    ins: dict[str, Any] = {}
    inputs = declared_inputs(op, opdef)
    for slot in opdef.inputs:
        names = inputs.get(slot.name)
        if not names:
            ins[slot.name] = [] if slot.duplicable else None
            continue
        metas = []
        for n in names:
            if n == EMPTY:
                metas.append(None)
                continue
            var = block._find_var_recursive(n)
            if var is None:
                raise ValueError(f"op {op.type!r}: input {slot.name}={n!r} is not a variable of "
                                 f"block {block.idx}; create it (or feed it) before use")
            if var.type in (VarType.RAW, VarType.STEP_SCOPES, VarType.READER):  # no shape:
                # step scopes, communicator handles, readers
                metas.append(Meta((), var.dtype or VarType.RAW, var.type))
                continue
            if var.shape is None or var.dtype is None:
                return None
            metas.append(Meta(var.shape, var.dtype, var.type))
        ins[slot.name] = metas if slot.duplicable else metas[0]
    return ins


def apply_infer_shape(op: Any, opdef: OpDef) -> None:
    block = op.block
    ins = input_metas(op, opdef, block)
    if ins is None:
        return
    try:
        inferred = opdef.infer_shape(ins, op.attrs)
    except (ValueError, TypeError) as e:
        raise type(e)(f"op {op.type!r} at {op.callsite}: {e}") from None
    for slot, names in op.outputs.items():
        metas = inferred.get(slot)
        if metas is None:
            continue
        if not isinstance(metas, list):
            metas = [metas] * len(names) if len(names) > 1 else [metas]
        for name, meta in zip(names, metas):
            if name == EMPTY or meta is None:
                continue
            var = block._find_var_recursive(name)
            if var is None:
                var = block.create_var(name=name)
            _merge_meta(op, slot, var, Meta(*meta))


def _merge_meta(op: Any, slot: str, var: Any, meta: Meta) -> None:
    shape = tuple(int(d) for d in meta.shape)
    if var.shape is None:
        var.shape = shape
    elif VarType.LOD_TENSOR_ARRAY in (var.type, meta.type) and len(var.shape) == len(shape):
        # NOTE: an array's items may differ in size, as in Fluid (whose array var records
        # the last item's shape): a dimension they disagree on becomes unknown
        var.shape = tuple(a if a == b else -1 for a, b in zip(var.shape, shape))
    elif not shapes_compatible(var.shape, shape):
        # NOTE: as Fluid's compile-time InferShape (SetOutputDim), the op writing a variable
        # sets its shape: a variable written again with another shape takes the new one
        # (e.g. ``assign`` of another array into one variable)
        var.shape = shape
    else:
        var.shape = tuple(a if a != -1 else b for a, b in zip(var.shape, shape))
    if var.dtype is None:
        var.dtype = meta.dtype
    elif var.dtype != meta.dtype:
        raise ValueError(f"op {op.type!r} at {op.callsite}: output {slot}={var.name!r} is declared "
                         f"{var.dtype} but the op produces {meta.dtype}")
    if meta.type != VarType.LOD_TENSOR:
        var.type = meta.type


def shapes_compatible(a: Sequence[int], b: Sequence[int]) -> bool:
    """Same rank and every dimension equal or unknown (-1) on one side."""
    return len(a) == len(b) and all(x == y or x == -1 or y == -1 for x, y in zip(a, b))
