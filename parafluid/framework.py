"""The Program IR: Program, Block, Operator, Variable, Parameter.

A Program is plain, printable data: blocks of variables and operators whose inputs and
outputs are variable *names* grouped by slot. Shapes and dtypes of outputs are inferred when
an op is appended (see ``parafluid.ops.registry``).

Example::

    import parafluid as fluid
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data(name="x", shape=[13], dtype="float32")
        y = fluid.layers.fc(input=x, size=1)
    print(main)
"""

from __future__ import annotations

import contextlib
import functools
import linecache
import os
import sys
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from . import unique_name
from .dtypes import convert_dtype, convert_np_dtype_to_dtype_
from .place import to_device
from .program_desc import (
    BlockDescView,
    OpDescView,
    ProgramDescView,
    attr_type_of,
    inference_program,
    prune_program,
)
from .program_meta import ProgramMeta, VarsDistributed
from .variable import Parameter, Variable, _as_shape, var_names
from .version import require_version

__all__ = [
    "OpRole", "Variable", "Parameter", "Operator", "Block", "Program",
    "program_guard", "default_main_program", "default_startup_program",
    "switch_main_program", "switch_startup_program", "name_scope", "in_dygraph_mode",
    "grad_var_name", "GRAD_SUFFIX", "EMPTY_VAR_NAME", "TEMP_VAR_NAME",
    "GRAD_VAR_SUFFIX", "ZERO_VAR_SUFFIX", "CONTROL_DEP_VAR_PREFIX",
    "convert_np_dtype_to_dtype_", "require_version", "dygraph_only", "dygraph_not_support",
]

GRAD_SUFFIX = "@GRAD"
# Fluid's reserved variable names (framework.py constants; core.kEmptyVarName() & co.)
EMPTY_VAR_NAME = "@EMPTY@"
TEMP_VAR_NAME = "@TEMP@"
GRAD_VAR_SUFFIX = GRAD_SUFFIX
ZERO_VAR_SUFFIX = "@ZERO"
CONTROL_DEP_VAR_PREFIX = "__control_var"
_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


def grad_var_name(name: str) -> str:
    """``x`` -> ``x@GRAD``."""
    return name + GRAD_SUFFIX


class OpRole:
    """Bit flags carried by every op in its ``op_role`` attribute (values as in Fluid)."""

    Forward = 0x0000
    Backward = 0x0001
    Optimize = 0x0002
    RPC = 0x0004
    Dist = 0x0008
    LRSched = 0x0010
    Loss = 0x0100

    @staticmethod
    def name(role: int) -> str:
        parts = [n for n, bit in (("backward", 0x1), ("optimize", 0x2), ("rpc", 0x4),
                                  ("dist", 0x8), ("lr_sched", 0x10), ("loss", 0x100))
                 if role & bit]
        return "|".join(parts) or "forward"


# NOTE: the imperative mode's tracer (``parafluid.dygraph.Tracer``) while a
# ``fluid.dygraph.guard()`` is open, else None. Blocks hand it their ops and variables, so
# every layer runs imperatively with no second implementation; the static path pays one
# global read per appended op.
_dygraph_tracer_: Any = None


def in_dygraph_mode() -> bool:
    """True inside ``fluid.dygraph.guard()`` (the imperative mode)."""
    return _dygraph_tracer_ is not None


unique_name.in_dygraph_mode = in_dygraph_mode  # its temporaries' names follow the mode


def dygraph_only(func: Any) -> Any:
    """Decorate a function that runs only in the imperative mode: elsewhere it fails with
    Fluid's AssertionError."""
    @functools.wraps(func)
    def impl(*args: Any, **kwargs: Any) -> Any:
        assert in_dygraph_mode(), (
            f"We Only support {func.__name__} in Dygraph mode, please use "
            "fluid.dygraph.guard() as context to run it in Dygraph Mode")
        return func(*args, **kwargs)
    return impl


def dygraph_not_support(func: Any) -> Any:
    """Decorate a function that the imperative mode does not support: there it fails with
    Fluid's AssertionError."""
    @functools.wraps(func)
    def impl(*args: Any, **kwargs: Any) -> Any:
        assert not in_dygraph_mode(), f"We don't support {func.__name__} in Dygraph mode"
        return func(*args, **kwargs)
    return impl


def _dygraph_tracer() -> Any:
    """The imperative mode's tracer, or None in static mode."""
    return _dygraph_tracer_


@contextlib.contextmanager
def _dygraph_guard(tracer: Any) -> Iterator[None]:
    """Make ``tracer`` the current tracer (None: static mode) for the ``with`` body."""
    global _dygraph_tracer_
    old, _dygraph_tracer_ = _dygraph_tracer_, tracer
    try:
        yield
    finally:
        _dygraph_tracer_ = old


