"""Gradients of ``while`` and ``conditional_block``: a gradient block per op, built from the
forward sub-block, run by ``while_grad`` / ``conditional_block_grad``.

The gradient block holds a copy of the forward sub-block's ops in SSA form (a variable the
body overwrites, a loop-carried ``h = h + ...`` for example, gets a new name per write), so
the ordinary backward pass (``parafluid.backward``) can differentiate it, followed by the
gradient ops it emits. The forward values the gradient ops read are recomputed by the copy
from the inputs of the step, which the forward ``while`` recorded in its ``StepScopes``
output (the conditional block's inputs are the grad op's own inputs): no step scopes are
kept alive, only the inputs of each iteration. A random op in a differentiated body draws
again when recomputed; keep such bodies free of dropout.

- ``conditional_block_grad``: when the condition did not hold, a variable the block writes
  and had before passes its gradient through, every other input gets zeros; otherwise the
  gradient block runs once, fed with the inputs and the gradients of ``Out``.
- ``while_grad``: the gradient block runs once per iteration, last first; the gradients of
  loop-carried variables flow from one iteration to the one before it, those of the other
  inputs (parameters, the data the body reads) add up over the iterations.

Tensor arrays carry gradients as tensor arrays (a slot nothing wrote a gradient for is
None, i.e. zero). Not differentiated: bodies that hold control flow themselves (nested
While/IfElse).
"""

from __future__ import annotations

from typing import Any

import torch

from ..dtypes import VarType
from .common import add_grads, scalar_truth
from .registry import EMPTY, GRAD, GradContext, register_op

__all__: list[str] = []

_FLOATS = ("float16", "bfloat16", "float32", "float64")


def _differentiable(block: Any, name: str) -> bool:
    var = block._find_var_recursive(name)
    return (var is not None and var.type in (VarType.LOD_TENSOR, VarType.LOD_TENSOR_ARRAY)
            and var.dtype in _FLOATS)


def _zeros_like(v: Any) -> Any:
    from ..scope import TensorArray

    return TensorArray() if isinstance(v, list) else torch.zeros_like(v)


def _declare(grad_block: Any, src_block: Any, name: str, new_name: str) -> None:
    if grad_block.has_var(new_name):
        return
    src = src_block._find_var_recursive(name)
    grad_block.create_var(name=new_name, shape=src.shape if src is not None else None,
                          dtype=src.dtype if src is not None else None,
                          type=src.type if src is not None else VarType.LOD_TENSOR,
                          stop_gradient=bool(src.stop_gradient) if src is not None else False)


def _build_grad_block(op: Any, in_names: list[str], diff_in: list[str], diff_out: list[str],
                      ctx: GradContext) -> tuple[Any, list[str], list[str]]:
    """(gradient block, the names its Out-gradient feeds take, per ``in_names`` entry the
    name of its gradient in the block or "" when the block does not produce one)."""
    fwd = op.attrs["sub_block"]
    parent = op.block
    program = parent.program
    here = program.current_block_idx
    grad_block = program._create_block(parent_idx=parent.idx)
    program.current_block_idx = here
    version: dict[str, str] = {}
    written: set[str] = set()
    outer = set(in_names) | set(op.output_arg_names)
    counter = 0
    for fop in fwd.ops:
        if fop.sub_blocks:
            raise ValueError(f"{op.type}: the gradient of a block holding control flow itself "
                             f"({fop.type} at {fop.callsite}) is not supported; unroll the "
                             "inner construct or keep it out of the differentiated path")
        ins = {slot: [version.get(n, n) for n in names] for slot, names in fop.inputs.items()}
        for names in fop.inputs.values():
            for n in names:
                if n != EMPTY and n not in version and not parent._find_var_recursive(n):
                    _declare(grad_block, fwd, n, n)
        outs: dict[str, list[str]] = {}
        for slot, names in fop.outputs.items():
            new_names = []
            for n in names:
                if n == EMPTY:
                    new_names.append(n)
                    continue
                if n in written or n in outer:
                    counter += 1
                    new = f"{n}@SSA@{counter}"
                else:
                    new = n
                _declare(grad_block, fwd, n, new)
                version[n] = new
                written.add(n)
                new_names.append(new)
            outs[slot] = new_names
        attrs = {k: v for k, v in fop.attrs.items()}
        grad_block.append_op(fop.type, inputs=ins, outputs=outs, attrs=attrs)
    feeds, seeds = [], []
    for n in diff_out:
        feed = f"{n}@GRAD@OUTER"
        _declare(grad_block, parent, n, feed)
        grad_block.var(feed).is_data = True  # fed by the grad op: the gradient of the output
        feeds.append(feed)
        seeds.append({"type": "assign", "inputs": {"X": [feed]},
                      "outputs": {"Out": [version.get(n, n) + GRAD]}, "attrs": {}})
    targets = [version.get(n, n) for n in diff_out]
    blocked = {n for n in in_names if n not in diff_in}
    produced = ctx.append_grad_ops(grad_block, targets, seeds, set(diff_in), blocked)
    fetches = [n + GRAD if n in diff_in and n + GRAD in produced else "" for n in in_names]
    return grad_block, feeds, fetches


