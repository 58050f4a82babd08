"""Pass: ``elementwise_add`` followed by an activation becomes one fused op (and so does the
pair of their gradient ops).

Pattern (forward): ``t = elementwise_add(X, Y)`` and ``o = act(t)`` with ``act`` in
relu/sigmoid/tanh, where ``t`` is read by nothing but ``act`` and is not persistable. It
becomes ``o, t = fused_elemwise_activation(X, Y)`` (``t`` stays available as
``IntermediateOut``). Pattern (backward): ``t@GRAD = act_grad(o, o@GRAD)`` and
``X@GRAD, Y@GRAD = elementwise_add_grad(X, Y, t@GRAD)`` where ``t@GRAD`` has no other reader
or writer; the pair becomes one ``fused_elemwise_activation_grad`` that keeps the role and
``op_role_var`` of the add's gradient (the op producing a bias gradient stays findable).

Only ``elementwise_add(act(...))`` in that order (Fluid's most common case, ``fc(act=...)``)
is fused; ``elementwise_add(X, act(Y))`` is left alone.

Example::

    fused = fuse_elewise_add_act(main_program)     # main_program is not modified
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from ..framework import GRAD_SUFFIX, Operator, Program
from ..ops.fused import FUSABLE_ACTIVATIONS
from ..ops.registry import EMPTY
from .rewrite import make_op, rewrite_global_ops

__all__ = ["fuse_elewise_add_act"]


def fuse_elewise_add_act(program: Program) -> Program:
    """A copy of ``program`` with every fusable add + activation pair fused."""
    return rewrite_global_ops(program, _fuse)


def _fuse(block: Any, ops: list[Operator]) -> list[Operator]:
    readers: dict[str, list[int]] = defaultdict(list)
    writers: dict[str, list[int]] = defaultdict(list)
    for i, op in enumerate(ops):
        for n in op.input_arg_names:
            readers[n].append(i)
        for n in op.output_arg_names:
            writers[n].append(i)
    replace: dict[int, Operator | None] = {}  # op index -> new op (None: delete)
    for i, add in enumerate(ops):
        if add.type != "elementwise_add" or i in replace:
            continue
        t = add.output("Out")[0]
        var = block._find_var_recursive(t)
        if var is None or var.persistable or len(writers[t]) != 1 or len(readers[t]) != 1:
            continue
        j = readers[t][0]
        act = ops[j]
        if act.type not in FUSABLE_ACTIVATIONS or act.input("X") != [t] or j in replace:
            continue
        o = act.output("Out")[0]
        between = range(i + 1, j)
        if any(k in between for n in (o, *add.input_arg_names) for k in writers[n]) or \
                any(k in between for k in readers[o]):
            continue
        attrs = {"functor_list": [act.type, "elementwise_add"], "axis": add.attr("axis"),
                 "save_intermediate_out": True, "op_role": add.attrs.get("op_role", 0),
                 "op_role_var": list(add.attrs.get("op_role_var") or [])}
        replace[i] = make_op(block, "fused_elemwise_activation", add.inputs,
                             {"Out": [o], "IntermediateOut": [t]}, attrs, add.callsite,
                             infer=False)  # (its variables exist)
        replace[j] = None
        _fuse_grads(block, ops, readers, writers, add, act, t, o, attrs, replace)
    return [new for k, op in enumerate(ops)
            for new in ([op] if k not in replace else [replace[k]] if replace[k] else [])]


def _fuse_grads(block: Any, ops: list[Operator], readers: dict[str, list[int]],
                writers: dict[str, list[int]], add: Operator, act: Operator, t: str, o: str,
                fwd_attrs: dict[str, Any], replace: dict[int, Operator | None]) -> None:
    tg, og = t + GRAD_SUFFIX, o + GRAD_SUFFIX
    if len(writers[tg]) != 1 or len(readers[tg]) != 1:
        return
    gb, ga = writers[tg][0], readers[tg][0]
    act_grad, add_grad = ops[gb], ops[ga]
    if (act_grad.type != act.type + "_grad" or add_grad.type != "elementwise_add_grad"
            or act_grad.input("Out") != [o] or act_grad.input("Out@GRAD") != [og]
            or add_grad.input("X") != add.input("X") or add_grad.input("Y") != add.input("Y")
            or gb in replace or ga in replace or ga < gb):
        return
    outputs = {slot: names for slot, names in add_grad.outputs.items()
               if any(n != EMPTY for n in names)}
    # Nothing between the two grad ops may read the grads the fused op now writes earlier.
    if any(gb < k < ga for names in outputs.values() for n in names
           for k in readers[n] + writers[n]):
        return
    attrs = {"functor_list": fwd_attrs["functor_list"], "axis": fwd_attrs["axis"],
             "save_intermediate_out": True, "op_role": add_grad.attrs.get("op_role", 0),
             "op_role_var": list(add_grad.attrs.get("op_role_var") or [])}
    inputs = {"X": add.input("X"), "Y": add.input("Y"), "Out": [o], "Out@GRAD": [og]}
    replace[gb] = make_op(block, "fused_elemwise_activation_grad", inputs, outputs, attrs,
                          add_grad.callsite, infer=False)
    replace[ga] = None
