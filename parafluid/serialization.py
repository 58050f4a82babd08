"""Program <-> bytes, without pickle: a versioned JSON document.

Loading never runs code: it only builds Blocks, Variables and Operators from plain data and
checks every op type against the registry. Floats round-trip exactly (``repr`` precision).
A document is untrusted input: ``check_document`` checks every field before anything is
built, so a malformed one is always a ValueError that says where it is wrong.

Example::

    data = program.serialize_to_string()
    same = fluid.Program.parse_from_string(data)
    assert str(same) == str(program)
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from .dtypes import _CANONICAL, VarType
from .framework import Block, Operator, Parameter, Program, Variable
from .ops.registry import get_op_def, has_op
from .program_meta import DISTRIBUTED_VAR_KEYS, NODE_KINDS, ProgramMeta

__all__ = ["dumps", "loads", "program_to_dict", "program_from_dict", "check_document",
           "parse_json", "FORMAT"]

FORMAT = "parafluid.program/1"
_MAGIC = b"PFPROG1\n"


def _attr_to_json(v: Any) -> Any:
    if isinstance(v, Block):
        return {"__block__": v.idx}
    if isinstance(v, list):
        if all(type(x) is str for x in v):  # the common case (op_callstack): a plain copy
            return list(v)
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
        if all(type(x) is str for x in v):
            return list(v)
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
    doc = {"format": FORMAT, "random_seed": program.random_seed, "blocks": blocks}
    meta = program.meta.to_dict()
    if meta:
        doc["meta"] = meta
    return doc


_VAR_KEYS = ("name", "shape", "dtype", "type", "lod_level", "persistable", "stop_gradient",
             "is_data", "need_check_feed")
_PARAM_KEYS = ("trainable", "optimize_attr", "do_model_average")


def program_from_dict(data: dict[str, Any], *, extra_keys: Sequence[str] = (),
                      check: bool = True) -> Program:
    """Build a Program from ``program_to_dict`` output.

    With ``check`` (the default) the document is first checked in full, so that anything
    malformed is a ValueError naming where it is (``blocks[0].ops[3].inputs['X'][0]: expected
    a variable name (a string), got list``) and a Program that is returned is well typed.
    ``extra_keys`` are top-level keys a caller adds (``fluid.io`` adds ``"inference"``);
    ``check=False`` is for documents just made from a live Program (``Program.clone``).

    Example::

        same = program_from_dict(program_to_dict(program))
    """
    if check:
        check_document(data, extra_keys)
    program = Program()
    program.random_seed = data.get("random_seed", 0)
    if "meta" in data:
        program.meta = ProgramMeta.from_dict(data["meta"])
    blocks = data["blocks"]
    for i, bd in enumerate(blocks):
        if bd["idx"] != i:
            raise ValueError(f"block list out of order at position {i} (idx {bd['idx']})")
        if i > 0:
            program.blocks.append(Block(program, i, bd["parent_idx"]))
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


# ---------------------------------------------------------------------- checking a document
#
# A document is untrusted input (a file, bytes from the network). Every field is checked for
# its JSON type and range before anything is built, so that no TypeError, OverflowError or
# RecursionError can escape from parsing, and no later pass (verify, prune, run) meets a
# name that is a list or a block that is its own parent.

_INT64 = (-(2 ** 63), 2 ** 63 - 1)
_MAX_ATTR_DEPTH = 8  # an attr is a scalar, a list, or a list of lists (a 2-D numpy array)
_VAR_KINDS = frozenset({VarType.LOD_TENSOR, VarType.SELECTED_ROWS, VarType.LOD_TENSOR_ARRAY,
                        VarType.RAW, VarType.FEED_MINIBATCH, VarType.FETCH_LIST})
_DTYPES = frozenset(_CANONICAL)  # the canonical names only: that is what the writer writes
_VAR_FLAGS = ("persistable", "stop_gradient", "is_data", "need_check_feed")
_PLAIN_SCALARS = frozenset({str, float, bool, type(None)})  # ints are range-checked
_BLOCK_KEYS = ("idx", "parent_idx", "vars", "ops")
_OP_KEYS = ("type", "inputs", "outputs", "attrs", "callsite")


def check_document(doc: Any, extra_keys: Sequence[str] = ()) -> None:
    """Raise a ValueError naming the first malformed field of a program document.

    Checks the structure ``program_to_dict`` writes: every key present and no unknown key,
    every value of its JSON type and range (sizes and indices are integers, never floats,
    booleans or ``Infinity``), block parents and sub-block references pointing only to
    earlier, respectively later, blocks (no cycles), op types registered, attribute values
    plain data at most 8 lists deep. What a well-typed program can still get wrong (a
    variable used before it is defined, shapes that disagree) is ``verify``'s to report.

    Example::

        check_document(json.loads(text))   # then program_from_dict(doc, check=False)
    """
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        got = _show(doc.get("format")) if isinstance(doc, dict) else f"a {type(doc).__name__}"
        raise ValueError(f"not a parafluid program: expected format {FORMAT!r}, got {got}")
    _keys(doc, "the document", ("format", "blocks"), ("random_seed", "meta", *extra_keys))
    if "random_seed" in doc:
        _int(doc["random_seed"], "random_seed", *_INT64)
    if "meta" in doc:
        _check_meta(doc["meta"])
    blocks = doc["blocks"]
    if not isinstance(blocks, list) or not blocks:
        raise _bad("blocks", "a non-empty list of blocks", blocks)
    for i, bd in enumerate(blocks):
        _check_block(bd, i, len(blocks))


def _check_block(bd: Any, i: int, n_blocks: int) -> None:
    where = f"blocks[{i}]"
    _keys(bd, where, _BLOCK_KEYS)
    if _int(bd["idx"], f"{where}.idx", 0, n_blocks - 1) != i:
        raise ValueError(f"corrupt parafluid program: block list out of order at position {i} "
                         f"(idx {bd['idx']})")
    # NOTE: a parent must come earlier, so that walking up the parents always ends.
    if i == 0:
        if bd["parent_idx"] != -1 or type(bd["parent_idx"]) is not int:
            raise _bad(f"{where}.parent_idx", "-1 (the global block has no parent)",
                       bd["parent_idx"])
    else:
        _int(bd["parent_idx"], f"{where}.parent_idx (an earlier block)", 0, i - 1)
    vars_ = _list(bd["vars"], f"{where}.vars")
    seen: set[str] = set()
    for j, vd in enumerate(vars_):
        name = _check_var(vd, f"{where}.vars[{j}]")
        if name in seen:
            raise ValueError(f"corrupt parafluid program: {where}.vars[{j}]: a second variable "
                             f"named {name!r} in block {i}")
        seen.add(name)
    for j, od in enumerate(_list(bd["ops"], f"{where}.ops")):
        _check_op(od, f"{where}.ops[{j}]", i, n_blocks)


def _check_var(vd: Any, where: str) -> str:
    is_param = isinstance(vd, dict) and "parameter" in vd
    _keys(vd, where, _VAR_KEYS + (("parameter",) + _PARAM_KEYS if is_param else ()))
    name = vd["name"]
    if not isinstance(name, str) or not name:
        raise _bad(f"{where}.name", "a non-empty string", name)
    where = f"{where} ({_show(name)})"
    shape = vd["shape"]
    if shape is not None:
        low = 0 if is_param else -1  # -1: a size only the run knows (not for a parameter)
        dims = _list(shape, f"{where}.shape")
        if not all(type(d) is int and low <= d <= _INT64[1] for d in dims):
            for k, d in enumerate(dims):  # NOTE: paths are spelt out only on the error path
                _int(d, f"{where}.shape[{k}]", low, _INT64[1])
    if vd["dtype"] is not None and not _is_one_of(vd["dtype"], _DTYPES):
        raise _bad(f"{where}.dtype", f"null or one of {sorted(_DTYPES)}", vd["dtype"])
    if not _is_one_of(vd["type"], _VAR_KINDS):
        raise _bad(f"{where}.type", f"one of {sorted(_VAR_KINDS)}", vd["type"])
    if type(vd["lod_level"]) is not int or not 0 <= vd["lod_level"] < 2 ** 31:
        _int(vd["lod_level"], f"{where}.lod_level", 0, 2 ** 31 - 1)
    for key in _VAR_FLAGS:
        if type(vd[key]) is not bool:
            raise _bad(f"{where}.{key}", "true or false", vd[key])
    if is_param:
        if vd["parameter"] is not True:
            raise _bad(f"{where}.parameter", "true", vd["parameter"])
        if shape is None:
            raise _bad(f"{where}.shape", "a list (a parameter's shape is known)", shape)
        if vd["dtype"] is None:
            raise _bad(f"{where}.dtype", "a dtype (a parameter's dtype is known)", None)
        _bool(vd["trainable"], f"{where}.trainable")
        if vd["do_model_average"] is not None:
            _bool(vd["do_model_average"], f"{where}.do_model_average")
        attr = vd["optimize_attr"]
        if not isinstance(attr, dict):
            raise _bad(f"{where}.optimize_attr", "an object of numbers", attr)
        for k, v in attr.items():
            if type(v) not in (int, float):
                raise _bad(f"{where}.optimize_attr[{k!r}]", "a number", v)
    return name


def _check_op(od: Any, where: str, block_idx: int, n_blocks: int) -> None:
    _keys(od, where, _OP_KEYS)
    if not isinstance(od["type"], str):
        raise _bad(f"{where}.type", "an op type (a string)", od["type"])
    if not has_op(od["type"]):
        try:
            get_op_def(od["type"])
        except ValueError as e:  # its message suggests the registered types that are close
            raise ValueError(f"corrupt parafluid program: {where}: {e}") from None
    where = f"{where} ({od['type']})"
    for key in ("inputs", "outputs"):
        slots = od[key]
        if not isinstance(slots, dict):
            raise _bad(f"{where}.{key}", "an object {slot: [variable names]}", slots)
        for slot, names in slots.items():
            for k, n in enumerate(_list(names, f"{where}.{key}[{slot!r}]")):
                if not isinstance(n, str):
                    raise _bad(f"{where}.{key}[{slot!r}][{k}]", "a variable name (a string)", n)
    attrs = od["attrs"]
    if not isinstance(attrs, dict):
        raise _bad(f"{where}.attrs", "an object {name: value}", attrs)
    for k, v in attrs.items():
        _check_attr(v, f"{where}.attrs[{k!r}]", block_idx, n_blocks, 0)
    if not isinstance(od["callsite"], str):
        raise _bad(f"{where}.callsite", "a string", od["callsite"])


def _check_attr(v: Any, where: str, block_idx: int, n_blocks: int, depth: int) -> None:
    kind = type(v)
    if kind is str or kind is float or kind is bool or v is None:
        return
    if kind is int:
        _int(v, where, *_INT64)
    elif kind is list:
        if depth >= _MAX_ATTR_DEPTH:
            raise ValueError(f"corrupt parafluid program: {where}: lists nested more than "
                             f"{_MAX_ATTR_DEPTH} deep")
        if all(type(x) in _PLAIN_SCALARS for x in v):  # the usual list: no path to spell out
            return
        for k, x in enumerate(v):
            _check_attr(x, f"{where}[{k}]", block_idx, n_blocks, depth + 1)
    elif kind is dict:
        # NOTE: a sub-block comes after the block of its op, so sub-block references can
        # never form a cycle (passes walking into sub-blocks always end).
        if set(v) != {"__block__"}:
            raise _bad(where, 'plain data or a block reference {"__block__": index}', v)
        _int(v["__block__"], f"{where}.__block__ (a later block)", block_idx + 1, n_blocks - 1)
    else:  # pragma: no cover - json.loads makes no other types
        raise _bad(where, "plain data", v)


_META_KEYS = ("placement_node", "trainer_id", "num_trainers", "trainers_endpoints",
              "pserver_endpoints", "data_parallel_devices", "memory_reuse", "is_distributed",
              "is_chief", "distributed_lookup_table", "parameters_on_pservers")
_INT32 = (0, 2 ** 31 - 1)
_NODE_KINDS = frozenset(NODE_KINDS)


def _check_meta(meta: Any) -> None:
    """The program's record (``program_meta.ProgramMeta.to_dict``): every field optional."""
    _keys(meta, "meta", (), _META_KEYS)
    if "placement_node" in meta:
        node = meta["placement_node"]
        if type(node) is not list or len(node) != 2 or not _is_one_of(node[0], _NODE_KINDS):
            raise _bad("meta.placement_node", f"[kind, index] with kind one of "
                       f"{list(NODE_KINDS)}", node)
        _int(node[1], "meta.placement_node[1]", *_INT32)
    if "num_trainers" in meta:
        _int(meta["num_trainers"], "meta.num_trainers", 1, _INT32[1])
    if "trainer_id" in meta:
        high = meta.get("num_trainers", _INT32[1] + 1) - 1
        _int(meta["trainer_id"], "meta.trainer_id (below meta.num_trainers)", 0, high)
    for key in ("trainers_endpoints", "pserver_endpoints"):
        if key in meta:
            for k, ep in enumerate(_list(meta[key], f"meta.{key}")):
                host, sep, port = ep.rpartition(":") if type(ep) is str else ("", "", "")
                if not host or not port.isdigit() or not 0 <= int(port) <= 65535:
                    raise _bad(f"meta.{key}[{k}]", "an endpoint 'ip:port'", ep)
    if "data_parallel_devices" in meta:
        for k, dev in enumerate(_list(meta["data_parallel_devices"],
                                      "meta.data_parallel_devices")):
            kind, sep, index = dev.partition(":") if type(dev) is str else ("", "", "")
            if kind not in ("cpu", "gpu") or not index.isdigit() or len(index) > 9:
                raise _bad(f"meta.data_parallel_devices[{k}]", "a device 'cpu:<i>' or "
                           "'gpu:<i>'", dev)
    for key in ("is_distributed", "is_chief"):
        if key in meta and type(meta[key]) is not bool:
            raise _bad(f"meta.{key}", "true or false", meta[key])
    if "distributed_lookup_table" in meta and (type(meta["distributed_lookup_table"]) is not str
                                               or not meta["distributed_lookup_table"]):
        raise _bad("meta.distributed_lookup_table", "a variable name",
                   meta["distributed_lookup_table"])
    if "parameters_on_pservers" in meta:
        _check_distributed_vars(meta["parameters_on_pservers"])
    if "memory_reuse" in meta:
        reuse = meta["memory_reuse"]
        if type(reuse) is not dict:
            raise _bad("meta.memory_reuse", "an object {name: [[renamed name, op index]]}",
                       reuse)
        for name, pairs in reuse.items():
            where = f"meta.memory_reuse[{_show(name)}]"
            for k, pair in enumerate(_list(pairs, where)):
                if type(pair) is not list or len(pair) != 2 or type(pair[0]) is not str \
                        or not pair[0]:
                    raise _bad(f"{where}[{k}]", "[renamed name, op index]", pair)
                _int(pair[1], f"{where}[{k}][1]", *_INT32)


