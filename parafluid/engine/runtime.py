"""Binding ops to kernels, the context kernels run in, and the one wrapper every op runs in.

- ``bind_op(op, device, services)`` resolves an op's kernel, slots and attrs *once* and
  returns ``run(env)``: read the inputs from ``env`` (name -> value), call the kernel, write
  the outputs back. Every executor binds ops through it (``parafluid.engine.plan`` does it
  for them).
- ``RunContext`` is the ``ctx`` a kernel gets: its device, the run's scope (persistables
  written by earlier ops are already there), ``run_block`` to run a sub-block of the program,
  the communicator (collectives), the RPC deadline. What it reaches beyond the op comes
  from the binding's services (``plan.RunServices``, per executor device: the scope, the
  communicator and the sub-block runner).
- ``op_error`` makes the one error every failing op raises (``OpRunError``: op index, type,
  inputs, device, the Python line that created the op).
- ``add_op_hook(fn)``: per-op instrumentation (the profiler): ``fn(record)`` is called after
  every op of every run while it is registered. With no hook the executors run the plain
  task list: the cost when off is one check per run, not per op.

Example (a kernel that runs the op's sub-block against the scope)::

    def _kernel(ins, attrs, ctx):
        out, = ctx.run_block(attrs["sub_block"].idx, fetch=["y"])
        return {"Out": out}
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ..ops.registry import EMPTY, GRAD, declared_inputs, get_op_def
from ..placement import op_device_name, torch_device

__all__ = ["bind_op", "OpRunError", "describe_op", "op_error", "RunContext",
           "OpRecord", "add_op_hook", "remove_op_hook", "op_hooks_active", "op_device",
           "set_op_detail", "op_detail", "report"]

Runner = Callable[[dict[str, Any]], None]


class EnforceNotMet(RuntimeError):
    """Fluid's ``core.EnforceNotMet``: an op's check failed while it ran (the error class
    of Fluid's C++ ops). ``OpRunError`` is one."""


class OpRunError(EnforceNotMet):
    """An op failed at run time; the message says which op, where it was built, and why.

    The original exception is kept as ``__cause__``; ``op_index`` and ``op_type`` are set,
    and ``device`` (the data-parallel device index, or None).
    """

    def __init__(self, message: str, op_index: int, op_type: str,
                 device: int | None = None) -> None:
        super().__init__(message)
        self.op_index = op_index
        self.op_type = op_type
        self.device = device


def describe_op(op: Any) -> str:
    ins = ", ".join(f"{k}=[{', '.join(v)}]" for k, v in op.inputs.items())
    return f"{op.type} ({ins})"


def op_error(op: Any, index: int, exc: BaseException, device: int | None = None) -> OpRunError:
    """The OpRunError for ``op`` (op #``index`` of its block) failing with ``exc``."""
    where = f"op #{index} {describe_op(op)}"
    if device is not None:
        where += " on all devices" if device < 0 else f" on device {device}"
    msg = f"while running {where}, created at {op.callsite}:\n  {type(exc).__name__}: {exc}"
    return OpRunError(msg, index, op.type, device)


# ---------------------------------------------------------------------- devices of ops


def op_device(op: Any, default: torch.device) -> torch.device:
    """The device an op runs on: its ``op_device`` attr ("cpu", "cpu:1", "gpu:0"), else
    ``default``. CPU devices with different ids are distinct places on one torch CPU."""
    what = f"op {op.type} (created at {op.callsite}): op_device"
    name = op_device_name(op, what)
    return default if name is None else torch_device(name, what)


# ---------------------------------------------------------------------- run context


class _Unbound:
    """The services of an op bound without any (``bind_op(op, device)``): no scope, no
    communicator; ``run_block`` says so."""

    __slots__ = ()
    scope = communicator = None
    device_index = 0

    def run_block(self, block_idx: int, scope: Any = None, feed: dict[str, Any] | None = None,
                  fetch: Sequence[str] = ()) -> list[Any]:
        raise RuntimeError("run_block: this op was bound without a program")


_NO_SERVICES = _Unbound()


class RunContext:
    """What a kernel may need beyond its inputs and attrs (``ctx``); built once per binding.

    ``device``: the torch device of this op. ``need``: for ``_grad`` ops, the forward input
    slots whose gradient the op must produce. ``scope``: the run's scope. ``communicator``:
    the collective handle (None when not data-parallel; RPC ops reach their clients
    through ``parafluid.distributed.ps_registry``).
    ``device_index``: the data-parallel device this op runs for. ``run_block(idx, ...)``:
    run a sub-block. ``deadline_s``: how long a blocking op may wait (FLAGS_rpc_deadline).
    All but the deadline come from ``services``, the binding's ``plan.RunServices`` (None: an
    op bound alone, with no scope nor sub-block runner).
    """

    __slots__ = ("op", "device", "need", "services", "_generator")

    def __init__(self, op: Any, device: Any, services: Any = None) -> None:
        self.op = op
        self.device = device
        self.services = services if services is not None else _NO_SERVICES
        self.need = frozenset(s[: -len(GRAD)] for s in op.outputs if s.endswith(GRAD))
        self._generator = None

    @property
    def scope(self) -> Any:
        return self.services.scope

    @property
    def communicator(self) -> Any:
        return self.services.communicator

    @property
    def device_index(self) -> int:
        return self.services.device_index

    @property
    def deadline_s(self) -> float:
        from ..distributed.deadline import rpc_deadline_seconds

        return rpc_deadline_seconds()

    def run_block(self, block_idx: int, scope: Any = None, feed: dict[str, Any] | None = None,
                  fetch: Sequence[str] = ()) -> list[Any]:
        """Run sub-block ``block_idx`` against ``scope`` (default: the run's); return fetches."""
        return self.services.run_block(block_idx, scope, feed, fetch)

    def generator(self, seed: int) -> Any:
        """A torch.Generator for a seeded random op (seed 0: torch's default generator)."""
        if not seed:
            return None
        if self._generator is None:
            gen_device = self.device if getattr(self.device, "type", "cpu") == "cuda" else "cpu"
            self._generator = torch.Generator(device=gen_device)
            self._generator.manual_seed(int(seed))
        return self._generator


# ---------------------------------------------------------------------- binding


def bind_op(op: Any, device: Any, services: Any = None,
            env: dict[str, Any] | None = None, drop: tuple[str, ...] = ()) -> Runner:
    """Return ``run(env)`` executing ``op`` on ``device`` against the value dict ``env``.

    The op's own ``op_device`` attr, when set, wins over ``device``. Given ``env``, the
    closure also runs with no argument, against that dict (one call less per op). ``drop``:
    names to remove from the dict once the op ran (the values it was the last to read).
    """
    opdef = get_op_def(op.type)
    kernel = opdef.kernel
    if kernel is None:
        raise ValueError(f"op {op.type!r} has no kernel and cannot run in an executor")
    attrs = dict(op.attrs)
    ctx = RunContext(op, op_device(op, device), services)
    in_spec = []
    inputs = declared_inputs(op, opdef)
    for slot in opdef.inputs:
        names = inputs.get(slot.name)
        if names:
            in_spec.append((slot.name, tuple(names), slot.duplicable))
        elif slot.optional:
            in_spec.append((slot.name, (), slot.duplicable))
    out_spec = [(slot.name, tuple(op.outputs[slot.name]), slot.duplicable)
                for slot in opdef.outputs if op.outputs.get(slot.name)]

    # NOTE: the common shapes (single-variable slots, absent optional ones) get straight-line
    # closures: this is the per-op hot path of every executor.
    plain = kernel
    if opdef.share_lod is not None:
        src, dsts = opdef.share_lod
        kernel = _kernel_sharing_lod(kernel, src, dsts, opdef.input_by_name[src].duplicable)
    if all(not dup and len(names) <= 1 for _, names, dup in in_spec) and \
            all(not dup and len(names) == 1 for _, names, dup in out_spec):
        in_pairs = tuple((slot, names[0]) for slot, names, _ in in_spec if names)
        absent = tuple(slot for slot, names, _ in in_spec if not names)
        out_pairs = tuple((slot, names[0]) for slot, names, _ in out_spec
                          if names[0] != EMPTY)
        if not absent and len(out_pairs) == 1:
            src_name = None
            if opdef.share_lod is not None:
                src, dsts = opdef.share_lod
                if not opdef.input_by_name[src].duplicable:
                    kernel = plain  # the runner shares the LoD itself, without the wrapper
                    if out_pairs[0][0] in dsts:
                        src_name = dict(in_pairs).get(src)
            return _single_output_runner(kernel, in_pairs, attrs, ctx, *out_pairs[0], env, drop,
                                         src_name)

        def run_simple(env: dict[str, Any] = env) -> None:  # type: ignore[assignment]
            ins = {s: env[n] for s, n in in_pairs}
            for s in absent:
                ins[s] = None
            outs = kernel(ins, attrs, ctx)
            for s, n in out_pairs:
                env[n] = outs[s]
            if drop:
                for n in drop:
                    env.pop(n, None)
        return run_simple

    def run_general(env: dict[str, Any] = env) -> None:  # type: ignore[assignment]
        ins: dict[str, Any] = {}
        for slot, names, dup in in_spec:
            if dup:
                ins[slot] = [None if n == EMPTY else env[n] for n in names]
            else:
                ins[slot] = env[names[0]] if names else None
        outs = kernel(ins, attrs, ctx)
        for slot, names, dup in out_spec:
            value = outs[slot]
            if dup:
                if len(value) != len(names):
                    raise RuntimeError(f"kernel of {op.type} returned {len(value)} values for "
                                       f"output slot {slot}, expected {len(names)}")
                for n, v in zip(names, value):
                    if n != EMPTY:
                        env[n] = v
            elif names[0] != EMPTY:
                env[names[0]] = value
        if drop:
            for n in drop:
                env.pop(n, None)
    return run_general


def _kernel_sharing_lod(kernel: Any, src: str, dsts: tuple[str, ...], duplicable: bool) -> Any:
    """``kernel`` that hands input ``src``'s LoD to outputs ``dsts`` (the op's ``share_lod``
    row), as Fluid's ShareLoD: an output gets it when it has as many rows as the LoD covers.
    A run without LoD pays one attribute lookup."""
    from ..lod import LOD_ATTR, attach_lod

    def share(outs: dict[str, Any], x: Any, lod: list[list[int]]) -> None:
        for slot in dsts:
            out = outs.get(slot)
            if out is not None and out is not x and out.shape[:1] == (lod[-1][-1],):
                attach_lod(out, lod)

    # NOTE: two closures instead of one with a branch: this runs for every op of every step.
    if duplicable:
        def kernel_sharing_lod(ins: dict[str, Any], attrs: dict[str, Any], ctx: Any) -> dict:
            outs = kernel(ins, attrs, ctx)
            xs = ins[src]
            lod = getattr(xs[0], LOD_ATTR, None) if xs else None
            if lod:
                share(outs, xs[0], lod)
            return outs
    else:
        def kernel_sharing_lod(ins: dict[str, Any], attrs: dict[str, Any], ctx: Any) -> dict:
            outs = kernel(ins, attrs, ctx)
            x = ins[src]
            lod = getattr(x, LOD_ATTR, None)
            if lod:
                share(outs, x, lod)
            return outs
    return kernel_sharing_lod


def _single_output_runner(kernel: Any, in_pairs: tuple[tuple[str, str], ...],
                          attrs: dict[str, Any], ctx: RunContext, out_slot: str, out_name: str,
                          env: dict[str, Any] | None, drop: tuple[str, ...],
                          src_name: str | None) -> Runner:
    """``run(env)`` of an op with single-variable input slots and one output: the hot path.

    ``src_name``: the input whose LoD the output takes (the op's ``share_lod`` row), shared
    here rather than by ``_kernel_sharing_lod`` (the input is still in ``env`` after the
    kernel: the output is stored after the check). NOTE: one closure per input count, with
    the input dict written out: a dict display costs half a comprehension (which, in Python
    3.11, is a call), and this runs for every op of every step.
    """
    from ..lod import LOD_ATTR, attach_lod

    def share(out: Any, x: Any, lod: list[list[int]]) -> None:
        if out is not None and out is not x and out.shape[:1] == (lod[-1][-1],):
            attach_lod(out, lod)

    if len(in_pairs) == 1:
        (s0, n0), = in_pairs

        def run_one(env: dict[str, Any] = env) -> None:  # type: ignore[assignment]
            out = kernel({s0: env[n0]}, attrs, ctx)[out_slot]
            if src_name is not None and (lod := getattr(env[src_name], LOD_ATTR, None)):
                share(out, env[src_name], lod)
            env[out_name] = out
            if drop:
                for n in drop:
                    env.pop(n, None)
    elif len(in_pairs) == 2:
        (s0, n0), (s1, n1) = in_pairs

        def run_one(env: dict[str, Any] = env) -> None:  # type: ignore[assignment]
            out = kernel({s0: env[n0], s1: env[n1]}, attrs, ctx)[out_slot]
            if src_name is not None and (lod := getattr(env[src_name], LOD_ATTR, None)):
                share(out, env[src_name], lod)
            env[out_name] = out
            if drop:
                for n in drop:
                    env.pop(n, None)
    else:
        def run_one(env: dict[str, Any] = env) -> None:  # type: ignore[assignment]
            out = kernel({s: env[n] for s, n in in_pairs}, attrs, ctx)[out_slot]
            if src_name is not None and (lod := getattr(env[src_name], LOD_ATTR, None)):
                share(out, env[src_name], lod)
            env[out_name] = out
            if drop:
                for n in drop:
                    env.pop(n, None)
    return run_one


# ---------------------------------------------------------------------- instrumentation


@dataclass(frozen=True)
class OpRecord:
    """One op run, as op hooks see it: what ran, where, on which thread, and when
    (``time.perf_counter_ns``)."""

    op_type: str
    op_index: int
    device: int  # data-parallel device index (-1: a collective over all devices)
    start_ns: int
    end_ns: int
    thread: int = 0  # threading.get_ident() of the thread that ran the op


_HOOKS: list[Callable[[OpRecord], None]] = []


def add_op_hook(fn: Callable[[OpRecord], None]) -> None:
    """Call ``fn(OpRecord)`` after every op that runs from now on (all executors)."""
    _HOOKS.append(fn)


def remove_op_hook(fn: Callable[[OpRecord], None]) -> None:
    _HOOKS.remove(fn)


def op_hooks_active() -> bool:
    return bool(_HOOKS)


_OP_DETAIL = [False]  # the profiler's tracer_option asks for every op, inside segments too


def set_op_detail(on: bool) -> None:
    """Time every op inside compiled segments too (a segment then runs op by op while a
    hook is registered); off: one record per segment."""
    _OP_DETAIL[0] = bool(on)


def op_detail() -> bool:
    return _OP_DETAIL[0] and bool(_HOOKS)


def report(record: OpRecord) -> None:
    """Hand ``record`` to every op hook."""
    for hook in tuple(_HOOKS):
        hook(record)


def timed(fn: Callable[[], None], op_type: str, op_index: int, device: int
          ) -> Callable[[], None]:
    """``fn`` reporting an OpRecord to the hooks (used only while a hook is registered)."""
    clock = time.perf_counter_ns
    ident = threading.get_ident

    def run() -> None:
        start = clock()
        try:
            fn()
        finally:
            record = OpRecord(op_type, op_index, device, start, clock(), ident())
            for hook in tuple(_HOOKS):
                hook(record)
    return run
