"""``fluid.trainer_factory``: Fluid's module path of ``FetchHandlerMonitor`` (the thread
behind ``Executor.train_from_dataset(fetch_handler=...)``, ``parafluid/fetch_handler.py``)."""

from __future__ import annotations

from .fetch_handler import FetchHandlerMonitor

__all__ = ["FetchHandlerMonitor"]
