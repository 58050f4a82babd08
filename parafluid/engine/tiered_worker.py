"""The compile worker of tiered compilation (``parafluid.engine.tiered``): run as
``python -m parafluid.engine.tiered_worker JOB_DIR`` (or its ``main()``), it compiles one
segment ahead of time (``torch.export`` + AOTInductor) into ``JOB_DIR/segment.pt2``. Exit
status 0: done; ``tiered.REFUSED``: the segment cannot switch (the reason is the last line
on stderr)."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import numpy as np
import torch

from ..serialization import loads
from .compiled_functions import Segment
from .tiered import REFUSED

__all__ = ["compile_job", "main"]


def compile_job(job_dir: str) -> int:
    """Compile the segment of ``job_dir`` into ``segment.pt2``; 0 on success, REFUSED when
    it cannot switch (the reason on stderr)."""
    torch.set_num_threads(1)
    with open(os.path.join(job_dir, "job.json")) as f:
        spec = json.load(f)
    with open(os.path.join(job_dir, "program.json"), "rb") as f:
        program = loads(f.read())
    op = program.global_block().ops[spec["op_index"]]
    seg = Segment(op, torch.device("cpu"))
    if len(seg.pieces) != 1:
        print("it holds an op that cannot compile", file=sys.stderr)
        return REFUSED
    args = tuple(torch.from_numpy(np.load(os.path.join(job_dir, f"in{i}.npy")))
                 for i in range(len(spec["names"])))
    fn = seg.pieces[0].eager

    class Function(torch.nn.Module):
        def forward(self, *a: Any) -> Any:
            return fn(*a)

    dims = tuple({0: torch.export.Dim.AUTO} if i in spec["batch"] else None
                 for i in range(len(args)))
    exported = torch.export.export(Function(), args, dynamic_shapes={"a": dims}, strict=False)
    if exported.graph_signature.user_inputs_to_mutate:
        print("its ops update their inputs in place", file=sys.stderr)
        return REFUSED
    torch._inductor.aoti_compile_and_package(
        exported, package_path=os.path.join(job_dir, "segment.pt2"))
    return 0


def main() -> None:
    """The worker's entry point (started by ``engine/tiered.py`` at nice 19):
    ``JOB_DIR`` is the first argument."""
    sys.exit(compile_job(sys.argv[1]))


if __name__ == "__main__":
    main()
