"""Multi-device execution: the dataflow scheduler and the ParallelExecutor built on it."""

from __future__ import annotations

from .scheduler import Scheduler, Task, TaskError, TaskGraph  # noqa: F401
