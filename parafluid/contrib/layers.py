"""``fluid.contrib`` layers: ``fused_elemwise_activation`` and ``ctr_metric_bundle``."""

from __future__ import annotations

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
