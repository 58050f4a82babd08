"""Fluid 1.6's description API (``core.ProgramDesc``, ``program.desc``, ``block.desc``,
``op.desc``, ``VarDesc``) as views of a Program, and the program rewrites Fluid's Python
calls on descriptions: ``Program._prune`` / ``_prune_with_input`` (``core.prune``) and
``_inference_optimize``.

A description is not a second copy of the program: ``block.desc.append_op()`` puts an op
of no type yet into the block, and ``set_type`` / ``set_input`` / ``_set_attr`` edit that
op; ``block.desc.var(name)`` makes the variable in the block. Two views of one op (or
variable, or block) compare equal. These work on any object shaped as a Program
(``blocks``, ``global_block()``, ``clone()``, ``serialize_to_string()``); ``framework``
resolves prune targets to ops and calls the rewrites.

Example::

    block = program.desc.block(0)
    x = block.var(b"x")
    x.set_shape([10, 20])
    op = block.append_op()
    op.set_type("relu")
    op.set_input("X", ["x"])
    op.set_output("Out", ["y"])
    op.infer_shape(block)
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from typing import Any

from .dtypes import convert_dtype
from .variable import _as_shape

__all__ = ["ProgramDescView", "BlockDescView", "OpDescView", "VarDescView", "AttrType",
           "attr_type_of", "prune_program", "inference_program"]

_GRAD_SUFFIX = "@GRAD"  # framework.GRAD_SUFFIX (framework imports this module)


class AttrType(enum.IntEnum):
    """Fluid's ``core.AttrType``: the kinds of op attributes (framework.proto's values)."""

    INT = 0
    FLOAT = 1
    STRING = 2
    INTS = 3
    FLOATS = 4
    STRINGS = 5
    BOOLEAN = 6
    BOOLEANS = 7
    BLOCK = 8
    LONG = 9
    BLOCKS = 10
    LONGS = 11


def _is_block(value: Any) -> bool:
    return hasattr(value, "ops") and hasattr(value, "idx") and hasattr(value, "program")


def _kind(value: Any) -> AttrType | None:
    if isinstance(value, bool):
        return AttrType.BOOLEAN
    if isinstance(value, int):
        return AttrType.INT if -2 ** 31 <= value < 2 ** 31 else AttrType.LONG
    if isinstance(value, float):
        return AttrType.FLOAT
    if isinstance(value, str):
        return AttrType.STRING
    if _is_block(value):
        return AttrType.BLOCK
    return None


_LISTS = {AttrType.BOOLEAN: AttrType.BOOLEANS, AttrType.INT: AttrType.INTS,
          AttrType.LONG: AttrType.LONGS, AttrType.FLOAT: AttrType.FLOATS,
          AttrType.STRING: AttrType.STRINGS, AttrType.BLOCK: AttrType.BLOCKS}


_STRING_LISTS = frozenset({"op_role_var", "op_callstack"})


def attr_type_of(op: Any, name: str) -> AttrType:
    """The ``AttrType`` of attribute ``name`` of ``op``: the registered default's kind
    where the op type declares one, else the value's."""
    from .ops.registry import get_op_def  # the registry imports nothing from here

    if name not in op.attrs:
        raise ValueError(f"op {op.type!r} has no attribute {name!r}")
    value = op.attrs[name]
    try:
        default = get_op_def(op.type).attrs.get(name)
    except ValueError:
        default = None
    for v in (default, value):
        if isinstance(v, list):
            kinds = {_kind(x) for x in v}
            if len(kinds) == 1 and None not in kinds:
                kind = kinds.pop()
                return _LISTS[AttrType.LONG if kind == AttrType.INT and any(
                    _kind(x) == AttrType.LONG for x in v) else kind]
        elif v is not None and _kind(v) is not None:
            kind = _kind(v)
            assert kind is not None
            if kind == AttrType.INT and _kind(value) == AttrType.LONG:
                return AttrType.LONG
            return kind
    if name in _STRING_LISTS:  # the framework's (Fluid's OpProtoAndCheckerMaker declares)
        return AttrType.STRINGS
    if isinstance(value, list):  # an empty list, and no default to tell its kind
        return AttrType.INTS
    raise ValueError(f"op {op.type!r}: attribute {name!r} holds {type(value).__name__}, "
                     "which no AttrType describes")


def _name(name: str | bytes) -> str:
    return name.decode() if isinstance(name, bytes) else name


def _normalized(value: Any) -> Any:
    if hasattr(value, "tolist") and hasattr(value, "dtype"):
        return value.tolist()
    if isinstance(value, (list, tuple)):
        return [_normalized(v) for v in value]
    return value


