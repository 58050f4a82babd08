"""Reverse-mode differentiation as a program transformation.

``append_backward(loss)`` appends, after the forward ops, one gradient op per forward op
that lies between a trainable variable and the loss (in reverse order), each emitted by the
op's gradient maker. A gradient with several contributions is written under renamed
variables ``X@GRAD@RENAME@k`` and summed into ``X@GRAD`` by a ``sum`` op before its first
use. The op that finally produces a parameter's gradient carries
``op_role_var = [param, param@GRAD]``. A non-parameter variable that no op writes and
that sets ``stop_gradient = False`` (e.g. a data layer) gets its gradient too, as in Fluid.

Example::

    params_grads = fluid.backward.append_backward(avg_cost)
    for p, g in params_grads:
        print(p.name, g.name)     # fc_0.w_0 fc_0.w_0@GRAD
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from .framework import (
    GRAD_SUFFIX,
    DetachedOpDesc,
    OpRole,
    Parameter,
    Variable,
    grad_var_name,
)
from .ops.common import numel
from .ops.registry import EMPTY, GradContext, get_op_def
from .placement import DEVICE_ATTR, NODE_ATTR, place_attrs

__all__ = ["append_backward", "gradients", "calc_gradient", "prune_missing_grads",
           "get_grad_op_desc"]


def _names(items: Iterable[Any] | None) -> set[str]:
    out: set[str] = set()
    for item in items or ():
        out.add(item.name if isinstance(item, Variable) else item)
    return out


def append_backward(loss: Variable, parameter_list: Sequence[Any] | None = None,
                    no_grad_set: Iterable[Any] | None = None,
                    callbacks: Any = None,
                    checkpoints: Sequence[Variable] | None = None,
                    ) -> list[tuple[Parameter, Variable]]:
    """Append the backward pass of ``loss``; return ``(param, grad)`` pairs.

    Args:
        loss: a variable with one element (e.g. the output of ``fluid.layers.mean``).
        parameter_list: parameters (or names) to differentiate; default all trainable ones.
        no_grad_set: variables (or names) whose gradient is not computed.
        checkpoints: Fluid's recompute checkpoints (forward Variables): the forward ops
            between two of them run again just before their gradient ops, so that their
            results need not stay alive through the forward pass (passes/recompute.py). The
            gradients are the same as without them.
    """
    if not isinstance(loss, Variable):
        raise TypeError(f"append_backward: loss must be a Variable, got {type(loss).__name__}")
    if checkpoints is not None and (not isinstance(checkpoints, (list, tuple)) or not all(
            isinstance(c, Variable) for c in checkpoints)):
        raise TypeError(f"append_backward: checkpoints must be a list of Variables, got "
                        f"{checkpoints!r}")
    if loss.shape is not None and numel(loss.shape) != 1:
        raise ValueError(f"append_backward: loss {loss.name!r} must hold one element "
                         f"(shape [1]), got shape {list(loss.shape)}; reduce it with "
                         "fluid.layers.mean or reduce_sum first")
    block = loss.block
    program = block.program
    if parameter_list is not None:
        params = [block._var_recursive(n) for n in _ordered_names(parameter_list)]
    else:
        params = [p for p in program.global_block().all_parameters() if p.trainable]
    no_grad = _names(no_grad_set)
    _mark_loss_op(block, loss)
    seed = {"type": "fill_constant", "inputs": {}, "outputs": {"Out": [grad_var_name(loss.name)]},
            "attrs": {"shape": list(loss.shape or [1]), "value": 1.0,
                      "dtype": loss.dtype or "float32", "op_role": OpRole.Backward | OpRole.Loss}}
    sources = ({p.name for p in params} | _opted_in_leaves(block)) - no_grad
    first_backward_op = len(block.ops)
    produced = _append_grad_ops(block, [loss.name], [seed], sources, no_grad)
    _append_error_clips(block, first_backward_op)
    if checkpoints:
        from .passes.recompute import recompute

        recompute(block, first_backward_op, [c.name for c in checkpoints])
    program._appending_grad_times += 1
    pairs = []
    for p in params:
        g = grad_var_name(p.name)
        if g in produced:
            pairs.append((p, block.var(g)))
    _set_op_role_var(block, pairs)
    return pairs


def gradients(targets: Any, inputs: Any, target_gradients: Any = None,
              no_grad_set: Iterable[Any] | None = None) -> list[Variable | None]:
    """Gradients of ``sum(targets)`` w.r.t. each of ``inputs`` (None where unreachable).

    ``target_gradients`` optionally gives the gradient to start from for each target
    (default: ones).
    """
    targets = [targets] if isinstance(targets, Variable) else list(targets)
    inputs_list = [inputs] if isinstance(inputs, Variable) else list(inputs)
    if not targets:
        raise ValueError("gradients: targets is empty")
    block = targets[0].block
    program = block.program
    if target_gradients is None:
        target_gradients = [None] * len(targets)
    elif isinstance(target_gradients, Variable):
        target_gradients = [target_gradients]
    if len(target_gradients) != len(targets):
        raise ValueError(f"gradients: {len(targets)} targets but {len(target_gradients)} "
                         "target_gradients")
    seeds = []
    for t, tg in zip(targets, target_gradients):
        out = {"Out": [grad_var_name(t.name)]}
        seeds.append({"type": "fill_any_like", "inputs": {"X": [t.name]}, "outputs": out,
                      "attrs": {"value": 1.0}} if tg is None else
                     {"type": "assign", "inputs": {"X": _ordered_names([tg])}, "outputs": out,
                      "attrs": {}})
    no_grad = _names(no_grad_set)
    sources = {v.name for v in inputs_list} - no_grad
    produced = _append_grad_ops(block, [t.name for t in targets], seeds, sources, no_grad)
    program._appending_grad_times += 1
    return [block.var(grad_var_name(v.name)) if grad_var_name(v.name) in produced else None
            for v in inputs_list]


def calc_gradient(targets: Any, inputs: Any, target_gradients: Any = None,
                  no_grad_set: Iterable[Any] | None = None) -> Any:
    """``gradients``, but one gradient comes back as itself, not a list of one (Fluid's
    ``backward.calc_gradient``)."""
    grads = gradients(targets, inputs, target_gradients, no_grad_set)
    return grads[0] if len(grads) == 1 else grads


# ---------------------------------------------------------------------------- internals


def _append_error_clips(block: Any, start: int) -> None:
    """Fluid's error clipping: the gradient of a forward variable that has an
    ``error_clip`` (``fluid.clip.ErrorClipByValue``) is clipped in place right after the op
    that completes it (the sum of its parts, if it has several)."""
    last: dict[str, tuple[int, Any]] = {}
    for i in range(start, len(block.ops)):
        for name in block.ops[i].output_arg_names:
            if not name.endswith(GRAD_SUFFIX):
                continue
            fwd = block._find_var_recursive(name[: -len(GRAD_SUFFIX)])
            if fwd is not None and getattr(fwd, "error_clip", None) is not None:
                last[name] = (i, fwd.error_clip)
    for name, (i, clip) in sorted(last.items(), key=lambda item: -item[1][0]):
        block._insert_op(i + 1, "clip", inputs={"X": [name]}, outputs={"Out": [name]},
                         attrs={"min": float(clip.min), "max": float(clip.max),
                                "op_role": OpRole.Backward})


def _opted_in_leaves(block: Any) -> set[str]:
    """Non-parameter variables that no forward op of ``block`` writes and that opt in to a
    gradient with ``stop_gradient=False`` (a data layer, a variable made by hand): as in
    Fluid, ``append_backward`` gives them ``<name>@GRAD`` too."""
    fwd = [op for op in block.ops
           if not (op.attrs.get("op_role", 0) & (OpRole.Backward | OpRole.Optimize))]
    written = {n for op in fwd for n in op.output_arg_names}
    out = set()
    for op in fwd:
        for n in op.input_arg_names:
            if n in written or n in out:
                continue
            var = block._find_var_recursive(n)
            if (var is not None and not isinstance(var, Parameter) and not var.stop_gradient
                    and not var.persistable):
                out.add(n)
    return out


def _ordered_names(items: Sequence[Any]) -> list[str]:
    return [i.name if isinstance(i, Variable) else i for i in items]


def _mark_loss_op(block: Any, loss: Variable) -> None:
    for op in reversed(block.ops):
        if loss.name in op.output_arg_names:
            op.attrs["op_role"] = op.attrs.get("op_role", 0) | OpRole.Loss
            return


def _append_grad_ops(block: Any, targets: list[str], seeds: list[dict[str, Any]],
                     sources: set[str], no_grad: set[str]) -> set[str]:
    """Emit gradient ops for the ops between ``sources`` and ``targets``; return grad names.

    ``seeds`` are the specs of the ops that write the targets' gradients; they go first and
    count as ordinary contributions (a target that another target depends on gets a sum).
    """
    fwd_ops = [op for op in block.ops
               if not (op.attrs.get("op_role", 0) & (OpRole.Backward | OpRole.Optimize))]
    # Forward: which variables carry a gradient (depend on a source through differentiable
    # slots, and are not stop_gradient / no_grad).
    flows = set(sources)
    for op in fwd_ops:
        opdef = get_op_def(op.type)
        if opdef.grad is not None and _reads_flowing(op, opdef, flows):
            for n in op.output_arg_names:
                var = block._find_var_recursive(n)
                if n not in no_grad and not (var is not None and var.stop_gradient
                                             and n not in sources):
                    flows.add(n)
    # Backward: which ops lead to a target.
    needed = set(targets)
    path = []
    for op in reversed(fwd_ops):
        if any(n in needed for n in op.output_arg_names):
            path.append(op)
            needed.update(op.input_arg_names)
    specs: list[dict[str, Any]] = []
    produced: set[str] = set()
    pending: dict[str, list[str]] = {}  # grad name -> renamed parts awaiting a sum
    writer: dict[str, tuple[dict[str, Any], str, int]] = {}
    renames: dict[str, int] = {}
    part_place: dict[str, dict[str, str]] = {}  # renamed part -> place of its writer

    def flush(name: str) -> None:
        parts = pending.pop(name, None)
        if parts:
            # NOTE: a sum of gradient parts runs where its last part was produced
            specs.append({"type": "sum", "inputs": {"X": parts}, "outputs": {"Out": [name]},
                          "attrs": dict(part_place.get(parts[-1], {}))})

    def add(spec: dict[str, Any]) -> None:
        reads = set()
        for names in spec["inputs"].values():
            for n in names:
                flush(n)
                reads.add(n)
        for slot, names in spec["outputs"].items():
            for i, n in enumerate(names):
                if n == EMPTY:
                    continue
                # NOTE: an op that reads and writes the same gradient (the gradient of a
                # variable its forward op overwrote, a loop-carried value) replaces it: from
                # here on the name means the gradient of the earlier value
                if n in produced and n not in reads:
                    if n not in pending:  # second writer: rename the first one too
                        first_spec, first_slot, first_i = writer[n]
                        part0 = _renamed(n, renames)
                        first_spec["outputs"][first_slot][first_i] = part0
                        pending[n] = [part0]
                        part_place[part0] = _place_of_spec(first_spec)
                    part = _renamed(n, renames)
                    names[i] = part
                    pending[n].append(part)
                    part_place[part] = _place_of_spec(spec)
                else:
                    produced.add(n)
                    writer[n] = (spec, slot, i)
        specs.append(spec)

    # names each forward op's later ops overwrite (a loop counter, a carried value)
    written_later: dict[int, set[str]] = {}
    seen: set[str] = set()
    for op in reversed(fwd_ops):
        written_later[id(op)] = set(seen)
        seen.update(op.output_arg_names)
    snapshots: list[tuple[Any, str, str, bool]] = []
    for seed in seeds:
        _place_like(seed, _writer_of(fwd_ops, seed["outputs"]["Out"][0][: -len(GRAD_SUFFIX)]))
        add(seed)
    for op in path:  # already in reverse order
        opdef = get_op_def(op.type)
        if opdef.grad is None or not _reads_flowing(op, opdef, flows):
            continue
        blocked = {n for n in op.input_arg_names if n not in flows} | no_grad
        for spec in opdef.grad(op, blocked, _GRAD_CONTEXT):
            _read_snapshots(block, op, spec, written_later[id(op)], snapshots)
            ok, zero_fills = prune_missing_grads(spec, produced)
            if not ok:
                continue
            for fill in zero_fills:
                add(_place_like(fill, op))
            add(_place_like(spec, op))
    for name in list(pending):
        flush(name)
    for op, name, snap, before in snapshots:
        block._insert_op(block.ops.index(op) + (0 if before else 1), "assign",
                         inputs={"X": [name]}, outputs={"Out": [snap]},
                         attrs=dict(place_attrs(op)))
    with block.program._role_guard(OpRole.Backward):
        for spec in specs:
            block.append_op(spec["type"], inputs=spec["inputs"], outputs=spec["outputs"],
                            attrs=spec["attrs"])
    return produced


def _read_snapshots(block: Any, op: Any, spec: dict[str, Any], overwritten: set[str],
                    snapshots: list[tuple[Any, str, str, bool]]) -> None:
    """Make the gradient op read the values the forward op saw: a forward input that a later
    forward op overwrites (``increment(i)`` after ``array_write(x, i)``) is copied right
    after the forward op (an ``assign`` into ``<name>@FWD@<k>``) and read from the copy; so
    is an output the gradient op reads (``tanh_grad`` reads ``Out``) that a later op
    overwrites. The inputs a gradient maker lists under ``reads_before`` (inputs the op itself
    overwrites, e.g. a conditional block's carried value) are copied right before it."""
    before = set(spec.pop("reads_before", ()))
    for names in spec["inputs"].values():
        for k, n in enumerate(names):
            if n.endswith(GRAD_SUFFIX):
                continue
            if n in op.input_arg_names:
                if n not in overwritten and n not in before:
                    continue
            elif n not in op.output_arg_names or n not in overwritten:
                continue
            snap = next((s for o, m, s, _ in snapshots if o is op and m == n), None)
            if snap is None:
                src = block._find_var_recursive(n)
                snap = f"{n}@FWD@{len(snapshots)}"
                block.create_var(name=snap, shape=src.shape, dtype=src.dtype, type=src.type,
                                 stop_gradient=True)
                snapshots.append((op, n, snap, n in before))
            names[k] = snap


def _writer_of(ops: list[Any], name: str) -> Any:
    """The last of ``ops`` that writes ``name`` (None if none does)."""
    for op in reversed(ops):
        if name in op.output_arg_names:
            return op
    return None


def _place_like(spec: dict[str, Any], op: Any) -> dict[str, Any]:
    """A gradient op runs where its forward op runs: copy the forward op's place attrs
    (a place the grad maker set explicitly wins)."""
    if op is not None:
        for key, value in place_attrs(op).items():
            spec["attrs"].setdefault(key, value)
    return spec


def _place_of_spec(spec: dict[str, Any]) -> dict[str, str]:
    return {k: spec["attrs"][k] for k in (DEVICE_ATTR, NODE_ATTR) if spec["attrs"].get(k)}


def _reads_flowing(op: Any, opdef: Any, flows: set[str]) -> bool:
    """True if a differentiable input of ``op`` carries a gradient."""
    return any(n in flows for slot, names in op.inputs.items()
               if slot not in opdef.no_grad_inputs for n in names)


def _renamed(name: str, counters: dict[str, int]) -> str:
    k = counters.get(name, 0)
    counters[name] = k + 1
    return f"{name}@RENAME@{k}"


def prune_missing_grads(spec: dict[str, Any],
                        produced: set[str]) -> tuple[bool, list[dict[str, Any]]]:
    """Fit a gradient op to the output gradients that exist: a gradient maker's op ``spec``
    (``{"type", "inputs", "outputs", "attrs"}``, edited in place) loses the ``*@GRAD``
    inputs no earlier op produced (``produced``: the gradient names made so far).

    Returns ``(keep, zero_fills)``: ``keep`` is False when the op reads gradients and none
    of them exists (it has nothing to do); a list slot keeps its positions, its missing
    gradients written as zeros by the ``fill_zeros_like`` op specs of ``zero_fills``, to be
    appended before the op. ``append_backward`` and the imperative mode's
    ``Tracer.backward`` both apply it to every gradient op they emit.
    """
    inputs = spec["inputs"]
    has_grad_inputs = have_any = False
    zero_fills = []
    for slot in list(inputs):
        names = inputs[slot]
        is_grad = [n.endswith(GRAD_SUFFIX) for n in names]
        if not any(is_grad):
            continue
        has_grad_inputs = True
        present = [n in produced for n in names]
        have_any = have_any or any(present)
        if all(present):
            continue
        if len(names) == 1:
            del inputs[slot]
            continue
        for n, ok in zip(names, present):
            if not ok:
                zero_fills.append({"type": "fill_zeros_like",
                                   "inputs": {"X": [n[: -len(GRAD_SUFFIX)]]},
                                   "outputs": {"Out": [n]}, "attrs": {}})
    return have_any or not has_grad_inputs, zero_fills


def _set_op_role_var(block: Any, pairs: list[tuple[Parameter, Variable]]) -> None:
    for p, g in pairs:
        for op in reversed(block.ops):
            if g.name in op.output_arg_names:
                role_var = list(op.attrs.get("op_role_var") or [])
                op.attrs["op_role_var"] = role_var + [p.name, g.name]
                break
    block.program._bump()


# NOTE: what every gradient maker gets: ops whose gradient differentiates a sub-block append
# its gradient ops through it instead of importing this module
_GRAD_CONTEXT = GradContext(append_grad_ops=_append_grad_ops)


def get_grad_op_desc(op_desc: Any, no_grad_set: Iterable[str] = (),
                     grad_sub_block_list: Sequence[Any] = ()
                     ) -> tuple[list[DetachedOpDesc], dict[str, str]]:
    """Fluid's ``core.get_grad_op_desc``: the gradient ops of one op (from its gradient
    maker), as descriptions in no block, and each gradient's forward variable.

    Example::

        descs, grad_to_var = get_grad_op_desc(op.desc, set(), [])
        block.desc.append_op().copy_from(descs[0])
    """
    op = getattr(op_desc, "_op", op_desc)
    opdef = get_op_def(op.type)
    if opdef.grad is None:
        return [], {}
    if grad_sub_block_list:
        raise ValueError(f"get_grad_op_desc: {op.type}'s gradient is made with its sub-block "
                         "by append_backward; give no grad_sub_block_list")
    specs = opdef.grad(op, set(no_grad_set), _GRAD_CONTEXT)
    descs = [DetachedOpDesc(spec["type"], spec.get("inputs", {}), spec.get("outputs", {}),
                            spec.get("attrs", {})) for spec in specs]
    grad_to_var = {n: n[:-len(GRAD_SUFFIX)] for d in descs for n in d.output_arg_names()
                   if n.endswith(GRAD_SUFFIX)}
    return descs, grad_to_var
