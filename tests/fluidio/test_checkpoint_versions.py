"""The versioned files of a pserver-mode checkpoint: a save writes beside the committed
checkpoint, the marker commits, the versions it does not name go; readers follow the
marker; a folder of the earlier layout (plain file names) still loads."""

from __future__ import annotations

import json
import os

import pytest
import torch

from parafluid import io as fio
from parafluid.distributed.checkpoint import (
    commit_checkpoint,
    is_version_of,
    write_pserver_checkpoint,
)

PS0 = "pserver_0.safetensors"


def _save(folder, step: int, keep: str = "") -> dict:
    value = torch.full((3,), float(step))
    return json.loads(write_pserver_checkpoint(str(folder), PS0, {"w": value}, step, keep))


def _files(folder) -> list[str]:
    return sorted(os.listdir(folder))


def test_each_save_writes_beside_the_committed_one_which_goes_after_the_commit(tmp_path):
    first = _save(tmp_path, 1)
    assert first["file"] == PS0 and is_version_of(first["path"], PS0)
    assert first["path"] != PS0 and first["path"].startswith("pserver_0.step1-")
    commit_checkpoint(str(tmp_path), 1, [first])
    second = _save(tmp_path, 2)
    # until the new marker is in place, the folder holds and loads the committed step 1
    assert _files(tmp_path) == sorted(["__checkpoint__.json", first["path"], second["path"]])
    step, path = fio.checked_checkpoint_file(str(tmp_path), PS0)
    assert (step, os.path.basename(path)) == (1, first["path"])
    commit_checkpoint(str(tmp_path), 2, [second])
    assert _files(tmp_path) == ["__checkpoint__.json", second["path"]]
    assert fio.check_checkpoint_file(str(tmp_path), PS0) == 2


def test_a_pserver_keeps_the_committed_file_it_is_told_of_and_drops_the_rest(tmp_path):
    """A pserver on another machine cannot read the marker: the trainer's request names the
    committed version; the versions of saves that never committed are removed."""
    committed = _save(tmp_path, 1)["path"]
    killed = _save(tmp_path, 2)["path"]  # a save that never committed
    unnamed = _save(tmp_path, 3)["path"]  # nothing known: nothing removed
    assert _files(tmp_path) == sorted([committed, killed, unnamed])
    new = _save(tmp_path, 4, keep=committed)["path"]
    assert _files(tmp_path) == sorted([committed, new])
    # a name that is not a version of its file protects nothing and removes nothing
    other = _save(tmp_path, 5, keep="pserver_1.step1-0123abcd.safetensors")["path"]
    assert _files(tmp_path) == sorted([committed, new, other])


def test_a_folder_of_plain_file_names_still_loads_and_moves_to_versions(tmp_path):
    tensors = {"w": torch.ones(3)}
    path = tmp_path / PS0
    fio.write_tensors(str(path), tensors, {"parafluid.step": "4", "parafluid.role": "pserver"})
    record = fio.file_record(str(path), 4)
    assert record["path"] == record["file"] == PS0
    commit_checkpoint(str(tmp_path), 4, [record])
    marker = json.loads((tmp_path / "__checkpoint__.json").read_text())
    assert "path" not in marker["files"][PS0]  # the earlier layout, as earlier versions wrote
    assert fio.checked_checkpoint_file(str(tmp_path), PS0) == (4, str(path))
    new = _save(tmp_path, 5)
    assert path.exists()  # committed: kept until the next marker is in place
    commit_checkpoint(str(tmp_path), 5, [new])
    assert _files(tmp_path) == ["__checkpoint__.json", new["path"]]


@pytest.mark.parametrize("path", ["../pserver_0.safetensors", "pserver_1.safetensors",
                                  "/etc/passwd", "pserver_0.step1-xyz.safetensors", 7])
def test_a_marker_naming_another_file_does_not_load(tmp_path, path):
    (tmp_path / "__checkpoint__.json").write_text(json.dumps({
        "format": "parafluid.checkpoint/1", "step": 1,
        "files": {PS0: {"sha256": "0" * 64, "bytes": 1, "path": path}}}))
    with pytest.raises(ValueError, match="not a version of it; the marker is damaged"):
        fio.check_checkpoint_file(str(tmp_path), PS0)
