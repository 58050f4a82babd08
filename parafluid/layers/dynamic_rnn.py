"""``DynamicRNN``: a recurrence over the sequences of a LoD input, built as Fluid 1.6 builds
it: a rank table orders the sequences longest first, ``lod_tensor_to_array`` gives step t
the rows of the sequences longer than t, memories live in tensor arrays and are shrunk to
the sequences still running (``shrink_rnn_memory``), a ``While`` runs the step, and
``array_to_lod_tensor`` puts the step outputs back in sequence order with the input's LoD.

The gradient is the ordinary backward of those ops (the rank-table ops, the array ops and
``while_grad`` have gradients).

Example::

    drnn = fluid.layers.DynamicRNN()
    with drnn.block():
        word = drnn.step_input(sentence)           # sentence: LoD [tokens, D]
        prev = drnn.memory(shape=[8])
        hidden = fluid.layers.fc(input=[word, prev], size=8, act="tanh")
        drnn.update_memory(prev, hidden)
        drnn.output(hidden)
    out = drnn()                                   # [tokens, 8], the LoD of sentence
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from ..dtypes import VarType
from ..framework import Block, Variable, default_main_program
from ..layer_helper import LayerHelper
from .control_flow import While, array_read, array_write, create_array, increment
from .index import less_than
from .tensor import fill_constant

__all__ = ["DynamicRNN"]


class DynamicRNN:
    """See the module docstring; the methods are Fluid's (``block``, ``step_input``,
    ``memory``, ``update_memory``, ``output``, ``static_input``, ``__call__``)."""

    BEFORE_RNN, IN_RNN, AFTER_RNN = 0, 1, 2

    def __init__(self, name: str | None = None) -> None:
        self.helper = LayerHelper("dynamic_rnn", name=name)
        self.status = DynamicRNN.BEFORE_RNN
        self.lod_rank_table: Variable | None = None
        self.max_seq_len: Variable | None = None
        self.step_idx: Variable | None = None
        self.zero_idx: Variable | None = None
        self.mem_link: list[tuple[Variable, Variable]] = []
        self.mem_dict: dict[str, Variable] = {}
        self.input_array: list[Variable] = []
        self.output_array: list[Variable] = []
        self.output_lod_levels: list[int] = []
        self.outputs: list[Variable] = []
        self.cond = self.helper.create_variable_for_type_inference("bool")
        self.cond.stop_gradient = True
        self.while_op = While(self.cond)

    def _parent_block(self) -> Block:
        program = default_main_program()
        return program.block(program.current_block().parent_idx)

    @contextlib.contextmanager
    def _in_parent(self) -> Iterator[None]:
        program = default_main_program()
        here = program.current_block_idx
        program.current_block_idx = self._parent_block().idx
        try:
            yield
        finally:
            program.current_block_idx = here

    @contextlib.contextmanager
    def block(self) -> Iterator[None]:
        if self.status != DynamicRNN.BEFORE_RNN:
            raise ValueError("DynamicRNN.block() can be entered once")
        self.step_idx = fill_constant(shape=[1], dtype="int64", value=0, force_cpu=True)
        self.zero_idx = fill_constant(shape=[1], dtype="int64", value=0, force_cpu=True)
        self.status = DynamicRNN.IN_RNN
        with self.while_op.block():
            yield
            if self.lod_rank_table is None:
                raise ValueError("DynamicRNN: the block has no step_input")
            increment(x=self.step_idx, value=1.0, in_place=True)
            for new_mem, mem_array in self.mem_link:
                array_write(x=new_mem, i=self.step_idx, array=mem_array)
            less_than(x=self.step_idx, y=self.max_seq_len, force_cpu=True, cond=self.cond)
        self.status = DynamicRNN.AFTER_RNN
        for arr, level in zip(self.output_array, self.output_lod_levels):
            out = self.helper.create_variable_for_type_inference(arr.dtype)
            out.lod_level = level + 1  # the steps of each sequence, then the items' own LoD
            self.helper.append_op("array_to_lod_tensor",
                                  inputs={"X": [arr], "RankTable": [self.lod_rank_table]},
                                  outputs={"Out": [out]})
            self.outputs.append(out)

    def _assert_in_rnn(self, method: str) -> None:
        if self.status != DynamicRNN.IN_RNN:
            raise ValueError(f"DynamicRNN.{method} must be called inside 'with drnn.block():'")

    def step_input(self, x: Variable, level: int = 0) -> Variable:
        """The rows of step t of the sequences of ``x`` (those longer than t)."""
        self._assert_in_rnn("step_input")
        if not isinstance(x, Variable):
            raise TypeError(f"DynamicRNN.step_input: x must be a Variable, got "
                            f"{type(x).__name__}")
        with self._in_parent():
            if self.lod_rank_table is None:
                self.lod_rank_table = self.helper.create_variable_for_type_inference("int64")
                self.helper.append_op("lod_rank_table", inputs={"X": [x]},
                                      outputs={"Out": [self.lod_rank_table]},
                                      attrs={"level": level})
                self.max_seq_len = self.helper.create_variable_for_type_inference("int64")
                self.helper.append_op("max_sequence_len",
                                      inputs={"RankTable": [self.lod_rank_table]},
                                      outputs={"Out": [self.max_seq_len]})
                self.helper.append_op("less_than", inputs={"X": [self.step_idx],
                                                           "Y": [self.max_seq_len]},
                                      outputs={"Out": [self.cond]}, attrs={"force_cpu": True})
            arr = self.helper.create_variable(
                name=f"{self.helper.name}.input_{len(self.input_array)}",
                type=VarType.LOD_TENSOR_ARRAY, dtype=x.dtype, shape=x.shape)
            self.helper.append_op("lod_tensor_to_array",
                                  inputs={"X": [x], "RankTable": [self.lod_rank_table]},
                                  outputs={"Out": [arr]})
        self.input_array.append(arr)
        step = array_read(array=arr, i=self.step_idx)
        # NOTE: a step of a nested sequence is a whole sub-sequence: one LoD level less
        step.lod_level = max(x.lod_level - 1, 0)
        return step

    def static_input(self, x: Variable) -> Variable:
        """``x`` as seen by each step, as Fluid 1.6's: its items (one row per sequence, or
        one sequence per sequence of the step input when ``x`` has LoD) put in rank order
        (``reorder_lod_tensor_by_rank``) and cut to the sequences still running
        (``shrink_rnn_memory``; a LoD ``x`` keeps its sequences whole). Gradients flow back
        to ``x``. Call it after a ``step_input``."""
        self._assert_in_rnn("static_input")
        if not isinstance(x, Variable):
            raise TypeError(f"DynamicRNN.static_input: x must be a Variable, got "
                            f"{type(x).__name__}")
        if self.lod_rank_table is None:
            raise RuntimeError("DynamicRNN.static_input must be called after step_input")
        with self._in_parent():
            reordered = self.helper.create_variable_for_type_inference(x.dtype)
            reordered.lod_level = x.lod_level
            self.helper.append_op("reorder_lod_tensor_by_rank",
                                  inputs={"X": [x], "RankTable": [self.lod_rank_table]},
                                  outputs={"Out": [reordered]})
        out = self.helper.create_variable_for_type_inference(x.dtype)
        out.lod_level = x.lod_level
        self.helper.append_op("shrink_rnn_memory",
                              inputs={"X": [reordered], "RankTable": [self.lod_rank_table],
                                      "I": [self.step_idx]},
                              outputs={"Out": [out]})
        return out

    def memory(self, init: Variable | None = None, shape: list[int] | None = None,
               value: float = 0.0, need_reorder: bool = False,
               dtype: Any = "float32") -> Variable:
        """A value carried across steps, shrunk to the sequences still running: ``init``
        (one row per sequence; ``need_reorder`` puts its rows in rank order), or ``value``
        in ``[batch] + shape``."""
        self._assert_in_rnn("memory")
        with self._in_parent():
            if init is None:
                if shape is None or not self.input_array:
                    raise ValueError("DynamicRNN.memory: give init, or shape after a "
                                     "step_input")
                first = self.helper.create_variable_for_type_inference(self.input_array[0].dtype)
                self.helper.append_op("read_from_array",
                                      inputs={"X": [self.input_array[0]], "I": [self.zero_idx]},
                                      outputs={"Out": [first]})
                init = self.helper.create_variable_for_type_inference(dtype)
                self.helper.append_op("fill_constant_batch_size_like",
                                      inputs={"Input": [first]}, outputs={"Out": [init]},
                                      attrs={"shape": [-1, *shape], "value": float(value),
                                             "dtype": init.dtype})
            elif need_reorder:
                reordered = self.helper.create_variable_for_type_inference(init.dtype)
                self.helper.append_op("reorder_lod_tensor_by_rank",
                                      inputs={"X": [init], "RankTable": [self.lod_rank_table]},
                                      outputs={"Out": [reordered]})
                init = reordered
            mem_array = create_array(init.dtype)
            array_write(init, i=self.zero_idx, array=mem_array)
        retv = array_read(array=mem_array, i=self.step_idx)
        out = self.helper.create_variable_for_type_inference(retv.dtype)
        self.helper.append_op("shrink_rnn_memory",
                              inputs={"X": [retv], "RankTable": [self.lod_rank_table],
                                      "I": [self.step_idx]},
                              outputs={"Out": [out]})
        self.mem_dict[out.name] = mem_array
        return out

    def update_memory(self, ex_mem: Variable, new_mem: Variable) -> None:
        self._assert_in_rnn("update_memory")
        mem_array = self.mem_dict.get(ex_mem.name)
        if mem_array is None:
            raise ValueError(f"DynamicRNN.update_memory: {ex_mem.name!r} is not a memory of "
                             "this DynamicRNN (make it with drnn.memory)")
        self.mem_link.append((new_mem, mem_array))

    def output(self, *outputs: Variable) -> None:
        self._assert_in_rnn("output")
        for o in outputs:
            with self._in_parent():
                arr = create_array(o.dtype)
            array_write(x=o, i=self.step_idx, array=arr)
            self.output_array.append(arr)
            self.output_lod_levels.append(o.lod_level)

    def __call__(self, *args: Any, **kwargs: Any) -> Variable | list[Variable]:
        if self.status != DynamicRNN.AFTER_RNN:
            raise ValueError("DynamicRNN() must be called after its block")
        return self.outputs[0] if len(self.outputs) == 1 else list(self.outputs)
