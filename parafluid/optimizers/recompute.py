"""``fluid.optimizer.RecomputeOptimizer``: Fluid 1.6's wrapper that
names forward checkpoints for recomputation.

``RecomputeOptimizer(optimizer)`` takes the checkpoints (``_set_checkpoints`` or
``backward(..., checkpoints=)``) and passes them to ``append_backward``: the forward ops
of each segment between checkpoints run again just before their gradient ops
(passes/recompute.py, Fluid 1.6's segments), so their results die during the forward pass
instead of living until the backward pass reads them. The numbers are exactly the wrapped
optimizer's: the outputs of random ops (dropout), ops with sub-blocks and ops writing
persistable variables (batch_norm's running statistics) are held, not recomputed.

Example::

    opt = fluid.optimizer.RecomputeOptimizer(fluid.optimizer.Adam(learning_rate=0.01))
    opt._set_checkpoints([fc_1, pred])
    opt.minimize(cost)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..backward import append_backward
from ..framework import Parameter, Program, Variable, default_startup_program, program_guard
from .base import Optimizer

__all__ = ["RecomputeOptimizer"]


class RecomputeOptimizer(Optimizer):
    """Wraps ``optimizer``; ``backward`` takes ``checkpoints`` (forward Variables) as
    Fluid's does and recomputes the segments between them in the backward pass (see the
    module docstring)."""

    def __init__(self, optimizer: Optimizer) -> None:
        if not isinstance(optimizer, Optimizer):
            raise TypeError("RecomputeOptimizer: optimizer must be a fluid.optimizer "
                            f"Optimizer, got {type(optimizer).__name__}")
        self._optimizer = optimizer
        self._checkpoints: list[Variable] | None = None

    def _set_checkpoints(self, checkpoints: Sequence[Variable]) -> None:
        self._checkpoints = _checked(checkpoints)

    def load(self, stat_dict: dict[str, Any]) -> None:
        """Not supported, as in Fluid."""
        raise NotImplementedError("load function is not supported by Recompute Optimizer "
                                  "for now")

    def apply_gradients(self, params_grads: list[tuple[Any, Any]]) -> list[Any]:
        """The wrapped optimizer's ``apply_gradients``."""
        return self._optimizer.apply_gradients(params_grads)

    def backward(self, loss: Variable, startup_program: Program | None = None,
                 parameter_list: list[Any] | None = None, no_grad_set: Any = None,
                 callbacks: Any = None,
                 checkpoints: Sequence[Variable] | None = None) -> list[tuple[Parameter, Any]]:
        """``append_backward`` with the checkpoints (given here or by ``_set_checkpoints``)."""
        chosen = _checked(checkpoints) if checkpoints is not None else self._checkpoints
        if chosen is None:
            raise ValueError("RecomputeOptimizer.backward: no checkpoints; pass checkpoints= "
                             "or call _set_checkpoints([...]) first")
        with program_guard(loss.block.program, startup_program or default_startup_program()):
            return append_backward(loss, parameter_list, no_grad_set, callbacks,
                                   checkpoints=chosen)

    def apply_optimize(self, loss: Variable, startup_program: Program | None,
                       params_grads: list[tuple[Any, Any]]) -> list[Any]:
        """The wrapped optimizer's ``apply_optimize``."""
        return self._optimizer.apply_optimize(loss, startup_program, params_grads)

    def minimize(self, loss: Variable, startup_program: Program | None = None,
                 parameter_list: list[Any] | None = None, no_grad_set: Any = None,
                 grad_clip: Any = None) -> tuple[list[Any], list[tuple[Any, Any]]]:
        """``backward`` with the checkpoints, then the wrapped optimizer's updates."""
        if grad_clip is not None:
            raise ValueError("RecomputeOptimizer.minimize: grad_clip is for the imperative "
                             "mode, which Fluid's RecomputeOptimizer does not support; use "
                             "fluid.clip.set_gradient_clip")
        params_grads = self.backward(loss, startup_program, parameter_list, no_grad_set,
                                     checkpoints=self._checkpoints)
        return self.apply_optimize(loss, startup_program, params_grads), params_grads


def _checked(checkpoints: Sequence[Variable]) -> list[Variable]:
    if not isinstance(checkpoints, (list, tuple)) or \
            not all(isinstance(c, Variable) for c in checkpoints):
        raise TypeError("RecomputeOptimizer: checkpoints must be a list of Variables, got "
                        f"{checkpoints!r}")
    return list(checkpoints)
