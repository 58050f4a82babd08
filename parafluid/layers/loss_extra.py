"""Loss layers of Fluid 1.6: smooth_l1, kldiv_loss, margin_rank_loss, rank_loss, bpr_loss
(one op each) and dice_loss, npair_loss, sampled_softmax_with_cross_entropy (composed of
other layers and ops, as Fluid composes them)."""

from __future__ import annotations

from typing import Any

from ..framework import Variable
from ..layer_helper import LayerHelper

__all__ = ["smooth_l1", "kldiv_loss", "margin_rank_loss", "rank_loss", "bpr_loss",
           "dice_loss", "npair_loss", "teacher_student_sigmoid_loss", "center_loss",
           "continuous_value_model", "sampled_softmax_with_cross_entropy", "mse_loss"]


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


def kldiv_loss(x: Variable, target: Variable, reduction: str = "mean",
               name: str | None = None) -> Variable:
    """KL divergence ``target * (log(target) - x)`` with ``x`` log-probabilities; reduction
    ``none`` (elementwise), ``batchmean``, ``mean`` or ``sum`` (shape [1])."""
    _check_vars("kldiv_loss", x=x, target=target)
    return _one("kldiv_loss", {"X": [x], "Target": [target]}, "Loss",
                {"reduction": reduction}, x.dtype, name)


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


def bpr_loss(input: Variable, label: Variable, name: str | None = None) -> Variable:
    """Bayesian personalized ranking over scores ``[N, C]`` and int64 labels ``[N, 1]``:
    ``-mean_{j != label} log(sigmoid(s_label - s_j))`` per row, ``[N, 1]``."""
    _check_vars("bpr_loss", input=input, label=label)
    return _one("bpr_loss", {"X": [input], "Label": [label]}, "Y", {}, input.dtype, name)


def teacher_student_sigmoid_loss(input: Variable, label: Variable,
                                 soft_max_up_bound: float = 15.0,
                                 soft_max_lower_bound: float = -15.0) -> Variable:
    """Click-through loss distilled from a teacher: ``label`` is -2 / -1 (no teacher score,
    no click / click) or ``q`` / ``1 + q`` (teacher score ``q``, no click / click); ``[N, 1]``.
    The gradient is zero where the logit is beyond the bounds (Fluid's kernel)."""
    _check_vars("teacher_student_sigmoid_loss", input=input, label=label)
    return _one("teacher_student_sigmoid_loss", {"X": [input], "Label": [label]}, "Y",
                {"soft_max_up_bound": float(soft_max_up_bound),
                 "soft_max_lower_bound": float(soft_max_lower_bound)}, input.dtype, None)


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


def continuous_value_model(input: Variable, cvm: Variable, use_cvm: bool = True) -> Variable:
    """CTR models' show/click features: the first two columns of ``input`` (show, click)
    become ``log(show + 1)`` and ``log(click + 1) - log(show + 1)`` (``use_cvm``) or are
    dropped. As in Fluid, the gradient of those two columns is ``cvm`` itself."""
    _check_vars("continuous_value_model", input=input, cvm=cvm)
    return _one("cvm", {"X": [input], "CVM": [cvm]}, "Y", {"use_cvm": bool(use_cvm)},
                input.dtype, None)


