"""``fluid.layers.lstm``: Fluid 1.6's multi-layer, optionally bidirectional LSTM over a
padded ``[seq_len, batch, input_size]`` input, built from ordinary ops.

Fluid runs it as one cuDNN kernel; here the time steps are unrolled when the program is
built (a ``matmul`` of the whole input per layer and direction, then per step a ``matmul``
of the hidden state and an ``lstm_unit``), so it runs on any device and differentiates
through the ordinary gradient makers.
"""

from __future__ import annotations

from typing import Any

from ..framework import Variable
from ..layer_helper import LayerHelper

__all__ = ["lstm"]


def _weight_size(input_size: int, hidden_size: int, num_layers: int, dirs: int) -> int:
    """Fluid's count for its flat cuDNN weight: the same size, so checkpoints line up."""
    size = 0
    for layer in range(num_layers):
        width = input_size if layer == 0 else hidden_size * dirs
        size += dirs * (width * 4 * hidden_size + hidden_size * 4 * hidden_size
                        + 8 * hidden_size)
    return size


def lstm(input: Variable, init_h: Variable, init_c: Variable, max_len: int,  # noqa: A002
         hidden_size: int, num_layers: int, dropout_prob: float = 0.0,
         is_bidirec: bool = False, is_test: bool = False, name: str | None = None,
         default_initializer: Any = None, seed: int = -1) -> tuple[Variable, Variable, Variable]:
    """LSTM of ``num_layers`` layers (each direction when ``is_bidirec``) over ``input``
    ``[seq_len, batch, input_size]`` from states ``init_h`` / ``init_c``
    ``[num_layers * dirs, batch, hidden_size]`` (row ``layer * dirs + direction``); returns
    ``(rnn_out [seq_len, batch, hidden_size * dirs], last_h, last_c)`` shaped as the states.

    Per step ``gates = x_t W_x + b_x + h W_h + b_h``, split into the input, forget, output
    gates and the candidate (in that order), ``c = f * c + i * tanh(g)``,
    ``h = o * tanh(c)`` (sigmoid gates, no peepholes). Between layers, when not ``is_test``,
    the output goes through dropout with ``dropout_prob`` (``upscale_in_train``, ``seed``).

    The one parameter, ``[weight_size]`` as Fluid sizes it, holds per layer and then per
    direction (forward first) ``W_x [in, 4 * hidden_size]`` (``in`` is ``input_size`` for the
    first layer, ``hidden_size * dirs`` after it), ``W_h [hidden_size, 4 * hidden_size]``
    (both row-major), ``b_x [4 * hidden_size]``, ``b_h [4 * hidden_size]``, each split into
    the gates in the order above. ``default_initializer`` initializes it (else Xavier, as
    Fluid's). ``seq_len`` must be known when the program is built; ``max_len`` bounds it.

    Example::

        x = fluid.layers.data(name="x", shape=[20, 8, 32], dtype="float32",
                              append_batch_size=False)
        h0 = fluid.layers.fill_constant([2, 8, 64], "float32", 0.0)
        c0 = fluid.layers.fill_constant([2, 8, 64], "float32", 0.0)
        out, last_h, last_c = fluid.layers.lstm(x, h0, c0, max_len=20, hidden_size=64,
                                                num_layers=2, dropout_prob=0.2)
    """
    from .index import slice as slice_
    from .index import stack
    from .nn import dropout, elementwise_add, matmul
    from .scatter_gather import unstack
    from .tensor import concat, reshape

    for arg, v in (("input", input), ("init_h", init_h), ("init_c", init_c)):
        if not isinstance(v, Variable):
            raise TypeError(f"lstm: {arg} must be a Variable, got {type(v).__name__}")
        if len(v.shape or ()) != 3:
            raise ValueError(f"lstm: {arg} must be 3-D, got {arg} {v.name!r} of shape "
                             f"{list(v.shape or ())}")
    for arg, v in (("max_len", max_len), ("hidden_size", hidden_size),
                   ("num_layers", num_layers)):
        if not isinstance(v, int) or v <= 0:
            raise ValueError(f"lstm: {arg} must be a positive int, got {v!r}")
    seq_len, _, input_size = input.shape
    if seq_len <= 0 or input_size <= 0:
        raise ValueError(f"lstm: input {input.name!r} has shape {list(input.shape)}: its "
                         f"seq_len (dim 0) and input_size (dim 2) must be known when the "
                         f"program is built (declare it with append_batch_size=False)")
    if seq_len > max_len:
        raise ValueError(f"lstm: input {input.name!r} has seq_len {seq_len} > max_len "
                         f"{max_len}")
    dirs = 2 if is_bidirec else 1
    for arg, v in (("init_h", init_h), ("init_c", init_c)):
        if v.shape[0] not in (-1, num_layers * dirs) or v.shape[2] not in (-1, hidden_size):
            raise ValueError(f"lstm: {arg} {v.name!r} must be [num_layers * "
                             f"{dirs}, batch, hidden_size] = [{num_layers * dirs}, batch, "
                             f"{hidden_size}], got {list(v.shape)}")
    helper = LayerHelper("cudnn_lstm", name=name)
    dtype = input.dtype
    weight = helper.create_parameter(helper.param_attr,
                                     [_weight_size(input_size, hidden_size, num_layers, dirs)],
                                     dtype, default_initializer=default_initializer)
    offset = 0

    def take(shape: list[int]) -> Variable:
        nonlocal offset
        n = 1
        for d in shape:
            n *= d
        piece = slice_(weight, axes=[0], starts=[offset], ends=[offset + n])
        offset += n
        return reshape(piece, shape)

    def state(v: Variable, row: int) -> Variable:
        return reshape(slice_(v, axes=[0], starts=[row], ends=[row + 1]), [-1, hidden_size])

    gates = 4 * hidden_size
    layer_in, width = input, input_size
    last_h: list[Variable] = []
    last_c: list[Variable] = []
    for layer in range(num_layers):
        outs = []
        for d in range(dirs):
            w_x, w_h = take([width, gates]), take([hidden_size, gates])
            b_x, b_h = take([gates]), take([gates])
            proj = matmul(reshape(layer_in, [-1, width]), w_x)
            proj = elementwise_add(elementwise_add(proj, b_x), b_h)
            steps = unstack(reshape(proj, [seq_len, -1, gates]), axis=0, num=seq_len)
            h, c = state(init_h, layer * dirs + d), state(init_c, layer * dirs + d)
            hs: list[Variable] = [None] * seq_len  # type: ignore[list-item]
            for t in (range(seq_len) if d == 0 else reversed(range(seq_len))):
                step = elementwise_add(steps[t], matmul(h, w_h))
                c_new = helper.create_variable_for_type_inference(dtype)
                h_new = helper.create_variable_for_type_inference(dtype)
                helper.append_op("lstm_unit", inputs={"X": [step], "C_prev": [c]},
                                 outputs={"C": [c_new], "H": [h_new]},
                                 attrs={"forget_bias": 0.0})
                h, c = h_new, c_new
                hs[t] = h
            outs.append(stack(hs, axis=0))
            last_h.append(h)
            last_c.append(c)
        layer_in = outs[0] if dirs == 1 else concat(outs, axis=2)
        width = hidden_size * dirs
        if layer < num_layers - 1 and dropout_prob > 0.0 and not is_test:
            layer_in = dropout(layer_in, dropout_prob=dropout_prob, is_test=False,
                               seed=None if seed == -1 else seed,
                               dropout_implementation="upscale_in_train")
    return layer_in, stack(last_h, axis=0), stack(last_c, axis=0)
