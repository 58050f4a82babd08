"""Loss and metric layers: cross_entropy, softmax_with_cross_entropy, square_error_cost,
accuracy."""

from __future__ import annotations

from ..framework import Variable
from ..layer_helper import LayerHelper

__all__ = ["cross_entropy", "softmax_with_cross_entropy", "square_error_cost", "accuracy"]


def cross_entropy(input: Variable, label: Variable, soft_label: bool = False,
                  ignore_index: int = -100) -> Variable:
    """Cross entropy of probabilities ``input [..., D]`` against ``label``.

    Hard labels are int64 ids of shape ``[..., 1]``; soft labels have ``input``'s shape.
    The result has shape ``[..., 1]``; rows labelled ``ignore_index`` give 0.

    Example::

        prob = fluid.layers.fc(input=x, size=10, act="softmax")
        loss = fluid.layers.mean(fluid.layers.cross_entropy(prob, label))
    """
    helper = LayerHelper("cross_entropy")
    out = helper.create_variable_for_type_inference(input.dtype)
    helper.append_op("cross_entropy", inputs={"X": [input], "Label": [label]},
                     outputs={"Y": [out]},
                     attrs={"soft_label": soft_label, "ignore_index": ignore_index})
    return out


def softmax_with_cross_entropy(logits: Variable, label: Variable, soft_label: bool = False,
                               ignore_index: int = -100, numeric_stable_mode: bool = True,
                               return_softmax: bool = False,
                               axis: int = -1) -> Variable | tuple[Variable, Variable]:
    """Softmax over ``axis`` then cross entropy, fused for a stable, exact gradient.

    Returns the loss (the softmax dim reduced to 1), and also the softmax when
    ``return_softmax=True``. The computation is always the numerically stable one.

    Example::

        logits = fluid.layers.fc(input=x, size=10)
        loss = fluid.layers.mean(fluid.layers.softmax_with_cross_entropy(logits, label))
    """
    helper = LayerHelper("softmax_with_cross_entropy")
    softmax = helper.create_variable_for_type_inference(logits.dtype)
    loss = helper.create_variable_for_type_inference(logits.dtype)
    helper.append_op("softmax_with_cross_entropy", inputs={"Logits": [logits], "Label": [label]},
                     outputs={"Softmax": [softmax], "Loss": [loss]},
                     attrs={"soft_label": soft_label, "ignore_index": ignore_index,
                            "numeric_stable_mode": numeric_stable_mode, "axis": axis})
    return (loss, softmax) if return_softmax else loss


def square_error_cost(input: Variable, label: Variable) -> Variable:
    """Elementwise ``(input - label) ** 2``, one ``square_error_cost`` op.

    Example::

        cost = fluid.layers.mean(fluid.layers.square_error_cost(pred, y))
    """
    helper = LayerHelper("square_error_cost")
    out = helper.create_variable_for_type_inference(input.dtype)
    helper.append_op("square_error_cost", inputs={"X": [input], "Y": [label]},
                     outputs={"Out": [out]})
    return out


def accuracy(input: Variable, label: Variable, k: int = 1, correct: Variable | None = None,
             total: Variable | None = None) -> Variable:
    """Top-``k`` accuracy of scores ``input [N, D]`` against int64 labels ``[N, 1]``.

    Unlike Fluid, which appends a ``top_k`` op first, the ``accuracy`` op here ranks the
    scores itself (its ``Indices`` input is optional), so this is one op. ``correct`` and
    ``total`` (int32 ``[1]``) receive the counts when given.

    Example::

        acc = fluid.layers.accuracy(input=prob, label=label, k=1)
    """
    if not isinstance(k, int) or k < 1:
        raise ValueError(f"accuracy: k must be a positive int, got {k!r}")
    helper = LayerHelper("accuracy")
    acc = helper.create_variable_for_type_inference("float32", stop_gradient=True)
    if correct is None:
        correct = helper.create_variable_for_type_inference("int32", stop_gradient=True)
    if total is None:
        total = helper.create_variable_for_type_inference("int32", stop_gradient=True)
    helper.append_op("accuracy", inputs={"Out": [input], "Label": [label]},
                     outputs={"Accuracy": [acc], "Correct": [correct], "Total": [total]},
                     attrs={"k": k})
    return acc


