"""Tiered compilation: a segment runs op by op at once; a worker process compiles it ahead of
time, and the segment switches over when the compiled code is ready.

With ``BuildStrategy.compile_in_background`` the segmentation pass marks each segment
``tiered``. On its first call such a segment (``compiled_functions.Segment``) runs its ops
one by one, as the interpreter would, and queues a job here. The job is a worker process
(``parafluid.engine.tiered_worker``, at the lowest CPU priority (nice 19), one torch
thread) that
reads the segmented program (the JSON of ``serialization.dumps``, never a pickle) and the
first call's inputs (``.npy`` files), traces the segment's function with ``torch.export``
(the batch dimension dynamic where the IR has -1) and compiles it with AOTInductor into a
package. Nothing of that runs in the training process, so it costs the training no Python
time: the worker uses another core. When the package is there, the segment loads it (a
shared library: milliseconds), checks it once against the op-by-op run on the same inputs
and from then on calls it. A run that ends first simply never switches; its workers are
killed when the process exits.

A segment whose ops update their inputs in place (an update segment of its own, batch
norm's statistics) is not switched: the package would return new values instead. With the
default ``fuse_updates`` the training step's one segment computes its new values into fresh
tensors and switches.

``jobs_idle(timeout)`` waits until every queued job is done (tests, benchmarks);
``cancel_jobs()`` kills the running worker and drops the queue.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

__all__ = ["submit", "jobs_idle", "cancel_jobs", "Job", "attach_package", "load",
           "remove_package"]

log = logging.getLogger("parafluid.compile")

PACKAGE_ATTR = "_tiered_package"  # a segment op's ready package (see attach_package)
REFUSED = 3  # the worker's exit status for "this segment cannot switch" (the reason on stderr)


_DIRS: set[str] = set()  # the job folders of this process not removed yet (gone at exit)


class Job:
    """One segment to compile ahead of time: its files, and what the worker made of them."""

    def __init__(self, program_json: bytes, op_index: int, names: list[str],
                 args: tuple, batch: list[int], what: str) -> None:
        self.dir = tempfile.mkdtemp(prefix="parafluid-tiered-")
        _DIRS.add(self.dir)
        self.op: Any = None  # the segment op it compiles, where the caller keeps it
        self.what = what
        self.package: str | None = None  # the compiled package, once the worker made it
        self.error: str | None = None  # why it did not
        self.start_ns = self.end_ns = 0
        with open(os.path.join(self.dir, "program.json"), "wb") as f:
            f.write(program_json)
        for i, a in enumerate(args):
            np.save(os.path.join(self.dir, f"in{i}.npy"), a.detach().cpu().numpy(),
                    allow_pickle=False)
        with open(os.path.join(self.dir, "job.json"), "w") as f:
            json.dump({"op_index": op_index, "names": names, "batch": batch,
                       "dtypes": [str(a.dtype).replace("torch.", "") for a in args]}, f)

    @property
    def done(self) -> bool:
        return self.package is not None or self.error is not None

    def remove(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)
        _DIRS.discard(self.dir)


class _Queue:
    """Runs the jobs one after the other, each in a worker process, from a daemon thread that
    spends its time blocked in ``wait()`` (no Python work in the training process)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._jobs: list[tuple[Job, Callable[[Job], None]]] = []
        self._busy = 0
        self._proc: subprocess.Popen | None = None
        self._thread: threading.Thread | None = None
        self._closed = False

    def submit(self, job: Job, done: Callable[[Job], None]) -> None:
        with self._cond:
            if self._closed:
                job.error = "the process is exiting"
                return
            self._jobs.append((job, done))
            self._busy += 1
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, daemon=True,
                                                name="parafluid-tiered")
                self._thread.start()
            self._cond.notify_all()

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._jobs:
                    self._cond.wait()
                job, done = self._jobs.pop(0)
            try:
                self._run(job)
                done(job)
            except Exception as e:  # noqa: BLE001 (a job's failure is its error, not ours)
                job.error = job.error or f"{type(e).__name__}: {e}"
            finally:
                with self._cond:
                    self._busy -= 1
                    self._cond.notify_all()

    def _run(self, job: Job) -> None:
        job.start_ns = time.perf_counter_ns()
        err_path = os.path.join(job.dir, "stderr.txt")
        env = dict(os.environ, TORCHINDUCTOR_COMPILE_THREADS="1", OMP_NUM_THREADS="1")
        try:
            with open(err_path, "w") as err, self._cond:
                if self._closed:
                    job.error = "the process is exiting"
                    return
                # NOTE: the lowest priority from the first instruction on (imports included):
                # the training process comes first, the worker takes the idle CPU time
                self._proc = subprocess.Popen(
                    [sys.executable, "-c", f"import os; os.nice({_nice()}); "
                     "from parafluid.engine.tiered_worker import main; main()", job.dir],
                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err, env=env)
            status = self._proc.wait()
        except OSError as e:
            job.error = f"the worker did not start: {e}"
            return
        finally:
            job.end_ns = time.perf_counter_ns()
            with self._cond:
                self._proc = None
        package = os.path.join(job.dir, "segment.pt2")
        if status == 0 and os.path.exists(package):
            job.package = package
            return
        try:
            with open(err_path, errors="replace") as f:
                lines = [ln for ln in f.read().strip().splitlines() if ln.strip()]
        except OSError:  # (the process is exiting: close() removed the folder)
            lines = []
        last = lines[-1] if lines else "no message"
        job.error = (last if status == REFUSED else
                     f"the compile worker failed (exit status {status}): {last}")
        job.remove()  # (nothing in it is of use any more)

    def idle(self, timeout: float | None) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: self._busy == 0, timeout)

    def cancel(self) -> None:
        """Kill the running worker (by its pid) and drop the queued jobs."""
        with self._cond:
            dropped, self._jobs = self._jobs, []
            self._busy -= len(dropped)
            proc = self._proc
            self._cond.notify_all()
        for job, _ in dropped:
            job.remove()
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()

    def close(self) -> None:
        with self._cond:
            self._closed = True
        self.cancel()
        for path in list(_DIRS):  # packages never loaded, jobs cut short
            shutil.rmtree(path, ignore_errors=True)
        _DIRS.clear()


