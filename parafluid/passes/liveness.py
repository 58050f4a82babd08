"""The one liveness analysis: who reads each value, and after which op it is dead.

Two views of the same question, one module:

- On the SSA graph every executor runs (``parafluid.engine.graph``; the sequential
  Executor's graph has one device), where each write of ``(device, name)`` makes a new
  version:

  - ``analyze(graph)`` counts the readers of every version and finds the producer of each,
    and the readers of each key's final version;
  - ``release_plan(graph, is_temp, keep)`` says, per node, which values to drop once it ran
    (a version's last reader, or its writer if nothing reads it): every version of a
    temporary when eager deletion is on, and, always, the inputs of ops whose ``OpDef``
    has ``releases_inputs`` (the ``delete_var`` ops ``release_memory`` inserts); a value
    read by several nodes that may run concurrently carries the number of readers to wait
    for;
  - ``parafluid.engine.inplace`` asks ``analyze`` whether an input has a single reader.

- On the ops of one block, by name (what the program-level passes ``memory_optimize`` and
  ``release_memory`` rewrite): ``block_liveness(block)`` gives each op's uses and defs and
  the classic ``live_in = uses | (live_out - defs)``, iterated to a fixed point.

Example::

    plan = release_plan(graph, is_temp=lambda n: not block.var(n).persistable, keep={"loss"})
    plan[7]   # [((0, "fc_0.tmp_0", 1), 1)]: node 7 is the only reader; drop it after node 7

    live = block_liveness(program.global_block())
    live.dies_at(3)   # {"fc_0.tmp_0"}: op 3 is its last reader
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["Liveness", "analyze", "release_plan", "BlockLiveness", "block_liveness",
           "sub_block_io", "sub_block_io_listed"]

Key = tuple[int, str]
VarRef = tuple[int, str, int]


@dataclass
class Liveness:
    readers: dict[VarRef, int]  # version -> number of nodes reading it
    producer: dict[VarRef, int]  # version -> node writing it
    final_readers: dict[Key, list[int]]  # key -> nodes reading its final version
    final_writer: dict[Key, int]  # key -> node writing its final version
    version_readers: dict[VarRef, list[int]]  # version -> nodes reading it, in node order


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
    return Liveness(readers, producer, final_readers, final_writer, by_version)


def release_plan(graph: Any, is_temp: Callable[[str], bool], keep: set[str] | frozenset[str],
                 eager: bool = True, serial: bool = False) -> dict[int, list[tuple[tuple, int]]]:
    """Node index -> ``[(value, readers)]``: values to drop after the node (``readers`` > 1:
    drop when that many readers have run). A value is ``(device, name)`` for a name's final
    version and ``(device, name, version)`` for an earlier one (the executors count readers
    per value, and the short key is the one hashed on the hot path).

    ``eager``: drop every version of a temporary after its last reader (eager deletion).
    Whatever ``eager`` says, the version an op with ``OpDef.releases_inputs`` reads is dropped
    once all its readers ran. Persistables (``is_temp`` false) and ``keep`` are never dropped.

    ``serial``: the graph runs one node at a time in node order (the Executor's one lane), so
    the last reader in that order drops the value alone (``readers`` 1, no count to keep).
    Dropping an old version early is safe: its next writer waits for all its readers (a
    write-after-read edge), and the reader that drops it is one of them.
    """
    from ..ops.registry import get_op_def

    live = analyze(graph)
    drops: set[VarRef] = set()
    if eager:
        # NOTE: every version, not only the final one: a name that memory_optimize reuses
        # holds several values in turn, and each can go as soon as its readers are done.
        drops.update(live.producer)
        drops.update(ref for ref in live.version_readers if ref[2] == 0)  # feeds
    for node in graph.nodes:
        if get_op_def(node.type).releases_inputs:
            drops.update(ref for refs in node.inputs.values() for ref in refs)
    final = {(*key, v) for key, v in _final_versions(live).items()}
    out: dict[int, list[tuple[tuple, int]]] = {}
    for ref in sorted(drops):
        if ref[1] in keep or not is_temp(ref[1]):
            continue
        readers = live.version_readers.get(ref) or []
        if live.producer.get((ref[0], ref[1], ref[2] + 1), -1) in readers:
            continue  # a reader writes the next version over it (e.g. an in-place all-reduce)
        value = ref[:2] if ref in final else ref
        if readers and serial:
            out.setdefault(max(readers), []).append((value, 1))
        elif readers:
            for r in readers:
                out.setdefault(r, []).append((value, len(readers)))
        elif ref in live.producer:  # written, never read
            out.setdefault(live.producer[ref], []).append((value, 1))
    return out


def _final_versions(live: Liveness) -> dict[Key, int]:
    versions: dict[Key, int] = {}
    for d, name, v in (*live.producer, *live.version_readers):
        if v >= versions.get((d, name), -1):
            versions[(d, name)] = v
    return versions


# ---------------------------------------------------------------------- block level


@dataclass
class BlockLiveness:
    """Per op ``i`` of a block: the names it reads (``uses``) and writes (``defs``), and the
    names live before it (``live_in``) and after it (``live_out``)."""

    uses: list[set[str]]
    defs: list[set[str]]
    live_in: list[set[str]]
    live_out: list[set[str]]

    def dies_at(self, i: int) -> set[str]:
        """Names op ``i`` reads for the last time (read at ``i``, not live after it)."""
        return self.live_in[i] - self.live_out[i]

    def rename(self, old: str, new: str, start: int) -> None:
        """Keep the sets in step with a rename of ``old`` to ``new`` from op ``start`` on."""
        for sets in (self.uses, self.defs, self.live_in, self.live_out):
            for s in sets[start:]:
                if old in s:
                    s.discard(old)
                    s.add(new)


def block_liveness(block: Any, ignore: Callable[[str], bool] | None = None) -> BlockLiveness:
    """Liveness of the names the ops of ``block`` read and write (``ignore(name)``: leave a
    name out, e.g. the empty-slot marker).

    ``live_out[i]`` is the union of ``live_in`` over op ``i``'s successors (the next op: a
    block is straight-line code; control flow lives in sub-blocks), and
    ``live_in[i] = uses[i] | (live_out[i] - defs[i])``, iterated until nothing changes.
    """
    from ..ops.registry import EMPTY

    def keep(name: str) -> bool:
        return name != EMPTY and (ignore is None or not ignore(name))

    ops = block.ops
    n = len(ops)
    uses = [{x for x in op.input_arg_names if keep(x)} for op in ops]
    defs = [{x for x in op.output_arg_names if keep(x)} for op in ops]
    succ = [[i + 1] if i + 1 < n else [] for i in range(n)]
    live_in: list[set[str]] = [set() for _ in range(n)]
    live_out: list[set[str]] = [set() for _ in range(n)]
    changed = True
    while changed:  # backward order: one sweep reaches the fixed point, a second confirms it
        changed = False
        for i in reversed(range(n)):
            out = set().union(*(live_in[j] for j in succ[i])) if succ[i] else set()
            inn = uses[i] | (out - defs[i])
            if out != live_out[i] or inn != live_in[i]:
                live_out[i], live_in[i] = out, inn
                changed = True
    return BlockLiveness(uses, defs, live_in, live_out)


# ---------------------------------------------------------------------- ops holding sub-blocks


def sub_block_io(op: Any) -> tuple[set[str], set[str]]:
    """(names read, names written) by the ops of ``op``'s sub-blocks, nested ones included,
    that are not variables of those sub-blocks: the outer values they touch."""
    blocks, stack = [], op.sub_blocks
    while stack:
        b = stack.pop()
        blocks.append(b)
        stack += [s for inner in b.ops for s in inner.sub_blocks]
    local = {n for b in blocks for n in b.vars}
    reads = {n for b in blocks for inner in b.ops for n in inner.input_arg_names
             if n not in local}
    writes = {n for b in blocks for inner in b.ops for n in inner.output_arg_names
              if n not in local}
    return reads, writes


def sub_block_io_listed(block: Any) -> bool:
    """Whether every op of ``block`` that holds sub-blocks lists in its own slots every outer
    value its sub-blocks read and write (``while`` and ``conditional_block`` do): then the
    liveness of ``block`` seen through the slots is exact, and values may be released."""
    for op in block.ops:
        if not op.sub_blocks:
            continue
        reads, writes = sub_block_io(op)
        if not reads <= set(op.input_arg_names) or not writes <= set(op.output_arg_names):
            return False
    return True
