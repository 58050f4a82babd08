"""R-CNN family layers of Fluid 1.6: ROI pooling (``roi_pool``, ``roi_align``,
``psroi_pool``, in Fluid's ``layers.nn``), region proposals and FPN levels
(``generate_proposals``, ``distribute_fpn_proposals``, ``collect_fpn_proposals``) and
``box_decoder_and_assign`` (ops in ``parafluid/ops/roi.py``, ``rpn.py``, ``detection_box.py``).

Example::

    import parafluid as fluid
    feat = fluid.layers.data(name="feat", shape=[16, 14, 14], dtype="float32")
    rois = fluid.layers.data(name="rois", shape=[4], dtype="float32", lod_level=1)
    pooled = fluid.layers.roi_align(feat, rois, pooled_height=7, pooled_width=7,
                                    spatial_scale=1 / 16.)
"""

from __future__ import annotations

from typing import Any

from ..framework import Variable
from ..layer_helper import LayerHelper
from .detection import _check, _outputs

__all__ = ["roi_pool", "roi_align", "psroi_pool", "prroi_pool", "box_decoder_and_assign",
           "generate_proposals", "distribute_fpn_proposals", "collect_fpn_proposals",
           "rpn_target_assign", "generate_proposal_labels", "retinanet_target_assign",
           "roi_perspective_transform", "generate_mask_labels"]


def _roi(op: str, input: Variable, rois: Variable, attrs: dict[str, Any],
         name: str | None = None) -> Variable:
    _check(op, input=input, rois=rois)
    helper = LayerHelper(op, name=name)
    out = helper.create_variable_for_type_inference(input.dtype)
    outputs = {"Out": [out]}
    if op == "roi_pool":
        outputs["Argmax"] = [helper.create_variable_for_type_inference("int64",
                                                                       stop_gradient=True)]
    helper.append_op(op, inputs={"X": [input], "ROIs": [rois]}, outputs=outputs, attrs=attrs)
    return out


def roi_pool(input: Variable, rois: Variable, pooled_height: int = 1, pooled_width: int = 1,
             spatial_scale: float = 1.0) -> Variable:
    """Max pooling of each ROI (``rois [R, 4]``, a LoD tensor: the ROIs of each image, in
    input pixels times ``1 / spatial_scale``) of ``input [N, C, H, W]`` into
    ``[R, C, pooled_height, pooled_width]`` (Fast R-CNN).

    Example::

        pooled = fluid.layers.roi_pool(feat, rois, pooled_height=7, pooled_width=7,
                                       spatial_scale=1 / 16.)
    """
    return _roi("roi_pool", input, rois, {"pooled_height": int(pooled_height),
                                          "pooled_width": int(pooled_width),
                                          "spatial_scale": float(spatial_scale)})


def roi_align(input: Variable, rois: Variable, pooled_height: int = 1, pooled_width: int = 1,
              spatial_scale: float = 1.0, sampling_ratio: int = -1,
              name: str | None = None) -> Variable:
    """RoIAlign (Mask R-CNN): each bin of each ROI is the mean of bilinear samples
    (``sampling_ratio`` per side, or adaptive with -1); ``[R, C, pooled_height, pooled_width]``.

    Example::

        aligned = fluid.layers.roi_align(feat, rois, 7, 7, spatial_scale=1 / 16.)
    """
    return _roi("roi_align", input, rois, {"pooled_height": int(pooled_height),
                                           "pooled_width": int(pooled_width),
                                           "spatial_scale": float(spatial_scale),
                                           "sampling_ratio": int(sampling_ratio)}, name)


def psroi_pool(input: Variable, rois: Variable, output_channels: int, spatial_scale: float,
               pooled_height: int, pooled_width: int, name: str | None = None) -> Variable:
    """Position-sensitive ROI average pooling (R-FCN): bin ``(i, j)`` of output channel
    ``c`` averages input channel ``(c * pooled_height + i) * pooled_width + j``.

    Example::

        scores = fluid.layers.psroi_pool(feat, rois, 10, 1 / 16., 7, 7)
    """
    return _roi("psroi_pool", input, rois, {"output_channels": int(output_channels),
                                            "spatial_scale": float(spatial_scale),
                                            "pooled_height": int(pooled_height),
                                            "pooled_width": int(pooled_width)}, name)


