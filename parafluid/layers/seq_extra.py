"""Sequence and recurrent-cell layers of Fluid 1.6: sequence_reverse, sequence_slice,
sequence_enumerate, im2sequence, row_conv, add_position_encoding, edit_distance,
ctc_greedy_decoder, lstm_unit, gru_unit, bilinear_tensor_product, sequence_scatter,
dynamic_lstmp."""

from __future__ import annotations

from typing import Any

from ..framework import Variable
from ..layer_helper import LayerHelper

__all__ = ["sequence_reverse", "sequence_slice", "sequence_enumerate", "im2sequence",
           "row_conv", "add_position_encoding", "edit_distance", "ctc_greedy_decoder",
           "lstm_unit", "gru_unit", "bilinear_tensor_product", "sequence_scatter",
           "dynamic_lstmp"]


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


def edit_distance(input: Variable, label: Variable, normalized: bool = True,
                  ignored_tokens: list[int] | None = None, input_length: Any = None,
                  label_length: Any = None) -> tuple[Variable, Variable]:
    """Levenshtein distance between each hypothesis and reference sequence (int64 LoD
    ``[N, 1]``); returns ``(distances [num_sequences, 1], sequence_num [1])``.
    ``normalized`` divides by the reference length; ``ignored_tokens`` are erased first.

    Example::

        dist, num = fluid.layers.edit_distance(decoded, label, ignored_tokens=[0])
    """
    _check("edit_distance", input=input, label=label)
    if input_length is not None or label_length is not None:
        raise ValueError("edit_distance: padded input with input_length/label_length is not "
                         "supported; feed LoD sequences")
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
    helper.append_op("edit_distance", inputs={"Hyps": [input], "Refs": [label]},
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

    _check("ctc_greedy_decoder", input=input)
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
    return _one("ctc_align", {"Input": [ids]}, {"blank": int(blank), "merge_repeated": True,
                                               "padding_value": int(padding_value)},
                "int64", 1, name, "Output", stop_gradient=True)


def lstm_unit(x_t: Variable, hidden_t_prev: Variable, cell_t_prev: Variable,
              forget_bias: float = 0.0, param_attr: Any = None, bias_attr: Any = None,
              name: str | None = None) -> tuple[Variable, Variable]:
    """One LSTM step: ``fc([x_t, h_prev], 4 D)`` then the ``lstm_unit`` op; returns
    ``(h, c)``.

    Example::

        h, c = fluid.layers.lstm_unit(x_t=word, hidden_t_prev=h_prev, cell_t_prev=c_prev)
    """
    from .nn import fc
    from .tensor import concat

    _check("lstm_unit", x_t=x_t, hidden_t_prev=hidden_t_prev, cell_t_prev=cell_t_prev)
    for arg, v in (("x_t", x_t), ("hidden_t_prev", hidden_t_prev),
                   ("cell_t_prev", cell_t_prev)):
        if len(v.shape or ()) != 2:
            raise ValueError(f"lstm_unit: {arg} must be 2-D, got {list(v.shape or [])}")
    size = cell_t_prev.shape[1]
    helper = LayerHelper("lstm_unit", name=name)
    fc_out = fc(concat([x_t, hidden_t_prev], axis=1), size=4 * size, param_attr=param_attr,
                bias_attr=bias_attr)
    c = helper.create_variable_for_type_inference(x_t.dtype)
    h = helper.create_variable_for_type_inference(x_t.dtype)
    helper.append_op("lstm_unit", inputs={"X": [fc_out], "C_prev": [cell_t_prev]},
                     outputs={"C": [c], "H": [h]}, attrs={"forget_bias": float(forget_bias)})
    return h, c


_ACT_IDS = {"identity": 0, "sigmoid": 1, "tanh": 2, "relu": 3}


def gru_unit(input: Variable, hidden: Variable, size: int, param_attr: Any = None,
             bias_attr: Any = None, activation: str = "tanh",
             gate_activation: str = "sigmoid",
             origin_mode: bool = False) -> tuple[Variable, Variable, Variable]:
    """One GRU step on a projected input ``[N, size]`` (``size = 3 D``) and ``hidden
    [N, D]``; returns ``(hidden, reset_hidden_prev, gate)``.

    Example::

        h, _, _ = fluid.layers.gru_unit(fluid.layers.fc(x, size=3 * 32), h_prev, size=3 * 32)
    """
    _check("gru_unit", input=input, hidden=hidden)
    for key, act in (("activation", activation), ("gate_activation", gate_activation)):
        if act not in _ACT_IDS:
            raise ValueError(f"gru_unit: {key} must be one of {sorted(_ACT_IDS)}, got {act!r}")
    if size % 3:
        raise ValueError(f"gru_unit: size must be 3 * hidden size, got {size}")
    d = size // 3
    helper = LayerHelper("gru_unit", param_attr=param_attr, bias_attr=bias_attr)
    dtype = input.dtype
    inputs: dict[str, Any] = {"Input": [input], "HiddenPrev": [hidden],
                              "Weight": [helper.create_parameter(helper.param_attr,
                                                                 [d, 3 * d], dtype)]}
    bias = helper.create_parameter(helper.bias_attr, [1, 3 * d], dtype, is_bias=True)
    if bias is not None:
        inputs["Bias"] = [bias]
    gate = helper.create_variable_for_type_inference(dtype)
    reset = helper.create_variable_for_type_inference(dtype)
    out = helper.create_variable_for_type_inference(dtype)
    helper.append_op("gru_unit", inputs=inputs,
                     outputs={"Gate": [gate], "ResetHiddenPrev": [reset], "Hidden": [out]},
                     attrs={"activation": _ACT_IDS[activation],
                            "gate_activation": _ACT_IDS[gate_activation],
                            "origin_mode": bool(origin_mode)})
    return out, reset, gate


def bilinear_tensor_product(x: Variable, y: Variable, size: int, act: str | None = None,
                            name: str | None = None, param_attr: Any = None,
                            bias_attr: Any = None) -> Variable:
    """``out[n, k] = x[n] @ W[k] @ y[n] + b[k]`` with ``W [size, M, P]``.

    Example::

        score = fluid.layers.bilinear_tensor_product(user, item, size=8, act="tanh")
    """
    _check("bilinear_tensor_product", x=x, y=y)
    helper = LayerHelper("bilinear_tensor_product", param_attr=param_attr,
                         bias_attr=bias_attr, act=act, name=name)
    m, p = (x.shape or (0, 0))[-1], (y.shape or (0, 0))[-1]
    if len(x.shape or ()) != 2 or len(y.shape or ()) != 2 or m <= 0 or p <= 0:
        raise ValueError(f"bilinear_tensor_product: x and y must be 2-D with known widths, got "
                         f"{list(x.shape or [])} and {list(y.shape or [])}")
    dtype = x.dtype
    inputs: dict[str, Any] = {"X": [x], "Y": [y],
                              "Weight": [helper.create_parameter(helper.param_attr,
                                                                 [size, m, p], dtype)]}
    bias = helper.create_parameter(helper.bias_attr, [1, size], dtype, is_bias=True)
    if bias is not None:
        inputs["Bias"] = [bias]
    out = helper.create_variable_for_type_inference(dtype)
    helper.append_op("bilinear_tensor_product", inputs=inputs, outputs={"Out": [out]})
    return helper.append_activation(out)


def sequence_scatter(input: Variable, index: Variable, updates: Variable,
                     name: str | None = None) -> Variable:
    """Add ``updates`` into a dense ``input [N, D]``: step ``j`` of sequence ``i`` of the LoD
    ``index`` (int positions, ``[M, 1]``) adds ``updates[j]`` at ``input[i, index[j]]``."""
    _check("sequence_scatter", input=input, index=index, updates=updates)
    return _one("sequence_scatter", {"X": [input], "Ids": [index], "Updates": [updates]}, {},
                input.dtype, 0, name)


def dynamic_lstmp(input: Variable, size: int, proj_size: int, param_attr: Any = None,
                  bias_attr: Any = None, use_peepholes: bool = True, is_reverse: bool = False,
                  gate_activation: str = "sigmoid", cell_activation: str = "tanh",
                  candidate_activation: str = "tanh", proj_activation: str = "tanh",
                  dtype: str = "float32", name: str | None = None, h_0: Variable | None = None,
                  c_0: Variable | None = None, cell_clip: float | None = None,
                  proj_clip: float | None = None) -> tuple[Variable, Variable]:
    """An LSTM with a recurrent projection over each sequence of ``input`` (already
    projected: ``[steps, size]``, ``size = 4 * D``). The recurrence goes through
    ``r = proj_activation(h @ proj_weight)`` (``[D, proj_size]``), which feeds the next
    step's gates through the weight ``[proj_size, 4 * D]``. Returns ``(projection, cell)``,
    ``[steps, proj_size]`` and ``[steps, D]`` with the input's LoD. ``cell_clip`` and
    ``proj_clip`` clamp the cell and the projection; ``h_0`` ``[N, proj_size]`` is the initial
    projection (Fluid 1.6), ``c_0`` ``[N, size / 4]`` the initial cell.

    Example::

        proj = fluid.layers.fc(input=emb, size=4 * 512)
        out, cell = fluid.layers.dynamic_lstmp(input=proj, size=4 * 512, proj_size=256)
    """
    _check("dynamic_lstmp", input=input)
    if size % 4:
        raise ValueError(f"dynamic_lstmp: size must be 4 * hidden size, got {size}")
    if proj_size < 1:
        raise ValueError(f"dynamic_lstmp: proj_size must be positive, got {proj_size}")
    d = size // 4
    helper = LayerHelper("lstmp", param_attr=param_attr, bias_attr=bias_attr, name=name)
    weight = helper.create_parameter(helper.param_attr, [proj_size, 4 * d], dtype)
    proj_weight = helper.create_parameter(helper.param_attr, [d, proj_size], dtype)
    bias = helper.create_parameter(helper.bias_attr, [1, 7 * d if use_peepholes else 4 * d],
                                   dtype, is_bias=True)
    if bias is None:
        raise ValueError("dynamic_lstmp: the LSTM needs its bias; do not pass bias_attr=False")
    inputs: dict[str, Any] = {"Input": [input], "Weight": [weight],
                              "ProjWeight": [proj_weight], "Bias": [bias]}
    for slot, v in (("H0", h_0), ("C0", c_0)):
        if v is not None:
            _check("dynamic_lstmp", **{slot.lower(): v})
            inputs[slot] = [v]
    projection = helper.create_variable_for_type_inference(dtype)
    cell = helper.create_variable_for_type_inference(dtype)
    helper.append_op("lstmp", inputs=inputs, outputs={"Projection": [projection], "Cell": [cell]},
                     attrs={"use_peepholes": use_peepholes, "is_reverse": is_reverse,
                            "gate_activation": gate_activation,
                            "cell_activation": cell_activation,
                            "candidate_activation": candidate_activation,
                            "proj_activation": proj_activation,
                            "cell_clip": float(cell_clip or 0.0),
                            "proj_clip": float(proj_clip or 0.0)})
    projection.lod_level = cell.lod_level = input.lod_level
    return projection, cell
