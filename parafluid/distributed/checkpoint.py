"""The files of a pserver-mode checkpoint: each pserver's variables file (with its step) and
the checkpoint's marker, which lists every file's step, size and SHA-256, so that a folder of
mixed steps or a replaced file does not load (``fluid.io.load_persistables`` checks it).

A save never touches the files of the checkpoint committed before it: every file of the new
one is written under a fresh versioned name beside them (``pserver_0.safetensors`` is
written as ``pserver_0.step<k>-<random>.safetensors``); the marker, renamed into place in
one step, is the commit and names the version of each file; only then are the versions it
does not name removed. A save killed at any point leaves the previous marker and every file
it names in place: the folder loads the previous checkpoint, never a mix. A marker without
versions (an older folder, or a file saved by hand) names the plain file names.

Example::

    record = write_pserver_checkpoint("ckpt", "pserver_0.safetensors", tensors, step=7)
    commit_checkpoint("ckpt", 7, [json.loads(record)])
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
from typing import Any

import torch

from ..atomic_write import write_bytes
from ..tensor_file import read_tensors, write_tensors

__all__ = ["CHECKPOINT_MARKER", "CHECKPOINT_FORMAT", "STEP_KEY", "ROLE_KEY", "file_record",
           "write_marker", "write_pserver_checkpoint", "write_pserver_emergency_checkpoint",
           "versioned_name", "is_version_of", "read_marker", "committed_file",
           "commit_checkpoint", "remove_other_versions", "previous_checkpoint",
           "pserver_file_name", "check_checkpoint_file", "checked_checkpoint_file"]

CHECKPOINT_MARKER = "__checkpoint__.json"
CHECKPOINT_FORMAT = "parafluid.checkpoint/1"
STEP_KEY = "parafluid.step"  # a variables file's metadata: the step it holds
ROLE_KEY = "parafluid.role"  # ... and who wrote it ("trainer", "pserver")


def versioned_name(filename: str, step: int) -> str:
    """A fresh name for a new version of ``filename`` (``<stem>.step<k>-<8 hex><ext>``)."""
    stem, ext = os.path.splitext(filename)
    return f"{stem}.step{int(step)}-{secrets.token_hex(4)}{ext}"


def is_version_of(name: str, filename: str) -> bool:
    """True when ``name`` is ``filename`` itself or one of its versioned names."""
    if name == filename:
        return True
    stem, ext = os.path.splitext(filename)
    return re.fullmatch(re.escape(stem) + r"\.step\d{1,20}-[0-9a-f]{8}" + re.escape(ext),
                        name) is not None


def file_record(path: str, step: int, name: str | None = None) -> dict[str, Any]:
    """What a saved file is in a checkpoint's marker: its name (``name``, default the file's
    own), the file that holds it (``path``), step, size and SHA-256."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    base = os.path.basename(path)
    return {"file": name or base, "path": base, "step": int(step),
            "bytes": os.path.getsize(path), "sha256": h.hexdigest()}


def read_marker(dirname: str) -> dict[str, Any] | None:
    """The marker of the checkpoint committed in ``dirname``; None when there is none.
    ValueError naming the marker when it is not one."""
    marker = os.path.join(dirname, CHECKPOINT_MARKER)
    try:
        with open(marker, "rb") as f:
            data = f.read(16 << 20)
    except FileNotFoundError:
        return None
    try:
        doc = json.loads(data.decode("utf-8"))
        step, files = doc["step"], doc["files"]
        ok = doc["format"] == CHECKPOINT_FORMAT and type(step) is int and \
            isinstance(files, dict) and all(isinstance(e, dict) for e in files.values())
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as e:
        raise ValueError(f"{marker}: not a valid checkpoint marker: {e!r}") from None
    if not ok:
        raise ValueError(f"{marker}: not a valid checkpoint marker ({CHECKPOINT_FORMAT})")
    return doc


def committed_file(doc: dict[str, Any], filename: str, where: str = "") -> str | None:
    """The file holding ``filename`` in the checkpoint of marker ``doc`` (a name in the same
    folder), or None when the checkpoint has no such file. ValueError when the marker names
    a file that is not a version of ``filename`` (a marker made to read another file)."""
    entry = doc["files"].get(filename)
    if entry is None:
        return None
    path = entry.get("path", filename)
    if not isinstance(path, str) or not is_version_of(path, filename):
        raise ValueError(f"{where or CHECKPOINT_MARKER}: the file of {filename!r} is "
                         f"{str(path)[:200]!r}, not a version of it; the marker is damaged")
    return path


def _committed_or_none(dirname: str, filename: str) -> str | None:
    """Like :func:`committed_file` of the marker in ``dirname``; None also when the marker is
    damaged (a writer keeps every version then)."""
    try:
        doc = read_marker(dirname)
        return None if doc is None else committed_file(doc, filename)
    except (OSError, ValueError):
        return None


def previous_checkpoint(dirname: str) -> dict[str, str] | None:
    """The files of the checkpoint committed in ``dirname``: name -> the version holding it
    (None when none is, or its marker is damaged: then nothing is removed before the new
    checkpoint commits)."""
    try:
        doc = read_marker(dirname)
        if doc is None:
            return None
        return {name: committed_file(doc, name) or name for name in doc["files"]}
    except (OSError, ValueError):
        return None


