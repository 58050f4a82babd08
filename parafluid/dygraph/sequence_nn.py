"""``fluid.dygraph.nn``'s layers of LoD sequences, ``SequenceConv`` and ``RowConv`` (Fluid
1.6 has them in ``dygraph/nn.py``, outside its ``__all__``): static mode only, as Fluid's,
since the imperative mode has no LoD.

Example::

    seq = fluid.layers.data(name="seq", shape=[3, 4], dtype="float32", lod_level=1,
                            append_batch_size=False)
    out = fluid.dygraph.nn.SequenceConv("seq_conv", num_filters=2, act="sigmoid")(seq)
"""

from __future__ import annotations

from typing import Any

from .. import layers
from ..framework import Variable, in_dygraph_mode
from .function_layer import FunctionLayer

__all__ = ["SequenceConv", "RowConv"]


class _StaticOnlyError(ValueError, AssertionError):
    """A layer of LoD sequences made in the imperative mode, which has no LoD: a ValueError,
    and the AssertionError Fluid 1.6 raises."""


def _refuse_dygraph(layer: str) -> None:
    if in_dygraph_mode():
        raise _StaticOnlyError(f"{layer}: the imperative mode has no LoD sequences; build "
                               f"{layer} in a Program (outside fluid.dygraph.guard())")


class SequenceConv(FunctionLayer):
    """``fluid.layers.sequence_conv`` as a layer (filter ``weight`` ``[filter_size * D,
    num_filters]``, ``bias``); static mode only, as in Fluid 1.6.

    Example::

        conv = fluid.dygraph.nn.SequenceConv("seq_conv", num_filters=2, act="sigmoid")
        out = conv(seq)        # seq: a LoD variable [steps, D]
    """

    _fluid_names = {"_filter_param": "weight", "_bias_param": "bias"}
    _optional = ("bias",)

    def __init__(self, name_scope: str, num_filters: int, filter_size: int = 3,
                 filter_stride: int = 1, padding: Any = None, bias_attr: Any = None,
                 param_attr: Any = None, act: str | None = None) -> None:
        _refuse_dygraph("SequenceConv")
        super().__init__(name_scope)
        # NOTE: Fluid's layer takes ``padding`` and ignores it (the window is always
        # centred, contextStart = -(filter_size // 2))
        self._args = dict(num_filters=num_filters, filter_size=filter_size,
                          filter_stride=filter_stride, bias_attr=bias_attr,
                          param_attr=param_attr, act=act)

    def forward(self, input: Variable) -> Variable:  # noqa: A002
        return self._call_function(layers.sequence_conv, input, **self._args)


class RowConv(FunctionLayer):
    """``fluid.layers.row_conv`` as a layer (filter ``weight`` ``[future_context_size + 1,
    D]``); static mode only, as in Fluid 1.6.

    Example::

        row_conv = fluid.dygraph.nn.RowConv("row_conv", future_context_size=2)
        out = row_conv(seq)    # seq: a LoD variable [steps, D]
    """

    _fluid_names = {"_filter_param": "weight"}
    _param_names = ("weight",)

    def __init__(self, name_scope: str, future_context_size: int, param_attr: Any = None,
                 act: str | None = None) -> None:
        _refuse_dygraph("RowConv")
        super().__init__(name_scope)
        self._args = dict(future_context_size=future_context_size, param_attr=param_attr,
                          act=act)

    def forward(self, input: Variable) -> Variable:  # noqa: A002
        return self._call_function(layers.row_conv, input, **self._args)