class VarDescView:
    """Fluid's ``VarDesc`` of a variable: its name, kind, dtype, shape and LoD level (a
    reader's several, ``set_shapes`` / ``set_dtypes`` / ``set_lod_levels``)."""

    __slots__ = ("_var",)

    def __init__(self, var: Any) -> None:
        self._var = var

    def __eq__(self, other: object) -> bool:
        return isinstance(other, VarDescView) and other._var is self._var

    def __hash__(self) -> int:
        return id(self._var)

    def name(self) -> str:
        return self._var.name

    def type(self) -> Any:
        return self._var.type

    def set_type(self, kind: Any) -> None:
        self._var.type = str.__str__(kind) if isinstance(kind, str) else kind

    def dtype(self) -> Any:
        return self._var.dtype

    def set_dtype(self, dtype: Any) -> None:
        self._var.dtype = convert_dtype(dtype)

    def dtypes(self) -> list[Any]:
        return list(getattr(self._var, "_desc_dtypes", []))

    def set_dtypes(self, dtypes: Sequence[Any]) -> None:
        self._var._desc_dtypes = [convert_dtype(d) for d in dtypes]

    def shape(self) -> list[int]:
        return list(self._var.shape or [])

    def set_shape(self, shape: Sequence[int]) -> None:
        self._var.shape = _as_shape(shape, self._var.name)

    def shapes(self) -> list[list[int]]:
        return [list(s) for s in getattr(self._var, "_desc_shapes", [])]

    def set_shapes(self, shapes: Sequence[Sequence[int]]) -> None:
        self._var._desc_shapes = [list(_as_shape(s, self._var.name)) for s in shapes]

    def lod_level(self) -> int:
        return self._var.lod_level

    def set_lod_level(self, level: int) -> None:
        self._var.lod_level = int(level)

    def lod_levels(self) -> list[int]:
        return list(getattr(self._var, "_desc_lod_levels", []))

    def set_lod_levels(self, levels: Sequence[int]) -> None:
        self._var._desc_lod_levels = [int(v) for v in levels]

    def persistable(self) -> bool:
        return bool(self._var.persistable)

    def set_persistable(self, value: bool) -> None:
        self._var.persistable = bool(value)

    def need_check_feed(self) -> bool:
        return bool(self._var.need_check_feed)

    def set_need_check_feed(self, value: bool) -> None:
        self._var.need_check_feed = bool(value)