def pserver_file_name(pserver_id: int) -> str:
    """The name of pserver ``pserver_id``'s file in a checkpoint (``pserver_<id>.safetensors``)."""
    return f"pserver_{int(pserver_id)}.safetensors"


def check_checkpoint_file(dirname: str, filename: str) -> int:
    """The step of ``filename`` in the pserver-mode checkpoint in ``dirname``, after checking
    the file its marker names (present, same step, same SHA-256); ValueError if not."""
    return checked_checkpoint_file(dirname, filename)[0]


def checked_checkpoint_file(dirname: str, filename: str) -> tuple[int, str]:
    """``(step, path)``: the file holding ``filename`` in the checkpoint committed in
    ``dirname`` (the version its marker names), checked as ``check_checkpoint_file`` does."""
    marker = os.path.join(dirname, CHECKPOINT_MARKER)
    doc = read_marker(dirname)
    if doc is None:
        raise ValueError(f"{dirname}: no {CHECKPOINT_MARKER}: this pserver-mode checkpoint "
                         "was not committed (its save was interrupted, so its files may be "
                         "of different steps) and does not load. With pservers on other "
                         f"machines, copy {CHECKPOINT_MARKER} from trainer 0's folder")
    step, files = doc["step"], doc["files"]
    name = committed_file(doc, filename, marker)
    if name is None:
        raise ValueError(f"{marker}: the checkpoint of step {step} has no file {filename!r} "
                         f"(it has {sorted(files)})")
    path = os.path.join(dirname, name)
    _, metadata = read_tensors(path)
    got = metadata.get(STEP_KEY)
    if got != str(step):
        raise ValueError(f"{path}: holds step {got}, but the checkpoint's marker says step "
                         f"{step}: the folder mixes steps and does not load")
    if file_record(path, step)["sha256"] != files[filename].get("sha256"):
        raise ValueError(f"{path}: its SHA-256 differs from the one in {CHECKPOINT_MARKER} "
                         f"(step {step}): the file was replaced after the checkpoint was "
                         "committed; the folder does not load")
    return step, path


def remove_other_versions(dirname: str, filename: str, keep: set[str]) -> list[str]:
    """Remove the versions of ``filename`` in ``dirname`` (the plain name included) that are
    not in ``keep``; returns the removed names."""
    removed = []
    try:
        names = os.listdir(dirname)
    except OSError:
        return removed
    for name in names:
        if name in keep or not is_version_of(name, filename):
            continue
        try:
            os.unlink(os.path.join(dirname, name))
        except OSError:
            continue  # NOTE: removed meanwhile, or not ours: what is kept is never harmed
        removed.append(name)
    return removed


def write_pserver_checkpoint(dirname: str, filename: str, tensors: dict[str, torch.Tensor],
                             step: int, keep: str = "") -> str:
    """A pserver's part of a checkpoint: its tensors with the step, under a fresh version of
    ``filename``; returns the JSON record (name, file, step, bytes, SHA-256) the trainer puts
    into the checkpoint's marker.

    The committed version of ``filename`` (``keep``, which the trainer that asks for the save
    read in its marker, or the one the marker in ``dirname`` names) is kept; the other
    versions (of saves that never committed, or older than the committed one) are removed
    first. Without either (no marker here and none named) nothing is removed.
    """
    os.makedirs(dirname, exist_ok=True)
    kept = {k for k in (keep, _committed_or_none(dirname, filename))
            if k and is_version_of(k, filename)}
    if kept:
        remove_other_versions(dirname, filename, kept)
    path = os.path.join(dirname, versioned_name(filename, step))
    write_tensors(path, tensors, {STEP_KEY: str(step), ROLE_KEY: "pserver"})
    return json.dumps(file_record(path, step, filename))


def write_pserver_emergency_checkpoint(dirname: str, filename: str,
                                       tensors: dict[str, torch.Tensor], step: int) -> str:
    """A failing pserver's state of ``step``: its file and a marker of its own in
    ``dirname/<file stem>/``, which ``load_persistables`` of that pserver's program loads
    (the job's other pservers write theirs beside it). Returns the folder."""
    folder = os.path.join(dirname, os.path.splitext(filename)[0])
    os.makedirs(folder, exist_ok=True)
    record = json.loads(write_pserver_checkpoint(folder, filename, tensors, step))
    commit_checkpoint(folder, int(step), [record])
    return folder


def write_marker(marker: str, step: int, records: list[dict]) -> None:
    """The checkpoint's marker: the step and each file's version, SHA-256 and size."""
    files = {}
    for r in records:
        entry = {"sha256": r["sha256"], "bytes": r["bytes"]}
        if r.get("path", r["file"]) != r["file"]:
            entry["path"] = r["path"]
        files[r["file"]] = entry
    doc = {"format": CHECKPOINT_FORMAT, "step": step, "files": files}
    write_bytes(marker, json.dumps(doc, indent=1, sort_keys=True).encode("utf-8"))


def commit_checkpoint(dirname: str, step: int, records: list[dict]) -> None:
    """Commit the checkpoint of ``records`` in ``dirname``: its marker renamed into place
    (one atomic step), then the versions of its files it does not name removed (the previous
    checkpoint's, and those of saves that never committed), where they lie in ``dirname``."""
    write_marker(os.path.join(dirname, CHECKPOINT_MARKER), step, records)
    for r in records:
        remove_other_versions(dirname, r["file"], {r.get("path", r["file"])})
