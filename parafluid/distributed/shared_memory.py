"""Dense all-reduces between the trainers of one machine, through shared memory.

Gloo moves an all-reduce's bytes through TCP on the loopback device even when every trainer
runs on the same machine: each byte is copied into the kernel and out again, in messages
that wake the transport's threads several times. On two cores that made a 2.7 MB all-reduce
cost about 3 ms of wall time. Trainers that can open the same file share its memory
instead, as NCCL's shared-memory transport does between the GPUs of one node:

- one file (in ``/dev/shm`` where it exists) holds a slot per trainer and a result slot;
- trainer ``k`` writes its buffer (its local sum, then its data check) into slot ``k``;
- a barrier; trainer ``k`` sums chunk ``k`` of every slot, in trainer order
  (``((s0 + s1) + s2) + ...``), into the result slot;
- a barrier; every trainer copies the whole result out: the same bits on every trainer.

A buffer larger than a slot goes through in pieces. The barriers are one byte written to
every peer's FIFO and one read from each; a write and a read are system calls, which order
the memory accesses around them on every architecture. A waiting trainer polls its FIFO
every 100 ms and otherwise calls the ``watch`` its caller gives (the communicator's
heartbeat check and deadline), so a dead, stopped or stuck peer is named as with gloo. A
trainer that gives up (``abort``: its communicator's failed step or collective) writes a
byte saying so into every peer's FIFO: their waits end at once, naming it.

The file and the FIFOs live in a private directory (mode 0700) that trainer 0 creates and
every trainer that opened them removes as soon as every trainer has said whether it could (or
the setup failed): nothing is left behind when a process is killed later, even trainer 0
before its removal, and no other user can reach the memory. The directory's name holds its
creator's process id: an area left by a trainer 0 killed during the setup, before anyone
removed it, is removed by the next trainer 0 of this user on the machine. A trainer that
cannot open them (on another machine, or ``/dev/shm`` full) makes every trainer keep gloo.

Example (trainer 0 creates, every trainer opens, then the names are removed)::

    where = create_shared_area(2, 8 << 20)             # trainer 0 only
    area = SharedArea(where, trainer_id, 2)           # every trainer
    remove_shared_area(where)                         # once all have opened
    area.slot(torch.float32, n).copy_(buffer)
    area.reduce(n, torch.float32, watch)
    summed = area.result(torch.float32, n)
"""

from __future__ import annotations

import mmap
import os
import re
import secrets
import select
import shutil
import stat
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

__all__ = ["SharedArea", "SharedAreaError", "SharedPlace", "create_shared_area",
           "remove_shared_area", "MAX_TRAINERS"]

MAX_TRAINERS = 127  # a barrier byte names its sender (0-126); 128 + k says trainer k gave up
_HEADER = 4096
_MAGIC = b"parafluid-shared-area-1\n"
_PAGE = 4096
_POLL_MS = 100


class SharedAreaError(RuntimeError):
    """A barrier of the shared area could not complete (a peer gave up: ``trainer``)."""

    def __init__(self, message: str, trainer: int | None = None) -> None:
        super().__init__(message)
        self.trainer = trainer


@dataclass(frozen=True)
class SharedPlace:
    """Where trainer 0 put the shared area: its directory and the token every opener checks."""

    directory: str
    token: str
    slot_bytes: int

    def encode(self) -> str:
        return f"{self.directory}\n{self.token}\n{self.slot_bytes}"

    @staticmethod
    def decode(text: str) -> SharedPlace:
        parts = text.split("\n")
        if len(parts) != 3 or not parts[2].isdigit():
            raise ValueError(f"a malformed shared-area address: {text[:200]!r}")
        return SharedPlace(parts[0], parts[1], int(parts[2]))


def _file_size(num_trainers: int, slot_bytes: int) -> int:
    return _HEADER + (num_trainers + 1) * slot_bytes


