"""``fluid.debugger``: a program printed as code, and a block drawn as a graphviz file.

Example::

    from parafluid import debugger
    print(debugger.pprint_program_codes(program))
    # // block-0  parent--1
    # // variables
    # var x : LOD_TENSOR [-1, 4] float32
    # ...
    # // operators
    # fc_0.tmp_0 = mul(X=x, Y=fc_0.w_0) [{x_num_col_dims=1, y_num_col_dims=1}]
    debugger.draw_block_graphviz(program.block(0), highlights=["fc.*"], path="fc.dot")

``pprint_block_codes`` hides the backward part (ops of type ``*_grad`` or touching an
``@GRAD`` variable) unless ``show_backward``. ``draw_block_graphviz`` writes the ``.dot`` file
and, when graphviz's ``dot`` program is installed, a ``.pdf`` beside it (as Fluid's does).
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
from collections.abc import Sequence
from typing import Any

from .framework import GRAD_SUFFIX, Block, Program
from .parallel.graphviz import block_to_dot

__all__ = ["pprint_program_codes", "pprint_block_codes", "repr_var", "repr_op",
           "draw_block_graphviz"]

_log = logging.getLogger(__name__)


def repr_var(var: Any) -> str:
    """One variable as ``var name : TYPE [shape] dtype`` (plus persistable / lod level)."""
    kind = getattr(getattr(var, "type", None), "name", None) or str(getattr(var, "type", ""))
    text = f"var {var.name} : {str(kind).upper()}"
    shape = getattr(var, "shape", None)
    if shape is not None:
        text += f" {list(shape)}"
    dtype = getattr(var, "dtype", None)
    if dtype is not None:
        text += " " + str(getattr(dtype, "name", dtype)).lower()
    if getattr(var, "lod_level", 0):
        text += f" lod_level={var.lod_level}"
    if getattr(var, "persistable", False):
        text += " persistable"
    return text


def repr_op(op: Any) -> str:
    """One op as ``outputs = type(Slot=arg, ...) [{attr=value, ...}]``; a fill_constant as
    ``out = value [shape=...]``."""
    outputs = [", ".join(op.output(slot)) for slot in op.output_names if op.output(slot)]
    attrs = op.all_attrs()
    if op.type == "fill_constant":
        return f"{', '.join(outputs)} = {attrs.get('value')} [shape={attrs.get('shape')}]"
    inputs = []
    for slot in op.input_names:
        args = op.input(slot)
        if args:
            inputs.append(f"{slot}={args[0] if len(args) == 1 else list(args)}")
    shown = ",".join(f"{k}={v}" for k, v in sorted(attrs.items())
                     if not k.startswith("op_") and not isinstance(v, Block))
    return f"{', '.join(outputs)} = {op.type}({', '.join(inputs)}) [{{{shown}}}]"


def _is_backward_op(op: Any) -> bool:
    if op.type.endswith("_grad"):
        return True
    return any(GRAD_SUFFIX in n for n in list(op.input_arg_names) + list(op.output_arg_names))


def pprint_block_codes(block: Block, show_backward: bool = False) -> str:
    """The variables and ops of ``block`` as text, the backward part left out unless
    ``show_backward``."""
    if not isinstance(block, Block):
        raise TypeError(f"pprint_block_codes: block must be a Block, got "
                        f"{type(block).__name__}")
    variables = [repr_var(v) for name, v in block.vars.items()
                 if show_backward or GRAD_SUFFIX not in name]
    ops = [repr_op(op) for op in block.ops if show_backward or not _is_backward_op(op)]
    return (f"// block-{block.idx}  parent-{block.parent_idx}\n// variables\n"
            + "\n".join(variables) + "\n\n// operators\n" + "\n".join(ops) + "\n")


def pprint_program_codes(program: Program) -> str:
    """``pprint_block_codes`` of every block of ``program``, one after the other."""
    if not isinstance(program, Program):
        raise TypeError(f"pprint_program_codes: program must be a Program, got "
                        f"{type(program).__name__}")
    return "\n".join(pprint_block_codes(b) for b in program.blocks)


def draw_block_graphviz(block: Block, highlights: Sequence[str] | None = None,
                        path: str = "./temp.dot") -> str:
    """Write ``block`` as a graphviz file at ``path``: ops as boxes, variables as ellipses,
    persistable ones bold, and ops or variables whose name matches one of the regular
    expressions ``highlights`` in red. Returns the ``.pdf`` path that ``dot`` renders when
    graphviz is installed (within 60 s), else the ``.dot`` path."""
    if not isinstance(block, Block):
        raise TypeError(f"draw_block_graphviz: block must be a Block, got "
                        f"{type(block).__name__}")
    patterns = []
    for p in highlights or ():
        if not isinstance(p, str):
            raise TypeError(f"draw_block_graphviz: highlights must be strings (regular "
                            f"expressions), got {type(p).__name__}")
        patterns.append(re.compile(p))
    text = block_to_dot(block, highlight=lambda name: any(p.match(name) for p in patterns))
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    dot = shutil.which("dot")
    if dot is None:
        return path
    image = os.path.splitext(path)[0] + ".pdf"
    try:
        subprocess.run([dot, "-Tpdf", path, "-o", image], stdin=subprocess.DEVNULL,
                       capture_output=True, timeout=60, check=True)
    except (subprocess.SubprocessError, OSError) as e:
        _log.warning("graphviz could not render %s (%s); the .dot file is written", path, e)
        return path
    _log.warning("write block debug graph to %s", image)
    return image
