"""Control flow and tensor arrays: ops whose kernels run a sub-block, and the array ops.

- ``while``: runs its ``sub_block`` while the bool ``Condition`` (one element) is true. ``X``
  lists the outer values the body reads (and the earlier values of what it writes, so that
  a loop that runs zero times hands them on); ``Out`` the outer variables the body writes
  (the condition among them). Each iteration runs the body through ``ctx.run_block`` with
  the current values fed and ``Out`` fetched: the values are threaded from one iteration to
  the next in the kernel, nothing lives in hidden step scopes.
- ``conditional_block``: runs its ``sub_block`` once if the condition holds
  (``is_scalar_condition``: ``Cond`` is one bool element that is true; otherwise every
  ``Cond`` tensor is non-empty, as Fluid's IfElse uses it); when it does not run, ``Out``
  keeps the values it had before (read through ``Input``).
- ``split_lod_tensor`` / ``merge_lod_tensor``: IfElse's branches, in control_rows.py.
- ``create_array``, ``write_to_array``, ``read_from_array``, ``lod_array_length``: tensor
  arrays (``LOD_TENSOR_ARRAY`` variables), whose run-time value is a ``TensorArray`` (a list
  of tensors). Writing returns a new list: a value read earlier is never changed under its
  reader's feet.

Example (what ``fluid.layers.While`` builds)::

    {Out=[i, cond]} = while(Condition=[cond], X=[i, n]) {sub_block=block[1]}
"""

from __future__ import annotations

from typing import Any

import torch

from ..dtypes import VarType
from ..scope import TensorArray
from .common import scalar_truth
from .control_flow_grad import conditional_block_grad_maker, while_grad_maker
from .registry import Meta, register_op

__all__: list[str] = []


# ----------------------------------------------------------------------------- while


def _while(ins: dict, attrs: dict, ctx: Any) -> dict:
    op = ctx.op
    block = attrs["sub_block"]
    x_names = list(op.inputs.get("X", ()))
    out_names = list(op.outputs.get("Out", ()))
    cond_name = op.inputs["Condition"][0]
    if cond_name not in out_names:
        raise ValueError(f"while: the loop body never writes its condition {cond_name!r}, so "
                         "the loop would not end; update it inside the block (e.g. "
                         "fluid.layers.less_than(x=i, y=n, cond=cond))")
    values = dict(zip(x_names, ins["X"]))
    cond = ins["Condition"]
    fetch = tuple(out_names)
    # the inputs of every iteration, for while_grad (Fluid keeps a scope per step); an
    # evaluation (is_test, e.g. after clone(for_test=True)) keeps none
    has_steps = bool(op.outputs.get("StepScopes"))
    steps: list[dict[str, Any]] = []
    record = has_steps and not attrs["is_test"]
    limit = getattr(getattr(op.block, "program", None), "_loop_limit", None)
    done = 0
    while scalar_truth("while", cond):
        if limit is not None and done >= limit:
            raise RuntimeError(f"while (block {block.idx}): the loop of a program read from a "
                               f"model file ran {limit} iterations without ending (the most "
                               "a model file's loop may run: parafluid.io.MODEL_LOOP_LIMIT)")
        done += 1
        feed = {n: values[n] for n in x_names}
        if record:
            steps.append(feed)
        outs = ctx.run_block(block.idx, feed=dict(feed), fetch=fetch)
        values.update(zip(out_names, outs))
        cond = values[cond_name]
    values[cond_name] = cond
    out: dict[str, Any] = {"Out": [_carried(values, n, "while") for n in out_names]}
    if has_steps:
        out["StepScopes"] = steps
    return out


def _carried(values: dict, name: str, op_type: str) -> Any:
    if name not in values:
        raise RuntimeError(f"{op_type}: {name!r} is written by the block, which did not run, "
                           "and had no value before it; give it one before the block")
    return values[name]


register_op("while", inputs=("X[]?", "Condition"), outputs=("Out[]?", "StepScopes?"),
            attrs={"sub_block": None, "is_test": False}, kernel=_while, grad=while_grad_maker)


