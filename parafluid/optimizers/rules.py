"""The update rules of ``fluid.optimizer``: each class names its update op, its accumulators
(``State``) and its op attributes; ``Optimizer`` (``base.py``) appends them.

Example::

    fluid.optimizer.Adam(learning_rate=0.001).minimize(avg_cost)
"""

from __future__ import annotations

from typing import Any

from ..framework import Parameter, Variable, default_startup_program, in_dygraph_mode
from .base import Optimizer, State, _check_number

__all__ = ["SGD", "SGDOptimizer", "Momentum", "MomentumOptimizer", "Adam", "AdamOptimizer",
           "Adagrad", "AdagradOptimizer", "RMSProp", "RMSPropOptimizer", "DecayedAdagrad",
           "DecayedAdagradOptimizer", "Adamax", "AdamaxOptimizer", "Ftrl", "FtrlOptimizer",
           "Lamb", "LambOptimizer", "Adadelta", "AdadeltaOptimizer", "LarsMomentum",
           "LarsMomentumOptimizer"]


class SGD(Optimizer):
    """``param -= lr * grad`` (sparse gradients update only their rows)."""

    type = "sgd"

    def __init__(self, learning_rate: float | Variable, regularization: Any = None,
                 name: str | None = None, grad_clip: Any = None) -> None:
        super().__init__(learning_rate, regularization, name, grad_clip)


SGDOptimizer = SGD


class Momentum(Optimizer):
    """SGD with momentum: ``v = mu*v + g``, then ``p -= lr*v`` (or, with Nesterov,
    ``p -= lr*(g + mu*v)``).

    Args:
        learning_rate: a float or a learning-rate Variable (e.g. an LR schedule).
        momentum: ``mu``.
        use_nesterov: use Nesterov momentum.
        regularization: a regularizer for every parameter (e.g. ``L2Decay(1e-4)``).

    Example::

        opt = fluid.optimizer.Momentum(learning_rate=0.1, momentum=0.9)
        opt.minimize(avg_cost)
    """

    type = "momentum"
    _velocity_acc_str = "velocity"  # Fluid's accumulator name attribute
    _state = (State("Velocity", "velocity", "VelocityOut"),)

    def __init__(self, learning_rate: float | Variable, momentum: float,
                 use_nesterov: bool = False, regularization: Any = None,
                 name: str | None = None, grad_clip: Any = None) -> None:
        _check_number("Momentum", momentum=momentum)
        super().__init__(learning_rate, regularization, name, grad_clip)
        self._momentum = float(momentum)
        self._use_nesterov = bool(use_nesterov)

    def _update_attrs(self, param: Parameter) -> dict[str, Any]:
        return {"mu": self._momentum, "use_nesterov": self._use_nesterov}
class Adam(Optimizer):
    """Adam (Kingma & Ba) with Fluid's update::

        lr_t = lr * sqrt(1 - beta2^t) / (1 - beta1^t)
        m1 = beta1*m1 + (1-beta1)*g;  m2 = beta2*m2 + (1-beta2)*g*g
        p -= lr_t * m1 / (sqrt(m2) + epsilon)

    ``beta1^t`` and ``beta2^t`` live in accumulators (``<param>_beta1_pow_acc_0``) that scale
    ops advance after all updates. With ``lazy_mode=True`` a sparse gradient updates only
    the moments and parameter rows it holds.

    Example::

        opt = fluid.optimizer.Adam(learning_rate=0.001)
        opt.minimize(avg_cost)
    """

    type = "adam"
    _beta1_pow_acc_str = "beta1_pow_acc"
    _beta2_pow_acc_str = "beta2_pow_acc"
    _moment1_acc_str = "moment1"  # Fluid's accumulator name attribute
    _moment2_acc_str = "moment2"
    _state = (State("Moment1", "moment1", "Moment1Out"), State("Moment2", "moment2", "Moment2Out"),
              State("Beta1Pow", _beta1_pow_acc_str, fill="_beta1", scalar=True),
              State("Beta2Pow", _beta2_pow_acc_str, fill="_beta2", scalar=True))

    def __init__(self, learning_rate: float | Variable = 0.001, beta1: float = 0.9,
                 beta2: float = 0.999, epsilon: float = 1e-8, regularization: Any = None,
                 name: str | None = None, lazy_mode: bool = False,
                 grad_clip: Any = None) -> None:
        _check_number("Adam", beta1=beta1, beta2=beta2, epsilon=epsilon)
        for arg, v in (("beta1", beta1), ("beta2", beta2)):
            if not 0.0 <= v < 1.0:
                raise ValueError(f"Adam: {arg} must be in [0, 1), got {v}")
        super().__init__(learning_rate, regularization, name, grad_clip)
        self._beta1, self._beta2, self._epsilon = float(beta1), float(beta2), float(epsilon)
        self._lazy_mode = bool(lazy_mode)

    def _update_attrs(self, param: Parameter) -> dict[str, Any]:
        return {"beta1": self._beta1, "beta2": self._beta2, "epsilon": self._epsilon,
                "lazy_mode": self._lazy_mode}
    def _finish_update(self, block: Any, params_grads: list[tuple[Any, Any]]) -> None:
        """Advance ``beta^t`` once per step, after every parameter's update."""
        self._advance_powers(block, params_grads, ((self._beta1_pow_acc_str, self._beta1),
                                                   (self._beta2_pow_acc_str, self._beta2)))