_dygraph_current_expected_place_: Any = None


def _current_expected_place() -> Any:
    """The place a ``_dygraph_place_guard`` names, else None (the guard's own)."""
    return _dygraph_current_expected_place_


@contextlib.contextmanager
def _dygraph_place_guard(place: Any) -> Iterator[None]:
    """Make ``place`` where the imperative mode puts the values made in the ``with`` body
    (Fluid 1.6's, used to run an op that has only a CPU kernel inside a GPU guard); in
    static mode it only records the place."""
    global _dygraph_current_expected_place_
    old_place, _dygraph_current_expected_place_ = _dygraph_current_expected_place_, place
    tracer = _dygraph_tracer_
    old_device = None if tracer is None else tracer.device
    if tracer is not None:
        tracer.device = to_device(place)
    try:
        yield
    finally:
        _dygraph_current_expected_place_ = old_place
        if tracer is not None:
            tracer.device = old_device


@functools.lru_cache(maxsize=4096)
def _in_package(filename: str) -> bool:
    return os.path.abspath(filename).startswith(_PACKAGE_DIR)


def _user_callsite() -> str:
    """The first stack frame outside the parafluid package, as ``file:line``."""
    frame = sys._getframe(2)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not _in_package(filename):
            return f"{filename}:{frame.f_lineno}"
        frame = frame.f_back
    return "<unknown>"


_STACK_LINES: dict[tuple[str, int, str], str] = {}


def _creation_callstack(skip: int) -> list[str]:
    """The Python stack that is creating an op, innermost frame first, starting ``skip``
    frames above the caller: Fluid's ``op_callstack`` (``traceback.format_stack``'s
    lines, reversed). Each distinct line is formatted once and shared by every op that
    names it (a program's ops mostly come from the same few layer calls)."""
    lines = _STACK_LINES
    if len(lines) > 1 << 16:  # code generated at run time could grow it without bound
        lines.clear()
    out = []
    frame: Any = sys._getframe(skip + 1)
    while frame is not None:
        code = frame.f_code
        key = (code.co_filename, frame.f_lineno, code.co_name)
        text = lines.get(key)
        if text is None:
            source = linecache.getline(key[0], key[1]).strip()
            text = f'  File "{key[0]}", line {key[1]}, in {key[2]}\n'
            if source:
                text += f"    {source}\n"
            lines[key] = text
        out.append(text)
        frame = frame.f_back
    return out


# --------------------------------------------------------------------------- operators


def _normalize_attr(value: Any) -> Any:
    """Attrs are plain data: numpy scalars and arrays become Python scalars and lists."""
    if isinstance(value, Block):
        return value
    if hasattr(value, "tolist") and hasattr(value, "dtype"):
        return value.tolist()  # numpy scalar (ndim 0) -> scalar, array -> nested lists
    if isinstance(value, (list, tuple)):
        return [_normalize_attr(v) for v in value]
    return value


