"""The YAML configuration of ``Compressor.config``: Fluid's slim config files.

A config names instances (``pruners``, ``quantizers``, ``distillers``, ``strategies``: each a
``class`` and its keyword arguments; a string argument naming an earlier instance is that
instance) and the ``compressor`` (or ``compress_pass``) section: ``epoch``,
``checkpoint_path``, ``init_model``, ``eval_epoch`` and the list of ``strategies``;
``include`` reads other files first. Example::

    version: 1.0
    pruners:
        pruner_1:
            class: 'StructurePruner'
            pruning_axis: {'*': 0}
            criterions: {'*': 'l1_norm'}
    strategies:
        uniform_pruning_strategy:
            class: 'UniformPruneStrategy'
            pruner: 'pruner_1'
            start_epoch: 0
            target_ratio: 0.5
            pruned_params: '.*_weights'
    compressor:
        epoch: 2
        checkpoint_path: './checkpoints/'
        strategies:
            - uniform_pruning_strategy

The reader takes the part of YAML these files use: block mappings and lists by
indentation, flow lists and mappings (``[a, b]``, ``{'*': 0}``), quoted and plain scalars
(numbers, ``true`` / ``false``, ``none`` / ``null`` / ``~``) and ``#`` comments; it refuses
anything else (anchors, tags, multi-line strings) with the file and line.
"""

from __future__ import annotations

import inspect
import os
import re
from typing import Any

__all__ = ["ConfigFactory", "load_yaml", "CLASSES", "NOT_PROVIDED_CLASSES"]

# the classes a config may name: filled by the strategy modules (register_class)
CLASSES: dict[str, type] = {}
# Fluid's slim classes parafluid does not provide, and why
NOT_PROVIDED_CLASSES = {
    "SensitivePruneStrategy": "sensitivity analysis (evaluations of the model pruned by "
                              "each ratio, per parameter)",
    "AutoPruneStrategy": "pruning ratios searched by a controller",
    "LightNASStrategy": "network architecture search (a controller server and agents)",
    "MKLDNNPostTrainingQuantStrategy": "MKL-DNN int8 post-training quantization",
    "SAController": "the simulated-annealing search controller",
    "RatioPruner": "unstructured (element-wise) pruning",
}


def register_class(cls: type) -> type:
    CLASSES[cls.__name__] = cls
    return cls


# ------------------------------------------------------------------ the YAML subset

_NUM = re.compile(r"^[-+]?(\d+\.?\d*([eE][-+]?\d+)?|\.\d+([eE][-+]?\d+)?)$")


class _Error(ValueError):
    pass


def _strip_comment(line: str) -> str:
    out, quote = [], None
    for i, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1] in " \t"):
            break
        out.append(ch)
    return "".join(out).rstrip()


def _scalar(text: str) -> Any:
    t = text.strip()
    if not t:
        return None
    if t[0] in "'\"":
        if len(t) < 2 or t[-1] != t[0]:
            raise _Error(f"unterminated string {t!r}")
        return t[1:-1]
    if t[0] in "&*!|>":
        raise _Error(f"{t!r}: anchors, tags and block strings are not supported")
    low = t.lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("none", "null", "~"):
        return None
    if _NUM.match(t):
        return float(t) if any(c in t for c in ".eE") else int(t)
    return t


def _flow(text: str) -> Any:
    """A flow value: ``[...]``, ``{...}`` (nested) or a scalar."""
    pos = 0

    def value() -> Any:
        nonlocal pos
        while pos < len(text) and text[pos] == " ":
            pos += 1
        if pos < len(text) and text[pos] in "[{":
            close = "]" if text[pos] == "[" else "}"
            is_map = text[pos] == "{"
            pos += 1
            items: Any = {} if is_map else []
            while True:
                while pos < len(text) and text[pos] == " ":
                    pos += 1
                if pos < len(text) and text[pos] == close:
                    pos += 1
                    return items
                if is_map:
                    key = token(":")
                    pos += 1
                    items[_scalar(key)] = value()
                else:
                    items.append(value())
                while pos < len(text) and text[pos] == " ":
                    pos += 1
                if pos < len(text) and text[pos] == ",":
                    pos += 1
                elif pos >= len(text) or text[pos] != close:
                    raise _Error(f"expected ',' or {close!r} in {text!r}")
        return _scalar(token(",]}"))

    def token(stops: str) -> str:
        nonlocal pos
        start, quote = pos, None
        while pos < len(text):
            ch = text[pos]
            if quote:
                if ch == quote:
                    quote = None
            elif ch in "'\"":
                quote = ch
            elif ch in stops:
                break
            pos += 1
        return text[start:pos]

    out = value()
    if text[pos:].strip():
        raise _Error(f"unexpected {text[pos:]!r} after a value")
    return out


def _split_key(content: str) -> tuple[str, str] | None:
    """``key: rest`` -> (key, rest), or None when the line is not a mapping entry."""
    quote = None
    for i, ch in enumerate(content):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == ":" and (i + 1 == len(content) or content[i + 1] == " "):
            return content[:i].strip(), content[i + 1:].strip()
        elif ch in "[{":
            return None
    return None