def create_shared_area(num_trainers: int, slot_bytes: int) -> SharedPlace:
    """Trainer 0: the private directory with the data file (its pages reserved, so that a
    full ``/dev/shm`` fails here with ENOSPC, not later with SIGBUS) and one FIFO per
    trainer. Raises OSError when the machine cannot provide them."""
    if not 2 <= num_trainers <= MAX_TRAINERS:
        raise ValueError(f"a shared area joins 2 to {MAX_TRAINERS} trainers, got {num_trainers}")
    slot_bytes = -(-int(slot_bytes) // _PAGE) * _PAGE
    if slot_bytes <= 0:
        raise ValueError(f"slot_bytes must be > 0, got {slot_bytes}")
    base = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    _remove_orphans(base or tempfile.gettempdir())
    # NOTE: the name says which process created it: see _remove_orphans
    directory = tempfile.mkdtemp(prefix=f"parafluid-shm-{os.getpid()}-", dir=base)  # 0700
    try:
        token = secrets.token_hex(16)
        fd = os.open(os.path.join(directory, "data"), os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.posix_fallocate(fd, 0, _file_size(num_trainers, slot_bytes))
            os.pwrite(fd, _MAGIC + f"{token} {num_trainers} {slot_bytes}\n".encode(), 0)
        finally:
            os.close(fd)
        for k in range(num_trainers):
            os.mkfifo(os.path.join(directory, f"fifo{k}"), 0o600)
    except BaseException:
        shutil.rmtree(directory, ignore_errors=True)
        raise
    return SharedPlace(directory, token, slot_bytes)


def _remove_orphans(base: str) -> None:
    """Remove the areas (of this user) whose creator is gone: a trainer 0 killed while its
    trainers set up (SIGKILL, or the launcher's SIGTERM after another trainer failed), before
    any of them could remove the names, leaves its area behind; the next job cleans up."""
    try:
        names = os.listdir(base)
    except OSError:
        return
    for name in names:
        m = re.fullmatch(r"parafluid-shm-(\d+)-\w+", name)
        if m is None:
            continue
        path = os.path.join(base, name)
        try:
            info = os.lstat(path)
            if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
                continue
            os.kill(int(m.group(1)), 0)
        except ProcessLookupError:  # its creator is gone
            shutil.rmtree(path, ignore_errors=True)
        except (OSError, OverflowError):  # alive (another user's), or not ours to judge
            continue


def remove_shared_area(place: SharedPlace) -> None:
    """Once every trainer has opened the area: remove its names (the memory stays for as long
    as a trainer has it mapped). Any trainer may; a second removal does nothing."""
    shutil.rmtree(place.directory, ignore_errors=True)


class SharedArea:
    """One trainer's view of the shared area: its slot, the result slot and the barriers.

    Not thread-safe (the communicator calls it under its lock), except ``abort`` and
    ``close``, which may come from another thread.
    """

    def __init__(self, place: SharedPlace, trainer_id: int, num_trainers: int) -> None:
        self.trainer_id, self.num_trainers = trainer_id, num_trainers
        self.slot_bytes = place.slot_bytes
        # NOTE: abort (a failing step's thread) and close may race: a FIFO closed under an
        # abort could have its number reused by another file, which would get the byte
        self._fd_lock = threading.Lock()
        self._fifos: list[int] = []
        path = os.path.join(place.directory, "data")
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW)
        try:
            info = os.fstat(fd)
            want = _file_size(num_trainers, self.slot_bytes)
            if not stat.S_ISREG(info.st_mode) or info.st_size != want:
                raise ValueError(f"{path}: expected a {want}-byte file, found {info.st_size} "
                                 "bytes")
            head = os.pread(fd, len(_MAGIC) + 80, 0)
            expect = _MAGIC + f"{place.token} {num_trainers} {self.slot_bytes}\n".encode()
            if head[:len(expect)] != expect:
                raise ValueError(f"{path}: not the area trainer 0 created (another machine's "
                                 "file, or a stale one)")
            self._map = mmap.mmap(fd, want)
        finally:
            os.close(fd)
        try:
            for k in range(num_trainers):
                # NOTE: O_RDWR opens a FIFO without waiting for the other end (Linux)
                self._fifos.append(os.open(os.path.join(place.directory, f"fifo{k}"),
                                           os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC))
        except BaseException:
            self.close()
            raise
        self._me = self._fifos[trainer_id]
        self._peers = [k for k in range(num_trainers) if k != trainer_id]
        self._poll = select.poll()
        self._poll.register(self._me, select.POLLIN)
        self._passed = 0  # barriers this trainer has passed
        self._heard = [0] * num_trainers  # barrier bytes read from each peer
        self._bytes = torch.frombuffer(self._map, dtype=torch.uint8)
        self._views: dict[torch.dtype, torch.Tensor] = {}
        self._closed = False

    # ------------------------------------------------------------------ memory
    def capacity(self, dtype: torch.dtype) -> int:
        """Elements of ``dtype`` one slot holds."""
        return self.slot_bytes // dtype.itemsize

    def _slots(self, dtype: torch.dtype) -> torch.Tensor:
        view = self._views.get(dtype)
        if view is None:
            view = self._bytes[_HEADER:].view(dtype).view(self.num_trainers + 1, -1)
            self._views[dtype] = view
        return view

    def slot(self, dtype: torch.dtype, n: int) -> torch.Tensor:
        """This trainer's slot: the first ``n`` elements, to write before ``reduce``."""
        if not 0 <= n <= self.capacity(dtype):
            raise ValueError(f"a shared-area slot holds 0 to {self.capacity(dtype)} elements "
                             f"of {dtype}, asked for {n}")
        return self._slots(dtype)[self.trainer_id, :n]

    def result(self, dtype: torch.dtype, n: int) -> torch.Tensor:
        """The sum of every trainer's slot after ``reduce``; valid until the next ``reduce``."""
        return self._slots(dtype)[self.num_trainers, :n]

    def reduce(self, n: int, dtype: torch.dtype, watch: Callable[[], None]) -> None:
        """Sum the first ``n`` elements of every trainer's slot into the result slot.

        Every trainer calls it with the same ``n`` and ``dtype`` once its slot is written;
        ``watch`` is called while a barrier waits and raises to give up.
        """
        self._barrier(watch)
        t = self.num_trainers
        lo, hi = n * self.trainer_id // t, n * (self.trainer_id + 1) // t
        if hi > lo:
            slots = self._slots(dtype)
            out = slots[t, lo:hi]
            torch.add(slots[0, lo:hi], slots[1, lo:hi], out=out)
            for k in range(2, t):
                out += slots[k, lo:hi]
        self._barrier(watch)

    # ------------------------------------------------------------------ barriers
    def _barrier(self, watch: Callable[[], None]) -> None:
        self._passed += 1
        mark = bytes([self.trainer_id])
        for k in self._peers:
            self._write(k, mark, watch)
        heard = self._heard
        while any(heard[k] < self._passed for k in self._peers):
            if not self._poll.poll(_POLL_MS):
                watch()
                continue
            try:
                data = os.read(self._me, 4096)
            except BlockingIOError:
                continue
            for b in data:
                if b >= 128 and b - 128 in self._peers:
                    raise SharedAreaError(f"trainer {b - 128} gave up (its shared-memory "
                                          "barrier says so)", b - 128)
                if b >= self.num_trainers or b == self.trainer_id:
                    raise SharedAreaError(f"a barrier byte from no peer: {b}")
                heard[b] += 1

    def _write(self, k: int, data: bytes, watch: Callable[[], None]) -> None:
        while True:
            try:
                os.write(self._fifos[k], data)
                return
            except BlockingIOError:  # the peer's FIFO is full: it stopped reading
                watch()
                time.sleep(_POLL_MS / 1000)

    def abort(self) -> None:
        """Tell every peer waiting in a barrier that this trainer gave up."""
        with self._fd_lock:
            for k in getattr(self, "_peers", []):
                if k >= len(self._fifos):
                    return
                try:
                    os.write(self._fifos[k], bytes([128 + self.trainer_id]))
                except OSError:
                    pass

    def close(self) -> None:
        if getattr(self, "_closed", False):
            return
        self._closed = True
        with self._fd_lock:
            fifos, self._fifos = self._fifos, []
            for fd in fifos:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self._views = {}
        self._bytes = None  # type: ignore[assignment]
        try:
            self._map.close()
        except (BufferError, AttributeError):
            pass  # a view is still held somewhere: the mapping goes with it
