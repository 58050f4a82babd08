"""``fluid.layers``: functions that append ops to the default main program."""
# ruff: noqa: F401, F403, I001  (one line per layer module keeps merges trivial)

from . import control_flow
from . import device
from . import dynamic_rnn
from . import index
from . import io
from . import learning_rate_scheduler
from . import loss
from . import math_op_patch  # Variable arithmetic operators
from . import nn
from . import ops
from . import sequence
from . import static_rnn
from . import tensor
from . import vision
from . import misc
from . import loss_extra
from . import seq_extra
from . import spatial
from . import tensor_extra
from . import tensor_more
from . import debug
from . import rank_table
from . import distributions
from . import metric_op
from . import detection
from . import roi
from . import yolo
from . import deformable
from . import retinanet
from . import norm_extra
from . import tree
from . import text_match
from . import lstm_stack
from . import fluid_paths
from . import rnn as _rnn
from .control_flow import *
from .dynamic_rnn import *
from .index import *
from .io import *
from .learning_rate_scheduler import *
from .loss import *
from .nn import *
from .ops import *
from .sequence import *
from .static_rnn import *
from .tensor import *
from .vision import *
from .misc import *
from .loss_extra import *
from .seq_extra import *
from .spatial import *
from .tensor_extra import *
from .tensor_more import *
from .debug import *
from .rank_table import *
from .distributions import *
from .detection import *
from .roi import *
from .yolo import *
from .deformable import *
from .retinanet import *
from .norm_extra import *
from .tree import *
from .text_match import *
from .lstm_stack import *
from .rnn import *  # binds layers.rnn to the function, as in Fluid

__all__ = (control_flow.__all__ + index.__all__ + io.__all__ + nn.__all__ + tensor.__all__
           + ops.__all__ + loss.__all__ + learning_rate_scheduler.__all__ + sequence.__all__
           + static_rnn.__all__ + dynamic_rnn.__all__)
__all__ += vision.__all__ + misc.__all__ + loss_extra.__all__ + seq_extra.__all__
__all__ += spatial.__all__ + tensor_extra.__all__ + tensor_more.__all__ + debug.__all__
__all__ += rank_table.__all__ + distributions.__all__
__all__ += detection.__all__ + roi.__all__ + yolo.__all__ + deformable.__all__
__all__ += retinanet.__all__
__all__ += norm_extra.__all__ + tree.__all__ + text_match.__all__
__all__ += lstm_stack.__all__
__all__ += _rnn.__all__


def __getattr__(name: str) -> object:
    from ..compat import missing_attribute

    return missing_attribute("layers", name, __all__)
