"""A save killed mid-write, and checkpoints whose manifest or checksums are gone.

A save writes a hidden temporary file named after the writer's pid, then renames it. A
process killed before the rename leaves that file behind; the next save to the directory
removes the temporaries of dead writers and never those of live ones.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
from safetensors.torch import save as st_save

import parafluid as fluid
from parafluid import atomic_write
from parafluid import io as fio
from parafluid.testing.warm_popen import WarmPopen

from .conftest import Model

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# The child saves a checkpoint and stops for good halfway through writing the temporary file
# (its own hook on atomic_write._write_file), so the test can kill it at a known point.
_CHILD = textwrap.dedent("""
    import os, sys, time
    import parafluid as fluid
    from parafluid import atomic_write

    def write_half_then_hang(path, data):
        with open(path, "wb") as f:
            f.write(data[: len(data) // 2])
            f.flush()
            os.fsync(f.fileno())
        print("HALF", len(data), flush=True)
        time.sleep(120)

    atomic_write._write_file = write_half_then_hang
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data(name="x", shape=[4], dtype="float32")
        y = fluid.layers.data(name="y", shape=[3], dtype="float32")
        pred = fluid.layers.fc(input=fluid.layers.fc(input=x, size=8), size=3)
        diff = fluid.layers.elementwise_sub(pred, y)
        loss = fluid.layers.mean(fluid.layers.elementwise_mul(diff, diff))
        fluid.optimizer.SGD(learning_rate=0.05).minimize(loss)
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    fluid.io.save_persistables(exe, sys.argv[1], main)
""")


def _hidden(directory: str) -> list[str]:
    return sorted(n for n in os.listdir(directory) if n.startswith("."))


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_the_next_save_removes_the_temporary_of_a_writer_killed_mid_save(model: Model,
                                                                        tmp_path) -> None:
    directory = str(tmp_path)
    env = dict(os.environ, PYTHONPATH=REPO_ROOT)
    script = tmp_path.parent / f"{tmp_path.name}_child.py"  # beside the folder it saves into
    script.write_text(_CHILD)
    child = WarmPopen([sys.executable, str(script), directory], env=env,
                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        ready, _, _ = select.select([child.stdout], [], [], 40)
        line = child.stdout.readline() if ready else ""
        assert line.startswith("HALF"), f"the child did not reach the write: {line!r} " \
                                        f"{child.stderr.read() if child.poll() is not None else ''}"
        full_size = int(line.split()[1])
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=10)
    finally:
        if child.poll() is None:
            os.kill(child.pid, signal.SIGKILL)
            child.wait()
        child.stdout.close()
        child.stderr.close()
    left = _hidden(directory)
    assert len(left) == 1 and str(child.pid) in left[0], left  # the leak, named after the pid
    assert os.path.getsize(os.path.join(directory, left[0])) == full_size // 2 > 0
    assert not os.path.exists(os.path.join(directory, fio.DEFAULT_FILENAME))

    fluid.io.save_persistables(model.exe, directory, model.main, scope=model.scope)
    assert os.listdir(directory) == [fio.DEFAULT_FILENAME]
    other = Model(seed=7)
    fluid.io.load_persistables(other.exe, directory, other.main, scope=other.scope)
    for name, value in model.params().items():
        np.testing.assert_array_equal(other.value(name), value)


@pytest.mark.timeout(30)
def test_only_temporaries_of_dead_writers_are_removed(model: Model, tmp_path) -> None:
    directory = str(tmp_path)
    target = os.path.join(directory, fio.DEFAULT_FILENAME)
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        dead = _dead_pid()
        keep = {
            "mine": atomic_write._temp_path(target, os.getpid()),      # this process: alive
            "live child": atomic_write._temp_path(target, live.pid),
            "other host": atomic_write._temp_path(target, dead, host="somewhere-else"),
            "not ours": os.path.join(directory, f".notes.tmp-{dead}"),
            "plain dot file": os.path.join(directory, ".keep"),
        }
        remove = {
            "dead writer": atomic_write._temp_path(target, dead),
            "dead writer, other file": atomic_write._temp_path(os.path.join(directory, "__model__"),
                                                      dead),
            "older name form": os.path.join(directory, f".{fio.DEFAULT_FILENAME}.tmp-{dead}-"
                                                       "0123abcd"),
        }
        if sys.platform.startswith("linux"):  # start times come from /proc
            # the live child's pid, but another start time: an earlier process had that pid
            remove["pid reused by a later process"] = atomic_write._temp_path(target, live.pid,
                                                                     started=1)
        for path in (*keep.values(), *remove.values()):
            with open(path, "wb") as f:
                f.write(b"x" * 100)

        fluid.io.save_params(model.exe, directory, model.main, scope=model.scope)
        for what, path in keep.items():
            assert os.path.exists(path), f"{what}: {path} was removed"
        for what, path in remove.items():
            assert not os.path.exists(path), f"{what}: {path} was left"
    finally:
        live.kill()
        live.wait()


# ---------------------------------------------------------------------- manifest and checksums


def _rewrite_header(path: str, edit) -> None:
    """Apply ``edit`` to the safetensors header's metadata, keeping the tensor data."""
    data = open(path, "rb").read()
    n = int.from_bytes(data[:8], "little")
    header = json.loads(data[8:8 + n])
    edit(header.setdefault("__metadata__", {}))
    if not header["__metadata__"]:
        del header["__metadata__"]
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    open(path, "wb").write(len(text).to_bytes(8, "little") + text + data[8 + n:])


def _rename_key(old: str, new: str):
    return lambda meta: meta.__setitem__(new, meta.pop(old))


def _drop_crc(meta: dict) -> None:
    manifest = json.loads(meta["parafluid"])
    del manifest["vars"][0]["crc32"]
    meta["parafluid"] = json.dumps(manifest)


@pytest.mark.parametrize("damage, message", [
    (_rename_key("parafluid", "parafluix"), r"no parafluid manifest .* holds \['parafluix'\]"),
    (lambda meta: meta.clear(), r"no parafluid manifest .* holds no metadata"),
    (_drop_crc, r"corrupt manifest .* no checksum \(crc32\) for 'fc_0.b_0'"),
])
def test_a_checkpoint_without_its_manifest_or_checksums_does_not_load(model: Model, tmp_path,
                                                                      damage, message) -> None:
    path = fluid.io.save_params(model.exe, str(tmp_path), model.main, scope=model.scope)
    _rewrite_header(path, damage)
    other = Model(seed=7)
    before = other.params()
    with pytest.raises(ValueError, match=message) as err:
        fluid.io.load_params(other.exe, str(tmp_path), other.main, scope=other.scope)
    assert path in str(err.value)
    for name, value in before.items():  # nothing was loaded
        np.testing.assert_array_equal(other.value(name), value)


def test_a_plain_safetensors_file_says_how_to_read_it(model: Model, tmp_path) -> None:
    path = tmp_path / fio.DEFAULT_FILENAME
    path.write_bytes(st_save({"fc_0.w_0": torch.zeros(4, 8)}))
    with pytest.raises(ValueError, match="safetensors.torch.load_file"):
        fluid.io.load_params(model.exe, str(tmp_path), model.main, scope=model.scope)


@pytest.mark.parametrize("damage, message", [
    (_rename_key("program_sha256", "program_sha25x"), r"does not name the model it belongs to"),
    (lambda meta: meta.pop("program_sha256"), r"does not name the model it belongs to"),
])
def test_inference_params_must_name_their_model(model: Model, tmp_path, damage,
                                                message) -> None:
    fluid.io.save_inference_model(str(tmp_path), ["x"], [model.pred], model.exe, model.main,
                                  scope=model.scope)
    path = os.path.join(tmp_path, fio.DEFAULT_FILENAME)
    _rewrite_header(path, damage)
    with pytest.raises(ValueError, match=message) as err:
        fluid.io.load_inference_model(str(tmp_path), model.exe, scope=fluid.Scope())
    assert path in str(err.value)
