"""Sequence layers over LoD inputs (batches of variable-length sequences).

Feed the data variable (declared with ``lod_level=1``) a LoDTensor, e.g. from
``fluid.create_lod_tensor`` or a ``DataFeeder``; layers such as ``embedding`` and ``fc`` keep
the sequence information, and these layers use it.

Example::

    words = fluid.layers.data(name="words", shape=[1], dtype="int64", lod_level=1)
    emb = fluid.layers.embedding(words, size=[5000, 32])
    conv = fluid.layers.sequence_conv(emb, num_filters=64, filter_size=3, act="tanh")
    sentence = fluid.layers.sequence_pool(conv, pool_type="max")     # one row per sequence
"""

from __future__ import annotations

from typing import Any

from ..framework import Variable
from ..layer_helper import LayerHelper

__all__ = ["lod_append", "sequence_pool", "sequence_first_step", "sequence_last_step",
           "sequence_softmax", "sequence_expand", "sequence_concat", "sequence_reshape",
           "sequence_conv",
           "dynamic_lstm", "dynamic_gru", "sequence_expand_as", "sequence_pad",
           "sequence_unpad", "sequence_mask", "lod_reset", "linear_chain_crf", "crf_decoding",
           "chunk_eval"]


def _check(layer: str, arg: str, x: Any) -> None:
    if not isinstance(x, Variable):
        raise TypeError(f"{layer}: {arg} must be a Variable, got {type(x).__name__}")


def _lod_level(x: Variable, level: int | None = None) -> int:
    return max(x.lod_level, 1) if level is None else level


def sequence_pool(input: Variable, pool_type: str, is_test: bool = False,
                  pad_value: float = 0.0) -> Variable:
    """Pool each sequence to one row: ``sum``, ``average``, ``sqrt`` (sum / sqrt(len)),
    ``max``, ``first`` or ``last``. Empty sequences give ``pad_value``.

    Example::

        pooled = fluid.layers.sequence_pool(emb, pool_type="sum")
    """
    _check("sequence_pool", "input", input)
    kind = str(pool_type).upper()
    helper = LayerHelper("sequence_pool")
    out = helper.create_variable_for_type_inference(input.dtype)
    index = helper.create_variable_for_type_inference("int32", stop_gradient=True)
    helper.append_op("sequence_pool", inputs={"X": [input]},
                     outputs={"Out": [out], "MaxIndex": [index]},
                     attrs={"pooltype": kind, "is_test": is_test,
                            "pad_value": float(pad_value)})
    out.lod_level = max(input.lod_level - 1, 0)
    return out


def sequence_first_step(input: Variable) -> Variable:
    """The first step of each sequence (``sequence_pool(input, "first")``)."""
    return sequence_pool(input, "first")


def sequence_last_step(input: Variable) -> Variable:
    """The last step of each sequence (``sequence_pool(input, "last")``)."""
    return sequence_pool(input, "last")


def _one(op_type: str, inputs: dict[str, Any], attrs: dict[str, Any], dtype: Any,
         lod_level: int, name: str | None = None) -> Variable:
    helper = LayerHelper(op_type, name=name)
    out = helper.create_variable_for_type_inference(dtype)
    helper.append_op(op_type, inputs=inputs, outputs={"Out": [out]}, attrs=attrs)
    out.lod_level = lod_level
    return out


def sequence_softmax(input: Variable, use_cudnn: bool = False,
                     name: str | None = None) -> Variable:
    """Softmax over the steps of each sequence; ``input`` is ``[N, 1]`` (or ``[N]``).

    Example::

        weights = fluid.layers.sequence_softmax(fluid.layers.fc(h, size=1))
    """
    _check("sequence_softmax", "input", input)
    return _one("sequence_softmax", {"X": [input]}, {"use_cudnn": use_cudnn}, input.dtype,
                _lod_level(input), name)


def sequence_expand(x: Variable, y: Variable, ref_level: int = -1,
                    name: str | None = None) -> Variable:
    """Repeat each sequence (or row) ``i`` of ``x`` as many times as sequence ``i`` of ``y``'s
    LoD level ``ref_level`` has steps.

    Example::

        # one query row per sequence, repeated over the steps of that sequence
        q = fluid.layers.sequence_expand(query, y=words_emb)
    """
    _check("sequence_expand", "x", x)
    _check("sequence_expand", "y", y)
    return _one("sequence_expand", {"X": [x], "Y": [y]}, {"ref_level": ref_level}, x.dtype,
                1, name)


