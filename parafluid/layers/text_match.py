"""Text-matching layers of Fluid 1.6 over LoD sequences: ``match_matrix_tensor``."""

from __future__ import annotations

from typing import Any

from ..framework import Variable
from ..layer_helper import LayerHelper

__all__ = ["match_matrix_tensor"]


def match_matrix_tensor(x: Variable, y: Variable, channel_num: int, act: str | None = None,
                        param_attr: Any = None, dtype: str = "float32",
                        name: str | None = None) -> tuple[Variable, Variable]:
    """Bilinear match matrices of paired sequences: for the ``b``-th sequences of ``x``
    ``[Tx, h]`` and ``y`` ``[Ty, h]`` (one LoD level each) and each of ``channel_num``
    channels, ``x_b @ W[:, t, :] @ y_b^T`` with the parameter ``W`` ``[h, channel_num, h]``.
    Returns ``(out, tmp)``: ``out`` one column of every pair's matrices, row-major, channel by
    channel (LoD: ``channel_num * lx * ly`` rows per pair), then ``act``; ``tmp`` is
    ``x @ W`` as ``[Tx, channel_num * h]``.

    Example::

        x = fluid.layers.data(name="x", shape=[10], dtype="float32", lod_level=1)
        y = fluid.layers.data(name="y", shape=[10], dtype="float32", lod_level=1)
        out, tmp = fluid.layers.match_matrix_tensor(x=x, y=y, channel_num=3)
    """
    for arg, v in (("x", x), ("y", y)):
        if not isinstance(v, Variable):
            raise TypeError(f"match_matrix_tensor: {arg} must be a Variable, got "
                            f"{type(v).__name__}")
    xs, ys = list(x.shape or ()), list(y.shape or ())
    if len(xs) != 2 or len(ys) != 2 or xs[-1] != ys[-1]:
        raise ValueError(f"match_matrix_tensor: x and y must be 2-D with the same width, got "
                         f"shapes {xs} and {ys}")
    helper = LayerHelper("match_matrix_tensor", param_attr=param_attr, act=act, name=name)
    w = helper.create_parameter(helper.param_attr, [xs[-1], channel_num, ys[-1]], dtype)
    out = helper.create_variable_for_type_inference(dtype)
    tmp = helper.create_variable_for_type_inference(dtype, stop_gradient=True)
    helper.append_op("match_matrix_tensor", inputs={"X": [x], "Y": [y], "W": [w]},
                     outputs={"Out": [out], "Tmp": [tmp]}, attrs={"dim_t": int(channel_num)})
    out.lod_level = 1
    return helper.append_activation(out), tmp