class OpDescView:
    """Fluid's ``OpDesc`` of an op: its type, slots and attributes to read and edit, the
    attr defaults (``check_attrs``) and the shape inference (``infer_shape``) of its type,
    and ``copy_from`` to fill an op ``block.desc.append_op()`` made."""

    __slots__ = ("_op",)

    def __init__(self, op: Any) -> None:
        self._op = op

    def __eq__(self, other: object) -> bool:
        return isinstance(other, OpDescView) and other._op is self._op

    def __hash__(self) -> int:
        return id(self._op)

    def __repr__(self) -> str:
        return f"OpDesc({self._op.type or '<no type>'})"

    def _edited(self) -> None:
        self._op.block.program._bump()

    # ---- reading
    def type(self) -> str:
        return self._op.type

    def input(self, slot: str) -> list[str]:
        return list(self._op.inputs.get(slot, []))

    def output(self, slot: str) -> list[str]:
        return list(self._op.outputs.get(slot, []))

    def input_names(self) -> list[str]:
        return list(self._op.inputs)

    def output_names(self) -> list[str]:
        return list(self._op.outputs)

    def input_arg_names(self) -> list[str]:
        return [n for names in self._op.inputs.values() for n in names]

    def output_arg_names(self) -> list[str]:
        return [n for names in self._op.outputs.values() for n in names]

    def attr(self, name: str) -> Any:
        return self._op.attrs[name]

    def has_attr(self, name: str) -> bool:
        return name in self._op.attrs

    def attr_names(self) -> list[str]:
        return list(self._op.attrs)

    def attr_type(self, name: str) -> AttrType:
        return attr_type_of(self._op, name)

    def _block_attr_id(self, name: str) -> int:
        return self._op.attrs[name].idx

    def _blocks_attr_ids(self, name: str) -> list[int]:
        return [b.idx for b in self._op.attrs[name]]

    def block(self) -> BlockDescView:
        return BlockDescView(self._op.block)

    # ---- editing
    def set_type(self, op_type: str) -> None:
        self._op.type = op_type
        self._edited()

    def set_input(self, slot: str, names: Sequence[str]) -> None:
        self._op.inputs[slot] = [_name(n) for n in names]
        self._edited()

    def set_output(self, slot: str, names: Sequence[str]) -> None:
        self._op.outputs[slot] = [_name(n) for n in names]
        self._edited()

    def _set_attr(self, name: str, value: Any) -> None:
        self._op.attrs[name] = _normalized(value)
        self._edited()

    set_attr = _set_attr

    def remove_attr(self, name: str) -> None:
        self._op.attrs.pop(name, None)
        self._edited()

    def set_block_attr(self, name: str, block: BlockDescView) -> None:
        self._op.attrs[name] = block._block
        self._edited()

    def set_blocks_attr(self, name: str, blocks: Sequence[BlockDescView]) -> None:
        self._op.attrs[name] = [b._block for b in blocks]
        self._edited()

    def _rename_input(self, old: str, new: str) -> None:
        self._op._rename_input(old, new)

    def _rename_output(self, old: str, new: str) -> None:
        self._op._rename_output(old, new)

    def check_attrs(self) -> None:
        """Fill the attributes the op's type declares and this op lacks with their
        defaults (an unknown type is a ValueError naming it)."""
        from .ops.registry import get_op_def  # the registry imports nothing from here

        for key, default in get_op_def(self._op.type).attrs.items():
            if key not in self._op.attrs:
                self._op.attrs[key] = _normalized(default)
        self._edited()

    def infer_var_type(self, block_desc: Any = None) -> None:
        """Output kinds and dtypes are inferred with the shapes (``infer_shape``)."""
        self.infer_shape(block_desc)

    def infer_shape(self, block_desc: Any = None) -> None:
        """Infer the op's output shapes and dtypes from its inputs' (its type's rule)."""
        from .ops.registry import prepare_op  # the registry imports nothing from here

        prepare_op(self._op, infer=True)

    def copy_from(self, desc: Any) -> None:
        """Make this op ``desc``'s (another op's description, or one of
        ``core.get_grad_op_desc``); the variables it names that the block lacks are made,
        their shapes inferred later by ``desc.infer_shape(block)``."""
        from .ops.registry import prepare_op  # the registry imports nothing from here

        block = self._op.block
        # a gradient the block does not hold was never made (an output nothing reads, such
        # as batch_norm's MeanOut): left out, as the backward pass leaves it out
        inputs = {slot: [n for n in desc.input(slot) if not n.endswith(_GRAD_SUFFIX)
                         or block._find_var_recursive(n) is not None]
                  for slot in desc.input_names()}
        inputs = {slot: names for slot, names in inputs.items() if names}
        outputs = {slot: desc.output(slot) for slot in desc.output_names()}
        for names in (*inputs.values(), *outputs.values()):
            for n in names:
                if block._find_var_recursive(n) is None:
                    block.create_var(name=n)
        op = self._op
        op.type, op.inputs, op.outputs = desc.type(), inputs, outputs
        op.attrs.update({k: _normalized(desc.attr(k)) for k in desc.attr_names()})
        op.attrs.setdefault("op_role", block.program._current_role)
        prepare_op(op, infer=False)
        op._source_desc = desc
        self._edited()


class BlockDescView:
    r"""Fluid's ``BlockDesc`` of a block: its variables by name (str or bytes), as
    ``VarDesc``\ s, and its ops as ``OpDesc``\ s to append, insert and remove."""

    __slots__ = ("_block",)

    def __init__(self, block: Any) -> None:
        self._block = block

    def __eq__(self, other: object) -> bool:
        return isinstance(other, BlockDescView) and other._block is self._block

    def __hash__(self) -> int:
        return id(self._block)

    @property
    def id(self) -> int:
        return self._block.idx

    @property
    def parent(self) -> int:
        return self._block.parent_idx

    # ---- variables
    def var(self, name: str | bytes) -> VarDescView:
        """The variable ``name`` of this block, made if absent (Fluid's ``Var``; a new
        one is a float32 LoD tensor of no shape yet, as a description always has a
        dtype)."""
        n = _name(name)
        var = self._block.vars.get(n)
        if var is None:
            var = self._block.create_var(name=n, dtype="float32")
        return VarDescView(var)

    def find_var(self, name: str | bytes) -> VarDescView | None:
        var = self._block.vars.get(_name(name))
        return None if var is None else VarDescView(var)

    def find_var_recursive(self, name: str | bytes) -> VarDescView | None:
        var = self._block._find_var_recursive(_name(name))
        return None if var is None else VarDescView(var)

    def has_var(self, name: str | bytes) -> bool:
        return _name(name) in self._block.vars

    def has_var_recursive(self, name: str | bytes) -> bool:
        return self._block._find_var_recursive(_name(name)) is not None

    def all_vars(self) -> list[VarDescView]:
        return [VarDescView(v) for v in self._block.vars.values()]

    def _remove_var(self, name: str | bytes) -> None:
        self._block.vars.pop(_name(name), None)
        self._block.program._bump()

    # ---- ops
    def append_op(self) -> OpDescView:
        return OpDescView(self._block._insert_empty_op(len(self._block.ops)))

    def _prepend_op(self) -> OpDescView:
        return OpDescView(self._block._insert_empty_op(0))

    def _insert_op(self, index: int) -> OpDescView:
        return OpDescView(self._block._insert_empty_op(index))

    def _remove_op(self, start: int, end: int) -> None:
        """Remove the ops ``start`` to ``end`` (not included), as Fluid's."""
        del self._block.ops[start:end]
        self._block.program._bump()

    def op_size(self) -> int:
        return len(self._block.ops)

    def op(self, index: int) -> OpDescView:
        return OpDescView(self._block.ops[index])


