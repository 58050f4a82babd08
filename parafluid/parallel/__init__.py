"""Data parallelism: the ParallelExecutor and CompiledProgram, their device scopes,
strategies and communicator; they run on the engine (``parafluid.engine``)."""

from __future__ import annotations

from .compiled_program import CompiledProgram  # noqa: F401, I001
from .parallel_executor import ParallelExecutor  # noqa: F401
from .strategy import BuildStrategy, ExecutionStrategy  # noqa: F401