def _check_distributed_vars(records: Any) -> None:
    for k, r in enumerate(_list(records, "meta.parameters_on_pservers")):
        where = f"meta.parameters_on_pservers[{k}]"
        _keys(r, where, DISTRIBUTED_VAR_KEYS)
        for key in ("origin", "slice", "endpoint"):
            if type(r[key]) is not str or not r[key]:
                raise _bad(f"{where}.{key}", "a non-empty string", r[key])
        if r["vtype"] not in ("Param", "Optimizer"):
            raise _bad(f"{where}.vtype", "'Param' or 'Optimizer'", r["vtype"])
        if type(r["is_slice"]) is not bool:
            raise _bad(f"{where}.is_slice", "true or false", r["is_slice"])
        _int(r["block_id"], f"{where}.block_id", *_INT32)
        _int(r["offset"], f"{where}.offset", 0, 2 ** 62)
        for key in ("origin_shape", "slice_shape"):
            for j, d in enumerate(_list(r[key], f"{where}.{key}")):
                _int(d, f"{where}.{key}[{j}]", -1, 2 ** 62)


def _keys(d: Any, where: str, required: Sequence[str], optional: Sequence[str] = ()) -> None:
    if not isinstance(d, dict):
        raise _bad(where, "an object", d)
    if d.keys() >= set(required) and len(d) == len(required):
        return  # the usual case, at C speed
    missing = [k for k in required if k not in d]
    if missing:
        raise ValueError(f"corrupt parafluid program: {where}: missing {_names(missing)}")
    if len(d) > len(required):
        unknown = [k for k in d if k not in required and k not in optional]
        if unknown:
            expected = _names(list(required) + list(optional))
            raise ValueError(f"corrupt parafluid program: {where}: unknown key(s) "
                             f"{_names(unknown)}; expected {expected}")