class Adagrad(Optimizer):
    """Adagrad: ``m += g*g``, ``p -= lr * g / (sqrt(m) + epsilon)``.

    Example::

        opt = fluid.optimizer.Adagrad(learning_rate=0.2)
        opt.minimize(avg_cost)
    """

    type = "adagrad"
    _moment_acc_str = "moment"  # Fluid's accumulator name attribute
    _state = (State("Moment", "moment", "MomentOut", fill="_moment_fill"),)

    def __init__(self, learning_rate: float | Variable, epsilon: float = 1e-6,
                 regularization: Any = None, name: str | None = None,
                 initial_accumulator_value: float = 0.0, grad_clip: Any = None) -> None:
        _check_number("Adagrad", epsilon=epsilon,
                      initial_accumulator_value=initial_accumulator_value)
        super().__init__(learning_rate, regularization, name, grad_clip)
        self._epsilon = float(epsilon)
        self._initial_accumulator_value = float(initial_accumulator_value)

    @property
    def _moment_fill(self) -> float:
        # NOTE: as Fluid 1.6's, a program's moment starts at 0 and the update pass appends
        # a second fill_constant with initial_accumulator_value to the startup program;
        # the imperative mode fills it once, at creation
        return self._initial_accumulator_value if in_dygraph_mode() else 0.0

    def _append_optimize_op(self, block: Any, param_and_grad: tuple[Any, Any]) -> Any:
        if not in_dygraph_mode():
            moment = self._get_accumulator(self._moment_acc_str, param_and_grad[0])
            default_startup_program().global_block().append_op(
                "fill_constant", inputs={}, outputs={"Out": [moment]},
                attrs={"dtype": moment.dtype, "value": self._initial_accumulator_value,
                       "shape": list(moment.shape)})
        return super()._append_optimize_op(block, param_and_grad)

    def _update_attrs(self, param: Parameter) -> dict[str, Any]:
        return {"epsilon": self._epsilon}
class RMSProp(Optimizer):
    """RMSProp with Fluid's update::

        ms = rho*ms + (1-rho)*g*g
        mom = momentum*mom + lr*g / sqrt(ms + epsilon)       (centered: ms - mg*mg + eps,
        p -= mom                                               mg = rho*mg + (1-rho)*g)

    Example::

        opt = fluid.optimizer.RMSProp(learning_rate=0.01, rho=0.9)
        opt.minimize(avg_cost)
    """

    type = "rmsprop"
    _momentum_acc_str = "momentum"  # Fluid's accumulator name attribute
    _mean_square_acc_str = "mean_square"
    _mean_grad_acc_str = "mean_grad"
    _state = (State("Moment", "momentum", "MomentOut"),
              State("MeanSquare", "mean_square", "MeanSquareOut"),
              State("MeanGrad", "mean_grad", "MeanGradOut"))

    def __init__(self, learning_rate: float | Variable, rho: float = 0.95,
                 epsilon: float = 1e-6, momentum: float = 0.0, centered: bool = False,
                 regularization: Any = None, name: str | None = None,
                 grad_clip: Any = None) -> None:
        _check_number("RMSProp", rho=rho, epsilon=epsilon, momentum=momentum)
        super().__init__(learning_rate, regularization, name, grad_clip)
        self._rho, self._epsilon = float(rho), float(epsilon)
        self._momentum, self._centered = float(momentum), bool(centered)

    def _update_attrs(self, param: Parameter) -> dict[str, Any]:
        return {"decay": self._rho, "epsilon": self._epsilon, "momentum": self._momentum,
                "centered": self._centered}
MomentumOptimizer = Momentum
AdamOptimizer = Adam
AdagradOptimizer = Adagrad
RMSPropOptimizer = RMSProp


