"""``fluid.layers.detection``: Fluid 1.6's detection layers: prior boxes and anchors, box
coding, IoU and matching, target assignment, the SSD loss and head, non-maximum suppression
(ops in ``parafluid/ops/detection_box.py``, ``detection_match.py``, ``detection_loss.py``,
``detection_map.py``). The ROI and R-CNN layers are in ``layers/roi.py``, the YOLOv3 ones in
``layers/yolo.py``, the RetinaNet ones in ``layers/retinanet.py``; all of them resolve at
Fluid's paths (``fluid.layers.detection.yolo_box``).

The names of Fluid's module that parafluid does not provide import and fail on use with a
``NotProvidedError`` (see ``parafluid.compat.NOT_PROVIDED`` and docs/fluid_compat.md).

Example::

    import parafluid as fluid
    img = fluid.layers.data(name="img", shape=[3, 32, 32], dtype="float32")
    feat = fluid.layers.conv2d(img, num_filters=8, filter_size=3, stride=4)
    boxes, variances = fluid.layers.prior_box(feat, img, min_sizes=[8.0])
"""

from __future__ import annotations

import math
from typing import Any

from ..framework import Variable
from ..layer_helper import LayerHelper

__all__ = ["prior_box", "density_prior_box", "anchor_generator", "box_coder",
           "iou_similarity", "box_clip", "bipartite_match", "target_assign", "multiclass_nms",
           "detection_output", "ssd_loss", "multi_box_head", "polygon_box_transform"]


def _check(layer: str, **args: Any) -> None:
    for arg, v in args.items():
        if not isinstance(v, Variable):
            raise TypeError(f"{layer}: {arg} must be a Variable, got {type(v).__name__}")


def _floats(layer: str, arg: str, v: Any) -> list[float]:
    if v is None:
        return []
    if isinstance(v, (int, float)):
        return [float(v)]
    if not isinstance(v, (list, tuple)):
        raise TypeError(f"{layer}: {arg} must be a number or a list of numbers, got "
                        f"{type(v).__name__}")
    return [float(x) for x in v]


def _outputs(helper: LayerHelper, dtype: Any, count: int) -> list[Variable]:
    return [helper.create_variable_for_type_inference(dtype, stop_gradient=True)
            for _ in range(count)]


def _steps(layer: str, steps: Any) -> tuple[float, float]:
    if not isinstance(steps, (list, tuple)) or len(steps) != 2:
        raise ValueError(f"{layer}: steps must be [step_w, step_h], got {steps!r}")
    return float(steps[0]), float(steps[1])


# ----------------------------------------------------------------------------- priors


def prior_box(input: Variable, image: Variable, min_sizes: Any, max_sizes: Any = None,
              aspect_ratios: Any = (1.0,), variance: Any = (0.1, 0.1, 0.2, 0.2),
              flip: bool = False, clip: bool = False, steps: Any = (0.0, 0.0),
              offset: float = 0.5, name: str | None = None,
              min_max_aspect_ratios_order: bool = False) -> tuple[Variable, Variable]:
    """SSD prior boxes of each cell of the feature map ``input [N, C, H, W]`` for ``image``:
    ``(boxes, variances)``, both ``[H, W, num_priors, 4]``, normalized to the image.

    Args:
        min_sizes / max_sizes: box sizes in pixels (a max size adds a ``sqrt(min * max)`` box).
        aspect_ratios: width / height ratios (1 always included; ``flip`` adds inverses).
        variance: the 4 variances of each box; clip: clip boxes to ``[0, 1]``.
        steps: ``[step_w, step_h]`` between cells (0: image size / feature size).

    Example::

        boxes, var = fluid.layers.prior_box(feat, img, min_sizes=[100.0], max_sizes=[200.0],
                                            aspect_ratios=[2.0], flip=True)
    """
    _check("prior_box", input=input, image=image)
    step_w, step_h = _steps("prior_box", steps)
    helper = LayerHelper("prior_box", name=name)
    boxes, var = _outputs(helper, input.dtype, 2)
    helper.append_op("prior_box", inputs={"Input": [input], "Image": [image]},
                     outputs={"Boxes": [boxes], "Variances": [var]},
                     attrs={"min_sizes": _floats("prior_box", "min_sizes", min_sizes),
                            "max_sizes": _floats("prior_box", "max_sizes", max_sizes),
                            "aspect_ratios": _floats("prior_box", "aspect_ratios",
                                                     aspect_ratios),
                            "variances": _floats("prior_box", "variance", variance),
                            "flip": bool(flip), "clip": bool(clip), "step_w": step_w,
                            "step_h": step_h, "offset": float(offset),
                            "min_max_aspect_ratios_order": bool(min_max_aspect_ratios_order)})
    return boxes, var


