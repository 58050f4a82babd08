"""Fluid's helpers for a distributed lookup table (``contrib/utils/lookup_table_utils.py``),
over parafluid's pserver mode and checkpoint files.

A distributed table (``embedding(..., is_sparse=True, is_distributed=True)`` in a program
transpiled in pserver mode) is cut into shards of whole rows, each pserver ``i`` holding its
shard under the table's own name (as Fluid's); the trainer program looks rows up with
``distributed_lookup_table`` ops and never holds the table. A pserver-mode checkpoint
(``fluid.io.save_persistables`` of the trainer program) is one folder: the trainer's
``__variables__.safetensors``, each pserver's ``pserver_<id>.safetensors`` (its shard and
optimizer state) and ``__checkpoint__.json``, which names the version of each file that
holds the committed checkpoint (``pserver_0.step<k>-<random>.safetensors``).

- ``convert_dist_to_sparse_program``: the trainer program with local ``lookup_table`` ops
  over the whole table (for inference in one process);
- ``load_persistables_for_inference``: a checkpoint into a local program, the table put
  together from the pservers' shards;
- ``load_persistables_for_increment``: a pserver program's blocks from a checkpoint, its
  table shard from a file of its own (to go on training from another job's state).
"""

from __future__ import annotations

import logging
import os
import re
from typing import Any

import torch

from ...dtypes import VarType
from ...framework import Program
from ...io import (
    CHECKPOINT_MARKER,
    DEFAULT_FILENAME,
    checked_checkpoint_file,
    load_persistables,
    load_vars,
    read_marker,
)
from ...scope import Scope, global_scope
from ...tensor_file import read_tensors

__all__ = ["load_persistables_for_increment", "load_persistables_for_inference",
           "convert_dist_to_sparse_program"]

_logger = logging.getLogger("parafluid.lookup_table_utils")


def convert_dist_to_sparse_program(program: Program) -> Program:
    """Replace the distributed table lookups of a transpiled trainer program (in place)
    by local ``lookup_table`` ops (``is_sparse=True``) reading the whole table, which
    becomes a persistable variable of the program again. Returns ``program`` (unchanged,
    with a warning, when it has no distributed table).

    Example::

        local = fluid.contrib.convert_dist_to_sparse_program(t.get_trainer_program())
        fluid.contrib.load_persistables_for_inference(ckpt, exe, local, "emb")
    """
    if not isinstance(program, Program):
        raise TypeError(f"convert_dist_to_sparse_program: program must be a fluid.Program, "
                        f"got {type(program).__name__}")
    table = program._distributed_lookup_table
    if not table:
        _logger.warning("convert_dist_to_sparse_program: the program has no distributed "
                        "lookup table to convert")
        return program
    for block in program.blocks:
        for i, op in enumerate(block.ops):
            if op.type not in ("distributed_lookup_table", "distributed_lookup_table_grad"):
                continue
            a = op.attrs
            gblock = program.global_block()
            var = gblock.var(table) if gblock.has_var(table) else gblock.create_var(name=table)
            var.shape, var.dtype = (int(a["height"]), int(a["width"])), a["dtype"]
            var.persistable = True
            attrs = {"is_sparse": True, "is_distributed": False,
                     "padding_idx": a["padding_idx"], "op_role": a.get("op_role", 0)}
            if op.type == "distributed_lookup_table":
                new = block._make_op("lookup_table", {"W": [table], "Ids": op.input("Ids")},
                                     {"Out": op.output("Out")}, attrs)
            else:
                new = block._make_op("lookup_table_grad",
                                     {"W": [table], "Ids": op.input("Ids"),
                                      "Out@GRAD": op.input("Out@GRAD")},
                                     {"W@GRAD": op.output("W@GRAD")}, attrs, infer=False)
            block.ops[i] = new
    program.meta.distributed_lookup_table = None
    program._bump()
    return program


def _table_from_shards(dirname: str, table: str) -> torch.Tensor:
    """The whole table from the checkpoint's pserver files, each checked against the
    checkpoint's marker: the shard each pserver holds under the table's own name, in pserver
    order (as the transpiler names them), or shards ``<table>.block<i>``."""
    pattern = re.compile(rf"^{re.escape(table)}\.block(\d+)$")
    shards: dict[int, torch.Tensor] = {}
    by_pserver: dict[int, torch.Tensor] = {}
    file_id = re.compile(r"^pserver_(\d+)\.safetensors$")
    doc = read_marker(dirname) or {"files": {}}
    # NOTE: the files the marker names (each the version of its committed checkpoint), in
    # pserver order; a folder without a marker is refused by check_checkpoint_file
    ids = sorted(int(fm.group(1)) for fm in map(file_id.match, doc["files"]) if fm)
    for pserver_id in ids or [0]:
        _, path = checked_checkpoint_file(dirname, f"pserver_{pserver_id}.safetensors")
        tensors, _ = read_tensors(path)
        for name, value in tensors.items():
            m = pattern.match(name)
            if m:
                shards[int(m.group(1))] = value
            elif name == table:
                by_pserver[pserver_id] = value
    if by_pserver and not shards:
        return torch.cat([by_pserver[i] for i in sorted(by_pserver)])
    if not shards or sorted(shards) != list(range(len(shards))):
        raise ValueError(f"load_persistables_for_inference: the pserver files of {dirname} "
                         f"hold shards {sorted(shards)} of table {table!r}; expected "
                         f"{table}.block0 .. block<n-1> (is {dirname} a pserver-mode "
                         "checkpoint of a program with this distributed table?)")
    return torch.cat([shards[i] for i in range(len(shards))])


