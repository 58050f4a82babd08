"""Structured pruning (``StructurePruner``, ``UniformPruneStrategy``): whole conv filters and
fc output units go, and every shape that depends on them follows.

Pruning the output channels ``removed`` of a conv filter (or the output units of an fc
weight) removes them from the parameter, its gradient and optimizer state (every
persistable input of its optimizer op shaped like it), then follows the output through the
forward ops: elementwise ops with a per-channel parameter (the bias) and ``batch_norm``
lose the same channels; activations, pooling and dropout pass them on; the next ``conv2d``
loses those input channels of its filter, the next ``mul`` (fc) those rows of its weight
(``channel * H * W + k`` for an image input). Any other op stops the pruning with an error
naming it. Values in the scope are cut once; every program holding the model (training,
evaluation) gets the new shapes.
"""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np

from ...framework import OpRole, Program
from ...scope import Scope
from .config import register_class
from .strategy import Strategy

__all__ = ["StructurePruner", "UniformPruneStrategy", "prune_params", "flops"]

_PASS_THROUGH = {"relu", "relu6", "sigmoid", "tanh", "leaky_relu", "elu", "brelu", "swish",
                 "hard_swish", "hard_sigmoid", "softplus", "softsign", "pool2d", "dropout",
                 "scale", "assign", "cast"}
_PER_CHANNEL = {"elementwise_add", "elementwise_sub", "elementwise_mul", "elementwise_div"}
_NOT_FORWARD = OpRole.Backward | OpRole.Optimize | OpRole.LRSched


def _forward_readers(block: Any, name: str) -> list[Any]:
    return [op for op in block.ops if name in op.input_arg_names
            and not op.attrs.get("op_role", 0) & _NOT_FORWARD]


class _Cut:
    """The pruning of one parameter's outputs over several programs sharing one scope."""

    def __init__(self, programs: list[Program], scope: Scope | None) -> None:
        self.programs = programs
        self.scope = scope
        self.cut_tensors: set[str] = set()
        self.done: set[tuple[int, str]] = set()

    def param(self, name: str, axis: int, removed: list[int]) -> None:
        for program in self.programs:
            if program.global_block()._find_var_recursive(name) is not None:
                self._param(program, name, axis, removed)
        for program in self.programs:
            program._bump()

    def _var(self, program: Program, name: str, axis: int, removed: list[int]) -> None:
        if (id(program), name) in self.done:
            return
        self.done.add((id(program), name))
        block = program.global_block()
        for n in (name, name + "@GRAD"):
            var = block._find_var_recursive(n)
            if var is not None and var.shape is not None and len(var.shape) > axis:
                shape = list(var.shape)
                if shape[axis] != -1:
                    shape[axis] -= len(removed)
                var.shape = tuple(shape)
        if self.scope is not None and name not in self.cut_tensors:
            holder = self.scope.find_var(name)
            if holder is not None and holder.value is not None:
                value = np.array(holder.get_tensor())
                holder.get_tensor().set(np.delete(value, removed, axis=axis))
            self.cut_tensors.add(name)

    def _param(self, program: Program, name: str, axis: int, removed: list[int]) -> None:
        block = program.global_block()
        var = block._var_recursive(name)
        if (id(program), name) in self.done:
            return
        shape = tuple(var.shape)
        self._var(program, name, axis, removed)
        for op in block.ops:  # the optimizer state shaped like the parameter
            if name in op.input("Param"):
                for slot, names in op.inputs.items():
                    if slot in ("Param", "Grad", "LearningRate"):
                        continue
                    for n in names:
                        v = block._find_var_recursive(n)
                        if v is not None and v.persistable and tuple(v.shape or ()) == shape:
                            self._var(program, n, axis, removed)
        for op in _forward_readers(block, name):
            if op.type in ("conv2d", "depthwise_conv2d") and op.input("Filter") == [name] \
                    and axis == 0:
                if op.type == "depthwise_conv2d" or op.attr("groups") != 1:
                    raise ValueError(f"prune: {name!r} is the filter of a grouped convolution "
                                     f"({op.type}, groups={op.attr('groups')}); pruning it is "
                                     "not provided")
                self._activation(program, op.output("Output")[0], 1, removed)
            elif op.type == "mul" and op.input("Y") == [name] and axis == len(shape) - 1:
                out = op.output("Out")[0]
                self._activation(program, out, len(block._var_recursive(out).shape) - 1,
                                 removed)

    def _activation(self, program: Program, name: str, axis: int, removed: list[int]) -> None:
        if (id(program), name) in self.done:
            return
        self._var(program, name, axis, removed)
        block = program.global_block()
        for op in _forward_readers(block, name):
            t = op.type
            if t in ("conv2d",) and op.input("Input") == [name]:
                self._param(program, op.input("Filter")[0], 1, removed)
            elif t == "mul" and op.input("X") == [name]:
                shape = block._var_recursive(name).shape
                if op.attr("x_num_col_dims") != 1 or axis != 1:
                    raise ValueError(f"prune: {name!r} (pruned on axis {axis}) feeds mul with "
                                     f"x_num_col_dims={op.attr('x_num_col_dims')}; only "
                                     "channels (axis 1) of an fc input can be followed")
                inner = math.prod(int(d) for d in shape[2:]) if len(shape) > 2 else 1
                # NOTE: shape[axis] is already the pruned count; rows follow the old layout
                rows = [c * inner + k for c in removed for k in range(inner)]
                self._param(program, op.input("Y")[0], 0, rows)
            elif t in _PER_CHANNEL and op.input("X") == [name]:
                y = block._var_recursive(op.input("Y")[0])
                if not y.persistable or len(y.shape) != 1:
                    raise ValueError(f"prune: {t} adds {y.name!r} (not a per-channel "
                                     f"parameter) to the pruned {name!r}")
                self._param(program, y.name, 0, removed)
                self._activation(program, op.output("Out")[0], axis, removed)
            elif t == "batch_norm" and op.input("X") == [name]:
                for slot in ("Scale", "Bias", "Mean", "Variance"):
                    self._param(program, op.input(slot)[0], 0, removed)
                for slot in ("SavedMean", "SavedVariance"):
                    for n in op.output(slot):
                        self._var(program, n, 0, removed)
                self._activation(program, op.output("Y")[0], axis, removed)
            elif t in _PASS_THROUGH:
                for slot in ("Out", "Mask"):
                    for n in op.output(slot):
                        self._activation(program, n, axis, removed)
            else:
                raise ValueError(f"prune: the pruned channels of {name!r} reach op {t} "
                                 f"(created at {op.callsite}), which pruning cannot follow; "
                                 "exclude the parameter from pruned_params")


