"""``ProcessGroupCommunicator``: the ``Communicator`` of ``parafluid.parallel.comm`` across
processes, over torch.distributed (gloo for CPU devices, NCCL for CUDA devices).

One process is one trainer with ``len(devices)`` local devices; the global rank of local
device ``i`` is ``trainer_id * len(devices) + i`` and ``nranks`` counts the devices of all
trainers. Every method takes one value per *local* device and leaves its inputs untouched.

Determinism: a dense all-reduce first sums the local devices in device order
(``((x0 + x1) + x2) ...``, as ``LocalCommunicator`` does) onto local device 0, then all-reduces
that one buffer between the processes. Gloo's ring all-reduce (and NCCL's, for a fixed
topology) adds the per-process partial sums in an order fixed by the ranks and the buffer
size, never by timing, and the chunk sums are then copied, so every rank gets the same bits
and a rerun gets them again. With two processes the order does not even matter (a + b == b + a
exactly). This is one buffer of traffic per process, as a bare ``torch.distributed.all_reduce``;
gathering every device's value and summing in global rank order would reproduce the
single-process bits but multiply the traffic by the number of processes.
Row-sparse values (``SelectedRows``) are never densified: rows and values of every device are
all-gathered (variable sizes: counts first, then padded buffers) and concatenated in global
rank order.

Mismatches: while ``verify_collectives`` is on (the default, on every step), every collective
is preceded by an all-reduce (MAX) of 16 bytes: a hash of its signature (the executor's step,
the collective's sequence number, kind, the variables it carries, dtype, shape, root) and its
negation. That all-reduce has the same size on every trainer, so it always pairs up; when the
hashes differ, every trainer reads the others' signatures through the store and raises
``CollectiveMismatchError`` (a ValueError) naming each one's. gloo itself would hand one rank
garbage and abort the other (different sizes), or silently sum two different gradients (the
same size, paired out of order). The check costs one small round trip per collective.
Where the caller vouches that the sizes agree (``sizes_agreed``: the ParallelExecutor's
all-reduces of parameter gradients, whose shapes its first-step program check compared), a
dense float all-reduce carries the check in its own data instead
(``data_check.py``): no second collective. Those checked all-reduces go through the shared
memory of the trainers when all of them run on this machine (``shared_memory.py``: each
trainer sums one chunk of every trainer's slot, in trainer order, and every trainer copies
the same result; done where it is issued), else through gloo. With ``defer`` set, a dense
all-reduce over gloo is only started; ``wait_pending()`` waits for the started ones in order
(the plan's barrier before the updates), so that the transport runs while the backward pass
goes on.

Deadlines and dead peers: every collective fails within ``deadline_s`` (default
``FLAGS_rpc_deadline``, 180 s). Each trainer's heartbeat thread (``health.py``) watches the
others through the store; every wait (the process group's setup, each collective, the
program check) polls it and gives up within 1.5 to 3 seconds when a peer died (its beat
stopped), left (closed its communicator) or gave up (``abort``, after a failed step). A peer
that dies also resets its connections, which the transport notices at once. The transport's
own timeout covers a peer that is alive but never calls. Every live process then raises
``CollectiveError`` naming the collective, its sequence number and the trainer that died,
left, gave up (with its reason) or is stuck. After an error the communicator refuses further
collectives. On NCCL, a timed-out collective is also caught by torch's watchdog, which ends
the process (the launcher then stops the job and names the rank).

Example (two processes, each runs)::

    comm = init_collective(["127.0.0.1:6170", "127.0.0.1:6171"], trainer_id,
                           [torch.device("cpu")], deadline_s=60)
    total, = comm.all_reduce([torch.ones(3)])       # tensor([2., 2., 2.]) on both
    comm.close()
"""

from __future__ import annotations

import atexit
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

import torch
import torch.distributed as dist

from ..flags import flag
from ..scope import SelectedRows
from .data_check import check_pairs, check_tail, signature_hash, tail_agrees, tail_matches
from .deadline import rpc_deadline_seconds
from .endpoints import parse_endpoints
from .rendezvous import Rendezvous, rendezvous
from .shared_memory import (
    MAX_TRAINERS,
    SharedArea,
    SharedAreaError,
    SharedPlace,
    create_shared_area,
    remove_shared_area,
)
from .transport import (
    HEADER_SIZE,
    broadcast_options,
    decode_header,
    encode_header,
    first_line,
    make_process_group,
)

__all__ = ["CollectiveError", "CollectiveMismatchError", "ProcessGroupCommunicator",
           "init_collective", "get_collective", "local_devices", "close_all"]

Value = Any  # a torch.Tensor or a SelectedRows


class CollectiveError(RuntimeError):
    """A collective could not complete: a peer died, is stuck, or the transport failed."""


class CollectiveMismatchError(ValueError):
    """The trainers issued different collectives (kind, dtype, shape or root) at one point."""


class _PeerGone(Exception):
    """A peer died, left or gave up while this trainer waited for it (the clause says who)."""


_POLL_S = 0.1  # how often a wait looks at the peers' heartbeats
_GRACE_S = 1.0  # a collective still finishing when its peer is found gone


