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
None, i.e. zero). A body that holds control flow itself (a While inside a While, an IfElse
in a DynamicRNN step) is copied with its inner op and the inner op's sub-blocks, so the
gradient block differentiates the inner op through its own ``while_grad`` /
``conditional_block_grad``.
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
                      ctx: GradContext, shadowed: frozenset[str] = frozenset()
                      ) -> tuple[Any, list[str], list[str]]:
    """(gradient block, the names its Out-gradient feeds take, per ``in_names`` entry the
    name of its gradient in the block or "" when the block does not produce one).
    ``shadowed``: names the sub-block declares over outer variables of the same name (a
    ``recurrent`` step's slice of an input), declared in the gradient block as there."""
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
            counter = _copy_control_flow_op(fop, grad_block, fwd, parent, version, written,
                                            outer, counter)
            continue
        ins = {slot: [version.get(n, n) for n in names] for slot, names in fop.inputs.items()}
        for names in fop.inputs.values():
            for n in names:
                if n != EMPTY and n not in version and (
                        n in shadowed or not parent._find_var_recursive(n)):
                    _declare(grad_block, fwd, n, n)
        outs: dict[str, list[str]] = {}
        for slot, names in fop.outputs.items():
            new_names = []
            for n in names:
                if n == EMPTY:
                    new_names.append(n)
                    continue
                new, counter = _write_name(n, grad_block, fwd, written, outer, counter)
                version[n] = new
                written.add(n)
                new_names.append(new)
            outs[slot] = new_names
        attrs = {k: v for k, v in fop.attrs.items()}
        grad_block.append_op(fop.type, inputs=ins, outputs=outs, attrs=attrs)
    feeds, seeds = [], []
    for n in diff_out:
        feed = f"{n}@GRAD@OUTER"
        _declare(grad_block, fwd if n in shadowed else parent, n, feed)
        grad_block.var(feed).is_data = True  # fed by the grad op: the gradient of the output
        feeds.append(feed)
        seeds.append({"type": "assign", "inputs": {"X": [feed]},
                      "outputs": {"Out": [version.get(n, n) + GRAD]}, "attrs": {}})
    for n in diff_in:
        if n in shadowed:
            # NOTE: the gradient of a step's slice is the slice's shape: declared here, or
            # the block would find the outer gradient of the same name (a second backward
            # pass over the program) and take the whole input's shape
            _declare(grad_block, fwd, n, n + GRAD)
    targets = [version.get(n, n) for n in diff_out]
    blocked = {n for n in in_names if n not in diff_in}
    produced = ctx.append_grad_ops(grad_block, targets, seeds, set(diff_in), blocked)
    fetches = [n + GRAD if n in diff_in and n + GRAD in produced else "" for n in in_names]
    return grad_block, feeds, fetches


def _write_name(n: str, grad_block: Any, fwd: Any, written: set[str], outer: set[str],
                counter: int) -> tuple[str, int]:
    """The name a write of ``n`` gets in the gradient block, declared there: a fresh SSA
    name when ``n`` was written already or lives outside the body (so earlier versions stay
    readable), else ``n`` itself; and the updated counter of fresh names."""
    if n in written or n in outer:
        counter += 1
        new = f"{n}@SSA@{counter}"
    else:
        new = n
    _declare(grad_block, fwd, n, new)
    return new, counter


