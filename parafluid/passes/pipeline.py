"""An ordered list of Program -> Program passes, printable, with a debug dump after each.

Example::

    pipe = PassPipeline([("sync_batch_norm", sync_batch_norm),
                         ("grad_aggregation", partial(aggregate_gradients, opts=opts))])
    print(pipe)                 # sync_batch_norm -> grad_aggregation
    program = pipe(program)     # the caller's program is not modified

Set ``PARAFLUID_DEBUG=1`` to print the program after every pass (to stderr), or
``PARAFLUID_DUMP_PASSES=DIR`` to write it to ``DIR/<nn>_<pass>.txt``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

__all__ = ["PassPipeline"]

Pass = Callable[[Any], Any]


class PassPipeline:
    """Runs named passes in order; each takes a Program and returns a Program."""

    def __init__(self, passes: Sequence[tuple[str, Pass]] = ()) -> None:
        for item in passes:
            if not (isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str)
                    and callable(item[1])):
                raise TypeError(f"PassPipeline: each pass must be a (name, function) pair, "
                                f"got {item!r}")
        self.passes = list(passes)

    @property
    def names(self) -> list[str]:
        return [name for name, _ in self.passes]

    def __call__(self, program: Any) -> Any:
        dump_dir = os.environ.get("PARAFLUID_DUMP_PASSES")
        debug = os.environ.get("PARAFLUID_DEBUG", "0") not in ("", "0")
        if dump_dir or debug:
            self._dump(program, 0, "input", dump_dir, debug)
        for k, (name, fn) in enumerate(self.passes, 1):
            program = fn(program)
            if dump_dir or debug:
                self._dump(program, k, name, dump_dir, debug)
        return program

    @staticmethod
    def _dump(program: Any, k: int, name: str, dump_dir: str | None, debug: bool) -> None:
        text = str(program)
        if debug:
            print(f"=== after pass {k} {name} ===\n{text}", file=sys.stderr)
        if dump_dir:
            path = Path(dump_dir)
            path.mkdir(parents=True, exist_ok=True)
            (path / f"{k:02d}_{name}.txt").write_text(text + "\n")

    def __str__(self) -> str:
        return " -> ".join(self.names) if self.passes else "(no passes)"

    def __repr__(self) -> str:
        return f"PassPipeline({self})"
