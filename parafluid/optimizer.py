"""``fluid.optimizer``: Fluid's path of the optimizers, whose home is ``parafluid/optimizers/``."""

# ruff: noqa: F401, F403
from __future__ import annotations

from .optimizers.base import Optimizer
from .optimizers.dgc import DGCMomentum, DGCMomentumOptimizer
from .optimizers.dpsgd import Dpsgd, DpsgdOptimizer
from .optimizers.moving_average import ExponentialMovingAverage, LookaheadOptimizer, ModelAverage
from .optimizers.pipeline import PipelineOptimizer
from .optimizers.recompute import RecomputeOptimizer
from .optimizers.rules import *
from .optimizers.rules import __all__ as _rules
from .regularizer import append_regularization_ops  # Fluid's module holds it too

__all__ = ["Optimizer", *_rules, "ExponentialMovingAverage", "LookaheadOptimizer",
           "ModelAverage", "PipelineOptimizer", "DGCMomentumOptimizer", "DGCMomentum",
           "RecomputeOptimizer", "Dpsgd", "DpsgdOptimizer"]


def __getattr__(name: str) -> object:
    # Fluid 1.6 names left out here import and fail on use, saying what to use instead
    from .compat import missing_attribute

    return missing_attribute("optimizer", name, __all__)