def _grad_spec(op: Any, grad_type: str, in_slot: str, blocked: set[str],
               extra_inputs: dict[str, list[str]], ctx: GradContext) -> list[dict[str, Any]]:
    in_names = list(op.inputs.get(in_slot, ()))
    out_names = list(op.outputs.get("Out", ()))
    diff_in = [n for n in in_names if n not in blocked and _differentiable(op.block, n)]
    diff_out = [n for n in out_names if _differentiable(op.block, n)]
    if not diff_in or not diff_out:
        return []
    grad_block, feeds, fetches = _build_grad_block(op, in_names, diff_in, diff_out, ctx)
    carried = set(diff_out)
    grads = [n + GRAD if n in diff_in and (fetch or n in carried) else EMPTY
             for n, fetch in zip(in_names, fetches)]
    if all(g == EMPTY for g in grads):
        return []
    inputs = {in_slot: in_names, "Out@GRAD": [n + GRAD for n in diff_out], **extra_inputs}
    attrs = {"sub_block": grad_block, "out_grad_names": diff_out, "grad_feeds": feeds,
             "grad_fetches": fetches}
    if "is_scalar_condition" in op.attrs:
        attrs["is_scalar_condition"] = op.attrs["is_scalar_condition"]
    return [{"type": grad_type, "inputs": inputs, "outputs": {in_slot + GRAD: grads},
             "attrs": attrs}]


def _run_grad_block(ctx: Any, attrs: dict, values: dict[str, Any], in_names: list[str],
                    out_grads: dict[str, Any], likes: dict[str, Any]) -> dict[str, Any]:
    """Run the gradient block once: input name -> gradient (only those it produces).
    ``out_grads``: the gradients of the block's outputs (None: zero, shaped like ``likes``)."""
    feed = dict(values)
    for name, feed_name in zip(attrs["out_grad_names"], attrs["grad_feeds"]):
        g = out_grads.get(name)
        feed[feed_name] = g if g is not None else _zeros_like(likes[name])
    wanted = [(n, f) for n, f in zip(in_names, attrs["grad_fetches"]) if f]
    got = ctx.run_block(attrs["sub_block"].idx, feed=feed, fetch=tuple(f for _, f in wanted))
    return {n: g for (n, _), g in zip(wanted, got)}


# ----------------------------------------------------------------------------- conditional


def _conditional_block_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    op = ctx.op
    in_names = list(op.inputs.get("Input", ()))
    values = dict(zip(in_names, ins["Input"]))
    out_grads = dict(zip(attrs["out_grad_names"], ins["Out@GRAD"] or ()))
    conds = ins["Cond"]
    if attrs["is_scalar_condition"]:
        ran = scalar_truth("conditional_block_grad", conds[0])
    else:
        ran = all(c is not None and c.numel() != 0 for c in conds)
    grads = _run_grad_block(ctx, attrs, values, in_names, out_grads, out_grads) if ran else {
        n: g for n, g in out_grads.items() if n in values}  # untouched: passed through
    return {"Input@GRAD": [_or_zeros(grads.get(n), values[n]) for n in in_names]}


def _or_zeros(g: Any, like: Any) -> Any:
    if g is not None:
        return g
    return _zeros_like(like) if isinstance(like, (torch.Tensor, list)) else None


register_op("conditional_block_grad", inputs=("Cond[]", "Input[]?", "Out@GRAD[]?"),
            outputs=("Input@GRAD[]?",),
            attrs={"sub_block": None, "is_scalar_condition": False, "out_grad_names": [],
                   "grad_feeds": [], "grad_fetches": []},
            infer_shape=lambda ins, attrs: {"Input@GRAD": ins["Input"]},
            kernel=_conditional_block_grad)


def conditional_block_grad_maker(op: Any, blocked: set[str], ctx: GradContext
                                 ) -> list[dict[str, Any]]:
    return _grad_spec(op, "conditional_block_grad", "Input", blocked,
                      {"Cond": list(op.inputs["Cond"])}, ctx)


# ----------------------------------------------------------------------------- while


def _while_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    op = ctx.op
    in_names = list(op.inputs.get("X", ()))
    steps = ins["StepScopes"]
    if not isinstance(steps, list):
        raise TypeError("while_grad: StepScopes must hold the inputs the forward while "
                        "recorded; run the forward while with is_test=False")
    carried = dict(zip(attrs["out_grad_names"], ins["Out@GRAD"] or ()))
    likes = dict(carried)
    total: dict[str, Any] = {}
    for values in reversed(steps):
        grads = _run_grad_block(ctx, attrs, values, in_names, carried, likes)
        # a carried value's gradient goes to the iteration before; a value the body
        # overwrites without reading it gets none from before the iteration
        carried = {n: grads.get(n) for n in carried if n in values}
        for n, g in grads.items():
            if n not in carried:
                total[n] = g if n not in total else add_grads(total[n], g)
    first = steps[0] if steps else dict(zip(in_names, ins["X"]))
    out = []
    for n in in_names:
        g = carried.get(n) if n in carried else total.get(n)
        out.append(_or_zeros(g, first.get(n)))
    return {"X@GRAD": out}


register_op("while_grad", inputs=("X[]?", "Out@GRAD[]?", "StepScopes"),
            outputs=("X@GRAD[]?",),
            attrs={"sub_block": None, "out_grad_names": [], "grad_feeds": [],
                   "grad_fetches": []},
            infer_shape=lambda ins, attrs: {"X@GRAD": ins["X"]}, kernel=_while_grad)


def while_grad_maker(op: Any, blocked: set[str], ctx: GradContext) -> list[dict[str, Any]]:
    steps = op.outputs.get("StepScopes")
    if not steps:
        raise ValueError("while: this loop records no StepScopes (is_test=True), so it has no "
                         "gradient; build it with is_test=False to train through it")
    return _grad_spec(op, "while_grad", "X", blocked, {"StepScopes": list(steps)}, ctx)