# ----------------------------------------------------------------------------- conditional


def _conditional_block(ins: dict, attrs: dict, ctx: Any) -> dict:
    op = ctx.op
    conds = ins["Cond"]
    if attrs["is_scalar_condition"]:
        if len(conds) != 1:
            raise ValueError(f"conditional_block: a scalar condition is one variable, got "
                             f"{len(conds)}")
        run = scalar_truth("conditional_block", conds[0])
    else:
        run = all(c is not None and c.numel() != 0 for c in conds)
    in_names = list(op.inputs.get("Input", ()))
    out_names = list(op.outputs.get("Out", ()))
    values = dict(zip(in_names, ins["Input"]))
    if run:
        outs = ctx.run_block(attrs["sub_block"].idx, feed=dict(values), fetch=tuple(out_names))
        values.update(zip(out_names, outs))
    return {"Out": [_carried(values, n, "conditional_block") for n in out_names]}


register_op("conditional_block", inputs=("Cond[]", "Input[]?"), outputs=("Out[]?",),
            attrs={"sub_block": None, "is_scalar_condition": False}, kernel=_conditional_block,
            grad=conditional_block_grad_maker)


# ----------------------------------------------------------------------------- arrays


def _index(op_type: str, i: Any) -> int:
    if not isinstance(i, torch.Tensor) or i.numel() != 1:
        raise ValueError(f"{op_type}: the index I must be a tensor of one element")
    if i.is_floating_point():
        raise TypeError(f"{op_type}: the index I must be an integer tensor, got {i.dtype}")
    k = int(i.reshape(()).item())
    if k < 0:
        raise IndexError(f"{op_type}: index {k} is negative")
    return k


def _create_array(ins: dict, attrs: dict, ctx: Any) -> dict:
    return {"Out": TensorArray()}


register_op("create_array", outputs=("Out",), attrs={"dtype": "float32"}, kernel=_create_array)


def _write_to_array(ins: dict, attrs: dict, ctx: Any) -> dict:
    k = _index("write_to_array", ins["I"])
    old = ins["Array"]
    if not isinstance(old, list):
        raise TypeError(f"write_to_array: Array must hold a tensor array, got "
                        f"{type(old).__name__}")
    arr = TensorArray(old)
    if k >= len(arr):
        arr.extend([None] * (k + 1 - len(arr)))
    arr[k] = ins["X"]
    return {"Out": arr}


def _write_shape(ins: dict, attrs: dict) -> dict:
    x = ins["X"]
    return {"Out": Meta(x.shape, x.dtype, VarType.LOD_TENSOR_ARRAY)}


def _write_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    k = _index("write_to_array_grad", ins["I"])
    g = ins["Out@GRAD"] or TensorArray()
    out: dict[str, Any] = {}
    if "X" in ctx.need:
        gx = g[k] if k < len(g) else None
        out["X@GRAD"] = gx if gx is not None else torch.zeros_like(ins["X"])
    if "Array" in ctx.need:
        # the slot was overwritten: what the array held there before gets no gradient
        before = TensorArray(g)
        if k < len(before):
            before[k] = None
        out["Array@GRAD"] = before
    return out


register_op("write_to_array", inputs=("X", "I", "Array"), outputs=("Out",),
            infer_shape=_write_shape, kernel=_write_to_array, grad_kernel=_write_grad,
            grad_uses=("X", "I", "Array"), no_grad_inputs=("I",))


def _read_from_array(ins: dict, attrs: dict, ctx: Any) -> dict:
    k = _index("read_from_array", ins["I"])
    arr = ins["X"]
    if not isinstance(arr, list):
        raise TypeError(f"read_from_array: X must hold a tensor array, got "
                        f"{type(arr).__name__}")
    if k >= len(arr) or arr[k] is None:
        raise IndexError(f"read_from_array: index {k} was never written (the array has "
                         f"{len(arr)} slots)")
    return {"Out": arr[k]}


def _read_shape(ins: dict, attrs: dict) -> dict:
    x = ins["X"]
    return {"Out": Meta(x.shape, x.dtype)}


