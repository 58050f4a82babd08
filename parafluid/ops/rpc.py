"""Parameter-server ops: ``send``, ``recv``, ``send_barrier``, ``fetch_barrier`` (trainer side)
and ``listen_and_serv`` (pserver side). All are side effects: pruning never drops them and
executors keep them in program order.

The trainer-side kernels are thin wrappers over the process's client pool of their trainer
(``parafluid.distributed.ps_registry.client_pool(attrs["trainer_id"])``): one connection per
pserver, every call bounded by ``FLAGS_rpc_deadline``, errors naming the endpoint and the
variable. ``listen_and_serv`` runs the program-independent server loop
(``parafluid.distributed.pserver.ParameterServer``) with callbacks that run the op's
optimize sub-blocks against the scope (``ctx.run_block``) and read parameter blocks from it.

``send`` only starts its messages (``ClientPool.send_async``) and returns, so the backward
pass goes on while a gradient travels; the next op that talks to a pserver (``send_barrier``,
``recv``) waits for them first, and a step waits for them before it ends, failed or not.
``FLAGS_rpc_overlap_send=0`` sends each gradient before the next op runs.

What ``DistributeTranspiler`` (pserver mode) writes, printed::

    {} = send(X=[fc_0.w_0@GRAD.block0.trainer_1]) {epmap=['127.0.0.1:6174'], ...}
    {} = send_barrier() {endpoints=['127.0.0.1:6174', '127.0.0.1:6175'], trainer_id=1}
    {Out=[fc_0.w_0.block0]} = recv() {epmap=['127.0.0.1:6174'], varnames=['fc_0.w_0.block0']}
    {} = fetch_barrier() {endpoints=[...], trainer_id=1}
    {} = listen_and_serv() {Fanin=2, endpoint='127.0.0.1:6174', grad_to_block_id=[...],
                            lr_decay_block_id=1, optimize_blocks=[block 2, block 3], ...}
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import numpy as np
import torch

from ..distributed.checkpoint import write_pserver_checkpoint, write_pserver_emergency_checkpoint
from ..dtypes import VarType
from ..flags import flag
from ..tensor_file import scope_values
from .registry import Meta, register_op

__all__ = ["RPC_OP_TYPES", "trainer_suffix", "parse_grad_to_block"]

log = logging.getLogger("parafluid.ops.rpc")

RPC_OP_TYPES = frozenset({"send", "recv", "send_barrier", "fetch_barrier",
                          "distributed_lookup_table"})



def pserver_checkpoint_filename(pserver_program: Any) -> str | None:
    """The file a pserver's blocks are saved in (``pserver_<id>.safetensors``), or None when
    ``pserver_program`` is not a pserver program (no ``listen_and_serv`` op)."""
    for op in pserver_program.global_block().ops:
        if op.type == "listen_and_serv":
            return f"pserver_{int(op.attr('pserver_id'))}.safetensors"
    return None

def trainer_suffix(trainer_id: int) -> str:
    """The suffix of a gradient block sent by trainer ``trainer_id`` in sync mode."""
    return f".trainer_{trainer_id}"


def _pool(attrs: dict, ctx: Any) -> Any:
    from ..distributed.ps_registry import client_pool

    if ctx.device_index:
        # NOTE: every replica would push its part of the batch under the same name
        raise ValueError(f"{ctx.op.type}: a pserver-mode trainer program runs on one device "
                         "(fluid.Executor); it was replicated over several (ParallelExecutor "
                         "or CompiledProgram.with_data_parallel), which pserver mode does not "
                         "support")
    return client_pool(int(attrs["trainer_id"]))


def _no_shapes(ins: dict, attrs: dict) -> dict:
    return {}  # outputs keep the shapes the transpiler declared


def _check_lists(op: str, names: list, epmap: list, what: str) -> None:
    if len(names) != len(epmap):
        raise ValueError(f"{op}: {len(names)} {what} but {len(epmap)} endpoints in 'epmap' "
                         f"({names} vs {epmap}); they must pair up")


# ----------------------------------------------------------------------------- trainer side


def _send(ins: dict, attrs: dict, ctx: Any) -> dict:
    values = ins["X"]
    names = list(attrs["send_varnames"]) or list(ctx.op.input("X"))
    epmap = list(attrs["epmap"])
    _check_lists("send", names, epmap, "variables")
    pool = _pool(attrs, ctx)
    for name, ep, value in zip(names, epmap, values):
        if value is None:
            raise ValueError(f"send: {name!r} (to pserver {ep}) has no value: the op that "
                             "computes this gradient did not run")
    pending = getattr(ctx.services, "pending", None)
    if pending is not None and flag("FLAGS_rpc_overlap_send"):
        # NOTE: the backward pass goes on while the gradient travels; the next op that
        # talks to a pserver (the send barrier, a recv) waits for it first, and the step
        # waits for it before it ends (plan.RunServices.pending)
        pool.send_async(names, epmap, values, tag=f"{names} to {epmap}")
        pending.add(pool)
    else:
        pool.send(names, epmap, values)  # NOTE: the blocks for different pservers go at once
    return {}


def _recv(ins: dict, attrs: dict, ctx: Any) -> dict:
    names = list(attrs["varnames"]) or list(ctx.op.output("Out"))
    epmap = list(attrs["epmap"])
    _check_lists("recv", names, epmap, "variables")
    pool = _pool(attrs, ctx)
    block = ctx.op.block
    out = []
    got = pool.recv(names, epmap)  # NOTE: the blocks of different pservers are read at once
    for name, var_name, ep, value in zip(names, ctx.op.output("Out"), epmap, got):
        var = block._find_var_recursive(var_name)
        if var is not None and var.shape is not None and tuple(value.shape) != tuple(var.shape):
            raise ValueError(f"recv: pserver {ep} sent {name!r} with shape {list(value.shape)}, "
                             f"but {var_name!r} has shape {list(var.shape)}: the pserver runs a "
                             "program transpiled with other settings")
        out.append(value.to(ctx.device) if value.device != ctx.device else value)
    return {"Out": out}


def _send_barrier(ins: dict, attrs: dict, ctx: Any) -> dict:
    _pool(attrs, ctx).send_barrier(attrs["endpoints"])
    return {}


def _fetch_barrier(ins: dict, attrs: dict, ctx: Any) -> dict:
    _pool(attrs, ctx).fetch_barrier(attrs["endpoints"])
    return {}


register_op("send", inputs=("X[]",), outputs=(),
            attrs={"epmap": [], "send_varnames": [], "trainer_id": 0, "sync_mode": True},
            infer_shape=_no_shapes, kernel=_send, side_effect=True, comm=True)
register_op("recv", inputs=(), outputs=("Out[]",),
            attrs={"epmap": [], "varnames": [], "trainer_id": 0},
            infer_shape=_no_shapes, kernel=_recv, side_effect=True, comm=True)
# ------------------------------------------------------------------ distributed lookup table


def _shards(attrs: dict) -> list[tuple[str, str, int, int]]:
    """``(block name, endpoint, first row, rows)`` of each shard of the table."""
    names, eps, sections = attrs["table_names"], attrs["epmap"], attrs["height_sections"]
    if not (len(names) == len(eps) == len(sections)):
        raise ValueError(f"distributed_lookup_table: table_names {names}, epmap {eps} and "
                         f"height_sections {sections} must have one entry per shard")
    out, start = [], 0
    for name, ep, rows in zip(names, eps, sections):
        out.append((name, ep, start, int(rows)))
        start += int(rows)
    return out


def _dist_lookup_shape(ins: dict, attrs: dict) -> dict:
    from .embedding import _ids_out_shape
    from .registry import Meta

    ids = ins["Ids"]
    if ids.dtype not in ("int64", "int32"):
        raise TypeError(f"distributed_lookup_table: Ids must be int64, got {ids.dtype}")
    return {"Out": Meta((*_ids_out_shape(ids.shape), int(attrs["width"])), attrs["dtype"])}


def _dist_lookup(ins: dict, attrs: dict, ctx: Any) -> dict:
    """Prefetch only the rows the ids name, from the pserver holding each row."""
    from .embedding import _flat_ids, _ids_out_shape

    ids = ins["Ids"]
    height, width = int(attrs["height"]), int(attrs["width"])
    flat = _flat_ids(ids, height)
    out = None
    pool = _pool(attrs, ctx)
    wanted = []
    for name, ep, first, rows in _shards(attrs):
        mask = (flat >= first) & (flat < first + rows)
        if bool(mask.any()):
            uniq, inverse = torch.unique(flat[mask] - first, return_inverse=True)
            wanted.append((name, ep, mask, uniq, inverse))
    # NOTE: the shards of different pservers are prefetched at once
    rows_got = pool.each_at([w[1] for w in wanted],
                            lambda c, i: c.prefetch(wanted[i][0], wanted[i][3]))
    for (name, ep, mask, uniq, inverse), got in zip(wanted, rows_got):
        if tuple(got.shape) != (len(uniq), width):
            raise ValueError(f"distributed_lookup_table: pserver {ep} returned rows of shape "
                             f"{list(got.shape)} for {len(uniq)} ids of {name!r}, expected "
                             f"[{len(uniq)}, {width}]")
        if out is None:
            out = torch.zeros((flat.numel(), width), dtype=got.dtype)
        out[mask] = got[inverse]
    if out is None:
        out = torch.zeros((flat.numel(), width))
    pad = attrs["padding_idx"]
    if pad != -1:
        out = out.masked_fill((flat == pad).unsqueeze(1), 0.0)
    return {"Out": out.to(ctx.device).reshape(*_ids_out_shape(ids.shape), width)}


def _dist_lookup_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    """The row-sparse gradient of the table: the output gradient's rows, at their ids."""
    from ..scope import SelectedRows

    flat = ins["Ids"].reshape(-1).long()
    rows = ins["Out@GRAD"].reshape(-1, int(attrs["width"]))
    pad = attrs["padding_idx"]
    if pad != -1:
        rows = rows.masked_fill((flat == pad).unsqueeze(1), 0.0)
    return {"W@GRAD": SelectedRows(flat, rows, int(attrs["height"]))}


