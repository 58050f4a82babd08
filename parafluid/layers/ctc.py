"""CTC decoding and its metric: ``ctc_greedy_decoder`` and ``edit_distance`` (ops in
``parafluid/ops/ctc.py``)."""

from __future__ import annotations

from typing import Any

from ..framework import Variable
from ..layer_helper import LayerHelper
from .common import append_one, check_vars

__all__ = ["edit_distance", "ctc_greedy_decoder"]


def edit_distance(input: Variable, label: Variable, normalized: bool = True,
                  ignored_tokens: list[int] | None = None, input_length: Any = None,
                  label_length: Any = None) -> tuple[Variable, Variable]:
    """Levenshtein distance between each hypothesis and reference sequence (int64 LoD
    ``[N, 1]``, or padded ``[B, T]`` rows with ``input_length`` / ``label_length`` [B]);
    returns ``(distances [num_sequences, 1], sequence_num [1])``.
    ``normalized`` divides by the reference length; ``ignored_tokens`` are erased first.

    Example::

        dist, num = fluid.layers.edit_distance(decoded, label, ignored_tokens=[0])
    """
    check_vars("edit_distance", input=input, label=label)
    if (input_length is None) != (label_length is None):
        raise ValueError("edit_distance: the padded form needs both input_length and "
                         "label_length")
    helper = LayerHelper("edit_distance")
    if ignored_tokens:
        erased = []
        for v in (input, label):
            out = helper.create_variable_for_type_inference(v.dtype, stop_gradient=True)
            helper.append_op("sequence_erase", inputs={"X": [v]}, outputs={"Out": [out]},
                             attrs={"tokens": [int(t) for t in ignored_tokens]})
            out.lod_level = 1
            erased.append(out)
        input, label = erased
    dist = helper.create_variable_for_type_inference("float32", stop_gradient=True)
    num = helper.create_variable_for_type_inference("int64", stop_gradient=True)
    inputs = {"Hyps": [input], "Refs": [label]}
    if input_length is not None:
        # padded [B, T] sequences, row i holding input_length[i] / label_length[i] tokens
        inputs.update(HypsLength=[input_length], RefsLength=[label_length])
    helper.append_op("edit_distance", inputs=inputs,
                     outputs={"Out": [dist], "SequenceNum": [num]},
                     attrs={"normalized": bool(normalized)})
    return dist, num


def ctc_greedy_decoder(input: Variable, blank: int, input_length: Any = None,
                       padding_value: int = 0,
                       name: str | None = None) -> Variable | tuple[Variable, Variable]:
    """Best-path CTC decoding of LoD class scores ``[steps, num_classes + 1]``: the arg max
    of each step, repeats merged, ``blank`` dropped. Int64 LoD ``[tokens, 1]``. Padded
    scores ``[N, T, num_classes + 1]`` with ``input_length [N, 1]`` give
    ``(output [N, T], output_length [N, 1])``, rows filled up with ``padding_value``.

    Example::

        decoded = fluid.layers.ctc_greedy_decoder(fc_out, blank=num_classes)
    """
    from .tensor import squeeze, topk

    check_vars("ctc_greedy_decoder", input=input)
    _, ids = topk(input, k=1)
    if input_length is not None:
        helper = LayerHelper("ctc_greedy_decoder", name=name)
        out = helper.create_variable_for_type_inference("int64", stop_gradient=True)
        out_len = helper.create_variable_for_type_inference("int64", stop_gradient=True)
        helper.append_op("ctc_align", inputs={"Input": [squeeze(ids, [2])],
                                              "InputLength": [input_length]},
                         outputs={"Output": [out], "OutputLength": [out_len]},
                         attrs={"blank": int(blank), "merge_repeated": True,
                                "padding_value": int(padding_value)})
        return out, out_len
    return append_one("ctc_align", {"Input": [ids]},
                      {"blank": int(blank), "merge_repeated": True,
                       "padding_value": int(padding_value)},
                      "int64", name, stop_gradient=True, out_slot="Output", lod_level=1)
