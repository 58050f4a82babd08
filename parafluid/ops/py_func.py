"""py_func: run a Python function as an op (Fluid 1.6's ``layers.py_func``).

The function gets the inputs as LoDTensors (``np.array(x)`` reads one, ``x.lod()`` its
sequences) and returns numpy arrays, LoDTensors or None, one per output. Functions live in
a process-local table and the op holds their index (``forward_callable_id``), as in Fluid:
a program with a py_func runs only in the process that built it.

The gradient op is another ``py_func`` calling ``backward_func`` with the forward inputs and
outputs (minus ``backward_skip_vars``, slot ``X``) and the output gradients (slot
``Out@GRAD``); it returns one gradient per forward input.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from ..lod import attach_lod, get_lod
from ..scope import LoDTensor
from .registry import EMPTY, GRAD, GradContext, Meta, register_op

__all__ = ["register_callable"]

_CALLABLES: list[Callable[..., Any]] = []


def register_callable(fn: Callable[..., Any]) -> int:
    """Keep ``fn`` for py_func ops; return its id."""
    _CALLABLES.append(fn)
    return len(_CALLABLES) - 1


def _callable(idx: int) -> Callable[..., Any]:
    if not 0 <= idx < len(_CALLABLES):
        raise ValueError(f"py_func: no Python function with id {idx} in this process; a "
                         "program with py_func runs only where it was built")
    return _CALLABLES[idx]


def _as_lod_tensor(t: torch.Tensor | None) -> LoDTensor | None:
    if t is None:
        return None
    out = LoDTensor()
    out.set(t)
    lod = get_lod(t)
    if lod:
        out.set_lod(lod)
    return out


def _to_tensor(value: Any, device: Any, name: str) -> torch.Tensor:
    lod = None
    if isinstance(value, LoDTensor):
        lod = value.lod() or None
        value = value.value
    if isinstance(value, torch.Tensor):
        t = value.detach().clone()
    else:
        try:
            t = torch.from_numpy(np.array(value, copy=True))
        except (TypeError, ValueError) as e:
            raise TypeError(f"py_func: the function returned {type(value).__name__} for "
                            f"output {name!r}; return a numpy array or a LoDTensor") from e
    t = t.to(device)
    return attach_lod(t, lod) if lod else t


def _py_func(ins: dict, attrs: dict, ctx: Any) -> dict:
    fn = _callable(int(attrs["forward_callable_id"]))
    args = list(ins["X"]) + list(ins.get("Out@GRAD") or [])
    result = fn(*[_as_lod_tensor(x) for x in args])
    names = list(ctx.op.output("Out")) if "Out" in ctx.op.outputs else []
    if not names:
        return {}
    values = list(result) if isinstance(result, (list, tuple)) else [result]
    if len(values) != len(names):
        raise ValueError(f"py_func: the function returned {len(values)} values for "
                         f"{len(names)} outputs {names}")
    outs = []
    for name, value in zip(names, values):
        if name == EMPTY:
            outs.append(None)
        elif value is None:
            raise ValueError(f"py_func: the function returned None for output {name!r}")
        else:
            outs.append(_to_tensor(value, ctx.device, name))
    return {"Out": outs}


def _py_func_shape(ins: dict, attrs: dict) -> dict:
    """Forward outputs keep the shapes their creator declared; a gradient op's outputs take
    the forward inputs' shapes and dtypes, recorded by the grad maker (``grad_shapes``,
    ``grad_dtypes``)."""
    shapes, dtypes = list(attrs["grad_shapes"]), list(attrs["grad_dtypes"])
    if not shapes:
        return {}
    return {"Out": [Meta(tuple(s), d) for s, d in zip(shapes, dtypes)]}


def _py_func_grad(op: Any, no_grad: set, ctx: GradContext) -> list[dict]:
    backward_id = int(op.attr("backward_callable_id"))
    if backward_id < 0:
        return []
    skip = set(op.attr("backward_skip_vars") or [])
    xs = list(op.input("X"))
    outs = list(op.output("Out")) if "Out" in op.outputs else []
    values = [n for n in xs + outs if n not in skip]
    grads = [EMPTY if n in no_grad else n + GRAD for n in xs]
    if all(g == EMPTY for g in grads):
        return []
    block = op.block
    shapes = [list(block._find_var_recursive(n).shape) for n in xs]
    dtypes = [block._find_var_recursive(n).dtype for n in xs]
    # NOTE: the output gradients go in their own slot (Fluid appends them to X) so that the
    # backward pass can zero-fill a missing one without mistaking X's values for gradients.
    inputs = {"X": values, "Out@GRAD": [n + GRAD for n in outs]}
    return [{"type": "py_func", "inputs": inputs, "outputs": {"Out": grads},
             "attrs": {"forward_callable_id": backward_id, "backward_callable_id": -1,
                       "backward_skip_vars": [], "grad_shapes": shapes,
                       "grad_dtypes": dtypes}}]


register_op("py_func", inputs=("X[]?", "Out@GRAD[]?"), outputs=("Out[]?",),
            attrs={"forward_callable_id": -1, "backward_callable_id": -1,
                   "backward_skip_vars": [], "grad_shapes": [], "grad_dtypes": []},
            infer_shape=_py_func_shape, kernel=_py_func, grad=_py_func_grad, side_effect=True)
