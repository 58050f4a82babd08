"""``fluid.io.load_program_state`` / ``set_program_state``: a checkpoint written by
``fluid.save`` as a dict of numpy arrays, and that dict put into the scope; and
``get_parameter_value`` / ``get_parameter_value_by_name``, a parameter's value fetched by an
executor.

Example::

    fluid.save(main, "out/model")
    state = fluid.io.load_program_state("out/model")   # {name: np.ndarray}
    fluid.io.set_program_state(main, state)
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from .framework import Parameter, Program, Variable, default_main_program
from .scope import global_scope
from .tensor_file import read_tensors

__all__ = ["load_program_state", "set_program_state", "get_parameter_value",
           "get_parameter_value_by_name"]


def load_program_state(model_path: str,
                       var_list: Sequence[Variable | str] | None = None) -> dict[str, np.ndarray]:
    """Read ``<model_path>.pdparams`` and, if present, ``<model_path>.pdopt`` (what
    ``fluid.save`` writes) into ``{variable name: numpy array}``.

    Args:
        model_path: the prefix given to ``fluid.save`` (``'dir/model'``).
        var_list: only these variables (or names); all by default.
    """
    params = model_path + ".pdparams"
    if not os.path.exists(params):
        raise ValueError(f"load_program_state: {params} does not exist; model_path must be "
                         "the prefix fluid.save was given (like 'dir/model')")
    state: dict[str, np.ndarray] = {}
    for path in (params, model_path + ".pdopt"):
        if os.path.exists(path):
            tensors, _ = read_tensors(path)
            state.update({k: v.numpy() for k, v in tensors.items()})
    if var_list is not None:
        wanted = [v if isinstance(v, str) else v.name for v in var_list]
        missing = [n for n in wanted if n not in state]
        if missing:
            raise ValueError(f"load_program_state: {missing} are not in {model_path}")
        state = {n: state[n] for n in wanted}
    return state


def set_program_state(program: Program, state_dict: dict[str, Any]) -> None:
    """Put the values of ``state_dict`` into the global scope, for each persistable
    variable of ``program`` it names. Shapes and dtypes must match the scope's values;
    entries naming no variable of the program are left out with a warning, as Fluid does.
    """
    if not isinstance(program, Program):
        raise TypeError(f"set_program_state: program must be a Program, got "
                        f"{type(program).__name__}")
    scope = global_scope()
    used = set()
    for var in program.list_vars():
        if not var.persistable or var.name not in state_dict:
            continue
        holder = scope.find_var(var.name)
        current = None if holder is None else holder.value
        if current is None:
            warnings.warn(f"Variable [ {var.name} ] Not found, Please make sure run startup "
                          "program", stacklevel=2)
            continue
        new = np.asarray(state_dict[var.name])
        if tuple(current.shape) != new.shape:
            raise ValueError(f"set_program_state: {var.name} has shape {list(current.shape)} "
                             f"in the scope but {list(new.shape)} in state_dict")
        value = torch.from_numpy(np.ascontiguousarray(new))
        if value.dtype != current.dtype:
            raise ValueError(f"set_program_state: {var.name} is {current.dtype} in the scope "
                             f"but {new.dtype} in state_dict")
        holder.value = value.to(current.device)
        used.add(var.name)
    unused = [k for k in state_dict if k not in used]
    if unused:
        warnings.warn("This list is not set, Because of Paramerter not found in program. "
                      f"There are: {' '.join(unused)}", stacklevel=2)


def get_parameter_value(para: Variable, executor: Any) -> np.ndarray:
    """Fluid's ``io.get_parameter_value``: the value of parameter ``para``, fetched by
    ``executor`` from a program holding just that variable (so from the executor's scope)."""
    if not isinstance(para, Parameter):
        raise TypeError(f"get_parameter_value: {getattr(para, 'name', para)!r} is not a "
                        f"Parameter (got {type(para).__name__})")
    program = Program()
    var = program.global_block().create_var(name=para.name, shape=para.shape,
                                            dtype=para.dtype, persistable=True)
    return executor.run(program, feed={}, fetch_list=[var])[0]


def get_parameter_value_by_name(name: str, executor: Any,
                                program: Program | None = None) -> np.ndarray:
    """Fluid's ``io.get_parameter_value_by_name``: ``get_parameter_value`` of the parameter
    ``name`` of ``program`` (default: the default main program)."""
    program = program if program is not None else default_main_program()
    return get_parameter_value(program.global_block().var(name), executor)
