"""``extend_with_decoupled_weight_decay``: an optimizer class with AdamW-style decay.

The decay is decoupled from the gradient: before the base optimizer's update, each decayed
parameter becomes ``param - weight_decay * param`` (the product taken from the parameter
before this step, as Fluid 1.6 does; the learning rate does not scale it), and the base
update then applies the gradient of the loss, which knows nothing of the decay.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..framework import Variable, default_startup_program, name_scope, program_guard
from ..optimizers.base import Optimizer

__all__ = ["extend_with_decoupled_weight_decay"]


class DecoupledWeightDecay:
    """Mixin placed before an ``Optimizer`` subclass; see the module docstring."""

    def __init__(self, coeff: float | Variable = 0.0,
                 apply_decay_param_fun: Callable[[str], bool] | None = None,
                 **kwargs: Any) -> None:
        if isinstance(coeff, int) and not isinstance(coeff, bool):
            coeff = float(coeff)
        if not isinstance(coeff, (float, Variable)):
            raise TypeError(f"weight_decay must be a float or a Variable, got "
                            f"{type(coeff).__name__}")
        self._params_name: set[str] = set()
        self._apply_decay_param_fun = apply_decay_param_fun
        self._coeff = coeff
        super().__init__(**kwargs)

    def _scale_parameters(self, params_grads: list[tuple[Any, Any]]
                          ) -> list[tuple[Any, Any, Variable]]:
        """``(param, grad, weight_decay * param)`` for each parameter to decay."""
        if isinstance(self._coeff, float) and self._coeff == 0.0:
            return []
        scaled = []
        for param, grad in params_grads:
            if grad is None:
                continue
            if self._apply_decay_param_fun is not None and \
                    not self._apply_decay_param_fun(param.name):
                continue
            if param.name in self._params_name:
                raise ValueError(f"decoupled weight decay: parameter {param.name} is decayed "
                                 f"twice; call minimize once per optimizer")
            with param.block.program._optimized_guard([param, grad]), \
                    name_scope("weight decay"):
                scaled.append((param, grad, param * self._coeff))
            self._params_name.add(param.name)
        return scaled

    def minimize(self, loss: Variable, startup_program: Any = None,
                 parameter_list: list[Any] | None = None, no_grad_set: Any = None,
                 grad_clip: Any = None) -> tuple[list[Any], list[tuple[Any, Any]]]:
        from .. import layers

        params_grads = self.backward(loss, startup_program, parameter_list, no_grad_set)
        with program_guard(loss.block.program, startup_program or default_startup_program()):
            for param, grad, scaled in self._scale_parameters(params_grads):
                with param.block.program._optimized_guard([param, grad]), \
                        name_scope("weight decay"):
                    updated = layers.elementwise_sub(x=param, y=scaled)
                    layers.assign(input=updated, output=param)
        return self.apply_optimize(loss, startup_program, params_grads), params_grads


def extend_with_decoupled_weight_decay(base_optimizer: type) -> type:
    """A subclass of ``base_optimizer`` (an optimizer class) taking ``weight_decay`` and
    ``apply_decay_param_fun`` (``name -> bool``, which parameters decay; all by default)
    before the base class's own arguments.

    Example::

        AdamW = fluid.contrib.extend_with_decoupled_weight_decay(fluid.optimizer.Adam)
        AdamW(weight_decay=0.01, learning_rate=0.001).minimize(loss)
    """
    if not (isinstance(base_optimizer, type) and issubclass(base_optimizer, Optimizer)):
        raise TypeError(f"extend_with_decoupled_weight_decay: base_optimizer must be an "
                        f"optimizer class such as fluid.optimizer.Adam, got {base_optimizer!r}")

    class OptimizerWithDecoupledWeightDecay(DecoupledWeightDecay, base_optimizer):
        def __init__(self, weight_decay: float | Variable,
                     apply_decay_param_fun: Callable[[str], bool] | None = None,
                     **kwargs: Any) -> None:
            super().__init__(weight_decay, apply_decay_param_fun, **kwargs)

    name = f"{base_optimizer.__name__}WithDecoupledWeightDecay"
    OptimizerWithDecoupledWeightDecay.__name__ = name
    OptimizerWithDecoupledWeightDecay.__qualname__ = name
    return OptimizerWithDecoupledWeightDecay
