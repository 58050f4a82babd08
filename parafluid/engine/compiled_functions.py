"""Compiled segments: a ``compiled_segment`` op bound to one function of its ops' kernels.

The segmentation pass (``passes/compile_regions.py``) leaves a run of compilable ops in the
sub-block of a ``compiled_segment`` op. Binding that op (``bind_compiled_function``, which the Plan
uses instead of ``runtime.bind_op`` for segment ops) writes the run out as one Python
function, one line per op calling the op's own registered kernel, e.g.::

    def segment_0(v0, v1, v2):
        v3 = K0({'X': v0, 'Y': v1}, A0, C0)['Out']   # op 0: mul
        v4 = K1({'X': v3, 'Y': v2}, A1, C1)['Out']   # op 1: elementwise_add
        return (v4,)

and hands it to ``torch.compile`` (Inductor): no op has a second implementation. The
function is compiled on its first call. ``PARAFLUID_DEBUG=1`` prints each function's source.

- **Shapes.** torch.compile specializes on the first input shapes; on a second batch size
  it recompiles once with the batch dimension dynamic (torch's automatic dynamic shapes).
  Every recompilation is logged once, with the inputs whose shapes changed.
- **Fallback.** A segment that cannot compile runs its function uncompiled (the same
  kernels, op after op), after one warning naming the op and why. So does one that is
  given values compiled code cannot take (LoD-carrying or row-sparse inputs).
- **Errors.** An op failing inside a segment raises the same ``OpRunError`` as the
  interpreter: the segment is re-run op by op on its inputs to find the op.
- **NaN/Inf checks** (``FLAGS_check_nan_inf``): the outputs of the segment are checked; on a
  NaN the segment is re-run op by op from its inputs (kept for the checked run) and the
  first op whose output holds it is named.
- **Compile cache.** Inductor keeps compiled code on disk (``TORCHINDUCTOR_CACHE_DIR``,
  default under the temporary directory): a second process start reuses it.
"""

from __future__ import annotations

import linecache
import logging
import os
import re
import threading
import time
from collections.abc import Callable
from typing import Any

import torch

from ..lod import LOD_ATTR
from ..ops.registry import EMPTY, get_op_def
from ..passes.compile_regions import run_io
from ..placement import torch_device
from ..serialization import dumps
from . import tiered
from .atomic import check_finite
from .runtime import (
    OpRecord,
    RunContext,
    bind_op,
    op_detail,
    op_device,
    op_error,
    op_hooks_active,
    report,
)

__all__ = ["bind_compiled_function", "Segment", "segment_source", "compile_stats",
           "background_idle"]

log = logging.getLogger("parafluid.compile")

_lock = threading.Lock()
_warned: set[str] = set()
# counters for tests and the benchmarks: compiles, recompiles, fallbacks
compile_stats = {"compiled": 0, "recompiled": 0, "fallbacks": 0, "tiered": 0}


def _debug() -> bool:
    return os.environ.get("PARAFLUID_DEBUG", "0") not in ("", "0")


def _warn_once(key: str, message: str) -> None:
    with _lock:
        if key in _warned and not _debug():
            return
        _warned.add(key)
    log.warning(message)