def prroi_pool(input: Variable, rois: Variable, spatial_scale: float = 1.0,
               pooled_height: int = 1, pooled_width: int = 1,
               name: str | None = None) -> Variable:
    """Precise ROI pooling (PrRoI Pooling): each bin of each ROI (``rois [R, 4]``, a LoD
    tensor, not rounded to pixels) is the integral of the bilinearly interpolated ``input``
    over the bin divided by its area; ``[R, C, pooled_height, pooled_width]``. The gradient
    reaches ``input`` and ``rois``.

    Example::

        pool_out = fluid.layers.prroi_pool(x, rois, 1.0, 7, 7)
    """
    # NOTE: Fluid checks the Python types of these three (a TypeError, not a conversion)
    if not isinstance(spatial_scale, float):
        raise TypeError(f"prroi_pool: spatial_scale must be a float, got "
                        f"{type(spatial_scale).__name__} {spatial_scale!r}")
    for arg, v in (("pooled_height", pooled_height), ("pooled_width", pooled_width)):
        if not isinstance(v, int):
            raise TypeError(f"prroi_pool: {arg} must be an int, got {type(v).__name__} {v!r}")
    return _roi("prroi_pool", input, rois, {"spatial_scale": spatial_scale,
                                            "pooled_height": pooled_height,
                                            "pooled_width": pooled_width}, name)


def box_decoder_and_assign(prior_box: Variable, prior_box_var: Variable, target_box: Variable,
                           box_score: Variable, box_clip: float,
                           name: str | None = None) -> tuple[Variable, Variable]:
    """Decode per-class deltas ``target_box [R, C * 4]`` against the pixel boxes
    ``prior_box [R, 4]`` (variances ``prior_box_var [4]``, log-size deltas capped at
    ``box_clip``): ``(decoded [R, C * 4], assigned [R, 4])``, the assigned box being the one
    of the best non-background class of ``box_score [R, C]``.

    Example::

        decoded, assigned = fluid.layers.box_decoder_and_assign(
            rois, bbox_var, deltas, cls_prob, box_clip=4.135)
    """
    _check("box_decoder_and_assign", prior_box=prior_box, prior_box_var=prior_box_var,
           target_box=target_box, box_score=box_score)
    helper = LayerHelper("box_decoder_and_assign", name=name)
    decoded, assigned = _outputs(helper, prior_box.dtype, 2)
    helper.append_op("box_decoder_and_assign",
                     inputs={"PriorBox": [prior_box], "PriorBoxVar": [prior_box_var],
                             "TargetBox": [target_box], "BoxScore": [box_score]},
                     outputs={"DecodeBox": [decoded], "OutputAssignBox": [assigned]},
                     attrs={"box_clip": float(box_clip)})
    return decoded, assigned


