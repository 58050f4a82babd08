"""``fluid.layers.detection``: Fluid 1.6's detection layers: prior boxes and anchors, box
coding, IoU and matching, target assignment, the SSD loss and head, non-maximum suppression
(ops in ``parafluid/ops/detection_box.py``, ``detection_match.py``, ``roi.py``).

The names of Fluid's module that parafluid does not provide import and fail on use with a
``NotProvidedError`` (see ``parafluid.compat.NOT_PROVIDED`` and docs/fluid_compat.md).

Example::

    import parafluid as fluid
    img = fluid.layers.data(name="img", shape=[3, 32, 32], dtype="float32")
    feat = fluid.layers.conv2d(img, num_filters=8, filter_size=3, stride=4)
    boxes, variances = fluid.layers.prior_box(feat, img, min_sizes=[8.0])
"""

from __future__ import annotations

from typing import Any

from ..framework import Variable
from ..layer_helper import LayerHelper

__all__ = ["prior_box", "density_prior_box", "anchor_generator", "box_coder",
           "iou_similarity", "box_clip"]


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


def iou_similarity(x: Variable, y: Variable, box_normalized: bool = True,
                   name: str | None = None) -> Variable:
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


def __getattr__(name: str) -> object:
    from .fluid_paths import resolve

    return resolve("detection", name)
