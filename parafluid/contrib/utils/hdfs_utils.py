"""``fluid.contrib.HDFSClient``, ``multi_download``, ``multi_upload``: HDFS through the
``hadoop`` command line, as Fluid does it.

Every call runs ``$hadoop_home/bin/hadoop fs -D<key>=<value>... <command>`` (no shell), with
a time limit per run; a command that fails is retried ``retry_times`` times. The methods
answer True/False (or lists) as Fluid's do; a missing ``hadoop`` and a run past its time
limit raise errors that name the command.
"""

from __future__ import annotations

import logging
import os
import subprocess
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any

__all__ = ["HDFSClient", "multi_download", "multi_upload"]

_logger = logging.getLogger("parafluid.hdfs")


class HDFSClient:
    """A client of one HDFS cluster through ``$hadoop_home/bin/hadoop fs``.

    Args:
        hadoop_home: the Hadoop client's directory (holding ``bin/hadoop``).
        configs: Hadoop settings passed as ``-D<key>=<value>``, e.g. ``fs.default.name``
            and ``hadoop.job.ugi``.
        timeout_s: the time limit of one ``hadoop`` run, in seconds.

    Example::

        client = fluid.contrib.HDFSClient("/opt/hadoop", {
            "fs.default.name": "hdfs://namenode:54310", "hadoop.job.ugi": "user,passwd"})
        client.upload("/user/me/models", "model.tar")
        files = client.lsr("/user/me/models")
    """

    def __init__(self, hadoop_home: str, configs: dict[str, Any],
                 timeout_s: float = 600.0) -> None:
        hadoop = os.path.join(str(hadoop_home), "bin", "hadoop")
        if not (os.path.isfile(hadoop) and os.access(hadoop, os.X_OK)):
            raise FileNotFoundError(f"HDFSClient: no executable hadoop at {hadoop!r} "
                                    f"(hadoop_home={hadoop_home!r}); install the Hadoop "
                                    "client there or pass its directory as hadoop_home")
        if not isinstance(configs, dict):
            raise TypeError(f"HDFSClient: configs must be a dict of Hadoop settings, got "
                            f"{type(configs).__name__}")
        self.pre_commands = [hadoop, "fs"] + [f"-D{k}={v}" for k, v in configs.items()]
        self.timeout_s = float(timeout_s)

    def _run(self, args: Sequence[str], retry_times: int = 5) -> tuple[int, str, str]:
        cmd = self.pre_commands + [str(a) for a in args]
        rc, out, err = 0, "", ""
        for attempt in range(max(int(retry_times), 0) + 1):
            try:
                proc = subprocess.run(cmd, capture_output=True, text=True,
                                      timeout=self.timeout_s)
            except subprocess.TimeoutExpired:
                raise TimeoutError(f"HDFSClient: `hadoop fs {' '.join(args)}` did not finish "
                                   f"within {self.timeout_s:g} s (timeout_s)") from None
            rc, out, err = proc.returncode, proc.stdout, proc.stderr
            if rc == 0:
                break
            _logger.warning("hadoop fs %s failed (attempt %d, exit %d): %s", " ".join(args),
                            attempt + 1, rc, err.strip())
        return rc, out, err

    # ------------------------------------------------------------------ queries
    def is_exist(self, hdfs_path: str | None = None) -> bool:
        """Whether ``hdfs_path`` exists."""
        return self._run(["-test", "-e", _path(hdfs_path, "is_exist")], retry_times=1)[0] == 0

    def is_dir(self, hdfs_path: str | None = None) -> bool:
        """Whether ``hdfs_path`` exists and is a directory."""
        path = _path(hdfs_path, "is_dir")
        return self.is_exist(path) and self._run(["-test", "-d", path], retry_times=1)[0] == 0

    def ls(self, hdfs_path: str) -> list[str]:
        """The paths in directory ``hdfs_path`` (``[]`` if it does not exist)."""
        path = _path(hdfs_path, "ls")
        if not self.is_exist(path):
            return []
        rc, out, _ = self._run(["-ls", path], retry_times=1)
        return [e[2] for e in _listing(out)] if rc == 0 else []

    def lsr(self, hdfs_path: str, only_file: bool = True, sort: bool = True) -> list[str]:
        """The paths under ``hdfs_path``, recursively; files only with ``only_file``,
        oldest first by modification time with ``sort``."""
        path = _path(hdfs_path, "lsr")
        if not self.is_exist(path):
            return []
        rc, out, _ = self._run(["-lsr", path], retry_times=1)
        if rc != 0:
            return []
        entries = [e for e in _listing(out) if not (only_file and e[0])]
        if sort:
            entries.sort(key=lambda e: e[1])
        return [e[2] for e in entries]

    # ------------------------------------------------------------------ changes
    def makedirs(self, hdfs_path: str) -> bool:
        """Create directory ``hdfs_path`` with its parents; False if it already exists."""
        path = _path(hdfs_path, "makedirs")
        if self.is_exist(path):
            _logger.info("HDFS path %s exists already", path)
            return False
        return self._run(["-mkdir", "-p", path], retry_times=1)[0] == 0

    def delete(self, hdfs_path: str) -> bool:
        """Remove a file or a directory tree; True also if nothing was there."""
        path = _path(hdfs_path, "delete")
        if not self.is_exist(path):
            return True
        cmd = ["-rmr", path] if self.is_dir(path) else ["-rm", path]
        return self._run(cmd, retry_times=0)[0] == 0

    def rename(self, hdfs_src_path: str, hdfs_dst_path: str, overwrite: bool = False) -> bool:
        """Move ``hdfs_src_path`` to ``hdfs_dst_path``; an existing destination is replaced
        with ``overwrite``, else the move is refused (False)."""
        src, dst = _path(hdfs_src_path, "rename"), _path(hdfs_dst_path, "rename")
        if not self.is_exist(src):
            _logger.error("HDFS path %s does not exist", src)
            return False
        if self.is_exist(dst):
            if not overwrite:
                _logger.error("HDFS path %s exists and overwrite=False", dst)
                return False
            self.delete(dst)
        return self._run(["-mv", src, dst], retry_times=1)[0] == 0

    def upload(self, hdfs_path: str, local_path: str, overwrite: bool = False,
               retry_times: int = 5) -> bool:
        """Put local file ``local_path`` into HDFS directory ``hdfs_path`` (created if
        missing); an existing file of that name is replaced only with ``overwrite``."""
        path = _path(hdfs_path, "upload")
        if not os.path.exists(local_path):
            raise FileNotFoundError(f"HDFSClient.upload: local path {local_path!r} does not "
                                    "exist")
        if os.path.isdir(local_path):
            _logger.error("HDFSClient.upload puts files; %s is a directory (use multi_upload)",
                          local_path)
            return False
        if not self.is_exist(path):
            self.makedirs(path)
        else:
            target = f"{path.rstrip('/')}/{os.path.basename(local_path)}"
            if self.is_exist(target):
                if not overwrite:
                    _logger.error("HDFS file %s exists and overwrite=False", target)
                    return False
                self.delete(target)
        return self._run(["-put", _local(local_path, "upload"), path], retry_times)[0] == 0

    def download(self, hdfs_path: str, local_path: str, overwrite: bool = False,
                 unzip: bool = False) -> bool:
        """Get ``hdfs_path`` into local directory ``local_path`` (created if missing); an
        existing local file of that name is replaced only with ``overwrite``. ``unzip``
        extracts a downloaded zip archive there."""
        path = _path(hdfs_path, "download")
        if not self.is_exist(path):
            _logger.error("HDFS path %s does not exist", path)
            return False
        name = os.path.basename(path.rstrip("/"))
        if name in ("", ".", ".."):
            raise ValueError(f"HDFSClient.download: HDFS path {path!r} names no file to write "
                             f"into {local_path!r}")
        local_file = os.path.join(local_path, name)
        if os.path.exists(local_file):
            if not overwrite:
                _logger.error("local path %s exists and overwrite=False", local_file)
                return False
            os.remove(local_file)
        self.make_local_dirs(local_path)
        if self._run(["-get", path, _local(local_path, "download")])[0] != 0:
            return False
        if unzip:
            import zipfile

            with zipfile.ZipFile(local_file) as z:
                z.extractall(local_path)
        return True

    @staticmethod
    def make_local_dirs(local_path: str) -> None:
        """``mkdir -p`` of a local directory."""
        os.makedirs(local_path, exist_ok=True)


