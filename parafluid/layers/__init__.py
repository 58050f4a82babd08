"""``fluid.layers``: functions that append ops to the default main program."""

from .io import *  # noqa: F403
from .nn import *  # noqa: F403
from .tensor import *  # noqa: F403
from .learning_rate_scheduler import *  # noqa: F403
from . import io, nn, tensor  # noqa: F401
from . import learning_rate_scheduler  # noqa: F401
from . import math_op_patch  # noqa: F401  (Variable arithmetic operators)

__all__ = io.__all__ + nn.__all__ + tensor.__all__
__all__ += learning_rate_scheduler.__all__