class Operator:
    """One op in a Block: a type, named input/output slots holding variable names, attrs."""

    def __init__(self, block: Block, type: str, inputs: dict[str, list[str]],
                 outputs: dict[str, list[str]], attrs: dict[str, Any],
                 callsite: str = "<unknown>") -> None:
        self.block = block
        self.type = type
        self.inputs = inputs
        self.outputs = outputs
        self.attrs = attrs
        self.callsite = callsite

    # ---- Fluid's accessors
    def input(self, slot: str) -> list[str]:
        return self.inputs.get(slot, [])

    def output(self, slot: str) -> list[str]:
        return self.outputs.get(slot, [])

    @property
    def input_names(self) -> list[str]:
        return list(self.inputs)

    @property
    def output_names(self) -> list[str]:
        return list(self.outputs)

    @property
    def input_arg_names(self) -> list[str]:
        return [n for names in self.inputs.values() for n in names]

    @property
    def output_arg_names(self) -> list[str]:
        return [n for names in self.outputs.values() for n in names]

    def attr(self, name: str) -> Any:
        return self.attrs[name]

    def has_attr(self, name: str) -> bool:
        return name in self.attrs

    @property
    def attr_names(self) -> list[str]:
        return list(self.attrs)

    def attr_type(self, name: str) -> Any:
        """The ``core.AttrType`` of attribute ``name``."""
        return attr_type_of(self, name)

    @property
    def idx(self) -> int:
        """The op's position in its block (Fluid's ``op.idx``)."""
        for i, op in enumerate(self.block.ops):
            if op is self:
                return i
        raise ValueError(f"op {self.type!r} is not in its block {self.block.idx} any more")

    def all_attrs(self) -> dict[str, Any]:
        """Every attribute by name (the registered defaults included); a sub-block attribute
        gives its ``Block`` (``listen_and_serv``'s ``optimize_blocks``: a list of them)."""
        return dict(self.attrs)

    @property
    def sub_blocks(self) -> list[Block]:
        """The blocks this op holds in its attributes (``while`` / ``conditional_block``:
        ``sub_block``; ``listen_and_serv``: ``optimize_blocks``), in attribute order."""
        out: list[Block] = []
        for v in self.attrs.values():
            if isinstance(v, Block):
                out.append(v)
            elif isinstance(v, list):
                out += [b for b in v if isinstance(b, Block)]
        return out

    def _set_attr(self, name: str, value: Any) -> None:
        self.attrs[name] = _normalize_attr(value)
        self.block.program._bump()

    def _rename_input(self, old: str, new: str) -> None:
        for names in self.inputs.values():
            names[:] = [new if n == old else n for n in names]
        self.block.program._bump()

    def _rename_output(self, old: str, new: str) -> None:
        for names in self.outputs.values():
            names[:] = [new if n == old else n for n in names]
        self.block.program._bump()

    @property
    def desc(self) -> OpDescView:
        """Fluid's ``op.desc``: the op's description as the C++ side sees it."""
        return OpDescView(self)

    # ---- printing
    def to_string(self, with_details: bool = False) -> str:
        def slots(d: dict[str, list[str]]) -> str:
            return ", ".join(f"{k}=[{', '.join(v)}]" for k, v in d.items())

        from .ops.registry import listed_attrs  # registry imports nothing from here at import

        # NOTE: with_details adds the framework's bookkeeping, except the creating stack
        # (dozens of lines per op; read it with op.attr("op_callstack"))
        shown = ({k: v for k, v in sorted(self.attrs.items()) if k != "op_callstack"}
                 if with_details else listed_attrs(self.type, self.attrs))
        attrs = ", ".join(f"{k}={_attr_str(v)}" for k, v in shown.items())
        text = f"{{{slots(self.outputs)}}} = {self.type}({slots(self.inputs)})"
        return f"{text} {{{attrs}}}" if attrs else text

    def __repr__(self) -> str:
        return self.to_string()

    __str__ = __repr__


def __getattr__(name: str) -> object:
    # Fluid's framework module names load_op_library (custom C++ ops from a shared
    # library), which parafluid leaves out: it imports, and using it says what to do
    from .compat import missing_attribute

    return missing_attribute("fluid" if name == "load_op_library" else "framework", name,
                             __all__)


class DetachedOpDesc:
    """An op description in no block (what ``core.get_grad_op_desc`` returns): type,
    slots and attributes with Fluid's ``OpDesc`` accessors. ``block.desc.append_op()``
    then ``copy_from`` puts it in a block; ``infer_shape(block.desc)`` infers the shapes
    of the ops copied from it there."""

    def __init__(self, type: str, inputs: dict[str, list[str]],
                 outputs: dict[str, list[str]], attrs: dict[str, Any]) -> None:
        self._type = type
        self._inputs = {k: list(v) for k, v in inputs.items()}
        self._outputs = {k: list(v) for k, v in outputs.items()}
        self._attrs = dict(attrs)

    def type(self) -> str:
        return self._type

    def input(self, slot: str) -> list[str]:
        return list(self._inputs.get(slot, []))

    def output(self, slot: str) -> list[str]:
        return list(self._outputs.get(slot, []))

    def input_names(self) -> list[str]:
        return list(self._inputs)

    def output_names(self) -> list[str]:
        return list(self._outputs)

    def input_arg_names(self) -> list[str]:
        return [n for names in self._inputs.values() for n in names]

    def output_arg_names(self) -> list[str]:
        return [n for names in self._outputs.values() for n in names]

    def attr(self, name: str) -> Any:
        return self._attrs[name]

    def has_attr(self, name: str) -> bool:
        return name in self._attrs

    def attr_names(self) -> list[str]:
        return list(self._attrs)

    def set_attr(self, name: str, value: Any) -> None:
        self._attrs[name] = value

    def infer_var_type(self, block_desc: Any) -> None:
        self.infer_shape(block_desc)

    def infer_shape(self, block_desc: Any) -> None:
        from .ops.registry import prepare_op  # registry imports nothing from here at import

        for op in block_desc._block.ops:
            if getattr(op, "_source_desc", None) is self:
                prepare_op(op, infer=True)

    def __repr__(self) -> str:
        return f"DetachedOpDesc({self._type}, {self._inputs} -> {self._outputs})"


def _attr_str(v: Any) -> str:
    if isinstance(v, Block):
        return f"block[{v.idx}]"
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, list):
        return "[" + ", ".join(_attr_str(x) for x in v) + "]"
    if isinstance(v, str):
        return repr(v)
    return str(v)