def _function_source(name: str, ops: list[Any], first: int, ins: list[str],
                     outs: list[str], fresh: tuple[str, ...] = ()) -> str:
    """The source of ``def name(*ins): ... return outs`` calling the kernels ``K<i>`` of
    ``ops`` (numbered from ``first``), one line per op, with attrs ``A<i>``, contexts
    ``C<i>``; the inputs named in ``fresh`` are cloned first (the kernels update the
    clones, the caller's tensors stay as they were)."""
    local: dict[str, str] = {}

    def var(n: str) -> str:
        if n not in local:
            local[n] = f"v{len(local)}"
        return local[n]

    lines = [f"def {name}({', '.join(var(n) for n in ins)}):"]
    for n in fresh:
        lines.append(f"    {local[n]} = {local[n]}.clone()  # {n}: new value, committed after")
    for j, inner in enumerate(ops):
        i = first + j
        opdef = get_op_def(inner.type)
        parts = []
        for slot in opdef.inputs:
            names = inner.inputs.get(slot.name) or []
            if slot.duplicable:
                values = ", ".join("None" if n == EMPTY else local[n] for n in names)
                parts.append(f"{slot.name!r}: [{values}]")
            elif names and names[0] != EMPTY:
                parts.append(f"{slot.name!r}: {local[names[0]]}")
            else:
                parts.append(f"{slot.name!r}: None")
        call = f"K{i}({{{', '.join(parts)}}}, A{i}, C{i})"
        results = [(slot, inner.outputs.get(slot.name) or []) for slot in opdef.outputs]
        results = [(slot, names) for slot, names in results if names]
        note = f"  # op {i}: {inner.type}"
        if len(results) == 1 and not results[0][0].duplicable and results[0][1][0] != EMPTY:
            slot, names = results[0]
            lines.append(f"    {var(names[0])} = {call}[{slot.name!r}]{note}")
            continue
        lines.append(f"    _o = {call}{note}")
        for slot, names in results:
            if slot.duplicable:
                targets = ", ".join("_" if n == EMPTY else var(n) for n in names)
                lines.append(f"    {targets}, = _o[{slot.name!r}]")
            elif names[0] != EMPTY:
                lines.append(f"    {var(names[0])} = _o[{slot.name!r}]")
    lines.append(f"    return ({''.join(local[n] + ', ' for n in outs)})")
    return "\n".join(lines) + "\n"


def segment_source(op: Any) -> str:
    """The Python source of segment op ``op``'s function (what ``PARAFLUID_DEBUG=1``
    prints): one line per op, calling its registered kernel."""
    ops = op.attrs["sub_block"].ops
    ins = list(op.inputs.get("X", []))
    return _function_source(f"segment_{int(op.attrs.get('segment', 0))}", ops, 0,
                            ins, list(op.outputs.get("Out", [])), _fresh_inputs(op, ins))


def _fresh_inputs(op: Any, ins: list[str]) -> tuple[str, ...]:
    """The inputs a committing segment writes: cloned at its start, so that the scope's
    tensors keep their values until the new ones are committed."""
    if not op.attrs.get("commit"):
        return ()
    _, written = run_io(op.attrs["sub_block"].ops)
    return tuple(n for n in ins if n in set(written))


class _Piece:
    """A run of a segment's ops ``[start, end)`` as one function, compiled on first use
    (``compiled=False``: an op the compiler rejected, run as it is)."""

    def __init__(self, seg: Segment, start: int, end: int, needed: set[str],
                 compiled: bool) -> None:
        ops = seg.ops[start:end]
        self.start, self.end = start, end
        self.ins, written = run_io(ops)
        self.outs = [n for n in written if n in needed]
        self.name = f"segment_{seg.number}_ops_{start}_{end}"
        self.filename = f"<parafluid {self.name} at {id(self):x}>"
        fresh = tuple(n for n in self.ins if n in seg.fresh and n in set(written))
        self.source = _function_source(self.name, ops, start, self.ins, self.outs, fresh)
        # NOTE: a fresh code object per piece: torch.compile caches compiled code per code
        # object, and closures of one function would share (and overflow) one cache
        code = compile(self.source, self.filename, "exec")
        linecache.cache[self.filename] = (len(self.source), None,
                                          self.source.splitlines(True), self.filename)
        namespace = dict(seg.namespace)
        exec(code, namespace)
        self.eager: Callable = namespace[self.name]
        self.fn: Callable | None = None if compiled else self.eager
        self.mode = "reduce-overhead" if seg.device.type == "cuda" else None

    def compiled(self) -> Callable:
        """The piece's compiled function (made on first use; it compiles on its first
        call)."""
        fn = self.fn
        if fn is None:
            # NOTE: fullgraph: code the compiler cannot take raises here instead of running
            # in pieces behind our back; the segment then names the op and splits around it
            # NOTE: a piece's globals (kernels, attrs, contexts) are fixed when it is built,
            # so guarding on them would only cost time at every call (hundreds of guards
            # for a long piece): only the guards on the input tensors and their shapes stay
            fn = torch.compile(
                self.eager, dynamic=None, fullgraph=True, mode=self.mode,
                options={"guard_filter_fn": torch.compiler.skip_guard_on_globals_unsafe})
            compile_stats["compiled"] += 1
        return fn

    def __call__(self, *args: Any) -> tuple:
        fn = self.fn
        if fn is None:
            fn = self.fn = self.compiled()
        return fn(*args)

    def culprit(self, exc: BaseException) -> int | None:
        """The op (index in the segment) a compile error's user stack points at."""
        text = str(exc)
        lines = self.source.splitlines()
        for m in re.finditer(re.escape(self.filename) + r'", line (\d+)', text):
            line = int(m.group(1))
            if 1 < line <= len(lines):
                k = re.search(r"# op (\d+):", lines[line - 1])
                if k:
                    return int(k.group(1))
        return None


