"""``fluid.dygraph``: Fluid 1.6's imperative mode (docs/dygraph.md).

Inside ``fluid.dygraph.guard()`` every op a layer appends runs at once; ``loss.backward()``
computes gradients with the ops' own gradient makers; optimizers update at once.
Names not provided (yet) import as stand-ins that fail on use (``parafluid.compat``).
"""

from __future__ import annotations

__all__: list[str] = []

# -- the tracer, variables, guard, backward, Layer, learning-rate decays, save/load -------
from . import jit  # noqa: E402  (fluid.dygraph.jit.trace)
from .base import BackwardStrategy, enabled, guard, no_grad, to_variable  # noqa: E402
from .checkpoint import (  # noqa: E402
    load_dygraph,
    load_persistables,
    save_dygraph,
    save_persistables,
)
from .layers import Layer  # noqa: E402
from .learning_rate_scheduler import (  # noqa: E402
    CosineDecay,
    ExponentialDecay,
    InverseTimeDecay,
    LearningRateDecay,
    NaturalExpDecay,
    NoamDecay,
    PiecewiseDecay,
    PolynomialDecay,
)
from .parallel import DataParallel, Env, ParallelStrategy, prepare_context  # noqa: E402
from .tracer import Tracer  # noqa: E402

__all__ += [
    "Layer", "guard", "to_variable", "no_grad", "enabled", "Tracer", "BackwardStrategy",
    "save_persistables", "load_persistables", "save_dygraph", "load_dygraph",
    "LearningRateDecay", "NoamDecay", "PiecewiseDecay", "NaturalExpDecay", "ExponentialDecay",
    "InverseTimeDecay", "PolynomialDecay", "CosineDecay",
    "prepare_context", "ParallelStrategy", "Env", "DataParallel", "jit",
]

# -- layers (dygraph.nn) -------------------------------------------------------------------
from . import nn  # noqa: E402
from .nn import *  # noqa: E402, F403

__all__ += nn.__all__


def __getattr__(name: str) -> object:
    from ..compat import missing_attribute

    return missing_attribute("dygraph", name, __all__)
