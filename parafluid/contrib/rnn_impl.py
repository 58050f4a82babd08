"""contrib's recurrent units built from basic ops (Fluid 1.6 ``contrib/layers/rnn_impl.py``):
the cells ``BasicGRUUnit`` / ``BasicLSTMUnit`` and the static functions ``basic_gru`` /
``basic_lstm``, which run them over time with a ``StaticRNN`` (several layers, both
directions, padding masked by ``sequence_length``).

Example::

    import parafluid as fluid
    x = fluid.layers.data(name="x", shape=[-1, 10, 16], dtype="float32",
                          append_batch_size=False)
    out, last_h, last_c = fluid.contrib.basic_lstm(x, None, None, hidden_size=32,
                                                   num_layers=2, bidirectional=True)
    unit = fluid.contrib.BasicGRUUnit("gru_unit", hidden_size=32)   # one step, a Layer
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from .. import layers
from ..dygraph.layers import Layer
from ..framework import Variable
from ..param_attr import ParamAttr

__all__ = ["BasicGRUUnit", "BasicLSTMUnit", "basic_gru", "basic_lstm"]

_INT_MAX = 2 ** 31 - 1


def gru_cell(input: Variable, pre_hidden: Variable, gate_weight: Variable,  # noqa: A002
             gate_bias: Variable, candidate_weight: Variable, candidate_bias: Variable,
             gate_activation: Callable | None = None,
             activation: Callable | None = None) -> Variable:
    """One GRU step as Fluid's ``BasicGRUUnit``: ``r, u = act_g([x, h] W_g + b_g)`` (reset
    gate first), ``m = act([x, r * h] W_c + b_c)``, ``h' = u * h + (1 - u) * m``."""
    gate_activation = gate_activation or layers.sigmoid
    activation = activation or layers.tanh
    gate = layers.matmul(layers.concat([input, pre_hidden], 1), gate_weight)
    gate = gate_activation(layers.elementwise_add(gate, gate_bias))
    r, u = layers.split(gate, num_or_sections=2, dim=1)
    candidate = layers.matmul(layers.concat([input, r * pre_hidden], 1), candidate_weight)
    c = activation(layers.elementwise_add(candidate, candidate_bias))
    return u * pre_hidden + (1 - u) * c


def lstm_cell(input: Variable, pre_hidden: Variable, pre_cell: Variable,  # noqa: A002
              weight: Variable, bias: Variable, forget_bias: float = 1.0,
              gate_activation: Callable | None = None,
              activation: Callable | None = None) -> tuple[Variable, Variable]:
    """One LSTM step as Fluid's ``BasicLSTMUnit``: ``i, j, f, o = [x, h] W + b`` (in that
    order), ``c' = c * act_g(f + forget_bias) + act_g(i) * act(j)``,
    ``h' = act(c') * act_g(o)``; returns ``(h', c')``."""
    gate_activation = gate_activation or layers.sigmoid
    activation = activation or layers.tanh
    gate = layers.matmul(layers.concat([input, pre_hidden], 1), weight)
    gate = layers.elementwise_add(gate, bias)
    i, j, f, o = layers.split(gate, num_or_sections=4, dim=-1)
    new_cell = layers.elementwise_add(
        layers.elementwise_mul(pre_cell, gate_activation(f + float(forget_bias))),
        layers.elementwise_mul(gate_activation(i), activation(j)))
    return activation(new_cell) * gate_activation(o), new_cell


def _suffixed(attr: Any, suffix: str) -> Any:
    """A named ParamAttr gets ``suffix`` (Fluid's per-layer and per-gate names)."""
    attr = ParamAttr._to_attr(attr)
    if attr is False or attr is None or attr.name is None:
        return attr
    attr = copy.deepcopy(attr)
    attr.name += suffix
    return attr