def _read_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    k = _index("read_from_array_grad", ins["I"])
    g = TensorArray([None] * max(len(ins["X"]), k + 1))
    g[k] = ins["Out@GRAD"]
    return {"X@GRAD": g}


register_op("read_from_array", inputs=("X", "I"), outputs=("Out",), infer_shape=_read_shape,
            kernel=_read_from_array, grad_kernel=_read_grad, grad_uses=("X", "I"),
            no_grad_inputs=("I",))


def _array_length(ins: dict, attrs: dict, ctx: Any) -> dict:
    arr = ins["X"]
    if not isinstance(arr, list):
        raise TypeError(f"lod_array_length: X must hold a tensor array, got "
                        f"{type(arr).__name__}")
    return {"Out": torch.tensor([len(arr)], dtype=torch.int64, device=ctx.device)}


register_op("lod_array_length", inputs=("X",), outputs=("Out",),
            infer_shape=lambda ins, attrs: {"Out": Meta((1,), "int64")}, kernel=_array_length)


register_op("is_empty", inputs=("X",), outputs=("Out",),
            infer_shape=lambda ins, attrs: {"Out": Meta((1,), "bool")},
            kernel=lambda ins, attrs, ctx: {"Out": torch.tensor([ins["X"].numel() == 0],
                                                                device=ctx.device)})


# ----------------------------------------------------------------------------- DynamicRNN
# A rank table is an int64 tensor [n_sequences, 2]: (sequence index, length), longest first
# (ties keep the input order). Step t of a DynamicRNN processes the sequences longer than t,
# which are the first rows in rank order.


def _rank_table(ins: dict, attrs: dict, ctx: Any) -> dict:
    # NOTE: as Fluid's LoDRankTable, a sequence's length counts the items of the next level
    # (sub-sequences of a nested LoD, rows of a one-level one)
    level = int(attrs["level"])
    lod = _lod_of(ins["X"], level, "lod_rank_table")
    lengths = [b - a for a, b in zip(lod[level], lod[level][1:])]
    order = sorted(range(len(lengths)), key=lambda k: -lengths[k])
    return {"Out": torch.tensor([[k, lengths[k]] for k in order], dtype=torch.int64
                                ).reshape(-1, 2)}


def _lod_of(x: torch.Tensor, level: int, op: str) -> list[list[int]]:
    from ..lod import get_lod

    lod = get_lod(x)
    if not lod or level >= len(lod):
        raise ValueError(f"{op}: the input must carry a LoD with level {level}, got "
                         f"{lod}; feed a LoDTensor")
    return [list(map(int, lv)) for lv in lod]


def get_lod_level(x: torch.Tensor, level: int) -> list[int]:
    """Absolute row offsets of ``x``'s LoD at ``level`` (an error naming the op otherwise)."""
    lod = _lod_of(x, level, "lod_rank_table")
    offs = list(lod[level])
    for finer in lod[level + 1:]:
        offs = [finer[o] for o in offs]
    return offs


register_op("lod_rank_table", inputs=("X",), outputs=("Out",), attrs={"level": 0},
            infer_shape=lambda ins, attrs: {"Out": Meta((-1, 2), "int64")}, kernel=_rank_table)

register_op("max_sequence_len", inputs=("RankTable",), outputs=("Out",),
            infer_shape=lambda ins, attrs: {"Out": Meta((1,), "int64")},
            kernel=lambda ins, attrs, ctx: {"Out": torch.tensor(
                [int(ins["RankTable"][:, 1].max()) if ins["RankTable"].shape[0] else 0],
                dtype=torch.int64, device=ctx.device)})


def _active(table: torch.Tensor, t: int) -> int:
    """How many sequences are longer than ``t`` (they lead the rank order)."""
    return int((table[:, 1] > t).sum())