def _copy_control_flow_op(fop: Any, grad_block: Any, fwd: Any, parent: Any,
                          version: dict[str, str], written: set[str], outer: set[str],
                          counter: int) -> int:
    """Copy a control-flow op of the body (a ``while`` or ``conditional_block`` inside the
    differentiated one) into the gradient block, with a copy of its sub-blocks.

    Its kernel feeds its sub-block under the op's input names and reads back its output
    names, and a value it carries (read and written) keeps one name in both: so such a
    value gets one fresh name for the op, copied in from its current version by an
    ``assign`` first, and the copied sub-blocks read and write that name. The ordinary
    backward pass then differentiates the copy through its own gradient maker."""
    reads = [n for names in fop.inputs.values() for n in names if n != EMPTY]
    writes = [n for names in fop.outputs.values() for n in names if n != EMPTY]
    rename: dict[str, str] = {n: version.get(n, n) for n in reads}
    for n in writes:
        new, counter = _write_name(n, grad_block, fwd, written, outer, counter)
        rename[n] = new
        if n in reads and version.get(n, n) != new:
            grad_block.append_op("assign", inputs={"X": [version.get(n, n)]},
                                 outputs={"Out": [new]}, attrs={})
    for n in reads:
        if n not in version and not parent._find_var_recursive(n):
            _declare(grad_block, fwd, n, n)
    attrs = {k: _clone_blocks(v, grad_block, rename) for k, v in fop.attrs.items()}
    grad_block.append_op(fop.type,
                         inputs={slot: [rename.get(n, n) for n in names]
                                 for slot, names in fop.inputs.items()},
                         outputs={slot: [rename.get(n, n) for n in names]
                                  for slot, names in fop.outputs.items()},
                         attrs=attrs)
    for n in writes:
        version[n] = rename[n]
        written.add(n)
    return counter


def _clone_blocks(value: Any, parent: Any, rename: dict[str, str]) -> Any:
    """An attribute with its blocks copied under ``parent`` (names renamed); other values
    as they are."""
    from ..framework import Block

    if isinstance(value, Block):
        return _clone_block(value, parent, rename)
    if isinstance(value, list) and any(isinstance(b, Block) for b in value):
        return [_clone_blocks(b, parent, rename) for b in value]
    return value


def _clone_block(src: Any, parent: Any, rename: dict[str, str]) -> Any:
    """A copy of ``src`` as a child of ``parent``: its own variables declared again, the
    outer names it uses renamed by ``rename``, nested blocks copied the same way."""
    program = parent.program
    here = program.current_block_idx
    block = program._create_block(parent_idx=parent.idx)
    program.current_block_idx = here
    for name in src.vars:
        if name not in rename:
            _declare(block, src, name, name)
    for sop in src.ops:
        block.append_op(sop.type,
                        inputs={slot: [rename.get(n, n) for n in names]
                                for slot, names in sop.inputs.items()},
                        outputs={slot: [rename.get(n, n) for n in names]
                                 for slot, names in sop.outputs.items()},
                        attrs={k: _clone_blocks(v, block, rename)
                               for k, v in sop.attrs.items()})
    return block


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
    # NOTE: the forward names, not the slot's: an input the block overwrites is read from
    # a copy made before the block ran (see conditional_block_grad_maker)
    in_names = list(attrs["input_names"] or ctx.op.inputs.get("Input", ()))
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
                   "grad_feeds": [], "grad_fetches": [], "input_names": []},
            infer_shape=lambda ins, attrs: {"Input@GRAD": ins["Input"]},
            kernel=_conditional_block_grad)


def conditional_block_grad_maker(op: Any, blocked: set[str], ctx: GradContext
                                 ) -> list[dict[str, Any]]:
    specs = _grad_spec(op, "conditional_block_grad", "Input", blocked,
                       {"Cond": list(op.inputs["Cond"])}, ctx)
    for spec in specs:
        in_names = list(op.inputs.get("Input", ()))
        spec["attrs"]["input_names"] = in_names
        # the body recomputed in the gradient block must see what the forward body saw:
        # a value the block reads and overwrites is read from its copy before the op
        body_reads = _reads_of(op.attrs["sub_block"])
        spec["reads_before"] = [n for n in in_names
                                if n in op.output_arg_names and n in body_reads]
    return specs


def _reads_of(block: Any) -> set[str]:
    """Every name the ops of ``block`` and of its nested blocks read."""
    out: set[str] = set()
    for bop in block.ops:
        out.update(bop.input_arg_names)
        for sub in bop.sub_blocks:
            out |= _reads_of(sub)
    return out


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
