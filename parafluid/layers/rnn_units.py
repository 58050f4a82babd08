"""Recurrent-unit layers: ``lstm_unit``, ``gru_unit`` (one step) and ``dynamic_lstmp``
(ops in ``parafluid/ops/rnn.py``, ``lstmp.py``)."""

from __future__ import annotations

from typing import Any

from ..framework import Variable
from ..layer_helper import LayerHelper
from .common import check_vars

__all__ = ["lstm_unit", "gru_unit", "dynamic_lstmp"]

_ACT_IDS = {"identity": 0, "sigmoid": 1, "tanh": 2, "relu": 3}


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

    check_vars("lstm_unit", x_t=x_t, hidden_t_prev=hidden_t_prev, cell_t_prev=cell_t_prev)
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


def gru_unit(input: Variable, hidden: Variable, size: int, param_attr: Any = None,
             bias_attr: Any = None, activation: str = "tanh",
             gate_activation: str = "sigmoid",
             origin_mode: bool = False) -> tuple[Variable, Variable, Variable]:
    """One GRU step on a projected input ``[N, size]`` (``size = 3 D``) and ``hidden
    [N, D]``; returns ``(hidden, reset_hidden_prev, gate)``.

    Example::

        h, _, _ = fluid.layers.gru_unit(fluid.layers.fc(x, size=3 * 32), h_prev, size=3 * 32)
    """
    check_vars("gru_unit", input=input, hidden=hidden)
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
    check_vars("dynamic_lstmp", input=input)
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
            check_vars("dynamic_lstmp", **{slot.lower(): v})
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
