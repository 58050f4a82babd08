"""The files of a pserver-mode checkpoint: each pserver's variables file (with its step) and
the checkpoint's marker, which lists every file's step, size and SHA-256, so that a folder of
mixed steps or a replaced file does not load (``fluid.io.load_persistables`` checks it).

Example::

    record = write_pserver_checkpoint("ckpt", "pserver_0.safetensors", tensors, step=7)
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any

import torch

from ..atomic_write import write_bytes
from ..tensor_file import write_tensors

__all__ = ["CHECKPOINT_MARKER", "CHECKPOINT_FORMAT", "STEP_KEY", "ROLE_KEY", "file_record",
           "write_marker", "write_pserver_checkpoint", "write_pserver_emergency_checkpoint"]

CHECKPOINT_MARKER = "__checkpoint__.json"
CHECKPOINT_FORMAT = "parafluid.checkpoint/1"
STEP_KEY = "parafluid.step"  # a variables file's metadata: the step it holds
ROLE_KEY = "parafluid.role"  # ... and who wrote it ("trainer", "pserver")


def file_record(path: str, step: int) -> dict[str, Any]:
    """What a saved file is in a checkpoint's marker: its name, step, size and SHA-256."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return {"file": os.path.basename(path), "step": int(step), "bytes": os.path.getsize(path),
            "sha256": h.hexdigest()}


def write_pserver_checkpoint(dirname: str, filename: str, tensors: dict[str, torch.Tensor],
                             step: int) -> str:
    """A pserver's part of a checkpoint: its tensors with the step; returns the JSON record
    (name, step, bytes, SHA-256) the trainer puts into the checkpoint's marker."""
    path = os.path.join(dirname, filename)
    write_tensors(path, tensors, {STEP_KEY: str(step), ROLE_KEY: "pserver"})
    return json.dumps(file_record(path, step))


def write_pserver_emergency_checkpoint(dirname: str, filename: str,
                                       tensors: dict[str, torch.Tensor], step: int) -> str:
    """A failing pserver's state of ``step``: its file and a marker of its own in
    ``dirname/<file stem>/``, which ``load_persistables`` of that pserver's program loads
    (the job's other pservers write theirs beside it). Returns the folder."""
    folder = os.path.join(dirname, os.path.splitext(filename)[0])
    os.makedirs(folder, exist_ok=True)
    record = json.loads(write_pserver_checkpoint(folder, filename, tensors, step))
    write_marker(os.path.join(folder, CHECKPOINT_MARKER), int(step), [record])
    return folder


def write_marker(marker: str, step: int, records: list[dict]) -> None:
    """The checkpoint's marker: the step and each file's SHA-256 and size."""
    doc = {"format": CHECKPOINT_FORMAT, "step": step,
           "files": {r["file"]: {"sha256": r["sha256"], "bytes": r["bytes"]} for r in records}}
    write_bytes(marker, json.dumps(doc, indent=1, sort_keys=True).encode("utf-8"))
