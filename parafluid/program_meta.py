"""What a program knows about the job it runs in: the records that passes and transpilers
leave on it and that executors read, declared once so that ``clone`` and serialization keep
them.

- the distributed records: the node a split by node or a pserver transpile made the program
  for (``placement_node``: ``("worker", i)`` or ``("ps", i)``), this trainer's id, the number
  of trainers and their endpoints (nccl2 mode: the ParallelExecutor's trainers), the pserver
  endpoints (pserver mode: where ``save_persistables`` asks the pservers to save their
  blocks), the devices a data-parallel stage of a split program runs on; a pserver
  transpile's marks as Fluid sets them (``is_distributed``, ``is_chief``, the distributed
  lookup table's name) and where each parameter and optimizer-state block lives
  (``parameters_on_pservers``, read through ``VarsDistributed``);
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
from typing import Any, NamedTuple

__all__ = ["ProgramMeta", "NODE_KINDS", "VarsDistributed", "DISTRIBUTED_VAR_KEYS"]

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
    # pserver transpile (Fluid's Program._is_distributed / _is_chief / _distributed_lookup_table)
    is_distributed: bool | None = None
    is_chief: bool | None = None
    distributed_lookup_table: str | None = None
    # one record per block held by a pserver, keys DISTRIBUTED_VAR_KEYS
    parameters_on_pservers: list[dict[str, Any]] = field(default_factory=list)

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
            elif f.name == "parameters_on_pservers":
                value = [dict(r, origin_shape=list(r["origin_shape"]),
                              slice_shape=list(r["slice_shape"])) for r in value]
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
            elif key == "parameters_on_pservers":
                value = [dict(r) for r in value]
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


# a record of ``ProgramMeta.parameters_on_pservers``: the original variable and its shape, the
# block's name and shape, whether it is a slice, its index and element offset in the original,
# "Param" or "Optimizer", and the pserver holding it
DISTRIBUTED_VAR_KEYS = ("origin", "origin_shape", "slice", "slice_shape", "is_slice",
                        "block_id", "offset", "vtype", "endpoint")


class VarStruct(NamedTuple):
    """One side of a distributed record as Fluid's ``VarDistributed`` shows it: a name and a
    shape."""

    name: str
    shape: tuple[int, ...]


class VarDistributed(dict):
    """A record of ``ProgramMeta.parameters_on_pservers`` (keys ``DISTRIBUTED_VAR_KEYS``),
    also read as Fluid's ``VarDistributed``: ``r.origin`` / ``r.slice`` have ``.name`` and
    ``.shape``; ``r.is_slice``, ``r.block_id``, ``r.offset``, ``r.vtype``, ``r.endpoint``."""

    @property
    def origin(self) -> VarStruct:
        return VarStruct(self["origin"], tuple(self["origin_shape"]))

    @property
    def slice(self) -> VarStruct:
        return VarStruct(self["slice"], tuple(self["slice_shape"]))

    @property
    def is_slice(self) -> bool:
        return bool(self["is_slice"])

    @property
    def block_id(self) -> int:
        return int(self["block_id"])

    @property
    def offset(self) -> int:
        return int(self["offset"])

    @property
    def vtype(self) -> str:
        return str(self["vtype"])

    @property
    def endpoint(self) -> str:
        return str(self["endpoint"])


class VarsDistributed:
    """Fluid's ``Program._parameters_on_pservers``: which pserver holds which block of each
    parameter and of its optimizer state, over ``ProgramMeta.parameters_on_pservers``.

    Example::

        t.transpile(0, program=main, pservers="127.0.0.1:6174,127.0.0.1:6175", trainers=2)
        main._parameters_on_pservers.get_distributed_vars_by_ep("127.0.0.1:6174")
        # [{'origin': 'fc_b', 'slice': 'fc_b', 'vtype': 'Param', ...}, ...]
    """

    def __init__(self, records: list[dict[str, Any]]) -> None:
        self.distributed_vars = [VarDistributed(r) for r in records]

    def get_distributed_var_by_slice(self, var_name: str) -> dict[str, Any] | None:
        return next((r for r in self.distributed_vars if r["slice"] == var_name), None)

    def get_distributed_var_by_origin_and_ep(self, origin_var_name: str, ep: str
                                             ) -> dict[str, Any] | None:
        return next((r for r in self.distributed_vars
                     if r["origin"] == origin_var_name and r["endpoint"] == ep), None)

    def get_distributed_vars_by_ep(self, endpoint: str, vtype: str | None = None
                                   ) -> list[dict[str, Any]]:
        return [r for r in self.distributed_vars if r["endpoint"] == endpoint
                and (vtype is None or r["vtype"] == vtype)]

    def get_distributed_vars_by_vtypes(self, vtypes: list[str], groupby: bool = False
                                       ) -> Any:
        """The records of these kinds; ``groupby=True``: ``{origin name: [records]}``."""
        found = [r for r in self.distributed_vars if r["vtype"] in vtypes]
        if not groupby:
            return found
        grouped: dict[str, list[dict[str, Any]]] = {}
        for r in found:
            grouped.setdefault(r["origin"], []).append(r)
        return grouped

    def overview(self) -> str:
        return "\n".join(f"{r['vtype']} {r['origin']}{list(r['origin_shape'])} -> "
                         f"{r['slice']}{list(r['slice_shape'])} at offset {r['offset']} on "
                         f"{r['endpoint']}" for r in self.distributed_vars)

    def __repr__(self) -> str:
        return f"VarsDistributed({len(self.distributed_vars)} blocks)"