def sampled_softmax_with_cross_entropy(logits: Variable, label: Variable, num_samples: int,
                                       num_true: int = 1,
                                       remove_accidental_hits: bool = True,
                                       use_customized_samples: bool = False,
                                       customized_samples: Variable | None = None,
                                       customized_probabilities: Variable | None = None,
                                       seed: int = 0) -> Variable:
    """Softmax cross entropy over the true classes and ``num_samples`` sampled ones, ``[N, 1]``.

    A ``sample_logits`` op takes each row's ``num_true`` labels (``label``: int64
    ``[N, num_true]``) and ``num_samples`` distinct classes drawn for the batch from the
    log-uniform distribution (or ``customized_samples`` with their
    ``customized_probabilities``, both ``[N, num_true + num_samples]``), with logits
    corrected by ``-log(probability)`` and accidental hits (a sampled class that is a true
    label) pushed to ``-1e20``; then ``softmax_with_cross_entropy`` with a soft label of 1
    at each true class, divided by ``num_true``. A nonzero ``seed`` draws the same samples
    on every run. The gradient reaches ``logits`` at the sampled columns only.

    Example::

        logits = fluid.layers.fc(input=x, size=1000)
        label = fluid.layers.data(name="label", shape=[1], dtype="int64")
        loss = fluid.layers.sampled_softmax_with_cross_entropy(logits, label, num_samples=25)
    """
    from .tensor import reduce_sum, reshape

    _check_vars("sampled_softmax_with_cross_entropy", logits=logits, label=label)
    if num_samples < 1 or num_true < 1:
        raise ValueError(f"sampled_softmax_with_cross_entropy: num_samples and num_true must "
                         f"be positive, got {num_samples} and {num_true}")
    helper = LayerHelper("sample_logits")
    inputs = {"Logits": [logits], "Labels": [label]}
    if use_customized_samples:
        _check_vars("sampled_softmax_with_cross_entropy", customized_samples=customized_samples,
                    customized_probabilities=customized_probabilities)
        inputs["CustomizedSamples"] = [customized_samples]
        inputs["CustomizedProbabilities"] = [customized_probabilities]
    samples = helper.create_variable_for_type_inference("int64", stop_gradient=True)
    probabilities = helper.create_variable_for_type_inference(logits.dtype, stop_gradient=True)
    sampled_logits = helper.create_variable_for_type_inference(logits.dtype)
    sampled_label = helper.create_variable_for_type_inference("int64", stop_gradient=True)
    helper.append_op("sample_logits", inputs=inputs,
                     outputs={"Samples": [samples], "Probabilities": [probabilities],
                              "SampledLogits": [sampled_logits],
                              "SampledLabels": [sampled_label]},
                     attrs={"use_customized_samples": bool(use_customized_samples),
                            "uniq": True, "remove_accidental_hits": bool(remove_accidental_hits),
                            "num_samples": int(num_samples), "seed": int(seed)})
    depth = num_true + num_samples
    if num_true == 1:
        soft_label = helper.create_variable_for_type_inference(logits.dtype,
                                                               stop_gradient=True)
        helper.append_op("one_hot", inputs={"X": [sampled_label]}, outputs={"Out": [soft_label]},
                         attrs={"depth": depth, "dtype": logits.dtype})
    else:  # one 1 per true column: the sum of each label's one-hot row
        flat = reshape(sampled_label, [-1, num_true, 1])
        hot = helper.create_variable_for_type_inference(logits.dtype, stop_gradient=True)
        helper.append_op("one_hot", inputs={"X": [flat]}, outputs={"Out": [hot]},
                         attrs={"depth": depth, "dtype": logits.dtype})
        soft_label = reduce_sum(hot, dim=1)
        soft_label.stop_gradient = True
    softmax = helper.create_variable_for_type_inference(logits.dtype)
    loss = helper.create_variable_for_type_inference(logits.dtype)
    helper.append_op("softmax_with_cross_entropy",
                     inputs={"Logits": [sampled_logits], "Label": [soft_label]},
                     outputs={"Softmax": [softmax], "Loss": [loss]},
                     attrs={"soft_label": True, "ignore_index": -100,
                            "numeric_stable_mode": False, "axis": -1})
    if num_true == 1:
        return loss
    out = helper.create_variable_for_type_inference(logits.dtype)
    helper.append_op("scale", inputs={"X": [loss]}, outputs={"Out": [out]},
                     attrs={"scale": 1.0 / num_true, "bias": 0.0})
    return out


def mse_loss(input: Variable, label: Variable) -> Variable:
    """Mean squared error: ``reduce_mean(square_error_cost(input, label))``, shape ``[1]``.

    Example::

        loss = fluid.layers.mse_loss(input=pred, label=y)
    """
    from .loss import square_error_cost
    from .tensor import reduce_mean

    for slot, v in (("input", input), ("label", label)):
        if not isinstance(v, Variable):
            raise TypeError(f"mse_loss: {slot} must be a Variable, got {type(v).__name__}")
    return reduce_mean(square_error_cost(input, label))
