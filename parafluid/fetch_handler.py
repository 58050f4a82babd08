"""Fluid's timed fetch: a thread that hands chosen variables of a scope to a handler every
``period_secs`` while a Dataset trains (``Executor.train_from_dataset(fetch_handler=...)``).

``FetchHandler`` (``fluid.executor.FetchHandler``) names the variables and the period;
subclass it and override ``handler``. ``FetchHandlerMonitor``
(``fluid.trainer_factory.FetchHandlerMonitor``) runs it on a scope between ``start()`` and
``stop()``; ``train_from_dataset`` does that around the run.

Example::

    class PrintAuc(fluid.executor.FetchHandler):
        def handler(self, fetch_target_vars):
            print("auc", fetch_target_vars[0])

    exe.train_from_dataset(main, dataset, fetch_handler=PrintAuc([auc.name], period_secs=30))

The handler gets numpy arrays (``return_np=True``: copies taken when the period ends; a
variable not yet written is None) or the scope's ``LoDTensor`` handles. A variable that
holds a LoD cannot be returned as one array: the monitor logs that and stops, as does a
handler that raises; the training goes on.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from .scope import LoDTensor, Scope

__all__ = ["FetchHandler", "FetchHandlerMonitor"]

_log = logging.getLogger(__name__)

STOP_WAIT_S = 30.0  # how long stop() waits for a handler call that is running


class FetchHandler:
    """Which variables to fetch (``fetch_target_names``), how often (``period_secs``), and
    whether as numpy arrays; override ``handler(fetch_target_vars)``."""

    def __init__(self, fetch_target_names: Sequence[str], period_secs: float = 60,
                 return_np: bool = True) -> None:
        if isinstance(fetch_target_names, str):
            fetch_target_names = [fetch_target_names]  # one name
        if not isinstance(fetch_target_names, (list, tuple)) or not all(
                isinstance(n, str) for n in fetch_target_names):
            raise TypeError(f"FetchHandler: fetch_target_names must be a list of variable "
                            f"names, got {fetch_target_names!r}")
        if not period_secs > 0:
            raise ValueError(f"FetchHandler: period_secs must be > 0, got {period_secs!r}")
        self.fetch_target_names = list(fetch_target_names)
        self.period_secs = period_secs
        self.return_np = return_np

    def handler(self, fetch_target_vars: list[Any]) -> None:
        """Called every period with the fetched values, in ``fetch_target_names`` order."""

    @staticmethod
    def help() -> None:
        print(__doc__)


class FetchHandlerMonitor:
    """Runs ``handler`` on ``scope`` every ``handler.period_secs`` seconds on a daemon
    thread, from ``start()`` until ``stop()`` (which waits for a running call, up to
    ``STOP_WAIT_S``)."""

    def __init__(self, scope: Scope, handler: FetchHandler) -> None:
        if not isinstance(handler, FetchHandler):
            raise TypeError(f"FetchHandlerMonitor: handler must be a FetchHandler, got "
                            f"{type(handler).__name__}")
        self.fetch_instance = handler
        self._scope = scope
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True,
                                        name="parafluid-fetch-handler")
        self.running = False

    def start(self) -> None:
        self.running = True
        self._thread.start()

    def stop(self) -> None:
        """End the timed fetch; waits (at most ``STOP_WAIT_S``) for a handler call running."""
        self.running = False
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=STOP_WAIT_S)
            if self._thread.is_alive():
                _log.warning("fetch handler %s still runs %.0f s after stop(); it is left to "
                             "end on its own (a daemon thread)",
                             type(self.fetch_instance).__name__, STOP_WAIT_S)

    def _loop(self) -> None:
        h = self.fetch_instance
        while not self._stop.wait(h.period_secs):
            found = [self._scope.find_var(n) for n in h.fetch_target_names]
            if any(v is None for v in found):
                continue  # Fluid waits for every variable to exist
            tensors = [v.get_tensor() for v in found]
            try:
                h.handler([_as_array(n, t) for n, t in zip(h.fetch_target_names, tensors)]
                          if h.return_np else tensors)
            except Exception:  # noqa: BLE001 - a handler's error ends the monitor only
                _log.exception("fetch handler %s failed; the timed fetch stops",
                               type(h).__name__)
                return


def _as_array(name: str, tensor: LoDTensor) -> np.ndarray | None:
    if tensor.lod():
        raise RuntimeError(f"fetch handler: variable {name!r} holds LoD information and "
                           "cannot be returned as one array; fetch another variable, or "
                           "use return_np=False")
    return np.array(tensor) if tensor._is_initialized() else None
