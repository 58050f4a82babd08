"""RetinaNet layers of Fluid 1.6: ``sigmoid_focal_loss`` and ``retinanet_detection_output``
(ops in ``parafluid/ops/detection_loss.py`` and ``retinanet.py``; the target assignment is
``retinanet_target_assign`` in ``layers/roi.py``).

Example::

    import parafluid as fluid
    logits = fluid.layers.data(name="logits", shape=[80], dtype="float32")
    label = fluid.layers.data(name="label", shape=[1], dtype="int32")
    fg_num = fluid.layers.fill_constant(shape=[1], dtype="int32", value=4)
    loss = fluid.layers.sigmoid_focal_loss(logits, label, fg_num)
"""

from __future__ import annotations

from ..framework import Variable
from ..layer_helper import LayerHelper
from .detection import _check

__all__ = ["sigmoid_focal_loss", "retinanet_detection_output"]


def sigmoid_focal_loss(x: Variable, label: Variable, fg_num: Variable, gamma: float = 2.0,
                       alpha: float = 0.25) -> Variable:
    """RetinaNet's focal loss per element of ``x [N, C]`` (foreground logits) for
    ``label [N, 1]`` (0 background, -1 ignored, ``d + 1`` for class ``d``), normalized by
    ``fg_num [1]`` (int32).

    Example::

        loss = fluid.layers.reduce_sum(fluid.layers.sigmoid_focal_loss(logits, label, fg_num))
    """
    _check("sigmoid_focal_loss", x=x, label=label, fg_num=fg_num)
    helper = LayerHelper("sigmoid_focal_loss")
    out = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op("sigmoid_focal_loss",
                     inputs={"X": [x], "Label": [label], "FgNum": [fg_num]},
                     outputs={"Out": [out]}, attrs={"gamma": float(gamma), "alpha": float(alpha)})
    return out


def retinanet_detection_output(bboxes: list[Variable], scores: list[Variable],
                               anchors: list[Variable], im_info: Variable,
                               score_threshold: float = 0.05, nms_top_k: int = 1000,
                               keep_top_k: int = 100, nms_threshold: float = 0.3,
                               nms_eta: float = 1.0) -> Variable:
    """RetinaNet detections from per-level deltas ``bboxes [N, Mi, 4]``, sigmoid ``scores
    [N, Mi, C]`` and ``anchors [Mi, 4]``: a LoD ``[No, 6]`` of ``[label, score, x1, y1, x2,
    y2]`` rows (labels from 1), best first, boxes in the original image's pixels.

    Example::

        out = fluid.layers.retinanet_detection_output(deltas, probs, anchors, im_info)
    """
    for what, vs in (("bboxes", bboxes), ("scores", scores), ("anchors", anchors)):
        if not isinstance(vs, (list, tuple)) or not vs:
            raise TypeError(f"retinanet_detection_output: {what} must be a list of Variables "
                            f"(one per FPN level)")
        _check("retinanet_detection_output", **{f"{what}[{i}]": v for i, v in enumerate(vs)})
    _check("retinanet_detection_output", im_info=im_info)
    helper = LayerHelper("retinanet_detection_output")
    out = helper.create_variable_for_type_inference(scores[0].dtype, stop_gradient=True)
    helper.append_op("retinanet_detection_output",
                     inputs={"BBoxes": list(bboxes), "Scores": list(scores),
                             "Anchors": list(anchors), "ImInfo": [im_info]},
                     outputs={"Out": [out]},
                     attrs={"score_threshold": float(score_threshold),
                            "nms_top_k": int(nms_top_k), "keep_top_k": int(keep_top_k),
                            "nms_threshold": float(nms_threshold), "nms_eta": float(nms_eta)})
    out.lod_level = 1
    return out