def _sparse_grad_shape(ins: dict, attrs: dict) -> dict:
    from .registry import Meta

    return {"W@GRAD": Meta((int(attrs["height"]), int(attrs["width"])), attrs["dtype"],
                           "selected_rows")}


def _split_selected_rows(ins: dict, attrs: dict, ctx: Any) -> dict:
    """Cut row-sparse X by row ranges (``height_sections``); rows become shard-local."""
    from ..scope import SelectedRows

    x = ins["X"]
    if not isinstance(x, SelectedRows):
        raise TypeError(f"split_selected_rows: X must be row-sparse (SelectedRows), got a "
                        f"dense {type(x).__name__}")
    out, first = [], 0
    for rows in attrs["height_sections"]:
        mask = (x.rows >= first) & (x.rows < first + rows)
        out.append(SelectedRows(x.rows[mask] - first, x.value[mask], rows))
        first += rows
    # as Fluid, the sections need not add up to X's height, but every row must fall in one
    if len(x.rows) and int(x.rows.max()) >= first:
        raise ValueError(f"split_selected_rows: row {int(x.rows.max())} of X lies past the "
                         f"height_sections {attrs['height_sections']} (they cover {first} "
                         "rows)")
    return {"Out": out}


_TABLE_ATTRS = {"table_names": [], "epmap": [], "height_sections": [], "height": 0, "width": 0,
                "padding_idx": -1, "dtype": "float32", "trainer_id": 0}
