"""``recurrent``: Fluid's StaticRNN op, as a program written by Fluid holds it, and its
gradient ``recurrent_grad``.

The step block (``sub_block``) runs once per step along dim 0 of the ``inputs`` (last step
first with ``reverse``). Names are shared across the block boundary as in Fluid: inside the
block, an input's name holds its step slice (``x[t]``, dim 0 dropped) and an output's name
the step's value, which the op stacks into the outer variable of that name (``[T, ...]``).
``ex_states[i]`` (a name inside the block) holds the previous step's ``states[i]``,
``initial_states[i]`` at the first step. ``parameters`` are the outer values the block reads.

parafluid's own ``layers.StaticRNN`` unrolls its step at build time instead; this op runs
the programs Fluid wrote. With ``is_train`` the op records each step's feeds in
``step_scopes``, and ``recurrent_grad`` runs the step's gradient block (built from the step
block by the backward pass, as ``while_grad``'s is: ``control_flow_grad``) once per step,
last first: the states' gradients flow to the step before, the parameters' gradients add
up, and ``initial_states@GRAD`` is what reaches the first step.

Example (a tanh RNN over x [T, B, D])::

    {outputs=[h_out], step_scopes=[scopes]} = recurrent(inputs=[x], initial_states=[h0],
        parameters=[w]) {ex_states=['h_pre'], states=['h'], has_states=True, sub_block=1}
"""

from __future__ import annotations

from typing import Any

import torch

from .common import add_grads
from .control_flow_grad import _build_grad_block, _differentiable, _or_zeros, _run_grad_block
from .registry import EMPTY, GRAD, GradContext, register_op

__all__: list[str] = []

_SLOTS = ("inputs", "initial_states", "parameters")


def _seq_len(xs: list[torch.Tensor]) -> int:
    if not xs:
        raise ValueError("recurrent: the op has no inputs, so no sequence length")
    lengths = {int(x.shape[0]) for x in xs}
    if len(lengths) != 1:
        raise ValueError(f"recurrent: the inputs' sequence lengths (dim 0) differ: "
                         f"{sorted(lengths)}")
    return lengths.pop()


def _check_states(attrs: dict, n_init: int) -> tuple[list[str], list[str]]:
    ex, st = list(attrs["ex_states"]), list(attrs["states"])
    if len(ex) != len(st) or (attrs["has_states"] and len(ex) != n_init):
        raise ValueError(f"recurrent: ex_states {ex}, states {st} and initial_states "
                         f"({n_init}) must pair up one to one")
    return ex, st


def _recurrent(ins: dict, attrs: dict, ctx: Any) -> dict:
    op = ctx.op
    xs, inits, params = ins["inputs"], ins["initial_states"] or [], ins["parameters"] or []
    x_names, p_names = op.input("inputs"), list(op.inputs.get("parameters", ()))
    out_names = list(op.outputs.get("outputs", ()))
    ex, st = _check_states(attrs, len(inits))
    steps = _seq_len(xs)
    order = range(steps - 1, -1, -1) if attrs["reverse"] else range(steps)
    states = list(inits) if attrs["has_states"] else []
    outs: list[list[Any]] = [[None] * steps for _ in out_names]
    record = []
    for t in order:
        feed = dict(zip(p_names, params))
        feed.update((n, x[t]) for n, x in zip(x_names, xs))
        feed.update(zip(ex, states))
        if attrs["is_train"]:
            record.append((t, dict(feed)))
        got = ctx.run_block(attrs["sub_block"].idx, feed=feed, fetch=tuple(out_names + st))
        for k in range(len(out_names)):
            outs[k][t] = got[k]
        states = list(got[len(out_names):]) if attrs["has_states"] else []
    result: dict[str, Any] = {"outputs": [torch.stack(o) for o in outs]}
    if op.outputs.get("step_scopes"):
        result["step_scopes"] = record
    return result


register_op("recurrent", inputs=("inputs[]", "initial_states[]?", "parameters[]?"),
            outputs=("outputs[]", "step_scopes?"),
            attrs={"has_states": False, "ex_states": [], "states": [], "sub_block": None,
                   "reverse": False, "is_train": True, "skip_eager_deletion_vars": []},
            kernel=_recurrent, grad=lambda op, blocked, ctx: _recurrent_grad_maker(
                op, blocked, ctx))


# ----------------------------------------------------------------------------- gradient


