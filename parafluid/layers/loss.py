"""Loss and metric layers over class scores: cross_entropy, softmax_with_cross_entropy,
square_error_cost, kldiv_loss, bpr_loss, sampled_softmax_with_cross_entropy, ...; accuracy,
auc and mean_iou."""

from __future__ import annotations

from typing import Any

from ..framework import Variable
from ..layer_helper import LayerHelper
from .common import check_var, check_vars

__all__ = ["cross_entropy", "softmax_with_cross_entropy", "square_error_cost", "accuracy",
           "auc", "sigmoid_cross_entropy_with_logits", "log_loss", "huber_loss", "label_smooth",
           "hsigmoid", "nce", "warpctc", "kldiv_loss", "bpr_loss", "teacher_student_sigmoid_loss",
           "sampled_softmax_with_cross_entropy", "mean_iou"]


def cross_entropy(input: Variable, label: Variable, soft_label: bool = False,
                  ignore_index: int = -100) -> Variable:
    """Cross entropy of probabilities ``input [..., D]`` against ``label``.

    Hard labels are int64 ids of shape ``[..., 1]`` (a ``cross_entropy2`` op, as Fluid 1.6
    builds it); soft labels have ``input``'s shape (a ``cross_entropy`` op).
    The result has shape ``[..., 1]``; rows labelled ``ignore_index`` give 0.

    Example::

        prob = fluid.layers.fc(input=x, size=10, act="softmax")
        loss = fluid.layers.mean(fluid.layers.cross_entropy(prob, label))
    """
    if not soft_label:
        # Fluid 1.6 builds hard-label cross entropy as a cross_entropy2 op
        helper = LayerHelper("cross_entropy2")
        out, match_x, xshape = (helper.create_variable_for_type_inference(input.dtype)
                                for _ in range(3))
        helper.append_op("cross_entropy2", inputs={"X": [input], "Label": [label]},
                         outputs={"Y": [out], "MatchX": [match_x], "XShape": [xshape]},
                         attrs={"ignore_index": ignore_index})
        return out
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
    """Elementwise ``(input - label) ** 2``: an ``elementwise_sub`` then a ``square`` op, as
    Fluid builds it. A label with a dimension of 1 broadcasts (``[N, 1]`` against
    ``[N, k]``).

    Example::

        cost = fluid.layers.mean(fluid.layers.square_error_cost(pred, y))
    """
    xs, ys = list(input.shape), list(label.shape)
    if len(xs) != len(ys) or any(a != b and b != 1 and -1 not in (a, b)
                                 for a, b in zip(xs, ys)):
        raise ValueError(f"square_error_cost: label {ys} must have the shape of the input "
                         f"{xs} (or 1 where it broadcasts)")
    helper = LayerHelper("square_error_cost")
    minus = helper.create_variable_for_type_inference(input.dtype)
    helper.append_op("elementwise_sub", inputs={"X": [input], "Y": [label]},
                     outputs={"Out": [minus]})
    out = helper.create_variable_for_type_inference(input.dtype)
    helper.append_op("square", inputs={"X": [minus]}, outputs={"Out": [out]})
    return out


def accuracy(input: Variable, label: Variable, k: int = 1, correct: Variable | None = None,
             total: Variable | None = None) -> Variable:
    """Top-``k`` accuracy of scores ``input [N, D]`` against int64 labels ``[N, 1]``.

    Unlike Fluid, which appends a ``top_k`` op first, the ``accuracy`` op here ranks the
    scores itself (its ``Indices`` input is optional), so this is one op. ``correct`` and
    ``total`` receive the counts when given (int32, or cast to the variable's own dtype, e.g.
    int64). The label may be int64 or hold class ids as floats.

    Example::

        acc = fluid.layers.accuracy(input=prob, label=label, k=1)
    """
    if not isinstance(k, int) or k < 1:
        raise ValueError(f"accuracy: k must be a positive int, got {k!r}")
    helper = LayerHelper("accuracy")
    acc = helper.create_variable_for_type_inference("float32", stop_gradient=True)
    counts = []
    for given in (correct, total):
        # The op counts in int32; a caller's variable of another dtype (Fluid programs pass
        # int64 ones) receives the count through a cast.
        own = given if given is not None and given.dtype in (None, "int32") else \
            helper.create_variable_for_type_inference("int32", stop_gradient=True)
        counts.append(own)
    helper.append_op("accuracy", inputs={"Out": [input], "Label": [label]},
                     outputs={"Accuracy": [acc], "Correct": [counts[0]], "Total": [counts[1]]},
                     attrs={"k": k})
    for given, own in zip((correct, total), counts):
        if given is not None and given is not own:
            helper.append_op("cast", inputs={"X": [own]}, outputs={"Out": [given]},
                             attrs={"in_dtype": "int32", "out_dtype": given.dtype})
    return acc