def prune_params(programs: list[Program], scope: Scope | None,
                 removed: dict[str, list[int]]) -> None:
    """Remove output channels (conv filters, axis 0) or output units (fc weights, the last
    axis) ``removed[param]`` of each parameter, in order, from every program and the scope
    (``scope=None``: shapes only)."""
    for name, idx in removed.items():
        axis = _output_axis(programs[0].global_block(), name)
        _Cut(programs, scope).param(name, axis, sorted(int(i) for i in idx))


def _output_axis(block: Any, name: str) -> int:
    for op in _forward_readers(block, name):
        if op.type in ("conv2d", "depthwise_conv2d") and op.input("Filter") == [name]:
            return 0
        if op.type == "mul" and op.input("Y") == [name]:
            return len(block._var_recursive(name).shape) - 1
    raise ValueError(f"prune: {name!r} is neither a conv2d filter nor an fc (mul) weight")


def flops(program: Program) -> int:
    """Multiply-adds per sample of the program's forward conv2d / depthwise_conv2d / mul."""
    block = program.global_block()
    total = 0
    for op in block.ops:
        if op.attrs.get("op_role", 0) & _NOT_FORWARD:
            continue
        if op.type in ("conv2d", "depthwise_conv2d"):
            out = block._var_recursive(op.output("Output")[0]).shape
            filt = block._var_recursive(op.input("Filter")[0]).shape
            total += math.prod(int(d) for d in out[1:]) * math.prod(int(d) for d in filt[1:])
        elif op.type == "mul":
            x = block._var_recursive(op.input("X")[0]).shape
            y = block._var_recursive(op.input("Y")[0]).shape
            k = op.attr("x_num_col_dims")
            total += math.prod(max(int(d), 1) for d in x[1:k]) * \
                math.prod(int(d) for d in x[k:]) * int(y[-1])
    return total