def density_prior_box(input: Variable, image: Variable, densities: Any = None,
                      fixed_sizes: Any = None, fixed_ratios: Any = None,
                      variance: Any = (0.1, 0.1, 0.2, 0.2), clip: bool = False,
                      steps: Any = (0.0, 0.0), offset: float = 0.5,
                      flatten_to_2d: bool = False,
                      name: str | None = None) -> tuple[Variable, Variable]:
    """Density prior boxes: for each fixed size, ``density x density`` shifted boxes per cell
    and ratio; ``[H, W, num_priors, 4]`` (``[H * W * num_priors, 4]`` with ``flatten_to_2d``).

    Example::

        boxes, var = fluid.layers.density_prior_box(feat, img, densities=[4, 2, 1],
            fixed_sizes=[32.0, 64.0, 128.0], fixed_ratios=[1.0], flatten_to_2d=True)
    """
    _check("density_prior_box", input=input, image=image)
    if not isinstance(densities, (list, tuple)):
        raise TypeError(f"density_prior_box: densities must be a list of ints, got "
                        f"{type(densities).__name__}")
    step_w, step_h = _steps("density_prior_box", steps)
    helper = LayerHelper("density_prior_box", name=name)
    boxes, var = _outputs(helper, input.dtype, 2)
    helper.append_op("density_prior_box", inputs={"Input": [input], "Image": [image]},
                     outputs={"Boxes": [boxes], "Variances": [var]},
                     attrs={"densities": [int(d) for d in densities],
                            "fixed_sizes": _floats("density_prior_box", "fixed_sizes",
                                                   fixed_sizes),
                            "fixed_ratios": _floats("density_prior_box", "fixed_ratios",
                                                    fixed_ratios),
                            "variances": _floats("density_prior_box", "variance", variance),
                            "clip": bool(clip), "step_w": step_w, "step_h": step_h,
                            "offset": float(offset), "flatten_to_2d": bool(flatten_to_2d)})
    return boxes, var


def anchor_generator(input: Variable, anchor_sizes: Any = None, aspect_ratios: Any = None,
                     variance: Any = (0.1, 0.1, 0.2, 0.2), stride: Any = None,
                     offset: float = 0.5, name: str | None = None) -> tuple[Variable, Variable]:
    """Faster R-CNN anchors of each cell of ``input [N, C, H, W]`` in pixels:
    ``(anchors, variances)``, both ``[H, W, len(anchor_sizes) * len(aspect_ratios), 4]``.

    Example::

        anchors, var = fluid.layers.anchor_generator(feat, anchor_sizes=[64, 128],
            aspect_ratios=[0.5, 1.0, 2.0], stride=[16.0, 16.0])
    """
    _check("anchor_generator", input=input)
    helper = LayerHelper("anchor_generator", name=name)
    anchors, var = _outputs(helper, input.dtype, 2)
    sizes = _floats("anchor_generator", "anchor_sizes",
                    [64, 128, 256, 512] if anchor_sizes is None else anchor_sizes)
    ratios = _floats("anchor_generator", "aspect_ratios",
                     [0.5, 1.0, 2.0] if aspect_ratios is None else aspect_ratios)
    helper.append_op("anchor_generator", inputs={"Input": [input]},
                     outputs={"Anchors": [anchors], "Variances": [var]},
                     attrs={"anchor_sizes": sizes, "aspect_ratios": ratios,
                            "variances": _floats("anchor_generator", "variance", variance),
                            "stride": _floats("anchor_generator", "stride",
                                              [16.0, 16.0] if stride is None else stride),
                            "offset": float(offset)})
    return anchors, var


# ----------------------------------------------------------------------------- box coding


