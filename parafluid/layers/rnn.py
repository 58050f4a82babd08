"""Fluid 1.6's cell API (python/paddle/fluid/layers/rnn.py): ``RNNCell``, ``GRUCell``,
``LSTMCell``, the ``Decoder`` interface and ``rnn``, which runs a cell over time with a
``StaticRNN`` (unrolled, or one ``recurrent`` op when the number of time steps is known only
when the program runs).

States may be nested lists / tuples of Variables (``LSTMCell``'s are ``[hidden, cell]``).
``BeamSearchDecoder`` and ``dynamic_decode`` (decoding in a While loop until every beam has
ended) are not provided: see docs/fluid_compat.md.

Example::

    cell = fluid.layers.GRUCell(hidden_size=16)
    outputs, final_state = fluid.layers.rnn(cell, inputs)     # inputs [batch, time, size]
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..framework import Variable

__all__ = ["RNNCell", "GRUCell", "LSTMCell", "Decoder", "rnn"]


# -- nested structures of Variables (lists and tuples) ------------------------------------
def _is_sequence(x: Any) -> bool:
    return isinstance(x, (list, tuple))


def flatten(structure: Any) -> list[Any]:
    """The leaves of a nested list / tuple, depth first."""
    if not _is_sequence(structure):
        return [structure]
    return [leaf for item in structure for leaf in flatten(item)]


def pack_sequence_as(structure: Any, leaves: list[Any]) -> Any:
    """``leaves`` arranged as ``structure`` is."""
    it = iter(leaves)

    def pack(s: Any) -> Any:
        if not _is_sequence(s):
            return next(it)
        return type(s)(pack(item) for item in s)
    return pack(structure)


def map_structure(fn: Callable[..., Any], *structures: Any) -> Any:
    """``fn`` over the leaves of structures of one shape, packed as the first."""
    flats = [flatten(s) for s in structures]
    if any(len(f) != len(flats[0]) for f in flats):
        raise ValueError("rnn: the nested structures of states differ in length: "
                         f"{[len(f) for f in flats]}")
    return pack_sequence_as(structures[0], [fn(*leaves) for leaves in zip(*flats)])


def _is_shape(x: Any) -> bool:
    return _is_sequence(x) and all(isinstance(v, int) for v in x)


def _map_shapes(fn: Callable[[list[int]], Any], shapes: Any) -> Any:
    # a shape ([-1, 16]) is a leaf here, not a sequence of leaves
    if _is_shape(shapes):
        return fn(list(shapes))
    return type(shapes)(_map_shapes(fn, s) for s in shapes)


class _Shape:
    def __init__(self, dims: list[int]) -> None:
        self.dims = dims


# -- cells -----------------------------------------------------------------------------------
class RNNCell:
    """The interface of a cell: ``call(inputs, states) -> (outputs, new_states)``, and
    ``state_shape`` / ``state_dtype`` for ``get_initial_states``."""

    def call(self, inputs: Any, states: Any, **kwargs: Any) -> tuple[Any, Any]:
        raise NotImplementedError("RNNCell must implent the call function.")

    def __call__(self, inputs: Any, states: Any, **kwargs: Any) -> tuple[Any, Any]:
        return self.call(inputs, states, **kwargs)

    def get_initial_states(self, batch_ref: Any, shape: Any = None, dtype: Any = None,
                           init_value: float = 0, batch_dim_idx: int = 0) -> Any:
        """States filled with ``init_value``, batch size taken from dim ``batch_dim_idx``
        of (the first Variable of) ``batch_ref``; ``shape`` (default ``state_shape``) gets a
        leading -1 where it lacks one; ``dtype`` defaults to ``state_dtype``, else
        float32."""
        from .tensor import fill_constant_batch_size_like

        ref = flatten(batch_ref)[0]
        shapes = self.state_shape if shape is None else shape
        # each shape becomes one opaque leaf, with -1 (the batch) in front
        leaves = _map_shapes(lambda s: _Shape(s if s and s[0] == -1 else [-1] + s), shapes)
        try:
            dtypes = self.state_dtype if dtype is None else dtype
        except NotImplementedError:
            dtypes = "float32"
        flat_shapes = flatten(leaves)
        flat_dtypes = flatten(dtypes)
        if len(flat_dtypes) == 1:
            flat_dtypes = flat_dtypes * len(flat_shapes)
        states = [fill_constant_batch_size_like(input=ref, shape=s.dims, dtype=d,
                                                value=init_value,
                                                input_dim_idx=batch_dim_idx)
                  for s, d in zip(flat_shapes, flat_dtypes)]
        return pack_sequence_as(leaves, states)

    @property
    def state_shape(self) -> Any:
        """The shape[s] of the states (without the batch dim)."""
        raise NotImplementedError("Please add implementaion for `state_shape` in the used "
                                  "cell.")

    @property
    def state_dtype(self) -> Any:
        """The dtype[s] of the states."""
        raise NotImplementedError("Please add implementaion for `state_dtype` in the used "
                                  "cell.")


def _unit(kind: str) -> Any:
    # NOTE: the cells hold Fluid's BasicGRUUnit / BasicLSTMUnit, as Fluid's do
    from ..contrib.rnn_impl import BasicGRUUnit, BasicLSTMUnit

    return BasicGRUUnit if kind == "gru" else BasicLSTMUnit


class GRUCell(RNNCell):
    """A GRU step (``contrib.BasicGRUUnit``): the state and the output are the new hidden
    state ``[batch, hidden_size]``."""

    def __init__(self, hidden_size: int, param_attr: Any = None, bias_attr: Any = None,
                 gate_activation: Any = None, activation: Any = None, dtype: str = "float32",
                 name: str = "GRUCell") -> None:
        self.hidden_size, self._dtype = hidden_size, dtype
        self.gru_unit = _unit("gru")(name, hidden_size, param_attr, bias_attr,
                                     gate_activation, activation, dtype)

    def call(self, inputs: Variable, states: Variable) -> tuple[Variable, Variable]:
        new_hidden = self.gru_unit(inputs, states)
        return new_hidden, new_hidden

    @property
    def state_shape(self) -> list[int]:
        return [self.hidden_size]

    @property
    def state_dtype(self) -> str:
        # NOTE: Fluid's cells leave this to RNNCell (float32 states); the cell's own dtype
        # is the same for float32 cells and lets a float64 cell run
        return self._dtype


class LSTMCell(RNNCell):
    """An LSTM step (``contrib.BasicLSTMUnit``): states ``[hidden, cell]``, output the new
    hidden state."""

    def __init__(self, hidden_size: int, param_attr: Any = None, bias_attr: Any = None,
                 gate_activation: Any = None, activation: Any = None,
                 forget_bias: float = 1.0, dtype: str = "float32",
                 name: str = "LSTMCell") -> None:
        self.hidden_size, self._dtype = hidden_size, dtype
        self.lstm_unit = _unit("lstm")(name, hidden_size, param_attr, bias_attr,
                                       gate_activation, activation, forget_bias, dtype)

    def call(self, inputs: Variable, states: list[Variable]) -> tuple[Variable, list[Variable]]:
        pre_hidden, pre_cell = states
        new_hidden, new_cell = self.lstm_unit(inputs, pre_hidden, pre_cell)
        return new_hidden, [new_hidden, new_cell]

    @property
    def state_shape(self) -> list[list[int]]:
        return [[self.hidden_size], [self.hidden_size]]

    @property
    def state_dtype(self) -> str:
        return self._dtype  # as GRUCell's


class Decoder:
    """The interface of a decoder for dynamic decoding: ``initialize``, ``step`` and
    ``finalize``, as Fluid defines it (``dynamic_decode`` itself is not provided)."""

    def initialize(self, inits: Any) -> tuple[Any, Any, Variable]:
        """``(initial_inputs, initial_states, finished)``."""
        raise NotImplementedError

    def step(self, time: Variable, inputs: Any, states: Any) -> tuple[Any, Any, Any, Variable]:
        """``(outputs, next_states, next_inputs, finished)``."""
        raise NotImplementedError

    @property
    def output_dtype(self) -> Any:
        raise NotImplementedError

    def finalize(self, outputs: Any, final_states: Any, sequence_lengths: Variable
                 ) -> tuple[Any, Any]:
        raise NotImplementedError


# -- rnn -----------------------------------------------------------------------------------
def rnn(cell: RNNCell, inputs: Any, initial_states: Any = None,
        sequence_length: Variable | None = None, time_major: bool = False,
        is_reverse: bool = False, **kwargs: Any) -> tuple[Any, Any]:
    """Run ``cell`` over the time steps of ``inputs`` (``[batch, time, ...]``, or
    ``[time, batch, ...]`` with ``time_major``); returns ``(outputs, final_states)``, the
    outputs stacked over time in the inputs' layout.

    Args:
        cell: an ``RNNCell``.
        inputs: a Variable (or nested structure of them) with a time dim (-1: known when
            the program runs).
        initial_states: default ``cell.get_initial_states(batch_ref=inputs)``.
        sequence_length: int64 ``[batch]`` lengths; past its length a sequence keeps its
            state (its outputs there are what the cell computed, as in Fluid).
        is_reverse: run from the last step to the first.
        kwargs: passed to ``cell.call``.
    """
    from . import index, nn, sequence, shapes, static_rnn, tensor

    if not isinstance(cell, RNNCell):
        raise TypeError(f"rnn: cell must be an RNNCell, got {type(cell).__name__}")
    for x in flatten(inputs):
        if not isinstance(x, Variable):
            raise TypeError(f"rnn: inputs must be Variables, got {type(x).__name__}")
    if initial_states is None:
        # NOTE: Fluid 1.6 reads the batch size from dim 0 even for time-major inputs (the
        # time steps); the batch is dim 1 there
        initial_states = cell.get_initial_states(batch_ref=inputs,
                                                 batch_dim_idx=1 if time_major else 0)
    for s in flatten(initial_states):
        s.stop_gradient = False

    def batch_time_swap(x: Variable) -> Variable:
        return tensor.transpose(x, [1, 0] + list(range(2, len(x.shape))))

    if not time_major:
        inputs = map_structure(batch_time_swap, inputs)
    # -1: the number of steps is known when the program runs (the StaticRNN is then one
    # recurrent op, as Fluid's)
    steps = int(flatten(inputs)[0].shape[0])
    mask = None
    if sequence_length is not None:
        maxlen = steps if steps > 0 else index.slice(
            shapes.shape(flatten(inputs)[0]), axes=[0], starts=[0], ends=[1])
        mask = tensor.transpose(sequence.sequence_mask(sequence_length, maxlen=maxlen,
                                           dtype=flatten(initial_states)[0].dtype), [1, 0])
    if is_reverse:
        inputs = map_structure(lambda x: shapes.reverse(x, axis=[0]), inputs)
        mask = shapes.reverse(mask, axis=[0]) if mask is not None else None

    loop = static_rnn.StaticRNN()
    with loop.step():
        step_inputs = map_structure(loop.step_input, inputs)
        states = map_structure(lambda s: loop.memory(init=s), initial_states)
        outputs, new_states = cell.call(step_inputs, states, **kwargs)
        if len(flatten(new_states)) != len(flatten(states)):
            raise ValueError("rnn: the cell's new states differ in structure from its states")
        if mask is not None:
            step_mask = loop.step_input(mask)
            # a step past the sequence's end keeps the previous state
            new_states = map_structure(
                lambda old, new: nn.elementwise_mul(new, step_mask, axis=0)
                - nn.elementwise_mul(old, step_mask - 1, axis=0), states, new_states)
        map_structure(loop.update_memory, states, new_states)
        flat_outputs = flatten(outputs)
        for o in flat_outputs:
            loop.step_output(o)
        for s in flatten(new_states):
            loop.step_output(s)
    out = loop()
    out = out if isinstance(out, list) else [out]
    final_outputs = pack_sequence_as(outputs, out[:len(flat_outputs)])
    final_states = pack_sequence_as(new_states, [
        tensor.squeeze(index.slice(s, axes=[0], starts=[steps - 1 if steps > 0 else -1],
                                   ends=[steps if steps > 0 else 2 ** 31 - 1]), [0])
        for s in out[len(flat_outputs):]])
    if is_reverse:
        final_outputs = map_structure(lambda x: shapes.reverse(x, axis=[0]), final_outputs)
    if not time_major:
        final_outputs = map_structure(batch_time_swap, final_outputs)
    return final_outputs, final_states
