"""Saving and loading the imperative mode's state: parameters (``Layer.state_dict()``) and
optimizer state, as safetensors files with parafluid's manifest (never pickle).

- ``save_dygraph(state_dict, model_path)`` writes ``model_path.pdparams`` (parameters) or
  ``model_path.pdopt`` (an optimizer's ``state_dict()``); ``load_dygraph(model_path)``
  returns ``(params, optimizer_state)``, dicts of numpy arrays (None where the file is
  absent).
- ``save_persistables(model_dict, dirname, optimizers)`` writes the parameters and the
  optimizers' state into ``dirname/__dygraph_persistables__.safetensors``;
  ``load_persistables(dirname)`` returns ``(params, optimizer_state)``, name -> value, for
  ``Layer.load_dict`` and ``Optimizer.load`` (``restore, _ = load_persistables(d)``, as
  Fluid 1.6's).

Example::

    with fluid.dygraph.guard():
        fluid.dygraph.save_dygraph(model.state_dict(), "ckpt/mlp")
        params, _ = fluid.dygraph.load_dygraph("ckpt/mlp")
        model.set_dict(params)
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from .. import framework
from ..framework import Parameter, Variable
from ..scope import LoDTensor
from ..tensor_file import read_tensors, write_tensors
from .varbase import as_numpy

__all__ = ["save_dygraph", "load_dygraph", "save_persistables", "load_persistables"]

PERSISTABLES_FILE = "__dygraph_persistables__.safetensors"
_KIND_KEY = "parafluid.dygraph"
_OPT_NAMES_KEY = "parafluid.dygraph.optimizer_state"  # JSON list of the optimizers' names


def _tensors(state: Mapping[str, Any], where: str) -> dict[str, torch.Tensor]:
    if not isinstance(state, Mapping):
        raise TypeError(f"{where}: expected a dict of name -> variable or array, got "
                        f"{type(state).__name__}")
    out = {}
    for key, value in state.items():
        if isinstance(value, Variable):
            if getattr(value, "_value", None) is None:
                raise ValueError(f"{where}: variable {value.name!r} holds no value (a static "
                                 "Variable, or one no op has written)")
            name, array = value.name, as_numpy(value._value)
        elif isinstance(value, (np.ndarray, torch.Tensor)):
            name = key
            array = value.detach().cpu().numpy() if isinstance(value, torch.Tensor) else value
        else:
            raise TypeError(f"{where}: {key!r} holds a {type(value).__name__}; expected a "
                            "variable, a numpy array or a tensor")
        if name in out:
            raise ValueError(f"{where}: two entries are named {name!r}")
        out[name] = torch.from_numpy(np.ascontiguousarray(array).copy())
    return out


def _write(path: str, tensors: dict[str, torch.Tensor], kind: str,
           extra: dict[str, str] | None = None) -> None:
    directory = os.path.dirname(path)
    if directory:
        os.makedirs(directory, exist_ok=True)
    write_tensors(path, tensors, extra={_KIND_KEY: kind, **(extra or {})})


def _read_with_metadata(path: str, kind: str) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    tensors, metadata = read_tensors(path)
    got = metadata.get(_KIND_KEY)
    if got != kind:
        raise ValueError(f"{path}: not an imperative-mode {kind} file (it records "
                         f"{got or 'no imperative-mode kind'})")
    return {name: t.numpy() for name, t in tensors.items()}, metadata


def _read(path: str, kind: str) -> dict[str, np.ndarray]:
    return {name: a.view(LoadedArray)
            for name, a in _read_with_metadata(path, kind)[0].items()}


class LoadedArray(np.ndarray):
    """A value ``load_dygraph`` returns: a numpy array that also answers as Fluid 1.6's
    loaded core variables do (``v.numpy()``, ``v.value().get_tensor()``)."""

    def numpy(self) -> np.ndarray:
        return np.array(self, copy=True).view(np.ndarray)

    def value(self) -> LoadedArray:
        return self

    def get_tensor(self) -> LoDTensor:
        t = LoDTensor()
        t.set(self.view(np.ndarray))
        return t


def save_dygraph(state_dict: Mapping[str, Any], model_path: str) -> None:
    """Write ``state_dict`` to ``model_path.pdparams`` (when it holds parameters) or
    ``model_path.pdopt`` (an optimizer's state)."""
    if not isinstance(model_path, str) or not os.path.basename(model_path):
        raise ValueError(f"save_dygraph: model_path must be 'dirname/filename', got "
                         f"{model_path!r}")
    if not state_dict:
        raise ValueError("save_dygraph: state_dict is empty, nothing to save")
    params = isinstance(next(iter(state_dict.values())), Parameter)
    kind = "params" if params else "opt"
    _write(model_path + (".pdparams" if params else ".pdopt"),
           _tensors(state_dict, "save_dygraph"), kind)


def load_dygraph(model_path: str) -> tuple[dict[str, np.ndarray] | None,
                                           dict[str, np.ndarray] | None]:
    """``(parameters, optimizer_state)`` saved by ``save_dygraph`` under ``model_path``
    (each None when its file does not exist): name -> ``LoadedArray`` (a numpy array with
    Fluid's ``numpy()`` and ``value().get_tensor()``)."""
    params_path, opt_path = model_path + ".pdparams", model_path + ".pdopt"
    if not os.path.exists(params_path) and not os.path.exists(opt_path):
        raise FileNotFoundError(f"load_dygraph: neither {params_path} nor {opt_path} exists")
    params = _read(params_path, "params") if os.path.exists(params_path) else None
    opt = _read(opt_path, "opt") if os.path.exists(opt_path) else None
    return params, opt


def save_persistables(model_dict: Mapping[str, Any], dirname: str = "save_dir",
                      optimizers: Any = None) -> None:
    """Write the variables of ``model_dict`` (a ``Layer.state_dict()``) and the state of
    ``optimizers`` (one or a list) to ``dirname``."""
    tensors = _tensors(model_dict, "save_persistables")
    opt_names: list[str] = []
    if optimizers is not None:
        for opt in optimizers if isinstance(optimizers, (list, tuple)) else [optimizers]:
            for name, t in _tensors(opt.state_dict(), "save_persistables").items():
                if name in tensors:
                    raise ValueError(f"save_persistables: {name!r} is both a model variable "
                                     "and optimizer state")
                tensors[name] = t
                opt_names.append(name)
    _write(os.path.join(dirname, PERSISTABLES_FILE), tensors, "persistables",
           extra={_OPT_NAMES_KEY: json.dumps(sorted(opt_names))})


def load_persistables(dirname: str = "save_dir") -> tuple[dict[str, Any], dict[str, Any]]:
    """``(params, optimizer_state)``: name -> value of what ``save_persistables`` wrote,
    the model's variables and the optimizers' state apart (imperative variables inside
    ``fluid.dygraph.guard()``, numpy arrays outside), as Fluid 1.6's
    ``restore, _ = fluid.dygraph.load_persistables(dirname)``."""
    path = os.path.join(dirname, PERSISTABLES_FILE)
    if not os.path.exists(path):
        raise FileNotFoundError(f"load_persistables: {path} does not exist (write it with "
                                "fluid.dygraph.save_persistables(model.state_dict(), "
                                f"{dirname!r}))")
    arrays, metadata = _read_with_metadata(path, "persistables")
    opt_names = json.loads(metadata.get(_OPT_NAMES_KEY, "[]"))
    if not isinstance(opt_names, list):
        raise ValueError(f"{path}: malformed {_OPT_NAMES_KEY} entry {opt_names!r}")
    if framework.in_dygraph_mode():
        from .base import to_variable

        values = {name: to_variable(a, name=name) for name, a in arrays.items()}
    else:
        values = dict(arrays)
    opt = {name: values.pop(name) for name in opt_names if name in values}
    return values, opt
