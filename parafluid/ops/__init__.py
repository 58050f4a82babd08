"""Operator registrations, grouped by family. Importing this package registers every op."""
# ruff: noqa: F401, I001  (one import per family, for its registration side effects)

from . import activation
from . import beam_search
from . import clip
from . import collective_init
from . import comm
from . import control_flow
from . import conv
from . import crf
from . import ctc
from . import debug
from . import dgc
from . import embedding
from . import fused
from . import index
from . import logic
from . import loss
from . import loss_distance
from . import lr
from . import math
from . import memory
from . import metric
from . import node_comm
from . import norm
from . import normalize
from . import optimizer
from . import pool
from . import py_func
from . import random
from . import reader
from . import reduce
from . import rnn
from . import rpc
from . import selected_rows
from . import spatial
from . import sync_norm
from . import tensor
from . import vision
from . import segment
from . import vocab_loss
from . import sequence_steps
from . import tensor_array
from . import matching
from . import filter_by_tag
from . import detection_box
from . import detection_match
from . import roi
from . import prroi
from . import yolo
from . import detection_loss
from . import detection_map
from . import rpn
from . import rpn_target
from . import deformable_conv
from . import retinanet
from . import deformable_roi
from . import mask_labels
from . import data_norm
from . import sampled_softmax
from . import lstmp
from . import tree_conv
from . import match_matrix
from . import sequence_topk
from . import var_conv
from . import load
from . import fake_quant
from . import sequence  # last: its LoD-sharing table wraps ops of the families above
from .registry import get_op_def, has_op, register_op, registered_ops

__all__ = ["register_op", "get_op_def", "has_op", "registered_ops"]
