"""YOLOv3 layers of Fluid 1.6: ``yolo_box`` and ``yolov3_loss`` (ops in
``parafluid/ops/yolo.py``).

Example::

    import parafluid as fluid
    head = fluid.layers.data(name="head", shape=[3 * (5 + 80), 13, 13], dtype="float32")
    img_size = fluid.layers.data(name="img_size", shape=[2], dtype="int32")
    boxes, scores = fluid.layers.yolo_box(head, img_size, anchors=[116, 90, 156, 198, 373, 326],
                                          class_num=80, conf_thresh=0.01, downsample_ratio=32)
"""

from __future__ import annotations

from typing import Any

from ..framework import Variable
from ..layer_helper import LayerHelper
from .detection import _check, _outputs

__all__ = ["yolo_box", "yolov3_loss"]


def _ints(layer: str, arg: str, v: Any) -> list[int]:
    if not isinstance(v, (list, tuple)):
        raise TypeError(f"{layer}: {arg} must be a list of ints, got {type(v).__name__}")
    return [int(x) for x in v]


def yolo_box(x: Variable, img_size: Variable, anchors: list[int], class_num: int,
             conf_thresh: float, downsample_ratio: int,
             name: str | None = None) -> tuple[Variable, Variable]:
    """Decode a YOLOv3 head ``x [N, A * (5 + class_num), H, W]`` into image boxes
    ``[N, A * H * W, 4]`` (clipped to ``img_size [N, 2]`` = height, width) and class scores
    ``[N, A * H * W, class_num]``; zeros where the objectness is under ``conf_thresh``.

    Example::

        boxes, scores = fluid.layers.yolo_box(head, img_size, anchors=[10, 13, 16, 30],
                                              class_num=80, conf_thresh=0.01,
                                              downsample_ratio=32)
    """
    _check("yolo_box", x=x, img_size=img_size)
    helper = LayerHelper("yolo_box", name=name)
    boxes, scores = _outputs(helper, x.dtype, 2)
    helper.append_op("yolo_box", inputs={"X": [x], "ImgSize": [img_size]},
                     outputs={"Boxes": [boxes], "Scores": [scores]},
                     attrs={"anchors": _ints("yolo_box", "anchors", anchors),
                            "class_num": int(class_num), "conf_thresh": float(conf_thresh),
                            "downsample_ratio": int(downsample_ratio)})
    return boxes, scores


def yolov3_loss(x: Variable, gt_box: Variable, gt_label: Variable, anchors: list[int],
                anchor_mask: list[int], class_num: int, ignore_thresh: float,
                downsample_ratio: int, gt_score: Variable | None = None,
                use_label_smooth: bool = True, name: str | None = None) -> Variable:
    """The YOLOv3 loss ``[N]`` of a head ``x [N, len(anchor_mask) * (5 + class_num), H, W]``
    against ``gt_box [N, B, 4]`` (normalized center x, y, width, height; zero rows are
    padding), ``gt_label [N, B]`` and optional ``gt_score [N, B]`` (mixup weights).

    Example::

        loss = fluid.layers.yolov3_loss(head, gt_box, gt_label, anchors=[10, 13, 16, 30,
            33, 23], anchor_mask=[0, 1, 2], class_num=80, ignore_thresh=0.7,
            downsample_ratio=32)
    """
    _check("yolov3_loss", x=x, gt_box=gt_box, gt_label=gt_label)
    helper = LayerHelper("yolov3_loss", name=name)
    loss = helper.create_variable_for_type_inference(x.dtype)
    obj_mask = helper.create_variable_for_type_inference(x.dtype, stop_gradient=True)
    match = helper.create_variable_for_type_inference("int32", stop_gradient=True)
    inputs = {"X": [x], "GTBox": [gt_box], "GTLabel": [gt_label]}
    if gt_score is not None:
        _check("yolov3_loss", gt_score=gt_score)
        inputs["GTScore"] = [gt_score]
    helper.append_op("yolov3_loss", inputs=inputs,
                     outputs={"Loss": [loss], "ObjectnessMask": [obj_mask],
                              "GTMatchMask": [match]},
                     attrs={"anchors": _ints("yolov3_loss", "anchors", anchors),
                            "anchor_mask": _ints("yolov3_loss", "anchor_mask", anchor_mask),
                            "class_num": int(class_num), "ignore_thresh": float(ignore_thresh),
                            "downsample_ratio": int(downsample_ratio),
                            "use_label_smooth": bool(use_label_smooth)})
    return loss
