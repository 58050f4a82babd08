"""What makes a training step happen whole or not at all, and the NaN/Inf guard.

A plan (``parafluid.plan``) runs a step in two phases:

- the *compute* phase: every op except the update tail below. Most of these ops write
  no persistable; the few that do (a learning-rate step counter, batch_norm's moving
  statistics, ``recv``) are recorded in an ``UndoLog`` just before they run: an old value
  they overwrite in place is copied, a value they replace is kept by reference;
- the *commit* phase: the update tail, the ops that write persistables (optimizer
  updates, beta-pow accumulators, Reduce's parameter broadcasts) and that only other such
  ops depend on. It starts once every compute op has succeeded, and runs with SIGINT
  deferred (``deferred_interrupts``): a Ctrl-C in it lands once every device's update is
  done.

When a step fails or is interrupted, ``UndoLog.rollback`` restores every recorded value on
every device, so the scope (and each device replica) is as before the step. A failure
inside the commit phase can only be undone for writes that were recorded: the commit ops
are recorded on a plan's first run (a kernel that fails for a reason of its own, a wrong
dtype or shape, fails then) and while the NaN/Inf check is on. A kernel that fails later in
the commit phase for lack of memory is the one case left partial (docs/robustness.md).

``FLAGS_check_nan_inf`` (environment, ``1``/``true`` as in Fluid), ``Executor(...,
check_nan_inf=True)`` or ``ExecutionStrategy.check_nan_inf``: every op's outputs are checked
and the first non-finite value raises, naming the op and the variable. The choice is made
once per run (a separately built task list), so the check costs nothing when off.

Example::

    os.environ["FLAGS_check_nan_inf"] = "1"
    exe.run(main, feed=feed, fetch_list=[loss])
    # OpRunError: while running op #7 log (X=[fc_0.tmp_2]) ...:
    #   FloatingPointError: output Out: variable 'log_0.tmp_0' holds 3 NaN and 0 Inf of 8 ...
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterable
from types import FrameType, TracebackType
from typing import Any

import torch

from .scope import SelectedRows

__all__ = ["UndoLog", "deferred_interrupts", "nan_inf_flag", "check_finite"]


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


class deferred_interrupts:  # noqa: N801 - used as a context manager, like contextlib's
    """Hold SIGINT back for the duration of a ``with`` block; deliver it at the end.

    Python runs signal handlers on the main thread only, so elsewhere this does nothing.
    A signal that arrived inside the block is handed to the previous handler on exit (the
    default one raises ``KeyboardInterrupt`` there).

    Example::

        with deferred_interrupts():
            apply_every_update()      # a Ctrl-C here is raised after the block
    """

    __slots__ = ("_previous", "_pending", "_active")

    def __enter__(self) -> deferred_interrupts:
        self._pending: tuple[int, FrameType | None] | None = None
        self._active = threading.get_ident() == _MAIN_THREAD
        if self._active:
            # NOTE: one call each way (it returns the previous handler): this runs once per
            # training step
            self._previous = _set_handler(_SIGINT, self._hold)
        return self

    def _hold(self, signum: int, frame: FrameType | None) -> None:
        self._pending = (signum, frame)

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if not self._active:
            return
        previous = self._previous
        # a handler installed from C (None) cannot be put back: Python's default stands in
        _set_handler(_SIGINT, previous if previous is not None else signal.default_int_handler)
        pending = self._pending
        if pending is None:
            return
        if callable(previous):
            previous(*pending)
        elif previous is None:
            raise KeyboardInterrupt
        elif previous == signal.SIG_DFL:
            signal.raise_signal(signal.SIGINT)


_MAIN_THREAD = threading.main_thread().ident
_SIGINT = int(signal.SIGINT)
try:
    # NOTE: the C function behind signal.signal; the Python wrapper converts handlers to
    # enums and costs 5 us a call, the C one 0.2 us
    from _signal import signal as _set_handler
except ImportError:  # pragma: no cover - not CPython
    _set_handler = signal.signal
_TRUE = ("1", "true", "True", "TRUE", "yes", "on")


def nan_inf_flag() -> bool:
    """Whether ``FLAGS_check_nan_inf`` is set in the environment (read at every run)."""
    raw = os.environ.get("FLAGS_check_nan_inf")
    return raw is not None and raw.strip() in _TRUE


def check_finite(outputs: Iterable[tuple[str, str, Any]]) -> None:
    """Raise ``FloatingPointError`` for the first output holding NaN or Inf.

    ``outputs``: ``(slot, variable name, value)`` triples; non-float values are skipped.
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