def _step_items(lod: list[list[int]], ranked: list[list[int]], t: int
                ) -> tuple[list[int], list[list[int]] | None]:
    """Rows of step ``t`` (item t of each sequence longer than t, in rank order) and, for a
    nested LoD, their own LoD (the items are whole sub-sequences)."""
    from ..lod import merge_lods, slice_lod

    rows: list[int] = []
    subs = []
    for k, n in ranked:
        if n <= t:
            continue
        i = lod[0][k] + t
        if len(lod) == 1:
            rows.append(i)
            continue
        (a, b), sub = slice_lod(lod[1:], i, i + 1)
        rows.extend(range(a, b))
        subs.append(sub)
    return rows, (merge_lods(subs) if len(lod) > 1 and subs else None)


def _to_array(ins: dict, attrs: dict, ctx: Any) -> dict:
    from ..lod import attach_lod

    x, table = ins["X"], ins["RankTable"]
    lod = _lod_of(x, 0, "lod_tensor_to_array")
    ranked = table.tolist()
    steps = ranked[0][1] if ranked else 0
    arr = TensorArray()
    for t in range(steps):
        rows, sub = _step_items(lod, ranked, t)
        idx = torch.tensor(rows, dtype=torch.long, device=x.device)
        arr.append(attach_lod(x.index_select(0, idx), sub))
    return {"Out": arr}


def _to_array_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, ranked = ins["X"], ins["RankTable"].tolist()
    lod = _lod_of(x, 0, "lod_tensor_to_array_grad")
    g = torch.zeros_like(x)
    for t, gt in enumerate(ins["Out@GRAD"] or ()):
        if gt is not None:
            rows, _ = _step_items(lod, ranked, t)
            g.index_add_(0, torch.tensor(rows, dtype=torch.long, device=x.device), gt)
    return {"X@GRAD": g}


def _to_array_shape(ins: dict, attrs: dict) -> dict:
    return {"Out": Meta(ins["X"].shape, ins["X"].dtype, VarType.LOD_TENSOR_ARRAY)}


register_op("lod_tensor_to_array", inputs=("X", "RankTable"), outputs=("Out",),
            infer_shape=_to_array_shape, kernel=_to_array, grad_kernel=_to_array_grad,
            grad_uses=("X", "RankTable"), no_grad_inputs=("RankTable",))


def _item_pieces(item: torch.Tensor, pos: int) -> tuple[torch.Tensor, list[list[int]] | None]:
    """The rows of sequence ``pos`` (in rank order) in one step's item, with their LoD when
    the item holds whole sub-sequences."""
    from ..lod import get_lod, slice_lod

    lod = get_lod(item)
    if not lod:
        return item[pos:pos + 1], None
    (a, b), sub = slice_lod(lod, pos, pos + 1)
    return item[a:b], sub


def _from_array(ins: dict, attrs: dict, ctx: Any) -> dict:
    from ..lod import attach_lod, lengths_to_offsets, merge_lods

    arr, table = ins["X"], ins["RankTable"]
    ranked = table.tolist()
    by_seq = sorted(range(len(ranked)), key=lambda pos: ranked[pos][0])
    pieces, subs = [], []
    for pos in by_seq:
        _, n = ranked[pos]
        for t in range(n):
            piece, sub = _item_pieces(arr[t], pos)
            pieces.append(piece)
            subs.append(sub)
    lengths = [ranked[pos][1] for pos in by_seq]
    if not pieces:
        raise ValueError("array_to_lod_tensor: every sequence is empty")
    lod = [lengths_to_offsets(lengths)]
    if all(sub is not None for sub in subs):
        lod += merge_lods(subs) or []
    return {"Out": attach_lod(torch.cat(pieces), lod)}


def _from_array_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    from ..lod import attach_lod, get_lod

    ranked, g = ins["RankTable"].tolist(), ins["Out@GRAD"]
    # NOTE: the rows of the forward's output, rebuilt from its items (the gradient need not
    # carry the LoD)
    lod = get_lod(_from_array({"X": ins["X"], "RankTable": ins["RankTable"]}, attrs,
                              ctx)["Out"])
    lod = [list(map(int, lv)) for lv in lod]
    steps = ranked[0][1] if ranked else 0
    out = TensorArray()
    for t in range(steps):
        rows, sub = _step_items(lod, ranked, t)
        out.append(attach_lod(g.index_select(
            0, torch.tensor(rows, dtype=torch.long, device=g.device)), sub))
    return {"X@GRAD": out}


