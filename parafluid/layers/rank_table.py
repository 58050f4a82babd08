"""The LoD rank-table layers of Fluid's ``layers/control_flow.py``: what ``DynamicRNN`` is
built from, callable on their own (``fluid.layers.control_flow.lod_rank_table``).

A rank table lists the sequences of a LoD level longest first (``[index, length]`` rows);
``lod_tensor_to_array`` cuts a LoD tensor into per-step slices in that order and
``array_to_lod_tensor`` puts them back.

Example::

    table = fluid.layers.control_flow.lod_rank_table(words, level=0)
    steps = fluid.layers.control_flow.max_sequence_len(table)        # int64 [1]
    arr = fluid.layers.control_flow.lod_tensor_to_array(words, table)
    same = fluid.layers.control_flow.array_to_lod_tensor(arr, table)  # == words
"""

from __future__ import annotations

from ..dtypes import VarType
from ..framework import Variable
from ..layer_helper import LayerHelper

__all__ = ["lod_rank_table", "max_sequence_len", "lod_tensor_to_array", "array_to_lod_tensor",
           "shrink_memory", "reorder_lod_tensor_by_rank"]


def _check(layer: str, **args: object) -> None:
    for arg, value in args.items():
        if not isinstance(value, Variable):
            raise TypeError(f"{layer}: {arg} must be a Variable, got {type(value).__name__}")


def lod_rank_table(x: Variable, level: int = 0) -> Variable:
    """The rank table of LoD ``level`` of ``x``: int64 ``[index, length]`` rows, longest first
    (ties keep their order)."""
    _check("lod_rank_table", x=x)
    helper = LayerHelper("lod_rank_table")
    table = helper.create_variable_for_type_inference("int64", stop_gradient=True)
    helper.append_op("lod_rank_table", inputs={"X": [x]}, outputs={"Out": [table]},
                     attrs={"level": int(level)})
    return table


def max_sequence_len(rank_table: Variable) -> Variable:
    """The longest sequence length of a rank table, int64 ``[1]``."""
    _check("max_sequence_len", rank_table=rank_table)
    helper = LayerHelper("max_sequence_len")
    out = helper.create_variable_for_type_inference("int64", stop_gradient=True)
    helper.append_op("max_sequence_len", inputs={"RankTable": [rank_table]},
                     outputs={"Out": [out]})
    return out


def lod_tensor_to_array(x: Variable, table: Variable) -> Variable:
    """An array whose item ``t`` holds step ``t`` of every sequence longer than ``t``, in
    the table's order."""
    _check("lod_tensor_to_array", x=x, table=table)
    helper = LayerHelper("lod_tensor_to_array")
    array = helper.create_variable(name=helper.name, type=VarType.LOD_TENSOR_ARRAY,
                                   dtype=x.dtype, shape=x.shape)
    helper.append_op("lod_tensor_to_array", inputs={"X": [x], "RankTable": [table]},
                     outputs={"Out": [array]})
    return array


def array_to_lod_tensor(x: Variable, table: Variable) -> Variable:
    """The inverse of ``lod_tensor_to_array``: the LoD tensor in its original order."""
    _check("array_to_lod_tensor", x=x, table=table)
    helper = LayerHelper("array_to_lod_tensor")
    out = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op("array_to_lod_tensor", inputs={"X": [x], "RankTable": [table]},
                     outputs={"Out": [out]})
    return out


def shrink_memory(x: Variable, i: Variable, table: Variable) -> Variable:
    """The first rows of ``x``: one per sequence of ``table`` still running at step ``i``."""
    _check("shrink_memory", x=x, i=i, table=table)
    helper = LayerHelper("shrink_memory")
    out = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op("shrink_rnn_memory", inputs={"X": [x], "RankTable": [table], "I": [i]},
                     outputs={"Out": [out]})
    return out


def reorder_lod_tensor_by_rank(x: Variable, rank_table: Variable) -> Variable:
    """The rows (or sequences) of ``x`` put in the order of ``rank_table``."""
    _check("reorder_lod_tensor_by_rank", x=x, rank_table=rank_table)
    helper = LayerHelper("reorder_lod_tensor_by_rank")
    out = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op("reorder_lod_tensor_by_rank",
                     inputs={"X": [x], "RankTable": [rank_table]}, outputs={"Out": [out]})
    return out
