"""Walk Fluid 1.6's public API (parafluid/specs/fluid16_api.txt) against parafluid.

Every name must import at Fluid's path and be either provided (accepting Fluid's keyword
arguments, and used by some test under tests/) or a documented not-provided stand-in
(``parafluid.compat.NOT_PROVIDED``) that fails on use saying what to use instead. The counts
per module are the table in docs/fluid_compat.md.
"""

from __future__ import annotations

import importlib
import inspect
import re
from collections import Counter
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import parafluid
from parafluid.compat import NOT_PROVIDED, NotProvided, NotProvidedError

HERE = Path(__file__).parent
TESTS = HERE.parent
API_FILE = Path(parafluid.__file__).parent / "specs" / "fluid16_api.txt"
DOC = TESTS.parent / "docs" / "fluid_compat.md"
_LINE = re.compile(r"^(fluid(?:\.\w+)*)(?:\((.*)\))?$")


def _entries() -> list[tuple[str, list[str] | None]]:
    out = []
    for raw in API_FILE.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", "[")):
            continue
        m = _LINE.match(line)
        assert m, f"{API_FILE.name}: cannot parse {line!r}"
        args = None if m.group(2) is None else [a.strip() for a in m.group(2).split(",")
                                                 if a.strip()]
        out.append((m.group(1), args))
    return out


ENTRIES = _entries()


def resolve(path: str) -> tuple[Any, str]:
    """The object at a Fluid path (``fluid.layers.nn.fc``) and the module it lives in."""
    obj: Any = parafluid
    modname, module = "parafluid", "fluid"
    for part in path.split(".")[1:]:
        if isinstance(obj, NotProvided):
            break  # a stand-in covers its members (fluid.DataFeedDesc.desc)
        if isinstance(obj, ModuleType):
            module = modname.replace("parafluid", "fluid", 1)
            try:
                obj = getattr(obj, part)
            except AttributeError:
                obj = importlib.import_module(f"{modname}.{part}")
            modname = f"{modname}.{part}"
        else:
            obj = getattr(obj, part)
    if isinstance(obj, ModuleType):
        module = modname.replace("parafluid", "fluid", 1)
    return obj, module


def _test_sources() -> str:
    return "\n".join(p.read_text() for p in sorted(TESTS.rglob("*.py"))
                     if p.name != Path(__file__).name)


def _signature_names(obj: Any) -> set[str] | None:
    target = obj.__init__ if inspect.isclass(obj) else obj
    try:
        params = inspect.signature(target).parameters
    except (TypeError, ValueError):
        return None
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return None
    return set(params)


def walk(entries: list[tuple[str, list[str] | None]] = ENTRIES) -> dict[str, Counter]:
    """Per module: names, provided, not provided. Fails listing every problem at once."""
    sources = _test_sources()
    counts: dict[str, Counter] = {}
    problems = []
    for path, args in entries:
        try:
            obj, module = resolve(path)
        except (AttributeError, ImportError) as e:
            problems.append(f"{path}: does not import ({e})")
            continue
        c = counts.setdefault(module, Counter())
        c["names"] += 1
        if isinstance(obj, NotProvided):
            key = object.__getattribute__(obj, "_key")
            if key not in NOT_PROVIDED:
                problems.append(f"{path}: stand-in {key!r} has no NOT_PROVIDED entry")
            c["not provided"] += 1
            continue
        c["provided"] += 1
        leaf = path.rsplit(".", 1)[1]
        if not re.search(rf"\b{re.escape(leaf)}\b", sources):
            problems.append(f"{path}: provided but no test under tests/ uses {leaf!r}")
        if args:
            accepted = _signature_names(obj)
            missing = [a for a in args if accepted is not None and a not in accepted]
            if missing:
                problems.append(f"{path}: Fluid's keyword arguments {missing} are not "
                                f"accepted (signature {sorted(accepted or [])})")
    assert not problems, "\n".join(problems)
    return counts


def counts_table(counts: dict[str, Counter]) -> str:
    rows = ["| module | Fluid 1.6 names | provided | not provided |", "| --- | --- | --- | --- |"]
    total = Counter()
    for module in sorted(counts):
        c = counts[module]
        total.update(c)
        rows.append(f"| `{module}` | {c['names']} | {c['provided']} | {c['not provided']} |")
    rows.append(f"| all | {total['names']} | {total['provided']} | {total['not provided']} |")
    return "\n".join(rows)


def test_every_fluid16_name_is_provided_or_listed_and_the_docs_show_the_counts():
    counts = walk()
    table = counts_table(counts)
    print(table)
    doc = DOC.read_text()
    begin, end = "<!-- fluid16-api-counts -->", "<!-- /fluid16-api-counts -->"
    assert begin in doc and end in doc, f"{DOC.name} lacks the counts block"
    shown = doc.split(begin, 1)[1].split(end, 1)[0].strip()
    assert shown == table, f"docs/fluid_compat.md shows other counts; write:\n{table}"
    total = sum(c["names"] for c in counts.values())
    assert total == len(ENTRIES) > 600
    provided = sum(c["provided"] for c in counts.values())
    readme = " ".join((TESTS.parent / "README.md").read_text().split())
    assert f"walks the {total} public names" in readme and f"{provided} are provided" in readme, \
        f"README.md must state {total} names and {provided} provided"
    assert counts["fluid.layers.nn"]["names"] == 180


def test_the_walk_fails_for_a_missing_name_and_for_a_wrong_keyword():
    with pytest.raises(AssertionError, match="no_such_layer: does not import"):
        walk([("fluid.layers.no_such_layer", None)])
    with pytest.raises(AssertionError, match=r"keyword arguments \['sise'\]"):
        walk([("fluid.layers.nn.fc", ["input", "sise"])])
    assert walk([("fluid.layers.nn.fc", ["input", "size"])])["fluid.layers.nn"]["provided"] == 1


@pytest.mark.parametrize("path", ["fluid.layers.control_flow.lod_rank_table",
                                  "fluid.layers.nn.conv2d_transpose", "fluid.layers.tensor.concat",
                                  "fluid.layers.ops.cumsum", "fluid.layers.metric_op.auc",
                                  "fluid.layers.learning_rate_scheduler.noam_decay"])
def test_layer_module_paths_are_the_layers_themselves(path):
    obj, _ = resolve(path)
    assert obj is getattr(parafluid.layers, path.rsplit(".", 1)[1])
    module, name = path.rsplit(".", 1)
    exec(f"from {module.replace('fluid', 'parafluid', 1)} import {name}", {})  # noqa: S102


def test_a_name_fluid_put_elsewhere_is_not_found_at_the_wrong_module():
    with pytest.raises(AttributeError, match="layers.tensor.conv2d is not provided"):
        parafluid.layers.tensor.conv2d  # noqa: B018


def test_detection_names_are_the_layers_and_stand_ins_fail_on_use():
    from parafluid.layers.detection import generate_mask_labels, prior_box

    assert prior_box is parafluid.layers.prior_box
    assert generate_mask_labels is parafluid.layers.generate_mask_labels
    with pytest.raises(TypeError, match="prior_box: input must be a Variable"):
        prior_box(None, None, min_sizes=[1.0])
    with pytest.raises(NotProvidedError, match="reader ops over RecordIO files"):
        parafluid.layers.open_files(filenames=["a.recordio"], shapes=[[-1, 1]],
                                    lod_levels=[0], dtypes=["float32"])


def write_counts() -> str:
    """Rewrite the counts block of docs/fluid_compat.md and the README's two numbers from
    the walk (``python tests/compat/test_fluid16_api.py``)."""
    counts = walk()
    table = counts_table(counts)
    begin, end = "<!-- fluid16-api-counts -->", "<!-- /fluid16-api-counts -->"
    doc = DOC.read_text()
    head, rest = doc.split(begin, 1)
    DOC.write_text(f"{head}{begin}\n{table}\n{end}{rest.split(end, 1)[1]}")
    total = sum(c["names"] for c in counts.values())
    provided = sum(c["provided"] for c in counts.values())
    readme_path = TESTS.parent / "README.md"
    readme = readme_path.read_text()
    readme = re.sub(r"walks the(\s+)\d+(\s+)public names",
                    rf"walks the\g<1>{total}\g<2>public names", readme)
    readme = re.sub(r"\d+(\s+)are(\s+)provided", rf"{provided}\g<1>are\g<2>provided",
                    readme, count=1)
    readme_path.write_text(readme)
    return table


if __name__ == "__main__":
    print(write_counts())
