"""Fluid's ``fluid.op``: build one operator from keyword arguments and run it on a scope.

Fluid's own tests (and programs that drive single ops, such as optimizers on
``SelectedRows``) write::

    from parafluid.op import Operator
    scope = fluid.core.Scope()
    scope.var("X").get_tensor().set(np.ones((2, 3), "float32"), place)
    op = Operator("scale", X="X", Out="Out", scale=2.0)
    op.run(scope, place)
    np.array(scope.find_var("Out").get_tensor())     # 2.0 everywhere

A keyword naming one of the op type's input or output slots takes a variable name (or a
list of them for a duplicable slot); every other keyword is an attribute. ``run`` reads
the inputs' values (tensors with their LoD, ``SelectedRows``, tensor arrays) from the
scope, runs the op's own kernel through the Executor, and writes the outputs back into
the scope under their names, as Fluid's ``core.Operator.run`` does.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from .compat import NotProvided
from .dtypes import VarType, convert_dtype
from .executor import Executor
from .framework import DetachedOpDesc, Program
from .lod import attach_lod, get_lod
from .ops.registry import get_op_def, has_op, registered_ops
from .scope import Scope, SelectedRows, TensorArray

__all__ = ["Operator", "OperatorFactory", "get_all_op_protos", "RecurrentOp",
           "DynamicRecurrentOp", "CondOp"]

# Fluid's op.py also names creators of op types its C++ side no longer has: importing
# them works, using one says what to use instead (as in Fluid, they fail when used)
RecurrentOp = NotProvided("op.RecurrentOp")
DynamicRecurrentOp = NotProvided("op.DynamicRecurrentOp")
CondOp = NotProvided("op.CondOp")


def _names(op_type: str, slot: str, value: Any, duplicable: bool, what: str) -> list[str]:
    if isinstance(value, str):
        names = [value]
    elif isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        names = list(value)
    else:
        raise TypeError(f"Operator {op_type!r}: {what} {slot!r} takes a variable name or a "
                        f"list of names, got {type(value).__name__} {value!r}")
    if not duplicable and len(names) > 1:
        raise ValueError(f"Operator {op_type!r}: {what} {slot!r} expects only one variable, "
                         f"but {len(names)} are given: {names}")
    return names


def _attr_value(value: Any) -> Any:
    """Attributes arrive as Fluid's op makers take them: numpy arrays and scalars become
    Python lists and numbers."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return value


