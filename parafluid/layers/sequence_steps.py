"""Layers over the steps of LoD sequences: ``sequence_reverse``, ``sequence_slice``,
``sequence_enumerate``, ``sequence_scatter``, ``im2sequence``, ``row_conv`` and
``add_position_encoding`` (ops in ``parafluid/ops/sequence_steps.py``)."""

from __future__ import annotations

from typing import Any

from ..framework import Variable
from ..layer_helper import LayerHelper

__all__ = ["sequence_reverse", "sequence_slice", "sequence_enumerate", "im2sequence",
           "row_conv", "add_position_encoding", "sequence_scatter"]


def _check(layer: str, **args: Any) -> None:
    for arg, v in args.items():
        if not isinstance(v, Variable):
            raise TypeError(f"{layer}: {arg} must be a Variable, got {type(v).__name__}")


def _one(op_type: str, inputs: dict[str, Any], attrs: dict[str, Any], dtype: Any,
         lod_level: int, name: str | None = None, out_slot: str = "Out",
         stop_gradient: bool = False) -> Variable:
    helper = LayerHelper(op_type, name=name)
    out = helper.create_variable_for_type_inference(dtype, stop_gradient=stop_gradient)
    helper.append_op(op_type, inputs=inputs, outputs={out_slot: [out]}, attrs=attrs)
    out.lod_level = lod_level
    return out


def sequence_reverse(x: Variable, name: str | None = None) -> Variable:
    """Reverse the steps of each sequence.

    Example::

        backward_emb = fluid.layers.sequence_reverse(emb)
    """
    _check("sequence_reverse", x=x)
    return _one("sequence_reverse", {"X": [x]}, {}, x.dtype, max(x.lod_level, 1), name, "Y")


def sequence_slice(input: Variable, offset: Variable, length: Variable,
                   name: str | None = None) -> Variable:
    """Steps ``offset[i] .. offset[i] + length[i] - 1`` of each sequence ``i`` (int64
    ``[num_sequences, 1]`` tensors); the result's LoD has the new lengths."""
    _check("sequence_slice", input=input, offset=offset, length=length)
    return _one("sequence_slice", {"X": [input], "Offset": [offset], "Length": [length]}, {},
                input.dtype, max(input.lod_level, 1), name)


def sequence_enumerate(input: Variable, win_size: int, pad_value: int = 0,
                       name: str | None = None) -> Variable:
    """For each step of int ids ``[N, 1]``, the ``win_size`` ids starting there (within its
    sequence, ``pad_value`` past the end): ``[N, win_size]``, e.g. n-grams of words."""
    _check("sequence_enumerate", input=input)
    return _one("sequence_enumerate", {"X": [input]},
                {"win_size": int(win_size), "pad_value": int(pad_value)}, input.dtype,
                max(input.lod_level, 1), name, stop_gradient=True)


def _four(value: Any, layer: str) -> list[int]:
    if isinstance(value, int):
        return [value] * 4
    vals = [int(v) for v in value]
    if len(vals) == 2:
        return vals + vals
    if len(vals) != 4:
        raise ValueError(f"{layer}: padding must be an int, 2 or 4 ints, got {value!r}")
    return vals


def im2sequence(input: Variable, filter_size: Any = 1, stride: Any = 1, padding: Any = 0,
                input_image_size: Variable | None = None, out_stride: Any = 1,
                name: str | None = None) -> Variable:
    """Turn each image of an NCHW batch into a sequence: one step per filter position
    (row-major), ``C * kh * kw`` features (OCR models feed it to an RNN).

    ``padding`` is ``[up, left, down, right]`` (2 values mean ``[up, left]`` repeated).
    ``input_image_size [N, 2]`` (each image's real height and width, batches of 2 or more as
    Fluid) keeps, per image, the positions its real size divided by ``out_stride`` spans.

    Example::

        seq = fluid.layers.im2sequence(conv, filter_size=[conv_h, 1], stride=[1, 1])
    """
    _check("im2sequence", input=input)

    def two(v: Any, what: str) -> list[int]:
        vals = [int(v)] * 2 if isinstance(v, int) else [int(a) for a in v]
        if len(vals) != 2:
            raise ValueError(f"im2sequence: {what} must be an int or 2 ints, got {v!r}")
        return vals

    inputs = {"X": [input]}
    if input_image_size is not None:  # [N, 2] real sizes: each image's own sequence length
        inputs["Y"] = [input_image_size]
    return _one("im2sequence", inputs,
                {"kernels": two(filter_size, "filter_size"), "strides": two(stride, "stride"),
                 "paddings": _four(padding, "im2sequence"),
                 "out_stride": two(out_stride, "out_stride")}, input.dtype, 1, name)


def row_conv(input: Variable, future_context_size: int, param_attr: Any = None,
             act: str | None = None) -> Variable:
    """Lookahead row convolution (DeepSpeech 2): each step mixes itself and the next
    ``future_context_size`` steps of its sequence with a ``[k + 1, D]`` filter.

    Example::

        h = fluid.layers.row_conv(rnn_out, future_context_size=2)
    """
    _check("row_conv", input=input)
    helper = LayerHelper("row_conv", param_attr=param_attr, act=act)
    d = (input.shape or (0, 0))[-1]
    if d <= 0:
        raise ValueError(f"row_conv: the feature dim of {input.name!r} must be known, got "
                         f"{list(input.shape or [])}")
    w = helper.create_parameter(helper.param_attr, [int(future_context_size) + 1, d],
                                input.dtype)
    out = helper.create_variable_for_type_inference(input.dtype)
    helper.append_op("row_conv", inputs={"X": [input], "Filter": [w]}, outputs={"Out": [out]})
    out.lod_level = max(input.lod_level, 1)
    return helper.append_activation(out)


def add_position_encoding(input: Variable, alpha: float, beta: float,
                          name: str | None = None) -> Variable:
    """``alpha * input + beta * PE``, PE the Transformer's sinusoids (sin in the first half
    of the features, cos in the second); ``input`` is ``[N, T, D]`` or a LoD ``[steps, D]``."""
    _check("add_position_encoding", input=input)
    return _one("add_position_encoding", {"X": [input]},
                {"alpha": float(alpha), "beta": float(beta)}, input.dtype, input.lod_level,
                name)


def sequence_scatter(input: Variable, index: Variable, updates: Variable,
                     name: str | None = None) -> Variable:
    """Add ``updates`` into a dense ``input [N, D]``: step ``j`` of sequence ``i`` of the LoD
    ``index`` (int positions, ``[M, 1]``) adds ``updates[j]`` at ``input[i, index[j]]``."""
    _check("sequence_scatter", input=input, index=index, updates=updates)
    return _one("sequence_scatter", {"X": [input], "Ids": [index], "Updates": [updates]}, {},
                input.dtype, 0, name)