def box_coder(prior_box: Variable, prior_box_var: Any, target_box: Variable,
              code_type: str = "encode_center_size", box_normalized: bool = True,
              name: str | None = None, axis: int = 0) -> Variable:
    """Encode ``target_box [N, 4]`` against ``prior_box [M, 4]`` into ``[N, M, 4]`` offsets, or
    decode offsets ``target_box [N, M, 4]`` into boxes (the prior of element ``(i, j)`` is row
    ``j`` with ``axis=0``, row ``i`` with ``axis=1``).

    ``prior_box_var`` is a ``[M, 4]`` Variable, a list of 4 variances, or None.

    Example::

        deltas = fluid.layers.box_coder(priors, prior_vars, gt_box)
        boxes = fluid.layers.box_coder(priors, [0.1, 0.1, 0.2, 0.2], loc,
                                       code_type="decode_center_size")
    """
    _check("box_coder", prior_box=prior_box, target_box=target_box)
    if code_type not in ("encode_center_size", "decode_center_size"):
        raise ValueError(f"box_coder: code_type must be 'encode_center_size' or "
                         f"'decode_center_size', got {code_type!r}")
    helper = LayerHelper("box_coder", name=name)
    out = helper.create_variable_for_type_inference(target_box.dtype)
    inputs = {"PriorBox": [prior_box], "TargetBox": [target_box]}
    attrs: dict[str, Any] = {"code_type": code_type, "box_normalized": bool(box_normalized),
                             "axis": int(axis)}
    if isinstance(prior_box_var, Variable):
        inputs["PriorBoxVar"] = [prior_box_var]
    elif isinstance(prior_box_var, (list, tuple)):
        attrs["variance"] = _floats("box_coder", "prior_box_var", prior_box_var)
    elif prior_box_var is not None:
        raise TypeError(f"box_coder: prior_box_var must be a Variable, a list of 4 floats or "
                        f"None, got {type(prior_box_var).__name__}")
    helper.append_op("box_coder", inputs=inputs, outputs={"OutputBox": [out]}, attrs=attrs)
    return out


def iou_similarity(x: Variable, y: Variable, name: str | None = None,
                   box_normalized: bool = True) -> Variable:
    """``[N, M]`` intersection over union of boxes ``x [N, 4]`` (may be a LoD tensor: the
    output keeps its LoD) and ``y [M, 4]``.

    Example::

        iou = fluid.layers.iou_similarity(gt_box, prior_boxes)
    """
    _check("iou_similarity", x=x, y=y)
    helper = LayerHelper("iou_similarity", name=name)
    out = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op("iou_similarity", inputs={"X": [x], "Y": [y]}, outputs={"Out": [out]},
                     attrs={"box_normalized": bool(box_normalized)})
    return out


def box_clip(input: Variable, im_info: Variable, name: str | None = None) -> Variable:
    """Clip boxes ``input [..., 4]`` (a LoD tensor: one sequence per image) to their image,
    ``im_info [N, 3]`` = (height, width, scale): x to ``[0, round(w / scale) - 1]``, y alike.

    Example::

        clipped = fluid.layers.box_clip(input=boxes, im_info=im_info)
    """
    _check("box_clip", input=input, im_info=im_info)
    helper = LayerHelper("box_clip", name=name)
    out = helper.create_variable_for_type_inference(input.dtype)
    helper.append_op("box_clip", inputs={"Input": [input], "ImInfo": [im_info]},
                     outputs={"Output": [out]})
    return out


# ----------------------------------------------------------------------------- matching


def bipartite_match(dist_matrix: Variable, match_type: str | None = None,
                    dist_threshold: float | None = None,
                    name: str | None = None) -> tuple[Variable, Variable]:
    """Greedy bipartite matching of the columns of ``dist_matrix [K, M]`` (a LoD tensor: the
    rows of each image) to its rows: ``(match_indices [N, M] int32, match_distance [N, M])``,
    -1 / 0 where a column is unmatched. ``match_type='per_prediction'`` also matches each
    left column to its best row when that distance is at least ``dist_threshold``.

    Example::

        iou = fluid.layers.iou_similarity(gt_box, prior_box)
        idx, dist = fluid.layers.bipartite_match(iou, "per_prediction", 0.5)
    """
    _check("bipartite_match", dist_matrix=dist_matrix)
    helper = LayerHelper("bipartite_match", name=name)
    idx = helper.create_variable_for_type_inference("int32", stop_gradient=True)
    dist = helper.create_variable_for_type_inference(dist_matrix.dtype, stop_gradient=True)
    helper.append_op("bipartite_match", inputs={"DistMat": [dist_matrix]},
                     outputs={"ColToRowMatchIndices": [idx], "ColToRowMatchDist": [dist]},
                     attrs={"match_type": match_type or "bipartite",
                            "dist_threshold": 0.5 if dist_threshold is None
                            else float(dist_threshold)})
    return idx, dist


