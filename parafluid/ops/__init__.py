"""Operator registrations, grouped by family. Importing this package registers every op."""
# ruff: noqa: F401, I001  (one import per family, for its registration side effects)

from . import activation
from . import beam_search
from . import clip
from . import collective_init
from . import comm
from . import control_flow
from . import crf
from . import ctc
from . import fused
from . import index
from . import logic
from . import loss
from . import lr
from . import math
from . import memory
from . import nn
from . import node_comm
from . import norm
from . import optimizer
from . import reduce
from . import rnn
from . import rpc
from . import sync_norm
from . import tensor
from . import vocab_loss
from . import conv_nd
from . import norm_extra
from . import vision
from . import misc
from . import loss_extra
from . import seq_extra
from . import rnn_unit
from . import spatial
from . import tensor_extra
from . import py_func
from . import tensor_more
from . import debug
from . import segment
from . import sequence  # last: its LoD-sharing table wraps ops of the families above
from .registry import get_op_def, has_op, register_op, registered_ops

__all__ = ["register_op", "get_op_def", "has_op", "registered_ops"]
