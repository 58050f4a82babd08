"""Read Fluid 1.6's Python package as source text (``ast``, never importing Paddle).

Used to write tests/compat/fluid16_api.txt: every name the package's ``__all__`` lists
export, at Fluid's import paths, and each signature's parameter names and default values
as Fluid's source spells them. Run as a script to rewrite the list::

    python tests/compat/fluid16_sources.py /tmp/pd/python/paddle/fluid

Names already in the list keep their place and section; their signature is refreshed from
the sources (a name the sources do not define keeps the keyword names it had). Names the
``__all__`` lists export and the list lacks are appended to the section ``[release]``.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).parent
API_FILE = HERE / "fluid16_api.txt"

# Packages of the release not walked for new names: Fluid's own tests, and the contrib /
# incubate / transpiler internals whose public names API.spec already records (contrib's
# slim, int8 and quantization toolkits are separate products, not the Fluid API).
SKIP_PACKAGES = ("tests", "contrib", "incubate", "transpiler.details", "distributed",
                 "dygraph.dygraph_to_static")
# Modules whose __all__ lists internal helpers rather than public API
SKIP_MODULES = ("core", "proto", "wrapped_decorator", "layers.layer_function_generator",
                "layers.math_op_patch", "layer_helper", "layer_helper_base", "default_scope_funcs",
                "op", "graphviz", "net_drawer", "annotations", "trainer_factory", "device_worker",
                "trainer_desc", "inferencer", "distribute_lookup_table", "communicator",
                "data_feeder", "lod_tensor")
# Module paths a Fluid program imports from although the package re-exports the names
# elsewhere too (fluid/input.py is where Fluid's docs place embedding and one_hot)
NAMES_ONLY = "# keyword names only"
EXTRA_PATHS = ["fluid.input.embedding", "fluid.input.one_hot"]
# Names written by hand: fluid.io's checkpoint-state pair (documented with the 1.6 API; the
# source snapshot read predates it), and a name the walk above cannot see
MANUAL = ["fluid.io.load_program_state(model_path, var_list=None)",
          "fluid.io.set_program_state(program, state_dict)",
          # the function layers/rnn.py's "from .rnn import *" binds over the module's name
          "fluid.layers.rnn(cell, inputs, initial_states=None, sequence_length=None, "
          "time_major=False, is_reverse=False, **kwargs)"]


@dataclass
class Module:
    """One module of the package: its definitions, imports and ``__all__``."""

    name: str  # dotted, relative to fluid ("layers.nn"; "" for fluid itself)
    tree: ast.Module
    is_package: bool
    defs: dict[str, ast.AST] = field(default_factory=dict)
    aliases: dict[str, ast.expr] = field(default_factory=dict)
    imports: dict[str, tuple[str, str | None]] = field(default_factory=dict)
    star: list[str] = field(default_factory=list)
    all: list[str] = field(default_factory=list)


def _absolute(mod: Module, level: int, target: str | None) -> str:
    parts = mod.name.split(".") if mod.name else []
    if not mod.is_package:
        parts = parts[:-1]
    if level > 1:
        parts = parts[: len(parts) - (level - 1)]
    if target:
        parts = parts + target.split(".")
    return ".".join(parts)


def _from_paddle(target: str | None) -> str | None:
    # "from paddle.fluid.layers import x" -> "layers"
    if target and (target == "paddle.fluid" or target.startswith("paddle.fluid.")):
        return target[len("paddle.fluid"):].lstrip(".")
    return None


class Package:
    """All modules of ``root`` (python/paddle/fluid), parsed once."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.modules: dict[str, Module] = {}
        for path in sorted(root.rglob("*.py")):
            rel = path.relative_to(root).with_suffix("")
            parts = list(rel.parts)
            is_package = parts[-1] == "__init__"
            if is_package:
                parts = parts[:-1]
            name = ".".join(parts)
            try:
                tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"))
            except SyntaxError:
                continue
            self.modules[name] = self._scan(Module(name, tree, is_package))
        for mod in self.modules.values():
            mod.all = self._all(mod)

    def _scan(self, mod: Module) -> Module:
        for node in mod.tree.body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                mod.defs[node.name] = node
            elif isinstance(node, ast.Assign) and len(node.targets) == 1 and \
                    isinstance(node.targets[0], ast.Name):
                mod.aliases[node.targets[0].id] = node.value
            elif isinstance(node, ast.ImportFrom):
                src = (_absolute(mod, node.level, node.module) if node.level
                       else _from_paddle(node.module))
                if src is None:
                    continue
                for a in node.names:
                    if a.name == "*":
                        mod.star.append(src)
                    else:
                        mod.imports[a.asname or a.name] = (src, a.name)
            elif isinstance(node, ast.Import):
                for a in node.names:
                    src = _from_paddle(a.name)
                    if src is not None and a.asname:
                        mod.imports[a.asname] = (src, None)
        return mod

    def _all(self, mod: Module) -> list[str]:
        names: list[str] = []

        def value(expr: ast.expr) -> list[str]:
            if isinstance(expr, (ast.List, ast.Tuple)):
                return [e.value for e in expr.elts if isinstance(e, ast.Constant)]
            if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Add):
                return value(expr.left) + value(expr.right)
            if isinstance(expr, ast.Attribute) and expr.attr == "__all__" and \
                    isinstance(expr.value, ast.Name):
                other = self.submodule(mod, expr.value.id)
                return list(other.all or self._all(other)) if other else []
            return []

        for node in mod.tree.body:
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__"
                                                    for t in node.targets):
                names = value(node.value)
            elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name) and \
                    node.target.id == "__all__":
                names = names + value(node.value)
            elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
                f = node.value.func
                if isinstance(f, ast.Attribute) and f.attr == "extend" and \
                        isinstance(f.value, ast.Name) and f.value.id == "__all__":
                    names = names + value(node.value.args[0])
        return list(dict.fromkeys(names))

    def submodule(self, mod: Module, name: str) -> Module | None:
        """The module a name of ``mod`` refers to, if it is one."""
        if name in mod.imports:
            src, attr = mod.imports[name]
            full = f"{src}.{attr}" if attr else src
            return self.modules.get(full.strip("."))
        full = f"{mod.name}.{name}" if mod.name else name
        return self.modules.get(full) if mod.is_package else None

    def lookup(self, mod: Module, name: str,
               depth: int = 0) -> tuple[Module, ast.AST] | Module | None:
        """What ``mod.name`` is: a (module, def node) pair, a Module, or None."""
        if depth > 20:
            return None
        if name in mod.defs:
            return mod, mod.defs[name]
        if name in mod.aliases:
            v = mod.aliases[name]
            if isinstance(v, ast.Name) and v.id != name:
                return self.lookup(mod, v.id, depth + 1)
            return mod, v  # an alias of something outside the package (core.X)
        if name in mod.imports:
            src, attr = mod.imports[name]
            if attr is None:
                return self.modules.get(src)
            target = self.modules.get(src)
            sub = self.modules.get(f"{src}.{attr}".strip("."))
            if sub is not None:
                return sub
            if target is not None:
                found = self.lookup(target, attr, depth + 1)
                if found is not None:
                    return found
            # bound from a module outside the sources (fluid.core's C++ classes)
            return mod, ast.Name(id=name, lineno=-hash((mod.name, name)) % 10**9)
        # NOTE: "from .data import *" binds the function data over the submodule data
        for src in mod.star:
            target = self.modules.get(src)
            if target is not None and (not target.all or name in target.all):
                found = self.lookup(target, name, depth + 1)
                if found is not None:
                    return found
        return self.submodule(mod, name)

    def resolve(self, path: str) -> tuple[Module, ast.AST] | Module | None:
        """The definition at a Fluid path (``fluid.layers.nn.fc``, ``fluid.Program.clone``)."""
        cur: tuple[Module, ast.AST] | Module | None = self.modules[""]
        for part in path.split(".")[1:]:
            if isinstance(cur, Module):
                cur = self.lookup(cur, part)
            elif isinstance(cur, tuple) and isinstance(cur[1], ast.ClassDef):
                cur = self.method(cur[0], cur[1], part)
            else:
                return None
            if cur is None:
                return None
        return cur

    def method(self, mod: Module, cls: ast.ClassDef, name: str,
               depth: int = 0) -> tuple[Module, ast.AST] | None:
        """A method of a class, looked up through its bases within the package."""
        for node in cls.body:
            if isinstance(node, ast.FunctionDef) and node.name == name:
                return mod, node
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name
                                                    for t in node.targets):
                if isinstance(node.value, ast.Name):
                    return self.method(mod, cls, node.value.id, depth + 1)
        if depth > 10:
            return None
        for base in cls.bases:
            found = self._base(mod, base)
            if found is not None:
                m = self.method(found[0], found[1], name, depth + 1)
                if m is not None:
                    return m
        return None

    def _base(self, mod: Module, base: ast.expr) -> tuple[Module, ast.ClassDef] | None:
        found = None
        if isinstance(base, ast.Name):
            found = self.lookup(mod, base.id)
        elif isinstance(base, ast.Attribute) and isinstance(base.value, ast.Name):
            sub = self.lookup(mod, base.value.id)
            if isinstance(sub, Module):
                found = self.lookup(sub, base.attr)
        if isinstance(found, tuple) and isinstance(found[1], ast.ClassDef):
            return found[0], found[1]
        return None

    def signature(self, found: tuple[Module, ast.AST] | Module | None) -> str | None:
        """``input, size, num_flatten_dims=1, ...`` for a def; None when there is none."""
        if not isinstance(found, tuple):
            return None
        mod, node = found
        if isinstance(node, ast.ClassDef):
            init = self.method(mod, node, "__init__")
            if init is None:
                return ""
            node = init[1]
        if not isinstance(node, ast.FunctionDef):
            return None  # an alias of a C++ class or a decorated call
        return format_args(node)