def target_assign(input: Variable, matched_indices: Variable,
                  negative_indices: Variable | None = None, mismatch_value: Any = None,
                  name: str | None = None) -> tuple[Variable, Variable]:
    """Per image and column, the row of ``input [M, P, K]`` (a LoD tensor: the rows of each
    image) that ``matched_indices [N, P]`` names: ``(out [N, P, K], out_weight [N, P, 1])``;
    unmatched columns get ``mismatch_value`` and weight 0, the ``negative_indices`` (LoD)
    columns ``mismatch_value`` and weight 1.

    Example::

        labels, weights = fluid.layers.target_assign(gt_label, match_idx, mismatch_value=0)
    """
    _check("target_assign", input=input, matched_indices=matched_indices)
    helper = LayerHelper("target_assign", name=name)
    out = helper.create_variable_for_type_inference(input.dtype)
    weight = helper.create_variable_for_type_inference("float32")
    inputs = {"X": [input], "MatchIndices": [matched_indices]}
    if negative_indices is not None:
        _check("target_assign", negative_indices=negative_indices)
        inputs["NegIndices"] = [negative_indices]
    helper.append_op("target_assign", inputs=inputs,
                     outputs={"Out": [out], "OutWeight": [weight]},
                     attrs={"mismatch_value": 0 if mismatch_value is None
                            else int(mismatch_value)})
    return out, weight


# ----------------------------------------------------------------------------- SSD


def multiclass_nms(bboxes: Variable, scores: Variable, score_threshold: float,
                   nms_top_k: int, keep_top_k: int, nms_threshold: float = 0.3,
                   normalized: bool = True, nms_eta: float = 1.0, background_label: int = 0,
                   name: str | None = None) -> Variable:
    """Per-class non-maximum suppression: ``bboxes [N, M, 4]`` with ``scores [N, C, M]`` (or
    LoD ``bboxes [M, C, 4]`` with ``scores [M, C]``). Returns a LoD tensor ``[No, 6]``, one
    row ``[label, score, x1, y1, x2, y2]`` per kept box, one sequence per image (a single
    ``[[-1]]`` row when no image has a detection).

    Example::

        out = fluid.layers.multiclass_nms(boxes, scores, score_threshold=0.01,
                                          nms_top_k=400, keep_top_k=200)
    """
    _check("multiclass_nms", bboxes=bboxes, scores=scores)
    helper = LayerHelper("multiclass_nms", name=name)
    out = helper.create_variable_for_type_inference(bboxes.dtype, stop_gradient=True)
    helper.append_op("multiclass_nms", inputs={"BBoxes": [bboxes], "Scores": [scores]},
                     outputs={"Out": [out]},
                     attrs={"background_label": int(background_label),
                            "score_threshold": float(score_threshold),
                            "nms_top_k": int(nms_top_k), "nms_threshold": float(nms_threshold),
                            "nms_eta": float(nms_eta), "keep_top_k": int(keep_top_k),
                            "normalized": bool(normalized)})
    out.lod_level = 1
    return out


def detection_output(loc: Variable, scores: Variable, prior_box: Variable,
                     prior_box_var: Variable, background_label: int = 0,
                     nms_threshold: float = 0.3, nms_top_k: int = 400, keep_top_k: int = 200,
                     score_threshold: float = 0.01, nms_eta: float = 1.0,
                     return_index: bool = False) -> Variable | tuple[Variable, Variable]:
    """SSD detections: ``loc [N, M, 4]`` decoded against the priors, ``scores [N, M, C]``
    soft-maxed, then ``multiclass_nms``; a LoD tensor of ``[label, score, x1, y1, x2, y2]``.
    With ``return_index`` (``multiclass_nms2``) also the int32 ``[No, 1]`` index of each kept
    box in the batch's ``N * M`` boxes. As Fluid 1.6's layer, the NMS always takes class 0 as
    the background and ``nms_eta = 1`` (``background_label`` and ``nms_eta`` are accepted
    and not used).

    Example::

        nmsed = fluid.layers.detection_output(locs, confs, boxes, variances)
        nmsed, index = fluid.layers.detection_output(locs, confs, boxes, variances,
                                                     return_index=True)
    """
    from .ops import softmax
    from .tensor import transpose

    decoded = box_coder(prior_box, prior_box_var, loc, code_type="decode_center_size")
    probs = transpose(softmax(scores), perm=[0, 2, 1])
    probs.stop_gradient = True
    if not return_index:
        return multiclass_nms(decoded, probs, score_threshold, nms_top_k, keep_top_k,
                              nms_threshold=nms_threshold)
    helper = LayerHelper("detection_output")
    out = helper.create_variable_for_type_inference(decoded.dtype, stop_gradient=True)
    index = helper.create_variable_for_type_inference("int32", stop_gradient=True)
    helper.append_op("multiclass_nms2", inputs={"BBoxes": [decoded], "Scores": [probs]},
                     outputs={"Out": [out], "Index": [index]},
                     attrs={"background_label": 0, "score_threshold": float(score_threshold),
                            "nms_top_k": int(nms_top_k), "nms_threshold": float(nms_threshold),
                            "nms_eta": 1.0, "keep_top_k": int(keep_top_k)})
    out.lod_level = index.lod_level = 1
    return out, index


