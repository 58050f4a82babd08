"""GPipe-style micro-batching: ``split_microbatches(program, k, fetch) -> program``.

A model split over devices (``fluid.place_guard``) runs its stages one after another on one
batch: while stage 1 computes, stage 0 waits. This pass splits every fed batch into ``k``
micro-batches along axis 0 (a ``split`` op), repeats the forward and backward ops once per
micro-batch (every temporary renamed ``<name>@MB<m>``), all forwards first and then all
backwards, as GPipe does, sums each gradient over the micro-batches (a running sum, added to
as each micro-batch's backward ends; a ``mul`` weight's gradient instead one product over
the whole batch after every micro-batch's backward) and scales it by ``1/k`` before the
unchanged optimizer ops. With one lane per device in program order
(``parafluid.engine.lanes``) stage 0 computes micro-batch m+1 while stage 1
computes micro-batch m.

For a loss that is a mean over the batch (and equal micro-batches), the averaged gradient
is the full batch's gradient, up to float rounding. A fetched loss (one element) is the mean
of the micro-batches' losses; another fetched temporary with a batch dimension is their
concatenation. The loss (the output of the op ``append_backward`` marked) is always merged.
``k == 1`` returns the program as is.

Not supported (a ValueError names the op): a forward or backward op that updates a
persistable (batch_norm's moving statistics would be updated k times), and optimizer ops
interleaved with the forward/backward ones.

Example::

    mb = split_microbatches(main, 4, fetch=[loss.name])
    print(mb)   # split(X=[x]) -> x@MB0..x@MB3, 4 x forward, 4 x backward (+ running
                #   sums of the gradients), scale, sgd
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..framework import OpRole
from ..ops.common import numel
from ..ops.registry import EMPTY
from ..placement import place_attrs

__all__ = ["split_microbatches"]

_UPDATE = OpRole.Optimize | OpRole.LRSched


def _mb(name: str, m: int) -> str:
    return f"{name}@MB{m}"


def split_microbatches(program: Any, k: int, fetch: Sequence[str] = ()) -> Any:
    """``program`` with its forward/backward run on ``k`` micro-batches (see the module doc).

    Args:
        program: a training program (forward, backward, then updates).
        k: the number of micro-batches (>= 1); every fed batch must divide by it.
        fetch: names the caller fetches (merged over the micro-batches).
    """
    if type(k) is not int or k < 1:
        raise ValueError(f"split_microbatches: k must be an int >= 1, got {k!r}")
    if k == 1:
        return program
    block = program.global_block()
    ops = block.ops
    first_update = next((i for i, op in enumerate(ops)
                         if op.attrs.get("op_role", 0) & _UPDATE), len(ops))
    body, updates = ops[:first_update], ops[first_update:]
    for i, op in enumerate(updates, first_update):
        if not op.attrs.get("op_role", 0) & _UPDATE:
            raise ValueError(f"split_microbatches: op #{i} {op.type} (created at {op.callsite}) "
                             "is a forward/backward op after the first optimizer op; "
                             "micro-batching needs the updates last")

    def persistable(name: str) -> bool:
        var = block._find_var_recursive(name)
        return var is not None and var.persistable

    written: set[str] = set()
    feeds: list[str] = []
    last_writer: dict[str, Any] = {}
    for i, op in enumerate(body):
        for name in op.input_arg_names:
            if name != EMPTY and name not in written and not persistable(name) \
                    and name not in feeds:
                feeds.append(name)
        for name in op.output_arg_names:
            if name == EMPTY:
                continue
            if persistable(name):
                raise ValueError(
                    f"split_microbatches: op #{i} {op.type} (created at {op.callsite}) updates "
                    f"persistable {name!r} in the forward/backward pass; it would be updated "
                    f"{k} times a step with micro-batches (use num_microbatches=1)")
            written.add(name)
            last_writer[name] = op
    out = program.clone()
    new_block = out.global_block()
    src_ops = new_block.ops[:first_update]
    result: list[Any] = []

    def var_like(name: str, new_name: str) -> None:
        if new_name in new_block.vars:
            return
        var = new_block._find_var_recursive(name)
        meta = {} if var is None else {"shape": var.shape, "dtype": var.dtype, "type": var.type,
                                       "lod_level": var.lod_level,
                                       "stop_gradient": var.stop_gradient}
        new_block.create_var(name=new_name, **meta)

    for name in feeds:
        parts = [_mb(name, m) for m in range(k)]
        for part in parts:
            var_like(name, part)
        result.append(new_block._make_op("split", {"X": [name]}, {"Out": parts},
                                         {"axis": 0, "num": k}))
    local = written | set(feeds)

    def renamed(slots: dict[str, list[str]], m: int) -> dict[str, list[str]]:
        out_slots = {}
        for slot, names in slots.items():
            out_slots[slot] = [_mb(n, m) if n in local else n for n in names]
            for n in names:
                if n in local:
                    var_like(n, _mb(n, m))
        return out_slots

    forward = [op for op in src_ops if not op.attrs.get("op_role", 0) & OpRole.Backward]
    backward = [op for op in src_ops if op.attrs.get("op_role", 0) & OpRole.Backward]
    # what the updates (and the caller) read from the forward/backward pass, merged
    read_by_updates = {n for op in updates for n in op.input_arg_names}
    needed = [n for op in updates for n in op.input_arg_names if n in written]
    losses = [n for op in forward if op.attrs.get("op_role", 0) & OpRole.Loss
              for n in op.output_arg_names]
    needed = list(dict.fromkeys(needed + [n for n in (*fetch, *losses) if n in written]))

    def merge_attrs(name: str) -> dict[str, Any]:
        attrs = dict(place_attrs(last_writer[name]))
        attrs["op_role"] = last_writer[name].attrs.get("op_role", 0) & ~OpRole.Loss
        return attrs

    # NOTE: a gradient the updates read is summed as each micro-batch's backward ends, on
    # its stage, rather than all at once after the last: the additions fill the gaps where a
    # stage waits for the next stage's gradients, and only the last one is left at the end.
    # The order of the additions is the one ``sum`` uses (left to right): the same bits.
    accumulated = [n for n in needed if n in read_by_updates
                   and last_writer[n].attrs.get("op_role", 0) & OpRole.Backward]

    # NOTE: a weight gradient of ``mul`` is computed once over the whole batch (the
    # micro-batches' inputs and output gradients concatenated) after every micro-batch's
    # backward, instead of once per micro-batch and summed: each stage first passes its
    # input gradients on, so the stage before it starts sooner, and computes its weight
    # gradients while that one works; one full-batch product is also cheaper than k
    # quarter-batch ones. The same sum, up to float rounding.
    # (only where X and Out@GRAD are the micro-batch's own: rows of X and of the output
    # gradient then pair up across the concatenation, whatever X's shape)
    deferred = {op.output("Y@GRAD")[0]: op for op in backward
                if op.type == "mul_grad" and op.output("Y@GRAD")
                and op.output("Y@GRAD")[0] in accumulated and persistable(op.input("Y")[0])
                and op.input("X")[0] in local and op.input("Out@GRAD")[0] in written}
    accumulated = [n for n in accumulated if n not in deferred]
    deferred_ops = {id(op) for op in deferred.values()}

    def running_sum(name: str, m: int) -> str:
        """The sum of ``name`` over micro-batches 0..m (the last one is ``name`` itself)."""
        return name if m == k - 1 else f"{name}@ACC{m}"

    def accumulate(m: int) -> None:
        for name in accumulated:
            parts = [_mb(name, 0) if m == 1 else running_sum(name, m - 1), _mb(name, m)]
            if m < k - 1:
                var_like(name, running_sum(name, m))
            result.append(new_block._make_op("sum", {"X": parts},
                                             {"Out": [running_sum(name, m)]},
                                             merge_attrs(name)))

    def whole(name: str, reader: Any) -> str:
        """``name`` over the whole batch: a feed as fed, else its micro-batches' parts
        concatenated on the lane of ``reader``."""
        if name in feeds:
            return name
        var_like(name, f"{name}@MBALL")
        result.append(new_block._make_op(
            "concat", {"X": [_mb(name, m) for m in range(k)]}, {"Out": [f"{name}@MBALL"]},
            {**place_attrs(reader), "op_role": reader.attrs.get("op_role", 0), "axis": 0}))
        return f"{name}@MBALL"

    for phase in (forward, backward):  # GPipe: every forward, then every backward
        for m in range(k):
            for op in phase:
                outputs = op.outputs
                if id(op) in deferred_ops:  # its weight gradient comes after the last
                    outputs = {s: v for s, v in op.outputs.items() if s != "Y@GRAD"}
                    if not any(v and v != [EMPTY] for v in outputs.values()):
                        continue  # the first layer: no input gradient to pass on
                copy = new_block._make_op(op.type, renamed(op.inputs, m),
                                          renamed(outputs, m), dict(op.attrs))
                copy.callsite = op.callsite  # errors point at the user's line, not here
                result.append(copy)
            if phase is backward and m > 0:
                accumulate(m)
    for name, op in deferred.items():  # each on its stage's lane, after its input gradients
        inputs = {"X": [whole(op.input("X")[0], op)], "Y": op.input("Y"),
                  "Out@GRAD": [whole(op.input("Out@GRAD")[0], op)]}
        copy = new_block._make_op("mul_grad", inputs, {"Y@GRAD": [name]}, dict(op.attrs))
        copy.callsite = op.callsite
        result.append(copy)
    for name in needed:
        attrs = merge_attrs(name)
        parts = [_mb(name, m) for m in range(k)]
        var = new_block._find_var_recursive(name)
        shape = list(var.shape) if var is not None and var.shape is not None else None
        grad_or_loss = name in read_by_updates or (shape is not None and numel(shape) == 1)
        if grad_or_loss:
            # gradients of a mean loss, and the loss itself: the mean over micro-batches
            if name not in accumulated and name not in deferred:
                result.append(new_block._make_op("sum", {"X": parts}, {"Out": [name]}, attrs))
            result.append(new_block._make_op("scale", {"X": [name]}, {"Out": [name]},
                                             {**attrs, "scale": 1.0 / k}))
        elif shape is not None and shape and shape[0] == -1:
            result.append(new_block._make_op("concat", {"X": parts}, {"Out": [name]},
                                             {**attrs, "axis": 0}))
        else:
            raise ValueError(f"split_microbatches: cannot merge fetch target {name!r} (shape "
                             f"{shape}) over {k} micro-batches: fetch the loss, or a value "
                             "with a batch dimension")
    result.extend(new_block.ops[first_update:])
    new_block.ops = result
    out._bump()
    return out

