"""Program <-> bytes, without pickle: a versioned JSON document.

Loading never runs code: it only builds Blocks, Variables and Operators from plain data and
checks every op type against the registry. Floats round-trip exactly (``repr`` precision).

Example::

    data = program.serialize_to_string()
    same = fluid.Program.parse_from_string(data)
    assert str(same) == str(program)
"""

from __future__ import annotations

import json
from typing import Any

from .framework import Block, Operator, Parameter, Program, Variable
from .ops.registry import get_op_def

__all__ = ["dumps", "loads", "program_to_dict", "program_from_dict", "FORMAT"]

FORMAT = "parafluid.program/1"
_MAGIC = b"PFPROG1\n"


def _attr_to_json(v: Any) -> Any:
    if isinstance(v, Block):
        return {"__block__": v.idx}
    if isinstance(v, list):
        return [_attr_to_json(x) for x in v]
    if isinstance(v, dict):
        raise TypeError("dict-valued op attributes are not serializable")
    return v


def _attr_from_json(v: Any, program: Program) -> Any:
    if isinstance(v, dict):
        if set(v) != {"__block__"} or not isinstance(v["__block__"], int):
            raise ValueError(f"malformed attribute value {v!r}")
        return program.block(v["__block__"])
    if isinstance(v, list):
        return [_attr_from_json(x, program) for x in v]
    return v


def program_to_dict(program: Program) -> dict[str, Any]:
    blocks = []
    for b in program.blocks:
        blocks.append({
            "idx": b.idx, "parent_idx": b.parent_idx,
            "vars": [v._to_dict() for v in b.vars.values()],
            "ops": [{"type": op.type, "inputs": op.inputs, "outputs": op.outputs,
                     "attrs": {k: _attr_to_json(a) for k, a in op.attrs.items()},
                     "callsite": op.callsite} for op in b.ops],
        })
    return {"format": FORMAT, "random_seed": program.random_seed, "blocks": blocks}


_VAR_KEYS = {"name", "shape", "dtype", "type", "lod_level", "persistable", "stop_gradient",
             "is_data", "need_check_feed"}
_PARAM_KEYS = {"trainable", "optimize_attr", "do_model_average"}


def program_from_dict(data: dict[str, Any]) -> Program:
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        got = data.get("format") if isinstance(data, dict) else type(data).__name__
        raise ValueError(f"not a parafluid program: expected format {FORMAT!r}, got {got!r}")
    program = Program()
    program.random_seed = int(data.get("random_seed", 0))
    blocks = data["blocks"]
    for i, bd in enumerate(blocks):
        if bd["idx"] != i:
            raise ValueError(f"block list out of order at position {i} (idx {bd['idx']})")
        if i > 0:
            program.blocks.append(Block(program, i, int(bd["parent_idx"])))
    for bd in blocks:
        block = program.blocks[bd["idx"]]
        for vd in bd["vars"]:
            kw = {k: vd[k] for k in _VAR_KEYS if k in vd}
            if vd.get("parameter"):
                kw.update({k: vd[k] for k in _PARAM_KEYS if k in vd})
                stop_gradient = kw.pop("stop_gradient", None)
                var: Variable = Parameter(block, **kw)
                if stop_gradient is not None:
                    var.stop_gradient = stop_gradient
            else:
                var = Variable(block, **kw)
            block.vars[var.name] = var
        for od in bd["ops"]:
            get_op_def(od["type"])  # unknown op types are rejected here
            attrs = {k: _attr_from_json(a, program) for k, a in od["attrs"].items()}
            op = Operator(block, od["type"], {k: list(v) for k, v in od["inputs"].items()},
                          {k: list(v) for k, v in od["outputs"].items()}, attrs,
                          callsite=od.get("callsite", "<deserialized>"))
            block.ops.append(op)
    program._bump()
    return program


def dumps(program: Program) -> bytes:
    """Serialize ``program`` to bytes."""
    text = json.dumps(program_to_dict(program), separators=(",", ":"))
    return _MAGIC + text.encode("utf-8")


def loads(data: bytes) -> Program:
    """Rebuild a Program from ``dumps`` output; a ValueError if the bytes are not one."""
    if not isinstance(data, (bytes, bytearray)):
        raise TypeError(f"expected bytes, got {type(data).__name__}")
    if not data.startswith(_MAGIC):
        raise ValueError("not a parafluid program: the header is missing "
                         "(truncated or wrong file?)")
    try:
        doc = json.loads(bytes(data[len(_MAGIC):]).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"corrupt parafluid program: {e}") from None
    try:
        return program_from_dict(doc)
    except (KeyError, TypeError, AttributeError, IndexError) as e:
        raise ValueError(f"corrupt parafluid program: missing or malformed field {e}") from None
