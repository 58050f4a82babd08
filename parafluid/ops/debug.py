"""``print``: Fluid's debugging op (``layers.Print``). It passes its input on unchanged and
writes the tensor's name, shape, dtype, LoD and first values to stdout when it runs (forward,
and, through its gradient, the gradient in the backward pass)."""

from __future__ import annotations

import sys
import threading
import weakref
from typing import Any

import numpy as np
import torch

from ..dtypes import convert_dtype
from ..lod import get_lod
from .registry import GRAD, GradContext, register_op, same_as

__all__: list[str] = []

PHASES = ("FORWARD", "BACKWARD", "BOTH")
_counts: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # op -> times printed
_lock = threading.Lock()


def _due(op: Any, first_n: int) -> bool:
    """Whether this run prints: every time, or only the first ``first_n`` runs of the op."""
    if first_n < 0:
        return True
    with _lock:
        n = _counts.get(op, 0)
        _counts[op] = n + 1
    return n < first_n


def format_tensor(name: str, x: Any, attrs: dict) -> str:
    """Fluid's block: ``Variable: name``, then ``- message``, ``- lod``, ``- place``,
    ``- shape``, ``- layout``, ``- dtype``, ``- data`` (the first ``summarize`` values)."""
    lines = [f"Variable: {name}"] if attrs["print_tensor_name"] else []
    if attrs["message"]:
        lines.append(f"  - message: {attrs['message']}")
    if attrs["print_tensor_lod"]:
        lod = get_lod(x)
        lines.append(f"  - lod: {{{', '.join(str(level) for level in lod)}}}" if lod
                     else "  - lod: {}")
    place = "CPUPlace" if x.device.type == "cpu" else f"CUDAPlace({x.device.index or 0})"
    lines.append(f"  - place: {place}")
    if attrs["print_tensor_shape"]:
        lines.append(f"  - shape: {list(x.shape)}")
    if attrs["print_tensor_layout"]:
        lines.append("  - layout: NCHW")
    if attrs["print_tensor_type"]:
        lines.append(f"  - dtype: {convert_dtype(x.dtype)}")
    flat = x.detach().reshape(-1).cpu().numpy()
    k = int(attrs["summarize"])
    shown = flat if k < 0 else flat[:k]
    lines.append(f"  - data: {np.array2string(shown, separator=' ', threshold=10**9)}")
    return "\n".join(lines)


def _print(ins: dict, attrs: dict, ctx: Any) -> dict:
    x = ins["In"]
    phase = attrs["print_phase"].upper()
    if phase not in PHASES:
        raise ValueError(f"print: print_phase must be one of {list(PHASES)}, got "
                         f"{attrs['print_phase']!r}")
    wanted = "FORWARD" if attrs["is_forward"] else "BACKWARD"
    if phase in (wanted, "BOTH") and isinstance(x, torch.Tensor) and \
            _due(ctx.op, int(attrs["first_n"])):
        sys.stdout.write(format_tensor(ctx.op.input("In")[0], x, attrs) + "\n")
        sys.stdout.flush()
    return {"Out": x}


def _print_grad(op: Any, no_grad: set, ctx: GradContext) -> list[dict[str, Any]]:
    """The gradient passes through another ``print`` (which prints it in the backward)."""
    if op.input("In")[0] in no_grad:
        return []
    return [{"type": "print", "inputs": {"In": [op.output("Out")[0] + GRAD]},
             "outputs": {"Out": [op.input("In")[0] + GRAD]},
             "attrs": {**op.attrs, "is_forward": False}}]


register_op("print", inputs=("In",), outputs=("Out",),
            attrs={"first_n": -1, "summarize": 20, "message": "", "print_tensor_name": True,
                   "print_tensor_type": True, "print_tensor_shape": True,
                   "print_tensor_layout": True, "print_tensor_lod": True,
                   "print_phase": "BOTH", "is_forward": True},
            infer_shape=same_as("In", "Out"), kernel=_print, grad=_print_grad,
            side_effect=True)
