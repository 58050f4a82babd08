"""Every ```python block of README.md and docs/*.md runs.

A block runs on its own (fresh default programs, scope and names, in an empty directory),
or, when the line before its fence is ``<!-- continues -->``, in the namespace the previous
block of the same file left, as a reader who ran the page top to bottom would have it (in a
parallel run, where the earlier blocks ran in another worker, they run again first).
``<!-- no-run: REASON -->`` before a fence marks a fragment that cannot run alone (a piece
of a multi-process script, a declaration shown for its shape); the reason says where the
real thing is tested.
"""

from __future__ import annotations

import os
import pathlib
import re

import pytest

import parafluid as fluid
from parafluid import framework, unique_name

ROOT = pathlib.Path(__file__).resolve().parents[1]
FENCE = re.compile(r"(?:^<!-- (continues|no-run: [^>]*) -->\n)?^```python\n(.*?)^```",
                   re.S | re.M)

# Blocks known not to run as written, with the reason; each needs the marker or a
# self-contained rewrite. strict: fixing one flips it.
KNOWN_BROKEN: dict[tuple[str, int], str] = {}


def _blocks() -> list[tuple[str, int, str | None, str]]:
    out = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        rel = str(path.relative_to(ROOT))
        for i, m in enumerate(FENCE.finditer(path.read_text())):
            out.append((rel, i, m.group(1), m.group(2)))
    return out


BLOCKS = _blocks()
_namespaces: dict[str, dict] = {}


def _params():
    for rel, i, marker, code in BLOCKS:
        marks = []
        if (rel, i) in KNOWN_BROKEN:
            marks.append(pytest.mark.xfail(strict=True, reason=KNOWN_BROKEN[(rel, i)]))
        if marker and marker.startswith("no-run: "):
            marks.append(pytest.mark.skip(reason=marker[len("no-run: "):]))
        yield pytest.param(rel, i, marker == "continues", code, id=f"{rel}#{i}", marks=marks)


def _fresh(tmp_path) -> dict:
    return {"__name__": "__docs__", "__dir__": str(tmp_path), "__scope__": fluid.Scope(),
            "__names__": unique_name.UniqueNameGenerator(),
            "__programs__": (fluid.Program(), fluid.Program())}


def _exec_block(rel: str, index: int, code: str, ns: dict, monkeypatch) -> None:
    monkeypatch.chdir(ns["__dir__"])
    monkeypatch.setenv("CPU_NUM", os.environ.get("CPU_NUM", "1"))
    old_names = unique_name.switch(ns["__names__"])
    old_main = framework.switch_main_program(ns["__programs__"][0])
    old_startup = framework.switch_startup_program(ns["__programs__"][1])
    try:
        with fluid.scope_guard(ns["__scope__"]):
            exec(compile(code, f"{rel}#{index}", "exec"), ns)  # noqa: S102
    finally:
        unique_name.switch(old_names)
        framework.switch_main_program(old_main)
        framework.switch_startup_program(old_startup)
    ns["__block__"] = index
    _namespaces[rel] = ns


def _replayed(rel: str, index: int, tmp_path, monkeypatch) -> dict:
    """The namespace block ``index - 1`` of ``rel`` left: the one this process has, else the
    blocks it continues run again here (a parallel run gives them to other workers)."""
    ns = _namespaces.get(rel)
    if ns is not None and ns["__block__"] == index - 1:
        return ns
    blocks = {i: (marker, code) for r, i, marker, code in BLOCKS if r == rel}
    start = index - 1
    while blocks[start][0] == "continues":
        start -= 1
    ns = _fresh(tmp_path)
    for i in range(start, index):
        _exec_block(rel, i, blocks[i][1], ns, monkeypatch)
    return ns


@pytest.mark.parametrize("rel,index,continues,code", list(_params()))
def test_doc_block_runs(rel, index, continues, code, tmp_path, monkeypatch):
    ns = _replayed(rel, index, tmp_path, monkeypatch) if continues else _fresh(tmp_path)
    _exec_block(rel, index, code, ns, monkeypatch)
