"""The package's layers (docs/design.md): a module imports only from its own layer or below,
and no import circle anywhere.

Every ``import`` of a parafluid module is read from the source (at module level or inside a
function; ``if TYPE_CHECKING:`` blocks do not count, they never run) and mapped to its layer
by the longest matching prefix in ``LAYERS``; every module must be named there (a new
module is placed on purpose). Two rules, for every module of the package:

- no import reaches a higher layer (a lower layer that needs a fact of a higher one means
  the fact belongs lower down, or the higher one registers itself with the lower one, as
  the inference API does with ``CompiledProgram``);
- the imports form no cycle, counting those inside functions too (a function-level import
  hides a cycle from the interpreter, not from the reader); ``CALL_TIME_DELEGATIONS`` lists
  the few function-level imports allowed to point back, each with its reason.

Fluid's import paths are a surface: ``SURFACE_REEXPORTS`` lists the modules that re-export,
for Fluid's spelling, names whose home is a higher layer (each name imported so must be in
the module's ``__all__``: re-exported, never used by it).
"""

from __future__ import annotations

import ast
import functools
import importlib
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "parafluid"

# bottom to top: (layer, module prefixes relative to the package; "" is the package itself)
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("values", ("dtypes", "scope", "lod", "place", "placement", "flags", "unique_name",
                "version", "tensor_file", "compat", "atomic_write", "log_helper", "_malloc")),
    # the op registry is the schema the IR checks ops against (slots, attrs, shape rules);
    # it imports only values (and the table of the op types it refuses, with their reasons)
    ("IR", ("framework", "variable", "program_meta", "program_desc", "serialization", "verifier",
            "ops.registry", "ops.not_provided")),
    ("ops", ("ops", "distributed")),
    ("passes", ("backward", "passes")),
    ("engine", ("engine", "feed_fetch")),
    ("executors", ("executor", "parallel", "compiler", "fetch_handler", "trainer_factory")),
    ("program API", ("layers", "layer_helper", "optimizers", "optimizer", "initializer",
                     "param_attr", "regularizer", "clip", "data_layer", "nets", "metrics",
                     "io", "transpiler", "profiler", "timeline", "program_state", "average",
                     "evaluator", "input", "op", "debugger", "default_scope_funcs")),
    # the imperative mode builds on the layers; the data family and the inference API on
    # the executors (Fluid's paths fluid.reader, fluid.dataset, ... re-export dataio/)
    ("modes and data", ("dygraph", "dygraph_grad_clip", "dataio", "reader", "data_feeder",
                        "dataset", "data_feed_desc", "inference_api")),
    ("outside", ("", "__main__", "cli", "core", "install_check", "digits", "contrib",
                 "incubate", "testing")),
]

# (importer, imported): function-level imports that point back within a layer
CALL_TIME_DELEGATIONS = {
    ("framework", "serialization"): "Program.clone, serialize_to_string and parse_from_string "
                                    "are Fluid's methods; serialization builds Programs",
    ("layers.rnn", "contrib.rnn_impl"): "see KNOWN_UPWARD",
}

# (importer, imported): upward imports not yet removed, each with what still needs it
KNOWN_UPWARD: dict[tuple[str, str], str] = {
    ("layers.rnn", "contrib.rnn_impl"): "GRUCell / LSTMCell hold contrib's BasicGRUUnit / "
                                        "BasicLSTMUnit as Fluid's cells do (imported when a "
                                        "cell is made); the units belong below the "
                                        "imperative Layer",
}