class BasicGRUUnit(Layer):
    """One GRU step as a Layer (Fluid's ``BasicGRUUnit``): ``forward(input, pre_hidden)``
    returns the new hidden state (``gru_cell``). Parameters, made on the first call:
    ``_gate_weight`` ``[input_size + hidden_size, 2 * hidden_size]``, ``_candidate_weight``
    ``[input_size + hidden_size, hidden_size]`` and their biases; a named ``param_attr`` /
    ``bias_attr`` gets ``_gate`` / ``_candidate`` appended.

    Example::

        unit = fluid.contrib.BasicGRUUnit("gru_unit", hidden_size=16)
        h = unit(x, h_prev)
    """

    def __init__(self, name_scope: str, hidden_size: int, param_attr: Any = None,
                 bias_attr: Any = None, gate_activation: Callable | None = None,
                 activation: Callable | None = None, dtype: str = "float32") -> None:
        super().__init__(name_scope, dtype)
        self._hidden_size = hidden_size
        self._param_attr, self._bias_attr = param_attr, bias_attr
        self._gate_activation = gate_activation or layers.sigmoid
        self._activation = activation or layers.tanh

    def _build_once(self, input: Variable, pre_hidden: Variable) -> None:  # noqa: A002
        size, h = int(input.shape[-1]) + self._hidden_size, self._hidden_size
        self._gate_weight = self.create_parameter(_suffixed(self._param_attr, "_gate"),
                                                  [size, 2 * h], self._dtype)
        self._candidate_weight = self.create_parameter(
            _suffixed(self._param_attr, "_candidate"), [size, h], self._dtype)
        self._gate_bias = self.create_parameter(_suffixed(self._bias_attr, "_gate"), [2 * h],
                                                self._dtype, is_bias=True)
        self._candidate_bias = self.create_parameter(_suffixed(self._bias_attr, "_candidate"),
                                                     [h], self._dtype, is_bias=True)

    def forward(self, input: Variable, pre_hidden: Variable) -> Variable:  # noqa: A002
        return gru_cell(input, pre_hidden, self._gate_weight, self._gate_bias,
                        self._candidate_weight, self._candidate_bias, self._gate_activation,
                        self._activation)


class BasicLSTMUnit(Layer):
    """One LSTM step as a Layer (Fluid's ``BasicLSTMUnit``): ``forward(input, pre_hidden,
    pre_cell)`` returns ``(new_hidden, new_cell)`` (``lstm_cell``). Parameters, made on the
    first call: ``_weight`` ``[input_size + hidden_size, 4 * hidden_size]`` and ``_bias``
    ``[4 * hidden_size]``.

    Example::

        unit = fluid.contrib.BasicLSTMUnit("lstm_unit", hidden_size=16)
        h, c = unit(x, h_prev, c_prev)
    """

    def __init__(self, name_scope: str, hidden_size: int, param_attr: Any = None,
                 bias_attr: Any = None, gate_activation: Callable | None = None,
                 activation: Callable | None = None, forget_bias: float = 1.0,
                 dtype: str = "float32") -> None:
        super().__init__(name_scope, dtype)
        self._hidden_size = hidden_size
        self._param_attr, self._bias_attr = param_attr, bias_attr
        self._gate_activation = gate_activation or layers.sigmoid
        self._activation = activation or layers.tanh
        self._forget_bias = float(forget_bias)

    def _build_once(self, input: Variable, pre_hidden: Variable,  # noqa: A002
                    pre_cell: Variable) -> None:
        h = self._hidden_size
        self._weight = self.create_parameter(self._param_attr,
                                             [int(input.shape[-1]) + h, 4 * h], self._dtype)
        self._bias = self.create_parameter(self._bias_attr, [4 * h], self._dtype,
                                           is_bias=True)

    def forward(self, input: Variable, pre_hidden: Variable,  # noqa: A002
                pre_cell: Variable) -> tuple[Variable, Variable]:
        return lstm_cell(input, pre_hidden, pre_cell, self._weight, self._bias,
                         self._forget_bias, self._gate_activation, self._activation)


def _check(fn: str, input: Variable, hidden_size: int, num_layers: int,  # noqa: A002
           batch_first: bool) -> None:
    if not isinstance(input, Variable) or len(input.shape or ()) != 3:
        raise ValueError(f"{fn}: input must be a 3-D Variable ([batch, seq_len, size] when "
                         f"batch_first, else [seq_len, batch, size]), got "
                         f"{getattr(input, 'shape', type(input).__name__)}")
    if input.shape[2] <= 0:
        raise ValueError(f"{fn}: input {input.name!r} has shape {list(input.shape)}: its "
                         f"size (dim 2) must be known when the program is built (the "
                         f"weights' shape)")
    for arg, v in (("hidden_size", hidden_size), ("num_layers", num_layers)):
        if not isinstance(v, int) or v <= 0:
            raise ValueError(f"{fn}: {arg} must be a positive int, got {v!r}")


