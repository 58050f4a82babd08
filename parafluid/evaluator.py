"""``fluid.evaluator``: Fluid's older, in-program metric accumulators.

An evaluator adds ops to the main program that add each minibatch's counts into persistable
state variables; ``eval(exe)`` runs a small program reading the states and returns the
metric over every batch since ``reset(exe)``. Fluid 1.6 keeps them for old scripts and warns
that ``fluid.metrics`` replaces them; so does parafluid.

Example::

    evaluator = fluid.evaluator.ChunkEvaluator(input=tags, label=label,
                                               chunk_scheme="IOB", num_chunk_types=3)
    evaluator.reset(exe)
    for batch in reader():
        exe.run(main, feed=feeder.feed(batch))
    precision, recall, f1 = evaluator.eval(exe)
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from . import layers, unique_name
from .framework import Program, Variable, program_guard
from .initializer import Constant
from .layer_helper import LayerHelper
from .metrics import DetectionMAP as _DetectionMAP

__all__ = ["ChunkEvaluator", "EditDistance", "DetectionMAP"]


def _clone_var(block: Any, var: Variable) -> Variable:
    return block.create_var(name=var.name, shape=var.shape, dtype=var.dtype,
                            lod_level=var.lod_level, persistable=True)


class Evaluator:
    """Base class: ``states`` (reset to zero by ``reset``) and per-batch ``metrics``."""

    def __init__(self, name: str, **kwargs: Any) -> None:
        warnings.warn(f"The {type(self).__name__} is deprecated, because maintain a modified "
                      "program inside evaluator cause bug easily, please use "
                      f"fluid.metrics.{type(self).__name__} instead.", Warning, stacklevel=3)
        self.states: list[Variable] = []
        self.metrics: list[Variable] = []
        self.helper = LayerHelper(name, **kwargs)
        if self.helper.main_program.current_block().idx != 0:
            raise ValueError("You can only invoke Evaluator in root block")

    def reset(self, executor: Any, reset_program: Program | None = None) -> None:
        """Set every state to zero (runs ``reset_program``, a new Program by default)."""
        reset_program = Program() if reset_program is None else reset_program
        with program_guard(main_program=reset_program):
            for var in self.states:
                g_var = _clone_var(reset_program.current_block(), var)
                layers.fill_constant(shape=g_var.shape, value=0.0, dtype=g_var.dtype,
                                     out=g_var)
        executor.run(reset_program)

    def eval(self, executor: Any, eval_program: Program | None = None) -> Any:
        """The metric over the batches since the last ``reset``."""
        raise NotImplementedError

    def _create_state(self, suffix: str, dtype: str, shape: list[int]) -> Variable:
        state = self.helper.create_global_variable(
            name="_".join([unique_name.generate(self.helper.name), suffix]),
            persistable=True, dtype=dtype, shape=shape)
        # NOTE: Fluid leaves the states uninitialised until reset(); zero is what reset gives
        self.helper.set_variable_initializer(state, Constant(0))
        self.states.append(state)
        return state


class ChunkEvaluator(Evaluator):
    """Precision, recall and F1 of ``layers.chunk_eval`` counts accumulated over batches.

    Args:
        input, label: predicted and true tags (int64 LoD ``[steps, 1]``).
        chunk_scheme: ``'IOB'``, ``'IOE'``, ``'IOBES'`` or ``'plain'``.
        num_chunk_types: the number of chunk types.
        excluded_chunk_types: chunk types not counted.
    """

    def __init__(self, input: Variable, label: Variable, chunk_scheme: str,
                 num_chunk_types: int, excluded_chunk_types: list[int] | None = None) -> None:
        super().__init__("chunk_eval")
        self.num_infer_chunks = self._create_state("num_infer_chunks", "int64", [1])
        self.num_label_chunks = self._create_state("num_label_chunks", "int64", [1])
        self.num_correct_chunks = self._create_state("num_correct_chunks", "int64", [1])
        precision, recall, f1, n_infer, n_label, n_correct = layers.chunk_eval(
            input=input, label=label, chunk_scheme=chunk_scheme,
            num_chunk_types=num_chunk_types, excluded_chunk_types=excluded_chunk_types)
        for state, count in ((self.num_infer_chunks, n_infer),
                             (self.num_label_chunks, n_label),
                             (self.num_correct_chunks, n_correct)):
            layers.sums(input=[state, count], out=state)
        self.metrics.extend([precision, recall, f1])

    def eval(self, executor: Any, eval_program: Program | None = None) -> tuple[np.ndarray, ...]:
        """``(precision, recall, f1)``, each a float32 array of one element."""
        eval_program = Program() if eval_program is None else eval_program
        block = eval_program.current_block()
        n_infer, n_label, n_correct = (
            float(np.asarray(v).reshape(-1)[0]) for v in executor.run(
                eval_program, fetch_list=[_clone_var(block, s) for s in self.states]))
        precision = n_correct / n_infer if n_infer else 0.0
        recall = n_correct / n_label if n_label else 0.0
        f1 = 2 * precision * recall / (precision + recall) if n_correct else 0.0
        return (np.array([precision], dtype="float32"), np.array([recall], dtype="float32"),
                np.array([f1], dtype="float32"))


class EditDistance(Evaluator):
    """Average edit distance and instance error rate of ``layers.edit_distance`` over
    batches.

    Args:
        input, label: predicted and reference sequences (int64 LoD ``[steps, 1]``).
        ignored_tokens: tokens erased before the distance is computed.
    """

    def __init__(self, input: Variable, label: Variable,
                 ignored_tokens: list[int] | None = None, **kwargs: Any) -> None:
        super().__init__("edit_distance", **kwargs)
        self.total_distance = self._create_state("total_distance", "float32", [1])
        self.seq_num = self._create_state("seq_num", "int64", [1])
        self.instance_error = self._create_state("instance_error", "int64", [1])
        distances, seq_num = layers.edit_distance(input=input, label=label,
                                                  ignored_tokens=ignored_tokens)
        zero = layers.fill_constant(shape=[1], value=0.0, dtype="float32")
        right = layers.reduce_sum(layers.cast(x=layers.equal(distances, zero), dtype="int64"))
        errors = layers.elementwise_sub(x=seq_num, y=right)
        total = layers.reduce_sum(distances)
        layers.sums(input=[self.total_distance, total], out=self.total_distance)
        layers.sums(input=[self.seq_num, seq_num], out=self.seq_num)
        layers.sums(input=[self.instance_error, errors], out=self.instance_error)
        self.metrics.extend([total, errors])

    def eval(self, executor: Any, eval_program: Program | None = None) -> tuple[np.ndarray, ...]:
        """``(average distance, instance error rate)`` since the last ``reset``."""
        eval_program = Program() if eval_program is None else eval_program
        block = eval_program.current_block()
        with program_guard(main_program=eval_program):
            total = _clone_var(block, self.total_distance)
            seq_num = layers.cast(x=_clone_var(block, self.seq_num), dtype="float32")
            errors = layers.cast(x=_clone_var(block, self.instance_error), dtype="float32")
            avg_distance = layers.elementwise_div(x=total, y=seq_num)
            avg_error = layers.elementwise_div(x=errors, y=seq_num)
            result = executor.run(eval_program, fetch_list=[avg_distance, avg_error])
        return np.array(result[0]), np.array(result[1])


class DetectionMAP(_DetectionMAP):
    """``fluid.metrics.DetectionMAP`` under its older name (same arguments, ``get_map_var``
    and ``reset``), with Fluid's deprecation warning."""

    def __init__(self, input: Variable, gt_label: Variable, gt_box: Variable,
                 gt_difficult: Variable | None = None, class_num: int | None = None,
                 background_label: int = 0, overlap_threshold: float = 0.5,
                 evaluate_difficult: bool = True, ap_version: str = "integral") -> None:
        warnings.warn("The DetectionMAP is deprecated, because maintain a modified program "
                      "inside evaluator cause bug easily, please use fluid.metrics."
                      "DetectionMAP instead.", Warning, stacklevel=2)
        super().__init__(input, gt_label, gt_box, gt_difficult, class_num, background_label,
                         overlap_threshold, evaluate_difficult, ap_version)