# --------------------------------------------------------------------------- blocks


def _check_same_var(var: Variable, kwargs: dict[str, Any]) -> None:
    """ValueError (Fluid's words) when ``create_var(**kwargs)`` names ``var`` with another
    type, shape, dtype or LoD level than it has."""
    given = {"type": kwargs.get("type"), "shape": kwargs.get("shape"),
             "data type": kwargs.get("dtype"), "lod_level": kwargs.get("lod_level")}
    if given["type"] is not None:
        given["type"] = str.__str__(given["type"])
    if given["shape"] is not None:
        given["shape"] = _as_shape(given["shape"], var.name)
    if given["data type"] is not None:
        given["data type"] = convert_dtype(given["data type"])
    have = {"type": var.type, "shape": var.shape, "data type": var.dtype,
            "lod_level": var.lod_level}
    for what, value in given.items():
        if value is not None and have[what] is not None and value != have[what]:
            old, new = (tuple(have[what]), tuple(value)) if what == "shape" else \
                (have[what], value)
            raise ValueError(f"Variable {var.name} has been created before. the previous "
                             f"{what} is {old}; the new {what} is {new}. They are not "
                             "matched.")


class Block:
    """An ordered list of ops plus the variables they use; block 0 is the global block."""

    @property
    def desc(self) -> BlockDescView:
        """Fluid's ``block.desc``: the block's description as the C++ side sees it."""
        return BlockDescView(self)

    def __init__(self, program: Program, idx: int, parent_idx: int = -1) -> None:
        self.program = program
        self.idx = idx
        self.parent_idx = parent_idx
        self.vars: dict[str, Variable] = {}
        self.ops: list[Operator] = []

    @property
    def parent_block(self) -> Block | None:
        return None if self.parent_idx < 0 else self.program.blocks[self.parent_idx]

    # ---- variables
    def create_var(self, **kwargs: Any) -> Variable:
        if _dygraph_tracer_ is not None:  # an imperative variable, owned by no block
            return _dygraph_tracer_.create_var(self, **kwargs)
        name = kwargs.get("name")
        if name is not None and name in self.vars:
            existing = self.vars[name]
            # Fluid returns the existing variable when the same name is created twice, and
            # refuses a type, shape, dtype or LoD level that differs from the existing one
            _check_same_var(existing, kwargs)
            if kwargs.get("shape") is not None and existing.shape is None:
                existing.shape = _as_shape(kwargs["shape"], name)
            if kwargs.get("dtype") is not None and existing.dtype is None:
                existing.dtype = convert_dtype(kwargs["dtype"])
            if kwargs.get("persistable"):
                existing.persistable = True
            return existing
        var = Variable(self, **kwargs)
        self.vars[var.name] = var
        self.program._bump()
        return var

    def create_parameter(self, **kwargs: Any) -> Parameter:
        initializer = kwargs.pop("initializer", None)
        if _dygraph_tracer_ is not None:
            return _dygraph_tracer_.create_parameter(self, **kwargs)
        param = self._new_parameter(**kwargs)
        # NOTE: as Fluid's Block.create_parameter: an initializer given here appends its op
        # to this block, unless an op of the global block already writes the parameter
        if initializer is not None and not any(
                param.name in op.output_arg_names for op in self.program.global_block().ops):
            initializer(param, self)
        return param

    def _new_parameter(self, **kwargs: Any) -> Parameter:
        name = kwargs.get("name")
        existing = self.vars.get(name) if name is not None else None
        if isinstance(existing, Parameter):
            # A shared parameter (two layers with one ParamAttr name) must agree, as in Fluid.
            shape = _as_shape(kwargs.get("shape") or (), name)
            dtype = convert_dtype(kwargs["dtype"]) if kwargs.get("dtype") is not None \
                else existing.dtype
            if shape != existing.shape or dtype != existing.dtype:
                raise ValueError(f"parameter {name!r} was created before with shape "
                                 f"{list(existing.shape or ())} {existing.dtype}; now asked for "
                                 f"shape {list(shape)} {dtype}: a shared parameter must keep its "
                                 "shape and dtype (or give the layers different ParamAttr names)")
            return existing
        param = Parameter(self, **kwargs)
        self.vars[param.name] = param
        self.program._bump()
        return param

    def has_var(self, name: str) -> bool:
        return name in self.vars

    def var(self, name: str) -> Variable:
        """The variable ``name`` of this block; ValueError naming the block if absent."""
        if not isinstance(name, str):
            raise TypeError(f"var(): name must be a str, got {type(name).__name__}")
        try:
            return self.vars[name]
        except KeyError:
            raise ValueError(f"variable {name!r} is not in block {self.idx}") from None

    def _find_var_recursive(self, name: str) -> Variable | None:
        block: Block | None = self
        while block is not None:
            if name in block.vars:
                return block.vars[name]
            block = block.parent_block
        return None

    def _var_recursive(self, name: str) -> Variable:
        var = self._find_var_recursive(name)
        if var is None:
            raise ValueError(f"variable {name!r} is not in block {self.idx} or its parents")
        return var

    def all_parameters(self) -> list[Parameter]:
        return [v for v in self.vars.values() if isinstance(v, Parameter)]

    def iter_parameters(self) -> Iterator[Parameter]:
        return iter(self.all_parameters())

    def _remove_var(self, name: str) -> None:
        self.vars.pop(name, None)
        self.program._bump()

    # ---- operators
    def _make_op(self, type: str, inputs: dict[str, Any] | None, outputs: dict[str, Any] | None,
                 attrs: dict[str, Any] | None, infer: bool = True) -> Operator:
        from .ops.registry import prepare_op  # registry imports nothing from here at import
        from .placement import apply_current_place

        where = f"op {type!r}"
        ins = {slot: var_names(v, f"{where} input {slot!r}")
               for slot, v in (inputs or {}).items()}
        outs = {slot: var_names(v, f"{where} output {slot!r}")
                for slot, v in (outputs or {}).items()}
        attrs = {k: _normalize_attr(v) for k, v in (attrs or {}).items()}
        program = self.program
        attrs.setdefault("op_role", program._current_role)
        if program._op_role_var and "op_role_var" not in attrs:
            attrs["op_role_var"] = list(program._op_role_var)
        # NOTE: as Fluid's Operator: the name scope and the creating stack; an op copied
        # from another (a gradient, a pass's rewrite) keeps the original's
        attrs.setdefault("op_namescope", _current_name_scope.full_name())
        if "op_callstack" not in attrs:
            attrs["op_callstack"] = _creation_callstack(1)
        apply_current_place(attrs)  # place_guard / device_guard (placement.py)
        op = Operator(self, type, ins, outs, attrs, callsite=_user_callsite())
        prepare_op(op, infer=infer)
        return op

    def append_op(self, type: str | None = None, inputs: dict[str, Any] | None = None,
                  outputs: dict[str, Any] | None = None, attrs: dict[str, Any] | None = None,
                  infer_shape: bool = True) -> Operator:
        """Append an op; fills attr defaults and infers output shapes and dtypes.

        In the imperative mode the tracer runs the op at once instead."""
        if type is None:  # Fluid's words
            raise ValueError("`type` to initialized an Operator can not be None.")
        if _dygraph_tracer_ is not None:
            return _dygraph_tracer_.trace_op(type, inputs, outputs, attrs=attrs, block=self)
        op = self._make_op(type, inputs, outputs, attrs, infer=infer_shape)
        self.ops.append(op)
        self.program._bump()
        return op

    def _insert_op(self, index: int, type: str, inputs: dict[str, Any] | None = None,
                   outputs: dict[str, Any] | None = None, attrs: dict[str, Any] | None = None,
                   infer_shape: bool = True) -> Operator:
        if _dygraph_tracer_ is not None:
            return _dygraph_tracer_.trace_op(type, inputs, outputs, attrs=attrs, block=self)
        op = self._make_op(type, inputs, outputs, attrs, infer=infer_shape)
        self.ops.insert(index, op)
        self.program._bump()
        return op

    def _prepend_op(self, type: str, inputs: dict[str, Any] | None = None,
                    outputs: dict[str, Any] | None = None,
                    attrs: dict[str, Any] | None = None) -> Operator:
        return self._insert_op(0, type, inputs, outputs, attrs)

    def _remove_op(self, index: int) -> None:
        del self.ops[index]
        self.program._bump()

    def _insert_empty_op(self, index: int) -> Operator:
        """An op of no type yet at ``index``, for ``block.desc.append_op()`` to fill (Fluid's
        empty ``OpDesc``)."""
        op = Operator(self, "", {}, {}, {}, callsite=_user_callsite())
        self.ops.insert(index, op)
        self.program._bump()
        return op

    # ---- printing
    def to_string(self, with_details: bool = False) -> str:
        lines = [f"block {self.idx} (parent {self.parent_idx}):"]
        lines += [f"  {v._describe()}" for v in self.vars.values()]
        lines += [f"  {op.to_string(with_details)}" for op in self.ops]
        return "\n".join(lines)

    def __repr__(self) -> str:
        return self.to_string()

    __str__ = __repr__


