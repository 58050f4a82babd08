"""The parameter-server mode of ``DistributeTranspiler``: trainer, pserver and startup programs.

``PServerTranspile`` does the work behind ``DistributeTranspiler.transpile`` when
``config.mode == "pserver"`` (Fluid 1.x's rules, see docs/pserver.md):

- every parameter (and its gradient) is cut into blocks (``slicing.slice_variable``) and each
  block goes to one pserver (``config.split_method``: RoundRobin or HashName);
- the trainer program (the original main program, changed in place as in Fluid) loses its
  optimize and LR-schedule ops; after the op producing each gradient it gets a ``split``
  (when sliced) and a ``send``; at the end, sync mode: ``send_barrier``, one ``recv`` per
  parameter, ``fetch_barrier``, a ``concat`` per sliced parameter (async: ``recv`` and
  ``concat`` only). In sync mode with several trainers the blocks sent are suffixed
  ``.trainer_<id>``. The trainer's startup program also pulls the initial parameters;
- each pserver program holds one ``listen_and_serv`` op with one optimize sub-block per
  parameter block it owns (sync mode with N trainers: ``sum`` of the N gradient blocks,
  ``scale`` by 1/N, then the parameter's own optimize-role ops, regularization included,
  renamed to the block, optimizer state sliced the same way, scalar state such as Adam's
  beta powers copied per block) and, when the program has an LR schedule, a block running
  the LR ops once per step;
- each pserver startup program initializes only that pserver's variables, the sliced ones
  with their shape resized to the block.

Which ops go to the pservers: in a program that places ops on ``/node:ps``
(``fluid.place_guard``), exactly those, because of their place: they must be the
updates (optimize role) or the LR schedule, and the optimize ops placed on the workers stay
on the workers (allowed with one trainer, whose local updates nobody else needs). In any
other program, every optimize-role and LR-schedule op (Fluid's rule, by role).

Example (what the pserver of a 2 x 2 job runs)::

    t = fluid.DistributeTranspiler()
    t.transpile(0, pservers="127.0.0.1:6174,127.0.0.1:6175", trainers=2)
    main, startup = t.get_pserver_programs("127.0.0.1:6174")
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from ..distributed.endpoints import parse_endpoints
from ..framework import Block, OpRole, Program
from ..ops.rpc import trainer_suffix
from ..passes.grad_aggregation import find_params_grads
from ..placement import NODE_ATTR, place_of
from .ps_dispatcher import PSDispatcher, RoundRobin
from .slicing import VarBlock, slice_variable

__all__ = ["PServerTranspile"]

# optimize-role ops that act element by element (so they may run on a block of a parameter)
_ELEMENTWISE_OPT = frozenset({"sgd", "momentum", "adam", "adagrad", "rmsprop", "adamax",
                              "adadelta", "decayed_adagrad", "ftrl", "proximal_gd",
                              "proximal_adagrad", "scale", "sum", "sign", "elementwise_add",
                              "elementwise_sub", "elementwise_mul", "elementwise_div",
                              "elementwise_max", "elementwise_min", "elementwise_pow", "pow",
                              "sqrt", "square", "abs", "clip", "clip_by_value", "assign",
                              "cast"})
_RESIZABLE_INIT = frozenset({"fill_constant", "uniform_random", "gaussian_random",
                             "truncated_gaussian_random"})


@dataclass
class _ParamPlan:
    """One parameter: its gradient, blocks, and the pserver of each block."""

    param: str
    grad: str
    shape: tuple[int, ...]
    dtype: Any
    blocks: list[VarBlock]
    eps: list[str]
    opt_ops: list[Any] = field(default_factory=list)  # ops of the original, program order
    table: bool = False  # a distributed lookup table: sharded by rows, never pulled whole
    sparse: bool = False  # a row-sparse gradient (SelectedRows), cut by rows when sliced

    @property
    def sliced(self) -> bool:
        return len(self.blocks) > 1

    def grad_block(self, i: int) -> str:
        return f"{self.grad}.block{i}" if self.sliced else self.grad


def _clone_sub_block(prog: Program, block: Block, parent_idx: int) -> Block:
    """A copy of ``block`` (vars, ops, nested sub-blocks) as a new child of ``parent_idx``."""
    current = prog.current_block_idx
    new = prog._create_block(parent_idx)
    for var in block.vars.values():
        new.create_var(name=var.name, shape=var.shape, dtype=var.dtype, type=var.type,
                       lod_level=var.lod_level, persistable=var.persistable)
    for op in block.ops:
        attrs = dict(op.attrs)
        if isinstance(attrs.get("sub_block"), Block):
            attrs["sub_block"] = _clone_sub_block(prog, attrs["sub_block"], new.idx)
        new.append_op(op.type, inputs=dict(op.inputs), outputs=dict(op.outputs), attrs=attrs)
    prog.current_block_idx = current
    return new


class PServerTranspile:
    """The pserver-mode rewrite of one (main, startup) pair; see the module docstring.

    Args:
        config: the ``DistributeTranspilerConfig``.
        program, startup: the programs to transpile (changed in place).
        trainer_id: this trainer's id.
        pservers: the pserver endpoints.
        trainers: the number of trainers.
        sync_mode: synchronous training.
    """

    def __init__(self, config: Any, program: Program, startup: Program, trainer_id: int,
                 pservers: Any, trainers: int, sync_mode: bool) -> None:
        if isinstance(trainers, bool) or not isinstance(trainers, int) or trainers < 1:
            raise ValueError(f"transpile: in pserver mode trainers must be the number of "
                             f"trainers (an int >= 1), got {trainers!r}")
        if not isinstance(trainer_id, int) or not 0 <= trainer_id < trainers:
            raise ValueError(f"transpile: trainer_id must be in 0..{trainers - 1} for "
                             f"{trainers} trainers, got {trainer_id!r}")
        self.config = config
        self.eps = parse_endpoints(pservers, "transpile: pservers")
        self.trainers = trainers
        self.trainer_id = trainer_id
        self.sync = bool(sync_mode)
        # NOTE: pristine copies: the pserver programs are built from the original ops, the
        # trainer programs are the user's objects changed in place (Fluid's behaviour).
        self.origin = program.clone()
        self.origin_startup = startup.clone()
        self.program, self.startup = program, startup
        # as Fluid's placement design has it: ops on /node:ps run on the pservers by their place
        self.by_place = any(op.attrs.get(NODE_ATTR) == "ps"
                            for op in self.origin.global_block().ops)
        if self.by_place:
            self._check_placed_on_ps()
        self.plans = self._plan_params()
        self._assign_optimize_ops()
        self._pservers: dict[str, tuple[Program, dict[str, tuple[str, VarBlock | None]]]] = {}

    # ------------------------------------------------------------------ planning

    def _moves(self, op: Any) -> bool:
        """Whether ``op`` runs on the pservers: placed on /node:ps, or (unplaced programs)
        an optimize-role or LR-schedule op."""
        if self.by_place:
            return op.attrs.get(NODE_ATTR) == "ps"
        return bool(op.attrs.get("op_role", 0) & (OpRole.Optimize | OpRole.LRSched))

    def _check_placed_on_ps(self) -> None:
        ops = self.origin.global_block().ops
        for i, op in enumerate(ops):
            role = op.attrs.get("op_role", 0)
            if op.attrs.get(NODE_ATTR) == "ps" and not role & (OpRole.Optimize | OpRole.LRSched):
                raise ValueError(
                    f"transpile: op #{i} {op.type} (created at {op.callsite}), placed on "
                    f"{place_of(op)!r}, is not a parameter update or an LR schedule op; a "
                    "pserver runs the updates of the parameters it holds (place the forward "
                    "and backward ops on /node:worker, the optimizer.minimize on /node:ps)")
        if self.trainers > 1:
            local = [(i, op) for i, op in enumerate(ops)
                     if op.attrs.get("op_role", 0) & OpRole.Optimize and "Param" in op.inputs
                     and op.attrs.get(NODE_ATTR) != "ps"]
            if local:
                i, op = local[0]
                raise ValueError(
                    f"transpile: op #{i} {op.type} (created at {op.callsite}) updates "
                    f"{op.input('Param')[0]} on {place_of(op) or 'the worker'!r} while other "
                    f"updates are placed on /node:ps; with {self.trainers} trainers each "
                    "would update its own copy of it from its own gradient: place every "
                    "update on /node:ps, or train with one trainer")

    def _plan_params(self) -> list[_ParamPlan]:
        block = self.origin.global_block()
        pairs = find_params_grads(self.origin)
        if not pairs:
            raise ValueError("transpile: the program has no parameter gradients; call "
                             "optimizer.minimize(loss) before transpiling")
        optimized = {op.input("Param")[0] for op in block.ops
                     if "Param" in op.inputs and "Grad" in op.inputs and op.input("Param")
                     and self._moves(op)}
        if self.by_place and not optimized:
            raise ValueError("transpile: ops are placed on /node:ps but none of them updates "
                             "a parameter (place optimizer.minimize(loss) on /node:ps)")
        tables = {op.input("W")[0] for op in block.ops
                  if op.type == "lookup_table" and op.attrs.get("is_distributed")}
        for name in sorted(tables):
            uses = [op for op in block.ops if op.type == "lookup_table" and name in op.input("W")]
            if not all(op.attrs.get("is_sparse") and op.attrs.get("is_distributed")
                       for op in uses):
                raise ValueError(f"transpile: the distributed lookup table {name} is also read "
                                 "by a lookup_table without is_sparse=True, is_distributed=True; "
                                 "every embedding of a distributed table must set both")
        method = self.config.split_method or RoundRobin
        dispatcher = method(self.eps)
        if not isinstance(dispatcher, PSDispatcher):
            raise TypeError(f"DistributeTranspilerConfig.split_method must be a PSDispatcher "
                            f"class (RoundRobin or HashName), got {method!r}")
        plans = []
        for param, grad, _ in sorted(pairs, key=lambda t: t[0]):
            if param not in optimized:
                continue  # no optimizer op updates it (e.g. trainable=False downstream)
            var = block.var(param)
            if param in tables:
                # one shard of whole rows per pserver, in pserver order; each pserver calls
                # its shard by the table's own name, as Fluid's
                blocks = [replace(b, name=param)
                          for b in slice_variable(param, var.shape, len(self.eps), 1)]
                plans.append(_ParamPlan(param, grad, tuple(var.shape), var.dtype, blocks,
                                        self.eps[:len(blocks)], table=True, sparse=True))
                continue
            blocks = slice_variable(param, var.shape, len(self.eps), self.config.min_block_size,
                                    self.config.slice_var_up)
            eps = dispatcher.dispatch([b.name for b in blocks])
            plans.append(_ParamPlan(param, grad, tuple(var.shape), var.dtype, blocks, eps,
                                    sparse=block.var(grad).type == "selected_rows"))
        return plans

    def _assign_optimize_ops(self) -> None:
        """Give every optimize-role op of the original to the parameter it updates."""
        block = self.origin.global_block()
        by_param = {p.param: p for p in self.plans}
        owner_of_var: dict[str, _ParamPlan] = {}
        for op in block.ops:
            role = op.attrs.get("op_role", 0)
            if not role & OpRole.Optimize or role & OpRole.LRSched or not self._moves(op):
                continue
            if "Param" in op.inputs and "Grad" in op.inputs:
                plan = by_param.get(op.input("Param")[0])
                if plan is not None:
                    for slot, names in op.inputs.items():
                        if slot not in ("Param", "Grad", "LearningRate"):
                            owner_of_var.update(dict.fromkeys(names, plan))
        others = {p.param for p in self.plans} | {p.grad for p in self.plans}
        for op in block.ops:
            role = op.attrs.get("op_role", 0)
            if not role & OpRole.Optimize or role & OpRole.LRSched or not self._moves(op):
                continue
            role_var = op.attrs.get("op_role_var") or []
            plan = by_param.get(role_var[0]) if role_var else None
            if plan is None:
                plan = next((owner_of_var[n] for n in op.input_arg_names if n in owner_of_var),
                            None)
            if plan is None:
                raise NotImplementedError(
                    f"transpile: the optimize op {op.type} ({op.input_arg_names} -> "
                    f"{op.output_arg_names}) belongs to no single parameter; pserver mode "
                    "runs each parameter block's update on its own pserver (gradient clipping "
                    "by global norm is not available there)")
            foreign = [n for n in op.input_arg_names + op.output_arg_names
                       if n in others and n not in (plan.param, plan.grad)]
            if foreign:
                raise NotImplementedError(
                    f"transpile: the optimize op {op.type} of {plan.param} also reads {foreign}; "
                    "pserver mode needs each parameter's update to use only that parameter "
                    "(gradient clipping by global norm is not available there)")
            plan.opt_ops.append(op)
        writer: dict[str, _ParamPlan] = {}
        for plan in self.plans:
            for op in plan.opt_ops:
                writer.update(dict.fromkeys(op.output_arg_names, plan))
        for plan in self.plans:
            for op in plan.opt_ops:
                crossing = sorted({writer[n].param for n in op.input_arg_names
                                   if writer.get(n, plan) is not plan})
                if crossing:
                    raise NotImplementedError(
                        f"transpile: the optimize op {op.type} of {plan.param} reads values "
                        f"computed for {crossing}; pserver mode updates each parameter on its "
                        "own (gradient clipping by global norm is not available there)")
                if plan.sliced and op.type not in _ELEMENTWISE_OPT:
                    raise NotImplementedError(
                        f"transpile: {plan.param} is sliced into {len(plan.blocks)} blocks but "
                        f"its optimize op {op.type} is not elementwise, so it cannot run per "
                        "block; set config.slice_var_up = False (or a larger min_block_size)")

    def _lr_ops(self) -> list[Any]:
        return [op for op in self.origin.global_block().ops
                if op.attrs.get("op_role", 0) & OpRole.LRSched and self._moves(op)]

    # ------------------------------------------------------------------ trainer side

    def _suffix(self) -> str:
        return trainer_suffix(self.trainer_id) if self.sync and self.trainers > 1 else ""

    def build_trainer(self) -> None:
        """Rewrite ``self.program`` and ``self.startup`` into the trainer's programs."""
        block = self.program.global_block()
        for i in reversed(range(len(block.ops))):
            if self._moves(block.ops[i]):
                block._remove_op(i)
        self._distribute_tables(block)
        suffix = self._suffix()
        # insert each gradient's split + send right after its producer (last writer first, so
        # earlier indices stay valid)
        producer = {}
        for i, op in enumerate(block.ops):
            for name in op.output_arg_names:
                producer[name] = i
        for plan in sorted(self.plans, key=lambda p: -producer.get(p.grad, -1)):
            if plan.grad not in producer:
                raise ValueError(f"transpile: no op of the main program writes {plan.grad!r}, "
                                 f"the gradient of {plan.param}")
            at = producer[plan.grad] + 1
            if plan.sparse:
                names = [plan.grad_block(b.block_id) + suffix for b in plan.blocks]
                for name, b in zip(names, plan.blocks):
                    block.create_var(name=name, shape=list(b.shape), dtype=plan.dtype,
                                     type="selected_rows")
                block._insert_op(at, "split_selected_rows", inputs={"X": [plan.grad]},
                                 outputs={"Out": names},
                                 attrs={"height_sections": [b.shape[0] for b in plan.blocks],
                                        "op_role": OpRole.Dist})
                block._insert_op(at + 1, "send", inputs={"X": names},
                                 attrs={"epmap": list(plan.eps), "send_varnames": names,
                                        "trainer_id": self.trainer_id, "sync_mode": self.sync,
                                        "op_role": OpRole.RPC})
            elif plan.sliced:
                names = [plan.grad_block(b.block_id) + suffix for b in plan.blocks]
                for name, b in zip(names, plan.blocks):
                    block.create_var(name=name, shape=list(b.shape), dtype=plan.dtype)
                block._insert_op(at, "split_byref", inputs={"X": [plan.grad]},
                                 outputs={"Out": names},
                                 attrs={"sections": [b.shape[0] for b in plan.blocks],
                                        "op_role": OpRole.Dist})
                at += 1
                block._insert_op(at, "send", inputs={"X": names},
                                 attrs={"epmap": list(plan.eps), "send_varnames": names,
                                        "trainer_id": self.trainer_id, "sync_mode": self.sync,
                                        "op_role": OpRole.RPC})
            else:
                block._insert_op(at, "send", inputs={"X": [plan.grad]},
                                 attrs={"epmap": list(plan.eps),
                                        "send_varnames": [plan.grad + suffix],
                                        "trainer_id": self.trainer_id, "sync_mode": self.sync,
                                        "op_role": OpRole.RPC})
        if self.sync:
            block.append_op("send_barrier", attrs={"endpoints": list(self.eps),
                                                   "trainer_id": self.trainer_id,
                                                   "op_role": OpRole.RPC})
        self._append_pull(self.program)
        self._append_pull(self.startup)
        if self.by_place:
            self._drop_pserver_only_init()
        meta = self.program.meta
        meta.trainer_id = self.trainer_id
        meta.pserver_endpoints = list(self.eps)
        # Fluid's marks on the trainer program (Program._is_distributed and the rest)
        meta.is_distributed = True
        meta.is_chief = self.trainer_id == 0
        meta.distributed_lookup_table = self.table_name
        meta.parameters_on_pservers = self._distributed_vars()

    @property
    def table_name(self) -> str | None:
        """The distributed lookup table's name (Fluid supports one), or None."""
        return next((p.param for p in self.plans if p.table), None)

    def _distributed_vars(self) -> list[dict[str, Any]]:
        """Where each block of each parameter and of its optimizer state lives (the records
        of ``Program._parameters_on_pservers``)."""
        origin = self.origin.global_block()
        records: list[dict[str, Any]] = []

        def record(orig: str, name: str, shape: Any, vblock: VarBlock | None, block_id: int,
                   vtype: str, ep: str) -> None:
            full = tuple(origin.var(orig).shape)
            records.append({"origin": orig, "origin_shape": list(full), "slice": name,
                            "slice_shape": list(shape), "is_slice": tuple(shape) != full,
                            "block_id": block_id,
                            "offset": vblock.offset if vblock is not None else 0,
                            "vtype": vtype, "endpoint": ep})

        for plan in self.plans:
            for b, ep in zip(plan.blocks, plan.eps):
                record(plan.param, b.name, b.shape, b, b.block_id, "Param", ep)
                rename = self._block_renames(plan, b)
                seen = set()
                for op in plan.opt_ops:
                    for slot, names in op.inputs.items():
                        if slot in ("Param", "Grad", "LearningRate"):
                            continue
                        for n in names:
                            ov = origin._find_var_recursive(n)
                            if n in seen or ov is None or not ov.persistable:
                                continue
                            seen.add(n)
                            new, vblock, shape = rename(n)
                            record(n, new, shape, vblock, b.block_id, "Optimizer", ep)
        return records

    def _drop_pserver_only_init(self) -> None:
        """Placed programs: the trainer's startup initializes only what the trainer program
        uses (the optimizer state of the updates on /node:ps lives on the pservers)."""
        from .node_split import split_startup

        used = {n for op in self.program.global_block().ops
                for n in op.input_arg_names + op.output_arg_names}
        split_startup(self.startup, used, ("worker", self.trainer_id))

    def _distribute_tables(self, block: Any) -> None:
        """Lookups of a distributed table prefetch their rows; its gradient stays row-sparse
        and needs no table; the trainer neither initializes nor holds the table."""
        tables = {p.param: p for p in self.plans if p.table}
        if not tables:
            return
        for i, op in enumerate(list(block.ops)):
            if op.type not in ("lookup_table", "lookup_table_grad"):
                continue
            plan = tables.get(op.input("W")[0])
            if plan is None:
                continue
            attrs = {"table_names": [b.name for b in plan.blocks], "epmap": list(plan.eps),
                     "height_sections": [b.shape[0] for b in plan.blocks],
                     "height": plan.shape[0], "width": plan.shape[1],
                     "padding_idx": op.attrs.get("padding_idx", -1), "dtype": str(plan.dtype),
                     "trainer_id": self.trainer_id, "op_role": op.attrs.get("op_role", 0)}
            if op.type == "lookup_table":
                new = block._make_op("distributed_lookup_table", {"Ids": op.input("Ids")},
                                     {"Out": op.output("Out")}, attrs)
            else:
                new = block._make_op("distributed_lookup_table_grad",
                                     {"Ids": op.input("Ids"), "Out@GRAD": op.input("Out@GRAD")},
                                     {"W@GRAD": op.output("W@GRAD")}, attrs)
            block.ops[i] = new
        block.program._bump()
        for name in tables:
            block.var(name).persistable = False  # lives on the pservers only
        sb = self.startup.global_block()
        for i in reversed(range(len(sb.ops))):
            if set(sb.ops[i].output_arg_names) & set(tables):
                sb._remove_op(i)

    def _append_pull(self, program: Program) -> None:
        """recv every parameter block, fetch_barrier, concat the sliced ones."""
        block = program.global_block()
        for plan in self.plans:
            if plan.table:
                continue  # rows are prefetched by the lookups that need them
            if plan.sliced:
                for b in plan.blocks:
                    block.create_var(name=b.name, shape=list(b.shape), dtype=plan.dtype)
            elif not block.has_var(plan.param):
                block.create_var(name=plan.param, shape=list(plan.shape), dtype=plan.dtype,
                                 persistable=True)
            names = [b.name for b in plan.blocks]
            block.append_op("recv", outputs={"Out": names},
                            attrs={"epmap": list(plan.eps), "varnames": names,
                                   "trainer_id": self.trainer_id, "op_role": OpRole.RPC})
        if self.sync or program is self.startup:
            block.append_op("fetch_barrier", attrs={"endpoints": list(self.eps),
                                                    "trainer_id": self.trainer_id,
                                                    "op_role": OpRole.RPC})
        for plan in self.plans:
            if plan.sliced and not plan.table:
                block.append_op("concat", inputs={"X": [b.name for b in plan.blocks]},
                                outputs={"Out": [plan.param]},
                                attrs={"axis": 0, "op_role": OpRole.Dist})

    # ------------------------------------------------------------------ pserver side

    def pserver(self, endpoint: str) -> tuple[Program, dict[str, tuple[str, VarBlock | None]]]:
        """The pserver program of ``endpoint`` and where each of its persistables comes from
        (``{name: (original name, block or None)}``)."""
        if endpoint not in self.eps:
            raise ValueError(f"get_pserver_program: {endpoint!r} is not one of the pservers "
                             f"given to transpile(): {self.eps}")
        if endpoint not in self._pservers:
            self._pservers[endpoint] = self._build_pserver(endpoint)
        return self._pservers[endpoint]

    def _build_pserver(self, endpoint: str
                       ) -> tuple[Program, dict[str, tuple[str, VarBlock | None]]]:
        origin = self.origin.global_block()
        prog = Program()
        gb = prog.global_block()
        sources: dict[str, tuple[str, VarBlock | None]] = {}

        def declare(name: str, orig: str, shape: Any, persistable: bool,
                    vblock: VarBlock | None) -> None:
            if gb.has_var(name):
                return
            ov = origin._find_var_recursive(orig)
            gb.create_var(name=name, shape=list(shape), dtype=ov.dtype if ov else None,
                          persistable=persistable)
            if persistable:
                sources[name] = (orig, vblock)

        lr_ops = self._lr_ops()
        lr_outputs = {n for op in lr_ops for n in op.output_arg_names}
        lr_block_idx = -1
        if lr_ops:
            sub = prog._create_block(0)
            for op in lr_ops:
                for name in op.input_arg_names + op.output_arg_names:
                    ov = origin.var(name)
                    if ov.type != "lod_tensor":  # a conditional_block's scope
                        gb.create_var(name=name, type=ov.type)
                        continue
                    # the LR value must outlive the LR block's run: persistable here
                    declare(name, name, ov.shape or (), True, None)
                # Fluid appends each op's sub-block (a piecewise schedule's Switch) right
                # after the op, as a child of the LR block
                attrs = dict(op.attrs)
                if isinstance(attrs.get("sub_block"), Block):
                    attrs["sub_block"] = _clone_sub_block(prog, attrs["sub_block"], sub.idx)
                sub.append_op(op.type, inputs=dict(op.inputs), outputs=dict(op.outputs),
                              attrs=attrs)
            prog._rollback()
            lr_block_idx = sub.idx

        opt_blocks, grad_to_block = [], []
        n = self.trainers if self.sync else 1
        for plan in self.plans:
            for b, ep in zip(plan.blocks, plan.eps):
                if ep != endpoint:
                    continue
                gname = plan.grad_block(b.block_id)
                rename = self._block_renames(plan, b)
                sub = prog._create_block(0)
                declare(b.name, plan.param, b.shape, True, b)
                declare(gname, plan.grad, b.shape, False, None)
                if n > 1:
                    ins = [gname + trainer_suffix(t) for t in range(n)]
                    for name in ins:
                        declare(name, plan.grad, b.shape, False, None)
                    sub.append_op("sum", inputs={"X": ins}, outputs={"Out": [gname]},
                                  attrs={"op_role": OpRole.Optimize})
                    sub.append_op("scale", inputs={"X": [gname]}, outputs={"Out": [gname]},
                                  attrs={"scale": 1.0 / n, "op_role": OpRole.Optimize})
                for op in plan.opt_ops:
                    for name in op.input_arg_names + op.output_arg_names:
                        new, vblock, shape = rename(name)
                        ov = origin._find_var_recursive(name)
                        persistable = bool(ov is not None and ov.persistable) or \
                            name in lr_outputs
                        declare(new, name, shape, persistable, vblock)
                    sub.append_op(op.type,
                                  inputs={k: [rename(v)[0] for v in vs]
                                          for k, vs in op.inputs.items()},
                                  outputs={k: [rename(v)[0] for v in vs]
                                           for k, vs in op.outputs.items()},
                                  attrs={k: v for k, v in op.attrs.items() if k != "op_role_var"}
                                  | {"op_role_var": [b.name, gname]})
                prog._rollback()
                opt_blocks.append(sub)
                grad_to_block.append(f"{gname}:{sub.idx}")
        if lr_block_idx >= 0:
            # Fluid lists the LR block first among the optimize blocks
            opt_blocks.insert(0, prog.block(lr_block_idx))
        if not opt_blocks:
            # a pserver that holds no parameter block still gets one (empty) optimize block,
            # as Fluid gives it
            opt_blocks.append(prog._create_block(0))
            prog._rollback()
        gb.append_op("listen_and_serv",
                     attrs={"endpoint": endpoint, "Fanin": self.trainers,
                            "sync_mode": self.sync, "optimize_blocks": opt_blocks,
                            "grad_to_block_id": grad_to_block,
                            "lr_decay_block_id": lr_block_idx,
                            "pserver_id": self.eps.index(endpoint), "op_role": OpRole.RPC})
        prog.random_seed = self.origin.random_seed
        prog.meta.placement_node = ("ps", self.eps.index(endpoint))
        return prog, sources

    def _block_renames(self, plan: _ParamPlan, b: VarBlock) -> Any:
        """``rename(name) -> (name on the pserver, VarBlock or None, shape)`` for block b."""
        origin = self.origin.global_block()
        lr_names = {n for op in plan.opt_ops for n in op.input("LearningRate")} | \
            {n for op in self._lr_ops() for n in op.output_arg_names}

        def rename(name: str) -> tuple[str, VarBlock | None, tuple[int, ...]]:
            ov = origin._find_var_recursive(name)
            shape = tuple(ov.shape) if ov is not None and ov.shape is not None else ()
            if name == plan.param:
                return b.name, b, b.shape
            if name == plan.grad:
                return plan.grad_block(b.block_id), None, b.shape
            if not plan.sliced or name in lr_names:
                return name, None, shape
            suffix = f".block{b.block_id}"
            if shape == plan.shape:  # moments, decay terms: sliced like the parameter
                return name + suffix, VarBlock(name, b.block_id, b.offset, b.size, b.shape,
                                               name + suffix), b.shape
            # scalar state (Adam's beta powers): one copy per block
            return name + suffix, None, shape
        return rename

    def pserver_startup(self, endpoint: str) -> Program:
        """The startup program of ``endpoint``: initializers of its variables only."""
        prog, sources = self.pserver(endpoint)
        writers: dict[str, Any] = {}
        for op in self.origin_startup.global_block().ops:
            for name in op.output_arg_names:
                writers[name] = op
        startup = Program()
        startup.random_seed = self.origin_startup.random_seed
        startup.meta.placement_node = ("ps", self.eps.index(endpoint))
        sb = startup.global_block()
        for name, (orig, vblock) in sources.items():
            op = writers.get(orig)
            if op is None:
                continue  # written by the pserver program itself (an LR schedule's value)
            var = prog.global_block().var(name)
            sb.create_var(name=name, shape=list(var.shape), dtype=var.dtype, persistable=True)
            sliced = vblock is not None and tuple(vblock.shape) != \
                tuple(self.origin.global_block().var(orig).shape)
            attrs = dict(op.attrs)
            if sliced and op.type in _RESIZABLE_INIT and "shape" in attrs:
                attrs["shape"] = list(vblock.shape)
                sb.append_op(op.type, inputs=dict(op.inputs), outputs={"Out": [name]},
                             attrs=attrs)
            elif sliced:
                # initialize the whole variable, keep this block's rows
                full = self.origin.global_block().var(orig)
                tmp = f"{orig}@INIT"
                if not sb.has_var(tmp):
                    sb.create_var(name=tmp, shape=list(full.shape), dtype=full.dtype)
                    sb.append_op(op.type, inputs=dict(op.inputs), outputs={"Out": [tmp]},
                                 attrs=attrs)
                rows = full.shape[0]
                before = vblock.row_offset
                after = rows - before - vblock.shape[0]
                parts = [n for n, size in ((f"{tmp}.head.{name}", before), (name, vblock.shape[0]),
                                           (f"{tmp}.tail.{name}", after)) if size]
                sections = [s for s in (before, vblock.shape[0], after) if s]
                for p in parts:
                    if not sb.has_var(p):
                        sb.create_var(name=p, dtype=full.dtype)
                sb.append_op("split", inputs={"X": [tmp]}, outputs={"Out": parts},
                             attrs={"axis": 0, "sections": sections})
            else:
                sb.append_op(op.type, inputs=dict(op.inputs),
                             outputs={k: [name if v == orig else v for v in vs]
                                      for k, vs in op.outputs.items()}, attrs=attrs)
        for op in sb.ops:  # NOTE: initializers placed on the workers run here too
            op.attrs.pop(NODE_ATTR, None)
        return startup