def load_persistables_for_inference(dirname: str, executor: Any, program: Program,
                                    lookup_table_var_name: str,
                                    *, scope: Scope | None = None) -> Program:
    """Load a pserver-mode checkpoint into a local program for inference: every
    persistable but the table from the trainer's file, the table (``lookup_table_var_name``)
    put together from the pservers' shards. Returns ``program``.

    Example::

        local = fluid.contrib.convert_dist_to_sparse_program(trainer_program)
        fluid.contrib.load_persistables_for_inference("ckpt", exe, local, "emb")
    """
    if not os.path.isdir(dirname):
        raise ValueError(f"load_persistables_for_inference: no directory {dirname!r}")
    if not isinstance(program, Program):
        raise TypeError("load_persistables_for_inference: program must be a fluid.Program "
                        f"(e.g. from convert_dist_to_sparse_program), got "
                        f"{type(program).__name__}")
    gblock = program.global_block()
    if not gblock.has_var(lookup_table_var_name):
        raise ValueError(f"load_persistables_for_inference: the program has no variable "
                         f"{lookup_table_var_name!r} (the table); convert a trainer program "
                         "with convert_dist_to_sparse_program first")
    path = os.path.join(dirname, DEFAULT_FILENAME)
    if os.path.isfile(os.path.join(dirname, CHECKPOINT_MARKER)):
        _, path = checked_checkpoint_file(dirname, DEFAULT_FILENAME)
    in_file, _ = read_tensors(path)
    dense = [v for v in program.list_vars() if v.persistable and v.name in in_file
             and v.name != lookup_table_var_name and v.type != VarType.RAW]
    load_vars(executor, dirname, program, vars=dense, filename=os.path.basename(path),
              scope=scope)
    table = _table_from_shards(dirname, lookup_table_var_name)
    var = gblock.var(lookup_table_var_name)
    if var.shape is not None and tuple(table.shape) != tuple(var.shape):
        raise ValueError(f"load_persistables_for_inference: the shards of "
                         f"{lookup_table_var_name!r} make shape {list(table.shape)}, the "
                         f"program declares {list(var.shape)}")
    scope = scope if scope is not None else global_scope()
    scope.var(lookup_table_var_name).get_tensor().set(table)
    return program


def load_persistables_for_increment(dirname: str, executor: Any, program: Program,
                                    lookup_table_var: str, lookup_table_var_path: str,
                                    *, scope: Scope | None = None) -> None:
    """Load a pserver program's state to go on training: its blocks from the checkpoint in
    ``dirname`` (``fluid.io.load_persistables``), then its table shard
    ``lookup_table_var`` from the tensor file ``lookup_table_var_path`` (a file that holds a
    tensor of that name, such as another job's ``pserver_<id>.safetensors``).

    Example::

        prog, pstartup = t.get_pserver_programs(endpoint)
        exe.run(pstartup)
        fluid.contrib.load_persistables_for_increment("ckpt", exe, prog, "emb",
                                                      "old_job/pserver_0.safetensors")
    """
    if not os.path.isdir(dirname):
        raise ValueError(f"load_persistables_for_increment: no directory {dirname!r}")
    if not os.path.isfile(lookup_table_var_path):
        raise ValueError(f"load_persistables_for_increment: no file {lookup_table_var_path!r}")
    if not isinstance(program, Program):
        raise TypeError(f"load_persistables_for_increment: program must be a fluid.Program "
                        f"(a pserver program), got {type(program).__name__}")
    var = program.global_block()._find_var_recursive(lookup_table_var)
    if var is None:
        raise ValueError(f"load_persistables_for_increment: the program has no variable "
                         f"{lookup_table_var!r}; pass the table shard this pserver holds")
    load_persistables(executor, dirname, program, scope=scope)
    tensors, _ = read_tensors(lookup_table_var_path)
    if lookup_table_var not in tensors:
        raise ValueError(f"load_persistables_for_increment: {lookup_table_var_path} holds "
                         f"{sorted(tensors)}, not {lookup_table_var!r}")
    value = tensors[lookup_table_var]
    if var.shape is not None and tuple(value.shape) != tuple(var.shape):
        raise ValueError(f"load_persistables_for_increment: {lookup_table_var!r} in "
                         f"{lookup_table_var_path} has shape {list(value.shape)}, the program "
                         f"declares {list(var.shape)}")
    scope = scope if scope is not None else global_scope()
    scope.var(lookup_table_var).get_tensor().set(value)