def _nice() -> int:
    """The worker's niceness: 19 (the lowest priority), or ``$PARAFLUID_TIERED_NICE``."""
    try:
        return max(0, min(19, int(os.environ.get("PARAFLUID_TIERED_NICE", "19"))))
    except ValueError:
        return 19


_QUEUE = _Queue()
atexit.register(_QUEUE.close)


def submit(job: Job, done: Callable[[Job], None]) -> None:
    """Queue ``job``; ``done(job)`` is called (on the queue's thread) when it finished."""
    _QUEUE.submit(job, done)


def jobs_idle(timeout: float | None = None) -> bool:
    """Wait until every queued job finished; False when ``timeout`` seconds passed first."""
    return _QUEUE.idle(timeout)


def cancel_jobs() -> None:
    """Kill the running compile worker and drop the queued jobs."""
    _QUEUE.cancel()


def attach_package(op: Any, package: str) -> None:
    """Give segment op ``op`` the package a job compiled for it: the segment switches over
    at its first call, without a job of its own."""
    setattr(op, PACKAGE_ATTR, package)


def remove_package(package: str) -> None:
    """Remove a job's files once its package is loaded (the loaded code stays usable)."""
    shutil.rmtree(os.path.dirname(package), ignore_errors=True)
    _DIRS.discard(os.path.dirname(package))


def load(package: str) -> Callable[..., list]:
    """The compiled function of a package the worker made: ``fn(*tensors) -> [tensors]``.

    NOTE: torch's C++ loader, called directly: ``torch._inductor.aoti_load_package`` would
    import the compiler into the training process (seconds) and flatten the arguments
    through pytrees at every call."""
    loader = torch._C._aoti.AOTIModelPackageLoader(package, "model", False, 1, -1)
    run = loader.boxed_run

    def call(*args: Any) -> list:
        return run(list(args))
    return call