register_op("array_to_lod_tensor", inputs=("X", "RankTable"), outputs=("Out",),
            infer_shape=lambda ins, attrs: {"Out": Meta(ins["X"].shape, ins["X"].dtype)},
            kernel=_from_array, grad_kernel=_from_array_grad, grad_uses=("X", "RankTable"),
            no_grad_inputs=("RankTable",))


def _shrink(ins: dict, attrs: dict, ctx: Any) -> dict:
    """The first ``k`` rows (the ``k`` sequences still running at step I); an X with LoD
    (a static input of several rows per sequence) keeps its first ``k`` sequences whole,
    with their LoD, as Fluid's."""
    from ..lod import attach_lod, get_lod, slice_lod

    x = ins["X"]
    k = _active(ins["RankTable"], _index("shrink_rnn_memory", ins["I"]))
    lod = get_lod(x)
    if not lod:
        return {"Out": x[:k]}
    (_, end), sub = slice_lod(lod, 0, min(k, len(lod[0]) - 1))
    return {"Out": attach_lod(x[:end], sub)}


def _shrink_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, g = ins["X"], ins["Out@GRAD"]
    out = torch.zeros_like(x)
    out[: g.shape[0]] = g
    return {"X@GRAD": out}


register_op("shrink_rnn_memory", inputs=("X", "RankTable", "I"), outputs=("Out",),
            infer_shape=lambda ins, attrs: {"Out": Meta((-1, *ins["X"].shape[1:]),
                                                        ins["X"].dtype)}, kernel=_shrink,
            grad_kernel=_shrink_grad, grad_uses=("X",), no_grad_inputs=("RankTable", "I"))


def _rank_rows(x: torch.Tensor, table: torch.Tensor
               ) -> tuple[torch.Tensor, list[list[int]] | None]:
    """The rows of ``x`` in rank order and, for an ``x`` with LoD, the LoD of the reordered
    value: a row per ranked item, or each ranked item's whole sequence (top LoD level)."""
    from ..lod import get_lod, merge_lods, slice_lod

    order = [int(k) for k in table[:, 0].tolist()]
    lod = get_lod(x)
    if not lod:
        return torch.tensor(order, dtype=torch.long, device=x.device), None
    if len(order) != len(lod[0]) - 1:
        raise ValueError(f"reorder_lod_tensor_by_rank: X has {len(lod[0]) - 1} sequences but "
                         f"the rank table ranks {len(order)}; X needs one sequence per item")
    rows, lods = [], []
    for k in order:
        (a, b), sub = slice_lod(lod, k, k + 1)
        rows.extend(range(a, b))
        lods.append(sub)
    return torch.tensor(rows, dtype=torch.long, device=x.device), merge_lods(lods)


def _reorder_by_rank(ins: dict, attrs: dict, ctx: Any) -> dict:
    from ..lod import attach_lod

    x = ins["X"]
    rows, lod = _rank_rows(x, ins["RankTable"])
    return {"Out": attach_lod(x.index_select(0, rows), lod)}


def _reorder_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    x, g = ins["X"], ins["Out@GRAD"]
    from ..lod import attach_lod, get_lod

    rows, _ = _rank_rows(x, ins["RankTable"])
    # NOTE: the gradient is back in X's order, so it carries X's sequences (as Fluid's)
    return {"X@GRAD": attach_lod(torch.zeros_like(x).index_copy_(0, rows, g), get_lod(x))}


register_op("reorder_lod_tensor_by_rank", inputs=("X", "RankTable"), outputs=("Out",),
            infer_shape=lambda ins, attrs: {"Out": ins["X"]}, kernel=_reorder_by_rank,
            grad_kernel=_reorder_grad, grad_uses=("X", "RankTable"),
            no_grad_inputs=("RankTable",))
