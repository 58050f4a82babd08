"""What makes a training step happen whole or not at all, and the NaN/Inf guard.

A plan (``parafluid.engine.plan``) splits the nodes of a step in two:

- the *update tail*: the last nodes in program order, as long as each writes a persistable
  (optimizer updates, beta-pow accumulators, Reduce's parameter broadcasts);
- the *compute* nodes: every other one. The few of them that write a persistable (a
  learning-rate step counter, batch_norm's moving statistics, ``recv``, an optimizer
  followed by an evaluation op) are recorded in an ``UndoLog`` just before they run: an old
  value they overwrite in place is copied, a value they replace is kept by reference.

The tail starts once every compute node has finished: a barrier task between the two,
``StepGuard.enter_tail``, marks the moment. Before it, a Ctrl-C (SIGINT) stops the run at
once (no node starts any more) and the step is undone; after it, the Ctrl-C is held back
until the whole tail ran, then raised. (Letting the tail overlap the backward pass, as the
ParallelExecutor's graph otherwise would, means recording the tail's writes while compute
nodes still run: measured on the Adam MLP with 2 devices it copied a third of the
parameters and optimizer state each step and cost as much as the barrier.)

When a step fails or is interrupted, ``UndoLog.rollback`` restores every recorded value on
every device, so the scope (and each device replica) is as before the step. A failure
raised by a tail op after every compute node finished can only be undone where its writes
were recorded: the tail is recorded on a plan's first run (a kernel that fails for a reason
of its own, a wrong dtype or shape, fails then) and while the NaN/Inf check is on. A tail
kernel failing later, for lack of memory, is the one case left partial: its error says so
(see docs/robustness.md).

``FLAGS_check_nan_inf`` (``fluid.core.globals()`` or the environment, ``1``/``true`` as in
Fluid), ``Executor(...,
check_nan_inf=True)`` or ``ExecutionStrategy.check_nan_inf``: every op's outputs are checked
and the first non-finite value raises, naming the op and the variable. The choice is made
once per run (a separately built task list), so the check costs nothing when off.

Example::

    fluid.core.globals()["FLAGS_check_nan_inf"] = True   # or FLAGS_check_nan_inf=1 in the env
    exe.run(main, feed=feed, fetch_list=[loss])
    # OpRunError: while running op #7 log (X=[fc_0.tmp_2]) ...:
    #   FloatingPointError: output Out: variable 'log_0.tmp_0' holds 3 NaN and 0 Inf of 8 ...
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterable
from types import FrameType
from typing import Any

import torch

from ..flags import flag
from ..scope import SelectedRows

__all__ = ["UndoLog", "StepGuard", "StepCancelled", "nan_inf_flag", "check_finite"]


class UndoLog:
    """Old values of the persistables a step writes, to put back if the step fails.

    ``record(scope, name, in_place, local)`` is called just before an op writes ``name``:
    ``in_place`` (the op also reads ``name``, so its kernel may update the tensor itself)
    copies the old tensor; otherwise the old value is kept by reference. ``local``: the
    variable lives in ``scope`` itself (a device replica), never in a parent scope.
    ``rollback()`` restores in reverse order; an in-place value is copied back into the same
    tensor object, so references held elsewhere (device mirrors, user views) stay valid.

    Example::

        log = UndoLog()
        log.record(scope, "fc_0.w_0", in_place=True)
        scope.find_var("fc_0.w_0").value.add_(1.0)
        log.rollback()          # fc_0.w_0 holds its old values again
    """

    __slots__ = ("entries",)

    def __init__(self) -> None:
        # (scope, name, holder or None, old value, copy of the old contents or None)
        self.entries: list[tuple[Any, str, Any, Any, Any]] = []

    def record(self, scope: Any, name: str, in_place: bool, local: bool = False) -> None:
        if scope is None:
            return
        holder = scope.find_local_var(name) if local else scope.find_var(name)
        old = None if holder is None else holder.value
        saved = None
        if in_place:
            if isinstance(old, torch.Tensor):
                saved = old.clone()
            elif isinstance(old, SelectedRows):
                saved = SelectedRows(old.rows.clone(), old.value.clone(), old.height)
        # NOTE: list.append is atomic: tasks of several devices record concurrently
        self.entries.append((scope, name, holder, old, saved))

    def rollback(self) -> None:
        """Put every recorded value back (the newest first) and forget them."""
        entries, self.entries = self.entries, []
        for scope, name, holder, old, saved in reversed(entries):
            if holder is None:
                # the variable did not exist before the step: the op created it
                scope.erase([name])
                continue
            if saved is not None:
                if isinstance(old, torch.Tensor):
                    with torch.no_grad():
                        old.copy_(saved)
                else:
                    old = saved
            holder.value = old

    def clear(self) -> None:
        self.entries = []

    def __len__(self) -> int:
        return len(self.entries)


_MAIN_THREAD = threading.main_thread().ident
_SIGINT = int(signal.SIGINT)
try:
    # NOTE: the C function behind signal.signal; the Python wrapper converts handlers to
    # enums and costs 5 us a call, the C one 0.2 us
    from _signal import signal as _set_handler
except ImportError:  # pragma: no cover - not CPython
    _set_handler = signal.signal
class StepCancelled(Exception):
    """The update tail did not start: the step was interrupted before it."""


class StepGuard:
    """One plan's view of a run in flight: has the update tail begun, and SIGINT.

    ``start()`` (a run begins) resets it and, on the main thread, routes SIGINT to it; the
    barrier task calls ``enter_tail()`` once every compute node finished. SIGINT before
    that stops the step (``enter_tail`` refuses, ``KeyboardInterrupt`` is raised where the
    main thread is); after it, it is held and raised by ``finish()``, after the whole step.
    ``hold()`` holds every SIGINT (while a failed step is being restored). An ignored
    SIGINT stays ignored; a handler the program installed is called after the step.

    Example::

        guard = StepGuard()
        guard.start()
        try:
            scheduler.run(graph)   # its barrier task calls guard.enter_tail()
        finally:
            guard.finish()         # a Ctrl-C held during the updates is raised here
    """

    __slots__ = ("lock", "in_tail", "stopped", "unrecorded", "_held", "_pending",
                 "_previous", "_active")

    def __init__(self) -> None:
        # NOTE: re-entrant: on one lane the handler runs on the thread inside enter_tail
        self.lock = threading.RLock()
        self.in_tail = False
        self.stopped = False
        self.unrecorded = False  # this run's update tail is not recorded
        self._held = False
        self._pending: tuple[int, FrameType | None] | None = None
        self._previous: Any = None
        self._active = False

    def start(self, tail_only: bool = False, recorded: bool = False) -> None:
        """A run begins. ``tail_only``: it has no compute node, the updates begin now;
        ``recorded``: its updates are recorded in the undo log (else ``unrecorded``)."""
        self.stopped = self._held = False
        self.unrecorded = not recorded
        self.in_tail = tail_only
        self._pending = None
        self._active = threading.get_ident() == _MAIN_THREAD
        if self._active:
            # NOTE: one call each way (it returns the previous handler): once per step
            self._previous = _set_handler(_SIGINT, self._on_sigint)

    def enter_tail(self) -> None:
        """The barrier: every compute node finished; from now on SIGINT waits."""
        with self.lock:
            if self.stopped:
                raise StepCancelled("the step was interrupted before its updates")
            self.in_tail = True

    def hold(self) -> None:
        self._held = True

    def _on_sigint(self, signum: int, frame: FrameType | None) -> None:
        previous = self._previous
        if previous == signal.SIG_IGN:
            return
        with self.lock:
            # NOTE: a handler of the program's own (a flag for a clean shutdown, say) runs
            # once the step is over, whole or undone; Python's default one stops the step
            if self._held or self.in_tail or (
                    previous is not None and previous is not signal.default_int_handler):
                self._pending = (signum, frame)
                return
            self.stopped = True
        raise KeyboardInterrupt

    def finish(self) -> None:
        """Give SIGINT back to its handler; raise a Ctrl-C that was held."""
        if not self._active:
            return
        self._active = False
        previous = self._previous
        self._previous = None
        # a handler installed from C (None) cannot be put back: Python's default stands in
        _set_handler(_SIGINT, previous if previous is not None else signal.default_int_handler)
        pending, self._pending = self._pending, None
        if pending is None:
            return
        if callable(previous):
            previous(*pending)
        elif previous is None:
            raise KeyboardInterrupt
        elif previous == signal.SIG_DFL:
            signal.raise_signal(signal.SIGINT)


def nan_inf_flag() -> bool:
    """Whether ``FLAGS_check_nan_inf`` is on (``core.globals()`` or the environment, see
    ``parafluid.flags``; read at every run).

    Example::

        fluid.core.globals()["FLAGS_check_nan_inf"] = True
        nan_inf_flag()      # True
    """
    return bool(flag("FLAGS_check_nan_inf"))


def check_finite(outputs: Iterable[tuple[str, str, Any]]) -> None:
    """Raise ``FloatingPointError`` for the first output holding NaN or Inf.

    ``outputs``: ``(slot, variable name, value)`` triples; non-float values are skipped.

    Example::

        check_finite([("Out", "y", torch.tensor([1.0, float("nan")]))])
        # FloatingPointError: output Out: variable 'y' holds 1 NaN and 0 Inf of 2 values ...
    """
    for slot, name, value in outputs:
        t = value.value if isinstance(value, SelectedRows) else value
        if not isinstance(t, torch.Tensor) or not (t.is_floating_point() or t.is_complex()):
            continue
        if bool(torch.isfinite(t).all()):
            continue
        nan = int(torch.isnan(t).sum())
        inf = int(torch.isinf(t).sum())
        raise FloatingPointError(
            f"output {slot}: variable {name!r} holds {nan} NaN and {inf} Inf of "
            f"{t.numel()} values (shape {list(t.shape)}, {str(t.dtype).replace('torch.', '')})"
            "; FLAGS_check_nan_inf stopped the step before any parameter was updated")