class DecayedAdagrad(Optimizer):
    """Adagrad with a decaying moment: ``m = decay*m + (1-decay)*g*g``,
    ``p -= lr * g / (sqrt(m) + epsilon)``.

    Example::

        fluid.optimizer.DecayedAdagrad(learning_rate=0.1, decay=0.95).minimize(avg_cost)
    """

    type = "decayed_adagrad"
    _moment_acc_str = "moment"  # Fluid's accumulator name attribute
    _state = (State("Moment", "moment", "MomentOut"),)

    def __init__(self, learning_rate: float | Variable, decay: float = 0.95,
                 epsilon: float = 1e-6, regularization: Any = None, name: str | None = None,
                 grad_clip: Any = None) -> None:
        _check_number("DecayedAdagrad", decay=decay, epsilon=epsilon)
        super().__init__(learning_rate, regularization, name, grad_clip)
        self._decay, self._epsilon = float(decay), float(epsilon)

    def _update_attrs(self, param: Parameter) -> dict[str, Any]:
        return {"decay": self._decay, "epsilon": self._epsilon}
class Adamax(Optimizer):
    """Adamax (Adam with the infinity norm)::

        m = beta1*m + (1-beta1)*g;  u = max(beta2*u + epsilon, |g|)
        p -= lr / (1 - beta1^t) * m / u

    Example::

        fluid.optimizer.Adamax(learning_rate=0.002).minimize(avg_cost)
    """

    type = "adamax"
    _beta1_pow_acc_str = "beta1_pow_acc"
    _moment_acc_str = "moment"  # Fluid's accumulator name attribute
    _inf_norm_acc_str = "inf_norm"
    _state = (State("Moment", "moment", "MomentOut"), State("InfNorm", "inf_norm", "InfNormOut"),
              State("Beta1Pow", _beta1_pow_acc_str, fill="_beta1", scalar=True))

    def __init__(self, learning_rate: float | Variable = 0.001, beta1: float = 0.9,
                 beta2: float = 0.999, epsilon: float = 1e-8, regularization: Any = None,
                 name: str | None = None, grad_clip: Any = None) -> None:
        _check_number("Adamax", beta1=beta1, beta2=beta2, epsilon=epsilon)
        super().__init__(learning_rate, regularization, name, grad_clip)
        self._beta1, self._beta2, self._epsilon = float(beta1), float(beta2), float(epsilon)

    def _update_attrs(self, param: Parameter) -> dict[str, Any]:
        return {"beta1": self._beta1, "beta2": self._beta2, "epsilon": self._epsilon}
    def _finish_update(self, block: Any, params_grads: list[tuple[Any, Any]]) -> None:
        """Advance ``beta1^t`` once per step, after every parameter's update."""
        self._advance_powers(block, params_grads, ((self._beta1_pow_acc_str, self._beta1),))


class Ftrl(Optimizer):
    """FTRL-proximal (McMahan et al.) with Fluid's update; ``l1``/``l2`` regularize,
    ``lr_power`` (-0.5) shapes the per-coordinate learning rate.

    Example::

        fluid.optimizer.Ftrl(learning_rate=0.1, l1=0.01).minimize(avg_cost)
    """

    type = "ftrl"
    _squared_acc_str = "squared"  # Fluid's accumulator name attribute
    _linear_acc_str = "linear"
    _state = (State("SquaredAccumulator", "squared", "SquaredAccumOut"),
              State("LinearAccumulator", "linear", "LinearAccumOut"))

    def __init__(self, learning_rate: float | Variable, l1: float = 0.0, l2: float = 0.0,
                 lr_power: float = -0.5, regularization: Any = None, name: str | None = None,
                 grad_clip: Any = None) -> None:
        _check_number("Ftrl", l1=l1, l2=l2, lr_power=lr_power)
        super().__init__(learning_rate, regularization, name, grad_clip)
        self._l1, self._l2, self._lr_power = float(l1), float(l2), float(lr_power)

    def _update_attrs(self, param: Parameter) -> dict[str, Any]:
        return {"l1": self._l1, "l2": self._l2, "lr_power": self._lr_power}
class Lamb(Adam):
    """LAMB (You et al.): Adam's moments (not bias-corrected, as Fluid 1.6's kernel) plus
    weight decay, scaled per parameter by the trust ratio ``|p| / |step|``.

    ``exclude_from_weight_decay_fn(param) -> bool`` turns weight decay off for a parameter.

    Example::

        fluid.optimizer.Lamb(learning_rate=0.002, lamb_weight_decay=0.01).minimize(avg_cost)
    """

    type = "lamb"

    def __init__(self, learning_rate: float | Variable = 0.001, lamb_weight_decay: float = 0.01,
                 beta1: float = 0.9, beta2: float = 0.999, epsilon: float = 1e-6,
                 regularization: Any = None, exclude_from_weight_decay_fn: Any = None,
                 name: str | None = None, grad_clip: Any = None) -> None:
        _check_number("Lamb", lamb_weight_decay=lamb_weight_decay)
        super().__init__(learning_rate, beta1, beta2, epsilon, regularization, name,
                         grad_clip=grad_clip)
        self._weight_decay = float(lamb_weight_decay)
        self._exclude_fn = exclude_from_weight_decay_fn

    def _update_attrs(self, param: Parameter) -> dict[str, Any]:
        decay = 0.0 if self._exclude_fn is not None and self._exclude_fn(param) \
            else self._weight_decay
        return {"beta1": self._beta1, "beta2": self._beta2, "epsilon": self._epsilon,
                "weight_decay": decay}