def load_yaml(text: str, where: str = "<config>") -> Any:
    """Parse the YAML subset described in the module docstring."""
    lines = []
    for n, raw in enumerate(text.splitlines(), 1):
        if "\t" in raw[: len(raw) - len(raw.lstrip())]:
            raise ValueError(f"{where}:{n}: indent with spaces, not tabs")
        s = _strip_comment(raw)
        if s.strip() and s.strip() not in ("---", "..."):
            lines.append((n, len(s) - len(s.lstrip()), s.strip()))
    pos = 0

    def block(indent: int) -> Any:
        nonlocal pos
        if lines[pos][2].startswith("- ") or lines[pos][2] == "-":
            out: Any = []
            while pos < len(lines) and lines[pos][1] == indent and \
                    (lines[pos][2].startswith("- ") or lines[pos][2] == "-"):
                n, _, content = lines[pos]
                rest = content[1:].strip()
                pos += 1
                if not rest:
                    out.append(block(lines[pos][1]) if pos < len(lines)
                               and lines[pos][1] > indent else None)
                elif _split_key(rest) is not None:
                    # "- key: value" starts a mapping item indented past the dash
                    lines.insert(pos, (n, indent + 2, rest))
                    out.append(block(indent + 2))
                else:
                    out.append(parse_value(rest, n))
            return out
        out = {}
        while pos < len(lines) and lines[pos][1] == indent:
            n, _, content = lines[pos]
            kv = _split_key(content)
            if kv is None:
                raise ValueError(f"{where}:{n}: expected 'key: value', got {content!r}")
            key, rest = kv
            pos += 1
            if rest:
                out[_scalar(key)] = parse_value(rest, n)
            elif pos < len(lines) and (lines[pos][1] > indent or (
                    lines[pos][1] == indent and lines[pos][2].startswith("-"))):
                out[_scalar(key)] = block(lines[pos][1])
            else:
                out[_scalar(key)] = None
        return out

    def parse_value(text: str, n: int) -> Any:
        try:
            return _flow(text)
        except _Error as e:
            raise ValueError(f"{where}:{n}: {e}") from None

    if not lines:
        return {}
    try:
        doc = block(lines[0][1])
    except _Error as e:
        raise ValueError(f"{where}: {e}") from None
    if pos < len(lines):
        n, _, content = lines[pos]
        raise ValueError(f"{where}:{n}: unexpected indentation at {content!r}")
    return doc


# ------------------------------------------------------------------ the factory


class ConfigFactory:
    """The instances and the compressor settings of a config file."""

    def __init__(self, config: str) -> None:
        self.instances: dict[str, Any] = {}
        self.compressor: dict[str, Any] = {"strategies": []}
        self.version: Any = None
        self._parse(config)

    def instance(self, name: str) -> Any:
        return self.instances.get(name)

    def _parse(self, path: str) -> None:
        if not os.path.isfile(path):
            raise FileNotFoundError(f"Compressor.config: no config file {path!r}")
        with open(path, encoding="utf-8") as f:
            doc = load_yaml(f.read(), path)
        if not isinstance(doc, dict):
            raise ValueError(f"{path}: the config must be a mapping, got {type(doc).__name__}")
        for key, value in doc.items():
            if key == "version":
                self.version = value
            elif key == "include":
                for other in value or []:
                    self._parse(str(other).strip())
            elif key in ("pruners", "quantizers", "distillers", "strategies", "controllers"):
                for name, attrs in (value or {}).items():
                    self._new_instance(path, str(name), attrs)
            elif key in ("compressor", "compress_pass"):
                self._compressor(path, value or {})
            else:
                raise ValueError(f"{path}: unknown section {key!r}; expected version, include, "
                                 "pruners, quantizers, distillers, strategies or compressor")

    def _compressor(self, path: str, section: dict[str, Any]) -> None:
        if "epoch" not in section:
            raise ValueError(f"{path}: the compressor section needs 'epoch'")
        for key in ("epoch", "checkpoint_path", "init_model", "eval_epoch"):
            if key in section:
                self.compressor[key] = section[key]
        for name in section.get("strategies") or []:
            if name not in self.instances:
                raise ValueError(f"{path}: the compressor names strategy {name!r}, which the "
                                 f"config does not define (defined: {sorted(self.instances)})")
            self.compressor["strategies"].append(self.instances[name])

    def _new_instance(self, path: str, name: str, attrs: dict[str, Any]) -> None:
        if not isinstance(attrs, dict) or "class" not in attrs:
            raise ValueError(f"{path}: {name!r} needs a 'class'")
        cls_name = attrs["class"]
        if cls_name in NOT_PROVIDED_CLASSES:
            raise ValueError(f"{path}: {name!r}: class {cls_name} "
                             f"({NOT_PROVIDED_CLASSES[cls_name]}) is not provided by parafluid; "
                             f"provided: {sorted(CLASSES)} (docs/fluid_compat.md)")
        if cls_name not in CLASSES:
            raise ValueError(f"{path}: {name!r}: unknown class {cls_name!r}; provided: "
                             f"{sorted(CLASSES)}")
        cls = CLASSES[cls_name]
        params = inspect.signature(cls.__init__).parameters
        args = {}
        for key, value in attrs.items():
            if key == "class":
                continue
            if key not in params:
                raise ValueError(f"{path}: {name!r}: {cls_name} takes no argument {key!r}; "
                                 f"it takes {[p for p in params if p != 'self']}")
            args[key] = self._resolve(value)
        self.instances[name] = cls(**args)

    def _resolve(self, value: Any) -> Any:
        if isinstance(value, str):
            if value.lower() == "none":
                return None
            return self.instances.get(value, value)
        if isinstance(value, list):
            return [self._resolve(v) for v in value]
        return value
