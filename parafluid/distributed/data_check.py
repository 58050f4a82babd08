"""The signature check of a dense all-reduce, carried by the data itself.

Each trainer appends ``2k`` elements to the buffer it all-reduces: ``k`` small integers
``h_1..h_k`` cut from a hash of the collective's signature (the step, its sequence number,
kind, variables, dtype, shape) and their squares. After the SUM over ``n`` trainers every
trainer holds ``S1_i = sum_t h_i(t)`` and ``S2_i = sum_t h_i(t)^2``; by Cauchy-Schwarz,
``S1_i^2 == n * S2_i`` for every i exactly when all trainers' ``h_i`` are equal. The integers
are small enough that every partial sum is exact in the buffer's dtype (float32: 24 bits of
mantissa), whatever order the transport adds them in, so the check never misfires; the k
pieces together carry 56 bits of the hash. So the check costs no collective of its own:
2k elements more in a buffer that travels anyway.

It needs the trainers' buffers to have the same size (a transport pairing buffers of
different sizes answers with garbage or an abort): the caller uses it where the sizes are
known to agree (the ParallelExecutor's all-reduces of parameter gradients, whose shapes its
first-step program check compared), and the separate 16-byte check elsewhere.

Example::

    k = check_pairs(torch.float32, 2)        # 6 pairs of 11-bit pieces
    tail = check_tail(h, k, torch.float32)   # 12 elements to append
    agree = tail_agrees(summed_tail, 2)      # after the all-reduce
"""

from __future__ import annotations

import hashlib
import math

import torch

__all__ = ["HASH_BITS", "signature_hash", "check_pairs", "check_tail", "tail_agrees",
           "tail_matches"]

HASH_BITS = 56
_MANTISSA = {torch.float32: 24, torch.float64: 53}


def signature_hash(seq: int, tag: str) -> int:
    """A 56-bit hash of collective number ``seq`` and its tag (step and signature)."""
    return int.from_bytes(hashlib.blake2b(f"{seq}\n{tag}".encode(), digest_size=7).digest(),
                          "big")


def _piece_bits(dtype: torch.dtype, n: int) -> int:
    mant = _MANTISSA.get(dtype)
    if mant is None:
        return 0
    # NOTE: n * (2^m - 1)^2 < 2^mant keeps every partial sum of the squares an exact integer
    return (mant - max(1, (n - 1).bit_length())) // 2


def check_pairs(dtype: torch.dtype, n: int) -> int:
    """How many (h, h*h) pairs carry the hash in a buffer of ``dtype`` summed over ``n``
    trainers; 0 where the dtype cannot carry it exactly (use the separate check)."""
    m = _piece_bits(dtype, n)
    return 0 if m < 4 else math.ceil(HASH_BITS / m)


def check_tail(h: int, pairs: int, dtype: torch.dtype, n: int) -> list[float]:
    """The 2 * ``pairs`` elements one trainer appends: h_1, h_1^2, h_2, h_2^2, ..."""
    m = _piece_bits(dtype, n)
    out: list[float] = []
    for i in range(pairs):
        piece = (h >> (i * m)) & ((1 << m) - 1)
        out += [float(piece), float(piece * piece)]
    return out


def tail_agrees(summed: list[float], n: int) -> bool:
    """Whether the summed tail says every one of the ``n`` trainers appended the same one."""
    s1, s2 = summed[0::2], summed[1::2]
    return all(math.isfinite(a) and math.isfinite(b) and a == int(a) and b == int(b)
               and int(a) ** 2 == n * int(b) for a, b in zip(s1, s2))


def tail_matches(summed: list[float], own: list[float], n: int) -> bool:
    """Whether the summed tail is ``n`` times this trainer's own: every trainer appended the
    same one, and it is this collective's (not a tail left over from an earlier one)."""
    return len(summed) == len(own) and all(
        math.isfinite(s) and s == n * o for s, o in zip(summed, own))