def _path(p: Any, method: str) -> str:
    if not isinstance(p, str) or not p:
        raise ValueError(f"HDFSClient.{method}: an HDFS path (non-empty str) is needed, "
                         f"got {p!r}")
    # NOTE: `hadoop fs` reads an argument starting with "-" as an option (-rm -skipTrash,
    # -D...): a path must not be one
    if p.startswith("-"):
        raise ValueError(f"HDFSClient.{method}: HDFS path {p!r} starts with '-', which "
                         "`hadoop fs` would read as an option; write it as ./" + p +
                         " or with its full hdfs:// URI")
    return p


def _local(p: Any, method: str) -> str:
    """A local path as `hadoop fs` must get it: absolute (never read as an option)."""
    if not isinstance(p, (str, os.PathLike)) or not str(p):
        raise ValueError(f"HDFSClient.{method}: a local path (non-empty str) is needed, "
                         f"got {p!r}")
    return os.path.abspath(p)


def _listing(out: str) -> list[tuple[bool, datetime, str]]:
    """(is a directory, modified, path) of each entry line of ``hadoop fs -ls/-lsr``:
    ``permissions replication owner group size date time path``."""
    entries = []
    for line in out.splitlines():
        parts = line.split(None, 7)
        if len(parts) != 8:
            continue  # "Found N items" and the like
        try:
            when = datetime.strptime(f"{parts[5]} {parts[6]}", "%Y-%m-%d %H:%M")
        except ValueError:
            continue
        entries.append((parts[0].startswith("d"), when, parts[7]))
    return entries