register_op("distributed_lookup_table", inputs=("Ids",), outputs=("Out",),
            attrs=dict(_TABLE_ATTRS), infer_shape=_dist_lookup_shape, kernel=_dist_lookup,
            side_effect=True, comm=True, share_lod=("Ids", "Out"))
register_op("distributed_lookup_table_grad", inputs=("Ids", "Out@GRAD"), outputs=("W@GRAD",),
            attrs=dict(_TABLE_ATTRS), infer_shape=_sparse_grad_shape, kernel=_dist_lookup_grad)
def _split_selected_rows_shape(ins: dict, attrs: dict) -> dict:
    x = ins["X"]
    return {"Out": [Meta((int(h), *x.shape[1:]), x.dtype, VarType.SELECTED_ROWS)
                    for h in attrs["height_sections"]]}


register_op("split_selected_rows", inputs=("X",), outputs=("Out[]",),
            attrs={"height_sections": []}, infer_shape=_split_selected_rows_shape,
            kernel=_split_selected_rows)
register_op("send_barrier", inputs=(), outputs=(),
            attrs={"endpoints": [], "trainer_id": 0},
            infer_shape=_no_shapes, kernel=_send_barrier, side_effect=True, comm=True)
register_op("fetch_barrier", inputs=(), outputs=(),
            attrs={"endpoints": [], "trainer_id": 0},
            infer_shape=_no_shapes, kernel=_fetch_barrier, side_effect=True, comm=True)


