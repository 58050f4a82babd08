"""``conv2d_fusion``: conv2d + bias + residual + activation in one op (an inference op that
Fluid's passes write, with a cuDNN kernel only; computed here by the unfused kernels).

``Output = act(conv2d(Input, Filter) + Bias + ResidualData)`` (``Bias`` ``[C_out]`` per
channel, ``ResidualData`` shaped like the output; both optional), ``act`` one of identity,
relu, relu6, sigmoid, tanh (Fluid's cuDNN-specific "relux" and "band_pass" are refused).
With ``split_channels`` the output is also split along the channels into ``Outputs``.
``AlgoCache``, ``exhaustive_search``, ``search_times`` and ``workspace_size_MB`` tune cuDNN
in Fluid and are accepted and not read. Fluid registers no gradient.

Example::

    {Output=[y]} = conv2d_fusion(Input=[x], Filter=[w], Bias=[b]) {activation=relu, ...}
"""

from __future__ import annotations

from typing import Any

from .fusion_math import call_kernel
from .registry import Meta, get_op_def, register_op

__all__: list[str] = []

_ACTS = ("identity", "relu", "relu6", "sigmoid", "tanh")
_LAYOUTS = ("AnyLayout", "NCHW")


def _conv_attrs(attrs: dict) -> dict:
    return {k: attrs[k] for k in ("strides", "paddings", "dilations", "groups")}


def _shape(ins: dict, attrs: dict) -> dict:
    op = "conv2d_fusion"
    if attrs["activation"] not in _ACTS:
        raise ValueError(f"{op}: activation must be one of {_ACTS}, got "
                         f"{attrs['activation']!r}")
    if attrs["data_format"] not in _LAYOUTS:
        raise ValueError(f"{op}: data_format must be one of {_LAYOUTS} (channels first), got "
                         f"{attrs['data_format']!r}")
    out = get_op_def("conv2d").infer_shape({"Input": ins["Input"], "Filter": ins["Filter"]},
                                          _conv_attrs(attrs))["Output"]
    channels = out.shape[1]
    bias = ins.get("Bias")
    if bias is not None and bias.shape and bias.shape[-1] not in (-1, channels):
        raise ValueError(f"{op}: Bias must have {channels} values (one per output channel), "
                         f"got {list(bias.shape)}")
    split = list(attrs["split_channels"])
    metas = {"Output": out}
    if split:
        if channels != -1 and sum(split) != channels:
            raise ValueError(f"{op}: split_channels {split} must sum to the {channels} output "
                             "channels")
        metas["Outputs"] = [Meta((out.shape[0], c, *out.shape[2:]), out.dtype) for c in split]
    return metas


def _kernel(ins: dict, attrs: dict, ctx: Any) -> dict:
    y = call_kernel("conv2d", {"Input": ins["Input"], "Filter": ins["Filter"]},
                    _conv_attrs(attrs), ctx)["Output"]
    if ins.get("Bias") is not None:
        y = call_kernel("elementwise_add", {"X": y, "Y": ins["Bias"].reshape(-1)},
                        {"axis": 1}, ctx)["Out"]
    if ins.get("ResidualData") is not None:
        y = call_kernel("elementwise_add", {"X": y, "Y": ins["ResidualData"]}, ctx=ctx)["Out"]
    act = attrs["activation"]
    if act != "identity":
        y = call_kernel(act, {"X": y}, ctx=ctx)["Out"]
    out = {"Output": y}
    if attrs["split_channels"]:
        out["Outputs"] = [p.contiguous() for p in y.split(list(attrs["split_channels"]), 1)]
    return out


register_op("conv2d_fusion", inputs=("Input", "Filter", "Bias?", "ResidualData?", "AlgoCache?"),
            outputs=("Output", "Outputs[]?"),
            attrs={"strides": [1, 1], "paddings": [0, 0], "dilations": [1, 1], "groups": 1,
                   "use_cudnn": True, "data_format": "NCHW", "activation": "relu",
                   "split_channels": [], "exhaustive_search": False, "search_times": -1,
                   "workspace_size_MB": 4096, "is_test": False},
            infer_shape=_shape, kernel=_kernel)
