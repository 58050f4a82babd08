"""Ops on ids and their embeddings: lookup_table / lookup_table_v2 (dense or SelectedRows
gradient), hash (XXH64 of int32 rows, as Fluid's), shard_index, and cvm (the show/click
columns of CTR features).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from ..lod import get_lod
from ..scope import SelectedRows
from .common import rows_in_table
from .conv import _check_rank
from .registry import Meta, register_op

__all__: list[str] = []


# ----------------------------------------------------------------------------- lookup_table


def _ids_out_shape(ids: Sequence[int]) -> tuple[int, ...]:
    """Fluid's rule: a trailing dim of 1 on Ids is the id slot itself and is dropped."""
    ids = tuple(ids)
    return ids[:-1] if len(ids) > 1 and ids[-1] == 1 else ids


def _lookup_table_shape(ins: dict, attrs: dict) -> dict:
    w, ids = ins["W"], ins["Ids"]
    _check_rank("lookup_table", "W", w, 2)
    if ids.dtype not in ("int64", "int32"):
        raise TypeError(f"lookup_table: Ids must be int64 (or int32), got {ids.dtype}")
    return {"Out": Meta((*_ids_out_shape(ids.shape), w.shape[1]), w.dtype)}


def _flat_ids(ids: torch.Tensor, height: int) -> torch.Tensor:
    flat = ids.reshape(-1).long()
    if flat.numel() and (int(flat.min()) < 0 or int(flat.max()) >= height):
        bad = flat[(flat < 0) | (flat >= height)][0].item()
        raise ValueError(f"lookup_table: id {bad} is out of range for a table of {height} rows")
    return flat


def _lookup_table(ins: dict, attrs: dict, ctx: Any) -> dict:
    w, ids = ins["W"], ins["Ids"]
    if isinstance(w, SelectedRows):
        # a row-sparse table (a parameter server's block of it): each id is found among
        # the rows the table holds, as Fluid's kernel does for a SelectedRows W
        flat = ids.reshape(-1).long()
        out = w.value.index_select(0, rows_in_table("lookup_table", w, flat))
        pad = attrs["padding_idx"]
        if pad != -1:
            out = out.masked_fill((flat == pad).unsqueeze(1), 0.0)
        return {"Out": out.reshape(*_ids_out_shape(ids.shape), w.value.shape[1])}
    flat = _flat_ids(ids, w.shape[0])
    out = w.index_select(0, flat)
    pad = attrs["padding_idx"]
    if pad != -1:
        out = out.masked_fill((flat == pad).unsqueeze(1), 0.0)
    return {"Out": out.reshape(*_ids_out_shape(ids.shape), w.shape[1])}


def _lookup_table_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    w, ids, dout = ins["W"], ins["Ids"], ins["Out@GRAD"]
    flat = ids.reshape(-1).long()
    rows = dout.reshape(-1, w.shape[1])
    pad = attrs["padding_idx"]
    if pad != -1:
        rows = rows.masked_fill((flat == pad).unsqueeze(1), 0.0)
    if attrs["is_sparse"]:
        return {"W@GRAD": SelectedRows(flat, rows, w.shape[0])}
    return {"W@GRAD": torch.zeros_like(w).index_add_(0, flat, rows)}


def _lookup_table_grad_shape(ins: dict, attrs: dict) -> dict:
    w = ins["W"]
    kind = "selected_rows" if attrs["is_sparse"] else "lod_tensor"
    return {"W@GRAD": Meta(w.shape, w.dtype, kind)}


register_op("lookup_table", inputs=("W", "Ids"), outputs=("Out",),
            attrs={"is_sparse": False, "is_distributed": False, "padding_idx": -1,
                   "remote_prefetch": False},
            infer_shape=_lookup_table_shape, kernel=_lookup_table,
            grad_kernel=_lookup_table_grad, grad_uses=("W", "Ids"),
            no_grad_inputs=("Ids",), grad_infer_shape=_lookup_table_grad_shape,
            share_lod=("Ids", "Out"))


# lookup_table_v2 (fluid.embedding): the same lookup, keeping every dim of Ids.


def _lookup_v2_shape(ins: dict, attrs: dict) -> dict:
    w, ids = ins["W"], ins["Ids"]
    _check_rank("lookup_table_v2", "W", w, 2)
    if ids.dtype not in ("int64", "int32"):
        raise TypeError(f"lookup_table_v2: Ids must be int64 (or int32), got {ids.dtype}")
    return {"Out": Meta((*ids.shape, w.shape[1]), w.dtype)}