class Operator(DetachedOpDesc):
    """One operator of type ``type`` with its slots and attributes, runnable on a scope
    (Fluid's ``core.Operator`` accessors: ``type()``, ``input(slot)``, ``attr(name)``, ...).

    Example::

        op = Operator("sgd", Param="w", Grad="g", LearningRate="lr", ParamOut="w")
        op.run(scope, fluid.CPUPlace())
    """

    def __init__(self, type: str, **kwargs: Any) -> None:
        if not isinstance(type, str) or not has_op(type):
            raise ValueError(f"Operator: no op type {type!r} is registered"
                             + _suggest(type))
        opdef = get_op_def(type)
        inputs: dict[str, list[str]] = {}
        outputs: dict[str, list[str]] = {}
        attrs: dict[str, Any] = {}
        for key, value in kwargs.items():
            if value is None:
                continue
            if key in opdef.input_by_name:
                inputs[key] = _names(type, key, value, opdef.input_by_name[key].duplicable,
                                     "input")
            elif key in opdef.output_by_name:
                outputs[key] = _names(type, key, value, opdef.output_by_name[key].duplicable,
                                      "output")
            else:
                attrs[key] = _attr_value(value)
        super().__init__(type, inputs, outputs, attrs)

    def inputs(self) -> dict[str, list[str]]:
        return {k: list(v) for k, v in self._inputs.items()}

    def outputs(self) -> dict[str, list[str]]:
        return {k: list(v) for k, v in self._outputs.items()}

    def input_vars(self) -> list[str]:
        return self.input_arg_names()

    def output_vars(self) -> list[str]:
        return self.output_arg_names()

    def support_gpu(self) -> bool:
        return True  # every kernel is torch code, on any device torch runs on

    def __str__(self) -> str:
        return (f"Op({self._type}), inputs:{self._inputs}, outputs:{self._outputs}, "
                f"attrs:{self._attrs}")

    __repr__ = __str__

    def run(self, scope: Scope, place: Any) -> None:
        """Run the op on ``scope``'s values at ``place``; its outputs are written to
        ``scope`` (an output that is also an input is updated in place)."""
        if not isinstance(scope, Scope):
            raise TypeError(f"Operator {self._type!r}.run: scope must be a Scope, got "
                            f"{type(scope).__name__}")
        program = Program()
        block = program.global_block()
        made: dict[str, Any] = {}

        def declare(name: str, must_hold: bool) -> Any:
            if name in made:
                return made[name]
            found = scope.find_var(name)
            value = None if found is None else found.value
            if value is None and must_hold:
                where = "is not in the scope" if found is None else "holds no value"
                raise ValueError(f"Operator {self._type!r}: input variable {name!r} {where}; "
                                 "set it with scope.var(name).get_tensor().set(...) first")
            meta = _meta_of(found)
            if not must_hold:
                # an output's shape and dtype are the op's to decide; the scope only says
                # what kind of value the variable holds (a SelectedRows, a tensor array)
                meta = {k: v for k, v in meta.items() if k == "type"}
            made[name] = block.create_var(name=name, persistable=True, **meta)
            return made[name]

        ins = {slot: [declare(n, True) for n in names] for slot, names in self._inputs.items()}
        outs = {slot: [declare(n, False) for n in names]
                for slot, names in self._outputs.items()}
        block.append_op(type=self._type, inputs=ins, outputs=outs, attrs=dict(self._attrs))
        # a scope keeps a tensor's LoD beside it; the kernels read it from the tensor
        for name in self.input_vars():
            var = scope.find_var(name)
            if var.lod and isinstance(var.value, torch.Tensor):
                attach_lod(var.value, var.lod)
        # an op that fills a tensor writes a row-sparse output's value tensor (Fluid's
        # GetMutable<SelectedRows>()->mutable_value(): fill_constant, uniform_random, ...)
        sparse_out = {n: scope.find_var(n).value for n in self.output_vars()
                      if scope.find_var(n) is not None
                      and isinstance(scope.find_var(n).value, SelectedRows)}
        Executor(place).run(program, scope=scope)
        for name in self.output_vars():
            var = scope.find_var(name)
            rows = sparse_out.get(name)
            if rows is not None and isinstance(var.value, torch.Tensor):
                rows.value = var.value
                rows.rows = rows.rows.to(var.value.device)
                var.value = rows
                continue
            lod = get_lod(var.value) if var is not None else None
            if lod:
                var.lod = [list(level) for level in lod]


def _meta_of(found: Any) -> dict[str, Any]:
    """What a variable declaration needs to know of a scope value already there."""
    value = None if found is None else found.value
    if isinstance(value, SelectedRows):
        return {"type": VarType.SELECTED_ROWS, "shape": list(value.shape),
                "dtype": convert_dtype(value.value.dtype)}
    if isinstance(value, (TensorArray, list)):
        return {"type": VarType.LOD_TENSOR_ARRAY}
    if isinstance(value, torch.Tensor):
        return {"shape": list(value.shape), "dtype": convert_dtype(value.dtype),
                "lod_level": len(found.lod)}
    return {}


def _suggest(type: Any) -> str:
    import difflib

    close = difflib.get_close_matches(str(type), registered_ops(), n=3)
    return f" (did you mean {', '.join(map(repr, close))}?)" if close else ""


class OperatorFactory:
    """Fluid's ``fluid.op.OperatorFactory``: ``factory(type, **kwargs)`` is
    ``Operator(type, **kwargs)``; ``types()`` lists the registered op types."""

    def __call__(self, *args: Any, **kwargs: Any) -> Operator:
        if "type" in kwargs:
            if args:
                raise ValueError("OperatorFactory: give the op type once, positionally or as "
                                 "type=")
            op_type = kwargs.pop("type")
        elif len(args) == 1:
            op_type = args[0]
        else:
            raise ValueError(f"OperatorFactory: expected the op type and keyword arguments, "
                             f"got {len(args)} positional arguments")
        return Operator(op_type, **kwargs)

    def types(self) -> list[str]:
        return registered_ops()

    def get_op_input_names(self, type: str) -> list[str]:
        return [s.name for s in get_op_def(type).inputs]

    def get_op_output_names(self, type: str) -> list[str]:
        return [s.name for s in get_op_def(type).outputs]

    def get_op_attr_names(self, type: str) -> list[str]:
        return list(get_op_def(type).attrs)


def get_all_op_protos() -> list[Any]:
    """The registered op definitions (slots, attribute defaults), one per op type."""
    return [get_op_def(t) for t in registered_ops()]