def ssd_loss(location: Variable, confidence: Variable, gt_box: Variable, gt_label: Variable,
             prior_box: Variable, prior_box_var: Variable | None = None,
             background_label: int = 0, overlap_threshold: float = 0.5,
             neg_pos_ratio: float = 3.0, neg_overlap: float = 0.5,
             loc_loss_weight: float = 1.0, conf_loss_weight: float = 1.0,
             match_type: str = "per_prediction", mining_type: str = "max_negative",
             normalize: bool = True, sample_size: int | None = None) -> Variable:
    """The SSD multi-box loss ``[N, 1]``: priors matched to the ground truth (LoD ``gt_box
    [Ng, 4]``, ``gt_label [Ng, 1]``) by IoU, hard negatives mined at ``neg_pos_ratio``,
    softmax cross entropy on the classes plus smooth L1 on the encoded boxes, divided by the
    number of matched priors when ``normalize``.

    Example::

        loss = fluid.layers.ssd_loss(locs, confs, gt_box, gt_label, boxes, variances)
        avg_loss = fluid.layers.reduce_sum(loss)
    """
    from .index import flatten
    from .loss import softmax_with_cross_entropy
    from .loss_distance import smooth_l1
    from .sequence import lod_reset
    from .tensor import cast, reduce_sum, reshape

    _check("ssd_loss", location=location, confidence=confidence, gt_box=gt_box,
           gt_label=gt_label, prior_box=prior_box)
    if mining_type != "max_negative":
        raise ValueError(f"ssd_loss: only mining_type='max_negative' is supported (as in "
                         f"Fluid 1.6), got {mining_type!r}")
    if len(confidence.shape) != 3:
        raise ValueError(f"ssd_loss: confidence must be [N, Np, C], got {confidence.shape}")
    num_prior = confidence.shape[1]
    helper = LayerHelper("ssd_loss")

    # 1. match the priors to the ground truth
    iou = iou_similarity(x=gt_box, y=prior_box)
    matched, matched_dist = bipartite_match(iou, match_type, overlap_threshold)
    # 2. the confidence loss of every prior, to mine hard negatives
    label3 = lod_reset(reshape(gt_label, shape=[-1, 1, 1]), y=gt_box)  # keep gt's LoD
    label3.stop_gradient = True
    target_label, _ = target_assign(label3, matched, mismatch_value=background_label)
    conf2 = flatten(confidence, axis=2)
    target_label = flatten(cast(target_label, "int64"), axis=2)
    target_label.stop_gradient = True
    conf_loss = reshape(softmax_with_cross_entropy(conf2, target_label), shape=[-1, num_prior])
    conf_loss.stop_gradient = True
    # 3. mine hard examples
    neg = helper.create_variable_for_type_inference("int32", stop_gradient=True)
    updated = helper.create_variable_for_type_inference(matched.dtype, stop_gradient=True)
    helper.append_op("mine_hard_examples",
                     inputs={"ClsLoss": [conf_loss], "MatchIndices": [matched],
                             "MatchDist": [matched_dist]},
                     outputs={"NegIndices": [neg], "UpdatedMatchIndices": [updated]},
                     attrs={"neg_pos_ratio": float(neg_pos_ratio),
                            "neg_dist_threshold": float(neg_overlap),
                            "mining_type": mining_type, "sample_size": int(sample_size or 0)})
    # 4. regression and classification targets
    encoded = box_coder(prior_box=prior_box, prior_box_var=prior_box_var, target_box=gt_box,
                        code_type="encode_center_size")
    target_bbox, target_loc_weight = target_assign(encoded, updated,
                                                   mismatch_value=background_label)
    target_label, target_conf_weight = target_assign(label3, updated, negative_indices=neg,
                                                     mismatch_value=background_label)
    # 5. the weighted losses
    target_label = flatten(cast(target_label, "int64"), axis=2)
    target_conf_weight = flatten(target_conf_weight, axis=2)
    for v in (target_label, target_conf_weight):
        v.stop_gradient = True
    conf_loss = softmax_with_cross_entropy(conf2, target_label) * target_conf_weight
    target_bbox = flatten(target_bbox, axis=2)
    target_loc_weight = flatten(target_loc_weight, axis=2)
    for v in (target_bbox, target_loc_weight):
        v.stop_gradient = True
    loc_loss = smooth_l1(flatten(location, axis=2), target_bbox) * target_loc_weight
    loss = conf_loss * conf_loss_weight + loc_loss * loc_loss_weight
    loss = reduce_sum(reshape(loss, shape=[-1, num_prior]), dim=1, keep_dim=True)
    if normalize:
        loss = loss / reduce_sum(target_loc_weight)
    return loss