def _lookup_v2(ins: dict, attrs: dict, ctx: Any) -> dict:
    out = _lookup_table(ins, attrs, ctx)["Out"]
    return {"Out": out.reshape(*ins["Ids"].shape, out.shape[-1])}


register_op("lookup_table_v2", inputs=("W", "Ids"), outputs=("Out",),
            attrs={"is_sparse": False, "is_distributed": False, "padding_idx": -1,
                   "remote_prefetch": False},
            infer_shape=_lookup_v2_shape, kernel=_lookup_v2,
            grad_kernel=_lookup_table_grad, grad_uses=("W", "Ids"),
            no_grad_inputs=("Ids",), grad_infer_shape=_lookup_table_grad_shape,
            share_lod=("Ids", "Out"))


# ----------------------------------------------------------------------------- shard_index


def _shard_index_shape(ins: dict, attrs: dict) -> dict:
    x = ins["X"]
    if x.dtype not in ("int32", "int64") or len(x.shape) != 2 or x.shape[1] not in (1, -1):
        raise ValueError(f"shard_index: X must hold int ids [N, 1], got {x.dtype} "
                         f"{list(x.shape)}")
    n, shards, shard = int(attrs["index_num"]), int(attrs["nshards"]), int(attrs["shard_id"])
    if n <= 0 or shards <= 0 or not 0 <= shard < shards:
        raise ValueError(f"shard_index: need index_num > 0, nshards > 0 and 0 <= shard_id < "
                         f"nshards, got {n}, {shards}, {shard}")
    return {"Out": x}


def _shard_index(ins: dict, attrs: dict, ctx: Any) -> dict:
    """An id of this shard becomes its offset inside the shard; others ``ignore_value``.
    A shard holds ``index_num // nshards`` ids, as Fluid 1.6's kernel divides (the ids past
    ``nshards`` whole shards belong to none)."""
    x = ins["X"]
    size = int(attrs["index_num"]) // int(attrs["nshards"])
    mine = torch.div(x, size, rounding_mode="floor") == int(attrs["shard_id"])
    return {"Out": torch.where(mine, x % size, torch.full_like(x, int(attrs["ignore_value"])))}


register_op("shard_index", inputs=("X",), outputs=("Out",),
            attrs={"index_num": 0, "nshards": 0, "shard_id": 0, "ignore_value": -1},
            infer_shape=_shard_index_shape, kernel=_shard_index, share_lod=("X", "Out"))


# ----------------------------------------------------------------------------- hash

_MASK = (1 << 64) - 1
_P1, _P2, _P3 = 11400714785074694791, 14029467366897019727, 1609587929392839161
_P4, _P5 = 9650029242287828579, 2870177450012600261


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & _MASK


def _round(acc: int, lane: int) -> int:
    return (_rotl((acc + lane * _P2) & _MASK, 31) * _P1) & _MASK


def xxh64(data: bytes, seed: int) -> int:
    """XXH64 of ``data`` (the hash Fluid's ``hash`` op uses), in plain Python ints."""
    n, i = len(data), 0
    if n >= 32:
        v = [(seed + _P1 + _P2) & _MASK, (seed + _P2) & _MASK, seed & _MASK,
             (seed - _P1) & _MASK]
        while i + 32 <= n:
            for k in range(4):
                v[k] = _round(v[k], int.from_bytes(data[i + 8 * k:i + 8 * k + 8], "little"))
            i += 32
        h = (_rotl(v[0], 1) + _rotl(v[1], 7) + _rotl(v[2], 12) + _rotl(v[3], 18)) & _MASK
        for lane in v:
            h = ((h ^ _round(0, lane)) * _P1 + _P4) & _MASK
    else:
        h = (seed + _P5) & _MASK
    h = (h + n) & _MASK
    while i + 8 <= n:
        h ^= _round(0, int.from_bytes(data[i:i + 8], "little"))
        h = (_rotl(h, 27) * _P1 + _P4) & _MASK
        i += 8
    if i + 4 <= n:
        h ^= (int.from_bytes(data[i:i + 4], "little") * _P1) & _MASK
        h = (_rotl(h, 23) * _P2 + _P3) & _MASK
        i += 4
    while i < n:
        h ^= (data[i] * _P5) & _MASK
        h = (_rotl(h, 11) * _P1) & _MASK
        i += 1
    h ^= h >> 33
    h = (h * _P2) & _MASK
    h ^= h >> 29
    h = (h * _P3) & _MASK
    return h ^ (h >> 32)


