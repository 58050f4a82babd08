"""The one liveness analysis: who reads each value, and after which op it is dead.

It works on the SSA graph every executor runs (``parafluid.parallel.ssa_graph``; the
sequential Executor's graph has one device), where each write of ``(device, name)`` makes a
new version:

- ``analyze(graph)`` counts the readers of every version and finds the producer of each, and
  the readers of each key's final version;
- ``release_plan(graph, is_temp, keep)`` says, per node, which values to drop once it ran
  (the final version's last reader, or its writer if nothing reads it); a value read by
  several nodes that may run concurrently carries the number of readers to wait for;
- ``parafluid.passes.inplace`` asks ``analyze`` whether an input has a single reader.

Example::

    plan = release_plan(graph, is_temp=lambda n: not block.var(n).persistable, keep={"loss"})
    plan[7]   # [((0, "fc_0.tmp_0"), 1)]: node 7 is the only reader left; drop it after node 7
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["Liveness", "analyze", "release_plan"]

Key = tuple[int, str]
VarRef = tuple[int, str, int]


@dataclass
class Liveness:
    readers: dict[VarRef, int]  # version -> number of nodes reading it
    producer: dict[VarRef, int]  # version -> node writing it
    final_readers: dict[Key, list[int]]  # key -> nodes reading its final version
    final_writer: dict[Key, int]  # key -> node writing its final version


def analyze(graph: Any) -> Liveness:
    readers: dict[VarRef, int] = {}
    producer: dict[VarRef, int] = {}
    latest: dict[Key, int] = {}
    by_version: dict[VarRef, list[int]] = {}
    for node in graph.nodes:
        for refs in node.inputs.values():
            for ref in refs:
                readers[ref] = readers.get(ref, 0) + 1
                nodes = by_version.setdefault(ref, [])
                if not nodes or nodes[-1] != node.index:
                    nodes.append(node.index)
                latest.setdefault(ref[:2], ref[2])
        for refs in node.outputs.values():
            for ref in refs:
                producer[ref] = node.index
                latest[ref[:2]] = max(latest.get(ref[:2], 0), ref[2])
    final_readers = {key: by_version.get((*key, v), []) for key, v in latest.items()}
    final_writer = {key: producer[(*key, v)] for key, v in latest.items() if v > 0}
    return Liveness(readers, producer, final_readers, final_writer)


def release_plan(graph: Any, is_temp: Callable[[str], bool], keep: set[str] | frozenset[str]
                 ) -> dict[int, list[tuple[Key, int]]]:
    """Node index -> ``[(key, readers)]``: values to drop after the node (``readers`` > 1: drop
    when that many readers have run)."""
    live = analyze(graph)
    out: dict[int, list[tuple[Key, int]]] = {}
    for key in sorted(set(live.final_readers) | set(live.final_writer)):
        if key[1] in keep or not is_temp(key[1]):
            continue
        readers = live.final_readers.get(key) or []
        if readers:
            for r in readers:
                out.setdefault(r, []).append((key, len(readers)))
        elif key in live.final_writer:  # written, never read
            out.setdefault(live.final_writer[key], []).append((key, 1))
    return out