def generate_proposals(scores: Variable, bbox_deltas: Variable, im_info: Variable,
                       anchors: Variable, variances: Variable, pre_nms_top_n: int = 6000,
                       post_nms_top_n: int = 1000, nms_thresh: float = 0.5,
                       min_size: float = 0.1, eta: float = 1.0,
                       name: str | None = None) -> tuple[Variable, Variable]:
    """Faster R-CNN proposals from the RPN's ``scores [N, A, H, W]`` and ``bbox_deltas
    [N, 4A, H, W]`` over ``anchors`` / ``variances [H, W, A, 4]`` for images ``im_info
    [N, 3]`` (height, width, scale): LoD ``(rpn_rois [R, 4], rpn_roi_probs [R, 1])``.

    Example::

        rois, probs = fluid.layers.generate_proposals(rpn_prob, rpn_delta, im_info,
                                                      anchors, variances)
    """
    _check("generate_proposals", scores=scores, bbox_deltas=bbox_deltas, im_info=im_info,
           anchors=anchors, variances=variances)
    helper = LayerHelper("generate_proposals", name=name)
    rois, probs = _outputs(helper, bbox_deltas.dtype, 2)
    helper.append_op("generate_proposals",
                     inputs={"Scores": [scores], "BboxDeltas": [bbox_deltas],
                             "ImInfo": [im_info], "Anchors": [anchors],
                             "Variances": [variances]},
                     outputs={"RpnRois": [rois], "RpnRoiProbs": [probs]},
                     attrs={"pre_nms_topN": int(pre_nms_top_n),
                            "post_nms_topN": int(post_nms_top_n),
                            "nms_thresh": float(nms_thresh), "min_size": float(min_size),
                            "eta": float(eta)})
    rois.lod_level = probs.lod_level = 1
    return rois, probs


def distribute_fpn_proposals(fpn_rois: Variable, min_level: int, max_level: int,
                             refer_level: int, refer_scale: int,
                             name: str | None = None) -> tuple[list[Variable], Variable]:
    """Split ROIs (LoD ``[R, 4]``) by FPN level ``floor(log2(sqrt(area) / refer_scale) +
    refer_level)`` clamped to ``[min_level, max_level]``: ``(one LoD tensor per level,
    restore_index [R, 1])`` where ``restore_index`` puts the levels' rows back in order.

    Example::

        multi_rois, restore = fluid.layers.distribute_fpn_proposals(rois, 2, 5, 4, 224)
    """
    _check("distribute_fpn_proposals", fpn_rois=fpn_rois)
    helper = LayerHelper("distribute_fpn_proposals", name=name)
    count = max_level - min_level + 1
    multi = _outputs(helper, fpn_rois.dtype, count)
    restore = helper.create_variable_for_type_inference("int32", stop_gradient=True)
    helper.append_op("distribute_fpn_proposals", inputs={"FpnRois": [fpn_rois]},
                     outputs={"MultiFpnRois": multi, "RestoreIndex": [restore]},
                     attrs={"min_level": int(min_level), "max_level": int(max_level),
                            "refer_level": int(refer_level), "refer_scale": int(refer_scale)})
    for v in multi:
        v.lod_level = 1
    return multi, restore


def collect_fpn_proposals(multi_rois: list[Variable], multi_scores: list[Variable],
                          min_level: int, max_level: int, post_nms_top_n: int,
                          name: str | None = None) -> Variable:
    """The ``post_nms_top_n`` best ROIs (by score) over the levels ``min_level..max_level``
    of ``multi_rois`` / ``multi_scores`` (LoD), regrouped by image: LoD ``[R, 4]``.

    Example::

        rois = fluid.layers.collect_fpn_proposals(level_rois, level_scores, 2, 5, 2000)
    """
    count = max_level - min_level + 1
    rois, scores = list(multi_rois)[:count], list(multi_scores)[:count]
    _check("collect_fpn_proposals", **{f"multi_rois[{i}]": v for i, v in enumerate(rois)},
           **{f"multi_scores[{i}]": v for i, v in enumerate(scores)})
    helper = LayerHelper("collect_fpn_proposals", name=name)
    out = helper.create_variable_for_type_inference(rois[0].dtype, stop_gradient=True)
    helper.append_op("collect_fpn_proposals",
                     inputs={"MultiLevelRois": rois, "MultiLevelScores": scores},
                     outputs={"FpnRois": [out]}, attrs={"post_nms_topN": int(post_nms_top_n)})
    out.lod_level = 1
    return out


