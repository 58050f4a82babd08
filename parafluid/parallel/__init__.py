"""Multi-device execution: the dataflow scheduler and the ParallelExecutor built on it."""

from __future__ import annotations

from .compiled_program import CompiledProgram  # noqa: F401, I001
from .parallel_executor import ParallelExecutor  # noqa: F401
from .scheduler import Scheduler, Task, TaskError, TaskGraph  # noqa: F401
from .strategy import BuildStrategy, ExecutionStrategy  # noqa: F401