class ProgramDescView:
    """Fluid's ``ProgramDesc`` of a program: ``num_blocks()``, ``block(i)`` (the block's
    ``BlockDesc``), ``append_block(parent)``, ``serialize_to_string()`` (its bytes)."""

    __slots__ = ("_program",)

    def __init__(self, program: Any) -> None:
        self._program = program

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ProgramDescView) and other._program is self._program

    def __hash__(self) -> int:
        return id(self._program)

    def append_block(self, parent: BlockDescView) -> BlockDescView:
        """A new block whose parent is ``parent`` (the program's current block stays)."""
        program = self._program
        current = program.current_block_idx
        block = program._create_block(parent.id)
        program.current_block_idx = current
        return BlockDescView(block)

    def num_blocks(self) -> int:
        return len(self._program.blocks)

    def block(self, index: int) -> Any:
        if not 0 <= index < len(self._program.blocks):
            raise IndexError(f"ProgramDesc.block({index}): the program has "
                             f"{len(self._program.blocks)} blocks")
        return BlockDescView(self._program.blocks[index])

    def serialize_to_string(self) -> bytes:
        """The bytes ``Program.parse_from_string`` reads back."""
        return self._program.serialize_to_string()

    def flush(self) -> None:
        """Nothing to write back: the description is the program itself."""


def prune_program(program: Any, feeds: Iterable[str], targets: Sequence[tuple[int, int]]
                  ) -> Any:
    """Fluid's ``core.prune``: a copy of ``program`` whose global block keeps the target ops
    (``(block index, op index)`` pairs) and the ops computing what they read, walking back
    and stopping at the variables named in ``feeds``; the variables no kept op uses go.
    Nothing else changes (no ``is_test``, no role filtering: see ``inference_program``).
    """
    fed = set(feeds)
    out = program.clone()
    block = out.global_block()
    marked = {i for b, i in targets if b == 0}
    needed: set[str] = set()
    keep = []
    for i in range(len(block.ops) - 1, -1, -1):
        op = block.ops[i]
        if i in marked or any(n in needed for n in op.output_arg_names):
            needed.update(n for n in op.input_arg_names if n not in fed)
            keep.append(op)
    keep.reverse()
    block.ops = keep
    # NOTE: a kept op's sub-block may read variables of the global block beyond the op's
    # declared inputs; they stay too
    used = {n for op in keep for n in op.input_arg_names + op.output_arg_names}
    for sub in out.blocks[1:]:
        used.update(n for op in sub.ops for n in op.input_arg_names + op.output_arg_names)
    for name in list(block.vars):
        if name not in used:
            del block.vars[name]
    out._bump()
    return out


def inference_program(program: Any, prune_read_op: bool = True) -> Any:
    """Fluid's ``Program._inference_optimize``: a copy whose ops with an ``is_test`` attr
    run as at inference; with ``prune_read_op``, the global block's ops up to its first
    ``read`` op (the reader's) and its reader variables are gone."""
    out = program.clone()
    block = out.global_block()
    if prune_read_op:
        reads = [i for i, op in enumerate(block.ops) if op.type == "read"]
        if reads:
            block.ops = block.ops[reads[0] + 1:]
        for name in [n for n, v in block.vars.items() if v.type == "reader"]:
            del block.vars[name]
    for b in out.blocks:
        for op in b.ops:
            if "is_test" in op.attrs:
                op.attrs["is_test"] = True
    out._bump()
    return out
