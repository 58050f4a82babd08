"""``fluid.contrib`` layers: ``fused_elemwise_activation`` and ``ctr_metric_bundle``."""

from __future__ import annotations

from typing import Any

from ..framework import Variable
from ..initializer import Constant
from ..layer_helper import LayerHelper

__all__ = ["fused_elemwise_activation", "ctr_metric_bundle", "sequence_topk_avg_pooling"]


def fused_elemwise_activation(x: Variable, y: Variable, functor_list: list[str] | str,
                              axis: int = -1, scale: float = 0.0,
                              save_intermediate_out: bool = True) -> Variable:
    """A binary and a unary functor in one op (and one gradient op).

    ``functor_list`` is ``[unary, binary]`` (``Out = unary(binary(x, y))``) or
    ``[binary, unary]`` (``Out = binary(x, unary(y))``), with binary in ``elementwise_add``,
    ``elementwise_mul`` and unary in ``relu``, ``sigmoid``, ``tanh``, ``scale`` (times
    ``scale``); a string ``"relu,elementwise_add"`` is split at the comma. ``y`` broadcasts
    along ``axis`` as in the elementwise layers.

    Example::

        out = fluid.contrib.fused_elemwise_activation(
            x, bias, functor_list=["relu", "elementwise_add"], axis=1)
    """
    if isinstance(functor_list, str):
        functor_list = functor_list.split(",")
    if not isinstance(functor_list, (list, tuple)) or len(functor_list) != 2:
        raise ValueError(f"fused_elemwise_activation: functor_list must be a list of two "
                         f"functor names, got {functor_list!r}")
    helper = LayerHelper("fused_elemwise_activation")
    out = helper.create_variable_for_type_inference(dtype=x.dtype)
    intermediate = helper.create_variable_for_type_inference(dtype=x.dtype)
    helper.append_op("fused_elemwise_activation", inputs={"X": [x], "Y": [y]},
                     outputs={"Out": [out], "IntermediateOut": [intermediate]},
                     attrs={"axis": axis, "scale": float(scale),
                            "save_intermediate_out": bool(save_intermediate_out),
                            "functor_list": [str(f).strip() for f in functor_list]})
    return out


def ctr_metric_bundle(input: Variable, label: Variable) -> tuple[Variable, ...]:
    """Running sums for CTR metrics over all batches run so far.

    ``input`` holds predicted click probabilities and ``label`` the 0/1 clicks (same shape;
    an int label is cast to float32). Returns persistable ``[1]`` float32 accumulators
    ``(local_sqrerr, local_abserr, local_prob, local_q, local_pos_num, local_ins_num)``:
    sums of squared and absolute error, of ``input``, of ``sigmoid(input)`` (the q value),
    of ``label`` and the instance count. Divide by ``local_ins_num`` for MSE, MAE, predicted
    CTR and q; re-run the startup program to reset them.

    Example::

        predict = fluid.layers.sigmoid(fluid.layers.fc(input=data, size=1))
        sqrerr, abserr, prob, q, pos, ins = fluid.contrib.ctr_metric_bundle(predict, label)
    """
    if tuple(input.shape) != tuple(label.shape):
        raise ValueError(f"ctr_metric_bundle: input {input.name} has shape "
                         f"{list(input.shape)} but label {label.name} has shape "
                         f"{list(label.shape)}; they must match")
    helper = LayerHelper("ctr_metric_bundle")

    def global_var(persistable: bool, shape: list[int]) -> Variable:
        var = helper.create_global_variable(persistable=persistable, dtype="float32",
                                            shape=shape, stop_gradient=True)
        if persistable:
            helper.set_variable_initializer(var, Constant(0.0, force_cpu=True))
        return var

    sqrerr, abserr, prob, q, pos_num, ins_num = (global_var(True, [1]) for _ in range(6))
    if label.dtype != "float32":
        # Fluid documents (and its example feeds) an int label: the sums are float32
        float_label = global_var(False, list(label.shape))
        helper.append_op("cast", inputs={"X": [label]}, outputs={"Out": [float_label]},
                         attrs={"in_dtype": label.dtype, "out_dtype": "float32"})
        label = float_label
    diff, sig, ones = (global_var(False, [-1, 1]) for _ in range(3))

    def accumulate(op_type: str, x: Variable, total: Variable, attrs: dict | None = None
                   ) -> None:
        batch = global_var(False, [1])
        helper.append_op(op_type, inputs={"X": [x]}, outputs={"Out": [batch]},
                         attrs=attrs or {})
        helper.append_op("elementwise_add", inputs={"X": [batch], "Y": [total]},
                         outputs={"Out": [total]})

    whole = {"dim": [0], "keep_dim": False, "reduce_all": True}
    helper.append_op("elementwise_sub", inputs={"X": [input], "Y": [label]},
                     outputs={"Out": [diff]})
    accumulate("squared_l2_norm", diff, sqrerr)
    accumulate("l1_norm", diff, abserr)
    accumulate("reduce_sum", input, prob, whole)
    helper.append_op("sigmoid", inputs={"X": [input]}, outputs={"Out": [sig]})
    accumulate("reduce_sum", sig, q, whole)
    accumulate("reduce_sum", label, pos_num, whole)
    helper.append_op("fill_constant_batch_size_like", inputs={"Input": [label]},
                     outputs={"Out": [ones]},
                     attrs={"shape": [-1, 1], "dtype": "float32", "value": 1.0})
    accumulate("reduce_sum", ones, ins_num, whole)
    return sqrerr, abserr, prob, q, pos_num, ins_num


