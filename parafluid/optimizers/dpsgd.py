"""``fluid.optimizer.Dpsgd``: differentially private SGD (Abadi et al., CCS'16), one
``dpsgd`` op per parameter: the gradient is scaled down to an L2 norm of at most ``clip``
and one Gaussian noise value of deviation ``sigma``, divided by ``batch_size``, is added
before the SGD step.

Example::

    opt = fluid.optimizer.Dpsgd(learning_rate=0.01, clip=10.0, batch_size=16.0, sigma=1.0)
    opt.minimize(avg_cost)
"""

from __future__ import annotations

from typing import Any

from ..framework import Parameter
from .base import Optimizer, _check_number

__all__ = ["Dpsgd", "DpsgdOptimizer"]


class Dpsgd(Optimizer):
    """Fluid 1.6's ``DpsgdOptimizer(learning_rate, clip, batch_size, sigma)`` (its
    defaults); dense gradients only, as in Fluid."""

    type = "dpsgd"

    def __init__(self, learning_rate: Any = 0.001, clip: float = 0.9,
                 batch_size: float = 0.999, sigma: float = 1e-8) -> None:
        _check_number("Dpsgd", clip=clip, batch_size=batch_size, sigma=sigma)
        super().__init__(learning_rate)
        self._clip, self._batch_size, self._sigma = float(clip), float(batch_size), float(sigma)

    def _update_attrs(self, param: Parameter) -> dict[str, Any]:
        return {"clip": self._clip, "batch_size": self._batch_size, "sigma": self._sigma}


DpsgdOptimizer = Dpsgd
