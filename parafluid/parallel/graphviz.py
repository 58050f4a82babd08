"""Graphviz dumps of a Program and of its multi-device SSA graph (debug_graphviz_path).

``write_graphs(program, graph, path)`` writes ``<path>_original.dot`` (ops and variables of
the global block) and ``<path>_multi_devices.dot`` (every node of the SSA graph, variables
as ``name@device#version``, control dependencies dashed); when ``path`` is a directory the
files go inside it. If the ``dot`` program is installed, an ``.svg`` of each is written too.
In a program placed on several devices (``fluid.place_guard``), each op is labelled and
coloured by its place, the ops of one place are boxed together, and the copies between
places stand out.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable

from ..engine.graph import ALL_DEVICES, SSAGraph

__all__ = ["program_to_dot", "block_to_dot", "graph_to_dot", "write_graphs"]

_DEVICE_COLORS = ["#cfe2f3", "#d9ead3", "#fff2cc", "#f4cccc", "#d9d2e9", "#fce5cd"]
_COPY_COLOR = "#f6b26b"  # memcpy / node_send / node_recv between places
_COPY_OPS = ("memcpy", "node_send", "node_recv")


def _place(op: object) -> str:
    """An op's place as ``[node/]device`` (``"cpu:1"``, ``"worker:1/cpu"``), or ""."""
    attrs = getattr(op, "attrs", {})
    device, node = str(attrs.get("op_device") or ""), str(attrs.get("op_node") or "")
    if not device:
        return ""
    return device if node in ("", "worker") else f"{node}/{device}"


def _clusters(lines: list[str], members: dict[str, list[str]]) -> None:
    """Box the ops of each place together (graphviz clusters)."""
    for k, (place, ids) in enumerate(sorted(members.items())):
        lines.append(f"  subgraph cluster_{k} {{ label={_q(place)}; style=dashed; "
                     + " ".join(ids) + "; }")


def _q(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def program_to_dot(program: object, ops_only: bool = False) -> str:
    """The global block as a bipartite graph of variables (ellipses) and ops (boxes).

    ``ops_only``: ops alone, an edge from each op to the readers of what it wrote (labelled
    with the variable), the ops of each place boxed together: the picture of a placed
    program in docs/placement.md.
    """
    return block_to_dot(program.global_block(), ops_only)  # type: ignore[attr-defined]


def block_to_dot(block: object, ops_only: bool = False,
                 highlight: Callable[[str], bool] | None = None) -> str:
    """``program_to_dot`` of one block; ops and variables whose name ``highlight`` accepts
    are drawn red."""
    lines = ["digraph program {", "  rankdir=TB;", "  node [fontsize=10];"]
    seen: set[str] = set()
    places = sorted({_place(op) for op in block.ops} - {""})
    members: dict[str, list[str]] = {}
    writer: dict[str, int] = {}
    for i, op in enumerate(block.ops):
        place = _place(op)
        color = _COPY_COLOR if place and op.type in _COPY_OPS else \
            _DEVICE_COLORS[places.index(place) % len(_DEVICE_COLORS)] if place else "#eeeeee"
        label = f"#{i} {op.type}" + (f" ({place})" if place else "")
        red = ", color=red, penwidth=2" if highlight is not None and highlight(op.type) else ""
        lines.append(f"  op{i} [shape=box, style=filled, fillcolor={_q(color)}, "
                     f"label={_q(label)}{red}];")
        if place:
            members.setdefault(place, []).append(f"op{i}")
        if ops_only:
            for name in op.input_arg_names:
                if name in writer:
                    lines.append(f"  op{writer[name]} -> op{i} [label={_q(name)}, "
                                 "fontsize=8];")
            writer.update((name, i) for name in op.output_arg_names)
            continue
        for name in op.input_arg_names + op.output_arg_names:
            if name not in seen:
                seen.add(name)
                var = block._find_var_recursive(name)
                style = ", style=bold" if var is not None and var.persistable else ""
                if highlight is not None and highlight(name):
                    style += ", color=red, penwidth=2"
                lines.append(f"  {_q('v:' + name)} [shape=ellipse{style}, label={_q(name)}];")
        for name in op.input_arg_names:
            lines.append(f"  {_q('v:' + name)} -> op{i};")
        for name in op.output_arg_names:
            lines.append(f"  op{i} -> {_q('v:' + name)};")
    if ops_only:
        _clusters(lines, members)
    lines.append("}")
    return "\n".join(lines) + "\n"


def graph_to_dot(graph: SSAGraph) -> str:
    """Every node of the multi-device graph; data edges solid, control edges dashed."""
    lines = ["digraph multi_devices {", "  rankdir=TB;", "  node [fontsize=10];"]
    producer: dict[tuple[int, str, int], int] = {}
    seen: set[tuple[int, str, int]] = set()

    def var(ref: tuple[int, str, int]) -> str:
        d, n, v = ref
        vid = _q(f"v:{d}:{n}:{v}")
        if ref not in seen:
            seen.add(ref)
            lines.append(f"  {vid} [shape=ellipse, label={_q(f'{n}@{d}#{v}')}];")
        return vid

    places = sorted({_place(node.op) for node in graph.nodes} - {""})
    for node in graph.nodes:
        place = _place(node.op)
        color = "#ffd966" if node.device == ALL_DEVICES else \
            _COPY_COLOR if place and node.type in _COPY_OPS else \
            _DEVICE_COLORS[places.index(place) % len(_DEVICE_COLORS)] if place else \
            _DEVICE_COLORS[node.device % len(_DEVICE_COLORS)]
        where = "all devices" if node.device == ALL_DEVICES else f"device {node.device}"
        if place:
            where = place if graph.ndev == 1 else f"{where}, {place}"
        lines.append(f"  n{node.index} [shape=box, style=filled, fillcolor={_q(color)}, "
                     f"label={_q(f'#{node.index} {node.type} ({where})')}];")
        data_deps = set()
        for refs in node.inputs.values():
            for ref in refs:
                lines.append(f"  {var(ref)} -> n{node.index};")
                if ref in producer:
                    data_deps.add(producer[ref])
        for refs in node.outputs.values():
            for ref in refs:
                lines.append(f"  n{node.index} -> {var(ref)};")
                producer[ref] = node.index
        for dep in sorted(node.deps - data_deps):
            lines.append(f"  n{dep} -> n{node.index} [style=dashed, color=gray];")
    lines.append("}")
    return "\n".join(lines) + "\n"


def write_graphs(program: object, graph: SSAGraph, path: str) -> list[str]:
    """Write the two dot files (and SVGs when ``dot`` exists); return the paths written."""
    prefix = os.path.join(path, "graph") if os.path.isdir(path) else path
    parent = os.path.dirname(prefix)
    if parent:
        os.makedirs(parent, exist_ok=True)
    written = []
    dot_exe = shutil.which("dot")
    for suffix, text in (("_original", program_to_dot(program)),
                         ("_multi_devices", graph_to_dot(graph))):
        dot_path = prefix + suffix + ".dot"
        with open(dot_path, "w") as f:
            f.write(text)
        written.append(dot_path)
        if dot_exe:
            svg = prefix + suffix + ".svg"
            subprocess.run([dot_exe, "-Tsvg", dot_path, "-o", svg], check=True,
                           capture_output=True, timeout=60)
            written.append(svg)
    return written