# --------------------------------------------------------------------------- programs


class Program:
    """A list of blocks; block 0 is global. Build with layers inside ``program_guard``."""

    def __init__(self) -> None:
        self.blocks: list[Block] = [Block(self, 0)]
        self.current_block_idx = 0
        self._seed = 0
        self._version = 0
        self._current_role = OpRole.Forward
        self._op_role_var: list[str] = []
        self._appending_grad_times = 0
        # Fluid's flag: memory_optimize / release_memory rewrote this program
        self._is_mem_optimized = False
        # what passes and transpilers record about the job (kept by clone and serialization)
        self.meta = ProgramMeta()
        # the most iterations a loop op of this program may run (None: unbounded); a program
        # read from a model file gets one (io.MODEL_LOOP_LIMIT), so that a file cannot hold
        # a run forever
        self._loop_limit: int | None = None

    def _bump(self) -> None:
        self._version += 1

    # ---- blocks
    def global_block(self) -> Block:
        return self.blocks[0]

    def block(self, index: int) -> Block:
        if not 0 <= index < len(self.blocks):
            raise IndexError(f"program has {len(self.blocks)} blocks, no block {index}")
        return self.blocks[index]

    def current_block(self) -> Block:
        return self.blocks[self.current_block_idx]

    @property
    def num_blocks(self) -> int:
        return len(self.blocks)

    def _create_block(self, parent_idx: int | None = None) -> Block:
        if _dygraph_tracer_ is not None:
            raise NotImplementedError("sub-blocks (While, IfElse, Switch, StaticRNN, "
                                      "DynamicRNN, ...) belong to programs; in the imperative "
                                      "mode write the loop or the branch in Python, on the "
                                      "values' numpy()")
        parent = self.current_block_idx if parent_idx is None else parent_idx
        block = Block(self, len(self.blocks), parent)
        self.blocks.append(block)
        self.current_block_idx = block.idx
        self._bump()
        return block

    def _sync_with_cpp(self) -> None:
        """Fluid's: nothing to do, the descriptions are views of this program."""

    def _rollback(self) -> None:
        self.current_block_idx = self.current_block().parent_idx

    # ---- queries
    def list_vars(self) -> Iterator[Variable]:
        for block in self.blocks:
            yield from block.vars.values()

    def all_parameters(self) -> list[Parameter]:
        return [p for block in self.blocks for p in block.all_parameters()]

    @property
    def random_seed(self) -> int:
        return self._seed

    @random_seed.setter
    def random_seed(self, seed: int) -> None:
        if not isinstance(seed, int):
            raise TypeError(f"Program.random_seed must be an int, got {type(seed).__name__}")
        self._seed = seed

    @property
    def _trainers_endpoints(self) -> list[str]:
        """Fluid's name for the trainer endpoints of an nccl2 job (``meta.trainers_endpoints``)."""
        return self.meta.trainers_endpoints

    @_trainers_endpoints.setter
    def _trainers_endpoints(self, endpoints: Sequence[str]) -> None:
        if isinstance(endpoints, str) or not all(isinstance(e, str) for e in endpoints):
            raise TypeError(f"Program._trainers_endpoints must be a list of 'ip:port' strings, "
                            f"got {endpoints!r}")
        self.meta.trainers_endpoints = list(endpoints)

    # ---- what a pserver transpile marks (Fluid's names, over ``meta``)
    @property
    def _is_distributed(self) -> bool:
        """Whether a pserver-mode ``DistributeTranspiler`` made this a trainer program."""
        return bool(self.meta.is_distributed)

    @_is_distributed.setter
    def _is_distributed(self, value: bool) -> None:
        self.meta.is_distributed = bool(value)

    @property
    def _is_chief(self) -> bool:
        """Whether this is trainer 0's program (pserver mode)."""
        return bool(self.meta.is_chief)

    @_is_chief.setter
    def _is_chief(self, value: bool) -> None:
        self.meta.is_chief = bool(value)

    @property
    def _endpoints(self) -> list[str]:
        """The pserver endpoints (``meta.pserver_endpoints``)."""
        return self.meta.pserver_endpoints

    @_endpoints.setter
    def _endpoints(self, endpoints: Sequence[str]) -> None:
        if isinstance(endpoints, str) or not all(isinstance(e, str) for e in endpoints):
            raise TypeError(f"Program._endpoints must be a list of 'ip:port' strings, "
                            f"got {endpoints!r}")
        self.meta.pserver_endpoints = list(endpoints)

    @property
    def _distributed_lookup_table(self) -> str | None:
        """The name of the distributed lookup table, or None."""
        return self.meta.distributed_lookup_table

    @_distributed_lookup_table.setter
    def _distributed_lookup_table(self, name: str | None) -> None:
        self.meta.distributed_lookup_table = name or None

    @property
    def _parameters_on_pservers(self) -> VarsDistributed | None:
        """Which pserver holds which block of each parameter and optimizer state (pserver
        mode), or None before a transpile."""
        if not self.meta.is_distributed:
            return None
        return VarsDistributed(self.meta.parameters_on_pservers)

    # ---- role guards used by backward and optimizers
    @contextlib.contextmanager
    def _role_guard(self, role: int, role_var: Iterable[str] = ()) -> Iterator[None]:
        old_role, old_var = self._current_role, self._op_role_var
        self._current_role, self._op_role_var = role, list(role_var)
        try:
            yield
        finally:
            self._current_role, self._op_role_var = old_role, old_var

    def _backward_role_guard(self) -> contextlib.AbstractContextManager[None]:
        return self._role_guard(OpRole.Backward)

    def _optimized_guard(self, param_and_grads: Sequence[Any]) -> \
            contextlib.AbstractContextManager[None]:
        names = [v.name if isinstance(v, Variable) else v for v in param_and_grads]
        return self._role_guard(OpRole.Optimize, names)

    def _lr_schedule_guard(self) -> contextlib.AbstractContextManager[None]:
        return self._role_guard(OpRole.LRSched)

    # ---- copies
    def clone(self, for_test: bool = False) -> Program:
        """A deep copy; ``for_test=True`` drops backward/optimize ops and sets ``is_test``."""
        from .serialization import program_from_dict, program_to_dict

        # NOTE: no document check: the data comes from a live Program, not from outside
        p = program_from_dict(program_to_dict(self), check=False)
        p._copy_python_side(self)
        if for_test:
            p._prune_for_test()
        return p

    @property
    def desc(self) -> ProgramDescView:
        """Fluid's ``program.desc``: ``num_blocks()``, ``block(i)``, ``serialize_to_string()``."""
        return ProgramDescView(self)

    def _prune(self, targets: Any) -> Program:
        """Fluid's: a copy keeping only the ops ``targets`` (Variables, through the first op
        writing each, or Operators) need; see ``program_desc.prune_program``."""
        return self._prune_with_input([], targets)

    def _prune_with_input(self, feeded_var_names: Any, targets: Any) -> Program:
        """``_prune`` that stops at the variables named in ``feeded_var_names`` (their
        producers go)."""
        if not isinstance(feeded_var_names, list):
            feeded_var_names = [feeded_var_names]
        if not isinstance(targets, list):
            targets = [targets]
        if not all(isinstance(n, str) for n in feeded_var_names):
            raise ValueError("All feeded_var_names of prune() can only be str.")
        where = []
        for t in targets:
            if isinstance(t, Variable):
                t = next((op for op in self.global_block().ops
                          if t.name in op.output_arg_names), None)
                if t is None:
                    raise ValueError("The target variable must have an associated operator "
                                     "that generates it.")
            elif not isinstance(t, Operator):
                raise ValueError("All targets of prune() can only be Variable or Operator.")
            where.append((t.block.idx, next(i for i, op in enumerate(t.block.ops)
                                            if op is t)))
        return prune_program(self, feeded_var_names, where)

    def _inference_optimize(self, prune_read_op: bool = True) -> Program:
        """Fluid's: a copy whose ``is_test`` ops run as at inference, without the reader's
        ops (up to the first ``read``) when ``prune_read_op``."""
        return inference_program(self, prune_read_op)

    def _prune_for_test(self) -> None:
        """In place, on a fresh copy: what an evaluation runs. Backward, optimize and
        LR-schedule ops go, ops with an ``is_test`` attr (dropout, batch_norm) switch to
        inference behaviour, gradient variables nothing uses any more go."""
        drop = OpRole.Backward | OpRole.Optimize | OpRole.LRSched
        for block in self.blocks:
            block.ops = [op for op in block.ops if not (op.attrs.get("op_role", 0) & drop)]
            for op in block.ops:
                if "is_test" in op.attrs:
                    op.attrs["is_test"] = True
        # NOTE: over every block: a variable of the global block may be used only in a
        # sub-block
        used = {n for block in self.blocks for op in block.ops
                for n in op.input_arg_names + op.output_arg_names}
        for block in self.blocks:
            for name in list(block.vars):
                if name not in used and (name.endswith(GRAD_SUFFIX) or GRAD_SUFFIX + "@" in name):
                    del block.vars[name]
        self._appending_grad_times = 0
        self._bump()

    def _copy_python_side(self, other: Program) -> None:
        """Carry over what serialization does not: regularizer/clip objects on parameters."""
        for block, src in zip(self.blocks, other.blocks):
            for name, var in block.vars.items():
                orig = src.vars.get(name)
                if isinstance(var, Parameter) and isinstance(orig, Parameter):
                    var.regularizer = orig.regularizer
                    var.gradient_clip_attr = orig.gradient_clip_attr
        self._appending_grad_times = other._appending_grad_times
        self._loop_limit = other._loop_limit

    # ---- printing, checking, bytes
    def to_string(self, throw_on_error: bool = True, with_details: bool = False) -> str:
        return "\n".join(b.to_string(with_details) for b in self.blocks)

    def __repr__(self) -> str:
        return self.to_string()

    __str__ = __repr__

    def verify(self) -> None:
        """Raise ProgramVerificationError listing every problem found (see verifier.py)."""
        from .verifier import verify

        verify(self)

    def serialize_to_string(self) -> bytes:
        from .serialization import dumps

        return dumps(self)

    @staticmethod
    def parse_from_string(binary_str: bytes) -> Program:
        """The Program that ``serialize_to_string`` wrote; the input is untrusted: anything
        malformed is a ValueError naming the field (``blocks[0].vars[2] ('w').shape[0]: ...``).

        Example::

            same = fluid.Program.parse_from_string(program.serialize_to_string())
        """
        from .serialization import loads

        return loads(binary_str)

    def __deepcopy__(self, memo: dict[int, Any]) -> Program:
        return self.clone()