def _parallel(fn: Any, items: list[Any], workers: int) -> list[Any]:
    # NOTE: threads, not processes: each transfer is a hadoop child process already
    with ThreadPoolExecutor(max_workers=max(1, int(workers))) as pool:
        return list(pool.map(fn, items))


def multi_download(client: HDFSClient, hdfs_path: str, local_path: str, trainer_id: int,
                   trainers: int, multi_processes: int = 5,
                   file_cnt: int | None = None) -> list[str]:
    """Download this trainer's share of the files under ``hdfs_path`` (every
    ``trainers``-th file of the sorted recursive listing, from ``trainer_id``) into
    ``local_path``, keeping their relative directories; ``multi_processes`` transfers at
    once. Returns the local paths.

    Example::

        files = fluid.contrib.multi_download(client, "/user/me/data", "./data",
                                             trainer_id=0, trainers=2)
    """
    if not isinstance(client, HDFSClient):
        raise TypeError(f"multi_download: client must be an HDFSClient, got "
                        f"{type(client).__name__}")
    if not 0 <= int(trainer_id) < int(trainers):
        raise ValueError(f"multi_download: trainer_id must be in [0, trainers={trainers}), "
                         f"got {trainer_id}")
    client.make_local_dirs(local_path)
    files = client.lsr(hdfs_path, sort=True)
    if file_cnt is not None:
        files = files[:file_cnt]
    mine = files[int(trainer_id)::int(trainers)]
    root = hdfs_path.rstrip("/")

    top = os.path.realpath(local_path)

    def local_dir(f: str) -> str:
        rel = os.path.relpath(os.path.dirname(f), root)
        where = local_path if rel == os.curdir else os.path.join(local_path, rel)
        # NOTE: the listing comes from the cluster: an entry outside hdfs_path, or with ".."
        # in it, must not write outside local_path
        target = os.path.realpath(os.path.join(where, os.path.basename(f)))
        if rel.startswith(os.pardir) or os.path.isabs(rel) or \
                not target.startswith(top + os.sep):
            raise ValueError(f"multi_download: the listing of {hdfs_path!r} holds {f!r}, which "
                             f"would be written to {target!r}, outside {local_path!r}; "
                             "nothing is downloaded")
        return where

    dirs = [local_dir(f) for f in mine]  # every target checked before anything is written
    ok = _parallel(lambda fd: client.download(fd[0], fd[1], overwrite=True),
                   list(zip(mine, dirs)), multi_processes)
    failed = [f for f, good in zip(mine, ok) if not good]
    if failed:
        raise RuntimeError(f"multi_download: {len(failed)} of {len(mine)} files failed, e.g. "
                           f"{failed[0]!r}")
    return [os.path.join(d, os.path.basename(f)) for f, d in zip(mine, dirs)]


def multi_upload(client: HDFSClient, hdfs_path: str, local_path: str,
                 multi_processes: int = 5, overwrite: bool = False, sync: bool = True) -> None:
    """Upload every file under local directory ``local_path`` to ``hdfs_path``, keeping
    relative directories, ``multi_processes`` transfers at once. Transfers are always
    waited for (``sync`` is accepted for Fluid's signature).

    Example::

        fluid.contrib.multi_upload(client, "/user/me/models", "./models", overwrite=True)
    """
    if not isinstance(client, HDFSClient):
        raise TypeError(f"multi_upload: client must be an HDFSClient, got "
                        f"{type(client).__name__}")
    files = sorted(os.path.join(d, f) for d, _, names in os.walk(local_path) for f in names)
    root = hdfs_path.rstrip("/")

    def put(f: str) -> bool:
        rel = os.path.relpath(os.path.dirname(f), local_path)
        target = root if rel == os.curdir else f"{root}/{rel}"
        return client.upload(target, f, overwrite, retry_times=5)

    ok = _parallel(put, files, multi_processes)
    failed = [f for f, good in zip(files, ok) if not good]
    if failed:
        raise RuntimeError(f"multi_upload: {len(failed)} of {len(files)} files failed, e.g. "
                           f"{failed[0]!r}")