def rpn_target_assign(bbox_pred: Variable, cls_logits: Variable, anchor_box: Variable,
                      anchor_var: Variable, gt_boxes: Variable, is_crowd: Variable,
                      im_info: Variable, rpn_batch_size_per_im: int = 256,
                      rpn_straddle_thresh: float = 0.0, rpn_fg_fraction: float = 0.5,
                      rpn_positive_overlap: float = 0.7, rpn_negative_overlap: float = 0.3,
                      use_random: bool = True) -> tuple[Variable, ...]:
    """The RPN's training targets: sampled foreground and background anchors for
    ``gt_boxes`` / ``is_crowd`` (LoD, per image). Returns ``(predicted_scores [F + B, 1],
    predicted_location [F, 4], target_label [F + B, 1], target_bbox [F, 4],
    bbox_inside_weight [F, 4])``, the predictions gathered from ``cls_logits`` /
    ``bbox_pred`` at the sampled anchors.

    Example::

        score_pred, loc_pred, score_tgt, loc_tgt, weight = fluid.layers.rpn_target_assign(
            rpn_delta, rpn_logits, anchors, variances, gt_box, is_crowd, im_info)
    """
    from .index import gather
    from .tensor import reshape

    _check("rpn_target_assign", bbox_pred=bbox_pred, cls_logits=cls_logits,
           anchor_box=anchor_box, gt_boxes=gt_boxes, is_crowd=is_crowd, im_info=im_info)
    helper = LayerHelper("rpn_target_assign")
    loc_index, score_index, label = (helper.create_variable_for_type_inference(
        "int32", stop_gradient=True) for _ in range(3))
    target_bbox, inside_weight = _outputs(helper, anchor_box.dtype, 2)
    helper.append_op("rpn_target_assign",
                     inputs={"Anchor": [anchor_box], "GtBoxes": [gt_boxes],
                             "IsCrowd": [is_crowd], "ImInfo": [im_info]},
                     outputs={"LocationIndex": [loc_index], "ScoreIndex": [score_index],
                              "TargetLabel": [label], "TargetBBox": [target_bbox],
                              "BBoxInsideWeight": [inside_weight]},
                     attrs={"rpn_batch_size_per_im": int(rpn_batch_size_per_im),
                            "rpn_straddle_thresh": float(rpn_straddle_thresh),
                            "rpn_positive_overlap": float(rpn_positive_overlap),
                            "rpn_negative_overlap": float(rpn_negative_overlap),
                            "rpn_fg_fraction": float(rpn_fg_fraction),
                            "use_random": bool(use_random)})
    scores = gather(reshape(cls_logits, shape=[-1, 1]), score_index)
    locations = gather(reshape(bbox_pred, shape=[-1, 4]), loc_index)
    return scores, locations, label, target_bbox, inside_weight


