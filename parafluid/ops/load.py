"""``load`` (Fluid 1.6's load op): one variable's value read from a variables file.

``file_path`` names a file written by ``fluid.io.save_vars`` / ``save_params`` /
``save_persistables`` or ``fluid.save`` (``.pdparams`` / ``.pdopt``): safetensors with a
checked manifest (``tensor_file.read_tensors``), never pickle. ``Out`` gets the entry named
like the ``Out`` variable, or the file's only entry; ``load_as_fp16`` converts it to
float16. A side-effect op: it runs whether or not its output is read.
"""

from __future__ import annotations

from typing import Any

import torch

from ..tensor_file import read_tensors
from .registry import register_op

__all__: list[str] = []


def _load(ins: dict, attrs: dict, ctx: Any) -> dict:
    path, name = attrs["file_path"], ctx.op.output("Out")[0]
    if not path:
        raise ValueError(f"load: file_path is empty for variable {name!r}; pass the path of a "
                         "file written by fluid.io.save_vars or fluid.save")
    tensors, _ = read_tensors(path)
    if name in tensors:
        value = tensors[name]
    elif len(tensors) == 1:
        value = next(iter(tensors.values()))
    else:
        raise ValueError(f"load: {path} holds no variable {name!r}; it holds "
                         f"{sorted(tensors)}. Name the output variable like the saved one")
    if attrs["load_as_fp16"]:
        value = value.to(torch.float16)
    return {"Out": value.to(ctx.device)}


register_op("load", outputs=("Out",), attrs={"file_path": "", "load_as_fp16": False},
            kernel=_load, side_effect=True,
            no_compile="reads a file from disk")