# ----------------------------------------------------------------------------- pserver side


def parse_grad_to_block(entries: list[str]) -> dict[str, int]:
    """``["w@GRAD.block0:2", ...]`` (Fluid's attr format) -> ``{"w@GRAD.block0": 2, ...}``."""
    out = {}
    for entry in entries:
        name, sep, idx = str(entry).rpartition(":")
        if not sep or not name or not idx.isdigit():
            raise ValueError(f"listen_and_serv: grad_to_block_id entries must be "
                             f"'gradient:block_index', got {entry!r}")
        out[name] = int(idx)
    return out


def _mean(values: list[Any]) -> Any:
    """The mean of dense tensors, or of row-sparse ones (rows concatenated, values scaled)."""
    from ..scope import SelectedRows

    if len(values) == 1:
        return values[0]
    if isinstance(values[0], SelectedRows):
        return SelectedRows(torch.cat([v.rows for v in values]),
                            torch.cat([v.value for v in values]) / len(values),
                            values[0].height)
    return torch.stack(values).mean(0)


class _Server:
    """The callbacks of one ``listen_and_serv`` run (state lives only during the run)."""

    def __init__(self, attrs: dict, ctx: Any) -> None:
        self.ctx = ctx
        self.endpoint = attrs["endpoint"]
        self.fan_in = int(attrs["Fanin"])
        self.sync = bool(attrs["sync_mode"])
        self.grad_to_block = parse_grad_to_block(attrs["grad_to_block_id"])
        self.lr_block = int(attrs["lr_decay_block_id"])
        # async mode: the LR block runs once per trainer step, before that step's first
        # gradient is applied. Each trainer sends each gradient once per step, in its
        # program's order (last layer first), so the arrivals of the gradient that came
        # first count the trainers' steps, and the LR value exists before any update reads it
        self.lr_trigger: str | None = None

    def optimize(self, grads: dict[str, list[torch.Tensor]]) -> None:
        unknown = sorted(set(grads) - set(self.grad_to_block))
        if unknown:
            raise ValueError(f"pserver {self.endpoint} got gradients it does not optimize: "
                             f"{unknown} (it holds {sorted(self.grad_to_block)}); the trainer "
                             "runs a program transpiled with other pservers or settings")
        if self.lr_block >= 0 and not self.sync and self.lr_trigger is None:
            self.lr_trigger = min(grads, key=self.grad_to_block.__getitem__)
        if self.lr_block >= 0 and (self.sync or self.lr_trigger in grads):
            self.ctx.run_block(self.lr_block)
        for name in sorted(grads, key=self.grad_to_block.__getitem__):
            self.ctx.run_block(self.grad_to_block[name], feed=self._feed(name, grads[name]))

    def _feed(self, name: str, values: list[torch.Tensor]) -> dict[str, torch.Tensor]:
        if not self.sync or self.fan_in == 1:
            return {name: values[0]}
        # The optimize block sums Fanin gradient slots and scales by 1/Fanin. When trainers
        # have completed (uneven data), the absent slots get the mean of the present ones,
        # so the block computes the mean over the trainers still training.
        feed = {name + trainer_suffix(i): v for i, v in enumerate(values)}
        if len(values) < self.fan_in:
            mean = _mean(values)
            for i in range(len(values), self.fan_in):
                feed[name + trainer_suffix(i)] = mean
        return feed

    def prefetch(self, table: str, rows: torch.Tensor) -> torch.Tensor:
        holder = self.ctx.scope.find_var(table)
        if holder is None or holder.value is None:
            raise KeyError(f"no lookup table block {table!r}")
        value = holder.value
        if rows.numel() and (int(rows.min()) < 0 or int(rows.max()) >= value.shape[0]):
            raise IndexError(f"rows {int(rows.min())}..{int(rows.max())} are outside the "
                             f"{value.shape[0]} rows of {table!r}")
        return value.index_select(0, rows.to(value.device))

    def _state(self, what: str) -> dict[str, torch.Tensor]:
        """This pserver's persistables that hold a value (its blocks, their optimizer
        state, the LR counter)."""
        program = self.ctx.op.block.program
        scope = self.ctx.scope
        chosen = [v for n, v in program.global_block().vars.items() if v.persistable
                  and scope.find_var(n) is not None and scope.find_var(n).value is not None]
        return scope_values(scope, chosen, f"pserver {self.endpoint} {what}")

    def save(self, dirname: str, step: int, keep: str = "") -> str:
        """Checkpoint notice: this pserver's persistables of ``step`` into a new version of
        its file in ``dirname``, keeping ``keep`` (the committed one; see io); returns the
        record of the file for the checkpoint's marker."""
        return write_pserver_checkpoint(dirname,
                                        pserver_checkpoint_filename(self.ctx.op.block.program),
                                        self._state("checkpoint"), step, keep)

    def emergency_save(self, dirname: str, step: int) -> None:
        """Before a failure ends the pserver: its persistables of ``step`` into
        ``dirname/pserver_<id>/`` with a marker of their own (see io)."""
        write_pserver_emergency_checkpoint(
            dirname, pserver_checkpoint_filename(self.ctx.op.block.program),
            self._state("emergency checkpoint"), step)

    def check_grad(self, name: str, value: Any) -> None:
        """Refuse (ValueError) a gradient this pserver does not optimize, or of the wrong
        shape or dtype: it would fail inside the optimize block and end the job."""
        from ..dtypes import convert_dtype
        from ..scope import SelectedRows

        if name not in self.grad_to_block:
            raise ValueError(f"it optimizes no gradient of that name (it holds "
                             f"{len(self.grad_to_block)}, e.g. {sorted(self.grad_to_block)[:3]})")
        var = self.ctx.op.block.program.global_block()._find_var_recursive(name)
        if var is None or var.shape is None:
            return
        want = tuple(var.shape)
        if isinstance(value, SelectedRows):
            shape, dtype = (value.height, *value.value.shape[1:]), value.value.dtype
        else:
            shape, dtype = tuple(value.shape), value.dtype
        if any(w >= 0 and w != g for w, g in zip(want, shape)) or len(want) != len(shape):
            raise ValueError(f"expected shape {list(want)}, got {list(shape)}")
        if var.dtype is not None and convert_dtype(dtype) != convert_dtype(var.dtype):
            raise ValueError(f"expected dtype {convert_dtype(var.dtype)}, got "
                             f"{convert_dtype(dtype)}")

    def max_message_bytes(self) -> int:
        """The largest message this pserver takes: 4x its largest variable, at least 64 MiB.

        NOTE: ZeroMQ refuses a larger frame before allocating it. A sparse gradient can hold
        a row more than once (one per id in the batch), hence the margin.
        """
        from ..dtypes import convert_dtype, to_torch

        biggest = 0
        for var in self.ctx.op.block.program.global_block().vars.values():
            if var.shape is None or any(d is None or d < 0 for d in var.shape):
                continue
            dtype = to_torch(convert_dtype(var.dtype or "float32"))
            biggest = max(biggest, dtype.itemsize * int(np.prod(var.shape)))
        return max(64 << 20, 4 * biggest)

    def get(self, name: str) -> torch.Tensor:
        holder = self.ctx.scope.find_var(name)
        if holder is None or holder.value is None:
            raise KeyError(name)
        return holder.value


