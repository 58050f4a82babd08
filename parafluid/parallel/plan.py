"""Binding a multi-device SSA graph to kernels: one callable per node, ready for a scheduler.

A ``Plan`` is built once per (graph, feed names, fetch names). It owns one value dict
(``env``) per device; replica nodes run their op against their device's env (through
``parafluid.runtime.bind_op``), collective nodes read from and write to several envs and
call the communicator. The plan also knows, per device, what comes from the scope
(``reads``), what goes back to it (persistables written), and, with memory_optimize, when
each temporary is dead (after its last reader) so it is freed during the run.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import torch

from ..ops.registry import KernelContext, get_op_def
from ..runtime import OpRunError, bind_op, describe_op
from .ssa_graph import ALL_DEVICES, Node, SSAGraph

__all__ = ["Plan", "DeviceRuntime", "node_error"]


class DeviceRuntime:
    """What a kernel sees as ``ctx.runtime`` on one device of a ParallelExecutor.

    It holds the device scopes, not the executor, so that an executor nobody references is
    freed (and its threads stopped) at once rather than at the next garbage collection.
    """

    def __init__(self, device_scopes: list[Any], device_index: int, communicator: Any) -> None:
        self._device_scopes = device_scopes
        self.device_index = device_index
        self.communicator = communicator

    @property
    def scope(self) -> Any:
        return self._device_scopes[self.device_index]


def node_error(node: Node, exc: BaseException) -> OpRunError:
    """The OpRunError for a failed node: op index, type, inputs, device and callsite."""
    if node.op is not None:
        where = f"op #{node.op_index} {describe_op(node.op)} on device {node.device}"
        site = f", created at {node.op.callsite}"
    else:
        ins = ", ".join(f"{k}=[{', '.join(f'{n}@{d}' for d, n, _ in refs)}]"
                        for k, refs in node.inputs.items())
        where = f"{node.type} ({ins}) inserted after op #{node.op_index}"
        site = ""
    err = OpRunError(f"while running {where}{site}:\n  {type(exc).__name__}: {exc}",
                     node.op_index, node.type)
    err.device = node.device  # type: ignore[attr-defined]
    return err


class Plan:
    """Callables for the nodes of ``graph``, and the scope traffic around a run."""

    def __init__(self, graph: SSAGraph, block: Any, devices: list[torch.device],
                 runtimes: list[DeviceRuntime], feed: tuple[str, ...], fetch: tuple[str, ...],
                 memory_optimize: bool = False, inplace: dict[int, Any] | None = None) -> None:
        self.graph = graph
        self.ndev = graph.ndev
        self.fetch = fetch
        self.envs: list[dict[str, Any]] = [{} for _ in range(self.ndev)]
        feed_set = set(feed)
        self.reads = [[n for n in graph.reads0[d] if n not in feed_set]
                      for d in range(self.ndev)]
        self.persist_reads = [[n for n in names if (v := block._find_var_recursive(n)) is not None
                               and v.persistable] for names in self.reads]
        self.persist_writes: list[list[str]] = [[] for _ in range(self.ndev)]
        self.temps: list[list[str]] = [[] for _ in range(self.ndev)]
        written = sorted({key for key in graph.last_writer} | {(d, n) for d in range(self.ndev)
                                                               for n in feed})
        for d, name in written:
            var = block._find_var_recursive(name)
            if var is not None and var.persistable:
                if (d, name) not in graph.absent:
                    self.persist_writes[d].append(name)
            else:
                self.temps[d].append(name)
        self._lock = threading.Lock()
        self._release_counts: dict[tuple[int, str], int] = {}
        self._pending: dict[tuple[int, str], int] = {}
        releases = self._plan_releases(block, feed_set, set(fetch)) if memory_optimize else {}
        self.inplace_nodes = sorted(inplace or {})
        self.fns: list[Callable[[], None]] = []
        for node in graph.nodes:
            fn = self._bind(node, devices, runtimes, (inplace or {}).get(node.index))
            fn = self._wrap(node, fn, releases.get(node.index))
            self.fns.append(fn)
        self.edges = [(dep, node.index) for node in graph.nodes for dep in sorted(node.deps)]
        self.names = [f"{n.type}#{n.index}@{'all' if n.device == ALL_DEVICES else n.device}"
                      for n in graph.nodes]
        self.task_graph: Any = None  # built lazily by the executor (needs the scheduler)

    # ------------------------------------------------------------------ binding
    def _bind(self, node: Node, devices: list[torch.device], runtimes: list[DeviceRuntime],
              inplace: Any) -> Callable[[], None]:
        if node.device != ALL_DEVICES:
            env = self.envs[node.device]
            if inplace is not None:
                return inplace(env)
            run = bind_op(node.op, devices[node.device], runtimes[node.device])
            return lambda: run(env)
        opdef = get_op_def(node.type)
        kernel, attrs = opdef.kernel, dict(node.attrs)
        shim = SimpleNamespace(type=node.type, outputs={s: [n for _, n, _ in refs]
                                                       for s, refs in node.outputs.items()})
        ctx = KernelContext(shim, devices[0], runtimes[0])
        ins_spec = [(s, [(self.envs[d], n) for d, n, _ in refs],
                     opdef.input_by_name[s].duplicable) for s, refs in node.inputs.items()]
        outs_spec = [(s, [(self.envs[d], n) for d, n, _ in refs],
                      opdef.output_by_name[s].duplicable) for s, refs in node.outputs.items()]

        def run_collective() -> None:
            ins = {s: [env[n] for env, n in refs] if dup else refs[0][0][refs[0][1]]
                   for s, refs, dup in ins_spec}
            outs = kernel(ins, attrs, ctx)
            for s, refs, dup in outs_spec:
                values = outs[s] if dup else [outs[s]]
                if len(values) != len(refs):
                    raise RuntimeError(f"{node.type} returned {len(values)} values for "
                                       f"{len(refs)} outputs")
                for (env, n), v in zip(refs, values):
                    env[n] = v
        return run_collective

    def _wrap(self, node: Node, fn: Callable[[], None],
              release: list[tuple[dict, str, tuple[int, str] | None]] | None
              ) -> Callable[[], None]:
        lock, pending = self._lock, self._pending

        def guarded() -> None:
            try:
                fn()
            except OpRunError:
                raise
            except Exception as e:
                raise node_error(node, e) from e
            if release:
                for env, name, key in release:
                    if key is None:
                        env.pop(name, None)
                        continue
                    with lock:
                        pending[key] -= 1
                        last = pending[key] == 0
                    if last:
                        env.pop(name, None)
        return guarded

    def _plan_releases(self, block: Any, feed: set[str], fetch: set[str]
                       ) -> dict[int, list[tuple[dict, str, tuple[int, str] | None]]]:
        """memory_optimize: free each temporary's final version after its last reader."""
        g = self.graph
        out: dict[int, list[tuple[dict, str, tuple[int, str] | None]]] = {}
        keys = set(g.last_writer) | set(g.last_readers)
        for key in sorted(keys):
            d, name = key
            var = block._find_var_recursive(name)
            if name in fetch or var is None or var.persistable:
                continue
            readers = g.last_readers.get(key) or []
            env = self.envs[d]
            if len(readers) == 1:
                out.setdefault(readers[0], []).append((env, name, None))
            elif readers:
                self._release_counts[key] = len(readers)
                for r in readers:
                    out.setdefault(r, []).append((env, name, key))
            elif key in g.last_writer:  # written, never read
                out.setdefault(g.last_writer[key], []).append((env, name, None))
        return out

    # ------------------------------------------------------------------ running
    def begin(self) -> None:
        """Reset per-run state (values, release counters)."""
        for env in self.envs:
            env.clear()
        if self._release_counts:
            self._pending.clear()
            self._pending.update(self._release_counts)

    def run_in_order(self) -> None:
        """Run every node on the calling thread, in node order (a topological order)."""
        for fn in self.fns:
            fn()
