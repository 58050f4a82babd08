"""``Executor.train_from_dataset`` / ``infer_from_dataset``: a program run over every batch of
a Dataset by worker threads (Fluid's MultiTrainer with Hogwild workers).

The batches come from the dataset in file and line order (``dataset.py``). With
one thread they run in that order on the calling thread, each an ``Executor.run`` step, so
the parameters are exactly those of ``Executor.run`` over the same batches. With ``thread``
= n > 1, n threads take the next batch as they become free and run it against the same scope
(Hogwild, as Fluid: the parameters are shared, each update is applied as it comes, no lock);
each thread has an Executor of its own. ``infer_from_dataset`` runs the program's test
clone (``clone(for_test=True)``: no backward or optimizer ops), so the parameters stay.

A program minimized by ``PipelineOptimizer`` is placed on its sections' devices; it runs its
batches in order on one thread, each device on a lane of its own (docs/placement.md). A
``CompiledProgram`` runs as compiled (its BuildStrategy applies: micro-batches that overlap
the stages of a placed program, data parallelism, compiled segments), on one thread.

``fetch_list`` / ``fetch_info``: every ``print_period`` batches the values of the fetch
variables are printed, one line each, ``<info>: <values>``. ``debug=True`` also prints,
at the end, how many batches each thread ran and the time taken.

Example::

    exe.train_from_dataset(program=fluid.default_main_program(), dataset=dataset, thread=2,
                           fetch_list=[avg_cost], fetch_info=["cost"], print_period=100)
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from ..feed_fetch import fetch_names
from ..framework import Program, default_main_program
from ..parallel.compiled_program import CompiledProgram
from ..scope import Scope, global_scope

__all__ = ["run_from_dataset"]

_POLL_S = 0.1  # how often a waiting thread looks whether another one failed


def run_from_dataset(exe: Any, program: Any, dataset: Any, scope: Scope | None, thread: int,
                     debug: bool, fetch_list: Sequence[Any] | None,
                     fetch_info: Sequence[str] | None, print_period: int, is_infer: bool
                     ) -> None:
    """The loop behind ``Executor.train_from_dataset`` (``is_infer=False``) and
    ``infer_from_dataset``."""
    where = "infer_from_dataset" if is_infer else "train_from_dataset"
    if program is None:
        program = default_main_program()
    compiled = None
    if isinstance(program, CompiledProgram):
        if program._is_inference:
            raise ValueError(f"{where}: the CompiledProgram is compiled for inference; give "
                             "the program itself")
        compiled, program = program, program._program
    if not isinstance(program, Program):
        raise TypeError(f"{where}: program must be a Program or CompiledProgram, got "
                        f"{type(program).__name__}")
    fetch = fetch_names(list(fetch_list or []))
    info = list(fetch_info or [])
    if len(info) != len(fetch):
        raise ValueError(f"{where}: fetch_info must name each of the {len(fetch)} fetch_list "
                         f"variables, got {len(info)} names")
    if isinstance(print_period, bool) or not isinstance(print_period, int) or print_period <= 0:
        raise ValueError(f"{where}: print_period must be a positive int, got {print_period!r}")
    if isinstance(thread, bool) or not isinstance(thread, int):
        raise TypeError(f"{where}: thread must be an int, got {type(thread).__name__}")
    threads = thread if thread > 0 else dataset.thread_num
    if threads <= 0:
        raise RuntimeError(f"{where}: set the thread number first, either with "
                           "dataset.set_thread(n) or with thread=n here")
    if getattr(program, "_pipeline_opt", None) or compiled is not None:
        threads = 1  # the sections, or the compiled program's devices, are the parallelism
    if is_infer:
        program, compiled = program.clone(for_test=True), None
    target: Any = compiled if compiled is not None else program
    scope = scope if scope is not None else global_scope()
    dataset._prepare_to_run()
    try:
        _Trainer(exe, target, scope, threads, fetch, info, print_period, debug).run(
            dataset._batches())
    finally:
        dataset._finish_to_run()


class _Trainer:
    def __init__(self, exe: Any, program: Any, scope: Scope, threads: int,
                 fetch: list[str], info: list[str], print_period: int, debug: bool) -> None:
        self.exe, self.program, self.scope, self.threads = exe, program, scope, threads
        self.fetch, self.info, self.print_period, self.debug = fetch, info, print_period, debug
        self.counter = 0
        self.lock = threading.Lock()
        self.per_thread = [0] * threads

    def step(self, exe: Any, feed: dict[str, Any], worker: int) -> None:
        with self.lock:
            self.counter += 1
            n = self.counter
        show = bool(self.fetch) and n % self.print_period == 0
        values = exe.run(self.program, feed=feed, fetch_list=self.fetch if show else [],
                         scope=self.scope)
        self.per_thread[worker] += 1
        if show:
            with self.lock:
                for name, value in zip(self.info, values):
                    print(f"{name}: {_format(value)}", flush=True)

    def run(self, batches: Iterator[dict[str, Any]]) -> None:
        start = time.perf_counter()
        if self.threads == 1:
            for feed in batches:
                self.step(self.exe, feed, 0)
        else:
            self._run_threads(batches)
        if self.debug:
            took = time.perf_counter() - start
            for i, n in enumerate(self.per_thread):
                print(f"thread {i}: {n} batches", flush=True)
            print(f"{self.counter} batches in {took:.3f} s", flush=True)

    def _run_threads(self, batches: Iterator[dict[str, Any]]) -> None:
        from ..executor import Executor

        work: queue.Queue = queue.Queue(maxsize=2 * self.threads)
        stop = threading.Event()
        errors: list[BaseException] = []
        done = object()

        def worker(i: int) -> None:
            exe = Executor(self.exe.place, check_nan_inf=self.exe.check_nan_inf)
            try:
                while not stop.is_set():
                    try:
                        feed = work.get(timeout=_POLL_S)
                    except queue.Empty:
                        continue
                    if feed is done:
                        return
                    self.step(exe, feed, i)
            except BaseException as e:
                errors.append(e)
                stop.set()
            finally:
                exe.close()

        workers = [threading.Thread(target=worker, args=(i,), name=f"dataset-worker-{i}",
                                    daemon=True) for i in range(self.threads)]
        for t in workers:
            t.start()
        try:
            for feed in batches:
                if not _put(work, feed, stop):
                    break
            for _ in workers:
                if not _put(work, done, stop):
                    break
        except BaseException:
            stop.set()
            raise
        finally:
            for t in workers:
                t.join()
        if errors:
            raise errors[0]


def _put(work: queue.Queue, item: Any, stop: threading.Event) -> bool:
    """Hand ``item`` to the workers; False when one of them failed."""
    while not stop.is_set():
        try:
            work.put(item, timeout=_POLL_S)
            return True
        except queue.Full:
            continue
    return False


def _format(value: Any) -> str:
    arr = np.asarray(value)
    return " ".join(f"{v:g}" if isinstance(v, float) else str(v) for v in arr.ravel().tolist())