def local_devices(use_cuda: bool) -> list[torch.device]:
    """The devices one trainer runs, as the ParallelExecutor finds them.

    CPU: ``CPU_NUM`` devices (unset: 1). CUDA: ``FLAGS_selected_gpus`` (what the launcher sets,
    one GPU per process) or every visible GPU.
    """
    if not use_cuda:
        from ..place import cpu_device_count

        return [torch.device("cpu")] * cpu_device_count()
    if not torch.cuda.is_available():
        raise RuntimeError("the collective mode on CUDA needs a GPU, and torch sees none")
    raw = flag("FLAGS_selected_gpus")
    if raw:
        ids = [int(x) for x in raw.split(",")]
    else:
        ids = list(range(torch.cuda.device_count()))
    return [torch.device("cuda", i) for i in ids]


class ProcessGroupCommunicator:
    """All devices of all trainers. See the module docstring for order and deadlines.

    Args:
        rdv: the outcome of ``rendezvous`` (its store becomes this communicator's).
        devices: this trainer's devices (all CPU, or CUDA devices).
        deadline_s: seconds any collective may take (default ``FLAGS_rpc_deadline``, 180 s).
    """

    def __init__(self, rdv: Rendezvous, devices: Sequence[torch.device],
                 deadline_s: float | None = None) -> None:
        if not devices:
            raise ValueError("ProcessGroupCommunicator needs at least one local device")
        self.devices = [torch.device(d) for d in devices]
        kinds = {d.type for d in self.devices}
        if len(kinds) != 1 or kinds - {"cpu", "cuda"}:
            raise ValueError(f"ProcessGroupCommunicator: devices must be all CPU or all CUDA, "
                             f"got {self.devices}")
        self.backend = "nccl" if "cuda" in kinds else "gloo"
        if rdv.backend != self.backend or rdv.local_devices != len(self.devices):
            raise ValueError(f"ProcessGroupCommunicator: the rendezvous was for "
                             f"{rdv.local_devices} {rdv.backend} devices, got {self.devices}")
        self.endpoints = list(rdv.endpoints)
        self.trainer_id = rdv.trainer_id
        self.num_trainers = rdv.num_trainers
        self.nranks = self.num_trainers * len(self.devices)
        self.rank_offset = self.trainer_id * len(self.devices)
        self.deadline_s = rpc_deadline_seconds() if deadline_s is None else float(deadline_s)
        if not self.deadline_s > 0:
            raise ValueError(f"deadline_s must be > 0, got {deadline_s!r}")
        # NOTE: gloo answers collectives of different sizes on two ranks with silent garbage
        # on one and an abort on the other, and two collectives of the same size paired out
        # of order with silently wrong sums. So every collective is preceded by a 16-byte
        # all-reduce (MAX) of a hash of its signature (step, sequence number, kind, dtype,
        # shape, root): the same size on every trainer, it always pairs up, and a difference
        # raises CollectiveMismatchError on every trainer.
        self.verify_collectives = True
        self.step = 0  # the executor's step, part of every signature
        # NOTE: where the caller vouches that every trainer's buffers have the same sizes (the
        # ParallelExecutor's all-reduces of parameter gradients, whose shapes its first-step
        # program check compared), a dense all-reduce carries its signature check in its own
        # data (data_check.py): no second collective.
        self.sizes_agreed = False
        # not None: the next dense all-reduces only start (the value is the caller's tag for
        # them); their results are valid after wait_pending() (the plan's barrier)
        self.defer: Any = None
        self._pending: list[tuple] = []
        self._rdv = rdv
        self._store = rdv.store
        self._calls = rdv.calls
        self._lock = threading.Lock()
        self._seq = 0
        self._checks: dict[str, int] = {}
        self._broken: str | None = None
        self._closed = False
        self._same_device = len({str(d) for d in self.devices}) == 1
        self._heartbeat = rdv.heartbeat
        self._interval = self._heartbeat.interval
        # NOTE: a dead peer is found by its heartbeat within seconds; the transport's own
        # timeout is for a live peer that never calls, with a moment left to say so.
        self._transport_s = max(self.deadline_s - 0.25, 0.9 * self.deadline_s)
        self._wire = self.devices[0] if self.backend == "nccl" else torch.device("cpu")
        self._pg = self._await(
            lambda: make_process_group(self.backend, rdv, self._wire, self._transport_s),
            "setting up the process group", self._transport_s)
        # the trainers of one machine sum their checked dense all-reduces in shared memory
        self._shared: SharedArea | None = None
        if self.backend == "gloo" and 1 < self.num_trainers <= MAX_TRAINERS:
            self._shared = self._share_memory()

    @property
    def shared_memory(self) -> bool:
        """Whether the checked dense all-reduces go through shared memory (every trainer on
        this machine) rather than gloo."""
        return self._shared is not None

    def _share_memory(self) -> SharedArea | None:
        """Trainer 0 creates the shared area; every trainer opens it and says whether it
        could; all use it, or none does (a trainer whose ``FLAGS_collective_shared_memory_mb``
        is 0 says no; trainer 0's value sizes the slots). Then every trainer that opened it
        removes its names (trainer 0 may die before doing so)."""
        slot = int(flag("FLAGS_collective_shared_memory_mb") * (1 << 20))
        what = "sharing memory with the trainers of this machine"
        place: SharedPlace | None = None
        area: SharedArea | None = None
        try:
            if self.trainer_id == 0:
                try:
                    place = create_shared_area(self.num_trainers, slot) if slot > 0 else None
                    note = place.encode() if place is not None else "-turned off"
                except OSError as e:
                    note = f"-{first_line(e)}"
                self._ask(lambda: self._store.set("shm/place", note), what)
            else:
                note = self._poll_keys(["shm/place"], what)[0]
            if note.startswith("-"):
                return None
            status = "ok" if slot > 0 else "-turned off"
            try:
                if slot > 0:
                    opened = SharedPlace.decode(note)
                    area = SharedArea(opened, self.trainer_id, self.num_trainers)
                    # NOTE: the token matched: the directory is the area's, safe to remove
                    place = place or opened
            except (OSError, ValueError) as e:
                status = f"-{first_line(e)}"
            self._ask(lambda: self._store.set(f"shm/{self.trainer_id}", status), what)
            said = self._poll_keys([f"shm/{k}" for k in range(self.num_trainers)], what)
        except _PeerGone as e:
            if area is not None:
                area.close()
            raise CollectiveError(f"{what} failed on {self.describe(self.trainer_id)}: "
                                  f"{e}") from e
        except BaseException:
            if area is not None:
                area.close()
            raise
        finally:
            if place is not None:
                remove_shared_area(place)
        if area is not None and any(s != "ok" for s in said):
            area.close()
            return None
        return area

    def _host_gone(self) -> None:
        """Raise when the store's host (trainer 0) is gone: a store call to it would wait
        for the whole transport timeout."""
        trouble = self._heartbeat.trouble([])
        if trouble is not None:
            raise _PeerGone(trouble)

    def _ask(self, fn: Callable[[], Any], what: str) -> Any:
        """A store call bounded by the transport's timeout that gives up within seconds
        when the store's host dies."""
        return self._calls(fn, self._transport_s, what, watch=self._host_gone)

    def _watch(self, start: float) -> Callable[[], None]:
        """What a shared-memory barrier calls while it waits: raise when a peer is gone or
        the transport's timeout has passed."""
        def watch() -> None:
            trouble = self._heartbeat.trouble()
            if trouble is not None:
                raise _PeerGone(trouble)
            if time.monotonic() - start > self._transport_s:
                raise RuntimeError(f"no answer in shared memory within {self._transport_s:.1f} s")
        return watch

    # ------------------------------------------------------------------ plumbing
    def describe(self, trainer: int) -> str:
        n = len(self.devices)
        ranks = f"rank {trainer * n}" if n == 1 else f"ranks {trainer * n}-{trainer * n + n - 1}"
        return f"trainer {trainer} ({self.endpoints[trainer]}, {ranks})"

    @property
    def broken(self) -> str | None:
        """Why this communicator refuses collectives (a failure, ``abort``), or None."""
        return self._broken

    def _check(self, values: Sequence[Value], what: str) -> None:
        if len(values) != len(self.devices):
            raise ValueError(f"{what}: expected one value per local device "
                             f"({len(self.devices)}), got {len(values)}")

    def _await(self, fn: Callable[[], Any], what: str, timeout: float) -> Any:
        """``fn()`` on a thread of its own, watching the peers' heartbeats meanwhile: a peer that
        dies makes this raise CollectiveError naming it within seconds."""
        box: dict[str, Any] = {}
        done = threading.Event()

        def run() -> None:
            try:
                box["value"] = fn()
            except BaseException as e:  # noqa: BLE001 - handed to the caller
                box["error"] = e
            done.set()

        threading.Thread(target=run, daemon=True, name=f"parafluid-{what}").start()
        start = time.monotonic()
        while not done.wait(_POLL_S):
            trouble = self._heartbeat.trouble()
            late = time.monotonic() - start > timeout
            if trouble is not None or late:
                raise CollectiveError(
                    f"{what} failed on {self.describe(self.trainer_id)} after "
                    f"{time.monotonic() - start:.1f} s (deadline {self.deadline_s:g} s): "
                    + (trouble or "no answer from the transport"))
        if "error" in box:
            e = box["error"]
            if isinstance(e, (RuntimeError, OSError)):
                # NOTE: a peer that died during the setup closes its connections before its
                # beat goes stale: wait for the beat (stale_s plus two beats) to name it
                raise CollectiveError(f"{what} failed on {self.describe(self.trainer_id)}: "
                                      f"{self._heartbeat.describe(0)}. Transport: "
                                      f"{first_line(e)}") from e
            raise e
        return box["value"]

    def _run(self, what: str, body: Callable[[], Any], signature: str | None = None) -> Any:
        """Run ``body`` (which issues the transport calls) as collective number ``seq``.

        With ``verify_collectives``, every trainer's ``signature`` (kind, dtype, shape, root)
        is compared first.
        """
        with self._lock:
            seq, start = self._enter(what)
            try:
                if signature is not None and self.verify_collectives:
                    self._verify(seq, what, signature)
                return body()
            except (ValueError, TypeError, RuntimeError, _PeerGone) as e:
                self._raise_failure(e, what, seq, start)

    def _enter(self, what: str) -> tuple[int, float]:
        """Number the next collective (``self._lock`` held); refuse it on a closed or broken
        communicator."""
        if self._closed:
            raise CollectiveError(f"{what}: the communicator of trainer {self.trainer_id} "
                                  "is closed")
        if self._broken is not None:
            raise CollectiveError(f"{what}: this communicator failed earlier and cannot "
                                  f"be used again ({self._broken})")
        self._seq += 1
        self._heartbeat.seq = self._seq
        return self._seq, time.monotonic()

    def _raise_failure(self, e: BaseException, what: str, seq: int, start: float) -> NoReturn:
        """Raise what ``_failure`` makes of ``e`` (``e`` itself, or a CollectiveError from
        it)."""
        err = self._failure(e, what, seq, start)
        if err is e:
            raise e
        raise err from e

    def _failure(self, e: BaseException, what: str, seq: int, start: float) -> BaseException:
        """The error to raise for collective ``seq`` failing with ``e``; a transport failure
        or a mismatch breaks the communicator."""
        if isinstance(e, (ValueError, TypeError)):
            if isinstance(e, CollectiveMismatchError):
                self._broken = str(e)
            return e
        took = time.monotonic() - start
        quitter = e.trainer if isinstance(e, SharedAreaError) else None
        if isinstance(e, _PeerGone):
            who = str(e)
        elif quitter is not None:
            # a peer said in shared memory that it gave up: its reason, if it published one
            # (abort); else its collective failed, most likely for a peer that died, which
            # this trainer's heartbeat names within a beat or two: that one is the news
            self._read_failures()
            who = self._heartbeat.trouble([quitter])
            end = time.monotonic() + max(0.0, min(self._heartbeat.stale_s + 2 * self._interval,
                                                  self.deadline_s - took))
            while who is None and time.monotonic() < end:
                who = self._heartbeat.trouble([k for k in range(self.num_trainers)
                                               if k != quitter])
                time.sleep(0.05)
            who = who or f"{self._heartbeat.who(quitter)} gave up (a collective failed there)"
        else:
            self._read_failures()
            who = self._heartbeat.describe(
                seq, wait_s=max(0.0, min(self._heartbeat.stale_s + 2 * self._interval,
                                         self.deadline_s - took)))
        detail = "" if isinstance(e, _PeerGone) or quitter is not None else \
            f". Transport: {first_line(e)}"
        self._broken = (f"{what} (collective #{seq}) failed on "
                        f"{self.describe(self.trainer_id)} after "
                        f"{time.monotonic() - start:.1f} s (deadline "
                        f"{self.deadline_s:g} s): {who}{detail}")
        if self._shared is not None:
            # NOTE: a peer that reaches this collective late (it was stopped, or slow) would
            # wait in a barrier for this trainer until its deadline: tell it at once
            self._shared.abort()
        return CollectiveError(self._broken)

    def _verify(self, seq: int, what: str, signature: str) -> None:
        tag = f"{self.step}\n{signature}"
        h = signature_hash(seq, tag)
        head = torch.tensor([h, -h], dtype=torch.int64, device=self._wire)
        opts = dist.AllreduceOptions()
        opts.reduceOp = dist.ReduceOp.MAX
        self._wait(self._pg.allreduce([head], opts))
        top, neg_low = head.tolist()
        if top == h and -neg_low == h:
            return
        self._mismatch(seq, what, tag)

    def _mismatch(self, seq: int, what: str, tag: str) -> None:
        """The trainers' signatures of collective ``seq`` differ: every one of them gets here;
        raise CollectiveMismatchError saying how, read through the store."""
        base = f"sig/{seq}/"
        self._ask(lambda: self._store.set(base + str(self.trainer_id), tag),
                  "publishing the signature")
        tags = self._poll_keys([base + str(k) for k in range(self.num_trainers)], what)
        steps = {t.split("\n", 1)[0] for t in tags}
        shown = [(t.split("\n", 1) + [""])[:2] for t in tags]
        raise CollectiveMismatchError(
            f"{what} (collective #{seq}): the trainers issue different collectives (they "
            "run different programs or settings, or one of them went on after a failed "
            "step): " + "; ".join(
                f"{self.describe(k)}: {sig}" + (f" (step {st})" if len(steps) > 1 else "")
                for k, (st, sig) in enumerate(shown)))

    def _poll_keys(self, keys: list[str], what: str) -> list[str]:
        """Every trainer's value of ``keys`` (one each), watching their heartbeats."""
        end = time.monotonic() + self._transport_s
        pending = set(range(len(keys)))
        while pending:
            order = sorted(pending)
            asked = [keys[k] for k in order]
            pending = {k for k, p in zip(order, self._ask(
                lambda asked=asked: self._store.present(asked), what)) if not p}
            if not pending:
                break
            trouble = self._heartbeat.trouble(sorted(pending))
            if trouble is not None:
                raise _PeerGone(trouble)
            if time.monotonic() >= end:
                raise CollectiveError(
                    f"{what}: after {self._transport_s:.1f} s nothing from "
                    + ", ".join(self.describe(k) for k in sorted(pending)))
            time.sleep(0.01)
        raws = self._ask(lambda: self._store.multi_get(keys), what)
        return [r.decode("utf-8", "replace") for r in raws]

    def _read_failures(self) -> None:
        """A collective broke: did a peer give up (``abort``)? Read it now, before the store
        host, which may be that peer, is gone."""
        keys = [f"failed/{k}" for k in range(self.num_trainers) if k != self.trainer_id]
        try:
            def read() -> dict[int, bytes]:
                there = [key for key, p in zip(keys, self._store.present(keys)) if p]
                got = self._store.multi_get(there) if there else []
                return {int(key.split("/")[1]): v for key, v in zip(there, got)}

            found = self._calls(read, 1.0, "reading the peers' failures")
        except Exception:  # noqa: BLE001 - the store host is gone: the heartbeat says so
            return
        self._heartbeat.note_failed({k: v[:2000].decode("utf-8", "replace")
                                     for k, v in found.items()})

    def _wait(self, work: Any) -> None:
        if not work.is_completed():
            done = threading.Event()
            work.get_future().add_done_callback(lambda _: done.set())
            while not done.wait(_POLL_S):
                trouble = self._heartbeat.trouble()
                # NOTE: a peer that just finished may close before this side saw the last
                # bytes arrive: a moment's grace before giving the collective up
                if trouble is not None and not done.wait(_GRACE_S):
                    raise _PeerGone(trouble)
        work.wait()

    def _local_sum(self, values: Sequence[torch.Tensor], device: torch.device) -> torch.Tensor:
        """A fresh contiguous buffer holding the local sum in device order (inputs untouched)."""
        if len(values) == 1:
            return values[0].to(device, copy=True).contiguous()
        acc = values[0].to(device) + values[1].to(device)
        for v in values[2:]:
            acc += v.to(device)
        return acc.contiguous()

    def _local_sum_into(self, values: Sequence[torch.Tensor], extra: int
                        ) -> tuple[torch.Tensor, torch.Tensor]:
        """(a flat buffer of the local sum followed by ``extra`` free elements, the sum as a
        view of it): the same bits as ``_local_sum``, with room for the data check."""
        v0 = values[0]
        flat = torch.empty(v0.numel() + extra, dtype=v0.dtype, device=self._wire)
        head = flat[:v0.numel()].view(v0.shape)
        self._sum_into(head, values)
        return flat, head

    def _sum_into(self, out: torch.Tensor, values: Sequence[torch.Tensor]) -> None:
        """``out`` = the sum of ``values`` in device order (``((x0 + x1) + x2) ...``)."""
        if len(values) == 1:
            out.copy_(values[0])
            return
        torch.add(values[0].to(self._wire), values[1].to(self._wire), out=out)
        for v in values[2:]:
            out += v.to(self._wire)

    def _dense_all_reduce(self, values: Sequence[torch.Tensor], signature: str
                          ) -> torch.Tensor:
        """All-reduce the local sum of ``values``: checked in its data where the sizes agree,
        only started while ``defer`` is set (the result is valid after ``wait_pending``)."""
        n = self.num_trainers
        pairs = check_pairs(values[0].dtype, n) \
            if self.verify_collectives and self.sizes_agreed else 0
        if pairs and self._shared is not None:
            return self._shared_all_reduce(values, signature, pairs)
        flat, head = self._local_sum_into(values, 2 * pairs)
        with self._lock:
            seq, start = self._enter("all_reduce")
            tag = f"{self.step}\n{signature}"
            try:
                if self.verify_collectives and not pairs:
                    self._verify(seq, "all_reduce", signature)
                if pairs:
                    flat[head.numel():] = torch.tensor(
                        check_tail(signature_hash(seq, tag), pairs, flat.dtype, n),
                        dtype=flat.dtype)
                work = self._pg.allreduce([flat])
                item = (self.defer, seq, start, work, flat, head.numel() if pairs else -1, tag)
                if self.defer is not None:
                    self._pending.append(item)
                else:
                    self._finish(item)
            except (ValueError, TypeError, RuntimeError, _PeerGone) as e:
                self._raise_failure(e, "all_reduce", seq, start)
        return head

    def _shared_all_reduce(self, values: Sequence[torch.Tensor], signature: str, pairs: int
                           ) -> torch.Tensor:
        """``_dense_all_reduce`` through the shared area: each piece of the local sum goes
        into this trainer's slot with the piece's data check after it; the check of the sum
        must be n times this trainer's own. Done when it returns (even under ``defer``)."""
        area, n = self._shared, self.num_trainers
        assert area is not None
        v0 = values[0]
        dtype, total = v0.dtype, v0.numel()
        flats = [v.reshape(-1) for v in values]
        out = torch.empty(v0.shape, dtype=dtype, device=self._wire)
        dest = out.view(-1)
        per = area.capacity(dtype) - 2 * pairs
        with self._lock:
            seq, start = self._enter("all_reduce")
            tag = f"{self.step}\n{signature}"
            watch = self._watch(start)
            try:
                for j, lo in enumerate(range(0, total, per)):
                    hi = min(total, lo + per)
                    m = hi - lo
                    slot = area.slot(dtype, m + 2 * pairs)
                    self._sum_into(slot[:m], [f[lo:hi] for f in flats])
                    own = check_tail(signature_hash(seq, f"{tag}\npiece {j}"), pairs, dtype, n)
                    slot[m:] = torch.tensor(own, dtype=dtype)
                    area.reduce(m + 2 * pairs, dtype, watch)
                    summed = area.result(dtype, m + 2 * pairs)
                    if not tail_matches(summed[m:].tolist(), own, n):
                        self._mismatch(seq, "all_reduce", tag)
                    dest[lo:hi].copy_(summed[:m])
            except (ValueError, TypeError, RuntimeError, _PeerGone) as e:
                self._raise_failure(e, "all_reduce", seq, start)
        return out

    def _finish(self, item: tuple) -> None:
        """Wait for a started all-reduce and read its data check."""
        _, seq, _, work, flat, n, tag = item
        self._wait(work)
        if n >= 0 and not tail_agrees(flat[n:].tolist(), self.num_trainers):
            self._mismatch(seq, "all_reduce", tag)

    def wait_pending(self) -> None:
        """Wait for every all-reduce started while ``defer`` was set, in the order they
        started. A failure raises as the collective would have (its ``tag`` attribute is the
        ``defer`` value it started under), and drops the others."""
        with self._lock:
            pending, self._pending = self._pending, []
            for item in pending:
                try:
                    self._finish(item)
                except (ValueError, TypeError, RuntimeError, _PeerGone) as e:
                    err = self._failure(e, "all_reduce", item[1], item[2])
                    err.tag = item[0]  # type: ignore[attr-defined]
                    if err is e:
                        raise
                    raise err from e

    def in_flight(self) -> list[Any]:
        """The futures of the all-reduces started while ``defer`` was set and not yet waited
        for, in start order (the profiler times them)."""
        return [item[3].get_future() for item in self._pending]

    def drop_pending(self) -> None:
        """Forget the started all-reduces (a failed step: nobody reads their results)."""
        self._pending = []

    def _spread(self, value: Value) -> list[Value]:
        if self._same_device:
            return [value] * len(self.devices)
        return [value if value.device == d else value.to(d) for d in self.devices]

    def _owner(self, root: int, what: str) -> tuple[int, int]:
        if not isinstance(root, int) or not 0 <= root < self.nranks:
            raise ValueError(f"{what}: root must be a global device index in "
                             f"0..{self.nranks - 1}, got {root!r}")
        return divmod(root, len(self.devices))

    # ------------------------------------------------------------------ collectives
    def all_reduce(self, values: Sequence[Value], donate: bool = False, name: str = ""
                   ) -> list[Value]:
        """Every local device gets the sum over all devices of all trainers.

        ``donate=True`` lets a single local device's dense input be summed in place (the
        caller promises that nothing reads it afterwards), saving one copy of the buffer;
        with several local devices the local sum is a fresh buffer anyway. ``name`` (here
        and in the other collectives): the variables carried, part of the signature the
        trainers compare.
        """
        self._check(values, "all_reduce")
        if isinstance(values[0], SelectedRows):
            return self._spread(self._gather_rows(values, "all_reduce", name))
        _same_kind(values, "all_reduce")
        v = values[0]
        signature = f"all_reduce{_of(name)} {v.dtype} {list(v.shape)}"
        if self.num_trainers > 1 and v.numel() and (self.sizes_agreed or self.defer is not None):
            return self._spread(self._dense_all_reduce(values, signature).to(self.devices[0]))
        if donate and len(values) == 1 and v.device == self._wire and v.is_contiguous():
            buf = v
        else:
            buf = self._local_sum(values, self._wire)
        if self.num_trainers > 1 and buf.numel():
            self._run("all_reduce", lambda: self._wait(self._pg.allreduce([buf])), signature)
        return self._spread(buf.to(self.devices[0]))

    def reduce(self, values: Sequence[Value], root: int, name: str = "") -> Value | None:
        """The sum on global device ``root``; None on the trainers that do not own it."""
        self._check(values, "reduce")
        owner, local_root = self._owner(root, "reduce")
        mine = owner == self.trainer_id
        if isinstance(values[0], SelectedRows):
            rows = self._gather_rows(values, "reduce", name)
            return rows.to(self.devices[local_root]) if mine else None
        _same_kind(values, "reduce")
        buf = self._local_sum(values, self._wire)
        if self.num_trainers > 1 and buf.numel():
            opts = dist.ReduceOptions()
            opts.rootRank = owner
            opts.rootTensor = 0
            opts.reduceOp = dist.ReduceOp.SUM
            self._run(f"reduce to rank {root}",
                      lambda: self._wait(self._pg.reduce([buf], opts)),
                      f"reduce{_of(name)} {buf.dtype} {list(buf.shape)} to rank {root}")
        return buf.to(self.devices[local_root]) if mine else None

    def broadcast(self, value: Value | None, root: int, name: str = "") -> list[Value]:
        """``value`` of global device ``root`` to every local device (fresh copies).

        On the trainer owning ``root``, ``value`` is that device's value (and that device's
        entry of the result is ``value`` itself); elsewhere it is None.
        """
        owner, local_root = self._owner(root, "broadcast")
        mine = owner == self.trainer_id
        if mine and value is None:
            raise ValueError(f"broadcast: trainer {self.trainer_id} owns root {root} but "
                             "passed no value")
        if self.num_trainers == 1:
            return self._local_broadcast(value, local_root)
        what = f"broadcast from rank {root}"

        def body() -> Value:
            head = encode_header(value, self._wire) if mine else \
                torch.zeros(HEADER_SIZE, dtype=torch.int64, device=self._wire)
            self._wait(self._pg.broadcast([head], broadcast_options(owner)))
            sparse, dtype, shape, height = decode_header(head.cpu(), self.describe(owner))
            t = value.value if sparse and mine else value
            payload = t.to(self._wire).contiguous() if mine else \
                torch.empty(shape, dtype=dtype, device=self._wire)
            rows = None
            if sparse:
                rows = value.rows.to(self._wire, torch.int64).contiguous() if mine else \
                    torch.empty(shape[0], dtype=torch.int64, device=self._wire)
                if shape[0]:
                    self._wait(self._pg.broadcast([rows], broadcast_options(owner)))
            if payload.numel():
                self._wait(self._pg.broadcast([payload], broadcast_options(owner)))
            return SelectedRows(rows, payload, height) if sparse else payload

        got = self._run(what, body, f"broadcast{_of(name)} from rank {root}")
        if mine:
            return self._local_broadcast(value, local_root)
        if isinstance(got, SelectedRows):
            return self._spread(got.to(self.devices[0]))
        out, first = [], got.to(self.devices[0])
        for i, d in enumerate(self.devices):
            # A broadcast parameter is updated in place later on each device: one copy each.
            out.append(first if i == 0 else first.to(d, copy=True))
        return out

    def _local_broadcast(self, value: Value, root: int) -> list[Value]:
        out = []
        for i, d in enumerate(self.devices):
            if i == root:
                out.append(value)
            elif isinstance(value, SelectedRows):
                out.append(value if self._same_device else value.to(d))
            else:
                out.append(value.to(d, copy=True))
        return out

    def _gather_rows(self, values: Sequence[Value], what: str, name: str = "") -> SelectedRows:
        """Rows and values of every device of every trainer, in global rank order."""
        if not all(isinstance(v, SelectedRows) for v in values):
            raise TypeError(f"{what}: cannot combine sparse (SelectedRows) and dense values: "
                            "every device must produce the same kind")
        local = SelectedRows(torch.cat([v.rows.to(self._wire, torch.int64) for v in values]),
                             torch.cat([v.value.to(self._wire) for v in values]),
                             values[0].height)
        if self.num_trainers == 1:
            return local
        n = self.num_trainers

        def body() -> SelectedRows:
            head = encode_header(local, self._wire)
            heads = [torch.empty_like(head) for _ in range(n)]
            self._wait(self._pg.allgather([heads], [head]))
            metas = [decode_header(h.cpu(), self.describe(k)) for k, h in enumerate(heads)]
            mine = metas[self.trainer_id]
            bad = [self.describe(k) + f": {m[1]} rows of shape {m[2]}, height {m[3]}"
                   for k, m in enumerate(metas)
                   if not m[0] or m[1] != mine[1] or m[2][1:] != mine[2][1:] or m[3] != mine[3]]
            if bad:
                raise ValueError(f"{what}: row-sparse values differ across trainers (this one "
                                 f"has {mine[1]} rows of shape {mine[2]}, height {mine[3]}): "
                                 + "; ".join(bad))
            counts = [m[2][0] for m in metas]
            most = max(counts)
            if most == 0:
                return local
            rows = torch.zeros(most, dtype=torch.int64, device=self._wire)
            rows[:counts[self.trainer_id]] = local.rows
            vals = torch.zeros((most, *mine[2][1:]), dtype=mine[1], device=self._wire)
            vals[:counts[self.trainer_id]] = local.value
            all_rows = [torch.empty_like(rows) for _ in range(n)]
            all_vals = [torch.empty_like(vals) for _ in range(n)]
            self._wait(self._pg.allgather([all_rows], [rows]))
            self._wait(self._pg.allgather([all_vals], [vals]))
            return SelectedRows(torch.cat([r[:c] for r, c in zip(all_rows, counts)]),
                                torch.cat([v[:c] for v, c in zip(all_vals, counts)]),
                                local.height)

        return self._run(what, body, f"{what}{_of(name)} of rows").to(self.devices[0])

    # ------------------------------------------------------------------ checks and lifetime
    def check_consistent(self, what: str, fingerprint: str) -> None:
        """Raise ValueError naming the trainers whose ``fingerprint`` of ``what`` differs.

        Every trainer must call it with the same ``what`` (e.g. at the first step with the
        program's parameter names and shapes); a trainer that dies or gives up first is
        named within seconds, one that never calls within the deadline.
        """
        if self.num_trainers == 1:
            return
        prints = self.exchange(what, fingerprint, f"check_consistent({what!r})")
        ref = prints[0]
        differ = [k for k, p in enumerate(prints) if p != ref]
        if differ:
            lines = [f"{self.describe(k)} differs from {self.describe(0)}: "
                     f"{_first_difference(ref, prints[k])}" for k in differ]
            raise ValueError(f"{what} differs across trainers (every trainer must run the same "
                             "program with the same settings): " + "; ".join(lines))

    def exchange(self, what: str, text: str, label: str = "") -> list[str]:
        """Every trainer's ``text`` about ``what``, in trainer order (through the store, not
        the transport: the texts may differ in size).

        Every trainer must call it with the same ``what`` as often; a trainer that dies or
        gives up first is named within seconds, one that never calls within the deadline.
        """
        if self.num_trainers == 1:
            return [text]
        n = self._checks[what] = self._checks.get(what, 0) + 1
        base = f"check/{what}/{n}/"
        label = label or f"exchange({what!r})"

        def body() -> list[str]:
            self._ask(lambda: self._store.set(base + str(self.trainer_id), text), label)
            return self._poll_keys([base + str(k) for k in range(self.num_trainers)], label)

        return self._run(label, body)

    def abort(self, reason: str) -> None:
        """Give up: tell the other trainers why and drop the transport, so that every one of
        them fails its next (or current) collective at once, naming this trainer and
        ``reason``; this communicator refuses every collective from now on.

        The ParallelExecutor calls it when a step fails on this trainer: the others cannot
        finish that step, and a retry here would pair its collectives with theirs of another
        step.
        """
        if self._broken is None:
            self._broken = f"{self.describe(self.trainer_id)} gave up: {reason}"
        self._pending = []
        try:
            self._calls(lambda: self._store.set(f"failed/{self.trainer_id}", reason[:2000]),
                        min(self._transport_s, 5.0), "announcing the failure",
                        watch=self._host_gone)
        except Exception:  # noqa: BLE001 - the store host is gone: the peers see that too
            pass
        # NOTE: after the reason: a peer woken in shared memory reads it at once
        if self._shared is not None:
            self._shared.abort()
        pg, self._pg = self._pg, None
        if pg is not None and hasattr(pg, "abort"):
            pg.abort()

    def close(self, wait_s: float = 5.0) -> None:
        """Leave the job; trainer 0 (the store host) waits up to ``wait_s`` for the others."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        try:
            self._calls(lambda: self._store.set(f"closed/{self.trainer_id}", "1"),
                        min(wait_s, 2.0) or 0.1, "leaving")
            # NOTE: the host stays until every peer has left (or is gone), so that the
            # peers can still read why a step failed here
            if self.trainer_id == 0:
                end = time.monotonic() + wait_s
                pending = set(range(1, self.num_trainers))
                while pending and time.monotonic() < end:
                    order = sorted(pending)
                    asked = [f"closed/{k}" for k in order]
                    done = self._calls(lambda asked=asked: self._store.present(asked), 1.0,
                                       "leaving")
                    pending = {k for k, d in zip(order, done)
                               if not d and self._heartbeat.trouble([k]) is None}
                    time.sleep(0.02)
        except Exception:  # noqa: BLE001 - the host already left: nothing to tell it
            pass
        self._heartbeat.stop()
        _forget(self)
        if self._shared is not None:
            self._shared.close()
        self._pg = None
        self._store = None
        self._rdv.close()

    def __repr__(self) -> str:
        return (f"ProcessGroupCommunicator({self.backend}, trainer {self.trainer_id} of "
                f"{self.num_trainers}, {len(self.devices)} local devices, nranks {self.nranks})")


def _same_kind(values: Sequence[Value], what: str) -> None:
    if any(isinstance(v, SelectedRows) for v in values):
        raise TypeError(f"{what}: cannot combine sparse (SelectedRows) and dense values: every "
                        "device must produce the same kind")



def _of(name: str) -> str:
    return f" of {name}" if name else ""


def _first_difference(a: str, b: str) -> str:
    la, lb = a.splitlines(), b.splitlines()
    for i, (x, y) in enumerate(zip(la, lb)):
        if x != y:
            return f"line {i + 1}: {x!r} vs {y!r}"
    if len(la) != len(lb):
        return f"{len(la)} lines vs {len(lb)} lines"
    return f"{a[:80]!r} vs {b[:80]!r}"



# ---------------------------------------------------------------------- process-wide registry

_REGISTRY: dict[tuple[tuple[str, ...], int], ProcessGroupCommunicator] = {}
_REGISTRY_LOCK = threading.Lock()


def init_collective(endpoints: str | Sequence[str], trainer_id: int,
                    devices: Sequence[torch.device], deadline_s: float | None = None,
                    rendezvous_deadline_s: float | None = None) -> ProcessGroupCommunicator:
    """Meet the other trainers and register the communicator (or return the registered one).

    Args:
        endpoints: every trainer's "ip:port" (a list, or "ip:port,ip:port").
        trainer_id: this trainer's index.
        devices: this trainer's devices (``local_devices(use_cuda)``).
        deadline_s: per-collective deadline (default ``FLAGS_rpc_deadline``, 180 s).
        rendezvous_deadline_s: default ``FLAGS_rpc_deadline``, else 300 s.
    """
    key = (tuple(parse_endpoints(endpoints)), int(trainer_id))
    with _REGISTRY_LOCK:
        comm = _REGISTRY.get(key)
        if comm is not None:
            if [str(d) for d in comm.devices] != [str(torch.device(d)) for d in devices]:
                raise ValueError(f"init_collective: trainer {trainer_id} already joined "
                                 f"{list(key[0])} with devices {comm.devices}, now asked for "
                                 f"{list(devices)}")
            return comm
        backend = "nccl" if any(torch.device(d).type == "cuda" for d in devices) else "gloo"
        rdv = rendezvous(list(key[0]), key[1], len(devices), backend, rendezvous_deadline_s)
        try:
            comm = ProcessGroupCommunicator(rdv, devices, deadline_s)
        except BaseException:
            rdv.close()
            raise
        _REGISTRY[key] = comm
        return comm


def get_collective(endpoints: str | Sequence[str], trainer_id: int
                   ) -> ProcessGroupCommunicator | None:
    """The communicator ``init_collective`` registered for these endpoints, or None."""
    with _REGISTRY_LOCK:
        return _REGISTRY.get((tuple(parse_endpoints(endpoints)), int(trainer_id)))


def _forget(comm: ProcessGroupCommunicator) -> None:
    with _REGISTRY_LOCK:
        for k, v in list(_REGISTRY.items()):
            if v is comm:
                del _REGISTRY[k]


def close_all() -> None:
    """Close every registered communicator (run at interpreter exit)."""
    with _REGISTRY_LOCK:
        comms = list(_REGISTRY.values())
    for c in comms:
        c.close(wait_s=2.0)


atexit.register(close_all)