def _state(init: Variable | None, layer: int, direction: int, dirs: int,
           hidden_size: int) -> Variable | None:
    """Row ``layer * dirs + direction`` of a ``[num_layers * dirs, batch, hidden]`` state."""
    if init is None:
        return None
    row = layer * dirs + direction
    return layers.reshape(layers.slice(init, axes=[0], starts=[row], ends=[row + 1]),
                          [-1, hidden_size])


def _run(kind: str, input: Variable, inits: list[Variable | None],  # noqa: A002
         hidden_size: int, num_layers: int, sequence_length: Variable | None,
         dropout_prob: float, bidirectional: bool, batch_first: bool, param_attr: Any,
         bias_attr: Any, dtype: str, name: str, dropout_implementation: str,
         **cell_kw: Any) -> tuple[Variable, ...]:
    fn = f"basic_{kind}"
    _check(fn, input, hidden_size, num_layers, batch_first)
    dirs = 2 if bidirectional else 1
    inits = list(inits)
    for k, (arg, init) in enumerate(zip(("init_hidden", "init_cell"), inits)):
        if init is None:
            continue
        if len(init.shape or ()) != 3:
            # NOTE: as Fluid's, any layout of num_layers * dirs * batch * hidden_size values
            # is read as [num_layers * dirs, batch, hidden_size]
            inits[k] = init = layers.reshape(init, [num_layers * dirs, -1, hidden_size])
        elif init.shape[0] not in (-1, num_layers * dirs):
            raise ValueError(f"{fn}: {arg} {init.name!r} must be [num_layers * {dirs}, batch, "
                             f"hidden_size] = [{num_layers * dirs}, batch, {hidden_size}], got "
                             f"{list(init.shape or ())}")
    n_state = len(inits)
    unit_class = BasicGRUUnit if kind == "gru" else BasicLSTMUnit
    units = [[unit_class(f"{name}_{'layers' if d == 0 else 'reverse_layers'}_{i}", hidden_size,
                         _suffixed(param_attr, f"_{'fb'[d]}w_w_{i}"),
                         _suffixed(bias_attr, f"_{'fb'[d]}w_b_{i}"), dtype=dtype, **cell_kw)
              for i in range(num_layers)] for d in range(dirs)]
    if batch_first:
        input = layers.transpose(input, [1, 0, 2])
    # -1: the length is known when the program runs (a recurrent op steps through it)
    seq_len = int(input.shape[0])
    mask = None
    if sequence_length is not None:
        maxlen = seq_len if seq_len > 0 else layers.slice(layers.shape(input), axes=[0],
                                                          starts=[0], ends=[1])
        mask = layers.transpose(layers.sequence_mask(sequence_length, maxlen=maxlen,
                                                     dtype=input.dtype), [1, 0])
    last = (seq_len - 1, seq_len) if seq_len > 0 else (-1, _INT_MAX)

    def one_direction(rnn_input: Variable, step_mask_src: Variable | None,
                      d: int) -> tuple[Variable, list[Variable]]:
        boots = [[_state(init, i, d, dirs, hidden_size) for init in inits]
                 for i in range(num_layers)]  # outside the step: computed once
        rnn = layers.StaticRNN()
        with rnn.step():
            step_input = rnn.step_input(rnn_input)
            step_mask = rnn.step_input(step_mask_src) if step_mask_src is not None else None
            for i in range(num_layers):
                pre = []
                for boot in boots[i]:
                    pre.append(rnn.memory(init=boot) if boot is not None else
                               rnn.memory(batch_ref=rnn_input, shape=[-1, hidden_size],
                                          ref_batch_dim_idx=1))
                new = units[d][i](step_input, *pre)
                new = [new] if n_state == 1 else list(new)
                if step_mask is not None:
                    # a padded step keeps the previous state
                    new = [layers.elementwise_mul(v, step_mask, axis=0)
                           - layers.elementwise_mul(p, step_mask - 1, axis=0)
                           for v, p in zip(new, pre)]
                for p, v in zip(pre, new):
                    rnn.update_memory(p, v)
                    rnn.step_output(v)
                step_input = new[0]
                if dropout_prob is not None and dropout_prob > 0.0:
                    step_input = layers.dropout(step_input, dropout_prob=dropout_prob,
                                                dropout_implementation=dropout_implementation)
            rnn.step_output(step_input)
        outs = rnn()
        lasts = []
        for k in range(n_state):
            rows = [layers.slice(outs[i * n_state + k], axes=[0], starts=[last[0]],
                                 ends=[last[1]]) for i in range(num_layers)]
            lasts.append(layers.concat(rows, axis=0))  # [num_layers, batch, hidden]
        return outs[-1], lasts

    out, lasts = one_direction(input, mask, 0)
    if bidirectional:
        bw_out, bw_lasts = one_direction(
            layers.reverse(input, axis=[0]),
            None if mask is None else layers.reverse(mask, axis=[0]), 1)
        out = layers.concat([out, layers.reverse(bw_out, axis=[0])], axis=2)
        lasts = [layers.reshape(layers.stack([f, b], axis=1), [num_layers * 2, -1, hidden_size])
                 for f, b in zip(lasts, bw_lasts)]
    if batch_first:
        out = layers.transpose(out, [1, 0, 2])
    return (out, *lasts)