class ProgramDesc(ProgramDescView):
    """Fluid's ``core.ProgramDesc``: a program's description to build desc by desc.
    ``ProgramDesc()`` is a new program's (one empty block), ``ProgramDesc(desc)`` a copy's,
    ``ProgramDesc(data)`` the program ``serialize_to_string`` wrote.

    Example::

        desc = core.ProgramDesc()
        x = desc.block(0).var(b"x")
        op = desc.block(0).append_op()
        op.set_type("relu")
    """

    def __init__(self, source: ProgramDescView | bytes | None = None) -> None:
        if source is None:
            program = Program()
        elif isinstance(source, ProgramDescView):
            program = source._program.clone()
        elif isinstance(source, bytes):
            program = Program.parse_from_string(source)
        else:
            raise TypeError(f"ProgramDesc: expected nothing, a ProgramDesc or the bytes of "
                            f"serialize_to_string, got {type(source).__name__}")
        super().__init__(program)


# --------------------------------------------------------------------------- defaults


_main_program = Program()
_startup_program = Program()


def default_main_program() -> Program:
    """The program layers append to outside any ``program_guard``."""
    return _main_program


def default_startup_program() -> Program:
    """The program that initializes parameters (run it once with an Executor)."""
    return _startup_program


def switch_main_program(program: Program) -> Program:
    global _main_program
    old, _main_program = _main_program, program
    return old


