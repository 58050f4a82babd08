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
from . import scatter_gather
from . import loss_distance
from . import sequence_steps
from . import spatial
from . import python_function
from . import creation
from . import random
from . import shapes
from . import math
from . import logic
from . import selected_rows
from . import rnn_units
from . import ctc
from . import debug
from . import rank_table
from . import distributions
from . import metric_op
from . import detection
from . import roi
from . import yolo
from . import deformable
from . import retinanet
from . import norm
from . import tree
from . import text_match
from . import lstm_stack
from . import fluid_paths
from . import weight_norm  # WeightNormParamAttr's parameters (layer_helper calls it)
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
from .scatter_gather import *
from .loss_distance import *
from .sequence_steps import *
from .spatial import *
from .python_function import *
from .creation import *
from .random import *
from .shapes import *
from .math import *
from .logic import *
from .selected_rows import *
from .rnn_units import *
from .ctc import *
from .debug import *
from .rank_table import *
from .distributions import *
from .detection import *
from .roi import *
from .yolo import *
from .deformable import *
from .retinanet import *
from .norm import *
from .tree import *
from .text_match import *
from .lstm_stack import *
from .rnn import *  # binds layers.rnn to the function, as in Fluid

__all__ = (control_flow.__all__ + index.__all__ + io.__all__ + nn.__all__ + tensor.__all__
           + ops.__all__ + loss.__all__ + learning_rate_scheduler.__all__ + sequence.__all__
           + static_rnn.__all__ + dynamic_rnn.__all__)
__all__ += vision.__all__ + scatter_gather.__all__ + loss_distance.__all__ + sequence_steps.__all__
__all__ += spatial.__all__ + python_function.__all__ + creation.__all__ + debug.__all__
__all__ += random.__all__ + shapes.__all__ + math.__all__ + logic.__all__
__all__ += selected_rows.__all__ + rnn_units.__all__ + ctc.__all__
__all__ += rank_table.__all__ + distributions.__all__
__all__ += detection.__all__ + roi.__all__ + yolo.__all__ + deformable.__all__
__all__ += retinanet.__all__
__all__ += norm.__all__ + tree.__all__ + text_match.__all__
__all__ += lstm_stack.__all__
__all__ += _rnn.__all__

from . import arg_checks as _arg_checks  # noqa: E402  (it wraps what is imported above)
# Fluid's argument checks on the layers users call (also where a Fluid module path names them)
_arg_checks.apply(globals(), tuple(m for m in (control_flow, io, nn, ops, tensor, detection,
                                               metric_op, learning_rate_scheduler,
                                               distributions)))


def __getattr__(name: str) -> object:
    from ..compat import missing_attribute

    return missing_attribute("layers", name, __all__)
