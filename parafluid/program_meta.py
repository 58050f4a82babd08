"""What a program knows about the job it runs in: the records that passes and transpilers
leave on it and that executors read, declared once so that ``clone`` and serialization keep
them.

- the distributed records: the node a split by node or a pserver transpile made the program
  for (``placement_node``: ``("worker", i)`` or ``("ps", i)``), this trainer's id, the number
  of trainers and their endpoints (nccl2 mode: the ParallelExecutor's trainers), the pserver
  endpoints (pserver mode: where ``save_persistables`` asks the pservers to save their
  blocks), the devices a data-parallel stage of a split program runs on;
- ``memory_optimize``'s record: for each name whose buffer was handed on, the variables
  renamed to it and the op where that happened (fetch checks, "renamed away" messages).

A program document carries the record under ``"meta"`` (only the fields that are set);
``serialization.check_document`` checks it like every other field.

Example::

    t = fluid.DistributeTranspiler(config)   # config.mode = "nccl2"
    t.transpile(1, program=main, startup_program=startup, trainers="a:1,b:2,c:3",
                current_endpoint="b:2")
    main.meta.trainers_endpoints             # ['a:1', 'b:2', 'c:3']
    Program.parse_from_string(main.serialize_to_string()).meta == main.meta   # True
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

__all__ = ["ProgramMeta", "NODE_KINDS"]

NODE_KINDS = ("worker", "ps")


@dataclass
class ProgramMeta:
    """The facts recorded on a Program (see the module docstring); every field is optional."""

    placement_node: tuple[str, int] | None = None
    trainer_id: int | None = None
    num_trainers: int | None = None
    trainers_endpoints: list[str] = field(default_factory=list)
    pserver_endpoints: list[str] = field(default_factory=list)
    data_parallel_devices: list[str] = field(default_factory=list)
    # reused name -> [(the variable renamed to it, the index of the op where it was)]
    memory_reuse: dict[str, list[tuple[str, int]]] = field(default_factory=dict)

    def copy(self) -> ProgramMeta:
        return ProgramMeta.from_dict(self.to_dict())

    def to_dict(self) -> dict[str, Any]:
        """The fields that are set, as plain JSON data."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is None or value == [] or value == {}:
                continue
            if f.name == "placement_node":
                value = list(value)
            elif f.name == "memory_reuse":
                value = {k: [[x, i] for x, i in pairs] for k, pairs in value.items()}
            elif isinstance(value, list):
                value = list(value)
            out[f.name] = value
        return out

    @staticmethod
    def from_dict(data: dict[str, Any]) -> ProgramMeta:
        """The record ``to_dict`` wrote; the data must be checked already (a document from
        outside goes through ``serialization.check_document`` first)."""
        meta = ProgramMeta()
        for key, value in data.items():
            if key == "placement_node":
                value = (value[0], value[1])
            elif key == "memory_reuse":
                value = {k: [(x, i) for x, i in pairs] for k, pairs in value.items()}
            elif isinstance(value, list):
                value = list(value)
            setattr(meta, key, value)
        return meta

    def renamed_away(self, name: str) -> str | None:
        """The name memory_optimize renamed ``name`` to, if it did."""
        for cache, pairs in self.memory_reuse.items():
            if any(x == name for x, _ in pairs):
                return cache
        return None
