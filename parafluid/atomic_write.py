"""Atomic file writes for checkpoints and models, and the cleanup of what a killed save left.

``write_bytes(path, data)`` writes a hidden temporary file in the same directory, flushes it
to disk, renames it over ``path`` and syncs the directory: a reader sees the old file or the
new one, never a part. A process killed before the rename cannot remove its temporary, so the
name says who wrote it (host, pid, and the process's start time), and every save first
removes the temporaries of writers that are no longer running, never those of live ones.

Example::

    write_bytes("ckpt/__model__", data)
    write_files({"out/m.pdparams": params, "out/m.pdopt": opt})  # all written, then renamed
    remove_stale_temps("ckpt")   # what write_bytes does first; returns the removed paths
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
import socket
import stat

__all__ = ["write_bytes", "write_files", "remove_stale_temps"]


def write_bytes(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically: temp file in the same directory, fsync, rename.

    The temporary file is hidden and named after this process
    (``.<name>.tmp-<host>-<pid>-<start time>-<random>``). A writer killed before the rename
    leaves it behind; every save first removes such files of writers that are no longer
    running (``remove_stale_temps``), so the leak lasts until the next save.
    """
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    remove_stale_temps(directory)
    tmp = _temp_path(path)
    try:
        _write_file(tmp, data)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    _fsync_dir(directory)


def write_files(files: dict[str, bytes]) -> None:
    """Write several files as one save: every temporary file is written and flushed first,
    then all are renamed, back to back, and their directories synced.

    A writer killed while writing (the long part) leaves every old file as it was; only one
    killed between two renames (microseconds) leaves some files new and some old, which the
    reader must tell apart (e.g. by an id of the save in each file).
    """
    temps: dict[str, str] = {}
    try:
        for path, data in files.items():
            directory = os.path.dirname(os.path.abspath(path))
            os.makedirs(directory, exist_ok=True)
            remove_stale_temps(directory)
            temps[path] = _temp_path(path)
            _write_file(temps[path], data)
        for path, tmp in temps.items():
            os.replace(tmp, path)
    finally:
        for tmp in temps.values():
            if os.path.exists(tmp):
                os.unlink(tmp)
    for directory in {os.path.dirname(os.path.abspath(p)) for p in files}:
        _fsync_dir(directory)


# NOTE: the name holds what tells a dead writer from a live one: the host (a directory may be
# shared between machines, whose pids mean nothing here), the pid, and the process's start
# time in clock ticks since boot (so a later process that got the same pid is not taken for
# the writer). The second form is the name of earlier versions: pid only.
_TEMP_NAME = re.compile(r"\.(?P<base>.+)\.tmp-(?:(?P<host>[0-9a-f]{8})-(?P<pid>\d{1,10})-"
                        r"(?P<started>\d{1,20})|(?P<old_pid>\d{1,10}))-[0-9a-f]{8}")


def _temp_path(path: str, pid: int | None = None, *, host: str | None = None,
               started: int | None = None) -> str:
    """The temporary name a save to ``path`` by process ``pid`` (default: this one) uses."""
    pid = os.getpid() if pid is None else pid
    started = _start_ticks(pid) if started is None else started
    name = f".{os.path.basename(path)}.tmp-{_host_tag(host)}-{pid}-{started}-" \
           f"{secrets.token_hex(4)}"
    return os.path.join(os.path.dirname(os.path.abspath(path)), name)


def _host_tag(host: str | None = None) -> str:
    host = socket.gethostname() if host is None else host
    return hashlib.sha256(host.encode("utf-8", "replace")).hexdigest()[:8]


def remove_stale_temps(directory: str) -> list[str]:
    """Remove the save temporaries in ``directory`` whose writer is no longer running.

    A temporary of a live process (this one, or a save in progress elsewhere on this host),
    of another host, or whose writer cannot be told dead, is kept. Returns the removed paths.
    """
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    removed, here = [], _host_tag()
    for name in names:
        m = _TEMP_NAME.fullmatch(name)
        if m is None:
            continue
        if m["old_pid"] is not None:
            pid, started = int(m["old_pid"]), None
        elif m["host"] != here:
            continue
        else:
            pid, started = int(m["pid"]), int(m["started"]) or None
        path = os.path.join(directory, name)
        try:
            if not stat.S_ISREG(os.lstat(path).st_mode) or _writer_running(pid, started):
                continue
            os.unlink(path)
        except OSError:  # removed by another save meanwhile, or not ours to remove
            continue
        removed.append(path)
    return removed


def _writer_running(pid: int, started: int | None) -> bool:
    """False only when process ``pid`` (started at ``started`` ticks) has surely ended."""
    if pid == os.getpid() or not 0 < pid < 2 ** 31:
        return True  # NOTE: never ours to judge; a pid out of range is not a real writer
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # PermissionError: a live process of another user
        return True
    state = _proc_stat(pid)
    if state is None:
        return True  # no /proc (not Linux), or it ended this instant: keep to be safe
    if state[0] in ("Z", "X"):
        return False  # it has exited and only waits to be reaped: it writes nothing more
    return started is None or state[1] == started  # another start time: the pid was reused


def _start_ticks(pid: int) -> int:
    """When process ``pid`` started, in clock ticks since boot; 0 where that is unknown."""
    state = _proc_stat(pid)
    return 0 if state is None else state[1]


def _proc_stat(pid: int) -> tuple[str, int] | None:
    """(state letter, start time in ticks since boot) of a process, from Linux's /proc."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            text = f.read().decode("ascii", "replace")
        # NOTE: the command name (field 2) may hold spaces and ')': split after the last ')'
        fields = text[text.rindex(")") + 2:].split()
        return fields[0], int(fields[19])
    except (OSError, ValueError, IndexError):
        return None


def _write_file(path: str, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _fsync_dir(directory: str) -> None:
    # NOTE: makes the rename itself durable; not every platform can open a directory.
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