def auc(input: Variable, label: Variable, curve: str = "ROC", num_thresholds: int = 2 ** 12 - 1,
        topk: int = 1, slide_steps: int = 1) -> tuple[Variable, Variable, list[Variable]]:
    """ROC AUC of ``input [N, 2]`` (column 1: probability of the positive class) against 0/1
    ``label [N, 1]``, over all batches so far and over the last ``slide_steps`` batches.

    Returns ``(auc, batch_auc, [batch_stat_pos, batch_stat_neg, stat_pos, stat_neg])``; the
    statistics are persistable int64 bucket counts (reset them by re-running the startup
    program, or zero them in the scope).

    Example::

        prob = fluid.layers.fc(input=h, size=2, act="softmax")
        auc_var, batch_auc_var, _ = fluid.layers.auc(input=prob, label=label)
    """
    from ..initializer import Constant

    if curve != "ROC":
        raise ValueError(f"auc: only curve='ROC' is supported, got {curve!r}")
    if not isinstance(slide_steps, int) or slide_steps < 1:
        raise ValueError(f"auc: slide_steps must be an int >= 1, got {slide_steps!r}")
    helper = LayerHelper("auc")
    width = int(num_thresholds) + 1
    stats = []
    for rows in (slide_steps, slide_steps, 1, 1):
        var = helper.create_global_variable(persistable=True, dtype="int64",
                                            shape=[rows, width], stop_gradient=True)
        helper.set_variable_initializer(var, Constant(0.0))
        stats.append(var)
    batch_pos, batch_neg, stat_pos, stat_neg = stats
    outs = []
    for pos, neg, steps in ((stat_pos, stat_neg, 0), (batch_pos, batch_neg, slide_steps)):
        out = helper.create_variable_for_type_inference("float64", stop_gradient=True)
        helper.append_op("auc", inputs={"Predict": [input], "Label": [label],
                                        "StatPos": [pos], "StatNeg": [neg]},
                         outputs={"AUC": [out], "StatPosOut": [pos], "StatNegOut": [neg]},
                         attrs={"curve": curve, "num_thresholds": int(num_thresholds),
                                "slide_steps": steps})
        outs.append(out)
    return outs[0], outs[1], [batch_pos, batch_neg, stat_pos, stat_neg]


def _one(op_type: str, inputs: dict, out_slot: str, attrs: dict, dtype: str,
         name: str | None = None, extra: tuple[str, ...] = ()) -> Variable:
    helper = LayerHelper(op_type, name=name)
    out = helper.create_variable_for_type_inference(dtype)
    outputs = {out_slot: [out]}
    for slot in extra:
        outputs[slot] = [helper.create_variable_for_type_inference(dtype)]
    helper.append_op(op_type, inputs=inputs, outputs=outputs, attrs=attrs)
    return out


def sigmoid_cross_entropy_with_logits(x: Variable, label: Variable, ignore_index: int = -100,
                                      name: str | None = None,
                                      normalize: bool = False) -> Variable:
    """Elementwise binary cross entropy of logits ``x`` and probabilities ``label``, computed
    stably; elements whose label is ``ignore_index`` give 0 (``normalize``: divide by the
    number of the others).

    Example::

        loss = fluid.layers.mean(fluid.layers.sigmoid_cross_entropy_with_logits(logits, y))
    """
    return _one("sigmoid_cross_entropy_with_logits", {"X": [x], "Label": [label]}, "Out",
                {"ignore_index": int(ignore_index), "normalize": bool(normalize)}, x.dtype, name)


def log_loss(input: Variable, label: Variable, epsilon: float = 1e-4,
             name: str | None = None) -> Variable:
    """``-label*log(input+eps) - (1-label)*log(1-input+eps)`` for probabilities ``input``.

    Example::

        loss = fluid.layers.log_loss(fluid.layers.sigmoid(logit), label)
    """
    return _one("log_loss", {"Predicted": [input], "Labels": [label]}, "Loss",
                {"epsilon": float(epsilon)}, input.dtype, name)


