"""``decorate``: an optimizer that trains in mixed precision with loss scaling."""

from __future__ import annotations

from typing import Any

from ... import layers, unique_name
from ...dtypes import VarType
from ...framework import (
    OpRole,
    Variable,
    default_main_program,
    default_startup_program,
    program_guard,
)
from .fp16_lists import AutoMixedPrecisionLists
from .fp16_utils import rewrite_program, update_loss_scaling

__all__ = ["decorate", "OptimizerWithMixedPrecision"]


class OptimizerWithMixedPrecision:
    """Wraps an optimizer: ``minimize`` rewrites the program for float16 (see
    ``fp16_utils``), differentiates ``loss * loss_scaling``, divides each gradient by the
    scaling and, with dynamic loss scaling, checks the gradients for inf/nan: such a step
    zeroes every gradient (so plain SGD leaves the parameters unchanged; an optimizer with
    moments still decays them, as in Fluid 1.6) and counts towards shrinking the scaling.
    Build it with ``decorate``."""

    def __init__(self, optimizer: Any, amp_lists: AutoMixedPrecisionLists,
                 init_loss_scaling: float, use_dynamic_loss_scaling: bool,
                 incr_every_n_steps: int, decr_every_n_nan_or_inf: int, incr_ratio: float,
                 decr_ratio: float) -> None:
        self._optimizer = optimizer
        self._amp_lists = amp_lists
        self._param_grads: list[tuple[Any, Any]] | None = None
        self._startup_prog = default_startup_program()
        self._scaled_loss: Variable | None = None
        self._loss_scaling = layers.create_global_var(
            name=unique_name.generate("loss_scaling"), shape=[1],
            value=float(init_loss_scaling), dtype="float32", persistable=True)
        self._use_dynamic_loss_scaling = use_dynamic_loss_scaling
        if use_dynamic_loss_scaling:
            self._incr_every_n_steps = layers.fill_constant(shape=[1], dtype="int32",
                                                            value=incr_every_n_steps)
            self._decr_every_n_nan_or_inf = layers.fill_constant(
                shape=[1], dtype="int32", value=decr_every_n_nan_or_inf)
            self._incr_ratio = incr_ratio
            self._decr_ratio = decr_ratio
            self._num_good_steps = layers.create_global_var(
                name=unique_name.generate("num_good_steps"), shape=[1], value=0,
                dtype="int32", persistable=True)
            self._num_bad_steps = layers.create_global_var(
                name=unique_name.generate("num_bad_steps"), shape=[1], value=0,
                dtype="int32", persistable=True)

    def get_loss_scaling(self) -> Variable:
        """The loss-scaling variable (persistable float32 ``[1]``)."""
        return self._loss_scaling

    def get_scaled_loss(self) -> Variable | None:
        """``loss * loss_scaling``, the variable differentiated (after ``minimize``)."""
        return self._scaled_loss

    def backward(self, loss: Variable, startup_program: Any = None,
                 parameter_list: list[Any] | None = None, no_grad_set: Any = None,
                 callbacks: Any = None) -> list[tuple[Any, Any]]:
        """Rewrite the program, append the backward pass of the scaled loss; return the
        ``(param, grad / loss_scaling)`` pairs."""
        program = loss.block.program
        rewrite_program(program, self._amp_lists)
        with program_guard(program, startup_program or self._startup_prog):
            self._scaled_loss = loss * self._loss_scaling
            self._param_grads = self._optimizer.backward(self._scaled_loss, startup_program,
                                                         parameter_list, no_grad_set,
                                                         callbacks)
            scaled = []
            for p, g in self._param_grads:
                with program._optimized_guard([p, g]):
                    scaled.append((p, g / self._loss_scaling))
        return scaled

    def apply_gradients(self, scaled_params_grads: list[tuple[Any, Any]]) -> list[Any]:
        """With dynamic loss scaling, the inf/nan check and the scaling update; then the
        wrapped optimizer's update ops."""
        if self._use_dynamic_loss_scaling:
            with default_main_program()._role_guard(OpRole.Optimize):
                grads = [layers.reduce_sum(
                    layers.get_tensor_from_selected_rows(g) if g.type == VarType.SELECTED_ROWS
                    else g) for _, g in scaled_params_grads]
                all_grads_sum = layers.reduce_sum(layers.concat(grads))
                is_overall_finite = layers.isfinite(all_grads_sum)
                update_loss_scaling(is_overall_finite, self._loss_scaling,
                                    self._num_good_steps, self._num_bad_steps,
                                    self._incr_every_n_steps, self._decr_every_n_nan_or_inf,
                                    self._incr_ratio, self._decr_ratio)
                # NOTE: the update ops stay outside the switch (they go to the global
                # block); a step with inf/nan gradients updates with zero gradients
                with layers.Switch() as switch:
                    with switch.case(is_overall_finite):
                        pass
                    with switch.default():
                        for _, g in scaled_params_grads:
                            layers.assign(layers.zeros_like(g), g)
        return self._optimizer.apply_gradients(scaled_params_grads)

    def minimize(self, loss: Variable, startup_program: Any = None,
                 parameter_list: list[Any] | None = None, no_grad_set: Any = None
                 ) -> tuple[list[Any], list[tuple[Any, Any]]]:
        """``backward`` then ``apply_gradients``; returns (optimize_ops, scaled
        params_grads)."""
        scaled = self.backward(loss, startup_program, parameter_list, no_grad_set)
        with program_guard(loss.block.program, startup_program or self._startup_prog):
            optimize_ops = self.apply_gradients(scaled)
        return optimize_ops, scaled


# Fluid 1.6 spells the class so
OptimizerWithMixedPrecison = OptimizerWithMixedPrecision


def decorate(optimizer: Any, amp_lists: AutoMixedPrecisionLists | None = None,
             init_loss_scaling: float = 1.0, incr_every_n_steps: int = 1000,
             decr_every_n_nan_or_inf: int = 2, incr_ratio: float = 2.0,
             decr_ratio: float = 0.8, use_dynamic_loss_scaling: bool = True
             ) -> OptimizerWithMixedPrecision:
    """Wrap ``optimizer`` for mixed-precision training (call it where the program is the
    default main program, as ``minimize`` adds variables there).

    Args:
        optimizer: a fluid.optimizer instance.
        amp_lists: the op lists (default ``AutoMixedPrecisionLists()``).
        init_loss_scaling: the loss scaling to start with.
        incr_every_n_steps, incr_ratio: grow the scaling by ``incr_ratio`` after that many
            finite steps in a row (dynamic scaling).
        decr_every_n_nan_or_inf, decr_ratio: shrink it by ``decr_ratio`` after that many
            steps with inf/nan gradients in a row (dynamic scaling).
        use_dynamic_loss_scaling: adjust the scaling as above; otherwise it stays fixed.

    Example::

        mp_sgd = fluid.contrib.mixed_precision.decorate(
            fluid.optimizer.SGD(learning_rate=0.01), init_loss_scaling=128.0)
        mp_sgd.minimize(avg_cost)
        scaled_loss = mp_sgd.get_scaled_loss()
    """
    if amp_lists is None:
        amp_lists = AutoMixedPrecisionLists()
    return OptimizerWithMixedPrecision(optimizer, amp_lists, init_loss_scaling,
                                       use_dynamic_loss_scaling, incr_every_n_steps,
                                       decr_every_n_nan_or_inf, incr_ratio, decr_ratio)
