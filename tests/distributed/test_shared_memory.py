"""The shared area through which the collective trainers of one machine sum their gradients
(parafluid/distributed/shared_memory.py), and the communicator's use of it.

The area's tests run its trainers as threads of this process (each with its own mapping and
FIFOs, as processes have); the last ones run two trainer processes.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
import subprocess
import tempfile
import threading
import time

import numpy as np
import pytest
import torch
from overlap_worker import run_pair

from parafluid.distributed.shared_memory import (
    SharedArea,
    SharedAreaError,
    SharedPlace,
    create_shared_area,
    remove_shared_area,
)


def _areas(n: int, slot_bytes: int = 4096) -> list[SharedArea]:
    place = create_shared_area(n, slot_bytes)
    try:
        return [SharedArea(place, k, n) for k in range(n)]
    finally:
        remove_shared_area(place)


def _together(areas: list[SharedArea], fn) -> list:
    """``fn(area)`` on a thread per trainer; their results (or the first error)."""
    out: list = [None] * len(areas)
    errors: list[BaseException] = []

    def run(k: int) -> None:
        try:
            out[k] = fn(areas[k])
        except BaseException as e:  # noqa: BLE001 - handed to the test
            errors.append(e)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(len(areas))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not any(t.is_alive() for t in threads), "a trainer thread hangs"
    if errors:
        raise errors[0]
    return out


def _never() -> None:
    pass


@pytest.mark.parametrize("n, dtype", [(2, torch.float32), (3, torch.float32),
                                      (4, torch.float64)])
def test_every_trainer_gets_the_sum_in_trainer_order_with_the_same_bits(n, dtype) -> None:
    areas = _areas(n, 8192)
    gen = torch.Generator().manual_seed(n)
    xs = [torch.randn(777, generator=gen, dtype=dtype) for _ in range(n)]
    want = xs[0] + xs[1]
    for x in xs[2:]:
        want = want + x

    def one(area: SharedArea) -> torch.Tensor:
        area.slot(dtype, 777).copy_(xs[area.trainer_id])
        area.reduce(777, dtype, _never)
        return area.result(dtype, 777).clone()

    try:
        got = _together(areas, one)
        for g in got:
            assert torch.equal(g, want)
        # again, with other sizes: the slots and barriers are reused
        for size in (1, 2, 1000):
            def again(area: SharedArea, size=size) -> torch.Tensor:
                area.slot(dtype, size).fill_(area.trainer_id + 1)
                area.reduce(size, dtype, _never)
                return area.result(dtype, size).clone()
            for g in _together(areas, again):
                assert torch.equal(g, torch.full((size,), n * (n + 1) / 2, dtype=dtype))
    finally:
        for a in areas:
            a.close()


def test_the_area_is_private_and_its_names_are_gone_once_opened() -> None:
    place = create_shared_area(2, 10_000)
    try:
        assert place.slot_bytes == 12288  # whole pages
        assert stat.S_IMODE(os.stat(place.directory).st_mode) == 0o700
        assert stat.S_IMODE(os.stat(os.path.join(place.directory, "data")).st_mode) == 0o600
        areas = [SharedArea(place, k, 2) for k in range(2)]
    finally:
        remove_shared_area(place)
    assert not os.path.exists(place.directory)
    for a in areas:  # the memory stays while mapped
        assert a.capacity(torch.float32) == 3072
        with pytest.raises(ValueError, match="holds 0 to 3072 elements of torch.float32, "
                                             "asked for 3073"):
            a.slot(torch.float32, 3073)
        a.close()


def test_an_area_the_machine_cannot_hold_fails_at_once_and_leaves_nothing() -> None:
    base = "/dev/shm" if os.path.isdir("/dev/shm") else None
    before = set(os.listdir(base)) if base else set()
    with pytest.raises(OSError) as e:  # 12 TiB of slots: no machine's /dev/shm holds them
        create_shared_area(2, 1 << 42)
    assert e.value.errno in (errno.ENOSPC, errno.EFBIG)
    if base:
        assert not {p for p in set(os.listdir(base)) - before if p.startswith("parafluid-")}


def test_an_area_of_another_job_or_size_is_refused() -> None:
    place = create_shared_area(2, 4096)
    try:
        forged = SharedPlace(place.directory, "0" * 32, place.slot_bytes)
        with pytest.raises(ValueError, match="not the area trainer 0 created"):
            SharedArea(forged, 1, 2)
        with pytest.raises(ValueError, match="expected a .*-byte file"):
            SharedArea(place, 1, 3)
        with pytest.raises(FileNotFoundError):
            SharedArea(SharedPlace("/nonexistent/dir", place.token, 4096), 1, 2)
        with pytest.raises(ValueError, match="malformed"):
            SharedPlace.decode("just one line")
    finally:
        remove_shared_area(place)


def test_a_waiting_barrier_asks_its_watch_and_stops_when_told() -> None:
    a, b = _areas(2)
    calls = []

    def watch() -> None:
        calls.append(time.monotonic())
        if len(calls) >= 3:
            raise RuntimeError("deadline passed")

    try:
        start = time.monotonic()
        with pytest.raises(RuntimeError, match="deadline passed"):
            a.reduce(4, torch.float32, watch)  # trainer 1 never comes
        assert len(calls) == 3 and time.monotonic() - start < 5
    finally:
        a.close()
        b.close()


def test_a_trainer_that_gives_up_ends_its_peers_wait_at_once() -> None:
    a, b = _areas(2)
    box: dict = {}

    def wait() -> None:
        try:
            a.reduce(4, torch.float32, _never)
        except SharedAreaError as e:
            box["error"] = str(e)
            box["at"] = time.monotonic()

    try:
        t = threading.Thread(target=wait)
        t.start()
        time.sleep(0.2)
        gave_up = time.monotonic()
        b.abort()
        t.join(timeout=10)
        assert box["error"].startswith("trainer 1 gave up"), box
        assert box["at"] - gave_up < 1.0
    finally:
        a.close()
        b.close()


def test_a_forged_barrier_byte_is_refused() -> None:
    a, b = _areas(2)
    try:
        os.write(a._fifos[0], bytes([7]))  # no trainer 7 in a job of 2
        with pytest.raises(SharedAreaError, match="from no peer: 7"):
            a.reduce(4, torch.float32, _never)
    finally:
        a.close()
        b.close()


# ---------------------------------------------------------------------- two processes

def _train(tmp_path, shared: tuple[str, str]) -> list[dict]:
    """Two trainers of overlap_worker.py's nccl2 training (4 steps of the MLP), trainer t
    with FLAGS_collective_shared_memory_mb=shared[t]."""
    return run_pair(str(tmp_path), "plain", shared)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_shared_memory_and_gloo_train_to_the_same_weights_and_leave_nothing(tmp_path) -> None:
    before = set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()
    (tmp_path / "shm").mkdir()
    (tmp_path / "gloo").mkdir()
    (tmp_path / "mixed").mkdir()
    (tmp_path / "pieces").mkdir()
    shm = _train(tmp_path / "shm", ("8", "8"))
    # one page a slot: the 784 x 512 gradient goes through in 393 pieces
    pieces = _train(tmp_path / "pieces", ("0.001", "0.001"))
    gloo = _train(tmp_path / "gloo", ("0", "0"))
    # one trainer says no: neither uses it
    mixed = _train(tmp_path / "mixed", ("8", "0"))
    assert [g["shared_memory"] for g in shm] == [True, True]
    assert [g["shared_memory"] for g in pieces] == [True, True]
    assert [g["shared_memory"] for g in gloo] == [False, False]
    assert [g["shared_memory"] for g in mixed] == [False, False]
    for name, value in shm[0]["params"].items():
        # two trainers: a + b is exact in any order, so the transports agree bitwise
        assert np.array_equal(np.array(value), np.array(shm[1]["params"][name])), name
        assert np.array_equal(np.array(value), np.array(gloo[0]["params"][name])), name
        assert np.array_equal(np.array(value), np.array(mixed[0]["params"][name])), name
        assert np.array_equal(np.array(value), np.array(pieces[0]["params"][name])), name
    after = set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()
    left = {p for p in after - before if p.startswith("parafluid-shm-")}
    if left:  # another test's trainers may be setting theirs up at this moment
        time.sleep(3)
    assert not {p for p in left if os.path.exists(os.path.join("/dev/shm", p))}


def test_a_give_up_byte_of_no_peer_is_refused_and_a_peers_names_it() -> None:
    a, b = _areas(2)
    try:
        os.write(a._fifos[0], bytes([128 + 9]))  # "trainer 9 gave up", in a job of 2
        with pytest.raises(SharedAreaError, match="from no peer: 137"):
            a.reduce(4, torch.float32, _never)
        b.abort()
        with pytest.raises(SharedAreaError, match="trainer 1 gave up") as e:
            a.reduce(4, torch.float32, _never)
        assert e.value.trainer == 1
    finally:
        a.close()
        b.close()


def test_an_area_whose_creator_died_is_removed_by_the_next_one() -> None:
    base = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) \
        else tempfile.gettempdir()
    gone = subprocess.Popen(["true"])
    gone.wait()
    orphan = tempfile.mkdtemp(prefix=f"parafluid-shm-{gone.pid}-", dir=base)
    alive = tempfile.mkdtemp(prefix=f"parafluid-shm-{os.getppid()}-", dir=base)
    place = None
    try:
        with open(os.path.join(orphan, "data"), "wb") as f:
            f.write(b"left by a trainer 0 killed during the setup")
        place = create_shared_area(2, 4096)
        assert os.path.basename(place.directory).startswith(f"parafluid-shm-{os.getpid()}-")
        assert not os.path.exists(orphan)
        assert os.path.isdir(alive)  # its creator runs: it may still be setting up
    finally:
        shutil.rmtree(orphan, ignore_errors=True)
        shutil.rmtree(alive, ignore_errors=True)
        if place is not None:
            remove_shared_area(place)