def _int(v: Any, where: str, low: int, high: int) -> int:
    if type(v) is not int:  # NOTE: not bool, and not a float such as 2.0 or Infinity
        raise _bad(where, "an integer", v)
    if not low <= v <= high:
        raise _bad(where, f"an integer in [{low}, {high}]", v)
    return v


def _is_one_of(v: Any, names: frozenset[str]) -> bool:
    return type(v) is str and v in names  # NOTE: a list or an object is not even hashable


def _bool(v: Any, where: str) -> None:
    if type(v) is not bool:
        raise _bad(where, "true or false", v)


def _list(v: Any, where: str) -> list[Any]:
    if type(v) is not list:
        raise _bad(where, "a list", v)
    return v


def _bad(where: str, expected: str, got: Any) -> ValueError:
    return ValueError(f"corrupt parafluid program: {where}: expected {expected}, "
                      f"got {_show(got)}")


def _show(v: Any) -> str:
    if isinstance(v, (list, dict)):  # never the whole (possibly huge or deep) value
        return f"{type(v).__name__} of {len(v)} item(s)"
    text = "null" if v is None else repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


def _names(keys: Sequence[str]) -> str:
    return ", ".join(repr(k) for k in keys)


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
    return program_from_dict(parse_json(bytes(data[len(_MAGIC):])))


def parse_json(body: bytes) -> Any:
    """The JSON value in ``body``; a ValueError if it is not UTF-8 JSON or is nested too deeply.

    NaN and Infinity are accepted as float values (a float attribute may be one);
    ``check_document`` rejects them wherever an integer belongs.
    """
    try:
        return json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"corrupt parafluid program: {e}") from None
    except RecursionError:
        # NOTE: the JSON decoder recurses once per nesting level; no program nests deeply
        raise ValueError("corrupt parafluid program: JSON nested too deeply "
                         "(not a document this library wrote)") from None
