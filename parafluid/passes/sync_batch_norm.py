"""Pass: every training ``batch_norm`` (and its gradient) computes its batch statistics over
all devices.

Each ``batch_norm`` with ``is_test=False`` and ``use_global_stats=False`` becomes
``sync_batch_norm_stats`` -> ``c_allreduce_sum`` -> ``sync_batch_norm``; its
``batch_norm_grad`` becomes ``sync_batch_norm_grad_stats`` -> ``c_allreduce_sum`` ->
``sync_batch_norm_grad`` (see ``parafluid.ops.sync_norm`` for the arithmetic). The
all-reduces are ordinary program ops: the multi-device graph builder turns each into one
cross-device node; in a single-device program they are the identity.

Example::

    synced = sync_batch_norm(main_program)     # main_program is not modified
"""

from __future__ import annotations

from typing import Any

from ..framework import Operator, OpRole, Program
from ..ops.registry import EMPTY
from .rewrite import make_op, rewrite_global_ops

__all__ = ["sync_batch_norm"]


def sync_batch_norm(program: Program) -> Program:
    """A copy of ``program`` whose training batch_norm ops synchronize across devices."""
    return rewrite_global_ops(program, _sync)


def _sync(block: Any, ops: list[Operator]) -> list[Operator]:
    new_ops: list[Operator] = []
    synced: dict[str, tuple[str, str]] = {}  # SavedMean name -> (global stats, layout)
    for op in ops:
        if op.type == "batch_norm" and not op.attr("is_test") and \
                not op.attr("use_global_stats"):
            new_ops += _forward(block, op, synced)
        elif op.type == "batch_norm_grad" and op.input("SavedMean") and \
                op.input("SavedMean")[0] in synced:
            new_ops += _backward(block, op, synced[op.input("SavedMean")[0]])
        else:
            new_ops.append(op)
    return new_ops


def _var(block: Any, name: str, dtype: str) -> str:
    block.create_var(name=name, dtype=dtype)
    return name


def _make(block: Any, type: str, inputs: dict[str, list[str]], outputs: dict[str, list[str]],
          attrs: dict[str, Any], like: Operator, role_var: bool = False) -> Operator:
    """An op with ``like``'s role and callsite (and its op_role_var if ``role_var``)."""
    attrs = dict(attrs, op_role=like.attrs.get("op_role", OpRole.Forward),
                 op_role_var=list(like.attrs.get("op_role_var") or []) if role_var else [])
    return make_op(block, type, inputs, outputs, attrs, like.callsite)


def _forward(block: Any, op: Operator, synced: dict[str, tuple[str, str]]) -> list[Operator]:
    saved_mean = op.output("SavedMean")[0]
    layout = op.attr("data_layout")
    local = _var(block, saved_mean + "@SYNC_STATS", "float64")
    glob = _var(block, saved_mean + "@SYNC_STATS@GLOBAL", "float64")
    synced[saved_mean] = (glob, layout)
    inputs = {k: list(v) for k, v in op.inputs.items()}
    attrs = {k: op.attr(k) for k in ("momentum", "epsilon", "is_test", "data_layout",
                                     "use_global_stats")}
    return [
        _make(block, "sync_batch_norm_stats", {"X": op.input("X")}, {"Stats": [local]},
              {"data_layout": layout}, op),
        _make(block, "c_allreduce_sum", {"X": [local]}, {"Out": [glob]}, {}, op),
        _make(block, "sync_batch_norm", dict(inputs, GlobalStats=[glob]),
              {k: list(v) for k, v in op.outputs.items()}, attrs, op, role_var=True),
    ]


def _backward(block: Any, op: Operator, fwd: tuple[str, str]) -> list[Operator]:
    glob_stats, layout = fwd
    x = op.input("X")[0]
    dtype = block._find_var_recursive(x).dtype
    local = _var(block, op.input("SavedMean")[0] + "@SYNC_GRAD_STATS", dtype)
    glob = _var(block, op.input("SavedMean")[0] + "@SYNC_GRAD_STATS@GLOBAL", dtype)
    common = {"X": op.input("X"), "SavedMean": op.input("SavedMean"),
              "SavedVariance": op.input("SavedVariance")}
    if op.input("Y@GRAD"):
        common["DY"] = op.input("Y@GRAD")
    outputs = {slot: list(names) for slot, names in op.outputs.items()
               if any(n != EMPTY for n in names)}
    return [
        _make(block, "sync_batch_norm_grad_stats", common, {"GradStats": [local]},
              {"data_layout": layout}, op),
        _make(block, "c_allreduce_sum", {"X": [local]}, {"Out": [glob]}, {}, op),
        _make(block, "sync_batch_norm_grad",
              dict(common, Scale=op.input("Scale"), GradStats=[local], GlobalGradStats=[glob],
                   GlobalStats=[glob_stats]), outputs, {"data_layout": layout}, op,
              role_var=True),
    ]