def huber_loss(input: Variable, label: Variable, delta: float) -> Variable:
    """``0.5 r²`` where ``|r| <= delta``, else ``delta (|r| - delta/2)``, ``r = label - input``.

    Example::

        loss = fluid.layers.mean(fluid.layers.huber_loss(pred, y, delta=1.0))
    """
    return _one("huber_loss", {"X": [input], "Y": [label]}, "Out", {"delta": float(delta)},
                input.dtype, extra=("Residual",))


def label_smooth(label: Variable, prior_dist: Variable | None = None, epsilon: float = 0.1,
                 dtype: str = "float32", name: str | None = None) -> Variable:
    """``(1 - epsilon) * label + epsilon * prior`` (uniform ``1/classes`` by default) for
    one-hot ``label``.

    Example::

        soft = fluid.layers.label_smooth(fluid.layers.one_hot(y, depth=10), epsilon=0.1)
    """
    inputs = {"X": [label]}
    if prior_dist is not None:
        inputs["PriorDist"] = [prior_dist]
    return _one("label_smooth", inputs, "Out", {"epsilon": float(epsilon)}, label.dtype, name)


def hsigmoid(input: Variable, label: Variable, num_classes: int, param_attr: Any = None,
             bias_attr: Any = None, name: str | None = None, path_table: Variable | None = None,
             path_code: Variable | None = None, is_custom: bool = False,
             is_sparse: bool = False) -> Variable:
    """Hierarchical sigmoid loss: ``[N, 1]``, a sum of binary cross entropies along a path
    of a binary tree (``log2(num_classes)`` terms instead of a softmax over every class).
    By default the tree is Fluid's complete binary tree over ``num_classes`` leaves (weights
    ``[num_classes - 1, D]``); with ``is_custom`` each sample brings its own path:
    ``path_table [N, L]`` int64 node ids (-1 padded) and ``path_code [N, L]`` branch bits,
    over ``num_classes`` nodes (weights ``[num_classes, D]``). ``is_sparse`` (custom trees
    only, as Fluid) makes the weight's gradient a SelectedRows of the visited nodes.

    Example::

        cost = fluid.layers.hsigmoid(input=hidden, label=next_word, num_classes=dict_size)
    """
    if not is_custom and (num_classes is None or num_classes < 2):
        raise ValueError(f"hsigmoid: num_classes must be at least 2 with the default tree, "
                         f"got {num_classes}")
    if not is_custom and (path_table is not None or path_code is not None):
        raise ValueError("hsigmoid: path_table and path_code need is_custom=True; the "
                         "default tree takes num_classes only")
    if is_custom and (path_table is None or path_code is None or num_classes is None):
        raise ValueError("hsigmoid: a custom tree (is_custom=True) needs path_table, "
                         "path_code and num_classes (its number of nodes)")
    is_sparse = bool(is_sparse and is_custom)  # Fluid drops is_sparse on the default tree
    helper = LayerHelper("hierarchical_sigmoid", param_attr=param_attr, bias_attr=bias_attr,
                         name=name)
    dtype = input.dtype
    rows = int(num_classes) if is_custom else int(num_classes) - 1
    w = helper.create_parameter(helper.param_attr, [rows, input.shape[-1]], dtype)
    inputs: dict[str, Any] = {"X": [input], "W": [w], "Label": [label]}
    if is_custom:
        inputs["PathTable"], inputs["PathCode"] = [path_table], [path_code]
    b = helper.create_parameter(helper.bias_attr, [rows, 1], dtype, is_bias=True)
    if b is not None:
        inputs["Bias"] = [b]
    out = helper.create_variable_for_type_inference(dtype)
    pre = helper.create_variable_for_type_inference(dtype, stop_gradient=True)
    helper.append_op("hierarchical_sigmoid", inputs=inputs,
                     outputs={"Out": [out], "PreOut": [pre]},
                     attrs={"num_classes": int(num_classes), "is_sparse": is_sparse,
                            "remote_prefetch": is_sparse})
    return out