def multi_box_head(inputs: list[Variable], image: Variable, base_size: int, num_classes: int,
                   aspect_ratios: Any, min_ratio: int | None = None,
                   max_ratio: int | None = None, min_sizes: Any = None, max_sizes: Any = None,
                   steps: Any = None, step_w: Any = None, step_h: Any = None,
                   offset: float = 0.5, variance: Any = (0.1, 0.1, 0.2, 0.2),
                   flip: bool = True, clip: bool = False, kernel_size: int = 1, pad: int = 0,
                   stride: int = 1, name: str | None = None,
                   min_max_aspect_ratios_order: bool = False) -> tuple[Variable, ...]:
    """The SSD head over several feature maps: per map, prior boxes and two convolutions
    (box offsets, class scores). Returns ``(locs [N, Np, 4], confs [N, Np, num_classes],
    boxes [Np, 4], variances [Np, 4])`` with the maps' priors concatenated.

    Without ``min_sizes``/``max_sizes``, sizes are spread between ``min_ratio`` and
    ``max_ratio`` percent of ``base_size`` (plus 10% / 20% for the first map), as Fluid.

    Example::

        locs, confs, box, var = fluid.layers.multi_box_head(
            inputs=[conv4, conv5], image=img, base_size=300, num_classes=21,
            min_sizes=[60.0, 110.0], max_sizes=[110.0, 160.0], aspect_ratios=[[2.], [2., 3.]])
    """
    from .index import flatten
    from .nn import conv2d
    from .tensor import concat, reshape, transpose

    if not isinstance(inputs, (list, tuple)) or not inputs:
        raise ValueError("multi_box_head: inputs must be a non-empty list of feature maps")
    num_layer = len(inputs)

    def per_layer(arg: str, v: Any) -> list[Any]:
        if not isinstance(v, (list, tuple)) or len(v) != num_layer:
            raise ValueError(f"multi_box_head: {arg} must be a list with one entry per input "
                             f"({num_layer}), got {v!r}")
        return list(v)

    if num_layer <= 2 and (min_sizes is None or max_sizes is None):
        raise ValueError("multi_box_head: with at most 2 inputs give min_sizes and max_sizes")
    if min_sizes is None and max_sizes is None:
        if min_ratio is None or max_ratio is None:
            raise ValueError("multi_box_head: give min_sizes/max_sizes or min_ratio/max_ratio")
        step = int(math.floor((max_ratio - min_ratio) / (num_layer - 2)))
        min_sizes = [base_size * .10] + [base_size * r / 100.
                                          for r in range(min_ratio, max_ratio + 1, step)]
        max_sizes = [base_size * .20] + [base_size * (r + step) / 100.
                                          for r in range(min_ratio, max_ratio + 1, step)]
    min_sizes = per_layer("min_sizes", min_sizes)
    max_sizes = per_layer("max_sizes", max_sizes)
    if aspect_ratios is not None:
        aspect_ratios = per_layer("aspect_ratios", aspect_ratios)
    if steps:
        step_w = step_h = per_layer("steps", steps)
    step_w = per_layer("step_w", step_w) if step_w else None
    step_h = per_layer("step_h", step_h) if step_h else None

    locs, confs, boxes, variances = [], [], [], []
    for i, feat in enumerate(inputs):
        ratio = [] if aspect_ratios is None else aspect_ratios[i]
        box, var = prior_box(feat, image, min_sizes[i], max_sizes[i],
                             ratio if isinstance(ratio, (list, tuple)) else [ratio], variance,
                             flip, clip, [step_w[i] if step_w else 0.0,
                                          step_h[i] if step_h else 0.0],
                             offset, None, min_max_aspect_ratios_order)
        boxes.append(box)
        variances.append(var)
        num_boxes = box.shape[2]
        for count, acc in ((4, locs), (num_classes, confs)):
            out = conv2d(input=feat, num_filters=num_boxes * count, filter_size=kernel_size,
                         padding=pad, stride=stride)
            acc.append(flatten(transpose(out, perm=[0, 2, 3, 1]), axis=1))
    if num_layer == 1:
        box, var, loc, conf = boxes[0], variances[0], locs[0], confs[0]
    else:
        box = concat([flatten(b, axis=3) for b in boxes])
        var = concat([flatten(v, axis=3) for v in variances])
        loc = concat(locs, axis=1)
        conf = concat(confs, axis=1)
    loc = reshape(loc, shape=[0, -1, 4])
    conf = reshape(conf, shape=[0, -1, num_classes])
    box.stop_gradient = True
    var.stop_gradient = True
    return loc, conf, box, var


