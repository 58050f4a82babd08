"""Weight decay as ops added to each gradient before the optimizer runs.

Example::

    opt = fluid.optimizer.SGD(learning_rate=0.1,
                              regularization=fluid.regularizer.L2Decay(1e-4))

A ParamAttr's own ``regularizer`` takes precedence over the optimizer's.

A sparse gradient (``SelectedRows``, from ``embedding(is_sparse=True)``) is decayed as
Fluid does it: the decay term is itself row-sparse, computed from the parameter rows the
gradient touches (``lookup_rows``, each touched row once), and summed into the gradient,
which stays sparse; untouched rows get no decay.
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

    def sparse_decay_op(self, param: Any, grad: Any, block: Any) -> Any:
        """Append ops computing the decay term of the rows of ``param`` that the sparse
        ``grad`` touches; return its (row-sparse) variable."""
        raise NotImplementedError  # abstract

    def _touched_rows(self, source: Any, grad: Any, block: Any, suffix: str) -> Any:
        rows = block.create_var(name=grad.name + suffix, dtype=source.dtype,
                                shape=source.shape, type="selected_rows")
        block.append_op("lookup_rows", inputs={"W": [source], "X": [grad]},
                        outputs={"Out": [rows]})
        decay = block.create_var(name=rows.name + "@SCALED", dtype=source.dtype,
                                 shape=source.shape, type="selected_rows")
        block.append_op("scale", inputs={"X": [rows]}, outputs={"Out": [decay]},
                        attrs={"scale": self._regularization_coeff})
        return decay


class L2Decay(WeightDecayRegularizer):
    """Adds ``coeff * param`` to the gradient."""

    def decay_op(self, param: Any, block: Any) -> Any:
        decay = block.create_var(name=param.name + "@L2DECAY", dtype=param.dtype)
        block.append_op("scale", inputs={"X": [param]}, outputs={"Out": [decay]},
                        attrs={"scale": self._regularization_coeff})
        return decay

    def sparse_decay_op(self, param: Any, grad: Any, block: Any) -> Any:
        return self._touched_rows(param, grad, block, "@L2DECAY_ROWS")


class L1Decay(WeightDecayRegularizer):
    """Adds ``coeff * sign(param)`` to the gradient."""

    def decay_op(self, param: Any, block: Any) -> Any:
        sign = block.create_var(name=param.name + "@SIGN", dtype=param.dtype)
        block.append_op("sign", inputs={"X": [param]}, outputs={"Out": [sign]})
        decay = block.create_var(name=param.name + "@L1DECAY", dtype=param.dtype)
        block.append_op("scale", inputs={"X": [sign]}, outputs={"Out": [decay]},
                        attrs={"scale": self._regularization_coeff})
        return decay

    def sparse_decay_op(self, param: Any, grad: Any, block: Any) -> Any:
        sign = block.create_var(name=param.name + "@SIGN", dtype=param.dtype,
                                shape=param.shape)
        block.append_op("sign", inputs={"X": [param]}, outputs={"Out": [sign]})
        return self._touched_rows(sign, grad, block, "@L1DECAY_ROWS")


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
        sparse = grad.type == "selected_rows"
        # NOTE: Optimize role, as Fluid's _optimized_guard: data-parallel runs add the decay
        # once, after the gradients are aggregated, not once per device before the sum.
        with block.program._optimized_guard([param, grad]):
            decay = reg.sparse_decay_op(param, grad, block) if sparse else \
                reg.decay_op(param, block)
            new_grad = block.create_var(name=grad.name + "@REGULARIZED", dtype=grad.dtype,
                                        shape=param.shape,
                                        type="selected_rows" if sparse else "lod_tensor")
            block.append_op("sum", inputs={"X": [grad, decay]}, outputs={"Out": [new_grad]})
        out.append((param, new_grad))
    return out