def nce(input: Variable, label: Variable, num_total_classes: int,
        sample_weight: Variable | None = None, param_attr: Any = None, bias_attr: Any = None,
        num_neg_samples: int | None = None, name: str | None = None, sampler: str = "uniform",
        custom_dist: Any = None, seed: int = 0, is_sparse: bool = False) -> Variable:
    """Noise-contrastive estimation loss ``[N, 1]``: each row's true class against
    ``num_neg_samples`` (default 10) classes drawn from ``sampler``: "uniform",
    "log_uniform" or "custom_dist" (``custom_dist``: one probability per class, sampled by
    the alias method). A non-zero ``seed`` draws the same negatives on every run;
    ``is_sparse`` makes the weight's gradient a SelectedRows of the sampled classes.

    Example::

        cost = fluid.layers.nce(input=hidden, label=next_word, num_total_classes=dict_size,
                                num_neg_samples=5)
    """
    import numpy as np

    from ..initializer import NumpyArrayInitializer
    from ..param_attr import ParamAttr

    if sampler not in ("uniform", "log_uniform", "custom_dist"):
        raise ValueError(f"nce: sampler must be 'uniform', 'log_uniform' or 'custom_dist', "
                         f"got {sampler!r}")
    helper = LayerHelper("nce", param_attr=param_attr, bias_attr=bias_attr, name=name)
    dtype = input.dtype
    w = helper.create_parameter(helper.param_attr, [num_total_classes, input.shape[-1]], dtype)
    inputs: dict[str, Any] = {"Input": [input], "Label": [label], "Weight": [w]}
    b = helper.create_parameter(helper.bias_attr, [num_total_classes, 1], dtype, is_bias=True)
    if b is not None:
        inputs["Bias"] = [b]
    if sample_weight is not None:
        inputs["SampleWeight"] = [sample_weight]
    if sampler == "custom_dist":
        probs = np.asarray(custom_dist if custom_dist is not None else [], "float64")
        if probs.shape != (num_total_classes,):
            raise ValueError(f"nce: custom_dist must give one probability for each of the "
                             f"{num_total_classes} classes, got shape {list(probs.shape)}")
        alias, alias_probs = _alias_tables(probs)
        for slot, table in (("CustomDistProbs", probs.astype("float32")),
                            ("CustomDistAlias", alias), ("CustomDistAliasProbs", alias_probs)):
            var = helper.create_parameter(
                ParamAttr(initializer=NumpyArrayInitializer(table)), list(table.shape),
                str(table.dtype))
            var.stop_gradient = True
            inputs[slot] = [var]
    cost = helper.create_variable_for_type_inference(dtype)
    logits = helper.create_variable_for_type_inference(dtype, stop_gradient=True)
    labels = helper.create_variable_for_type_inference("int64", stop_gradient=True)
    helper.append_op("nce", inputs=inputs,
                     outputs={"Cost": [cost], "SampleLogits": [logits],
                              "SampleLabels": [labels]},
                     attrs={"num_total_classes": int(num_total_classes),
                            "num_neg_samples": 10 if num_neg_samples is None
                            else int(num_neg_samples),
                            "sampler": {"uniform": 0, "log_uniform": 1,
                                        "custom_dist": 2}[sampler],
                            "seed": int(seed), "is_sparse": bool(is_sparse),
                            "remote_prefetch": bool(is_sparse)})
    return cost


def _alias_tables(probs: Any) -> tuple[Any, Any]:
    """Walker's alias tables of a distribution: (int32 alias, float32 keep probability);
    class i is kept with its probability, else replaced by ``alias[i]`` (-1: none)."""
    import numpy as np

    n = len(probs)
    scaled = [float(p) * n for p in probs]
    alias, keep = [-1] * n, [1.0] * n
    small = [i for i, v in enumerate(scaled) if v < 1.0]
    large = [i for i, v in enumerate(scaled) if v > 1.0]
    while small and large:
        s, g = small.pop(0), large.pop(0)
        keep[s], alias[s] = scaled[s], g
        scaled[g] += scaled[s] - 1.0
        if scaled[g] < 1.0:
            small.append(g)
        elif scaled[g] > 1.0:
            large.append(g)
    return np.array(alias, "int32"), np.array(keep, "float32")