def sequence_concat(input: list[Variable], name: str | None = None) -> Variable:
    """Join sequence ``i`` of every input into sequence ``i`` of the output.

    Example::

        both = fluid.layers.sequence_concat([question, answer])
    """
    if not isinstance(input, (list, tuple)) or not input:
        raise TypeError(f"sequence_concat: input must be a non-empty list of Variables, got "
                        f"{input!r}")
    for i, v in enumerate(input):
        _check("sequence_concat", f"input[{i}]", v)
    return _one("sequence_concat", {"X": list(input)}, {}, input[0].dtype, 1, name)


def sequence_reshape(input: Variable, new_dim: int) -> Variable:
    """Re-cut each sequence of a ``[N, D]`` input into rows of ``new_dim`` values.

    Example::

        pairs = fluid.layers.sequence_reshape(emb, new_dim=2 * 32)
    """
    _check("sequence_reshape", "input", input)
    return _one("sequence_reshape", {"X": [input]}, {"new_dim": int(new_dim)}, input.dtype, 1)


def sequence_conv(input: Variable, num_filters: int, filter_size: int = 3,
                  filter_stride: int = 1, padding: bool = True,
                  padding_start: int | None = None, bias_attr: Any = None,
                  param_attr: Any = None, act: str | None = None,
                  name: str | None = None) -> Variable:
    """1-D convolution over the steps of each sequence (windows do not cross sequences;
    steps outside a sequence read zeros).

    The window of step ``t`` is ``t + padding_start ... t + padding_start + filter_size - 1``
    (default ``padding_start = -(filter_size // 2)``, centred). The filter has shape
    ``[filter_size * D, num_filters]``.

    Example::

        conv = fluid.layers.sequence_conv(emb, num_filters=64, filter_size=3, act="tanh")
    """
    _check("sequence_conv", "input", input)
    if filter_stride != 1:
        raise ValueError(f"sequence_conv: filter_stride must be 1 (as in Fluid), got "
                         f"{filter_stride}")
    if input.shape is None or len(input.shape) != 2 or input.shape[1] <= 0:
        raise ValueError(f"sequence_conv: input {input.name!r} must be 2-D [steps, D] with a "
                         f"known D, got shape {list(input.shape or [])}")
    helper = LayerHelper("sequence_conv", input=input, param_attr=param_attr,
                         bias_attr=bias_attr, act=act, name=name)
    dtype = helper.input_dtype()
    w = helper.create_parameter(helper.param_attr, [filter_size * input.shape[1], num_filters],
                                dtype)
    pre_bias = helper.create_variable_for_type_inference(dtype)
    start = -int(filter_size // 2) if padding_start is None else int(padding_start)
    helper.append_op("sequence_conv", inputs={"X": [input], "Filter": [w]},
                     outputs={"Out": [pre_bias]},
                     attrs={"contextStride": filter_stride, "contextStart": start,
                            "contextLength": filter_size})
    pre_bias.lod_level = _lod_level(input)
    pre_act = helper.append_bias_op(pre_bias)
    return helper.append_activation(pre_act)


def dynamic_lstm(input: Variable, size: int, h_0: Variable | None = None,
                 c_0: Variable | None = None, param_attr: Any = None, bias_attr: Any = None,
                 use_peepholes: bool = True, is_reverse: bool = False,
                 gate_activation: str = "sigmoid", cell_activation: str = "tanh",
                 candidate_activation: str = "tanh", dtype: str = "float32",
                 name: str | None = None) -> tuple[Variable, Variable]:
    """An LSTM over each sequence of ``input`` (already projected: ``[steps, size]`` with
    ``size = 4 * D``). Returns ``(hidden, cell)``, both ``[steps, D]`` with the input's LoD.

    Example::

        proj = fluid.layers.fc(input=emb, size=4 * 64)
        hidden, cell = fluid.layers.dynamic_lstm(input=proj, size=4 * 64)
        last = fluid.layers.sequence_last_step(hidden)
    """
    _check("dynamic_lstm", "input", input)
    if size % 4:
        raise ValueError(f"dynamic_lstm: size must be 4 * hidden size, got {size}")
    d = size // 4
    helper = LayerHelper("lstm", param_attr=param_attr, bias_attr=bias_attr, name=name)
    w = helper.create_parameter(helper.param_attr, [d, 4 * d], dtype)
    b = helper.create_parameter(helper.bias_attr, [1, 7 * d if use_peepholes else 4 * d],
                                dtype, is_bias=True)
    if b is None:
        raise ValueError("dynamic_lstm: the LSTM needs its bias; do not pass bias_attr=False")
    hidden = helper.create_variable_for_type_inference(dtype)
    cell = helper.create_variable_for_type_inference(dtype)
    inputs: dict[str, Any] = {"Input": [input], "Weight": [w], "Bias": [b]}
    if h_0 is not None:
        inputs["H0"] = [h_0]
    if c_0 is not None:
        inputs["C0"] = [c_0]
    helper.append_op("lstm", inputs=inputs, outputs={"Hidden": [hidden], "Cell": [cell]},
                     attrs={"use_peepholes": use_peepholes, "is_reverse": is_reverse,
                            "gate_activation": gate_activation,
                            "cell_activation": cell_activation,
                            "candidate_activation": candidate_activation})
    hidden.lod_level = cell.lod_level = _lod_level(input)
    return hidden, cell


def dynamic_gru(input: Variable, size: int, param_attr: Any = None, bias_attr: Any = None,
                is_reverse: bool = False, gate_activation: str = "sigmoid",
                candidate_activation: str = "tanh", h_0: Variable | None = None,
                origin_mode: bool = False) -> Variable:
    """A GRU over each sequence of ``input`` (already projected: ``[steps, 3 * size]``).
    Returns the hidden states ``[steps, size]`` with the input's LoD.

    Example::

        proj = fluid.layers.fc(input=emb, size=3 * 64)
        hidden = fluid.layers.dynamic_gru(input=proj, size=64)
    """
    _check("dynamic_gru", "input", input)
    helper = LayerHelper("gru", param_attr=param_attr, bias_attr=bias_attr)
    dtype = input.dtype
    w = helper.create_parameter(helper.param_attr, [size, 3 * size], dtype)
    b = helper.create_parameter(helper.bias_attr, [1, 3 * size], dtype, is_bias=True)
    hidden = helper.create_variable_for_type_inference(dtype)
    inputs: dict[str, Any] = {"Input": [input], "Weight": [w]}
    if b is not None:
        inputs["Bias"] = [b]
    if h_0 is not None:
        inputs["H0"] = [h_0]
    helper.append_op("gru", inputs=inputs, outputs={"Hidden": [hidden]},
                     attrs={"is_reverse": is_reverse, "gate_activation": gate_activation,
                            "activation": candidate_activation, "origin_mode": origin_mode})
    hidden.lod_level = _lod_level(input)
    return hidden


def sequence_expand_as(x: Variable, y: Variable, name: str | None = None) -> Variable:
    """Repeat row ``i`` of ``x`` once per step of sequence ``i`` of ``y``; the result has
    ``y``'s LoD.

    Example::

        per_word = fluid.layers.sequence_expand_as(sentence_vec, y=words_emb)
    """
    _check("sequence_expand_as", "x", x)
    _check("sequence_expand_as", "y", y)
    return _one("sequence_expand_as", {"X": [x], "Y": [y]}, {}, x.dtype, 1, name)


def sequence_pad(x: Variable, pad_value: Variable, maxlen: int | None = None,
                 name: str | None = None) -> tuple[Variable, Variable]:
    """Sequences -> a dense ``[sequences, maxlen, ...]`` tensor filled with ``pad_value``
    (a one-element variable), and the int64 lengths.

    Example::

        pad = fluid.layers.assign(np.array([0.0], "float32"))
        padded, lengths = fluid.layers.sequence_pad(emb, pad_value=pad)
    """
    _check("sequence_pad", "x", x)
    _check("sequence_pad", "pad_value", pad_value)
    helper = LayerHelper("sequence_pad", name=name)
    out = helper.create_variable_for_type_inference(x.dtype)
    length = helper.create_variable_for_type_inference("int64", stop_gradient=True)
    helper.append_op("sequence_pad", inputs={"X": [x], "PadValue": [pad_value]},
                     outputs={"Out": [out], "Length": [length]},
                     attrs={"padded_length": -1 if maxlen is None else int(maxlen)})
    return out, length


def sequence_unpad(x: Variable, length: Variable, name: str | None = None) -> Variable:
    """The inverse of ``sequence_pad``: the first ``length[i]`` steps of row ``i``, as
    sequences (with a LoD).

    Example::

        seqs = fluid.layers.sequence_unpad(padded, length=lengths)
    """
    _check("sequence_unpad", "x", x)
    _check("sequence_unpad", "length", length)
    return _one("sequence_unpad", {"X": [x], "Length": [length]}, {}, x.dtype, 1, name)


def sequence_mask(x: Variable, maxlen: int | Variable | None = None, dtype: str = "int64",
                  name: str | None = None) -> Variable:
    """``mask[..., j] = j < x[...]`` for int lengths ``x``: shape ``x.shape + [maxlen]``
    (``maxlen`` default: the largest length; a one-element int32 Variable is read at run
    time through the op's ``MaxLenTensor`` input).

    Example::

        mask = fluid.layers.sequence_mask(lengths, maxlen=20, dtype="float32")
    """
    from ..dtypes import convert_dtype

    _check("sequence_mask", "x", x)
    helper = LayerHelper("sequence_mask", name=name)
    out = helper.create_variable_for_type_inference(convert_dtype(dtype), stop_gradient=True)
    inputs = {"X": [x]}
    if isinstance(maxlen, Variable):
        maxlen.stop_gradient = True
        inputs["MaxLenTensor"] = [maxlen]
        maxlen = None
    helper.append_op("sequence_mask", inputs=inputs, outputs={"Y": [out]},
                     attrs={"maxlen": -1 if maxlen is None else int(maxlen),
                            "out_dtype": convert_dtype(dtype)})
    return out


def lod_reset(x: Variable, y: Variable | None = None,
              target_lod: list[int] | None = None) -> Variable:
    """``x`` with a new LoD: ``y``'s LoD (or, if ``y`` has none, ``y``'s values as offsets),
    else ``target_lod`` (offsets).

    Example::

        out = fluid.layers.lod_reset(x, target_lod=[0, 2, 5])
    """
    _check("lod_reset", "x", x)
    if y is None and target_lod is None:
        raise ValueError("lod_reset: give y or target_lod")
    inputs: dict[str, Any] = {"X": [x]}
    if y is not None:
        inputs["Y"] = [y]
    # NOTE: as Fluid's op (its var-type rule): the result has y's LoD levels (at least one),
    # one level when the offsets come from y's values or target_lod
    lod_level = 1 if y is None else max(y.lod_level or 0, 1)
    return _one("lod_reset", inputs, {"target_lod": list(target_lod or [])}, x.dtype,
                lod_level)


def lod_append(x: Variable, level: list[int] | Variable) -> Variable:
    """``x`` with one more (innermost) LoD level: ``level`` as offsets (a list starting at 0,
    ending at the rows of ``x``), or a Variable whose LoD (or values) gives them, under the
    levels ``x`` already has.

    Example::

        words = fluid.layers.lod_append(x, [0, 2, 5])   # x: 5 rows; two sequences
    """
    _check("lod_append", "x", x)
    inputs: dict[str, Any] = {"X": [x]}
    attrs: dict[str, Any] = {"append": True, "target_lod": []}
    if isinstance(level, Variable):
        inputs["Y"] = [level]
    elif isinstance(level, (list, tuple)) and level:
        attrs["target_lod"] = [int(v) for v in level]
    else:
        raise TypeError(f"lod_append: level must be a non-empty list of offsets or a "
                        f"Variable, got {level!r}")
    return _one("lod_reset", inputs, attrs, x.dtype, (x.lod_level or 0) + 1)


def linear_chain_crf(input: Variable, label: Variable, param_attr: Any = None,
                     length: Variable | None = None) -> Variable:
    """Linear-chain CRF loss of tag scores ``input [steps, D]`` (sequences by LoD) against
    int64 tags ``label [steps, 1]``: ``[sequences, 1]``, the negative log-likelihood (Fluid
    calls the output LogLikelihood; minimize its mean). The transition parameter is
    ``[D + 2, D]`` (start, end, then tag-to-tag scores); name it in ``param_attr`` to share
    it with ``crf_decoding``.

    Example::

        crf_cost = fluid.layers.linear_chain_crf(
            input=feature_out, label=target, param_attr=fluid.ParamAttr(name="crfw"))
        avg_cost = fluid.layers.mean(crf_cost)
    """
    _check("linear_chain_crf", "input", input)
    helper = LayerHelper("linear_chain_crf", param_attr=param_attr)
    size = input.shape[-1]
    transition = helper.create_parameter(helper.param_attr, [size + 2, size], input.dtype)
    out = helper.create_variable_for_type_inference(input.dtype)
    inputs = {"Emission": [input], "Transition": [transition], "Label": [label]}
    if length is not None:  # padded: input [N, S, D], label [N, S, 1], length [N]
        inputs["Length"] = [length]
    # as Fluid's layer, the forward's intermediates are bound too
    inter = {slot: [helper.create_variable_for_type_inference(input.dtype)]
             for slot in ("Alpha", "EmissionExps", "TransitionExps")}
    helper.append_op("linear_chain_crf", inputs=inputs,
                     outputs={**inter, "LogLikelihood": [out]})
    return out


def crf_decoding(input: Variable, param_attr: Any, label: Variable | None = None,
                 length: Variable | None = None) -> Variable:
    """Viterbi decoding of each sequence with the transition parameter named by
    ``param_attr`` (created by ``linear_chain_crf``): int64 tags ``[steps, 1]``, or, with
    ``label``, 1 where the decoded tag equals the label and 0 elsewhere.

    Example::

        decoded = fluid.layers.crf_decoding(input=feature_out,
                                            param_attr=fluid.ParamAttr(name="crfw"))
    """
    from ..param_attr import ParamAttr

    _check("crf_decoding", "input", input)
    attr = ParamAttr._to_attr(param_attr)
    name = getattr(attr, "name", None)
    block = LayerHelper("crf_decoding").main_program.global_block()
    if not name or not block.has_var(name):
        raise ValueError(f"crf_decoding: param_attr must name the transition parameter of a "
                         f"linear_chain_crf built before (got {name!r})")
    helper = LayerHelper("crf_decoding")
    path = helper.create_variable_for_type_inference("int64", stop_gradient=True)
    inputs: dict[str, Any] = {"Emission": [input], "Transition": [block.var(name)]}
    if label is not None:
        inputs["Label"] = [label]
    if length is not None:  # padded: input [N, S, D], the path [N, S]
        inputs["Length"] = [length]
    helper.append_op("crf_decoding", inputs=inputs, outputs={"ViterbiPath": [path]})
    path.lod_level = 0 if length is not None else _lod_level(input)
    return path


def chunk_eval(input: Variable, label: Variable, chunk_scheme: str, num_chunk_types: int,
               excluded_chunk_types: list[int] | None = None,
               seq_length: Variable | None = None) -> tuple[Variable, ...]:
    """Chunk precision, recall and F1 of predicted tags ``input`` against ``label`` (both
    int64 ``[steps, 1]`` sequences, or padded ``[batch, bucket]`` rows with ``seq_length``),
    with Fluid's chunk rules for ``chunk_scheme`` "IOB",
    "IOE", "IOBES" or "plain". Returns ``(precision, recall, f1, num_infer_chunks,
    num_label_chunks, num_correct_chunks)``; feed the last three to
    ``fluid.metrics.ChunkEvaluator`` to accumulate over batches.

    Example::

        (precision, recall, f1, n_infer, n_label, n_correct) = fluid.layers.chunk_eval(
            input=decoded, label=target, chunk_scheme="IOB", num_chunk_types=3)
    """
    _check("chunk_eval", "input", input)
    _check("chunk_eval", "label", label)
    helper = LayerHelper("chunk_eval")
    slots = ["Precision", "Recall", "F1-Score", "NumInferChunks", "NumLabelChunks",
             "NumCorrectChunks"]
    outs = [helper.create_variable_for_type_inference("float32" if i < 3 else "int64",
                                                      stop_gradient=True)
            for i in range(len(slots))]
    inputs = {"Inference": [input], "Label": [label]}
    if seq_length is not None:  # padded: input and label [N, S], seq_length [N]
        inputs["SeqLength"] = [seq_length]
    helper.append_op("chunk_eval", inputs=inputs,
                     outputs={slot: [v] for slot, v in zip(slots, outs)},
                     attrs={"num_chunk_types": int(num_chunk_types),
                            "chunk_scheme": chunk_scheme,
                            "excluded_chunk_types": list(excluded_chunk_types or [])})
    return tuple(outs)