def switch_startup_program(program: Program) -> Program:
    global _startup_program
    old, _startup_program = _startup_program, program
    return old


@contextlib.contextmanager
def program_guard(main_program: Program, startup_program: Program | None = None) -> Iterator[None]:
    """Make ``main_program`` (and ``startup_program``) the defaults inside the block."""
    if not isinstance(main_program, Program):
        raise TypeError(f"program_guard: main_program must be a Program, "
                        f"got {type(main_program).__name__}")
    if startup_program is not None and not isinstance(startup_program, Program):
        raise TypeError(f"program_guard: startup_program must be a Program, "
                        f"got {type(startup_program).__name__}")
    old_main = switch_main_program(main_program)
    old_startup = switch_startup_program(startup_program) if startup_program is not None else None
    try:
        yield
    finally:
        switch_main_program(old_main)
        if old_startup is not None:
            switch_startup_program(old_startup)


class _NameScope:
    """A node of Fluid's tree of name scopes: a prefix entered again under one parent is
    told apart by a suffix (``s1``, then ``s1_1``), as Fluid's ``NameScope.child``."""

    def __init__(self, name: str = "", parent: _NameScope | None = None) -> None:
        self.name, self.parent = name, parent
        self.children: dict[str, list[_NameScope]] = {}

    def child(self, prefix: str) -> _NameScope:
        kids = self.children.setdefault(prefix, [])
        kid = _NameScope(prefix if not kids else f"{prefix}_{len(kids)}", self)
        kids.append(kid)
        return kid

    def full_name(self) -> str:
        parts, scope = [], self
        while scope is not None:
            parts.append(scope.name)
            scope = scope.parent
        return "/".join(reversed(parts)) + "/"


_ROOT_NAME_SCOPE = _NameScope()
_current_name_scope = _ROOT_NAME_SCOPE


@contextlib.contextmanager
def name_scope(prefix: str | None = None) -> Iterator[None]:
    """Group ops under a name prefix (recorded in their ``op_namescope`` attr, e.g.
    ``/s1/s2/``); the scopes form one tree per process, as Fluid's, so a prefix entered
    again under the same parent becomes ``s1_1``. Nothing in the imperative mode."""
    global _current_name_scope
    if in_dygraph_mode():
        yield
        return
    outer = _current_name_scope
    _current_name_scope = outer.child(prefix or "")
    try:
        yield
    finally:
        _current_name_scope = outer
