"""Fluid 1.6's remaining control-flow helper ops.

- ``conditional_block_infer``: ``conditional_block`` as Fluid's inference passes write it
  (no gradient; its ``Scope`` output is a bookkeeping variable, an empty list here);
- ``merge_lod_tensor_infer``: ``merge_lod_tensor`` without a gradient;
- ``rnn_memory_helper``: the identity that marks a StaticRNN memory (``Out`` is ``X``); its
  gradient passes ``Out@GRAD`` through, zeros of ``X``'s shape when there is none (also
  when the block does not declare the ``Out@GRAD`` variable, as Fluid finds none);
- ``get_places``: the list of places (``device_count`` of them, 0: all) of
  ``device_type`` ("AUTO": the run's kind, "CPU" or "CUDA") into a RAW variable; as in
  Fluid, "all" CPU places are the hardware threads.

Example::

    {Out=[mem]} = rnn_memory_helper(X=[h_boot]) {dtype=float32}
"""

from __future__ import annotations

import os
from typing import Any

import torch

from ..place import CPUPlace, CUDAPlace
from .control_flow import _conditional_block
from .control_rows import _merge_lod_tensor, _merge_shape
from .registry import register_op
from .tensor_misc import fluid_dtype

__all__: list[str] = []


def _cond_infer(ins: dict, attrs: dict, ctx: Any) -> dict:
    return {**_conditional_block(ins, attrs, ctx), "Scope": []}


register_op("conditional_block_infer", inputs=("Cond[]", "Input[]?"),
            outputs=("Out[]?", "Scope?"),
            attrs={"sub_block": None, "is_scalar_condition": False}, kernel=_cond_infer)

register_op("merge_lod_tensor_infer", inputs=("X", "Mask", "InTrue?", "InFalse?"),
            outputs=("Out",), attrs={"level": 0}, infer_shape=_merge_shape,
            kernel=_merge_lod_tensor)


def _rmh_shape(ins: dict, attrs: dict) -> dict:
    fluid_dtype("rnn_memory_helper", attrs["dtype"])
    return {"Out": ins["X"]}


def _rmh_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    d = ins.get("Out@GRAD")
    return {"X@GRAD": torch.zeros_like(ins["X"]) if d is None else d}


register_op("rnn_memory_helper", inputs=("X",), outputs=("Out",), attrs={"dtype": "float32"},
            infer_shape=_rmh_shape, kernel=lambda ins, attrs, ctx: {"Out": ins["X"]},
            grad_kernel=_rmh_grad, grad_uses=("X", "Out"), share_lod=("X", "Out"),
            # Fluid's grad op finds Out@GRAD in the scope: a gradient variable no block
            # declares is none, and X@GRAD is zeros
            grad_scope_inputs=("Out@GRAD",))


def _get_places(ins: dict, attrs: dict, ctx: Any) -> dict:
    kind = attrs["device_type"]
    if kind not in ("AUTO", "CPU", "CUDA"):
        raise ValueError(f"get_places: device_type must be AUTO, CPU or CUDA, got {kind!r}")
    device = getattr(ctx, "device", torch.device("cpu"))
    gpu = device.type == "cuda" if kind == "AUTO" else kind == "CUDA"
    # Fluid counts the CPU's hardware threads
    available = torch.cuda.device_count() if gpu else (os.cpu_count() or 1)
    count = attrs["device_count"] or available
    if gpu and count > available:
        raise ValueError(f"get_places: only {available} CUDA devices found, cannot set to "
                         f"{count}")
    if count <= 0:
        raise ValueError(f"get_places: no {'GPU' if gpu else 'CPU'} device to list")
    return {"Out": [CUDAPlace(i) if gpu else CPUPlace() for i in range(count)]}


register_op("get_places", outputs=("Out",), attrs={"device_count": 0, "device_type": "AUTO"},
            kernel=_get_places, no_compile="produces a list of places")