DecayedAdagradOptimizer = DecayedAdagrad
AdamaxOptimizer = Adamax
FtrlOptimizer = Ftrl
LambOptimizer = Lamb


class Adadelta(Optimizer):
    """Adadelta (Zeiler), as Fluid's: no learning rate enters the update::

        E[g^2] = rho * E[g^2] + (1 - rho) * g^2
        dx = -sqrt((E[dx^2] + epsilon) / (E[g^2] + epsilon)) * g
        E[dx^2] = rho * E[dx^2] + (1 - rho) * dx^2;  p += dx

    Example::

        fluid.optimizer.Adadelta(learning_rate=0.0003, epsilon=1.0e-6, rho=0.95).minimize(cost)
    """

    type = "adadelta"
    _avg_squared_grad_acc_str = "_avg_squared_grad"  # Fluid's accumulator name attribute
    _avg_squared_update_acc_str = "_avg_squared_update"
    _state = (State("AvgSquaredGrad", "_avg_squared_grad", "AvgSquaredGradOut"),
              State("AvgSquaredUpdate", "_avg_squared_update", "AvgSquaredUpdateOut"))

    def __init__(self, learning_rate: float | Variable, epsilon: float = 1.0e-6,
                 rho: float = 0.95, regularization: Any = None, name: str | None = None,
                 grad_clip: Any = None) -> None:
        _check_number("Adadelta", epsilon=epsilon, rho=rho)
        super().__init__(learning_rate, regularization, name, grad_clip)
        self._epsilon, self._rho = float(epsilon), float(rho)

    def _update_attrs(self, param: Parameter) -> dict[str, Any]:
        return {"epsilon": self._epsilon, "rho": self._rho}

    def _append_optimize_op(self, block: Any, param_and_grad: tuple[Any, Any]) -> Any:
        # NOTE: as Fluid's, the op reads no learning rate
        param, grad = param_and_grad
        sq_grad = self._get_accumulator("_avg_squared_grad", param)
        sq_update = self._get_accumulator("_avg_squared_update", param)
        return block.append_op(
            "adadelta", inputs={"Param": [param], "Grad": [grad], "AvgSquaredGrad": [sq_grad],
                                "AvgSquaredUpdate": [sq_update]},
            outputs={"ParamOut": [param], "AvgSquaredGradOut": [sq_grad],
                     "AvgSquaredUpdateOut": [sq_update]},
            attrs=self._update_attrs(param))


class LarsMomentum(Optimizer):
    """Momentum with LARS, a learning rate per layer (You et al.)::

        local_lr = lr * lars_coeff * |p| / (|g| + lars_weight_decay * |p|)
        v = momentum * v + local_lr * (g + lars_weight_decay * p);  p -= v

    Example::

        fluid.optimizer.LarsMomentum(learning_rate=0.2, momentum=0.9).minimize(cost)
    """

    type = "lars_momentum"
    _velocity_acc_str = "velocity"  # Fluid's accumulator name attribute
    _state = (State("Velocity", "velocity", "VelocityOut"),)

    def __init__(self, learning_rate: float | Variable, momentum: float,
                 lars_coeff: float = 0.001, lars_weight_decay: float = 0.0005,
                 regularization: Any = None, name: str | None = None,
                 grad_clip: Any = None) -> None:
        _check_number("LarsMomentum", momentum=momentum, lars_coeff=lars_coeff,
                      lars_weight_decay=lars_weight_decay)
        super().__init__(learning_rate, regularization, name, grad_clip)
        self._momentum, self._lars_coeff = float(momentum), float(lars_coeff)
        self._lars_weight_decay = float(lars_weight_decay)

    def _update_attrs(self, param: Parameter) -> dict[str, Any]:
        return {"mu": self._momentum, "lars_coeff": self._lars_coeff,
                "lars_weight_decay": self._lars_weight_decay}


AdadeltaOptimizer = Adadelta
LarsMomentumOptimizer = LarsMomentum
