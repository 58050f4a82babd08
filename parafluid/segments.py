"""Compiled segments: a ``compiled_segment`` op bound to one function of its ops' kernels.

The segmentation pass (``passes/segment.py``) leaves a run of compilable ops in the
sub-block of a ``compiled_segment`` op. Binding that op (``bind_segment``, which the Plan
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
from collections.abc import Callable
from typing import Any

import torch

from .lod import LOD_ATTR
from .ops.registry import EMPTY, get_op_def
from .runtime import RunContext, RunServices, op_device, op_error

__all__ = ["bind_segment", "Segment", "segment_source", "compile_stats"]

log = logging.getLogger("parafluid.compile")

_IDENT = re.compile(r"[^0-9A-Za-z_]")
_lock = threading.Lock()
_warned: set[str] = set()
# counters for tests and the benchmarks: compiles, recompiles, fallbacks
compile_stats = {"compiled": 0, "recompiled": 0, "fallbacks": 0}


def _debug() -> bool:
    return os.environ.get("PARAFLUID_DEBUG", "0") not in ("", "0")


def _warn_once(key: str, message: str) -> None:
    with _lock:
        if key in _warned and not _debug():
            return
        _warned.add(key)
    log.warning(message)


def _kernel(opdef: Any) -> Callable:
    # NOTE: the LoD-sharing wrapper reads Python attributes of tensors, which compiled code
    # does not carry; a segment given LoD inputs runs uncompiled (see Segment.__call__)
    return opdef.lod_share[2] if opdef.lod_share is not None else opdef.kernel


def segment_source(op: Any) -> tuple[str, list[str], list[str]]:
    """(the Python source of segment op ``op``'s function, its argument names, its result
    names); the function reads kernels ``K<i>``, attrs ``A<i>`` and contexts ``C<i>``."""
    ops = op.attrs["sub_block"].ops
    ins, outs = list(op.inputs.get("X", [])), list(op.outputs.get("Out", []))
    local: dict[str, str] = {}

    def var(name: str) -> str:
        if name not in local:
            local[name] = f"v{len(local)}"
        return local[name]

    args = [var(n) for n in ins]
    number = int(op.attrs.get("segment", 0))
    lines = [f"def segment_{number}({', '.join(args)}):"]
    for i, inner in enumerate(ops):
        opdef = get_op_def(inner.type)
        parts = []
        for slot in opdef.inputs:
            names = inner.inputs.get(slot.name) or []
            if slot.duplicable:
                parts.append(f"{slot.name!r}: [{', '.join('None' if n == EMPTY else local[n] for n in names)}]")
            elif names and names[0] != EMPTY:
                parts.append(f"{slot.name!r}: {local[names[0]]}")
            elif slot.optional or not names:
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
    return "\n".join(lines) + "\n", ins, outs


class Segment:
    """One segment op bound for one device: its function, compiled on first use.

    Call it with the segment's input values (in ``X`` order); it returns the output values
    (in ``Out`` order).
    """

    def __init__(self, op: Any, device: Any, services: RunServices | None = None,
                 enabled: bool = True) -> None:
        self.op = op
        self.ops = list(op.attrs["sub_block"].ops)
        self.number = int(op.attrs.get("segment", 0))
        self.device = op_device(op, device)
        self.contexts = [RunContext(o, op_device(o, self.device), services) for o in self.ops]
        self.kernels = [_kernel(get_op_def(o.type)) for o in self.ops]
        self.source, self.in_names, self.out_names = segment_source(op)
        filename = f"<parafluid segment {self.number} at {id(self):x}>"
        namespace: dict[str, Any] = {}
        for i, inner in enumerate(self.ops):
            namespace[f"K{i}"] = self.kernels[i]
            namespace[f"A{i}"] = dict(inner.attrs)
            namespace[f"C{i}"] = self.contexts[i]
        # NOTE: a fresh code object per segment: torch.compile caches compiled code per code
        # object, and closures of one function would share (and overflow) one cache
        code = compile(self.source, filename, "exec")
        linecache.cache[filename] = (len(self.source), None, self.source.splitlines(True),
                                     filename)
        exec(code, namespace)
        self.eager = namespace[f"segment_{self.number}"]
        self.filename = filename
        self.compiled: Callable | None = None
        self.fallback: str | None = None if enabled else "compilation is off"
        self._shapes: tuple | None = None
        self._dynamic_logged = False
        if _debug():
            log.warning("compiled_segment %d (%d ops) on %s:\n%s", self.number, len(self.ops),
                        self.device, self.source)

    # ------------------------------------------------------------------ names
    def describe(self) -> str:
        types = ", ".join(o.type for o in self.ops[:6])
        more = f", ... ({len(self.ops)} ops)" if len(self.ops) > 6 else ""
        return f"compiled_segment {self.number} [{types}{more}]"

    # ------------------------------------------------------------------ running
    def __call__(self, *args: Any) -> tuple:
        if self.fallback is None:
            reason = self._unsupported(args)
            if reason is None:
                return self._run_compiled(args)
            _warn_once(f"{id(self)}:{reason}", f"{self.describe()} runs uncompiled: {reason}")
            compile_stats["fallbacks"] += 1
            return self.run_ops(args)
        return self.eager(*args)

    def _unsupported(self, args: tuple) -> str | None:
        for name, v in zip(self.in_names, args):
            if not isinstance(v, torch.Tensor):
                return f"input {name!r} is a {type(v).__name__}, not a dense tensor"
            if getattr(v, LOD_ATTR, None):
                return f"input {name!r} carries a LoD (sequence) value"
        return None

    def _run_compiled(self, args: tuple) -> tuple:
        shapes = tuple((tuple(a.shape), a.dtype) for a in args)
        if shapes != self._shapes:
            self._note_shapes(shapes)
        fn = self.compiled
        if fn is None:
            mode = "reduce-overhead" if self.device.type == "cuda" else None
            fn = self.compiled = torch.compile(self.eager, dynamic=None, mode=mode)
            compile_stats["compiled"] += 1
        try:
            return fn(*args)
        except Exception as exc:  # noqa: BLE001 (a compile failure or the op's own error)
            try:
                out = self.run_ops(args)
            except Exception:
                raise  # the op's own error, named by run_ops
            self.fallback = self._explain(exc)
            compile_stats["fallbacks"] += 1
            _warn_once(f"{id(self)}:compile", f"{self.describe()} falls back to the "
                       f"interpreter: {self.fallback}")
            return out

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

    def _explain(self, exc: BaseException) -> str:
        """The op the compile failure points at (a line of the segment's function in the
        user stack torch.compile reports), and the first line of the error."""
        text = str(exc)
        first = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
        op_note = ""
        for m in re.finditer(re.escape(self.filename) + r'", line (\d+)', text):
            i = int(m.group(1)) - 2  # line 1 is the def
            if 0 <= i < len(self.source.splitlines()) - 2:
                line = self.source.splitlines()[i + 1]
                k = re.search(r"# op (\d+):", line)
                if k:
                    inner = self.ops[int(k.group(1))]
                    op_note = f"op {inner.type} (created at {inner.callsite}) cannot compile: "
        return f"{op_note}{type(exc).__name__}: {first}"

    def run_ops(self, args: tuple, check: bool = False) -> tuple:
        """The segment op by op (the interpreter's order and kernels); an op's failure is
        its OpRunError; ``check``: raise at the first op whose output holds NaN or Inf."""
        env = dict(zip(self.in_names, args))
        for i, inner in enumerate(self.ops):
            opdef = get_op_def(inner.type)
            ins: dict[str, Any] = {}
            for slot in opdef.inputs:
                names = inner.inputs.get(slot.name) or []
                if slot.duplicable:
                    ins[slot.name] = [None if n == EMPTY else env[n] for n in names]
                else:
                    ins[slot.name] = env[names[0]] if names and names[0] != EMPTY else None
            try:
                outs = opdef.kernel(ins, dict(inner.attrs), self.contexts[i])
                produced = []
                for slot in opdef.outputs:
                    names = inner.outputs.get(slot.name) or []
                    if not names:
                        continue
                    values = outs[slot.name] if slot.duplicable else [outs[slot.name]]
                    for n, v in zip(names, values):
                        if n != EMPTY:
                            env[n] = v
                            produced.append((slot.name, n, v))
                if check:
                    from .atomic import check_finite

                    check_finite(produced)
            except Exception as exc:
                err = op_error(inner, i, exc)
                err.add_note(f"in {self.describe()}")
                raise err from exc
        return tuple(env[n] for n in self.out_names)

    def checked(self, args: tuple) -> tuple:
        """Run compiled and check the outputs for NaN/Inf; on one, re-run op by op from
        copies of the inputs taken before the run to name the op that made it."""
        keep = tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args)
        out = self(*args)
        try:
            from .atomic import check_finite

            check_finite(("Out", n, v) for n, v in zip(self.out_names, out))
        except FloatingPointError:
            self.run_ops(keep, check=True)
            raise
        return out


def bind_segment(op: Any, device: Any, services: RunServices | None = None,
                 env: dict[str, Any] | None = None, drop: tuple[str, ...] = (),
                 enabled: bool = True) -> Callable:
    """``run(env)`` for a ``compiled_segment`` op, as ``runtime.bind_op`` returns for other
    ops: read ``X`` from the value dict, call the segment, store ``Out``, drop ``drop``."""
    seg = Segment(op, device, services, enabled=enabled)
    ins, outs = tuple(seg.in_names), tuple(seg.out_names)

    def run(env: dict[str, Any] = env) -> None:  # type: ignore[assignment]
        values = seg(*[env[n] for n in ins])
        for n, v in zip(outs, values):
            env[n] = v
        if drop:
            for n in drop:
                env.pop(n, None)

    def run_checked(env: dict[str, Any] = env) -> None:  # type: ignore[assignment]
        values = seg.checked(tuple(env[n] for n in ins))
        for n, v in zip(outs, values):
            env[n] = v
        if drop:
            for n in drop:
                env.pop(n, None)

    run.segment = seg  # type: ignore[attr-defined]
    run.checked = run_checked  # type: ignore[attr-defined]
    return run