def generate_proposal_labels(rpn_rois: Variable, gt_classes: Variable, is_crowd: Variable,
                             gt_boxes: Variable, im_info: Variable,
                             batch_size_per_im: int = 256, fg_fraction: float = 0.25,
                             fg_thresh: float = 0.25, bg_thresh_hi: float = 0.5,
                             bg_thresh_lo: float = 0.0,
                             bbox_reg_weights: Any = (0.1, 0.1, 0.2, 0.2),
                             class_nums: int | None = None, use_random: bool = True,
                             is_cls_agnostic: bool = False,
                             is_cascade_rcnn: bool = False) -> tuple[Variable, ...]:
    """Sample Fast R-CNN's training ROIs from the proposals (LoD, per image) and the ground
    truth: ``(rois, labels_int32, bbox_targets, bbox_inside_weights, bbox_outside_weights)``,
    the targets ``[R, 4 * class_nums]`` (with ``is_cls_agnostic`` every foreground box's
    target in columns 4..7). ``is_cascade_rcnn``: ``rpn_rois`` are a cascade stage's ROIs
    (the image's ground truth first, dropped), empty boxes are skipped and every foreground
    and background box is kept, unsampled.

    Example::

        rois, labels, targets, w_in, w_out = fluid.layers.generate_proposal_labels(
            rpn_rois, gt_classes, is_crowd, gt_boxes, im_info, class_nums=81)
    """
    _check("generate_proposal_labels", rpn_rois=rpn_rois, gt_classes=gt_classes,
           is_crowd=is_crowd, gt_boxes=gt_boxes, im_info=im_info)
    helper = LayerHelper("generate_proposal_labels")
    rois = helper.create_variable_for_type_inference(rpn_rois.dtype, stop_gradient=True)
    labels = helper.create_variable_for_type_inference("int32", stop_gradient=True)
    targets, inside, outside = _outputs(helper, rpn_rois.dtype, 3)
    helper.append_op("generate_proposal_labels",
                     inputs={"RpnRois": [rpn_rois], "GtClasses": [gt_classes],
                             "IsCrowd": [is_crowd], "GtBoxes": [gt_boxes],
                             "ImInfo": [im_info]},
                     outputs={"Rois": [rois], "LabelsInt32": [labels],
                              "BboxTargets": [targets], "BboxInsideWeights": [inside],
                              "BboxOutsideWeights": [outside]},
                     attrs={"batch_size_per_im": int(batch_size_per_im),
                            "fg_fraction": float(fg_fraction), "fg_thresh": float(fg_thresh),
                            "bg_thresh_hi": float(bg_thresh_hi),
                            "bg_thresh_lo": float(bg_thresh_lo),
                            "bbox_reg_weights": [float(v) for v in bbox_reg_weights],
                            "class_nums": int(class_nums or 1), "use_random": bool(use_random),
                            "is_cls_agnostic": bool(is_cls_agnostic),
                            "is_cascade_rcnn": bool(is_cascade_rcnn)})
    rois.lod_level = 1
    return rois, labels, targets, inside, outside


def retinanet_target_assign(bbox_pred: Variable, cls_logits: Variable, anchor_box: Variable,
                            anchor_var: Variable, gt_boxes: Variable, gt_labels: Variable,
                            is_crowd: Variable, im_info: Variable, num_classes: int = 1,
                            positive_overlap: float = 0.5,
                            negative_overlap: float = 0.4) -> tuple[Variable, ...]:
    """RetinaNet's training targets: every foreground and background anchor for the ground
    truth (LoD, per image). Returns ``(predicted_scores [F + B, num_classes],
    predicted_location [F, 4], target_label [F + B, 1], target_bbox [F, 4],
    bbox_inside_weight [F, 4], fg_num [N, 1])``.

    Example::

        outs = fluid.layers.retinanet_target_assign(deltas, logits, anchors, variances,
                                                    gt_box, gt_label, is_crowd, im_info, 80)
    """
    from .index import gather
    from .tensor import reshape

    _check("retinanet_target_assign", bbox_pred=bbox_pred, cls_logits=cls_logits,
           anchor_box=anchor_box, gt_boxes=gt_boxes, gt_labels=gt_labels, is_crowd=is_crowd,
           im_info=im_info)
    helper = LayerHelper("retinanet_target_assign")
    loc_index, score_index, label, fg_num = (helper.create_variable_for_type_inference(
        "int32", stop_gradient=True) for _ in range(4))
    target_bbox, inside_weight = _outputs(helper, anchor_box.dtype, 2)
    helper.append_op("retinanet_target_assign",
                     inputs={"Anchor": [anchor_box], "GtBoxes": [gt_boxes],
                             "GtLabels": [gt_labels], "IsCrowd": [is_crowd],
                             "ImInfo": [im_info]},
                     outputs={"LocationIndex": [loc_index], "ScoreIndex": [score_index],
                              "TargetLabel": [label], "TargetBBox": [target_bbox],
                              "BBoxInsideWeight": [inside_weight],
                              "ForegroundNumber": [fg_num]},
                     attrs={"positive_overlap": float(positive_overlap),
                            "negative_overlap": float(negative_overlap)})
    scores = gather(reshape(cls_logits, shape=[-1, num_classes]), score_index)
    locations = gather(reshape(bbox_pred, shape=[-1, 4]), loc_index)
    return scores, locations, label, target_bbox, inside_weight, fg_num


