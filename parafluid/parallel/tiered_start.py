"""The tiered start of a compiled program on one device (``BuildStrategy.enable_compile``
with ``compile_in_background``): run the program interpreted until every segment's compiled
code is ready, then switch to the segmented program.

``CompiledProgram`` asks ``TieredStart.program(feed, scope)`` which program to run at each
step. At the first step it queues one ahead-of-time compile job per segment
(``engine/tiered.py``: a worker process at the lowest CPU priority), with example inputs
from the feed, the scope, or zeros of the declared shape (the batch dimension as fed), and
returns the plain program: the interpreter itself, at its own speed. Once every job is done
it returns the segmented program, whose segments switch over to their packages at their
first call (loaded in milliseconds, checked once against the op-by-op run). A job that
fails leaves the run interpreted, after one warning naming the segment and why.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import torch

from ..dtypes import to_torch
from ..engine import tiered
from ..framework import Program
from ..passes.compile_regions import SEGMENT_OP
from ..serialization import dumps

__all__ = ["TieredStart"]

log = logging.getLogger("parafluid.compile")


class TieredStart:
    """Which of ``plain`` (the program after the build passes) and ``segmented`` (the same
    with its compiled segments) a step runs, as the segments' compile jobs progress."""

    def __init__(self, plain: Program, segmented: Program) -> None:
        self.plain, self.segmented = plain, segmented
        self.jobs: list[tiered.Job] | None = None
        self.state = "interpreted"  # -> "compiled" once switched, "stay" after a failure

    def program(self, feed: dict[str, Any], scope: Any) -> Program:
        if self.state == "compiled":
            return self.segmented
        if self.state == "stay":
            return self.plain
        if self.jobs is None:
            self.jobs = self._submit(feed, scope)
            if not self.jobs:
                self.state = "compiled"
                return self.segmented
            return self.plain
        if not all(job.done for job in self.jobs):
            return self.plain
        failed = [job for job in self.jobs if job.package is None]
        if failed:
            self.state = "stay"
            for job in self.jobs:
                job.remove()
            log.warning("%s cannot be compiled ahead of time (%s): the run stays interpreted",
                        failed[0].what, failed[0].error)
            return self.plain
        for job in self.jobs:
            tiered.attach_package(job.op, job.package)
        self.state = "compiled"
        log.info("tiered compilation: %d segment(s) ready, switching to compiled code",
                 len(self.jobs))
        return self.segmented

    def _submit(self, feed: dict[str, Any], scope: Any) -> list[tiered.Job]:
        block = self.segmented.global_block()
        batch = next((len(v) for v in feed.values() if np.ndim(v) > 0), 1)
        text = dumps(self.segmented)
        jobs = []
        for index, op in enumerate(block.ops):
            if op.type != SEGMENT_OP or not op.attrs.get("tiered"):
                continue
            names = list(op.inputs.get("X", []))
            args, dims = [], []
            for i, name in enumerate(names):
                value, var = _value(name, feed, scope), block._find_var_recursive(name)
                shape = list(var.shape) if var is not None else []
                if shape and shape[0] == -1 and not var.persistable:
                    dims.append(i)
                if value is None:
                    if var is None or any(d < -1 for d in shape) or -1 in shape[1:]:
                        log.warning("tiered compilation: no example value of %r for "
                                    "compiled_segment %s: the run stays interpreted", name,
                                    op.attrs.get("segment"))
                        self.state = "stay"
                        return []
                    value = torch.zeros([batch if d == -1 else d for d in shape],
                                        dtype=to_torch(var.dtype))
                args.append(value)
            job = tiered.Job(text, index, names, tuple(args), dims,
                             f"compiled_segment {op.attrs.get('segment')}")
            job.op = op
            tiered.submit(job, lambda job: None)
            jobs.append(job)
        return jobs


def _value(name: str, feed: dict[str, Any], scope: Any) -> torch.Tensor | None:
    if name in feed:
        return torch.as_tensor(np.asarray(feed[name]))
    holder = scope.find_var(name) if scope is not None else None
    value = None if holder is None else holder.value
    return value if isinstance(value, torch.Tensor) else None