# (importer, imported): Fluid names of a higher layer's family in a lower module's namespace
SURFACE_REEXPORTS = {
    ("io", "dataio.dataloader"): "fluid.io.DataLoader / PyReader",
    ("io", "dataio.reader"): "fluid.io.batch, shuffle, ... (the reader decorators)",
    ("io", "dataio.multiprocess_reader"): "fluid.io.multiprocess_reader",
    ("layers.io", "dataio.legacy_reader"): "fluid.layers.py_reader, create_py_reader_by_data, "
                                           "read_file, double_buffer",
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


def layer_of(module: str) -> str | None:
    """The layer of ``module`` (None if no prefix of ``LAYERS`` names it)."""
    best, best_len = None, -1
    for name, prefixes in LAYERS:
        for p in prefixes:
            if (module == p or (p and module.startswith(p + "."))) and len(p) > best_len:
                best, best_len = name, len(p)
    return best


def _rank(layer: str | None) -> int:
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


def upward_imports(edges: dict[str, list[str]] | None = None) -> list[str]:
    """``importer (layer) imports imported (layer)`` for each upward import of ``edges``
    (default: the package's), less the declared ones."""
    edges = import_graph() if edges is None else edges
    out = []
    for module in sorted(edges):
        layer = layer_of(module)
        for target in edges[module]:
            if _rank(layer_of(target)) > _rank(layer) and (module, target) not in KNOWN_UPWARD \
                    and (module, target) not in SURFACE_REEXPORTS:
                out.append(f"{module} ({layer}) imports {target or 'parafluid'} "
                           f"({layer_of(target)})")
    return sorted(set(out))


def import_graph() -> dict[str, list[str]]:
    """Every module's parafluid imports (module level and function level), less the
    declared delegations."""
    return {m: sorted({t for t, _ in imports_of(m) if (m, t) not in CALL_TIME_DELEGATIONS})
            for m in MODULES}


def import_cycles(edges: dict[str, list[str]]) -> list[list[str]]:
    """The strongly connected groups (more than one module) of ``edges``."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, ()):
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

    for v in sorted(edges):
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
                                  "parallel.parallel_executor", "transpiler.node_split",
                                  "layers.nn", "optimizers.rules", "dygraph.tracer",
                                  "dataio.dataset", "inference_api.predictor", "core", "")] == \
        ["values", "IR", "IR", "ops", "passes", "engine", "engine", "executors", "executors",
         "program API", "program API", "program API", "modes and data", "modes and data",
         "modes and data", "outside", "outside"]


def test_every_module_has_a_layer():
    unplaced = sorted(m for m in MODULES if layer_of(m) is None)
    assert not unplaced, f"modules no prefix of LAYERS names (place them): {unplaced}"


@pytest.mark.parametrize("layer", [name for name, _ in LAYERS])
def test_no_module_imports_a_higher_layer(layer):
    found = [line for line in upward_imports() if f" ({layer}) imports " in line]
    assert not found, "imports that reach up the layers:\n  " + "\n  ".join(found)


def test_no_import_cycles_anywhere():
    cycles = import_cycles(import_graph())
    assert cycles == [], "import circles (function-level imports included):\n  " + \
        "\n  ".join(" <-> ".join(c) for c in cycles)


def test_the_checks_catch_a_new_circle_or_upward_import():
    # the circles this layout removed, put back: weight norm importing the layers, the
    # executors importing the inference API and the Dataset trainer, the layers' decays
    # importing the imperative mode
    edges = import_graph()
    edges["layer_helper"] = [*edges["layer_helper"], "layers"]
    edges["parallel.compiled_program"] = [*edges["parallel.compiled_program"],
                                          "inference_api.predictor"]
    edges["executor"] = [*edges["executor"], "dataio.dataset_trainer"]
    edges["layers.learning_rate_scheduler"] = [*edges["layers.learning_rate_scheduler"],
                                               "dygraph"]
    cycles = import_cycles(edges)
    assert any({"layer_helper", "layers", "layers.nn"} <= set(c) for c in cycles)
    assert any({"executor", "dataio.dataset_trainer"} <= set(c) for c in cycles)
    assert upward_imports(edges) == [
        "executor (executors) imports dataio.dataset_trainer (modes and data)",
        "layers.learning_rate_scheduler (program API) imports dygraph (modes and data)",
        "parallel.compiled_program (executors) imports inference_api.predictor "
        "(modes and data)"]


def test_the_listed_exceptions_are_still_needed():
    """An entry of KNOWN_UPWARD, SURFACE_REEXPORTS or CALL_TIME_DELEGATIONS whose import is
    gone must leave the list; a delegation stays a function-level import."""
    for module, target in [*KNOWN_UPWARD, *SURFACE_REEXPORTS]:
        assert target in [t for t, _ in imports_of(module)], (module, target)
    for module, target in CALL_TIME_DELEGATIONS:
        assert (target, False) in imports_of(module), (module, target)
        assert (target, True) not in imports_of(module), (module, target)


def test_surface_reexports_only_reexport():
    """A surface re-export's names are the module's ``__all__``: it passes them on for
    Fluid's path and never uses them itself."""
    for module, target in SURFACE_REEXPORTS:
        path = MODULES[module]
        names = []
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and target in _resolve(
                    module, node, path.name == "__init__.py"):
                names += [a.asname or a.name for a in node.names]
        exported = importlib.import_module(f"parafluid.{module}").__all__
        assert names and set(names) <= set(exported), (module, target, names)