@register_class
class StructurePruner:
    """Chooses which filters go: ``criterions`` ``{'*': 'l1_norm'}`` (the smallest L1 norms
    over each filter); ``pruning_axis`` ``{'*': 0}`` (output channels; fc weights lose
    output units)."""

    def __init__(self, pruning_axis: dict[str, int] | None = None,
                 criterions: dict[str, str] | None = None) -> None:
        self.pruning_axis = dict(pruning_axis or {"*": 0})
        self.criterions = dict(criterions or {"*": "l1_norm"})
        for key, axis in self.pruning_axis.items():
            if axis != 0:
                raise ValueError(f"StructurePruner: pruning_axis {{{key!r}: {axis}}}: only the "
                                 "output axis (0) is provided")
        for key, c in self.criterions.items():
            if c != "l1_norm":
                raise ValueError(f"StructurePruner: criterion {c!r} for {key!r}: only "
                                 "'l1_norm' is provided")

    def cal_pruned_idx(self, name: str, param: np.ndarray, ratio: float, axis: int) -> list[int]:
        """The indices along ``axis`` with the ``round(ratio * n)`` smallest L1 norms."""
        n = param.shape[axis]
        k = min(int(round(n * ratio)), n - 1)
        norms = np.abs(param).sum(axis=tuple(a for a in range(param.ndim) if a != axis))
        return sorted(int(i) for i in np.argsort(norms, kind="stable")[:k])


@register_class
class UniformPruneStrategy(Strategy):
    """At ``start_epoch``, prune the same ratio of filters from every parameter matching
    ``pruned_params`` (a regex; conv filters and fc weights), the ratio chosen so that the
    eval program's multiply-adds fall by ``target_ratio``."""

    def __init__(self, pruner: StructurePruner | None = None, start_epoch: int = 0,
                 end_epoch: int = 0, target_ratio: float = 0.5, metric_name: str | None = None,
                 pruned_params: str = "conv.*_weights") -> None:
        super().__init__(start_epoch, end_epoch)
        if not 0.0 < float(target_ratio) < 1.0:
            raise ValueError(f"UniformPruneStrategy: target_ratio must be in (0, 1), got "
                             f"{target_ratio}")
        self.pruner = pruner or StructurePruner()
        self.target_ratio = float(target_ratio)
        self.metric_name = metric_name
        self.pruned_params = pruned_params
        self.ratio: float | None = None
        self.removed: dict[str, list[int]] = {}

    def _params(self, program: Program) -> list[str]:
        block = program.global_block()
        out = []
        for p in block.all_parameters():
            if re.match(self.pruned_params, p.name):
                try:
                    _output_axis(block, p.name)
                except ValueError:
                    continue
                out.append(p.name)
        if not out:
            raise ValueError(f"UniformPruneStrategy: no conv2d filter or fc weight matches "
                             f"pruned_params={self.pruned_params!r} (parameters: "
                             f"{[p.name for p in block.all_parameters()]})")
        return out

    def _search_ratio(self, program: Program, params: list[str]) -> float:
        base = flops(program)
        lo, hi = 0.0, 1.0
        for _ in range(20):
            mid = (lo + hi) / 2
            trial = program.clone()
            removed = {}
            for name in params:
                n = trial.global_block()._var_recursive(name).shape
                axis = _output_axis(trial.global_block(), name)
                removed[name] = list(range(min(int(round(n[axis] * mid)), n[axis] - 1)))
            prune_params([trial], None, removed)
            if 1.0 - flops(trial) / base < self.target_ratio:
                lo = mid
            else:
                hi = mid
        return hi

    def on_epoch_begin(self, context: Any) -> None:
        if context.epoch_id != self.start_epoch or self.removed:
            return
        reference = context.eval_program or context.optimize_program
        params = self._params(reference)
        self.ratio = self._search_ratio(reference, params)
        before = flops(reference)
        block = reference.global_block()
        for name in params:
            value = np.array(context.scope.find_var(name).get_tensor())
            axis = _output_axis(block, name)
            idx = self.pruner.cal_pruned_idx(name, value, self.ratio, axis)
            self.removed[name] = idx
            prune_params(context.programs(), context.scope, {name: idx})
        context.put("pruned_flops_ratio", 1.0 - flops(reference) / before)

    def state(self) -> dict[str, Any]:
        return {"ratio": self.ratio, "removed": self.removed}

    def restore(self, context: Any, state: dict[str, Any]) -> None:
        self.ratio = state.get("ratio")
        self.removed = {k: [int(i) for i in v] for k, v in (state.get("removed") or {}).items()}
        for name, idx in self.removed.items():
            prune_params(context.programs(), context.scope, {name: idx})
