"""The variables file format (safetensors plus a parafluid manifest) and its checked reader.

A variables file is a safetensors file whose metadata key ``parafluid`` holds a JSON
manifest: the format version and each variable's name, shape, dtype and CRC-32.
``read_tensors`` checks the file against it before anything is used; nothing is pickled.
``write_tensors`` writes these files (for ``fluid.io``, the ``save``/``save_combine`` ops, the
pserver checkpoints and the imperative state files); the ``load``/``load_combine`` ops read
them.
"""

from __future__ import annotations

import json
import os
import zlib
from collections.abc import Sequence
from typing import Any

import torch
from safetensors.torch import load as _st_load
from safetensors.torch import save as _st_save

from .atomic_write import write_bytes
from .dtypes import convert_dtype
from .scope import SelectedRows

__all__ = ["VARS_FORMAT", "read_tensors", "write_tensors", "encode_tensors", "scope_values"]

VARS_FORMAT = "parafluid.vars/1"
_MANIFEST_KEY = "parafluid"


# NOTE: a safetensors header is a JSON index (names, dtypes, shapes, offsets): a few KiB for
# a model with thousands of variables; a file claiming more is refused before it is read
MAX_HEADER_BYTES = 64 << 20


def read_tensors(path: str) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """Read a safetensors file; check it against its manifest. Returns (tensors, metadata).

    The header is read and checked first (its length against the file's, the manifest's
    presence, every tensor's extent inside the file), so a file that is not one of ours,
    or claims more than it holds, is refused before its data is read."""
    with _open_for_read(path, "checkpoint") as f:
        size = os.fstat(f.fileno()).st_size
        metadata = _read_header(path, f, size)
        f.seek(0)
        data = f.read()
    try:
        tensors = _st_load(data)
    except Exception as e:  # noqa: BLE001 (the Rust reader raises its own error type)
        raise ValueError(f"{path}: not a valid safetensors file (truncated or corrupt, "
                         f"{len(data)} bytes): {e}") from None
    _check_manifest(path, tensors, metadata[_MANIFEST_KEY])
    return tensors, metadata


