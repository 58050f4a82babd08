"""Checkpoints and inference models (``fluid.io``), plus the data-feeding helpers.

Files on disk:

- Variables go into ONE safetensors file per save (default name ``__variables__.safetensors``,
  or ``filename=``/``params_filename=``), not one file per variable as Fluid did: one file can
  be replaced atomically, so a crash mid-save never leaves a half-new checkpoint. Its
  metadata holds a JSON manifest (format version, and each variable's name, shape, dtype and
  CRC-32), checked on load.
- An inference model is a program file (default ``__model__``) in the IR serialization
  format (JSON behind a header) with the feed and fetch names added, next to the variables
  file of the parameters it needs.
- Nothing is ever pickled: loading a file from an untrusted source cannot run code.

Every file is written to a temporary name in the same directory, flushed to disk, then
renamed over the old one. The temporary name holds the writer's host, pid and start time, so
that the next save to the directory can remove what a killed writer left, and only that.
A variables file without its manifest, or with an entry lacking its checksum, never loads.

Example::

    fluid.io.save_persistables(exe, "ckpt", main_program)       # parameters + optimizer state
    fluid.io.load_persistables(exe, "ckpt", main_program)
    fluid.io.save_inference_model("model", ["img"], [prediction], exe)
    program, feeds, fetches = fluid.io.load_inference_model("model", exe)
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch

from .atomic_write import write_bytes, write_files
from .dataio.dataloader import DataLoader, PyReader
from .dataio.multiprocess_reader import multiprocess_reader
from .dataio.reader import (
    Fake,
    PipeReader,
    batch,
    buffered,
    cache,
    chain,
    compose,
    firstn,
    map_readers,
    shuffle,
    xmap_readers,
)
from .distributed.checkpoint import (  # noqa: F401  (the pserver checkpoint files' writers)
    CHECKPOINT_FORMAT,
    CHECKPOINT_MARKER,
    check_checkpoint_file,
    checked_checkpoint_file,
    commit_checkpoint,
    committed_file,
    file_record,
    is_version_of,
    previous_checkpoint,
    pserver_file_name,
    read_marker,
    remove_other_versions,
    versioned_name,
    write_pserver_checkpoint,
    write_pserver_emergency_checkpoint,
)
from .distributed.checkpoint import ROLE_KEY as _ROLE_KEY
from .distributed.checkpoint import STEP_KEY as _STEP_KEY
from .dtypes import VarType
from .framework import Parameter, Program, Variable, default_main_program
from .ops.registry import shapes_compatible
from .ops.rpc import pserver_checkpoint_filename
from .passes.prune import prune
from .program_state import (
    get_parameter_value,
    get_parameter_value_by_name,
    load_program_state,
    set_program_state,
)
from .scope import Scope, global_scope
from .serialization import _MAGIC, parse_json, program_from_dict, program_to_dict
from .tensor_file import (  # noqa: F401  (VARS_FORMAT, _crc: io's names for the format)
    _MANIFEST_KEY,
    VARS_FORMAT,
    _crc,
    _dtype_name,
    _meta_str,
    _open_for_read,
    _quoted,
    encode_tensors,
    read_tensors,
    write_tensors,
)
from .tensor_file import scope_values as _values

__all__ = ["save_vars", "save_params", "save_persistables", "load_vars", "load_params",
           "load_persistables", "save_inference_model", "load_inference_model",
           "is_parameter", "is_persistable", "DataLoader", "PyReader", "batch", "shuffle",
           "buffered", "chain", "compose", "firstn", "map_readers", "cache", "xmap_readers",
           "multiprocess_reader", "PipeReader", "Fake", "save", "load", "DEFAULT_FILENAME",
           "MODEL_FILENAME", "read_tensors", "write_tensors", "encode_model", "decode_model",
           "pserver_checkpoint_filename", "write_pserver_checkpoint", "check_checkpoint_file",
           "checked_checkpoint_file",
           "CHECKPOINT_MARKER", "load_program_state", "set_program_state",
           "get_parameter_value", "get_parameter_value_by_name"]

DEFAULT_FILENAME = "__variables__.safetensors"
MODEL_FILENAME = "__model__"
_SAVE_ID_KEY = "parafluid.save_id"  # fluid.save: the one save its .pdparams and .pdopt are of
#: the most iterations a loop (``while``) of a program read from a model file may run
MODEL_LOOP_LIMIT = 1_000_000
# NOTE: ops that talk to the outside (the registry's side_effect: RPC, collectives, files,
# the console, Python callbacks, readers) may not come from a model file; these two only
# move the model's own inputs and outputs
_MODEL_IO_OPS = frozenset({"feed", "fetch"})


def is_parameter(var: Variable) -> bool:
    """True for trainable-weight Variables (``Parameter``s)."""
    return isinstance(var, Parameter)


def is_persistable(var: Variable) -> bool:
    """True for Variables kept in the scope across runs (parameters, optimizer state, LR);
    as Fluid's, not the feed and fetch lists nor readers (and their queues), which hold no
    tensor to save."""
    if var.type in (VarType.FEED_MINIBATCH, VarType.FETCH_LIST, VarType.READER, VarType.RAW):
        return False
    return bool(var.persistable)


# ---------------------------------------------------------------------- saving variables


def save_vars(executor: Any, dirname: str, main_program: Program | None = None,
              vars: Sequence[Variable | str] | None = None,
              predicate: Callable[[Variable], bool] | None = None,
              filename: str | None = None, *, scope: Scope | None = None) -> str:
    """Save variables of ``main_program`` from the scope into ``dirname/filename``.

    Args:
        executor: the Executor that ran the program (kept for Fluid compatibility).
        dirname: directory to write to (created if needed).
        main_program: program whose variables to save (default: the default main program).
        vars: the Variables (or names) to save; else those for which ``predicate`` holds.
        predicate: e.g. ``fluid.io.is_persistable``; used when ``vars`` is None.
        filename: the file inside ``dirname`` (default ``__variables__.safetensors``).
        scope: where the values are (default: ``fluid.global_scope()``).

    Returns the path written. Example::

        fluid.io.save_vars(exe, "ckpt", main,
                           predicate=lambda v: v.persistable and v.name.startswith("fc"))
    """
    program = _as_program(main_program, "save_vars")
    chosen = _select_vars(program, vars, predicate, "save_vars")
    _warn_if_none(chosen)
    tensors = _values(scope if scope is not None else global_scope(), chosen, "save_vars")
    path = os.path.join(dirname, filename or DEFAULT_FILENAME)
    write_tensors(path, tensors)
    return path


def _warn_if_none(chosen: Sequence[Any]) -> None:
    if not chosen:  # Fluid's words; the file is written all the same
        warnings.warn("no variable in your model, please ensure there are any variables in "
                      "your model to save", stacklevel=3)


def save_params(executor: Any, dirname: str, main_program: Program | None = None,
                filename: str | None = None, *, scope: Scope | None = None) -> str:
    """Save all parameters of ``main_program`` (see ``save_vars``)."""
    return save_vars(executor, dirname, main_program, predicate=is_parameter,
                     filename=filename, scope=scope)


def save_persistables(executor: Any, dirname: str, main_program: Program | None = None,
                      filename: str | None = None, *, scope: Scope | None = None) -> str:
    """Save all persistable variables: parameters, optimizer state, learning rate, counters.

    On a transpiled pserver-mode trainer program (call it from trainer 0 between steps), the
    checkpoint is one step of the whole job: the trainer's file holds only what the trainer
    program itself computes (the parameters it received, not the optimizer state, which
    lives on the pservers); every pserver saves its parameter blocks and optimizer state
    into ``dirname`` (on its own file system, inside its checkpoint root) as a version of
    ``pserver_<id>.safetensors``; every file records the step; and ``__checkpoint__.json``,
    renamed into place last, names the step and each file's version and SHA-256. A folder
    without it, or whose files disagree with it, does not load. The files of the checkpoint
    committed before stay untouched until the new marker is in place: a save killed at any
    point leaves the previous checkpoint loadable (see ``distributed.checkpoint``).

    Example::

        fluid.io.save_persistables(exe, "ckpt", fluid.default_main_program())
    """
    program = _as_program(main_program, "save_persistables")
    # NOTE: a pserver program records its job's pservers too (to name a dead one): only a
    # trainer program saves through the pservers
    pservers = [] if pserver_checkpoint_filename(program) else program.meta.pserver_endpoints
    if not pservers:
        return save_vars(executor, dirname, main_program, predicate=is_persistable,
                         filename=filename, scope=scope)
    # A transpiled pserver-mode trainer program: the parameters and optimizer state live on
    # the pservers; each saves its own blocks into dirname (Fluid's checkpoint_notify).
    from .distributed.ps_registry import client_pool

    pool = client_pool(program.meta.trainer_id or 0)
    step = pool.step(pservers)
    filename = filename or DEFAULT_FILENAME
    os.makedirs(dirname, exist_ok=True)
    previous = previous_checkpoint(dirname)
    scope = scope if scope is not None else global_scope()
    written = {n for op in program.global_block().ops for n in op.output_arg_names}
    chosen = [v for v in program.list_vars() if v.persistable and v.name in written
              and scope.find_var(v.name) is not None and scope.find_var(v.name).value is not None]
    tensors = _values(scope, list({v.name: v for v in chosen}.values()), "save_persistables")
    if previous is not None:  # what earlier saves left uncommitted goes; the committed stays
        remove_other_versions(dirname, filename, {previous.get(filename, filename)})
    path = os.path.join(dirname, versioned_name(filename, step))
    write_tensors(path, tensors, {_STEP_KEY: str(step), _ROLE_KEY: "trainer"})
    records = [file_record(path, step, filename)]
    # each pserver keeps the file of the committed checkpoint (on its own file system it
    # cannot read this marker): its name goes with the request
    keep = {ep: (previous or {}).get(pserver_file_name(i), "") for i, ep in enumerate(pservers)}
    replies = pool.checkpoint_notify(os.path.abspath(dirname), pservers, keep=keep)
    for ep, record in zip(pservers, replies):
        if record["step"] != step:
            raise RuntimeError(f"save_persistables: pserver {ep} saved step {record['step']}, "
                               f"trainer {program.meta.trainer_id or 0} is at step {step}; the "
                               f"checkpoint in {dirname} is not committed")
        if not is_version_of(record.get("path", record["file"]), record["file"]):
            raise RuntimeError(f"save_persistables: pserver {ep} saved {record['file']!r} as "
                               f"{record.get('path')!r}, not a version of it; the checkpoint "
                               f"in {dirname} is not committed")
        records.append(record)
    names = [r["file"] for r in records]
    if len(set(names)) != len(names):
        raise RuntimeError(f"save_persistables: two files of the checkpoint have one name: "
                           f"{names}")
    commit_checkpoint(dirname, step, records)
    return path


# ---------------------------------------------------------------------- loading variables


def load_vars(executor: Any, dirname: str, main_program: Program | None = None,
              vars: Sequence[Variable | str] | None = None,
              predicate: Callable[[Variable], bool] | None = None,
              filename: str | None = None, *, scope: Scope | None = None) -> None:
    """Load variables of ``main_program`` from ``dirname/filename`` into the scope.

    Every selected variable must be in the file with the program's shape and dtype; if not,
    nothing is loaded and the ValueError lists the missing, mismatched and unexpected
    (in the file, not in the program) variables. Extra file entries that the program also
    has but that were not selected are skipped (loading parameters from a file that also
    holds optimizer state is fine). A truncated or corrupt file is a ValueError naming it.

    Example::

        fluid.io.load_vars(exe, "ckpt", main, predicate=fluid.io.is_parameter)
    """
    program = _as_program(main_program, "load_vars")
    chosen = _select_vars(program, vars, predicate, "load_vars")
    path = _committed_path(dirname, filename or DEFAULT_FILENAME)
    tensors, _ = read_tensors(path)
    _check_against_program(path, tensors, chosen, program)
    _put_in_scope(scope, executor, chosen, tensors)


def _committed_path(dirname: str, filename: str) -> str:
    """``dirname/filename``, or the version of it that a checkpoint marker there names (a
    pserver-mode checkpoint's files are versioned; readers follow the marker)."""
    path = os.path.join(dirname, filename)
    if os.path.exists(path) or not os.path.exists(os.path.join(dirname, CHECKPOINT_MARKER)):
        return path
    doc = read_marker(dirname)
    name = committed_file(doc, filename) if doc is not None else None
    return os.path.join(dirname, name) if name else path


def load_params(executor: Any, dirname: str, main_program: Program | None = None,
                filename: str | None = None, *, scope: Scope | None = None) -> None:
    """Load all parameters of ``main_program`` (see ``load_vars``)."""
    load_vars(executor, dirname, main_program, predicate=is_parameter, filename=filename,
              scope=scope)


def load_persistables(executor: Any, dirname: str, main_program: Program | None = None,
                      filename: str | None = None, *, scope: Scope | None = None) -> None:
    """Load all persistable variables of ``main_program`` (see ``load_vars``).

    A pserver program (pserver mode) reads ``pserver_<id>.safetensors``, the file its pserver
    wrote when trainer 0 saved a checkpoint: a restarted pserver runs its startup program,
    then this, then serves.

    Example::

        fluid.io.load_persistables(exe, "ckpt", fluid.default_main_program())
    """
    program = _as_program(main_program, "load_persistables")
    ps_file = pserver_checkpoint_filename(program)
    predicate = is_persistable
    if ps_file is not None or program.meta.pserver_endpoints:
        # a pserver-mode checkpoint: one committed step, or nothing
        # NOTE: exactly the version the marker names (and this check read) is loaded
        filename = os.path.basename(
            checked_checkpoint_file(dirname, filename or ps_file or DEFAULT_FILENAME)[1])
        if ps_file is None:  # the trainer's file holds what its program computes
            written = {n for op in program.global_block().ops for n in op.output_arg_names}
            predicate = lambda v: v.persistable and v.name in written  # noqa: E731
    load_vars(executor, dirname, main_program, predicate=predicate, filename=filename,
              scope=scope)


# ---------------------------------------------------------------------- inference models


def _is_state(var: Variable) -> bool:
    return is_persistable(var) and not is_parameter(var)


def save(program: Program, model_path: str) -> None:
    """Fluid 1.6's ``fluid.save``: the parameters of ``program`` to
    ``<model_path>.pdparams``, its other persistables (optimizer state, learning rate,
    counters) to ``<model_path>.pdopt`` and the program to ``<model_path>.pdmodel``.

    Example::

        fluid.save(main, "out/model")      # out/model.pdparams, .pdopt, .pdmodel
        fluid.load(main, "out/model", exe)
    """
    dirname, base = _model_path(model_path, "save")
    program = _as_program(program, "save")
    scope, stamp = global_scope(), {_SAVE_ID_KEY: secrets.token_hex(8)}
    # NOTE: the three files are one save: all are written before any replaces its old one
    # (a save killed while writing leaves the previous one whole), and the parameters and
    # the state carry the save's id, so that load refuses a pair of two saves
    write_files({os.path.join(dirname, base + ext): encode_tensors(_values(
        scope, _select_vars(program, None, pred, "save"), "save"), stamp)
        for ext, pred in ((".pdparams", is_parameter), (".pdopt", _is_state))} |
        {model_path + ".pdmodel": program.serialize_to_string()})


def load(program: Program, model_path: str, executor: Any = None) -> None:
    """Fluid 1.6's ``fluid.load``: the values ``fluid.save`` wrote into the scope (the
    ``.pdopt`` file only if it exists, as Fluid). Shapes and dtypes must match ``program``."""
    dirname, base = _model_path(model_path, "load")
    program = _as_program(program, "load")
    params, opt = (os.path.join(dirname, base + ext) for ext in (".pdparams", ".pdopt"))
    if os.path.exists(params) and os.path.exists(opt):
        ids = [read_tensors(p)[1].get(_SAVE_ID_KEY) for p in (params, opt)]
        if None not in ids and ids[0] != ids[1]:
            raise ValueError(f"load: {params} and {opt} were written by two different saves "
                             "(one was killed between replacing them): they do not load "
                             "together")
    load_vars(executor, dirname, program, predicate=is_parameter, filename=base + ".pdparams")
    if os.path.exists(opt):
        load_vars(executor, dirname, program, predicate=_is_state, filename=base + ".pdopt")


def _model_path(model_path: str, where: str) -> tuple[str, str]:
    if not isinstance(model_path, str) or not os.path.basename(model_path):
        raise ValueError(f"{where}: model_path must name a file prefix like 'dir/model', got "
                         f"{model_path!r}")
    dirname, base = os.path.split(model_path)
    return dirname or ".", base


def save_inference_model(dirname: str, feeded_var_names: str | Sequence[str],
                         target_vars: Variable | Sequence[Variable], executor: Any,
                         main_program: Program | None = None, model_filename: str | None = None,
                         params_filename: str | None = None, export_for_deployment: bool = True,
                         program_only: bool = False, *, scope: Scope | None = None) -> list[str]:
    """Save the program pruned to compute ``target_vars`` from the feeds, and its parameters.

    The pruned program (``prune.prune``: a ``clone(for_test=True)`` keeping only the ops the
    targets need, without the ``read`` ops of ``py_reader``s: the model is fed) goes to
    ``dirname/model_filename`` (default ``__model__``), the persistable variables it reads to
    ``dirname/params_filename`` (default ``__variables__.safetensors``).
    With ``export_for_deployment=False`` the whole, unpruned program is written to
    ``<model_filename>.main_program`` instead (as Fluid did) with all its persistables; then
    ``feeded_var_names`` and ``target_vars`` may be empty lists.
    ``program_only=True`` writes no variables. As in Fluid 1.6, each target ``i`` is saved
    behind a ``scale`` by 1 named ``save_infer_model/scale_i`` (the caller's program is not
    changed), so the loaded model's fetch targets carry those names. Returns them.

    Example::

        fluid.io.save_inference_model("model", ["img"], [prediction], exe)
    """
    if isinstance(feeded_var_names, str):
        feeded_var_names = [feeded_var_names]
    if not isinstance(feeded_var_names, (list, tuple)) or \
            not all(isinstance(n, str) for n in feeded_var_names):
        raise TypeError("save_inference_model: feeded_var_names must be a name or a list of "
                        f"names, got {feeded_var_names!r}")
    if isinstance(target_vars, Variable):
        target_vars = [target_vars]
    # NOTE: as in Fluid, only a deployment export needs targets; the whole program may be
    # saved with none (and any program with no feeds).
    if not isinstance(target_vars, (list, tuple)) or \
            (export_for_deployment and not target_vars) or \
            not all(isinstance(v, Variable) for v in target_vars):
        need = "a non-empty list" if export_for_deployment else "a list"
        raise TypeError(f"save_inference_model: target_vars must be a Variable or {need} of "
                        f"Variables, got {target_vars!r}")
    program = _as_program(main_program, "save_inference_model")
    # NOTE: as Fluid's: the auc op's statistics are saved as they are; Fluid's words
    if any(op.type == "auc" for op in program.global_block().ops):
        warnings.warn("please ensure that you have set the auc states to zeros before saving "
                      "inference model", stacklevel=2)
    program, fetches = _with_target_scales(program, target_vars)
    feeds = list(feeded_var_names)
    model_name = model_filename or MODEL_FILENAME
    if export_for_deployment:
        model = prune(_without_read_ops(program), fetches, feeds)
    else:
        model, model_name = program.clone(), model_name + ".main_program"
    model_bytes = encode_model(model, feeds, fetches)
    if not program_only:
        chosen = _select_vars(model, None, is_persistable, "save_inference_model")
        _warn_if_none(chosen)
        scope = scope if scope is not None else global_scope()
        # The parameters are written first and name the model they belong to, so a crash
        # between the two renames is detected on load instead of mixing two saves.
        digest = hashlib.sha256(model_bytes).hexdigest()
        tensors = _values(scope, chosen, "save_inference_model")
        write_tensors(os.path.join(dirname, params_filename or DEFAULT_FILENAME), tensors,
                      extra={"program_sha256": digest})
    write_bytes(os.path.join(dirname, model_name), model_bytes)
    return fetches


def _with_target_scales(program: Program, targets: Sequence[Variable]
                        ) -> tuple[Program, list[str]]:
    """A copy of ``program`` whose target ``i`` is also ``save_infer_model/scale_i``."""
    program = program.clone()
    block = program.global_block()
    names = []
    for i, var in enumerate(targets):
        name = f"save_infer_model/scale_{i}"
        src = block._find_var_recursive(var.name)
        if src is None:
            raise ValueError(f"save_inference_model: target {var.name!r} is not a variable of "
                             "main_program (the default main program when none is given); "
                             "pass the program that built it as main_program=")
        out = block.create_var(name=name, dtype=src.dtype, shape=src.shape)
        block.append_op("scale", inputs={"X": [src]}, outputs={"Out": [out]},
                        attrs={"scale": 1.0, "bias": 0.0, "bias_after_scale": True})
        names.append(name)
    return program, names


_READER_OPS = frozenset({"read", "create_double_buffer_reader", "create_py_reader"})


def _without_read_ops(program: Program) -> Program:
    """``program`` (a copy) without its reader ops and variables: a deployed model is fed,
    as Fluid's ``_inference_optimize(prune_read_op=True)`` makes it."""
    block = program.global_block()
    kept = [op for op in block.ops if op.type not in _READER_OPS]
    if len(kept) != len(block.ops):
        block.ops = kept
        for name in [n for n, v in block.vars.items() if v.type == VarType.READER]:
            del block.vars[name]
        program._bump()
    return program


def load_inference_model(dirname: str, executor: Any, model_filename: str | None = None,
                         params_filename: str | None = None, pserver_endpoints: Any = None,
                         *, scope: Scope | None = None) -> list[Any]:
    """Load a model saved by ``save_inference_model``; its parameters go into the scope.

    Returns ``[program, feed_target_names, fetch_targets]`` (``fetch_targets`` are Variables
    of ``program``), as Fluid does.

    Example::

        program, feeds, fetches = fluid.io.load_inference_model("model", exe)
        out, = exe.run(program, feed={feeds[0]: x}, fetch_list=fetches)
    """
    if pserver_endpoints is not None:
        raise ValueError("load_inference_model: pserver_endpoints (distributed lookup tables) "
                         "is not supported; load the model on one machine")
    model_path = os.path.join(dirname, model_filename or MODEL_FILENAME)
    with _open_for_read(model_path, "inference model") as f:
        data = f.read()
    program, feeds, fetches = decode_model(data, model_path)
    params_path = os.path.join(dirname, params_filename or DEFAULT_FILENAME)
    chosen = _select_vars(program, None, is_persistable, "load_inference_model")
    if chosen:
        tensors, meta = read_tensors(params_path)
        digest = hashlib.sha256(data).hexdigest()
        saved_for = meta.get("program_sha256")
        if saved_for is None:
            raise ValueError(f"load_inference_model: {params_path} does not name the model it "
                             "belongs to (no 'program_sha256' in its metadata): it was not "
                             "written by save_inference_model, or its metadata was edited; "
                             "save the model again")
        if saved_for != digest:
            raise ValueError(f"load_inference_model: {params_path} was saved with a different "
                             f"model than {model_path} (a save was interrupted, or files from "
                             "two saves were mixed); save the model again")
        _check_against_program(params_path, tensors, chosen, program)
        _put_in_scope(scope, executor, chosen, tensors)
    block = program.global_block()
    return [program, feeds, [block.var(n) for n in fetches]]


def encode_model(program: Program, feeds: Sequence[str], fetches: Sequence[str]) -> bytes:
    """The program in the IR serialization format with the feed/fetch names added."""
    doc = program_to_dict(program)
    doc["inference"] = {"feed_target_names": list(feeds), "fetch_target_names": list(fetches)}
    return _MAGIC + json.dumps(doc, sort_keys=True, separators=(",", ":")).encode("utf-8")


_IO_KEYS = ("feed_target_names", "fetch_target_names")


def _name_list(io_names: dict[str, Any], key: str) -> list[str]:
    names = io_names.get(key)
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        got = type(names).__name__ if not isinstance(names, list) else "a list holding " + \
            ", ".join(sorted({type(n).__name__ for n in names}))
        raise ValueError(f"inference.{key}: expected a list of variable names, got {got}")
    return names


def decode_model(data: bytes, where: str = "<bytes>") -> tuple[Program, list[str], list[str]]:
    """Inverse of ``encode_model``; a ValueError naming ``where`` if the bytes are not one."""
    if not data.startswith(_MAGIC):
        raise ValueError(f"{where}: not a parafluid model file (header missing: truncated, "
                         "or a file of another format)")
    try:
        doc = parse_json(data[len(_MAGIC):])
        io_names = doc.get("inference") if isinstance(doc, dict) else None
        if not isinstance(io_names, dict):
            raise ValueError("no feed/fetch names (a program, not an inference model)")
        feeds, fetches = (_name_list(io_names, key) for key in _IO_KEYS)
        if set(io_names) != set(_IO_KEYS):
            raise ValueError(f"'inference' holds {sorted(io_names)}, expected {list(_IO_KEYS)}")
        program = program_from_dict(doc, extra_keys=("inference",))
    except ValueError as e:  # NOTE: the checks above and program_from_dict raise only these
        raise ValueError(f"{where}: corrupt or truncated model file: {e}") from None
    block = program.global_block()
    for name in feeds + fetches:
        if block._find_var_recursive(name) is None:
            raise ValueError(f"{where}: feed/fetch name {name!r} is not a variable of the model")
    _check_model_ops(program, where)
    program._loop_limit = MODEL_LOOP_LIMIT
    return program, feeds, fetches


def _check_model_ops(program: Program, where: str) -> None:
    """A model file is data: its program may only compute. An op that reaches the network,
    files, the console or Python code (RPC, collectives, save/load, print, py_func,
    readers) is refused here, before anything runs."""
    from .ops.registry import get_op_def

    for block in program.blocks:
        for i, op in enumerate(block.ops):
            if op.type not in _MODEL_IO_OPS and get_op_def(op.type).side_effect:
                raise ValueError(
                    f"{where}: op #{i} of block {block.idx} is {op.type!r}, which acts outside "
                    "the computation (network, files, console or Python code); a model file "
                    "may hold only ops that compute, so it is not loaded")


# ---------------------------------------------------------------------- files


# ---------------------------------------------------------------------- helpers


def _as_program(program: Any, where: str) -> Program:
    if program is None:
        return default_main_program()
    program = getattr(program, "_program", program)  # a CompiledProgram wraps one
    if not isinstance(program, Program):
        raise TypeError(f"{where}: main_program must be a Program, got {type(program).__name__}")
    return program


def _select_vars(program: Program, vars: Any, predicate: Any, where: str) -> list[Variable]:
    if vars is None:
        if predicate is None:
            raise ValueError(f"{where}: give vars= or predicate= (e.g. fluid.io.is_persistable)")
        seen: dict[str, Variable] = {}
        for var in program.list_vars():
            if var.name not in seen and predicate(var):
                seen[var.name] = var
        return list(seen.values())
    if isinstance(vars, (Variable, str)):
        vars = [vars]
    chosen = []
    block = program.global_block()
    for v in vars:
        if isinstance(v, str):
            found = block._find_var_recursive(v)
            if found is None:
                raise ValueError(f"{where}: {v!r} is not a variable of the program")
            v = found
        elif not isinstance(v, Variable):
            raise TypeError(f"{where}: vars must be Variables or names, got {type(v).__name__}")
        chosen.append(v)
    return chosen


def _put_in_scope(scope: Scope | None, executor: Any, chosen: list[Variable],
                  tensors: dict[str, torch.Tensor]) -> None:
    scope = scope if scope is not None else global_scope()
    device = getattr(executor, "device", torch.device("cpu"))
    # NOTE: every copy to the device is made before the scope changes: a copy that fails
    # (out of device memory) must leave the scope as it was, not half loaded.
    moved = {var.name: tensors[var.name].to(device) for var in chosen}
    for name, value in moved.items():
        holder = scope.find_var(name) or scope.var(name)
        holder.value = value


def _check_against_program(path: str, tensors: dict[str, torch.Tensor],
                           chosen: list[Variable], program: Program) -> None:
    missing = sorted(v.name for v in chosen if v.name not in tensors)
    mismatched = []
    for var in chosen:
        t = tensors.get(var.name)
        if t is None:
            continue
        dtype = _dtype_name(t.dtype)
        if (var.dtype is not None and dtype != var.dtype) or \
                (var.shape is not None and not shapes_compatible(var.shape, t.shape)):
            mismatched.append(f"{var.name}: the file has {_meta_str(t)}, the program expects "
                              f"{var.dtype}{list(var.shape or [])}")
    if not missing and not mismatched:
        return
    known = {v.name for v in program.list_vars()}
    unexpected = sorted(n for n in tensors if n not in known)
    lines = [f"{path} does not match the program:"]
    if missing:
        lines.append(f"  missing from the file: {_quoted(missing)}")
    if mismatched:
        lines.append("  shape/dtype mismatch: " + "; ".join(mismatched))
    if unexpected:
        lines.append(f"  in the file but not in the program: {_quoted(unexpected)}")
    lines.append("  (was the checkpoint saved from a different model or program?)")
    raise ValueError("\n".join(lines))


def __getattr__(name: str) -> object:
    # Fluid 1.6 names left out here import and fail on use, saying what to use instead
    from .compat import missing_attribute

    return missing_attribute("io", name, __all__)