def activation_signature(pkg: Package, path: str) -> str | None:
    """layers/ops.py generates its activations as ``func(x, name=None)``."""
    module, _, leaf = path.rpartition(".")
    if module not in ("fluid.layers", "fluid.layers.ops"):
        return None
    ops = pkg.modules["layers.ops"]
    for node in ops.tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name) and \
                node.targets[0].id == "__activations_noattr__" and \
                leaf in ast.literal_eval(node.value):
            return "x, name=None"
    return None


def format_args(fn: ast.FunctionDef) -> str:
    """A def's parameters as source text, without ``self``/``cls``."""
    a = fn.args
    pos = list(a.posonlyargs) + list(a.args)
    defaults = [None] * (len(pos) - len(a.defaults)) + list(a.defaults)
    out = []
    for i, (arg, d) in enumerate(zip(pos, defaults)):
        if i == 0 and arg.arg in ("self", "cls"):
            continue
        out.append(arg.arg if d is None else f"{arg.arg}={_source(d)}")
    if a.vararg:
        out.append(f"*{a.vararg.arg}")
    elif a.kwonlyargs:
        out.append("*")
    for arg, d in zip(a.kwonlyargs, a.kw_defaults):
        out.append(arg.arg if d is None else f"{arg.arg}={_source(d)}")
    if a.kwarg:
        out.append(f"**{a.kwarg.arg}")
    return ", ".join(out)


