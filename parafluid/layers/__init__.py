"""``fluid.layers``: functions that append ops to the default main program."""

from .io import *  # noqa: F403
from .nn import *  # noqa: F403
from .tensor import *  # noqa: F403
from .loss import *  # noqa: F403
from . import loss  # noqa: F401
from . import io, nn, tensor  # noqa: F401
from . import math_op_patch  # noqa: F401  (Variable arithmetic operators)

__all__ = io.__all__ + nn.__all__ + tensor.__all__
__all__ += loss.__all__
