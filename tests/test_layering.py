"""The package's layers (docs/design.md): a module imports only from its own layer or below.

Every ``import`` of a parafluid module is read from the source (at module level or inside a
function; ``if TYPE_CHECKING:`` blocks do not count, they never run) and mapped to its layer
by the longest matching prefix in ``LAYERS``. A module no prefix names belongs to the top
layer (transpiler/, io, profiler, layers/, the API, cli). Two rules, for the layers in
``CHECKED``:

- no import reaches a higher layer (a lower layer that needs a fact of a higher one means
  the fact belongs lower down);
- the imports form no cycle, counting those inside functions too (a function-level import
  hides a cycle from the interpreter, not from the reader); ``CALL_TIME_DELEGATIONS`` lists
  the few function-level imports allowed to point back, each with its reason.

To enforce a further layer, add its name to ``CHECKED``.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "parafluid"

# bottom to top: (layer, module prefixes relative to the package)
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("values", ("dtypes", "scope", "lod", "place", "placement", "flags", "unique_name",
                "version", "tensor_file", "atomic_write")),
    # the op registry is the schema the IR checks ops against (slots, attrs, shape rules);
    # it imports only values (and the table of the op types it refuses, with their reasons)
    ("IR", ("framework", "variable", "program_meta", "serialization", "verifier",
            "ops.registry", "ops.not_provided")),
    ("ops", ("ops", "distributed")),
    ("passes", ("backward", "passes")),
    ("engine", ("engine", "feed_fetch")),
    ("executors", ("executor", "parallel")),
]
TOP = "top"
CHECKED = ("values", "IR", "ops", "passes", "engine")

# (importer, imported): function-level imports that point back within a layer
CALL_TIME_DELEGATIONS = {
    ("framework", "serialization"): "Program.clone, serialize_to_string and parse_from_string "
                                    "are Fluid's methods; serialization builds Programs",
}

# (importer, imported): upward imports not yet removed, each with what still needs it
KNOWN_UPWARD = {
    ("ops.rpc", "io"): "a pserver's checkpoint writes its blocks with io.save_vars",
}


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def layer_of(module: str) -> str:
    best, best_len = TOP, -1
    for name, prefixes in LAYERS:
        for p in prefixes:
            if (module == p or module.startswith(p + ".")) and len(p) > best_len:
                best, best_len = name, len(p)
    return best


def _rank(layer: str) -> int:
    names = [name for name, _ in LAYERS]
    return names.index(layer) if layer in names else len(names)


def _resolve(module: str, node: ast.Import | ast.ImportFrom, is_package: bool) -> list[str]:
    """The parafluid modules (relative names, "" for the package) an import statement
    names."""
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        if node.level:
            base = module.split(".") if module else []
            if not is_package:
                base = base[:-1]
            base = base[:len(base) - node.level + 1]
            prefix = ".".join(["parafluid", *base, *([node.module] if node.module else [])])
        else:
            prefix = node.module or ""
        names = [f"{prefix}.{a.name}" for a in node.names]
    out = []
    for name in names:
        if name != "parafluid" and not name.startswith("parafluid."):
            continue
        rel = name[len("parafluid."):] if name != "parafluid" else ""
        while rel and rel not in MODULES:  # `from .x import function` names module x
            rel = rel.rpartition(".")[0]
        out.append(rel)
    return out


def _is_type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


@functools.cache
def imports_of(module: str) -> list[tuple[str, bool]]:
    """(imported module, runs at import time) for every parafluid import of ``module``."""
    path = MODULES[module]
    tree = ast.parse(path.read_text(), str(path))
    is_package = path.name == "__init__.py"
    found: list[tuple[str, bool]] = []

    def walk(node: ast.AST, at_import: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if _is_type_checking(child):
                continue
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                found.extend((m, at_import) for m in _resolve(module, child, is_package)
                             if m != module)
            inner = at_import and not isinstance(
                child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            walk(child, inner)

    walk(tree, True)
    return found


def upward_imports() -> list[str]:
    out = []
    for module in sorted(MODULES):
        layer = layer_of(module)
        if layer not in CHECKED:
            continue
        for target, _ in imports_of(module):
            if _rank(layer_of(target)) > _rank(layer) and (module, target) not in KNOWN_UPWARD:
                out.append(f"{module} ({layer}) imports {target or 'parafluid'} "
                           f"({layer_of(target)})")
    return sorted(set(out))


def import_cycles() -> list[list[str]]:
    """Strongly connected groups of the checked layers' imports (less the delegations)."""
    nodes = [m for m in MODULES if layer_of(m) in CHECKED]
    edges = {m: sorted({t for t, _ in imports_of(m)
                        if t in nodes and (m, t) not in CALL_TIME_DELEGATIONS})
             for m in nodes}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return groups


def test_the_walk_sees_the_imports_it_must_judge():
    # the walk itself: relative, function-level and TYPE_CHECKING imports
    assert ("variable", True) in imports_of("framework")
    assert ("ops.registry", False) in imports_of("framework")  # inside Block._make_op
    assert not any(m == "framework" for m, _ in imports_of("variable"))  # TYPE_CHECKING only
    assert [layer_of(m) for m in ("lod", "framework", "ops.registry", "ops.math",
                                  "passes.prune", "engine.inplace", "engine.plan", "executor",
                                  "parallel.parallel_executor", "transpiler.node_split")] == \
        ["values", "IR", "IR", "ops", "passes", "engine", "engine", "executors", "executors",
         TOP]


@pytest.mark.parametrize("layer", CHECKED)
def test_no_module_imports_a_higher_layer(layer):
    found = [line for line in upward_imports() if f" ({layer}) imports " in line]
    assert not found, "imports that reach up the layers:\n  " + "\n  ".join(found)


def test_the_listed_exceptions_are_still_needed():
    """An entry of KNOWN_UPWARD or CALL_TIME_DELEGATIONS whose import is gone must leave the
    list; a delegation stays a function-level import."""
    for module, target in KNOWN_UPWARD:
        assert target in [t for t, _ in imports_of(module)], (module, target)
    for module, target in CALL_TIME_DELEGATIONS:
        assert (target, False) in imports_of(module), (module, target)
        assert (target, True) not in imports_of(module), (module, target)


def test_no_import_cycles_within_the_checked_layers():
    assert import_cycles() == []
