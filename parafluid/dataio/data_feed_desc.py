"""``fluid.DataFeedDesc``: the description of a MultiSlot data file, in Fluid's text format.

The format is the protobuf text format of Fluid's ``data_feed.proto``, read and printed by a
small parser here (no protobuf dependency)::

    name: "MultiSlotDataFeed"
    batch_size: 2
    multi_slot_desc {
        slots {
            name: "words"
            type: "uint64"
            is_dense: false
            is_used: true
        }
    }

Fields: ``name``, ``batch_size``, ``pipe_command``, ``thread_num``, ``rank_offset``,
``pv_batch_size`` and ``multi_slot_desc { slots { name type is_dense is_used shape } }``;
a slot's ``type`` is ``"uint64"`` (int64 ids) or ``"float"``. Anything else is a ValueError
naming the file, the line and the field.

Example::

    desc = fluid.DataFeedDesc("data.proto")
    desc.set_batch_size(128)
    desc.set_dense_slots(["label"])
    desc.set_use_slots(["words", "label"])
    print(desc.desc())
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["DataFeedDesc", "Slot", "parse_data_feed_desc", "format_data_feed_desc"]

SLOT_TYPES = ("uint64", "float")
_MAX_TEXT = 1 << 24  # a description is a few lines; refuse to parse a huge file

# field -> kind, in data_feed.proto's field order (the order desc() prints them)
_TOP_FIELDS = {"name": "str", "batch_size": "int", "multi_slot_desc": "msg",
               "pipe_command": "str", "thread_num": "int", "rank_offset": "str",
               "pv_batch_size": "int"}
_SLOT_FIELDS = {"name": "str", "type": "str", "is_dense": "bool", "is_used": "bool",
                "shape": "int*"}


@dataclass
class Slot:
    """One slot of a MultiSlot line: its name, ``type`` (``"uint64"`` or ``"float"``),
    whether it is dense (a Tensor) or sparse (a LoDTensor), used, and its dense shape."""

    name: str
    type: str
    is_dense: bool = False
    is_used: bool = False
    shape: list[int] = field(default_factory=list)
    given: set[str] = field(default_factory=lambda: {"name", "type"})  # fields to print


class DataFeedDesc:
    """The data-feed description of Fluid's Dataset training (``data_feed.proto``).

    Args:
        proto_file: a text file in the format above.

    Example::

        desc = fluid.DataFeedDesc("data.proto")
        desc.set_use_slots(["words"])
        print(desc.desc())
    """

    def __init__(self, proto_file: str | None = None) -> None:
        self.name = ""
        self.batch_size = 32
        self.pipe_command = "cat"
        self.thread_num = 0
        self.rank_offset = ""
        self.pv_batch_size = 32
        self.slots: list[Slot] = []
        self._given: set[str] = {"pipe_command"}
        self._has_slots = False
        if proto_file is not None:
            if not isinstance(proto_file, str):
                raise TypeError(f"DataFeedDesc: proto_file must be a path, got "
                                f"{type(proto_file).__name__}")
            with open(proto_file, encoding="utf-8") as f:
                text = f.read(_MAX_TEXT + 1)
            parse_data_feed_desc(text, proto_file, into=self)

    # ---------------------------------------------------------------- Fluid's API
    def set_batch_size(self, batch_size: int) -> None:
        """Instances per batch."""
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size <= 0:
            raise ValueError(f"DataFeedDesc.set_batch_size: batch_size must be a positive "
                             f"int, got {batch_size!r}")
        self.batch_size = batch_size
        self._given.add("batch_size")

    def set_dense_slots(self, dense_slots_name: Sequence[str]) -> None:
        """Make these slots dense: fed as a Tensor, not a LoDTensor (slots are sparse by
        default)."""
        for slot in self._named("set_dense_slots", dense_slots_name):
            slot.is_dense = True
            slot.given.add("is_dense")

    def set_use_slots(self, use_slots_name: Sequence[str]) -> None:
        """Use these slots for training (slots are unused by default)."""
        for slot in self._named("set_use_slots", use_slots_name):
            slot.is_used = True
            slot.given.add("is_used")

    def desc(self) -> str:
        """The description in the text format (what the file holds, with the changes)."""
        return format_data_feed_desc(self)

    __str__ = desc

    # ---------------------------------------------------------------- helpers
    def add_slot(self, slot: Slot) -> None:
        """Append a slot (a second slot of the same name is a ValueError)."""
        if any(s.name == slot.name for s in self.slots):
            raise ValueError(f"DataFeedDesc: slot {slot.name!r} is described twice")
        self.slots.append(slot)
        self._has_slots = True

    def slot(self, name: str) -> Slot:
        for s in self.slots:
            if s.name == name:
                return s
        raise ValueError(f"DataFeedDesc: no slot named {name!r}; the slots are "
                         f"{[s.name for s in self.slots]}")

    def _named(self, where: str, names: Sequence[str]) -> list[Slot]:
        if self.name != "MultiSlotDataFeed":
            raise ValueError(f"DataFeedDesc.{where}: only a MultiSlotDataFeed has slots to "
                             f"choose, this description is named {self.name!r}")
        if isinstance(names, str):
            raise TypeError(f"DataFeedDesc.{where}: expected a list of slot names, got the "
                            f"string {names!r}; write [{names!r}]")
        return [self.slot(n) for n in names]

    def _set_field(self, key: str, value: Any) -> None:
        setattr(self, key, value)
        self._given.add(key)


# ------------------------------------------------------------------------------ parsing
_TOKEN = re.compile(r"""
    (?P<space>[ \t\r]+) | (?P<newline>\n) | (?P<comment>\#[^\n]*)
  | (?P<string>"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*')
  | (?P<number>-?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)
  | (?P<ident>[A-Za-z_][A-Za-z_0-9]*)
  | (?P<punct>[:{}\[\],;])
""", re.VERBOSE)
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", '"': '"', "'": "'", "\\": "\\"}


def _tokens(text: str, where: str) -> list[tuple[str, str, int]]:
    out, pos, line = [], 0, 1
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise ValueError(f"{where}:{line}: cannot read {text[pos:pos + 20]!r} (expected "
                             "a field name, ':', '{', '}', a number or a quoted string)")
        kind = m.lastgroup
        if kind == "newline":
            line += 1
        elif kind not in ("space", "comment"):
            out.append((kind, m.group(), line))
        pos = m.end()
    return out


def _unquote(token: str, where: str, line: int) -> str:
    body, out, i = token[1:-1], [], 0
    while i < len(body):
        ch = body[i]
        if ch == "\\":
            nxt = body[i + 1]
            if nxt not in _ESCAPES:
                raise ValueError(f"{where}:{line}: unknown escape \\{nxt} in {token}")
            out.append(_ESCAPES[nxt])
            i += 2
        else:
            out.append(ch)
            i += 1
    return "".join(out)


class _Parser:
    def __init__(self, text: str, where: str) -> None:
        self.where = where
        self.toks = _tokens(text, where)
        self.i = 0

    def peek(self) -> tuple[str, str, int] | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def take(self, expected: str) -> tuple[str, str, int]:
        tok = self.peek()
        if tok is None:
            raise ValueError(f"{self.where}: the text ends where {expected} was expected")
        self.i += 1
        return tok

    def error(self, line: int, msg: str) -> ValueError:
        return ValueError(f"{self.where}:{line}: {msg}")

    def message(self, fields: dict[str, str], what: str, closing: bool,
                on_message: Any = None) -> list[tuple]:
        """``(name, value, line)`` of a message body up to ``}`` (or the end); a field that
        is a message is read by ``on_message(name, line)`` right where it starts."""
        out = []
        while True:
            tok = self.peek()
            if tok is None:
                if closing:
                    raise ValueError(f"{self.where}: the text ends inside {what}: a '}}' "
                                     "is missing")
                return out
            if tok[1] == "}" and closing:
                self.i += 1
                return out
            kind, name, line = self.take("a field name")
            if kind != "ident":
                raise self.error(line, f"expected a field name of {what}, got {name!r}")
            if name not in fields:
                raise self.error(line, f"{what} has no field {name!r}; its fields are "
                                       f"{', '.join(fields)}")
            ftype = fields[name]
            nxt = self.take("':' or '{'")
            if ftype == "msg":
                if nxt[1] == ":":
                    nxt = self.take("'{'")
                if nxt[1] != "{":
                    raise self.error(nxt[2], f"field {name!r} of {what} is a message: "
                                             f"expected '{{', got {nxt[1]!r}")
                out.append((name, None, line))
                on_message(name, line)
                continue
            if nxt[1] != ":":
                raise self.error(nxt[2], f"expected ':' after {name!r}, got {nxt[1]!r}")
            if ftype == "int*" and self.peek() is not None and self.peek()[1] == "[":
                self.i += 1
                while True:
                    vtok = self.take("a number or ']'")
                    if vtok[1] == "]":
                        break
                    out.append((name, self.scalar("int", name, vtok), vtok[2]))
                    sep = self.take("',' or ']'")
                    if sep[1] == "]":
                        break
                    if sep[1] != ",":
                        raise self.error(sep[2], f"expected ',' or ']' in {name!r}, got "
                                                 f"{sep[1]!r}")
                continue
            vtok = self.take(f"the value of {name!r}")
            out.append((name, self.scalar(ftype.rstrip("*"), name, vtok), vtok[2]))
            if self.peek() is not None and self.peek()[1] in (",", ";"):
                self.i += 1

    def scalar(self, ftype: str, name: str, tok: tuple[str, str, int]) -> Any:
        kind, text, line = tok
        if ftype == "str":
            if kind != "string":
                raise self.error(line, f"{name!r} takes a quoted string, got {text!r}")
            return _unquote(text, self.where, line)
        if ftype == "bool":
            if text in ("true", "True", "t", "1"):
                return True
            if text in ("false", "False", "f", "0"):
                return False
            raise self.error(line, f"{name!r} takes true or false, got {text!r}")
        if kind != "number" or not re.fullmatch(r"-?\d+", text):
            raise self.error(line, f"{name!r} takes an integer, got {text!r}")
        value = int(text)
        if not -(1 << 31) <= value < (1 << 31):
            raise self.error(line, f"{name!r} is an int32, got {text}")
        return value


def parse_data_feed_desc(text: str, where: str = "<text>", into: DataFeedDesc | None = None
                         ) -> DataFeedDesc:
    """A DataFeedDesc from the text format; ``where`` names the source in errors."""
    if len(text) > _MAX_TEXT:
        raise ValueError(f"{where}: a data feed description is at most {_MAX_TEXT} "
                         "characters; this is not one")
    desc = into if into is not None else DataFeedDesc()
    p = _Parser(text, where)

    def read_slot(_: str, line: int) -> None:
        got: dict[str, Any] = {"shape": []}
        for fname, fvalue, fline in p.message(_SLOT_FIELDS, "slots", closing=True):
            if fname == "shape":
                got["shape"].append(fvalue)
            elif fname in got:
                raise p.error(fline, f"slot field {fname!r} is given twice")
            else:
                got[fname] = fvalue
        for required in ("name", "type"):
            if required not in got:
                raise p.error(line, f"a slot needs a {required!r}")
        if got["type"] not in SLOT_TYPES:
            raise p.error(line, f"slot {got['name']!r} has type {got['type']!r}; the types "
                                f"are {', '.join(map(repr, SLOT_TYPES))}")
        slot = Slot(got["name"], got["type"], bool(got.get("is_dense", False)),
                    bool(got.get("is_used", False)), list(got["shape"]),
                    {k for k in got if k != "shape" or got["shape"]})
        try:
            desc.add_slot(slot)
        except ValueError as e:
            raise p.error(line, str(e)) from None

    def read_multi_slot(_: str, line: int) -> None:
        desc._has_slots = True
        p.message({"slots": "msg"}, "multi_slot_desc", closing=True, on_message=read_slot)

    seen: set[str] = set()
    for name, value, line in p.message(_TOP_FIELDS, "DataFeedDesc", closing=False,
                                       on_message=read_multi_slot):
        if name in seen:
            raise p.error(line, f"field {name!r} is given twice")
        seen.add(name)
        if name != "multi_slot_desc":
            desc._set_field(name, value)
    if desc.batch_size <= 0:
        raise ValueError(f"{where}: batch_size must be positive, got {desc.batch_size}")
    return desc


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return _quote(value)
    return str(value)


def format_data_feed_desc(desc: DataFeedDesc) -> str:
    """The text format of ``desc``, fields in data_feed.proto's order (as protobuf prints
    it: only the fields that were given or set)."""
    lines: list[str] = []
    for key in _TOP_FIELDS:
        if key == "multi_slot_desc":
            if desc._has_slots or desc.slots:
                lines.append("multi_slot_desc {")
                for slot in desc.slots:
                    lines.append("  slots {")
                    lines.extend(_slot_lines(slot))
                    lines.append("  }")
                lines.append("}")
        elif key in desc._given:
            lines.append(f"{key}: {_value(getattr(desc, key))}")
    return "\n".join(lines) + "\n"


def _slot_lines(slot: Slot) -> Iterable[str]:
    for key in _SLOT_FIELDS:
        if key == "shape":
            yield from (f"    shape: {d}" for d in slot.shape)
        elif key in slot.given:
            yield f"    {key}: {_value(getattr(slot, key))}"
