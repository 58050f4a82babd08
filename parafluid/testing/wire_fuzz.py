"""Seeded corruptions of valid RPC messages, for fuzzing the decoder and live servers.

Example::

    rng = random.Random(0)
    frames = mutate(rng, rng.choice(seed_messages()))
    try:
        decode(frames)
    except WireError:
        pass          # the only exception decode may raise
"""

from __future__ import annotations

import random
import struct

import numpy as np
import torch

from ..distributed.wire import HEADER, Kind, encode
from ..scope import SelectedRows

__all__ = ["seed_messages", "mutate"]


def _bytes(frames: list) -> list[bytes]:
    return [bytes(memoryview(f).cast("B")) for f in frames]


def seed_messages() -> list[list[bytes]]:
    """Valid messages of several kinds (dense, SelectedRows, no value, rows, text, MAC)."""
    g = torch.Generator().manual_seed(2)
    return [
        _bytes(encode(Kind.SEND, "a@GRAD", torch.randn(4, 3, generator=g), trainer_id=1)),
        _bytes(encode(Kind.SEND, "emb@GRAD", SelectedRows(torch.tensor([1, 2]),
                                                          torch.ones(2, 3), 4))),
        _bytes(encode(Kind.GET, "a", seq=9)),
        _bytes(encode(Kind.PREFETCH, "emb", torch.tensor([0, 3]))),
        _bytes(encode(Kind.REPLY_ERROR, "", "oops")),
        _bytes(encode(Kind.SEND, "b", torch.ones(2, 2, dtype=torch.float16), secret=b"k")),
    ]


def mutate(rng: random.Random, frames: list[bytes]) -> list[bytes]:
    """One random corruption of a message: bytes, header fields, dims, frame sizes/counts."""
    frames = [bytearray(f) for f in frames] or [bytearray(rng.randrange(64))]
    op = rng.randrange(7)
    i = rng.randrange(len(frames))
    if op == 0 and frames[i]:  # flip bytes
        for _ in range(rng.randint(1, 4)):
            frames[i][rng.randrange(len(frames[i]))] = rng.randrange(256)
    elif op == 1:  # rewrite one header field with an extreme value
        head = frames[0]
        pos = rng.choice([4, 5, 6, 7, 8, 10, 12, 16, 24, 32, 40])
        width = {4: 1, 5: 1, 6: 1, 7: 1, 8: 2, 10: 2, 12: 4, 16: 8, 24: 8, 32: 8, 40: 8}[pos]
        val = rng.choice([0, 1, 255, 2**(8 * width) - 1, rng.getrandbits(8 * width)])
        head[pos:pos + width] = (val % 2**(8 * width)).to_bytes(width, "little")
    elif op == 2:  # huge or negative dims
        if len(frames[0]) >= HEADER.size + 8:
            frames[0][-8:] = struct.pack("<q", rng.choice([-1, 2**62, 2**31, 10**7]))
    elif op == 3:  # truncate or extend a frame
        frames[i] = frames[i][:rng.randrange(len(frames[i]) + 1)] if rng.random() < 0.5 \
            else frames[i] + bytes(rng.randrange(1, 64))
    elif op == 4:  # drop or duplicate a frame
        if rng.random() < 0.5 and len(frames) > 1:
            del frames[i]
        else:
            frames.insert(i, frames[i])
    elif op == 5:  # random garbage frames
        frames = [bytes(rng.getrandbits(8) for _ in range(rng.randrange(80)))
                  for _ in range(rng.randint(0, 5))]
    elif len(frames[0]) >= HEADER.size:  # a consistent header declaring a big float32 tensor
        head = frames[0]
        ndim, name_len = head[7], int.from_bytes(head[10:12], "little")
        if ndim and len(head) == HEADER.size + name_len + 8 * ndim and head[6] == 3:
            dims = [rng.choice([1, 64, 1024, 10**5]) for _ in range(ndim)]
            head[HEADER.size + name_len:] = b"".join(struct.pack("<q", d) for d in dims)
            head[24:32] = struct.pack("<Q", 4 * int(np.prod(dims)))
            if len(frames) > 1 and np.prod(dims) < 10**6:
                frames[1] = bytearray(4 * int(np.prod(dims)))
    return [bytes(f) for f in frames]