# Fluid's contrib.layers also holds the recurrent units (its contrib/layers/rnn_impl.py):
# ``from paddle.fluid.contrib.layers import basic_lstm`` as in Fluid's docstrings
from .rnn_impl import BasicGRUUnit, BasicLSTMUnit, basic_gru, basic_lstm  # noqa: E402

__all__ += ["BasicGRUUnit", "BasicLSTMUnit", "basic_gru", "basic_lstm"]


def sequence_topk_avg_pooling(input: Variable, row: Variable, col: Variable, topks: list[int],
                              channel_num: int) -> Variable:
    """Top-k average pooling of match matrices (``match_matrix_tensor``'s output): for each
    row of each channel, the mean of its ``k`` largest scores for each ``k`` of the
    ascending ``topks``; ``[total rows, channel_num * len(topks)]`` with ``row``'s LoD
    (``row`` / ``col``: LoD tensors whose sequence lengths are each example's rows and
    columns).

    Example::

        out = fluid.contrib.sequence_topk_avg_pooling(mm, row, col, topks=[1, 3, 5],
                                                      channel_num=5)
    """
    helper = LayerHelper("sequence_topk_avg_pooling")
    out = helper.create_variable_for_type_inference(dtype=input.dtype)
    pos = helper.create_variable_for_type_inference(dtype="int32", stop_gradient=True)
    helper.append_op("sequence_topk_avg_pooling",
                     inputs={"X": [input], "ROW": [row], "COLUMN": [col]},
                     outputs={"Out": [out], "pos": [pos]},
                     attrs={"topks": [int(k) for k in topks], "channel_num": int(channel_num)})
    out.lod_level = 1
    return out


def fused_embedding_seq_pool(input: Variable, size: list[int], is_sparse: bool = False,
                             padding_idx: int | None = None, combiner: str = "sum",
                             param_attr: Any = None, dtype: Any = "float32") -> Variable:
    """Fluid 1.6's ``contrib.fused_embedding_seq_pool``: the embeddings of each sequence of
    int64 LoD ids ``input`` summed (``combiner='sum'``) in one op, a ``[V, D]`` table made
    from ``param_attr``; ``padding_idx`` rows count as zeros.

    Example::

        words = fluid.layers.data(name="w", shape=[1], dtype="int64", lod_level=1)
        pooled = fluid.contrib.fused_embedding_seq_pool(words, size=[100, 8])
    """
    if not isinstance(input, Variable):
        raise TypeError(f"fused_embedding_seq_pool: input must be a Variable, got "
                        f"{type(input).__name__}")
    helper = LayerHelper("fused_embedding_seq_pool", param_attr=param_attr)
    w = helper.create_parameter(helper.param_attr, list(size), dtype)
    out = helper.create_variable_for_type_inference(dtype)
    pad = -1 if padding_idx is None else (padding_idx if padding_idx >= 0
                                          else size[0] + padding_idx)
    helper.append_op("fused_embedding_seq_pool", inputs={"Ids": [input], "W": [w]},
                     outputs={"Out": [out]},
                     attrs={"is_sparse": bool(is_sparse), "combiner": combiner,
                            "padding_idx": pad})
    return out


def multiclass_nms2(bboxes: Variable, scores: Variable, score_threshold: float,
                    nms_top_k: int, keep_top_k: int, nms_threshold: float = 0.3,
                    normalized: bool = True, nms_eta: float = 1.0, background_label: int = 0,
                    return_index: bool = False, name: str | None = None) -> Any:
    """Fluid 1.6's ``contrib.multiclass_nms2``: ``layers.multiclass_nms`` that can also
    return, with ``return_index``, each kept box's index among the inputs (``Index``).

    Example::

        out, index = fluid.contrib.multiclass_nms2(boxes, scores, 0.5, 400, 200,
                                                   return_index=True)
    """
    helper = LayerHelper("multiclass_nms2", name=name)
    out = helper.create_variable_for_type_inference(bboxes.dtype, stop_gradient=True)
    index = helper.create_variable_for_type_inference("int32", stop_gradient=True)
    helper.append_op("multiclass_nms2", inputs={"BBoxes": [bboxes], "Scores": [scores]},
                     outputs={"Out": [out], "Index": [index]},
                     attrs={"background_label": int(background_label),
                            "score_threshold": float(score_threshold),
                            "nms_top_k": int(nms_top_k), "nms_threshold": float(nms_threshold),
                            "nms_eta": float(nms_eta), "keep_top_k": int(keep_top_k),
                            "normalized": bool(normalized)})
    return (out, index) if return_index else out


# Fluid 1.6's contrib.layers also names these layers of fluid.layers
from ..layers.text_match import match_matrix_tensor, var_conv_2d  # noqa: E402
from ..layers.tree import tree_conv  # noqa: E402

__all__ += ["fused_embedding_seq_pool", "multiclass_nms2", "match_matrix_tensor",
            "var_conv_2d", "tree_conv"]