def basic_gru(input: Variable, init_hidden: Variable | None, hidden_size: int,  # noqa: A002
              num_layers: int = 1, sequence_length: Variable | None = None,
              dropout_prob: float = 0.0, bidirectional: bool = False, batch_first: bool = True,
              param_attr: Any = None, bias_attr: Any = None,
              gate_activation: Callable | None = None, activation: Callable | None = None,
              dtype: str = "float32", name: str = "basic_gru") -> tuple[Variable, Variable]:
    """A GRU of ``num_layers`` ``BasicGRUUnit`` cells per direction over ``input``
    (``[batch, seq_len, size]`` when ``batch_first``, else ``[seq_len, batch, size]``) from
    ``init_hidden`` ``[num_layers * dirs, batch, hidden_size]`` (row ``layer * dirs +
    direction``; zeros when None). Steps past an example's ``sequence_length`` keep its state.
    ``dropout_prob`` drops each layer's output (the last layer's too, as Fluid's; the default
    ``downgrade_in_infer``). Returns ``(rnn_out, last_hidden)``: ``rnn_out`` in the input's
    layout with ``hidden_size * dirs`` features, ``last_hidden`` shaped as ``init_hidden``.

    Example::

        x = fluid.layers.data(name="x", shape=[-1, 10, 16], dtype="float32",
                              append_batch_size=False)
        out, last = fluid.contrib.basic_gru(x, None, hidden_size=32, num_layers=2)
    """
    return _run("gru", input, [init_hidden], hidden_size, num_layers, sequence_length,
                dropout_prob, bidirectional, batch_first, param_attr, bias_attr, dtype, name,
                "downgrade_in_infer", gate_activation=gate_activation, activation=activation)


def basic_lstm(input: Variable, init_hidden: Variable | None,  # noqa: A002
               init_cell: Variable | None, hidden_size: int, num_layers: int = 1,
               sequence_length: Variable | None = None, dropout_prob: float = 0.0,
               bidirectional: bool = False, batch_first: bool = True, param_attr: Any = None,
               bias_attr: Any = None, gate_activation: Callable | None = None,
               activation: Callable | None = None, forget_bias: float = 1.0,
               dtype: str = "float32",
               name: str = "basic_lstm") -> tuple[Variable, Variable, Variable]:
    """An LSTM of ``num_layers`` ``BasicLSTMUnit`` cells per direction, laid out as
    ``basic_gru``; dropout is ``upscale_in_train``. Returns ``(rnn_out, last_hidden,
    last_cell)``.

    Example::

        x = fluid.layers.data(name="x", shape=[-1, 10, 16], dtype="float32",
                              append_batch_size=False)
        out, last_h, last_c = fluid.contrib.basic_lstm(x, None, None, hidden_size=32)
    """
    if (init_hidden is None) != (init_cell is None):
        raise ValueError("basic_lstm: give both init_hidden and init_cell, or neither")
    return _run("lstm", input, [init_hidden, init_cell], hidden_size, num_layers,
                sequence_length, dropout_prob, bidirectional, batch_first, param_attr,
                bias_attr, dtype, name, "upscale_in_train", forget_bias=forget_bias,
                gate_activation=gate_activation, activation=activation)