def _recurrent_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    op = ctx.op
    record = ins["step_scopes"]
    if not isinstance(record, list):
        raise TypeError("recurrent_grad: step_scopes must hold the steps the forward "
                        "recurrent recorded; run it with is_train=True")
    x_names = list(op.inputs.get("inputs", ()))
    p_names = list(op.inputs.get("parameters", ()))
    ex, st = list(attrs["ex_states"]), list(attrs["states"])
    in_names = x_names + ex + p_names
    out_names = list(attrs["output_names"])
    douts = dict(zip(out_names, ins["outputs@GRAD"] or ()))
    outs = dict(zip(out_names, ins["outputs"]))
    carried: dict[str, Any] = {}  # the gradient of each state, from the step after
    dxs: dict[str, list[Any]] = {n: [] for n in x_names}
    dparams: dict[str, Any] = {}
    for t, values in reversed(record):
        out_grads = {n: (douts[n][t] if douts.get(n) is not None else None)
                     for n in out_names}
        likes = {n: outs[n][t] for n in out_names}
        for s, e in zip(st, ex):
            out_grads[s] = carried.get(e)
            likes[s] = values[e]
        grads = _run_grad_block(ctx, attrs, values, in_names, out_grads, likes)
        carried = {e: grads.get(e) for e in ex}
        for n in x_names:
            dxs[n].append((t, _or_zeros(grads.get(n), values[n])))
        for n in p_names:
            g = grads.get(n)
            if g is not None:
                dparams[n] = g if n not in dparams else add_grads(dparams[n], g)
    result: dict[str, Any] = {}
    if op.outputs.get("inputs@GRAD"):
        result["inputs@GRAD"] = [torch.stack([g for _, g in sorted(dxs[n], key=lambda p: p[0])])
                                 for n in x_names]
    if op.outputs.get("initial_states@GRAD"):
        first = record[0][1] if record else {}  # the first step run
        result["initial_states@GRAD"] = [_or_zeros(carried.get(e), first.get(e)) for e in ex]
    if op.outputs.get("parameters@GRAD"):
        params = dict(zip(p_names, ins["parameters"] or ()))
        result["parameters@GRAD"] = [_or_zeros(dparams.get(n), params[n]) for n in p_names]
    return result


register_op("recurrent_grad",
            inputs=("inputs[]", "initial_states[]?", "parameters[]?", "outputs[]",
                    "outputs@GRAD[]?", "step_scopes"),
            outputs=("inputs@GRAD[]?", "initial_states@GRAD[]?", "parameters@GRAD[]?"),
            attrs={"sub_block": None, "ex_states": [], "states": [], "has_states": False,
                   "reverse": False, "output_names": [], "out_grad_names": [],
                   "grad_feeds": [], "grad_fetches": []},
            infer_shape=lambda ins, attrs: {f"{s}@GRAD": ins[s] for s in _SLOTS},
            kernel=_recurrent_grad)


def _recurrent_grad_maker(op: Any, blocked: set[str], ctx: GradContext
                          ) -> list[dict[str, Any]]:
    if not op.outputs.get("step_scopes") or not op.attrs["is_train"]:
        raise ValueError("recurrent: this op records no step_scopes (is_train=False), so it "
                         "has no gradient; build it with is_train=True and a step_scopes "
                         "output to train through it")
    sub = op.attrs["sub_block"]
    x_names = list(op.inputs.get("inputs", ()))
    init_names = list(op.inputs.get("initial_states", ()))
    p_names = list(op.inputs.get("parameters", ()))
    ex, st = list(op.attrs["ex_states"]), list(op.attrs["states"])
    out_names = list(op.outputs.get("outputs", ()))
    outer_blocked = {n for n in x_names + p_names if n in blocked}
    in_names = x_names + ex + p_names
    diff_in = [n for n in in_names if n not in outer_blocked and _differentiable(sub, n)]
    diff_out = [n for n in out_names + st if _differentiable(sub, n)]
    if not diff_in or not diff_out:
        return []
    # the step's inputs and outputs: names declared in the step over outer names ([T, ...])
    shadowed = frozenset(n for n in x_names + out_names + ex + st if n in sub.vars)
    grad_block, feeds, fetches = _build_grad_block(op, in_names, diff_in, diff_out, ctx,
                                                   shadowed)

    def grads_of(names: list[str], inner: list[str] | None = None) -> list[str]:
        inner = inner or names
        return [EMPTY if n in blocked or i not in diff_in else n + GRAD
                for n, i in zip(names, inner)]

    outputs = {"inputs@GRAD": grads_of(x_names),
               "initial_states@GRAD": grads_of(init_names, ex),
               "parameters@GRAD": grads_of(p_names)}
    outputs = {k: v for k, v in outputs.items() if v and any(n != EMPTY for n in v)}
    if not outputs:
        return []
    inputs = {"inputs": x_names, "initial_states": init_names, "parameters": p_names,
              "outputs": out_names, "outputs@GRAD": [n + GRAD for n in out_names],
              "step_scopes": list(op.outputs["step_scopes"])}
    attrs = {"sub_block": grad_block, "ex_states": ex, "states": st,
             "has_states": op.attrs["has_states"], "reverse": op.attrs["reverse"],
             "output_names": out_names, "out_grad_names": diff_out, "grad_feeds": feeds,
             "grad_fetches": fetches}
    return [{"type": "recurrent_grad", "inputs": {k: v for k, v in inputs.items() if v},
             "outputs": outputs, "attrs": attrs}]