class Segment:
    """One segment op bound for one device: its ops as compiled pieces (one, unless the
    compiler rejected an op: then that op runs uncompiled between two pieces).

    Call it with the segment's input values (in ``X`` order); it returns the output values
    (in ``Out`` order).
    """

    def __init__(self, op: Any, device: Any, services: Any = None,
                 enabled: bool = True) -> None:
        self.op = op
        self.ops = list(op.attrs["sub_block"].ops)
        self.number = int(op.attrs.get("segment", 0))
        self.device = op_device(op, device)
        # NOTE: every CPU "device" of a process is torch's one CPU; compiled code must see
        # one device, not cpu:0 and cpu:1
        self.contexts = [RunContext(o, torch_device(op_device(o, self.device), storage=True),
                                    services) for o in self.ops]
        self.device_index = services.device_index if services is not None else 0
        self._services = services
        self._env: dict[str, Any] = {}  # the values of an op-by-op run
        self._runners: list[Callable] | None = None  # the ops bound for it (on first use)
        self.in_names = list(op.inputs.get("X", []))
        self.out_names = list(op.outputs.get("Out", []))
        # a committing segment's inputs that it writes: cloned at its start (see __call__)
        self.fresh = set(_fresh_inputs(op, self.in_names))
        self._fresh_idx = [i for i, n in enumerate(self.in_names) if n in self.fresh]
        # inputs whose first dimension is the batch (-1 in the IR): compiled dynamic there
        self._batch_idx = [i for i, n in enumerate(self.in_names)
                           if _batch_dimension(getattr(op, "block", None), n)]
        self.tiered = bool(op.attrs.get("tiered")) and enabled
        self._ready = not self.tiered  # tiered: compiled code not ready yet
        self._job: Any = None  # tiered: the queued ahead-of-time compilation
        self._tier_failed = False
        self._aot: Callable | None = None  # tiered: the compiled code, once switched
        self.namespace: dict[str, Any] = {}
        for i, inner in enumerate(self.ops):
            # NOTE: the kernel itself: LoD is shared by bind_op, not by kernels, so compiled
            # code carries no LoD (a segment given LoD inputs runs uncompiled, see __call__)
            self.namespace[f"K{i}"] = get_op_def(inner.type).kernel
            self.namespace[f"A{i}"] = dict(inner.attrs)
            self.namespace[f"C{i}"] = self.contexts[i]
        self.source = segment_source(op)
        self.fallback: str | None = None if enabled else "compilation is off"
        self.uncompiled: dict[int, str] = {}  # op index -> why the compiler rejected it
        self._build([(0, len(self.ops), enabled)])
        self._shapes: tuple | None = None
        self._dynamic_logged = False
        if _debug():
            log.warning("compiled_segment %d (%d ops) on %s:\n%s", self.number, len(self.ops),
                        self.device, self.source)

    def _build(self, ranges: list[tuple[int, int, bool]]) -> None:
        needed = set(self.out_names)
        pieces: list[_Piece] = []
        for start, end, compiled in reversed(ranges):
            piece = _Piece(self, start, end, needed, compiled)
            pieces.append(piece)
            needed |= set(piece.ins)
        self.pieces = pieces[::-1]
        self._single = self.pieces[0] if len(self.pieces) == 1 else None

    # ------------------------------------------------------------------ names
    def describe(self) -> str:
        types = ", ".join(o.type for o in self.ops[:6])
        more = f", ... ({len(self.ops)} ops)" if len(self.ops) > 6 else ""
        return f"compiled_segment {self.number} [{types}{more}]"

    # ------------------------------------------------------------------ running
    def __call__(self, *args: Any) -> tuple:
        if self.fallback is not None or op_detail():
            return self.run_ops(args)
        reason = self._unsupported(args)
        if reason is not None:
            _warn_once(f"{id(self)}:{reason}", f"{self.describe()} runs uncompiled: {reason}")
            compile_stats["fallbacks"] += 1
            return self.run_ops(args)
        if self.tiered:
            if self._aot is not None:
                return self._run_aot(args)
            self._tier_up(args)
            return self.run_ops(args) if self._aot is None else self._run_aot(args)
        shapes = tuple((tuple(a.shape), a.dtype) for a in args)
        if shapes != self._shapes:
            if self._shapes is None:
                self._mark_batch(args)
            self._note_shapes(shapes)
        try:
            if self._single is not None:
                return self._single(*args)
            env = dict(zip(self.in_names, args))
            for piece in self.pieces:
                env.update(zip(piece.outs, piece(*[env[n] for n in piece.ins])))
            return tuple(env[n] for n in self.out_names)
        except Exception as exc:  # noqa: BLE001 (a compile failure or the op's own error)
            out = self.run_ops(args)  # raises the op's own error, named, if there is one
            self._reject(exc)
            return out

    def _mark_batch(self, args: tuple) -> None:
        """Compile with the batch dimension dynamic from the first call on (the IR says
        which inputs have one: -1 first in their shape), so that a new batch size does not
        recompile."""
        for i in self._batch_idx:
            a = args[i]
            if isinstance(a, torch.Tensor) and a.dim() >= 1:
                torch._dynamo.maybe_mark_dynamic(a, 0)
                self._dynamic_logged = True

    # ------------------------------------------------------------------ tiered
    def _tier_up(self, args: tuple) -> None:
        """Tiered compilation (``engine/tiered.py``): switch over to the package a worker
        process compiled ahead of time, once it is there: loaded, checked once against the
        op-by-op run on the same inputs, then called instead (``_ready``). A segment given
        no package (``tiered.attach_package``) queues its own job at its first call. Until
        it switches, and for good when it cannot, the segment runs op by op."""
        if self._tier_failed:
            return
        job, package = self._job, getattr(self.op, tiered.PACKAGE_ATTR, None)
        seconds = 0.0
        if package is None:
            if job is None:
                program = self.op.block.program
                self._job = tiered.Job(
                    dumps(program), program.global_block().ops.index(self.op),
                    self.in_names, args, self._batch_idx, self.describe())
                tiered.submit(self._job, self._job_done)
                return
            if not job.done:
                return
            self._job = None
            package, seconds = job.package, (job.end_ns - job.start_ns) / 1e9
        self._tier_failed = True  # (switched or not: once)
        try:
            if package is None:
                raise RuntimeError(job.error)
            fn = tiered.load(package)
            got = fn(*args)
            want = self.run_ops(args)
            for name, g, w in zip(self.out_names, got, want):
                if g.shape != w.shape or not torch.allclose(g, w, rtol=1e-4, atol=1e-5,
                                                            equal_nan=True):
                    raise RuntimeError(f"its output {name!r} differs from the op-by-op run")
        except Exception as exc:  # noqa: BLE001 (the segment stays as it is: op by op)
            _warn_once(f"{id(self)}:tiered", f"{self.describe()} on {self.device} stays "
                       f"interpreted: tiered compilation did not switch it over ({exc})")
            return
        finally:
            if job is not None:
                job.remove()
            elif package is not None:
                tiered.remove_package(package)
        self._aot = fn
        self._ready = True
        compile_stats["tiered"] += 1
        log.info("%s on %s: switched over to the code a worker process compiled ahead of "
                 "time%s", self.describe(), self.device,
                 f" (in {seconds:.1f} s)" if seconds else "")

    def _job_done(self, job: Any) -> None:
        """(the job queue's thread) Show the worker's time in the profiler's timeline."""
        if op_hooks_active():
            report(OpRecord(f"compile {job.what} (worker process)", -1, self.device_index,
                            job.start_ns, job.end_ns, threading.get_ident()))

    def _run_aot(self, args: tuple) -> tuple:
        """The ahead-of-time compiled code; a call it refuses (an input shape it was not
        compiled for) runs op by op, and an op's own error is raised from there."""
        try:
            return tuple(self._aot(*args))
        except Exception as exc:  # noqa: BLE001
            _warn_once(f"{id(self)}:aot:{tuple(tuple(a.shape) for a in args)}",
                       f"{self.describe()}: the compiled code refused a call "
                       f"({type(exc).__name__}: {str(exc).strip()[:200]}); it runs op by op")
            return self.run_ops(args)

    @property
    def ready(self) -> bool:
        """Whether the segment runs compiled code (tiered: once it switched over)."""
        return self._ready

    def _reject(self, exc: BaseException) -> None:
        """The compiler failed on a piece: run the op it points at uncompiled from now on
        (one warning naming it), or, where no op is named, the whole segment."""
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        why = f"{type(exc).__name__}: {first}"
        compile_stats["fallbacks"] += 1
        k = None
        for piece in self.pieces:
            if piece.fn is not piece.eager:
                k = piece.culprit(exc)
                if k is not None:
                    break
        if k is None:
            self.fallback = why
            _warn_once(f"{id(self)}:all", f"{self.describe()} falls back to the interpreter: "
                       f"{why}")
            return
        inner = self.ops[k]
        self.uncompiled[k] = why
        _warn_once(f"{inner.type}@{inner.callsite}:{why}",
                   f"{self.describe()}: op {inner.type} (created at "
                   f"{inner.callsite}) cannot compile and falls back to the interpreter; "
                   f"the ops around it stay compiled ({why})")
        ranges: list[tuple[int, int, bool]] = []
        start = 0
        for i in sorted(self.uncompiled):
            if start < i:
                ranges.append((start, i, True))
            ranges.append((i, i + 1, False))
            start = i + 1
        if start < len(self.ops):
            ranges.append((start, len(self.ops), True))
        self._build(ranges)

    def _unsupported(self, args: tuple) -> str | None:
        for name, v in zip(self.in_names, args):
            if not isinstance(v, torch.Tensor):
                return f"input {name!r} is a {type(v).__name__}, not a dense tensor"
            if getattr(v, LOD_ATTR, None):
                return f"input {name!r} carries a LoD (sequence) value"
        return None

    def _note_shapes(self, shapes: tuple) -> None:
        old, self._shapes = self._shapes, shapes
        if old is None:
            return
        changed = [(n, a[0], b[0]) for n, a, b in zip(self.in_names, old, shapes) if a != b]
        batch_only = all(len(a) == len(b) and a[1:] == b[1:] for _, a, b in changed)
        if batch_only and self._dynamic_logged:
            return  # compiled with a dynamic batch dimension already: no recompilation
        compile_stats["recompiled"] += 1
        what = ", ".join(f"{n} {list(a)} -> {list(b)}" for n, a, b in changed[:4])
        if batch_only:
            self._dynamic_logged = True
            log.warning("%s on %s recompiles with a dynamic batch dimension (new input "
                        "shapes: %s)", self.describe(), self.device, what)
        else:
            log.warning("%s on %s recompiles for new input shapes or dtypes: %s",
                        self.describe(), self.device, what)

    def run_ops(self, args: tuple, check: bool = False) -> tuple:
        """The segment op by op, each bound as the interpreter binds it (``bind_op``: its
        kernel, and the LoD its row shares); an op's failure is its OpRunError; ``check``:
        raise at the first op whose output holds NaN or Inf. While the profiler asks for op
        detail, every op reports its own time."""
        if self._runners is None:
            # NOTE: each value is dropped after its last reader, as the interpreter does:
            # the op-by-op run is the tiered start's speed, and freed memory is reused
            last: dict[str, int] = {}
            for i, o in enumerate(self.ops):
                for n in (*o.input_arg_names, *o.output_arg_names):
                    last[n] = i
            keep = set(self.out_names)
            drops: list[list[str]] = [[] for _ in self.ops]
            for n, i in last.items():
                if n != EMPTY and n not in keep:
                    drops[i].append(n)
            self._runners = [bind_op(o, self.device, self._services, env=self._env,
                                     drop=tuple(d)) for o, d in zip(self.ops, drops)]
        if self._fresh_idx:  # a committing segment updates copies, committed after it
            args = tuple(a.clone() if i in self._fresh_idx else a for i, a in enumerate(args))
        env = self._env
        env.clear()
        env.update(zip(self.in_names, args))
        timed, clock = op_detail(), time.perf_counter_ns
        try:
            for i, (inner, run) in enumerate(zip(self.ops, self._runners)):
                try:
                    t0 = clock() if timed else 0
                    run()
                    if check:
                        check_finite((slot, n, env[n]) for slot, names in inner.outputs.items()
                                     for n in names if n != EMPTY and n in env)
                    if timed:
                        report(OpRecord(inner.type, i, self.device_index, t0, clock(),
                                        threading.get_ident()))
                except Exception as exc:
                    err = op_error(inner, i, exc)
                    err.add_note(f"(op {i} of {self.describe()})")
                    raise err from exc
            return tuple(env[n] for n in self.out_names)
        finally:
            env.clear()

    def checked(self, *args: Any) -> tuple:
        """Run compiled and check the outputs for NaN/Inf; on one, re-run op by op from
        copies of the inputs taken before the run to name the op that made it."""
        keep = tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args)
        out = self(*args)
        try:
            check_finite(("Out", n, v) for n, v in zip(self.out_names, out))
        except FloatingPointError:
            self.run_ops(keep, check=True)
            raise
        return out


