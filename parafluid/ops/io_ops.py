"""Ops that move values between a program and the outside: Fluid's ``feed``/``fetch`` and the
``save``/``save_combine``/``load_combine`` file ops.

``feed``/``fetch``: a program saved by Fluid holds ``{Out=[x]} = feed(X=[feed]) {col=0}``
ops reading the feed holder (``FEED_MINIBATCH``) and ``{Out=[fetch]} = fetch(X=[y])
{col=0}`` ops writing the fetch holder (``FETCH_LIST``). The Executor checks them against a
run's feed dict and fetch list, as Fluid's does, and runs the program without them (feeds and
fetches are bound by name: ``feed_fetch.without_feed_fetch_ops``); a CompiledProgram over
such a program is checked at its first run and compiles the copy without them. Their kernels read or
write one column of a holder list, for a run that keeps them.

``save`` / ``save_combine`` write parafluid's variables file (safetensors with a checked
manifest, never pickle: ``tensor_file.write_tensors``), one entry per input named like its
variable, at ``file_path``; ``load`` (``ops/load.py``) and ``load_combine`` read them back by
the output variables' names. ``overwrite=False`` refuses an existing file;
``save_as_fp16``/``load_as_fp16`` convert floating values to float16. Fluid's in-memory
forms (``save_to_memory``, ``model_from_memory``) are refused with an error.

Example::

    {} = save_combine(X=[fc_0.w_0, fc_0.b_0]) {file_path=model/params, overwrite=True}
"""

from __future__ import annotations

import os
from typing import Any

import torch

from ..scope import TensorArray
from ..tensor_file import read_tensors, write_tensors
from .registry import register_op

__all__: list[str] = []


# ----------------------------------------------------------------------------- feed / fetch


def _feed(ins: dict, attrs: dict, ctx: Any) -> dict:
    holder, col = ins["X"], attrs["col"]
    if not isinstance(holder, list) or not 0 <= col < len(holder):
        size = len(holder) if isinstance(holder, list) else type(holder).__name__
        raise ValueError(f"feed: the feed holder has no column {col} (it holds {size}); run "
                         "the program with Executor.run(feed={name: value})")
    return {"Out": holder[col]}


def _fetch(ins: dict, attrs: dict, ctx: Any) -> dict:
    col = attrs["col"]
    holder = TensorArray([None] * (col + 1))
    holder[col] = ins["X"]
    return {"Out": holder}


register_op("feed", inputs=("X",), outputs=("Out",), attrs={"col": 0}, kernel=_feed,
            no_compile="reads the feed holder")
register_op("fetch", inputs=("X",), outputs=("Out",), attrs={"col": 0}, kernel=_fetch,
            side_effect=True, no_compile="writes the fetch holder")

# ----------------------------------------------------------------------------- save / load


def _check_path(op: str, attrs: dict) -> str:
    path = attrs["file_path"]
    if not path:
        raise ValueError(f"{op}: file_path is empty; give the file to write")
    if os.path.exists(path) and not attrs["overwrite"]:
        raise ValueError(f"{op}: {path} exists and overwrite=False; remove it or set "
                         "overwrite=True")
    return path


def _host_value(op: str, name: str, value: Any, fp16: bool) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{op}: variable {name!r} holds a {type(value).__name__}; only dense "
                        "tensors are saved")
    value = value.detach().to("cpu")
    if fp16 and value.is_floating_point():
        value = value.to(torch.float16)
    return value.contiguous()


def _save(ins: dict, attrs: dict, ctx: Any) -> dict:
    path = _check_path("save", attrs)
    name = ctx.op.input("X")[0]
    write_tensors(path, {name: _host_value("save", name, ins["X"], attrs["save_as_fp16"])})
    return {"kLookupTablePath": path}


# kLookupTablePath: Fluid's pserver-side slot for lookup-table checkpoints (unused here)
register_op("save", inputs=("X",), outputs=("kLookupTablePath?",),
            attrs={"file_path": "", "overwrite": True, "save_as_fp16": False},
            kernel=_save, side_effect=True, no_compile="writes a file to disk")


def _save_combine(ins: dict, attrs: dict, ctx: Any) -> dict:
    if attrs["save_to_memory"]:
        raise ValueError("save_combine: save_to_memory=True (Fluid's in-memory model bytes) "
                         "is not supported; write a file (file_path)")
    path = _check_path("save_combine", attrs)
    names = ctx.op.input("X")
    if len(set(names)) != len(names):
        raise ValueError(f"save_combine: X names a variable twice: {names}")
    write_tensors(path, {n: _host_value("save_combine", n, v, attrs["save_as_fp16"])
                         for n, v in zip(names, ins["X"])})
    return {}


register_op("save_combine", inputs=("X[]",), outputs=("Y?",),
            attrs={"file_path": "", "overwrite": True, "save_as_fp16": False,
                   "save_to_memory": False},
            kernel=_save_combine, side_effect=True, no_compile="writes a file to disk")


def _load_combine(ins: dict, attrs: dict, ctx: Any) -> dict:
    if attrs["model_from_memory"]:
        raise ValueError("load_combine: model_from_memory=True (Fluid's in-memory model "
                         "bytes) is not supported; read a file (file_path)")
    path = attrs["file_path"]
    if not path:
        raise ValueError("load_combine: file_path is empty; give a file written by "
                         "save_combine or fluid.io.save_vars")
    tensors, _ = read_tensors(path)
    names = ctx.op.output("Out")
    missing = [n for n in names if n not in tensors]
    if missing:
        raise ValueError(f"load_combine: {path} holds no variables {missing}; it holds "
                         f"{sorted(tensors)}. Name the outputs like the saved variables")
    out = []
    for n in names:
        value = tensors[n]
        if attrs["load_as_fp16"] and value.is_floating_point():
            value = value.to(torch.float16)
        out.append(value.to(ctx.device))
    return {"Out": out}


register_op("load_combine", outputs=("Out[]",),
            attrs={"file_path": "", "load_as_fp16": False, "model_from_memory": False},
            kernel=_load_combine, side_effect=True, no_compile="reads a file from disk")