# ----------------------------------------------------------------------------- others


def polygon_box_transform(input: Variable, name: str | None = None) -> Variable:
    """EAST-style geometry to coordinates: each even channel of ``input [N, 2K, H, W]``
    becomes ``4 * w - value``, each odd one ``4 * h - value``.

    Example::

        quads = fluid.layers.polygon_box_transform(geo_map)
    """
    _check("polygon_box_transform", input=input)
    helper = LayerHelper("polygon_box_transform", name=name)
    out = helper.create_variable_for_type_inference(input.dtype)
    helper.append_op("polygon_box_transform", inputs={"Input": [input]},
                     outputs={"Output": [out]})
    return out


def detection_map(detect_res: Variable, label: Variable, class_num: int,
                  background_label: int = 0, overlap_threshold: float = 0.3,
                  evaluate_difficult: bool = True, has_state: Variable | None = None,
                  input_states: list[Variable] | None = None,
                  out_states: list[Variable] | None = None,
                  ap_version: str = "integral") -> Variable:
    """Mean average precision ``[1]`` of ``detect_res`` (``multiclass_nms``'s LoD rows)
    against ``label`` (LoD ``[label, difficult, x1, y1, x2, y2]`` rows); with ``has_state``,
    ``input_states`` / ``out_states`` (positive counts, true and false positives) it
    accumulates over batches, as ``fluid.metrics.DetectionMAP`` uses it. As in Fluid, the
    op keeps its default background label.

    Example::

        batch_map = fluid.layers.detection.detection_map(nmsed, label, class_num=21)
    """
    _check("detection_map", detect_res=detect_res, label=label)
    helper = LayerHelper("detection_map")
    map_out = helper.create_variable_for_type_inference("float32", stop_gradient=True)
    pos, tp, fp = out_states or [helper.create_variable_for_type_inference(t, stop_gradient=True)
                                 for t in ("int32", "float32", "float32")]
    inputs: dict[str, Any] = {"DetectRes": [detect_res], "Label": [label]}
    if has_state is not None:
        inputs["HasState"] = [has_state]
    if input_states:
        inputs.update(PosCount=[input_states[0]], TruePos=[input_states[1]],
                      FalsePos=[input_states[2]])
    helper.append_op("detection_map", inputs=inputs,
                     outputs={"MAP": [map_out], "AccumPosCount": [pos], "AccumTruePos": [tp],
                              "AccumFalsePos": [fp]},
                     attrs={"overlap_threshold": float(overlap_threshold),
                            "evaluate_difficult": bool(evaluate_difficult),
                            "ap_type": ap_version, "class_num": int(class_num)})
    return map_out


def __getattr__(name: str) -> object:
    from .fluid_paths import resolve

    return resolve("detection", name)
