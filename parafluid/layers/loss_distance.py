"""Losses of distances between values: ``smooth_l1``, ``margin_rank_loss``, ``rank_loss``,
``center_loss`` (ops in ``parafluid/ops/loss_distance.py``) and the losses Fluid composes of
other layers over distances and similarities, ``dice_loss`` and ``npair_loss``."""

from __future__ import annotations

from typing import Any

from ..framework import Variable
from ..layer_helper import LayerHelper

__all__ = ["smooth_l1", "margin_rank_loss", "rank_loss", "dice_loss", "npair_loss",
           "center_loss", "mse_loss"]


def _check_vars(layer: str, **args: Any) -> None:
    for arg, v in args.items():
        if not isinstance(v, Variable):
            raise TypeError(f"{layer}: {arg} must be a Variable, got {type(v).__name__}")


def smooth_l1(x: Variable, y: Variable, inside_weight: Variable | None = None,
              outside_weight: Variable | None = None, sigma: float | None = None) -> Variable:
    """Smooth L1 (Huber-like) loss per row, ``[N, 1]``: quadratic where
    ``|iw * (x - y)| < 1 / sigma^2``, linear beyond; weighted by ``outside_weight``.

    Example::

        loss = fluid.layers.reduce_mean(fluid.layers.smooth_l1(pred_box, gt_box, sigma=3.0))
    """
    _check_vars("smooth_l1", x=x, y=y)
    helper = LayerHelper("smooth_l1_loss")
    inputs: dict[str, Any] = {"X": [x], "Y": [y]}
    if inside_weight is not None:
        inputs["InsideWeight"] = [inside_weight]
    if outside_weight is not None:
        inputs["OutsideWeight"] = [outside_weight]
    diff = helper.create_variable_for_type_inference(x.dtype)
    loss = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op("smooth_l1_loss", inputs=inputs, outputs={"Diff": [diff], "Out": [loss]},
                     attrs={"sigma": 1.0 if sigma is None else float(sigma)})
    return loss


def _one(op_type: str, inputs: dict[str, Any], out_slot: str, attrs: dict[str, Any],
         dtype: Any, name: str | None) -> Variable:
    helper = LayerHelper(op_type, name=name)
    out = helper.create_variable_for_type_inference(dtype)
    helper.append_op(op_type, inputs=inputs, outputs={out_slot: [out]}, attrs=attrs)
    return out


def margin_rank_loss(label: Variable, left: Variable, right: Variable, margin: float = 0.1,
                     name: str | None = None) -> Variable:
    """``max(0, -label * (left - right) + margin)``, label +1 when ``left`` should rank
    higher, -1 otherwise.

    Example::

        loss = fluid.layers.margin_rank_loss(label, pos_score, neg_score, margin=0.2)
    """
    _check_vars("margin_rank_loss", label=label, left=left, right=right)
    helper = LayerHelper("margin_rank_loss", name=name)
    out = helper.create_variable_for_type_inference(left.dtype)
    act = helper.create_variable_for_type_inference(left.dtype, stop_gradient=True)
    helper.append_op("margin_rank_loss", inputs={"Label": [label], "X1": [left], "X2": [right]},
                     outputs={"Out": [out], "Activated": [act]},
                     attrs={"margin": float(margin)})
    return out


def rank_loss(label: Variable, left: Variable, right: Variable,
              name: str | None = None) -> Variable:
    """RankNet's pairwise loss ``log(1 + exp(left - right)) - label * (left - right)``."""
    _check_vars("rank_loss", label=label, left=left, right=right)
    return _one("rank_loss", {"Label": [label], "Left": [left], "Right": [right]}, "Out", {},
                left.dtype, name)


def dice_loss(input: Variable, label: Variable, epsilon: float = 0.00001,
              name: str | None = None) -> Variable:
    """Dice loss for segmentation: ``1 - 2 |P * Y| / (|P| + |Y| + epsilon)`` per sample
    (``input`` holds probabilities ``[N, ..., K]``, ``label`` int64 ``[N, ..., 1]``), averaged.

    Example::

        loss = fluid.layers.dice_loss(fluid.layers.softmax(logits), label)
    """
    from .nn import elementwise_add, elementwise_div, elementwise_mul, scale
    from .tensor import one_hot, reduce_mean, reduce_sum

    _check_vars("dice_loss", input=input, label=label)
    depth = (input.shape or (0,))[-1]
    if depth <= 0:
        raise ValueError(f"dice_loss: the last dim of {input.name!r} (the classes) must be "
                         f"known, got shape {list(input.shape or [])}")
    onehot = one_hot(label, depth=depth)
    dims = list(range(1, len(input.shape)))
    inse = reduce_sum(elementwise_mul(input, onehot), dim=dims)
    denom = elementwise_add(reduce_sum(input, dim=dims), reduce_sum(onehot, dim=dims))
    ratio = elementwise_div(scale(inse, scale=2.0), scale(denom, bias=float(epsilon)))
    return reduce_mean(scale(ratio, scale=-1.0, bias=1.0))