def roi_perspective_transform(input: Variable, rois: Variable, transformed_height: int,
                              transformed_width: int, spatial_scale: float = 1.0,
                              name: str | None = None) -> tuple[Variable, Variable, Variable]:
    """Warp each quadrilateral ROI (``rois [R, 8]`` = ``x0, y0, ..., x3, y3`` clockwise from
    the top left, LoD: per image) of ``input [N, C, H, W]`` onto a ``[transformed_height,
    transformed_width]`` grid. Returns ``(out, mask, transform_matrix)`` as Fluid 1.6:
    ``out [R, C, transformed_height, transformed_width]`` (zero outside the quadrilateral),
    the int32 ``mask [R, 1, transformed_height, transformed_width]`` of the output pixels
    that sample the input, and each ROI's homography ``transform_matrix [R, 9]``.

    Example::

        text, mask, matrix = fluid.layers.roi_perspective_transform(feat, quads, 8, 32, 1 / 4.)
    """
    _check("roi_perspective_transform", input=input, rois=rois)
    helper = LayerHelper("roi_perspective_transform", name=name)
    out = helper.create_variable_for_type_inference(input.dtype)
    mask = helper.create_variable_for_type_inference("int32", stop_gradient=True)
    matrix = helper.create_variable_for_type_inference(input.dtype, stop_gradient=True)
    out2in_idx = helper.create_variable_for_type_inference("int32", stop_gradient=True)
    out2in_w = helper.create_variable_for_type_inference(input.dtype, stop_gradient=True)
    helper.append_op("roi_perspective_transform", inputs={"X": [input], "ROIs": [rois]},
                     outputs={"Out": [out], "Out2InIdx": [out2in_idx],
                              "Out2InWeights": [out2in_w], "Mask": [mask],
                              "TransformMatrix": [matrix]},
                     attrs={"transformed_height": int(transformed_height),
                            "transformed_width": int(transformed_width),
                            "spatial_scale": float(spatial_scale)})
    return out, mask, matrix


def generate_mask_labels(im_info: Variable, gt_classes: Variable, is_crowd: Variable,
                         gt_segms: Variable, rois: Variable, labels_int32: Variable,
                         num_classes: int, resolution: int) -> tuple[Variable, Variable, Variable]:
    """Mask R-CNN's mask targets: for each foreground ROI (``labels_int32 > 0``), the
    polygons (``gt_segms``: LoD of 3 levels, image -> object -> polygon -> points) of the
    ground truth it overlaps most, rasterized in the ROI at ``resolution x resolution`` into
    its class's block. Returns ``(mask_rois, roi_has_mask_int32, mask_int32 [P, num_classes *
    resolution ** 2])``.

    Example::

        mask_rois, has_mask, mask_int32 = fluid.layers.generate_mask_labels(
            im_info, gt_classes, is_crowd, gt_segms, rois, labels_int32, 81, 14)
    """
    _check("generate_mask_labels", im_info=im_info, gt_classes=gt_classes, is_crowd=is_crowd,
           gt_segms=gt_segms, rois=rois, labels_int32=labels_int32)
    helper = LayerHelper("generate_mask_labels")
    mask_rois = helper.create_variable_for_type_inference(rois.dtype, stop_gradient=True)
    has_mask, mask_int32 = (helper.create_variable_for_type_inference("int32",
                                                                      stop_gradient=True)
                            for _ in range(2))
    helper.append_op("generate_mask_labels",
                     inputs={"ImInfo": [im_info], "GtClasses": [gt_classes],
                             "IsCrowd": [is_crowd], "GtSegms": [gt_segms], "Rois": [rois],
                             "LabelsInt32": [labels_int32]},
                     outputs={"MaskRois": [mask_rois], "RoiHasMaskInt32": [has_mask],
                              "MaskInt32": [mask_int32]},
                     attrs={"num_classes": int(num_classes), "resolution": int(resolution)})
    mask_rois.lod_level = 1
    return mask_rois, has_mask, mask_int32
