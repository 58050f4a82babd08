"""Fluid 1.6's module paths of the layers: ``fluid.layers.nn.fc``, ``fluid.layers.tensor.concat``.

Fluid defines each layer in one module of ``paddle/fluid/layers/`` and re-exports it as
``fluid.layers.<name>``; programs and Fluid's own tests also write the module path
(``from paddle.fluid.layers.control_flow import lod_rank_table``). parafluid groups its layers
differently, so each of Fluid's module names resolves the names Fluid put there through
this table (module ``__getattr__``); the object is the same as ``fluid.layers.<name>``.

Example::

    import parafluid as fluid
    assert fluid.layers.nn.conv2d_transpose is fluid.layers.conv2d_transpose
"""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["FLUID_LAYER_MODULES", "resolve"]

# Fluid 1.6 module under paddle/fluid/layers/ -> the layer names it defines
FLUID_LAYER_MODULES: dict[str, tuple[str, ...]] = {
    "nn": (
        'fc', 'center_loss', 'embedding', 'dynamic_lstm', 'dynamic_lstmp', 'dynamic_gru',
        'gru_unit', 'linear_chain_crf', 'crf_decoding', 'cos_sim', 'cross_entropy',
        'bpr_loss', 'square_error_cost', 'chunk_eval', 'sequence_conv', 'conv2d', 'conv3d',
        'sequence_pool', 'sequence_softmax', 'softmax', 'pool2d', 'pool3d',
        'adaptive_pool2d', 'adaptive_pool3d', 'batch_norm', 'data_norm',
        'beam_search_decode', 'conv2d_transpose', 'conv3d_transpose', 'sequence_expand',
        'sequence_expand_as', 'sequence_pad', 'sequence_unpad', 'lstm_unit', 'reduce_sum',
        'reduce_mean', 'reduce_max', 'reduce_min', 'reduce_prod', 'reduce_all',
        'reduce_any', 'sequence_first_step', 'sequence_last_step', 'sequence_slice',
        'dropout', 'split', 'ctc_greedy_decoder', 'edit_distance', 'l2_normalize', 'matmul',
        'topk', 'warpctc', 'sequence_reshape', 'transpose', 'im2sequence', 'nce',
        'sampled_softmax_with_cross_entropy', 'hsigmoid', 'beam_search', 'row_conv',
        'multiplex', 'layer_norm', 'group_norm', 'spectral_norm',
        'softmax_with_cross_entropy', 'smooth_l1', 'one_hot', 'autoincreased_step_counter',
        'reshape', 'squeeze', 'unsqueeze', 'lod_reset', 'lod_append', 'lrn', 'pad',
        'pad_constant_like', 'label_smooth', 'roi_pool', 'roi_align', 'dice_loss',
        'image_resize', 'image_resize_short', 'resize_bilinear', 'resize_trilinear',
        'resize_nearest', 'gather', 'scatter', 'sequence_scatter', 'random_crop',
        'mean_iou', 'relu', 'selu', 'log', 'crop', 'rank_loss', 'margin_rank_loss', 'elu',
        'relu6', 'pow', 'stanh', 'hard_sigmoid', 'swish', 'prelu', 'brelu', 'leaky_relu',
        'soft_relu', 'flatten', 'sequence_mask', 'stack', 'pad2d', 'unstack',
        'sequence_enumerate', 'unique', 'unique_with_counts', 'expand', 'sequence_concat',
        'scale', 'elementwise_add', 'elementwise_div', 'elementwise_sub', 'elementwise_mul',
        'elementwise_max', 'elementwise_min', 'elementwise_pow', 'elementwise_mod',
        'elementwise_floordiv', 'uniform_random_batch_size_like', 'gaussian_random',
        'sampling_id', 'gaussian_random_batch_size_like', 'sum', 'slice', 'shape', 'rank',
        'size', 'logical_and', 'logical_or', 'logical_xor', 'logical_not', 'clip',
        'clip_by_norm', 'mean', 'mul', 'sigmoid_cross_entropy_with_logits', 'maxout',
        'space_to_depth', 'affine_grid', 'sequence_reverse', 'affine_channel',
        'similarity_focus', 'hash', 'grid_sampler', 'log_loss', 'add_position_encoding',
        'bilinear_tensor_product', 'merge_selected_rows', 'get_tensor_from_selected_rows',
        'lstm', 'shuffle_channel', 'temporal_shift', 'py_func', 'psroi_pool',
        'teacher_student_sigmoid_loss', 'huber_loss', 'kldiv_loss', 'tree_conv',
        'npair_loss', 'pixel_shuffle', 'fsp_matrix', 'continuous_value_model', 'where',
        'sign', 'deformable_conv', 'unfold', 'deformable_roi_pooling',
        'match_matrix_tensor', 'filter_by_instag', 'var_conv_2d', 'shard_index',
        'hard_swish', 'prroi_pool', 'gather_tree'),
    "io": (
        'data', 'read_file', 'double_buffer', 'py_reader', 'create_py_reader_by_data',
        'load'),
    "tensor": (
        'create_tensor', 'create_parameter', 'create_global_var', 'cast',
        'tensor_array_to_tensor', 'concat', 'sums', 'assign',
        'fill_constant_batch_size_like', 'fill_constant', 'argmin', 'argmax', 'argsort',
        'ones', 'zeros', 'reverse', 'has_inf', 'has_nan', 'isfinite', 'range', 'linspace',
        'zeros_like', 'ones_like', 'diag', 'eye'),
    "control_flow": (
        'While', 'Switch', 'increment', 'array_write', 'create_array', 'less_than',
        'less_equal', 'greater_than', 'greater_equal', 'equal', 'not_equal', 'array_read',
        'array_length', 'IfElse', 'DynamicRNN', 'StaticRNN', 'reorder_lod_tensor_by_rank',
        'Print', 'is_empty', 'lod_rank_table', 'max_sequence_len', 'lod_tensor_to_array',
        'array_to_lod_tensor', 'shrink_memory', 'split_lod_tensor', 'merge_lod_tensor'),
    "ops": (
        'sigmoid', 'logsigmoid', 'exp', 'tanh', 'atan', 'tanh_shrink', 'softshrink', 'sqrt',
        'rsqrt', 'abs', 'ceil', 'floor', 'cos', 'acos', 'asin', 'sin', 'round',
        'reciprocal', 'square', 'softplus', 'softsign', 'uniform_random', 'hard_shrink',
        'cumsum', 'thresholded_relu'),
    "detection": (
        'prior_box', 'density_prior_box', 'multi_box_head', 'bipartite_match',
        'target_assign', 'detection_output', 'ssd_loss', 'rpn_target_assign',
        'retinanet_target_assign', 'sigmoid_focal_loss', 'anchor_generator',
        'roi_perspective_transform', 'generate_proposal_labels', 'generate_proposals',
        'generate_mask_labels', 'iou_similarity', 'box_coder', 'polygon_box_transform',
        'yolov3_loss', 'yolo_box', 'box_clip', 'multiclass_nms',
        'retinanet_detection_output', 'distribute_fpn_proposals', 'box_decoder_and_assign',
        'collect_fpn_proposals'),
    "metric_op": (
        'accuracy', 'auc'),
    "learning_rate_scheduler": (
        'exponential_decay', 'natural_exp_decay', 'inverse_time_decay', 'polynomial_decay',
        'piecewise_decay', 'noam_decay', 'cosine_decay', 'linear_lr_warmup'),
    "distributions": (
        'Uniform', 'Normal'),}


def resolve(module: str, name: str) -> Any:
    """``fluid.layers.<module>.<name>`` as Fluid spells it: the layer itself, a
    ``NotProvided`` stand-in for a listed one, or an AttributeError naming both."""
    from ..compat import missing_attribute

    layers_dict = vars(sys.modules[__package__])  # the package, complete once imported

    if name in FLUID_LAYER_MODULES.get(module, ()):
        if name in layers_dict:
            return layers_dict[name]
        return missing_attribute("layers", name, FLUID_LAYER_MODULES[module])
    if name.startswith("__"):
        raise AttributeError(f"module 'parafluid.layers.{module}' has no attribute {name!r}")
    return missing_attribute(f"layers.{module}", name, FLUID_LAYER_MODULES.get(module, ()))