def _read_header(path: str, f: Any, size: int) -> dict[str, str]:
    """The checked header's metadata of an open safetensors file of ``size`` bytes."""
    def bad(why: str) -> ValueError:
        return ValueError(f"{path}: not a valid safetensors file (truncated or corrupt, "
                          f"{size} bytes): {why}")

    head = f.read(8)
    if len(head) < 8:
        raise bad("shorter than the 8-byte header length")
    header_len = int.from_bytes(head, "little")
    if header_len > min(size - 8, MAX_HEADER_BYTES):
        raise bad(f"the header claims {header_len} bytes, the file has {size - 8} after the "
                  f"length (and a header may have at most {MAX_HEADER_BYTES})")
    try:
        header = json.loads(f.read(header_len).decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise bad(f"the header is not JSON: {e}") from None
    if not isinstance(header, dict):
        raise bad(f"the header is a JSON {type(header).__name__}, expected an object")
    metadata = header.get("__metadata__") or {}
    if not isinstance(metadata, dict):
        raise bad("__metadata__ is not an object")
    if _MANIFEST_KEY not in metadata:
        # NOTE: without the manifest there are no checksums: a damaged file would load
        held = f"holds {sorted(metadata)}" if metadata else "holds no metadata"
        raise ValueError(f"{path}: no parafluid manifest (metadata key {_MANIFEST_KEY!r}; the "
                         f"file {held}), so its checksums cannot be checked and nothing is "
                         "loaded. A file written by another tool can be read with "
                         "safetensors.torch.load_file and its values set in the scope")
    data_bytes = size - 8 - header_len
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        offsets = entry.get("data_offsets") if isinstance(entry, dict) else None
        if not (isinstance(offsets, list) and len(offsets) == 2 and
                all(type(o) is int for o in offsets) and 0 <= offsets[0] <= offsets[1] <=
                data_bytes):
            raise bad(f"tensor {name!r} claims the bytes {offsets!r}, outside the file's "
                      f"{data_bytes} data bytes")
    return metadata


def write_tensors(path: str, tensors: dict[str, torch.Tensor],
                  extra: dict[str, str] | None = None) -> None:
    """Atomically write ``tensors`` as a safetensors file with a parafluid manifest."""
    write_bytes(path, encode_tensors(tensors, extra))


def encode_tensors(tensors: dict[str, torch.Tensor],
                   extra: dict[str, str] | None = None) -> bytes:
    """The bytes of the safetensors file ``write_tensors`` writes (manifest included)."""
    manifest = {"format": VARS_FORMAT, "vars": [
        {"name": n, "shape": list(t.shape), "dtype": convert_dtype(t.dtype), "crc32": _crc(t)}
        for n, t in sorted(tensors.items())]}
    metadata = {_MANIFEST_KEY: json.dumps(manifest, sort_keys=True)}
    metadata.update(extra or {})
    return _st_save(tensors, metadata=metadata)


def scope_values(scope: Any, chosen: Sequence[Any], where: str) -> dict[str, torch.Tensor]:
    """The values of the variables ``chosen`` (anything with ``name`` and ``persistable``)
    in ``scope``, as dense CPU copies to write; ValueError naming ``where`` and the
    variables when one holds no value."""
    out, empty, temporaries = {}, [], []
    for var in chosen:
        holder = scope.find_var(var.name)
        value = None if holder is None else holder.value
        if value is None:
            (empty if var.persistable else temporaries).append(var.name)
            continue
        if isinstance(value, SelectedRows):
            value = value.to_dense()
        out[var.name] = value.detach().to("cpu").contiguous().clone()
    if temporaries:
        # NOTE: Fluid's save_vars example selects by name alone, which picks these up.
        raise ValueError(f"{where}: {_quoted(temporaries)} are not persistable: their values "
                         "exist only during exe.run, so there is nothing to save; select "
                         "persistable variables, e.g. predicate=lambda v: "
                         "fluid.io.is_persistable(v) and v.name.startswith(...)")
    if empty:
        raise ValueError(f"{where}: no value in the scope for {_quoted(empty)}; run the "
                         "startup program first, or pass the scope that holds them (scope=)")
    return out


def _check_manifest(path: str, tensors: dict[str, torch.Tensor], text: str) -> None:
    try:
        manifest = json.loads(text)
        entries = {e["name"]: e for e in manifest["vars"]}
        version = manifest["format"]
        lacking = [n for n, e in entries.items() if "shape" not in e or "dtype" not in e]
        unchecked = [n for n, e in entries.items() if type(e.get("crc32")) is not int]
    except (json.JSONDecodeError, KeyError, TypeError, AttributeError, RecursionError) as e:
        raise ValueError(f"{path}: corrupt manifest in the file metadata: {e!r}") from None
    if version != VARS_FORMAT:
        raise ValueError(f"{path}: variables format {version!r} is not supported "
                         f"(this parafluid reads {VARS_FORMAT!r})")
    if lacking:
        raise ValueError(f"{path}: corrupt manifest in the file metadata: no shape or dtype "
                         f"for {_quoted(lacking)}")
    if unchecked:  # NOTE: every writer records one; without it a damaged tensor would load
        raise ValueError(f"{path}: corrupt manifest in the file metadata: no checksum (crc32) "
                         f"for {_quoted(unchecked)}")
    if set(entries) != set(tensors):
        raise ValueError(f"{path}: corrupt file: the manifest lists {sorted(entries)} but the "
                         f"file holds {sorted(tensors)}")
    for name, t in tensors.items():
        e = entries[name]
        if list(t.shape) != e["shape"] or _dtype_name(t.dtype) != e["dtype"]:
            raise ValueError(f"{path}: corrupt file: {name!r} is {_meta_str(t)} but the manifest "
                             f"says {e['dtype']}{e['shape']}")
        if _crc(t) != e["crc32"]:
            raise ValueError(f"{path}: corrupt file: the data of {name!r} fails its checksum")


def _open_for_read(path: str, what: str) -> Any:
    if not os.path.isfile(path):
        directory = os.path.dirname(path) or "."
        there = sorted(os.listdir(directory)) if os.path.isdir(directory) else None
        hint = f"; {directory} holds {there}" if there else f"; {directory} is missing or empty"
        raise FileNotFoundError(f"no {what} file {path}{hint}")
    return open(path, "rb")


def _crc(t: torch.Tensor) -> int:
    flat = t.detach().contiguous().reshape(-1)
    if flat.numel() == 0:
        return 0
    return zlib.crc32(flat.view(torch.uint8).numpy())


def _dtype_name(dtype: torch.dtype) -> str:
    # NOTE: a file from another tool may hold dtypes parafluid has no name for (uint16,
    # complex64, float8): torch's name makes them a reported mismatch, not a TypeError.
    try:
        return convert_dtype(dtype)
    except TypeError:
        return str(dtype).removeprefix("torch.")


def _meta_str(t: torch.Tensor) -> str:
    return f"{_dtype_name(t.dtype)}{list(t.shape)}"


def _quoted(names: Sequence[str]) -> str:
    return ", ".join(repr(n) for n in names)