def _batch_dimension(block: Any, name: str) -> bool:
    """Whether variable ``name`` has a batch dimension: -1 first in its declared shape."""
    var = None if block is None else block._find_var_recursive(name)
    if var is None or var.persistable:
        return False
    shape = list(var.shape or ())
    return bool(shape) and shape[0] == -1


def background_idle(timeout: float | None = None) -> bool:
    """Wait until the tiered segments' compile jobs queued so far are done (compiled or
    refused); False when ``timeout`` seconds passed first. For tests and benchmarks: a run
    never needs to wait (the segment switches over at its first call after that)."""
    return tiered.jobs_idle(timeout)


def bind_compiled_function(op: Any, device: Any, services: Any = None,
                 env: dict[str, Any] | None = None, drop: tuple[str, ...] = (),
                 enabled: bool = True) -> Callable:
    """``run(env)`` for a ``compiled_segment`` op, as ``runtime.bind_op`` returns for other
    ops: read ``X`` from the value dict, call the segment, store ``Out``, drop ``drop``."""
    seg = Segment(op, device, services, enabled=enabled)
    ins, outs = tuple(seg.in_names), tuple(seg.out_names)

    def runner(call: Callable[..., tuple]) -> Callable:
        def run(env: dict[str, Any] = env) -> None:  # type: ignore[assignment]
            values = call(*[env[n] for n in ins])
            for n, v in zip(outs, values):
                env[n] = v
            if drop:
                for n in drop:
                    env.pop(n, None)
        return run

    run = runner(seg)
    run.segment = seg  # type: ignore[attr-defined]
    run.checked = runner(seg.checked)  # type: ignore[attr-defined]
    return run
