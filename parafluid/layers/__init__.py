"""``fluid.layers``: functions that append ops to the default main program."""

from . import (  # noqa: F401
    io,
    math_op_patch,  # noqa: F401  (Variable arithmetic operators)
    nn,
    tensor,
)
from .io import *  # noqa: F403
from .nn import *  # noqa: F403
from .tensor import *  # noqa: F403

__all__ = io.__all__ + nn.__all__ + tensor.__all__
