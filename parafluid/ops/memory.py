"""Memory ops: ``delete_var``, which ``release_memory`` inserts after a variable's last use,
and ``memcpy``, which ``insert_place_transfers`` inserts where a value crosses devices.

``delete_var`` computes nothing; its ``OpDef`` says ``releases_inputs``, so every executor's
release plan (``parafluid.passes.liveness.release_plan``) drops the values it reads once
it and their other readers have run, with or without eager deletion.

``memcpy`` copies its input to the op's own device (its ``op_device`` attr: the reader's
device); ``src_device`` names where the value came from, so that its gradient is a copy back
there. The copy is a new tensor even between two CPU devices of one process: an update in
place on one device must not change what the other one reads.

Example::

    block.append_op("delete_var", inputs={"X": ["fc_0.tmp_0", "fc_0.tmp_1"]})
    block.append_op("memcpy", inputs={"X": ["h"]}, outputs={"Out": ["h@cpu:1"]},
                    attrs={"op_device": "cpu:1", "src_device": "cpu:0"})
"""

from __future__ import annotations

from typing import Any

import torch

from ..scope import SelectedRows
from .registry import GRAD, GradContext, register_op, same_as

__all__: list[str] = []


def _delete_var(ins: dict, attrs: dict, ctx: Any) -> dict:
    return {}  # the plan drops the inputs after this op: see the module docstring


register_op("delete_var", inputs=("X[]",), infer_shape=lambda ins, attrs: {},
            kernel=_delete_var, releases_inputs=True)


def _memcpy(ins: dict, attrs: dict, ctx: Any) -> dict:
    x = ins["X"]
    if isinstance(x, SelectedRows):
        return {"Out": SelectedRows(x.rows.to(ctx.device, copy=True),
                                    x.value.to(ctx.device, copy=True), x.height)}
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"memcpy copies tensors, got {type(x).__name__}")
    return {"Out": x.to(ctx.device, copy=True)}


def _memcpy_grad(op: Any, no_grad: set, ctx: GradContext) -> list[dict[str, Any]]:
    """The gradient of a copy is a copy back, run on the source device."""
    if op.input("X")[0] in no_grad:
        return []
    attrs = {"src_device": op.attrs.get("op_device", ""),
             "op_device": op.attrs.get("src_device", "")}
    if op.attrs.get("op_node"):
        attrs["op_node"] = op.attrs["op_node"]
    return [{"type": "memcpy", "inputs": {"X": [op.output("Out")[0] + GRAD]},
             "outputs": {"Out": [op.input("X")[0] + GRAD]}, "attrs": attrs}]


register_op("memcpy", inputs=("X",), outputs=("Out",), attrs={"src_device": ""},
            infer_shape=same_as("X"), kernel=_memcpy, grad=_memcpy_grad, comm=True)