def _hash_shape(ins: dict, attrs: dict) -> dict:
    x = ins["X"]
    if x.dtype not in ("int32", "int64") or len(x.shape) < 2:
        raise ValueError(f"hash: X must be int32 or int64 [..., k] (Fluid hashes the last "
                         f"dimension's rows), got {x.dtype} {list(x.shape)}")
    return {"Out": Meta((*x.shape[:-1], int(attrs["num_hash"]), 1), "int64")}


def _hash(ins: dict, attrs: dict, ctx: Any) -> dict:
    """Per row (the last dimension) and seed ``0 .. num_hash - 1``: ``XXH64(row's bytes,
    seed) % mod_by``, the bytes of int32 or int64 values as Fluid's two kernels read them."""
    x = ins["X"]
    arr = x.detach().cpu().numpy()
    rows = arr.astype("<i4" if arr.dtype == np.int32 else "<i8").reshape(-1, arr.shape[-1])
    k, mod = int(attrs["num_hash"]), int(attrs["mod_by"])
    out = [[xxh64(r.tobytes(), seed) % mod for seed in range(k)] for r in rows]
    result = torch.tensor(out, dtype=torch.int64, device=x.device)
    return {"Out": result.reshape(*arr.shape[:-1], k, 1)}


register_op("hash", inputs=("X",), outputs=("Out",), attrs={"num_hash": 1, "mod_by": 100000},
            infer_shape=_hash_shape, kernel=_hash, share_lod=("X", "Out"))


# ----------------------------------------------------------------------------- cvm


def _cvm_shape(ins: dict, attrs: dict) -> dict:
    x, cvm = ins["X"], ins["CVM"]
    if len(x.shape) != 2 or (x.shape[1] != -1 and x.shape[1] < 2):
        raise ValueError(f"cvm: X must be [N, D] with D >= 2 (show, click, ...), got "
                         f"{list(x.shape)}")
    if len(cvm.shape) != 2 or cvm.shape[1] not in (2, -1):
        raise ValueError(f"cvm: CVM must be [N, 2] (show, click), got {list(cvm.shape)}")
    width = x.shape[1] if attrs["use_cvm"] or x.shape[1] == -1 else x.shape[1] - 2
    return {"Y": Meta((x.shape[0], width), x.dtype)}


def _cvm(ins: dict, attrs: dict, ctx: Any) -> dict:
    """``use_cvm``: the first two columns (show, click) become ``log(show + 1)`` and
    ``log(click + 1) - log(show + 1)``; otherwise they are dropped."""
    x = ins["X"]
    if not attrs["use_cvm"]:
        return {"Y": x[:, 2:].contiguous()}
    show = torch.log(x[:, :1] + 1)
    return {"Y": torch.cat([show, torch.log(x[:, 1:2] + 1) - show, x[:, 2:]], 1)}


def _cvm_grad(ins: dict, attrs: dict, ctx: Any) -> dict:
    """Fluid's rule, not a derivative: the rest of the columns get ``Y@GRAD``, the show and
    click columns get the ``CVM`` values (what the CTR embedding update expects). With a
    LoD on X, ``CVM`` has one row per sequence, given to every row of that sequence."""
    dy, cvm = ins["Y@GRAD"], ins["CVM"].to(ins["Y@GRAD"].dtype)
    lod = get_lod(ins["X"])
    if lod:
        offsets = torch.tensor(lod[0], device=cvm.device)
        cvm = cvm[:len(lod[0]) - 1].repeat_interleave(offsets[1:] - offsets[:-1], dim=0)
    rest = dy[:, 2:] if attrs["use_cvm"] else dy
    return {"X@GRAD": torch.cat([cvm, rest], 1)}


register_op("cvm", inputs=("X", "CVM"), outputs=("Y",), attrs={"use_cvm": True},
            infer_shape=_cvm_shape, kernel=_cvm, grad_kernel=_cvm_grad,
            grad_uses=("X", "CVM"), no_grad_inputs=("CVM",), share_lod=("X", "Y"))
