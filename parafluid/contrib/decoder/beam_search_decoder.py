"""RNN decoders written once for both phases of a sequence-to-sequence model.

A ``StateCell`` names its step inputs and hidden states and holds one ``state_updater``
function, the cell's computation. The same cell then runs in

- a ``TrainingDecoder``: a ``DynamicRNN`` over the target sequences, each hidden state a
  memory of the RNN (reordered by length when ``InitState(need_reorder=True)``);
- a ``BeamSearchDecoder``: a ``While`` loop of at most ``max_len`` steps; each hidden state,
  and each value given to ``read_array``, lives in a tensor array indexed by the step, and
  ``beam_search`` / ``beam_search_decode`` pick and assemble the sentences.

Example::

    cell = StateCell(inputs={"x": None}, states={"h": InitState(init=context,
                                                                need_reorder=True)},
                     out_state="h")

    @cell.state_updater
    def updater(cell):
        h = fluid.layers.fc(input=[cell.get_state("h"), cell.get_input("x")], size=32,
                            act="tanh")
        cell.set_state("h", h)

    decoder = TrainingDecoder(cell)
    with decoder.block():
        word = decoder.step_input(target_embedding)
        decoder.state_cell.compute_state(inputs={"x": word})
        decoder.state_cell.update_states()
        decoder.output(fluid.layers.fc(decoder.state_cell.get_state("h"), size=V,
                                       act="softmax"))
    probs = decoder()
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from ... import layers, unique_name
from ...dtypes import VarType
from ...framework import Variable, default_main_program

__all__ = ["InitState", "StateCell", "TrainingDecoder", "BeamSearchDecoder"]

_TRAINING, _BEAM_SEARCH = 1, 2


class InitState:
    """The initial value of a hidden state of a ``StateCell``.

    Args:
        init: the initial variable; if None, a ``[batch, *shape[1:]]`` tensor filled with
            ``value`` whose batch size is ``init_boot``'s.
        shape, value, init_boot, dtype: how to build it when ``init`` is None.
        need_reorder: reorder the rows like the training decoder's sequences (by length);
            set it when the batch holds more than one sequence.

    Example::

        h0 = InitState(init=encoder_last_step, need_reorder=True)
        c0 = InitState(init_boot=encoder_last_step, shape=[-1, 32], value=0.0)
    """

    def __init__(self, init: Variable | None = None, shape: list[int] | None = None,
                 value: float = 0.0, init_boot: Variable | None = None,
                 need_reorder: bool = False, dtype: Any = "float32") -> None:
        if init is not None:
            self._init = init
        elif init_boot is None:
            raise ValueError("InitState: give init, or init_boot (whose batch size the "
                             "constant initial state takes) with shape and value")
        else:
            if shape is None:
                raise ValueError("InitState: shape is needed to build the initial state "
                                 "from init_boot")
            self._init = layers.fill_constant_batch_size_like(
                input=init_boot, value=value, shape=list(shape), dtype=dtype)
        self._shape = shape
        self._value = value
        self._need_reorder = need_reorder
        self._dtype = dtype

    @property
    def value(self) -> Variable:
        return self._init

    @property
    def need_reorder(self) -> bool:
        return self._need_reorder


def _new_array(block: Any, prefix: str, dtype: Any) -> Variable:
    """An empty tensor array created in ``block`` (the block around the decoder's loop)."""
    array = block.create_var(name=unique_name.generate(prefix), type=VarType.LOD_TENSOR_ARRAY,
                             dtype=dtype)
    block.append_op("create_array", outputs={"Out": [array]}, attrs={"dtype": array.dtype})
    return array


def _write_in(block: Any, x: Variable, i: Variable, array: Variable) -> None:
    """``array[i] = x`` appended to ``block`` (the block around the decoder's loop)."""
    if array.shape is None:
        array.shape = x.shape  # the element shape, so that reads have one at build time
    block.append_op("write_to_array", inputs={"X": [x], "I": [i], "Array": [array]},
                    outputs={"Out": [array]})


class _MemoryState:
    """A hidden state of a training decoder: a memory of its DynamicRNN."""

    def __init__(self, rnn: Any, init_state: InitState) -> None:
        self._rnn = rnn
        self._mem = rnn.memory(init=init_state.value, need_reorder=init_state.need_reorder)

    def get_state(self) -> Variable:
        return self._mem

    def update_state(self, state: Variable) -> None:
        self._rnn.update_memory(self._mem, state)


class _ArrayState:
    """A hidden state of a beam-search decoder: a tensor array and its own step counter,
    both set up in the block around the decoder's loop."""

    def __init__(self, block: Any, init_state: InitState) -> None:
        self._array = _new_array(block, "array_state_array", init_state.value.dtype)
        self._counter = block.create_var(name=unique_name.generate("array_state_counter"),
                                         type=VarType.LOD_TENSOR, dtype="int64", shape=[1],
                                         stop_gradient=True)
        block.append_op("fill_constant", outputs={"Out": [self._counter]},
                        attrs={"shape": [1], "dtype": "int64", "value": 0.0,
                               "force_cpu": True})
        _write_in(block, init_state.value, self._counter, self._array)

    def get_state(self) -> Variable:
        return layers.array_read(array=self._array, i=self._counter)

    def update_state(self, state: Variable) -> None:
        layers.increment(x=self._counter, value=1, in_place=True)
        layers.array_write(state, array=self._array, i=self._counter)


class StateCell:
    """The step inputs and hidden states of an RNN cell, and the function updating them.

    Args:
        inputs: ``{name: Variable or None}``, the step inputs (None: given later through
            ``compute_state``).
        states: ``{name: InitState}``, the hidden states.
        out_state: the state a beam-search decoder scores words from.
        name: a name for the cell.

    Example::

        cell = StateCell(inputs={"x": None}, states={"h": InitState(init=ctx)},
                         out_state="h")
    """

    def __init__(self, inputs: dict[str, Variable | None], states: dict[str, InitState],
                 out_state: str, name: str | None = None) -> None:
        self._name = name
        self._cur_states: dict[str, Any] = {}
        self._state_names: list[str] = []
        for state_name, state in states.items():
            if not isinstance(state, InitState):
                raise ValueError(f"StateCell: state {state_name!r} must be an InitState, got "
                                 f"{type(state).__name__}")
            self._cur_states[state_name] = state
            self._state_names.append(state_name)
        self._inputs = dict(inputs)
        self._cur_decoder_obj: Any = None
        self._in_decoder = False
        self._states_holder: dict[str, dict[int, Any]] = {}
        self._switched_decoder = False
        self._state_updater: Callable[[StateCell], None] | None = None
        self._out_state = out_state
        if out_state not in self._cur_states:
            raise ValueError(f"StateCell: out_state {out_state!r} is not one of the states "
                             f"{self._state_names}")

    def _enter_decoder(self, decoder: Any) -> None:
        if self._in_decoder or self._cur_decoder_obj is not None:
            raise ValueError("StateCell: the cell is already in a decoder; build a decoder's "
                             "block completely before creating the next decoder")
        self._in_decoder = True
        self._cur_decoder_obj = decoder
        self._switched_decoder = False

    def _leave_decoder(self, decoder: Any) -> None:
        if not self._in_decoder or self._cur_decoder_obj is not decoder:
            raise ValueError("StateCell: leaving a decoder the cell is not in")
        self._in_decoder = False
        self._cur_decoder_obj = None
        self._switched_decoder = False

    def _switch_decoder(self) -> None:
        """Bind each state to the current decoder (a memory or an array) and read it."""
        if not self._in_decoder:
            raise ValueError("StateCell: the cell must be used inside a decoder's block")
        if self._switched_decoder:
            raise ValueError("StateCell: the states are already bound to this decoder")
        decoder = self._cur_decoder_obj
        for state_name in self._state_names:
            holders = self._states_holder.setdefault(state_name, {})
            if id(decoder) not in holders:
                state = self._cur_states[state_name]
                if not isinstance(state, InitState):
                    raise ValueError(f"StateCell: state {state_name!r} is "
                                     f"{type(state).__name__}, expected its InitState")
                if decoder.type == _TRAINING:
                    holders[id(decoder)] = _MemoryState(decoder.dynamic_rnn, state)
                elif decoder.type == _BEAM_SEARCH:
                    holders[id(decoder)] = _ArrayState(decoder._parent_block(), state)
                else:
                    raise ValueError(f"StateCell: unknown decoder type {decoder.type!r}")
            self._cur_states[state_name] = holders[id(decoder)].get_state()
        self._switched_decoder = True

    def get_state(self, state_name: str) -> Variable:
        """The current value of hidden state ``state_name``."""
        if self._in_decoder and not self._switched_decoder:
            self._switch_decoder()
        if state_name not in self._cur_states:
            raise ValueError(f"StateCell: unknown state {state_name!r}; states are "
                             f"{self._state_names}")
        return self._cur_states[state_name]

    def get_input(self, input_name: str) -> Variable:
        """The current value of step input ``input_name``."""
        if self._inputs.get(input_name) is None:
            raise ValueError(f"StateCell: input {input_name!r} is not set; inputs are "
                             f"{list(self._inputs)} (give it to compute_state)")
        return self._inputs[input_name]

    def set_state(self, state_name: str, state_value: Variable) -> None:
        """Make ``state_value`` the current value of hidden state ``state_name``."""
        self._cur_states[state_name] = state_value

    def state_updater(self, updater: Callable[[StateCell], None]
                      ) -> Callable[[StateCell], None]:
        """Set the function ``updater(cell)`` computing the new states from ``get_input``
        and ``get_state`` with ``set_state``; usable as a decorator."""
        self._state_updater = updater
        return updater

    def compute_state(self, inputs: dict[str, Variable]) -> None:
        """Give the step inputs and run the updater.

        Example::

            cell.compute_state(inputs={"x": current_word})
        """
        if self._in_decoder and not self._switched_decoder:
            self._switch_decoder()
        for input_name, value in inputs.items():
            if input_name not in self._inputs:
                raise ValueError(f"StateCell: unknown input {input_name!r}; inputs are "
                                 f"{list(self._inputs)}")
            self._inputs[input_name] = value
        if self._state_updater is None:
            raise ValueError("StateCell: no state_updater set; decorate the cell's update "
                             "function with @cell.state_updater")
        self._state_updater(self)

    def update_states(self) -> None:
        """Record the current states as the states of the next step."""
        if self._in_decoder and not self._switched_decoder:
            self._switch_decoder()
        for state_name, holders in self._states_holder.items():
            if id(self._cur_decoder_obj) not in holders:
                raise ValueError("StateCell: update_states outside the decoder the states "
                                 "are bound to")
            holders[id(self._cur_decoder_obj)].update_state(self._cur_states[state_name])

    def out_state(self) -> Variable:
        """The value of the ``out_state`` state (call after ``compute_state``)."""
        return self._cur_states[self._out_state]


class TrainingDecoder:
    """A decoder over target sequences for training: a ``DynamicRNN`` whose hidden states
    are the ``StateCell``'s.

    Example::

        decoder = TrainingDecoder(state_cell)
        with decoder.block():
            word = decoder.step_input(trg_embedding)
            decoder.state_cell.compute_state(inputs={"x": word})
            score = fluid.layers.fc(decoder.state_cell.get_state("h"), size=V, act="softmax")
            decoder.state_cell.update_states()
            decoder.output(score)
        probs = decoder()
    """

    BEFORE_DECODER, IN_DECODER, AFTER_DECODER = 0, 1, 2

    def __init__(self, state_cell: StateCell, name: str | None = None) -> None:
        self._name = name
        self._status = TrainingDecoder.BEFORE_DECODER
        self._dynamic_rnn = layers.DynamicRNN(name=name)
        self._type = _TRAINING
        self._state_cell = state_cell
        self._state_cell._enter_decoder(self)

    @contextlib.contextmanager
    def block(self) -> Iterator[None]:
        """The per-step computation of the decoder (entered once)."""
        if self._status != TrainingDecoder.BEFORE_DECODER:
            raise ValueError("TrainingDecoder: block() can only be entered once")
        self._status = TrainingDecoder.IN_DECODER
        with self._dynamic_rnn.block():
            yield
        self._status = TrainingDecoder.AFTER_DECODER
        self._state_cell._leave_decoder(self)

    @property
    def state_cell(self) -> StateCell:
        self._assert_in_decoder_block("state_cell")
        return self._state_cell

    @property
    def dynamic_rnn(self) -> Any:
        return self._dynamic_rnn

    @property
    def type(self) -> int:
        return self._type

    def step_input(self, x: Variable) -> Variable:
        """``x``'s row of the current step (a LoD sequence input, one step per word)."""
        self._assert_in_decoder_block("step_input")
        return self._dynamic_rnn.step_input(x)

    def static_input(self, x: Variable) -> Variable:
        """``x`` whole at every step (reordered like the sequences)."""
        self._assert_in_decoder_block("static_input")
        return self._dynamic_rnn.static_input(x)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """The outputs given to ``output``, as LoD sequences (after the block)."""
        if self._status != TrainingDecoder.AFTER_DECODER:
            raise ValueError("TrainingDecoder: the outputs can only be read after the block")
        return self._dynamic_rnn(*args, **kwargs)

    def output(self, *outputs: Variable) -> None:
        """Mark the per-step values collected into the decoder's outputs."""
        self._assert_in_decoder_block("output")
        self._dynamic_rnn.output(*outputs)

    def _assert_in_decoder_block(self, method: str) -> None:
        if self._status != TrainingDecoder.IN_DECODER:
            raise ValueError(f"TrainingDecoder: {method} must be used inside the decoder's "
                             f"block()")


class BeamSearchDecoder:
    """A beam-search decoder for inference: a ``While`` loop of at most ``max_len`` steps
    over the ``StateCell``, with ``beam_search`` choosing ``beam_size`` prefixes per source.

    Args:
        state_cell: the cell (the same one a ``TrainingDecoder`` trained, or one built alike).
        init_ids, init_scores: the start words and their scores, 2-level LoD tensors (one
            source per top-level sequence).
        target_dict_dim, word_dim: vocabulary size and word embedding width (``decode``).
        input_var_dict: ``{cell input name: Variable}`` read per step (``decode``).
        topk_size: candidates per prefix (``decode``).
        sparse_emb: sparse embedding gradients (``decode``).
        max_len: the most steps.
        beam_size: prefixes kept per source.
        end_id: the end-of-sentence id.
        name: a name for the decoder.

    Example::

        decoder = BeamSearchDecoder(cell, init_ids, init_scores, target_dict_dim=V,
                                    word_dim=16, max_len=8, beam_size=2, end_id=1)
        decoder.decode()
        translation_ids, translation_scores = decoder()
    """

    BEFORE_BEAM_SEARCH_DECODER, IN_BEAM_SEARCH_DECODER, AFTER_BEAM_SEARCH_DECODER = 0, 1, 2

    def __init__(self, state_cell: StateCell, init_ids: Variable, init_scores: Variable,
                 target_dict_dim: int, word_dim: int,
                 input_var_dict: dict[str, Variable] | None = None, topk_size: int = 50,
                 sparse_emb: bool = True, max_len: int = 100, beam_size: int = 1,
                 end_id: int = 1, name: str | None = None) -> None:
        self._name = name
        self._counter = layers.zeros(shape=[1], dtype="int64")
        self._counter.stop_gradient = True
        self._type = _BEAM_SEARCH
        self._max_len = layers.fill_constant(shape=[1], dtype="int64", value=max_len)
        self._cond = layers.less_than(x=self._counter, y=self._max_len)
        self._while_op = layers.While(self._cond)
        self._state_cell = state_cell
        self._state_cell._enter_decoder(self)
        self._status = BeamSearchDecoder.BEFORE_BEAM_SEARCH_DECODER
        self._zero_idx = layers.fill_constant(shape=[1], value=0, dtype="int64",
                                              force_cpu=True)
        self._array_dict: dict[str, Variable] = {}
        self._array_link: list[tuple[Variable, Variable]] = []
        self._ids_array: Variable | None = None
        self._scores_array: Variable | None = None
        self._beam_size = beam_size
        self._end_id = end_id
        self._init_ids = init_ids
        self._init_scores = init_scores
        self._target_dict_dim = target_dict_dim
        self._topk_size = topk_size
        self._sparse_emb = sparse_emb
        self._word_dim = word_dim
        self._input_var_dict = dict(input_var_dict or {})

    @contextlib.contextmanager
    def block(self) -> Iterator[None]:
        """The per-step computation (entered once). After it, while the loop goes on, the
        step counter advances and each ``update_array`` value is written for the next
        step's ``read_array``."""
        if self._status != BeamSearchDecoder.BEFORE_BEAM_SEARCH_DECODER:
            raise ValueError("BeamSearchDecoder: block() can only be entered once")
        self._status = BeamSearchDecoder.IN_BEAM_SEARCH_DECODER
        with self._while_op.block():
            yield
            with layers.Switch() as switch:
                with switch.case(self._cond):
                    layers.increment(x=self._counter, value=1.0, in_place=True)
                    for value, array in self._array_link:
                        layers.array_write(x=value, i=self._counter, array=array)
                    layers.less_than(x=self._counter, y=self._max_len, cond=self._cond)
        self._status = BeamSearchDecoder.AFTER_BEAM_SEARCH_DECODER
        self._state_cell._leave_decoder(self)

    @property
    def type(self) -> int:
        return self._type

    def early_stop(self) -> None:
        """End the loop after this step (the step's values are not recorded)."""
        layers.fill_constant(shape=[1], value=0, dtype="bool", force_cpu=True, out=self._cond)

    def decode(self) -> None:
        """Build the standard step: embed the previous words, run the cell, score the
        vocabulary with a softmax ``fc`` of ``out_state``, keep ``topk_size`` candidates
        per prefix and let ``beam_search`` choose; stop when every sentence has ended."""
        with self.block():
            prev_ids = self.read_array(init=self._init_ids, is_ids=True)
            prev_scores = self.read_array(init=self._init_scores, is_scores=True)
            prev_ids_embedding = layers.embedding(
                input=prev_ids, size=[self._target_dict_dim, self._word_dim],
                dtype="float32", is_sparse=self._sparse_emb)
            feed_dict, update_dict = {}, {}
            for init_var_name, init_var in self._input_var_dict.items():
                if init_var_name not in self.state_cell._inputs:
                    raise ValueError(f"BeamSearchDecoder: input_var_dict names "
                                     f"{init_var_name!r}, which is not an input of the "
                                     f"StateCell ({list(self.state_cell._inputs)})")
                read_var = self.read_array(init=init_var)
                update_dict[init_var_name] = read_var
                feed_dict[init_var_name] = layers.sequence_expand(read_var, prev_scores)
            for state_name in self._state_cell._state_names:
                prev_state = self.state_cell.get_state(state_name)
                self.state_cell.set_state(state_name,
                                          layers.sequence_expand(prev_state, prev_scores))
            for input_name in self._state_cell._inputs:
                if input_name not in feed_dict:
                    feed_dict[input_name] = prev_ids_embedding
            self.state_cell.compute_state(inputs=feed_dict)
            current_state = self.state_cell.out_state()
            current_state_with_lod = layers.lod_reset(x=current_state, y=prev_scores)
            scores = layers.fc(input=current_state_with_lod, size=self._target_dict_dim,
                               act="softmax")
            topk_scores, topk_indices = layers.topk(scores, k=self._topk_size)
            accu_scores = layers.elementwise_add(x=layers.log(topk_scores),
                                                 y=layers.reshape(prev_scores, shape=[-1]),
                                                 axis=0)
            selected_ids, selected_scores = layers.beam_search(
                prev_ids, prev_scores, topk_indices, accu_scores, self._beam_size,
                end_id=self._end_id, level=0)
            with layers.Switch() as switch:
                with switch.case(layers.is_empty(selected_ids)):
                    self.early_stop()
                with switch.default():
                    self.state_cell.update_states()
                    self.update_array(prev_ids, selected_ids)
                    self.update_array(prev_scores, selected_scores)
                    for update_name, var_to_update in update_dict.items():
                        self.update_array(var_to_update, feed_dict[update_name])

    def read_array(self, init: Variable, is_ids: bool = False,
                   is_scores: bool = False) -> Variable:
        """This step's value of an array that starts as ``init`` and takes the value given
        to ``update_array`` after each step. Mark the ids and the scores array (what the
        decoder's result is assembled from) with ``is_ids`` / ``is_scores``."""
        self._assert_in_decoder_block("read_array")
        if is_ids and is_scores:
            raise ValueError("BeamSearchDecoder.read_array: an array cannot be both the ids "
                             "and the scores array")
        if not isinstance(init, Variable):
            raise TypeError(f"BeamSearchDecoder.read_array: init must be a Variable, got "
                            f"{type(init).__name__}")
        parent_block = self._parent_block()
        array = _new_array(parent_block, "beam_search_decoder_array", init.dtype)
        _write_in(parent_block, init, self._zero_idx, array)
        if is_ids:
            self._ids_array = array
        elif is_scores:
            self._scores_array = array
        read_value = layers.array_read(array=array, i=self._counter)
        self._array_dict[read_value.name] = array
        return read_value

    def update_array(self, array: Variable, value: Variable) -> None:
        """Record ``value`` as the next step's value of ``array`` (a ``read_array``
        result)."""
        self._assert_in_decoder_block("update_array")
        if not isinstance(array, Variable) or not isinstance(value, Variable):
            raise TypeError(f"BeamSearchDecoder.update_array: array and value must be "
                            f"Variables, got {type(array).__name__} and "
                            f"{type(value).__name__}")
        target = self._array_dict.get(array.name)
        if target is None:
            raise ValueError(f"BeamSearchDecoder.update_array: {array.name} is not a "
                             f"read_array result; call read_array first")
        self._array_link.append((value, target))

    def __call__(self) -> tuple[Variable, Variable]:
        """``(translation_ids, translation_scores)`` of ``beam_search_decode`` (after the
        block): per source, ``beam_size`` sentences, best first."""
        if self._status != BeamSearchDecoder.AFTER_BEAM_SEARCH_DECODER:
            raise ValueError("BeamSearchDecoder: the result can only be read after the block")
        if self._ids_array is None or self._scores_array is None:
            raise ValueError("BeamSearchDecoder: mark the ids and scores arrays with "
                             "read_array(..., is_ids=True) / read_array(..., is_scores=True)")
        return layers.beam_search_decode(ids=self._ids_array, scores=self._scores_array,
                                         beam_size=self._beam_size, end_id=self._end_id)

    @property
    def state_cell(self) -> StateCell:
        self._assert_in_decoder_block("state_cell")
        return self._state_cell

    def _parent_block(self) -> Any:
        program = default_main_program()
        parent_idx = program.current_block().parent_idx
        if parent_idx < 0:
            raise ValueError("BeamSearchDecoder: must be used inside its block()")
        return program.block(parent_idx)

    def _assert_in_decoder_block(self, method: str) -> None:
        if self._status != BeamSearchDecoder.IN_BEAM_SEARCH_DECODER:
            raise ValueError(f"BeamSearchDecoder: {method} must be used inside the decoder's "
                             f"block()")
