"""``fluid.dygraph``: Fluid 1.6's imperative mode.

Names not provided (yet) import as stand-ins that fail on use (``parafluid.compat``).
"""

from __future__ import annotations

from .base import BackwardStrategy, enabled, guard, no_grad, to_variable
from .layers import Layer
from .tracer import Tracer

__all__: list[str] = ["Layer", "guard", "to_variable", "no_grad", "enabled", "Tracer",
                      "BackwardStrategy"]

# -- the tracer, variables, guard, backward, Layer, learning-rate decays, save/load -------

# -- layers (dygraph.nn) -------------------------------------------------------------------
from . import nn  # noqa: E402
from .nn import *  # noqa: E402, F403

__all__ += nn.__all__


def __getattr__(name: str) -> object:
    from ..compat import missing_attribute

    return missing_attribute("dygraph", name, __all__)