def _listen_and_serv(ins: dict, attrs: dict, ctx: Any) -> dict:
    from ..distributed.pserver import ParameterServer

    server = _Server(attrs, ctx)
    ps = ParameterServer(server.endpoint, server.fan_in, server.sync, optimize=server.optimize,
                         get=server.get, save=server.save, check_grad=server.check_grad,
                         emergency_save=server.emergency_save,
                         peers=ctx.op.block.program.meta.pserver_endpoints,
                         prefetch=server.prefetch, deadline_s=ctx.deadline_s,
                         max_message_bytes=server.max_message_bytes())
    main = threading.current_thread() is threading.main_thread()

    def ready() -> None:
        log.info("pserver %s: serving %d trainers (%s mode), %d optimize blocks", ps.endpoint,
                 server.fan_in, "sync" if server.sync else "async", len(server.grad_to_block))

    ps.serve(handle_sigterm=main, on_ready=ready)
    return {}


register_op("listen_and_serv", inputs=(), outputs=(),
            attrs={"endpoint": "", "Fanin": 1, "sync_mode": True, "optimize_blocks": [],
                   "grad_to_block_id": [], "lr_decay_block_id": -1, "pserver_id": 0,
                   "distributed_mode": 0},
            infer_shape=_no_shapes, kernel=_listen_and_serv, side_effect=True, comm=True)
