"""Weight decay as ops added to each gradient before the optimizer runs.

Example::

    opt = fluid.optimizer.SGD(learning_rate=0.1,
                              regularization=fluid.regularizer.L2Decay(1e-4))

A ParamAttr's own ``regularizer`` takes precedence over the optimizer's.
"""

from __future__ import annotations

from typing import Any

__all__ = ["L1Decay", "L2Decay", "L1DecayRegularizer", "L2DecayRegularizer",
           "append_regularization_ops"]


class WeightDecayRegularizer:
    def __init__(self, regularization_coeff: float = 0.0) -> None:
        if regularization_coeff < 0:
            raise ValueError(f"{type(self).__name__}: regularization_coeff must be >= 0, "
                             f"got {regularization_coeff}")
        self._regularization_coeff = float(regularization_coeff)

    def decay_op(self, param: Any, block: Any) -> Any:
        """Append ops computing the decay term of ``param``; return its variable."""
        raise NotImplementedError  # abstract


class L2Decay(WeightDecayRegularizer):
    """Adds ``coeff * param`` to the gradient."""

    def decay_op(self, param: Any, block: Any) -> Any:
        decay = block.create_var(name=param.name + "@L2DECAY", dtype=param.dtype)
        block.append_op("scale", inputs={"X": [param]}, outputs={"Out": [decay]},
                        attrs={"scale": self._regularization_coeff})
        return decay


class L1Decay(WeightDecayRegularizer):
    """Adds ``coeff * sign(param)`` to the gradient."""

    def decay_op(self, param: Any, block: Any) -> Any:
        sign = block.create_var(name=param.name + "@SIGN", dtype=param.dtype)
        block.append_op("sign", inputs={"X": [param]}, outputs={"Out": [sign]})
        decay = block.create_var(name=param.name + "@L1DECAY", dtype=param.dtype)
        block.append_op("scale", inputs={"X": [sign]}, outputs={"Out": [decay]},
                        attrs={"scale": self._regularization_coeff})
        return decay


L1DecayRegularizer = L1Decay
L2DecayRegularizer = L2Decay


def append_regularization_ops(params_grads: list[tuple[Any, Any]],
                              regularization: Any = None) -> list[tuple[Any, Any]]:
    """Return (param, grad + decay) pairs; parameters without a regularizer pass through."""
    out = []
    for param, grad in params_grads:
        reg = param.regularizer if getattr(param, "regularizer", None) is not None \
            else regularization
        if reg is None or grad is None:
            out.append((param, grad))
            continue
        block = grad.block
        if grad.type == "selected_rows":
            raise ValueError(f"regularizer on {param.name}: its gradient is sparse "
                             "(embedding is_sparse=True); weight decay needs a dense gradient")
        # NOTE: Optimize role, as Fluid's _optimized_guard: data-parallel runs add the decay
        # once, after the gradients are aggregated, not once per device before the sum.
        with block.program._optimized_guard([param, grad]):
            decay = reg.decay_op(param, block)
            new_grad = block.create_var(name=grad.name + "@REGULARIZED", dtype=grad.dtype)
            block.append_op("sum", inputs={"X": [grad, decay]}, outputs={"Out": [new_grad]})
        out.append((param, new_grad))
    return out
