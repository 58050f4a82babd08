"""The torch.distributed side of the collective mode: process groups, addresses, headers.

``make_process_group`` builds the gloo (CPU) or NCCL (CUDA) group of the trainers over the
rendezvous store, with the transport timeout; ``encode_header``/``decode_header`` describe a
value (dense or row-sparse: kind, dtype, shape, height) in a fixed-size int64 tensor, so that
a receiver can allocate a broadcast's buffer, after checking the header.

Example::

    head = encode_header(torch.zeros(3, 4), torch.device("cpu"))
    decode_header(head, "trainer 0")     # (False, torch.float32, (3, 4), -1)
"""

from __future__ import annotations

import datetime
import os
import socket
from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist

from ..scope import SelectedRows
from .endpoints import parse_endpoint
from .rendezvous import Rendezvous

__all__ = ["HEADER_SIZE", "MalformedHeader", "encode_header", "decode_header",
           "broadcast_options", "first_line", "bind_address", "make_process_group"]

# The header that tells a receiver what a broadcast (or an all-gather of rows) carries:
# [kind (0 dense, 1 rows), dtype code, ndim, height (rows only), dims...].
DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64,
          torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool)
MAX_DIMS = 8
HEADER_SIZE = 4 + MAX_DIMS
_MAX_ELEMENTS = 1 << 34  # a header claiming more is corrupt, not a tensor to allocate


class MalformedHeader(RuntimeError):
    """A header that no parafluid trainer sends."""


def encode_header(value: Any, wire: torch.device) -> torch.Tensor:
    """The fixed-size header of a dense tensor or a SelectedRows, on ``wire``."""
    sparse = isinstance(value, SelectedRows)
    t = value.value if sparse else value
    if t.dtype not in DTYPES:
        raise TypeError(f"collective: dtype {t.dtype} cannot be sent (supported: "
                        f"{', '.join(str(d) for d in DTYPES)})")
    if t.dim() > MAX_DIMS:
        raise ValueError(f"collective: tensors of at most {MAX_DIMS} dims can be sent, got "
                         f"shape {tuple(t.shape)}")
    head = [int(sparse), DTYPES.index(t.dtype), t.dim(), value.height if sparse else -1]
    head += list(t.shape) + [0] * (MAX_DIMS - t.dim())
    return torch.tensor(head, dtype=torch.int64, device=wire)


def decode_header(head: torch.Tensor, who: str) -> tuple[bool, torch.dtype, tuple[int, ...], int]:
    """Validate a header before anything is allocated from it."""
    h = [int(x) for x in head.tolist()]
    kind, code, ndim, height, dims = h[0], h[1], h[2], h[3], h[4:]
    if kind not in (0, 1) or not 0 <= code < len(DTYPES) or not 0 <= ndim <= MAX_DIMS:
        raise MalformedHeader(f"collective: malformed header from {who}: {h}")
    shape = tuple(dims[:ndim])
    numel = 1
    for d in shape:
        if d < 0:
            raise MalformedHeader(f"collective: malformed header from {who}: shape {shape}")
        numel *= d
    if numel > _MAX_ELEMENTS or (kind == 1 and (ndim < 1 or height < 0)):
        raise MalformedHeader(f"collective: malformed header from {who}: {h}")
    return bool(kind), DTYPES[code], shape, height



def first_line(e: BaseException) -> str:
    """The transport's message without its boilerplate tail."""
    text = str(e).strip()
    line = text.splitlines()[0] if text else type(e).__name__
    return line.split(" This is typically caused")[0]



def broadcast_options(root: int) -> Any:
    opts = dist.BroadcastOptions()
    opts.rootRank = root
    opts.rootTensor = 0
    return opts


def bind_address(endpoints: Sequence[str], trainer_id: int) -> str:
    """This trainer's IP: its endpoint's host when that is an address of this machine, else
    the address this machine uses to reach trainer 0 (endpoints derived from torchrun's
    MASTER_ADDR only name trainer 0's machine correctly)."""
    host, _ = parse_endpoint(endpoints[trainer_id])
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((host, 0))
        return host
    except OSError:
        pass
    master, port = parse_endpoint(endpoints[0])
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((master, port))  # UDP: picks the route, sends nothing
            return s.getsockname()[0]
    except OSError:
        return host


def make_process_group(backend: str, rdv: Rendezvous, wire: torch.device, timeout_s: float) -> Any:
    timeout = datetime.timedelta(seconds=timeout_s)
    store = dist.PrefixStore("pg", rdv.store)
    host = bind_address(rdv.endpoints, rdv.trainer_id)
    if backend == "gloo":
        opts = dist.ProcessGroupGloo._Options()
        opts._timeout = timeout
        # NOTE: bind gloo to this trainer's own address, so that peers on other machines
        # reach it whatever this machine's hostname resolves to.
        opts._devices = [dist.ProcessGroupGloo.create_device(hostname=host)]
        return dist.ProcessGroupGloo(store, rdv.trainer_id, rdv.num_trainers, opts)
    if not dist.is_nccl_available():
        raise RuntimeError("the collective mode on CUDA needs torch built with NCCL")
    torch.cuda.set_device(wire)
    # NOTE: a collective stuck past the timeout cannot be interrupted on a CUDA stream; the
    # watchdog then tears the process down, and the launcher names the rank.
    os.environ.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1")
    opts = dist.ProcessGroupNCCL.Options()
    opts._timeout = timeout
    return dist.ProcessGroupNCCL(store, rdv.trainer_id, rdv.num_trainers, opts)
