"""The sequential Executor: runs the ops of a Program's global block in order.

Example::

    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(fluid.default_startup_program())
    loss, = exe.run(feed={"x": x, "y": y}, fetch_list=[avg_cost])

Persistable variables (parameters, optimizer state) live in the scope across runs; every
other variable lives only during one run, as in Fluid. A program is compiled once per
(program version, feed names, fetch names) into a list of bound ops. A temporary is dropped
right after the last op that uses it (Fluid's eager deletion), which keeps the peak memory of
a step low: holding every temporary to the end made the allocator return and re-fault a few
MB per step.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from .dtypes import convert_dtype, to_numpy
from .framework import Block, Program, Variable, default_main_program
from .ops.registry import EMPTY, shapes_compatible
from .place import to_device
from .runtime import OpRunError, bind_op, op_error
from .scope import (
    LoDTensor,
    Scope,
    ScopeVariable,
    SelectedRows,
    as_numpy,
    global_scope,
    scope_guard,
)

__all__ = ["Executor", "global_scope", "scope_guard", "as_feed_tensor", "fetch_names"]


_MAX_PLANS = 64  # compiled (program, feed, fetch) signatures an Executor keeps


class _Plan:
    """A program compiled for one feed/fetch signature."""

    __slots__ = ("ops", "runners", "scope_reads", "persist_writes", "fetch", "frees")

    def __init__(self, ops: list, runners: list, scope_reads: list[str],
                 persist_writes: list[str], fetch: list[str],
                 frees: list[tuple[str, ...]] | None = None) -> None:
        self.ops = ops
        self.runners = runners
        self.scope_reads = scope_reads
        self.persist_writes = persist_writes
        self.fetch = fetch
        # frees[i]: temporaries whose last use is op i (dropped from the run's values after it)
        self.frees = frees if frees is not None else [()] * len(runners)


class Executor:
    """Runs programs on one place (``CPUPlace()`` or ``CUDAPlace(i)``)."""

    def __init__(self, place: Any = None) -> None:
        from .place import CPUPlace

        self.place = place if place is not None else CPUPlace()
        self.device = to_device(self.place)
        self._cache: dict[tuple, _Plan] = {}
        self._closed = False

    # ------------------------------------------------------------------ public API
    def run(self, program: Any = None, feed: dict[str, Any] | None = None,
            fetch_list: Sequence[Any] | None = None, feed_var_name: str = "feed",
            fetch_var_name: str = "fetch", scope: Scope | None = None,
            return_numpy: bool = True, use_program_cache: bool = False) -> list[Any]:
        """Run ``program`` (default: the default main program) once.

        Args:
            program: a Program, or a CompiledProgram (then it runs data-parallel).
            feed: ``{name: ndarray}`` for the data variables.
            fetch_list: Variables or names to return.
            scope: where persistable variables live (default: ``global_scope()``).
            return_numpy: return numpy arrays (else LoDTensors).
        """
        if self._closed:
            raise RuntimeError("Executor.run() after close(): create a new Executor")
        if program is None:
            program = default_main_program()
        scope = scope if scope is not None else global_scope()
        feed = {} if feed is None else feed
        fetch_list = [] if fetch_list is None else fetch_list
        if not isinstance(fetch_list, (list, tuple)):
            fetch_list = [fetch_list]
        if hasattr(program, "_run_from_executor"):  # CompiledProgram (may take a list feed)
            return program._run_from_executor(self, feed, fetch_list, scope, return_numpy)
        if not isinstance(feed, dict):
            raise TypeError(f"Executor.run: feed must be a dict of name -> array, "
                            f"got {type(feed).__name__}")
        if not isinstance(program, Program):
            raise TypeError(f"Executor.run: program must be a Program or CompiledProgram, "
                            f"got {type(program).__name__}")
        fetch = fetch_names(fetch_list)
        plan = self._plan(program, tuple(sorted(feed)), tuple(fetch))
        block = program.global_block()

        env: dict[str, Any] = {}
        for name, value in feed.items():
            env[name] = as_feed_tensor(block, name, value, self.device)
        for name in plan.scope_reads:
            if name in env:
                continue
            holder = scope.find_var(name)
            if holder is None or holder.value is None:
                raise RuntimeError(_missing_value_message(block, name, feed))
            env[name] = holder.value
        _run_ops(plan, env)
        for name in plan.persist_writes:
            holder = scope.find_var(name) or scope.var(name)
            holder.value = env[name]
        results = []
        for name in plan.fetch:
            value = env.get(name)
            if value is None:
                holder = scope.find_var(name)
                value = None if holder is None else holder.value
            if value is None:
                raise RuntimeError(f"fetch target {name!r} has no value after the run: no op "
                                   "wrote it and the scope does not hold it")
            results.append(as_numpy(value) if return_numpy else _as_lod_tensor(name, value))
        return results

    def close(self) -> None:
        """Drop the compiled plans; the executor refuses to run afterwards."""
        if self._closed:
            return
        self._closed = True
        self._cache.clear()

    # ------------------------------------------------------------------ compilation
    def _plan(self, program: Program, feed: tuple[str, ...], fetch: tuple[str, ...]) -> _Plan:
        key = (program, program._version, feed, fetch)
        plan = self._cache.get(key)
        if plan is None:
            plan = compile_block(program, feed, fetch, self.device, runtime=self)
            # Plans of older versions of this program are dead; other feed/fetch signatures of
            # the same version stay (a loop may alternate fetch lists). The cache is bounded
            # so that a script building a program per evaluation does not keep them all.
            self._cache = {k: v for k, v in self._cache.items()
                           if k[0] is not program or k[1] == program._version}
            while len(self._cache) >= _MAX_PLANS:
                del self._cache[next(iter(self._cache))]  # the oldest entry
            self._cache[key] = plan
        return plan


def compile_block(program: Program, feed: Sequence[str], fetch: Sequence[str], device: Any,
                  runtime: Any = None, block_idx: int = 0) -> _Plan:
    """Bind every op of a block and work out what comes from the scope and goes back to it."""
    block = program.block(block_idx)
    for name in feed:
        if block._find_var_recursive(name) is None:
            raise ValueError(_unknown_name_message("feed", name, block))
    for name in fetch:
        if block._find_var_recursive(name) is None:
            raise ValueError(_unknown_name_message("fetch target", name, block))
    written: set[str] = set(feed)
    scope_reads: list[str] = []
    persist_writes: list[str] = []
    for op in block.ops:
        for name in op.input_arg_names:
            if name not in written and name != EMPTY and name not in scope_reads:
                scope_reads.append(name)
        for name in op.output_arg_names:
            written.add(name)
    for name in sorted(written):
        var = block._find_var_recursive(name)
        if var is not None and var.persistable and name not in persist_writes:
            persist_writes.append(name)
    for name in fetch:
        if name not in written and name not in scope_reads:
            scope_reads.append(name)
    runners = [bind_op(op, device, runtime) for op in block.ops]
    frees = _last_uses(block, set(fetch))
    return _Plan(list(block.ops), runners, scope_reads, persist_writes, list(fetch), frees)


def _last_uses(block: Any, keep: set[str]) -> list[tuple[str, ...]]:
    """For each op, the non-persistable variables nothing after it reads or writes."""
    # NOTE: only the global block, and only without control flow: a sub-block may run many
    # times against its parent's values, and an op with a sub-block may read outer variables
    # that its slots do not list. Such blocks keep every value to the end of the run.
    if block.idx != 0:
        return [()] * len(block.ops)
    for op in block.ops:
        if any(isinstance(v, Block) or (isinstance(v, list) and any(isinstance(b, Block)
                                                                    for b in v))
               for v in op.attrs.values()):
            return [()] * len(block.ops)
    last: dict[str, int] = {}
    for i, op in enumerate(block.ops):
        for name in op.input_arg_names + op.output_arg_names:
            last[name] = i
    frees: list[list[str]] = [[] for _ in block.ops]
    for name, i in last.items():
        if name in keep or name == EMPTY:
            continue
        var = block._find_var_recursive(name)
        if var is not None and not var.persistable:
            frees[i].append(name)
    return [tuple(names) for names in frees]


def _run_ops(plan: _Plan, env: dict[str, Any]) -> None:
    i = 0
    frees = plan.frees
    try:
        for i, run in enumerate(plan.runners):  # noqa: B007 (i is read in the handler)
            run(env)
            if frees[i]:
                for name in frees[i]:
                    env.pop(name, None)
    except OpRunError:
        raise
    except Exception as e:
        raise op_error(plan.ops[i], i, e) from e


# ---------------------------------------------------------------------- feed / fetch


def fetch_names(fetch_list: Sequence[Any]) -> list[str]:
    names = []
    for item in fetch_list:
        if isinstance(item, Variable):
            names.append(item.name)
        elif isinstance(item, str):
            names.append(item)
        else:
            raise TypeError(f"fetch_list items must be Variables or names, "
                            f"got {type(item).__name__}: {item!r}")
    return names


def as_feed_tensor(block: Any, name: str, value: Any, device: torch.device) -> Any:
    """Check a fed value against the variable's shape and dtype; return it as a tensor."""
    var = block._find_var_recursive(name)
    if var is None:
        raise ValueError(_unknown_name_message("feed", name, block))
    if isinstance(value, SelectedRows):
        return value.to(device)
    if isinstance(value, LoDTensor):
        from .lod import lod_feed_tensor  # the LoD rides on the tensor (see lod.py)

        return lod_feed_tensor(block, name, value, device)
    if isinstance(value, torch.Tensor):
        arr_dtype = convert_dtype(value.dtype)
        shape = tuple(value.shape)
    else:
        if not isinstance(value, np.ndarray):
            value = np.asarray(value, dtype=to_numpy(var.dtype) if var.dtype else None)
        arr_dtype = convert_dtype(value.dtype) if value.dtype != object else "object"
        shape = value.shape
    if var.dtype is not None and arr_dtype != var.dtype:
        raise TypeError(f"feed {name!r}: expected dtype {var.dtype}, got {arr_dtype} "
                        f"(convert with .astype('{var.dtype}'))")
    if var.shape is not None and not shapes_compatible(var.shape, shape):
        raise ValueError(f"feed {name!r}: expected shape {list(var.shape)} (-1 = any), "
                         f"got {list(shape)}")
    # NOTE: a persistable may be updated in place later (optimizer ops): never alias the
    # caller's memory for one.
    if isinstance(value, torch.Tensor):
        return value.to(device, copy=var.persistable)
    if not value.flags.c_contiguous or not value.flags.writeable:
        value = np.array(value, order="C")
    elif var.persistable:
        value = value.copy()
    t = torch.from_numpy(value)
    return t if device.type == "cpu" else t.to(device)


def _as_lod_tensor(name: str, value: Any) -> LoDTensor:
    holder = ScopeVariable(name)
    holder.value = value.clone() if isinstance(value, torch.Tensor) else value
    return LoDTensor(holder)


def _unknown_name_message(what: str, name: str, block: Any) -> str:
    close = difflib.get_close_matches(name, list(block.vars), n=3)
    hint = f"; did you mean {', '.join(map(repr, close))}?" if close else ""
    return f"{what} {name!r} is not a variable of the program{hint}"


def _missing_value_message(block: Any, name: str, feed: dict[str, Any]) -> str:
    var = block._find_var_recursive(name)
    if var is not None and var.persistable:
        return (f"variable {name!r} is read by the program but not initialized in the scope: "
                "run the startup program first (exe.run(fluid.default_startup_program()))")
    readers = [f"#{i} {op.type}" for i, op in enumerate(block.ops) if name in op.input_arg_names]
    return (f"variable {name!r} is needed by op {readers[0] if readers else '?'} but was not fed "
            f"and no earlier op computes it; feed it (fed: {sorted(feed) or 'nothing'})")