def warpctc(input: Variable, label: Variable, blank: int = 0, norm_by_times: bool = False,
            input_length: Variable | None = None, label_length: Variable | None = None,
            use_cudnn: bool = False) -> Variable:
    """CTC loss of unnormalized logits against int label sequences (Fluid 1.6's warpctc):
    ``[N, 1]``, ``-log p(label | input)`` per sequence; the op applies softmax itself.

    LoD form: ``input [steps, C]`` and ``label [label steps, 1]`` (int32/int64), both with
    ``lod_level=1``. Padded form: ``input [Tmax, N, C]`` (time-major), int64
    ``input_length [N]`` and ``label_length [N]``, and ``label`` packed as in the LoD form
    (the N label sequences one after another, ``[sum(label_length), 1]``, as Fluid 1.6's
    kernel reads it). ``C`` counts the blank class, whose
    index is ``blank``; ``norm_by_times`` divides each sequence's *gradient* by its number of
    steps (the loss is unchanged, as in Fluid). ``use_cudnn`` (cuDNN's CTC in Fluid's CUDA
    build) is accepted; the kernel is the same either way.

    Example::

        logits = fluid.layers.fc(features, size=num_classes + 1)   # features: LoD steps
        cost = fluid.layers.warpctc(input=logits, label=label, blank=num_classes)
        avg_cost = fluid.layers.mean(cost)
    """
    if not isinstance(blank, int) or isinstance(blank, bool) or blank < 0:
        raise ValueError(f"warpctc: blank must be a non-negative int, got {blank!r}")
    if (input_length is None) != (label_length is None):
        raise ValueError("warpctc: give both input_length and label_length (padded input) or "
                         "neither (LoD input)")
    inputs: dict[str, Any] = {"Logits": [input], "Label": [label]}
    if input_length is not None:
        inputs["LogitsLength"] = [input_length]
        inputs["LabelLength"] = [label_length]
    return _one("warpctc", inputs, "Loss",
                {"blank": blank, "norm_by_times": bool(norm_by_times)}, input.dtype,
                extra=("WarpCTCGrad",))


def kldiv_loss(x: Variable, target: Variable, reduction: str = "mean",
               name: str | None = None) -> Variable:
    """KL divergence ``target * (log(target) - x)`` with ``x`` log-probabilities; reduction
    ``none`` (elementwise), ``batchmean``, ``mean`` or ``sum`` (shape [1])."""
    check_vars("kldiv_loss", x=x, target=target)
    return _one("kldiv_loss", {"X": [x], "Target": [target]}, "Loss",
                {"reduction": reduction}, x.dtype, name)


def bpr_loss(input: Variable, label: Variable, name: str | None = None) -> Variable:
    """Bayesian personalized ranking over scores ``[N, C]`` and int64 labels ``[N, 1]``:
    ``-mean_{j != label} log(sigmoid(s_label - s_j))`` per row, ``[N, 1]``."""
    check_vars("bpr_loss", input=input, label=label)
    return _one("bpr_loss", {"X": [input], "Label": [label]}, "Y", {}, input.dtype, name)


def teacher_student_sigmoid_loss(input: Variable, label: Variable,
                                 soft_max_up_bound: float = 15.0,
                                 soft_max_lower_bound: float = -15.0) -> Variable:
    """Click-through loss distilled from a teacher: ``label`` is -2 / -1 (no teacher score,
    no click / click) or ``q`` / ``1 + q`` (teacher score ``q``, no click / click); ``[N, 1]``.
    The gradient is zero where the logit is beyond the bounds (Fluid's kernel)."""
    check_vars("teacher_student_sigmoid_loss", input=input, label=label)
    return _one("teacher_student_sigmoid_loss", {"X": [input], "Label": [label]}, "Y",
                {"soft_max_up_bound": float(soft_max_up_bound),
                 "soft_max_lower_bound": float(soft_max_lower_bound)}, input.dtype, None)


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

    check_vars("sampled_softmax_with_cross_entropy", logits=logits, label=label)
    if num_samples < 1 or num_true < 1:
        raise ValueError(f"sampled_softmax_with_cross_entropy: num_samples and num_true must "
                         f"be positive, got {num_samples} and {num_true}")
    helper = LayerHelper("sample_logits")
    inputs = {"Logits": [logits], "Labels": [label]}
    if use_customized_samples:
        check_vars("sampled_softmax_with_cross_entropy", customized_samples=customized_samples,
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


def mean_iou(input: Variable, label: Variable,
             num_classes: int) -> tuple[Variable, Variable, Variable]:
    """Mean intersection-over-union of predicted and true class ids (segmentation metric):
    ``(mean_iou [1], wrong [num_classes], correct [num_classes])``."""
    check_var("mean_iou", "input", input)
    check_var("mean_iou", "label", label)
    helper = LayerHelper("mean_iou")
    miou = helper.create_variable_for_type_inference("float32", stop_gradient=True)
    wrong = helper.create_variable_for_type_inference("int32", stop_gradient=True)
    correct = helper.create_variable_for_type_inference("int32", stop_gradient=True)
    helper.append_op("mean_iou", inputs={"Predictions": [input], "Labels": [label]},
                     outputs={"OutMeanIou": [miou], "OutWrong": [wrong],
                              "OutCorrect": [correct]},
                     attrs={"num_classes": int(num_classes)})
    return miou, wrong, correct