def _source(expr: ast.expr) -> str:
    return " ".join(ast.unparse(expr).split())


# Modules whose name the package rebinds to a function of theirs ("from .rnn import *" makes
# fluid.layers.rnn the function rnn): their names are reached at the package's path only
SHADOWED = ("layers.rnn",)


def exported(pkg: Package) -> list[str]:
    """Every Fluid path an ``__all__`` of the release exports (one path per object)."""
    out: list[str] = []
    for name, mod in sorted(pkg.modules.items()):
        if not mod.all or any(name == p or name.startswith(p + ".") for p in SKIP_PACKAGES) \
                or name in SKIP_MODULES or name in SHADOWED:
            continue
        for n in mod.all:
            out.append(f"fluid.{name}.{n}" if name else f"fluid.{n}")
    out += EXTRA_PATHS

    def preference(p: str) -> tuple[int, int]:
        # the list writes a layer at its module (fluid.layers.nn.fc), anything else at its
        # shortest path (fluid.dygraph.save_dygraph, not fluid.dygraph.checkpoint.save_dygraph)
        return (0 if p.startswith("fluid.layers.") and p.count(".") == 3 else 1, p.count("."))
    return sorted(out, key=preference)


def _identity(pkg: Package, path: str) -> object:
    # an alias is a name of its own (fluid.optimizer.SGD and SGDOptimizer are both listed)
    leaf = path.rsplit(".", 1)[1]
    found = pkg.resolve(path)
    if isinstance(found, tuple):
        return (found[0].name, getattr(found[1], "lineno", 0), leaf)
    if isinstance(found, Module):
        return ("module", found.name)
    return ("path", path)


def rewrite(pkg: Package, api_file: Path = API_FILE) -> list[str]:
    """Refresh signatures in the list and append the release's missing names; returns them."""
    lines = api_file.read_text().splitlines()
    manual = {m.split("(", 1)[0]: m for m in MANUAL}
    known: set[object] = set()
    known_paths: set[str] = set()
    out = []
    for raw in lines:
        line = raw.strip()
        if not line or line.startswith(("#", "[")):
            out.append(raw)
            continue
        path = line.split("(", 1)[0]
        known_paths.add(path)
        known.add(_identity(pkg, path))
        if path in manual:
            out.append(manual[path])
            continue
        found = pkg.resolve(path)
        sig = activation_signature(pkg, path) or pkg.signature(found)
        if sig is None:
            line = line.split("#", 1)[0].strip()
            # the sources read do not define it (paddle.reader's decorators, a C++ method,
            # a name the release moved): the keyword names API.spec recorded are all there is
            out.append(f"{line}  {NAMES_ONLY}" if "(" in line else line)
        elif "(" in line or isinstance(found, tuple):
            out.append(f"{path}({sig})")
        else:
            out.append(line)
    added = []
    for path in exported(pkg):
        if path in known_paths:
            continue
        ident = _identity(pkg, path)
        # a name an __all__ lists but the module never binds (fluid.learning_rate_decay)
        # does not exist in the release either
        if (ident in known and path not in EXTRA_PATHS) or ident[0] in ("module", "path"):
            continue
        known_paths.add(path)
        known.add(ident)
        found = pkg.resolve(path)
        sig = pkg.signature(found)
        added.append(path if sig is None else f"{path}({sig})")
        if isinstance(found, tuple) and isinstance(found[1], ast.ClassDef):
            for node in found[1].body:  # the class's own public methods
                if isinstance(node, ast.FunctionDef) and not node.name.startswith("_"):
                    added.append(f"{path}.{node.name}({format_args(node)})")
    for line in MANUAL:
        if line.split("(", 1)[0] not in known_paths:
            added.append(line)
    if added:
        if "[release]" not in out:
            out += ["", "[release]"]
        out += added
    api_file.write_text("\n".join(out) + "\n")
    return added


if __name__ == "__main__":
    root = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/pd/python/paddle/fluid")
    for p in rewrite(Package(root)):
        print(p)