def npair_loss(anchor: Variable, positive: Variable, labels: Variable,
               l2_reg: float = 0.002) -> Variable:
    """N-pair loss (Sohn 2016) as Fluid composes it: a soft-label softmax cross entropy over
    ``anchor @ positive^T`` (targets: pairs with equal labels, rows normalized) plus
    ``l2_reg * 0.25`` times the mean squared norms of both embeddings. The batch size (dim 0
    of ``labels``) must be known when the layer is built, as in Fluid."""
    from .index import equal
    from .loss import softmax_with_cross_entropy
    from .nn import elementwise_add as add
    from .nn import elementwise_div, elementwise_mul, matmul, scale
    from .ops import square
    from .tensor import cast, expand, reduce_mean, reduce_sum, reshape, transpose

    _check_vars("npair_loss", anchor=anchor, positive=positive, labels=labels)
    batch = (labels.shape or (-1,))[0]
    if batch <= 0:
        raise ValueError(f"npair_loss: the batch size (dim 0 of labels {labels.name!r}, shape "
                         f"{list(labels.shape or [])}) must be known; declare the data with "
                         "append_batch_size=False")
    col = expand(reshape(labels, shape=[batch, 1]), expand_times=[1, batch])
    same = cast(equal(col, transpose(col, perm=[1, 0])), "float32")
    targets = elementwise_div(same, reduce_sum(same, dim=1, keep_dim=True))
    l2 = add(reduce_mean(reduce_sum(square(anchor), dim=1)),
             reduce_mean(reduce_sum(square(positive), dim=1)))
    l2 = scale(l2, scale=0.25 * float(l2_reg))
    sim = matmul(anchor, positive, transpose_y=True)
    ce = softmax_with_cross_entropy(logits=sim, label=targets, soft_label=True)
    ce = reduce_mean(reduce_sum(elementwise_mul(targets, ce), dim=0))
    return add(l2, ce)


def center_loss(input: Variable, label: Variable, num_classes: int, alpha: Any,
                param_attr: Any, update_center: bool = True) -> Variable:
    """Center loss (face recognition): ``0.5 * |x - c_label|^2`` per row ``[N, 1]``; the
    ``[num_classes, D]`` centers (a non-trainable parameter) move toward their samples at
    rate ``alpha`` (a float or a Variable) on every training step when ``update_center``.

    Example::

        loss = fluid.layers.center_loss(feat, label, num_classes=10, alpha=0.1,
                                        param_attr=fluid.initializer.Xavier(uniform=False))
    """
    import copy

    from ..initializer import Constant
    from ..param_attr import ParamAttr

    _check_vars("center_loss", input=input, label=label)
    if len(input.shape or ()) != 2 or input.shape[1] <= 0:
        raise ValueError(f"center_loss: input must be [N, D] with a known D, got "
                         f"{list(input.shape or [])}")
    helper = LayerHelper("center_loss")
    attr = ParamAttr._to_attr(param_attr)
    if attr is False:
        raise ValueError("center_loss: param_attr=False leaves no centers; pass a ParamAttr or "
                         "an initializer")
    attr = copy.copy(attr)
    attr.trainable = False  # the op moves the centers itself; optimizers leave them alone
    centers = helper.create_parameter(attr, [int(num_classes), input.shape[1]], input.dtype)
    centers.stop_gradient = True
    if isinstance(alpha, Variable):
        rate = alpha
    else:
        rate = helper.create_global_variable(persistable=True, shape=[1], dtype="float32")
        rate.stop_gradient = True
        helper.set_variable_initializer(rate, Constant(float(alpha)))
    diff = helper.create_variable_for_type_inference(input.dtype, stop_gradient=True)
    loss = helper.create_variable_for_type_inference(input.dtype)
    helper.append_op("center_loss",
                     inputs={"X": [input], "Label": [label], "Centers": [centers],
                             "CenterUpdateRate": [rate]},
                     outputs={"SampleCenterDiff": [diff], "Loss": [loss],
                              "CentersOut": [centers]},
                     attrs={"cluster_num": int(num_classes), "need_update": bool(update_center)})
    return loss


def mse_loss(input: Variable, label: Variable) -> Variable:
    """Mean squared error: ``reduce_mean(square_error_cost(input, label))``, shape ``[1]``.

    Example::

        loss = fluid.layers.mse_loss(input=pred, label=y)
    """
    from .loss import square_error_cost
    from .tensor import reduce_mean

    _check_vars("mse_loss", input=input, label=label)
    return reduce_mean(square_error_cost(input, label))
