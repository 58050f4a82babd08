"""``fluid.layers.py_func``: a Python function run as an op (op in
``parafluid/ops/py_func.py``)."""

from __future__ import annotations

from typing import Any

from ..framework import Variable
from ..layer_helper import LayerHelper

__all__ = ["py_func"]


def _check(layer: str, **args: Any) -> None:
    for arg, v in args.items():
        if not isinstance(v, Variable):
            raise TypeError(f"{layer}: {arg} must be a Variable, got {type(v).__name__}")


def _append(op_type: str, inputs: dict[str, Any], attrs: dict[str, Any], dtype: Any,
            name: str | None = None, stop_gradient: bool = False) -> Variable:
    helper = LayerHelper(op_type, name=name)
    out = helper.create_variable_for_type_inference(dtype, stop_gradient=stop_gradient)
    helper.append_op(op_type, inputs=inputs, outputs={"Out": [out]}, attrs=attrs)
    return out


def py_func(func: Any, x: Any, out: Any, backward_func: Any = None,
            skip_vars_in_backward_input: Any = None) -> Any:
    """Run ``func`` (Python) as an op: it gets the ``x`` variables as LoDTensors and returns
    one numpy array (or LoDTensor) per ``out`` variable, which the caller creates with its
    shape and dtype (``out=None``: no outputs, e.g. a debug print).

    ``backward_func`` gets the inputs, the outputs and the outputs' gradients (minus the
    variables in ``skip_vars_in_backward_input``) and returns one gradient per input.
    The functions stay in this process; the op holds their ids, as in Fluid.

    Example::

        def tanh(x):
            return np.tanh(np.array(x))

        def tanh_grad(y, dy):
            return np.array(dy) * (1 - np.square(np.array(y)))

        out = main.global_block().create_var(name="y", shape=[-1, 4], dtype="float32")
        fluid.layers.py_func(tanh, x, out, backward_func=tanh_grad,
                             skip_vars_in_backward_input=x)
    """
    from ..ops.py_func import register_callable

    xs = [] if x is None else ([x] if isinstance(x, Variable) else list(x))
    outs = [] if out is None else ([out] if isinstance(out, Variable) else list(out))
    for i, v in enumerate(xs + outs):
        _check("py_func", **{f"x[{i}]" if i < len(xs) else f"out[{i - len(xs)}]": v})
    for v in outs:
        if v.shape is None or v.dtype is None:
            raise ValueError(f"py_func: output {v.name!r} needs a shape and a dtype; create it "
                             "with block.create_var(name=..., shape=..., dtype=...)")
    skip = skip_vars_in_backward_input
    skip = [] if skip is None else ([skip] if isinstance(skip, Variable) else list(skip))
    skip_names = [v.name if isinstance(v, Variable) else str(v) for v in skip]
    known = {v.name for v in xs + outs}
    for n in skip_names:
        if n not in known:
            raise ValueError(f"py_func: skip_vars_in_backward_input names {n!r}, which is "
                             "neither an input nor an output")
    helper = LayerHelper("py_func")
    helper.append_op("py_func", inputs={"X": xs}, outputs={"Out": outs},
                     attrs={"forward_callable_id": register_callable(func),
                            "backward_callable_id": (register_callable(backward_func)
                                                     if backward_func is not None else -1),
                            "backward_skip_vars": skip_names})
    return out
